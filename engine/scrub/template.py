"""The template-driven rewrite of one record, as cdkd's scrub does it (reference §7.2,
§10.8; seed 000 "What else changes"): the app's template says which stored values came
from a secret dynamic reference, so each goes back to the template's own expression.

For every resource both the template and the record hold (same logical id and type), each
top-level property is resolved as `cdkd diff` resolves it (engine.deploy.intrinsics, secret
references kept as written, NoEcho parameters bound to a marker). Then, leaf by leaf:

- a leaf that reads a NoEcho parameter (directly or embedded) is stored as `***` and its
  path inside `properties` is added to the row's `noEchoLeaves` (observedProperties too, at
  the same path); the plaintext the record held there is masked wherever else the same
  record holds it, and each declared output that reads the parameter becomes `***`;
- a leaf whose resolution holds a secret reference (`{{resolve:secretsmanager:...}}`, or
  `{{resolve:ssm:...}}` of a SecureString: cdkd's classification) is rewritten to that
  expression when the record holds exactly what it resolves to; a record holding the
  plaintext embedded in a longer string gets each plaintext of 4+ characters replaced by
  its reference text;
- a leaf that already holds a `{{resolve:` token is never rewritten from today's template.

`attributes` and `observedProperties` are rewritten by value with the resource's own
references (whole value, or embedded with 4+ characters). Declared outputs are positioned
like properties. A property that cannot be resolved (known only after a deploy) is left to
the value-driven rewrite (engine.scrub.rewrite); a property that resolved is the
template's to decide: a literal there is never rewritten by value (cdkd leaves it too).

SECRET VALUES STAY IN `ReferenceValues`: it reads the references' plaintext under the
account's session, compares inside itself and hands out only expressions, paths and
counts. It cannot be pickled or printed.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine import aws
from engine.deploy.intrinsics import (
    Context as ResolveContext,
)
from engine.deploy.intrinsics import (
    ParameterError,
    ResolveError,
    Resolver,
    bind_parameters,
    evaluate_conditions,
    prune_resources,
)
from engine.deploy.plan import METADATA_TYPE, NESTED_STACK_TYPE, references
from engine.deploy.record import repair_record
from engine.secrets import MASK, MIN_EMBEDDED

# The references cdkd resolves and classifies as secret (ssm only for a SecureString;
# ssm-secure is never resolved by cdkd, so its plaintext never reached a record).
SECRET_TOKEN = re.compile(r"\{\{resolve:(secretsmanager|ssm):((?:(?!\}\}).){1,2048})\}\}")
ANY_TOKEN = re.compile(r"\{\{resolve:[^{}]*\}\}")
NO_ECHO_MARK = "\x00cdkd-admin-noecho-{}\x00"
MAX_NESTING = 10


class ReferenceValues:
    """The plaintext of secret references, read on demand under one session and region,
    kept private. Every method answers with a bool, an expression or a count."""

    def __init__(self, session: Any, region: str, account_id: str) -> None:
        self._session = session
        self.region = region
        self.account_id = account_id
        self._values: dict[str, str | None] = {}  # token -> plaintext (None: unreadable / not a secret)
        self._ssm_types: dict[str, str | None] = {}
        self._plain_ssm: dict[str, str | None] = {}
        self.warnings: list[str] = []

    def __repr__(self) -> str:
        return f"<ReferenceValues {len(self._values)} reference(s)>"

    def __reduce__(self) -> Any:
        raise TypeError("ReferenceValues hold secret values and are never serialised")

    # -- reading ------------------------------------------------------------------------

    def _client(self, service: str) -> Any:
        return aws.client(self._session, service, self.region)

    def _parameter(self, name: str, *, decrypt: bool) -> dict[str, Any] | None:
        try:
            return self._client("ssm").get_parameter(Name=name, WithDecryption=decrypt)["Parameter"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code not in ("ParameterNotFound", "ParameterVersionNotFound"):
                self._warn(f"ssm:GetParameter {name} in {self.region}: {code}")
            return None
        except BotoCoreError as exc:
            self._warn(f"ssm:GetParameter {name} in {self.region}: {type(exc).__name__}")
            return None

    def _warn(self, line: str) -> None:
        if line not in self.warnings:
            self.warnings.append(line)

    def ssm_for_resolver(self, name: str) -> str | None:
        """The resolver's SSM callback: a String parameter's value (public configuration,
        stored resolved by design); a SecureString stays its `{{resolve:ssm:...}}` text."""
        if name not in self._plain_ssm:
            found = self._parameter(name, decrypt=False)
            self._ssm_types[name] = found.get("Type") if found else None
            if found is None:
                self._plain_ssm[name] = None
            elif found.get("Type") == "SecureString":
                self._plain_ssm[name] = f"{{{{resolve:ssm:{name}}}}}"
            else:
                self._plain_ssm[name] = found.get("Value")
        return self._plain_ssm[name]

    def _read(self, token: str) -> str | None:
        if token in self._values:
            return self._values[token]
        m = SECRET_TOKEN.fullmatch(token)
        value: str | None = None
        if m and m.group(1) == "ssm":
            found = self._parameter(m.group(2), decrypt=True)
            if found is not None and found.get("Type") == "SecureString":
                value = found.get("Value")
        elif m:
            value = self._secretsmanager(m.group(2))
        self._values[token] = value
        return value

    def _secretsmanager(self, ref: str) -> str | None:
        parts = ref.split(":")
        if ref.startswith("arn:"):
            secret_id, rest = ":".join(parts[:7]), parts[7:]
        else:
            secret_id, rest = parts[0], parts[1:]
        rest += [""] * (4 - len(rest))
        _kind, json_key, stage, version = rest[:4]
        params: dict[str, Any] = {"SecretId": secret_id}
        if version:
            params["VersionId"] = version
        elif stage:
            params["VersionStage"] = stage
        try:
            text = self._client("secretsmanager").get_secret_value(**params).get("SecretString")
        except (ClientError, BotoCoreError) as exc:
            code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else type(exc).__name__
            self._warn(f"secretsmanager:GetSecretValue {secret_id} in {self.region}: {code}")
            return None
        if text is None or not json_key:
            return text
        try:
            decoded = json.loads(text)
        except ValueError:
            return None
        value = decoded.get(json_key) if isinstance(decoded, dict) else None
        if value is None or isinstance(value, bool | dict | list):
            return None
        return value if isinstance(value, str) else json.dumps(value)

    # -- comparing (nothing returned holds a value) -----------------------------------------

    def secret_tokens(self, text: str) -> list[str]:
        """The references in `text` that resolve to a secret this object could read."""
        return [m.group(0) for m in SECRET_TOKEN.finditer(text) if self._read(m.group(0)) is not None]

    def plain_equals(self, stored: Any, expression: str) -> bool:
        """True when `stored` is exactly what `expression` resolves to."""
        if not isinstance(stored, str):
            return False
        out = expression
        for token in dict.fromkeys(self.secret_tokens(expression)):
            out = out.replace(token, self._values[token] or "")
        return out == stored and out != expression

    def replace_embedded(self, stored: str, tokens: list[str]) -> str | None:
        """`stored` with each plaintext (4+ characters) of `tokens` replaced by its
        reference, outside existing `{{resolve:...}}` tokens; None when nothing matched."""
        pairs = sorted(
            ((self._values.get(t) or "", t) for t in dict.fromkeys(tokens)), key=lambda p: len(p[0]), reverse=True
        )
        pairs = [(v, t) for v, t in pairs if len(v) >= MIN_EMBEDDED]
        if not pairs or not isinstance(stored, str):
            return None
        pieces = re.split(f"({ANY_TOKEN.pattern})", stored)
        changed = False
        for i in range(0, len(pieces), 2):  # even pieces lie outside existing tokens
            for value, token in pairs:
                if value in pieces[i]:
                    pieces[i] = pieces[i].replace(value, token)
                    changed = True
        return "".join(pieces) if changed else None


@dataclass
class TemplateRewrite:
    """What the template says about one record; `data` is the rewritten record."""

    data: dict[str, Any]
    rewrites: list[dict[str, Any]] = field(default_factory=list)  # {"path", "to", "source", "whole"}
    positioned: set[tuple[str, ...]] = field(default_factory=set)  # ("resources", lid, key) / ("outputs", name)
    no_echo_leaves: dict[str, list[list[str | int]]] = field(default_factory=dict)  # lid -> added leaves
    left: list[dict[str, Any]] = field(default_factory=list)
    children: dict[str, dict[str, Any]] = field(default_factory=dict)  # nested lid -> {template, parameters}
    warnings: list[str] = field(default_factory=list)


def _get(node: Any, path: tuple[str | int, ...]) -> tuple[bool, Any]:
    for p in path:
        listed = isinstance(p, int) and isinstance(node, list) and 0 <= p < len(node)
        if not listed and not (isinstance(p, str) and isinstance(node, dict) and p in node):
            return False, None
        node = node[p]
    return True, node


def _put(node: Any, path: tuple[str | int, ...], value: Any) -> None:
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _leaves(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, (*path, i))]
    return [(path, value)]


def _marks(text: Any, marks: list[str]) -> bool:
    return isinstance(text, str) and any(m in text for m in marks)


class _Rewriter:
    def __init__(
        self,
        values: ReferenceValues,
        template: dict[str, Any],
        data: dict[str, Any],
        *,
        stack: str,
        region: str,
        account: str,
        parameters: dict[str, Any],
        no_echo_inputs: set[str],
        exports: Any,
    ) -> None:
        self.values = values
        self.stack = stack
        self.out = TemplateRewrite(data=data)
        template = copy.deepcopy(template)
        # A child treats each parameter its parent fills from a NoEcho source as NoEcho.
        declared = template.get("Parameters") if isinstance(template.get("Parameters"), dict) else {}
        for name in no_echo_inputs:
            if isinstance(declared.get(name), dict):
                declared[name]["NoEcho"] = True
        supplied = {k: v for k, v in parameters.items() if k in declared and isinstance(v, str)}
        try:
            bound = bind_parameters(template, supplied, values.ssm_for_resolver)
        except ParameterError as exc:
            raise ResolveError(f"template of {stack}: {exc}") from None
        self.marks: dict[str, str] = {}
        for i, name in enumerate(sorted(bound.no_echo)):
            self.marks[name] = NO_ECHO_MARK.format(i)
            bound.values[name] = self.marks[name]
            bound.unbound.pop(name, None)
        self.out.warnings += bound.warnings
        rec = repair_record(data, stack=stack, region=region)
        self.ctx = ResolveContext(
            template=template,
            stack_name=stack,
            region=region,
            account=account,
            resources=rec.resources,
            parameters=bound,
            exports=exports,
            ssm=values.ssm_for_resolver,
        )
        evaluate_conditions(self.ctx)
        self.template = template
        self.resources = prune_resources(template, self.ctx)
        self.resolver = Resolver(self.ctx)
        self.no_echo_plain: list[Any] = []  # what the record held at NoEcho positions (record content)

    def resolve(self, value: Any) -> tuple[bool, Any]:
        before = self.ctx.kept_placeholders
        try:
            out = self.resolver.resolve(value)
        except (ResolveError, RecursionError):
            return False, None
        return self.ctx.kept_placeholders == before, out

    def rewrite(self, path: tuple[str | int, ...], to: Any, source: str, whole: bool = True) -> None:
        _put(self.out.data, path, to)
        self.out.rewrites.append({"path": list(path), "to": to, "source": source, "whole": whole})

    # -- positioned ----------------------------------------------------------------------

    def position(self, base: tuple[str | int, ...], resolved: Any, label: str) -> list[list[str | int]]:
        """Rewrite the stored value under `base` against its resolution; returns the
        NoEcho leaves (relative to `base[:-1]`'s container, i.e. the property map)."""
        marks = list(self.marks.values())
        no_echo: list[list[str | int]] = []
        for rel, leaf in _leaves(resolved):
            path = (*base, *rel)
            present, stored = _get(self.out.data, path)
            if _marks(leaf, marks):
                no_echo.append([base[-1], *rel])
                if present and stored != MASK:
                    scalar = isinstance(stored, str | int | float) and not isinstance(stored, bool)
                    if scalar and leaf in marks:  # a bare Ref: the record held the parameter's value itself
                        self.no_echo_plain.append(stored)
                    self.rewrite(path, MASK, f"NoEcho parameter read by {label}")
                continue
            if not isinstance(leaf, str) or not present or not isinstance(stored, str) or stored == leaf:
                continue
            if "{{resolve:" in stored:
                continue  # already a reference: never rewritten from today's template
            tokens = self.values.secret_tokens(leaf)
            if not tokens:
                continue
            if self.values.plain_equals(stored, leaf):
                self.rewrite(path, leaf, f"template reference of {label}")
                continue
            embedded = self.values.replace_embedded(stored, tokens)
            if embedded is not None:
                self.rewrite(path, embedded, f"template reference of {label} (embedded)", whole=False)
        return no_echo

    def by_value(self, base: tuple[str | int, ...], tokens: list[str], label: str) -> None:
        present, node = _get(self.out.data, base)
        if not present or not tokens:
            return
        for rel, stored in _leaves(node):
            if not isinstance(stored, str) or "{{resolve:" in stored or stored == MASK:
                continue
            path = (*base, *rel)
            whole = next((t for t in tokens if self.values.plain_equals(stored, t)), None)
            if whole is not None:
                self.rewrite(path, whole, f"template reference of {label}")
                continue
            embedded = self.values.replace_embedded(stored, tokens)
            if embedded is not None:
                self.rewrite(path, embedded, f"template reference of {label} (embedded)", whole=False)

    def mask_no_echo_plain(self, lid: str) -> None:
        """The plaintext a NoEcho position held, wherever else the same row holds it."""
        plain = [v for v in self.no_echo_plain if v != MASK]
        if not plain:
            return
        for fld in ("properties", "observedProperties", "attributes"):
            present, node = _get(self.out.data, ("resources", lid, fld))
            if not present:
                continue
            for rel, stored in _leaves(node):
                if stored == MASK or isinstance(stored, bool) or not isinstance(stored, str | int | float):
                    continue
                hit = any(stored == v for v in plain) or (
                    isinstance(stored, str)
                    and any(isinstance(v, str) and len(v) >= MIN_EMBEDDED and v in stored for v in plain)
                )
                if hit:
                    self.rewrite(("resources", lid, fld, *rel), MASK, "a NoEcho parameter's value held elsewhere")

    # -- the record ----------------------------------------------------------------------

    def run(self) -> TemplateRewrite:
        rows = self.out.data.get("resources")
        rows = rows if isinstance(rows, dict) else {}
        for lid, res in self.resources.items():
            row = rows.get(lid)
            rtype = res.get("Type")
            if rtype == METADATA_TYPE or not isinstance(row, dict) or row.get("resourceType") != rtype:
                continue
            raw = res.get("Properties") if isinstance(res.get("Properties"), dict) else {}
            tokens: list[str] = []
            leaves: list[list[str | int]] = []
            resolved_props: dict[str, Any] = {}
            self.no_echo_plain = []
            for key, value in raw.items():
                ok, resolved = self.resolve(value)
                if not ok:
                    if any(t in self.marks for t, _ in references(value)):
                        self.out.left.append(
                            {
                                "path": ["resources", lid, "properties", key],
                                "source": "NoEcho parameter",
                                "why": "the template's value there cannot be resolved without a deploy",
                            }
                        )
                    continue
                resolved_props[key] = resolved
                self.out.positioned.add(("resources", lid, key))
                tokens += [t for _, leaf in _leaves(resolved) if isinstance(leaf, str) for t in _tokens_in(leaf)]
                leaves += self.position(("resources", lid, "properties", key), resolved, f"{lid}.{key}")
                if "observedProperties" in row:
                    self.position(("resources", lid, "observedProperties", key), resolved, f"{lid}.{key}")
            tokens = [t for t in dict.fromkeys(tokens) if self.values.secret_tokens(t)]
            self.by_value(("resources", lid, "attributes"), tokens, lid)
            self.mask_no_echo_plain(lid)
            if leaves:
                had = row.get("noEchoLeaves") if isinstance(row.get("noEchoLeaves"), list) else []
                merged = list(had)
                added = [leaf for leaf in leaves if leaf not in had]
                merged += added
                if added or "noEchoLeaves" not in row:
                    self.out.no_echo_leaves[lid] = added or merged
                    self.rewrite(("resources", lid, "noEchoLeaves"), merged, f"NoEcho positions of {lid} (v11)")
            if rtype == NESTED_STACK_TYPE:
                params = resolved_props.get("Parameters")
                raw_params = raw.get("Parameters") if isinstance(raw.get("Parameters"), dict) else {}
                marks = list(self.marks.values())
                self.out.children[lid] = {
                    "parameters": {
                        k: v
                        for k, v in (params if isinstance(params, dict) else {}).items()
                        if isinstance(v, str) and not _marks(v, marks)
                    },
                    "no_echo": sorted(
                        k for k, v in raw_params.items() if any(t in self.marks for t, _ in references(v))
                    ),
                }
        self._outputs()
        return self.out

    def _outputs(self) -> None:
        stored = self.out.data.get("outputs")
        declared = self.template.get("Outputs")
        if not isinstance(stored, dict) or not isinstance(declared, dict):
            return
        for name, decl in declared.items():
            if name not in stored or not isinstance(decl, dict) or "Value" not in decl:
                continue
            reads_no_echo = any(t in self.marks for t, _ in references(decl["Value"]))
            if reads_no_echo:
                self.out.positioned.add(("outputs", name))
                if stored[name] != MASK:
                    self.rewrite(("outputs", name), MASK, f"NoEcho parameter read by output {name}")
                continue
            ok, resolved = self.resolve(decl["Value"])
            if not ok:
                continue
            self.out.positioned.add(("outputs", name))
            self.position(("outputs", name), resolved, f"output {name}")


def _tokens_in(text: str) -> list[str]:
    return [m.group(0) for m in SECRET_TOKEN.finditer(text)]


def template_rewrite(
    values: ReferenceValues,
    template: dict[str, Any],
    data: dict[str, Any],
    *,
    stack: str,
    region: str,
    account: str,
    parameters: dict[str, Any] | None = None,
    no_echo_inputs: set[str] | None = None,
    exports: Callable[[], Any] | None = None,
) -> TemplateRewrite:
    """Rewrite `data` (a decoded record, changed in place) as the template says. Raises
    ResolveError when the template's parameters cannot be bound."""
    return _Rewriter(
        values,
        template,
        data,
        stack=stack,
        region=region,
        account=account,
        parameters=parameters or {},
        no_echo_inputs=no_echo_inputs or set(),
        exports=exports,
    ).run()
