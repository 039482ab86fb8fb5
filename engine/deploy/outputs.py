"""The Outputs preview of `cdkd diff`, by seed 002's rules.

* Every declared output (its Condition honoured) gives a row keyed by its logical id and,
  with an `Export.Name`, a second row keyed by the export name (`export: true`). Stored keys
  the template no longer declares are REMOVE rows; `export` on those comes from
  `exportNames` (or, on a pre-v9 record, from whether the key could be a logical id).
* An output the diff cannot resolve (the resolver threw, or the value still holds an
  intrinsic, an `AWS::NoValue` or a kept `Fn::Sub` placeholder) omits the whole section with
  a warning, except: a key the last deploy recorded in `skippedOutputs` under an unchanged
  digest and still absent from state is previewed as absent (no row), unless it reads a
  resource this run's diff reports as changing; and with no resource change pending and
  every failure a thrown resolution, the section is previewed as the deploy's merge would
  persist it (rows for the rest, the failed ones named in a warning, previous values
  withheld unless every value carried from state for them is one whole secret reference).
* A previous value that may be legacy secret plaintext is withheld (`oldValueRedacted`).
* NoEcho parameter values print as `***`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from engine.deploy.intrinsics import (
    NO_VALUE,
    SECRET_REF_RE,
    Context,
    ResolveError,
    Resolver,
    contains_intrinsic,
    has_secret_reference,
    json_equal,
)

MASK = "***"
WITHHELD = "<withheld: may be legacy secret plaintext; see cdkd scrub>"
NAME_WITHHELD = "<name withheld: contains a secret>"
_LOGICAL_ID_RE = re.compile(r"^[A-Za-z0-9]+$")
_WHOLE_SECRET_RE = re.compile(r"^\{\{resolve:(?:secretsmanager|ssm-secure):[^}]*\}\}$")
_SUB_LEFT_RE = re.compile(r"\$\{[^!][^}]*\}")


@dataclass
class OutputsPreview:
    rows: list[dict[str, Any]] = field(default_factory=list)
    omitted: bool = False
    warnings: list[str] = field(default_factory=list)


def skipped_output_digest(template: dict[str, Any], key: str) -> str:
    """The digest the deploy records in `skippedOutputs` (seed 000): the output's own entry
    and every top-level section except Resources and Outputs, as handed in, with a NoEcho
    parameter's Default hashed as a constant. Canonical JSON (sorted keys)."""
    sections = {k: v for k, v in template.items() if k not in ("Resources", "Outputs")}
    params = sections.get("Parameters")
    if isinstance(params, dict):
        masked = {}
        for name, decl in params.items():
            if isinstance(decl, dict) and decl.get("NoEcho") in (True, "true") and "Default" in decl:
                decl = {**decl, "Default": "<NoEcho default>"}
            masked[name] = decl
        sections["Parameters"] = masked
    entry = (template.get("Outputs") or {}).get(key)
    body = json.dumps({"output": entry, "sections": sections}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _references_ids(value: Any, ids: set[str]) -> bool:
    if isinstance(value, dict):
        if isinstance(value.get("Ref"), str) and value["Ref"] in ids:
            return True
        att = value.get("Fn::GetAtt")
        if isinstance(att, list) and att and att[0] in ids:
            return True
        if isinstance(att, str) and att.split(".", 1)[0] in ids:
            return True
        sub = value.get("Fn::Sub")
        body = sub if isinstance(sub, str) else sub[0] if isinstance(sub, list) and sub else None
        if isinstance(body, str) and any(m.split(".", 1)[0] in ids for m in re.findall(r"\$\{([^!}][^}]*)\}", body)):
            return True
        return any(_references_ids(v, ids) for v in value.values())
    if isinstance(value, list):
        return any(_references_ids(v, ids) for v in value)
    return False


def _reads_condition(value: Any) -> bool:
    if isinstance(value, dict):
        if "Fn::If" in value or (len(value) == 1 and "Condition" in value):
            return True
        return any(_reads_condition(v) for v in value.values())
    if isinstance(value, list):
        return any(_reads_condition(v) for v in value)
    return False


def _bad_shape(value: Any) -> bool:
    if value is NO_VALUE or value is None:
        return True
    if isinstance(value, str):
        return _SUB_LEFT_RE.search(value) is not None
    if isinstance(value, dict):
        return contains_intrinsic(value) or any(_bad_shape(v) for v in value.values())
    if isinstance(value, list):
        return any(_bad_shape(v) for v in value)
    return False


def mask_no_echo(value: Any, needles: list[str]) -> Any:
    """*** for a NoEcho value: whole-value match for 1-3 characters, embedded for longer."""
    if not needles:
        return value
    if isinstance(value, str):
        for n in sorted(needles, key=len, reverse=True):
            if value == n:
                return MASK
            if len(n) >= 4 and n in value:
                value = value.replace(n, MASK)
        return value
    if isinstance(value, list):
        return [mask_no_echo(v, needles) for v in value]
    if isinstance(value, dict):
        return {k: mask_no_echo(v, needles) for k, v in value.items()}
    if isinstance(value, bool | int | float) and str(value) in needles:
        return MASK
    return value


def preview_outputs(
    template: dict[str, Any],
    ctx: Context,
    *,
    stored: dict[str, Any],
    stored_readable: bool,
    export_names: set[str] | None,
    skipped: dict[str, str],
    changing_ids: set[str],
    resource_changes_pending: bool,
    no_echo_values: list[str],
) -> OutputsPreview:
    result = OutputsPreview()
    if not stored_readable:
        result.omitted = True
        return result
    declared = template.get("Outputs") or {}
    resolver = Resolver(ctx)

    desired: list[tuple[str, Any, bool]] = []  # (key, value, export)
    thrown: list[str] = []  # outputs whose resolution threw
    unsafe: list[str] = []  # reasons the merge preview cannot be used
    kept: set[str] = set()
    secret_names: list[re.Pattern[str]] = []  # stored keys a secret-bearing Export.Name covers
    for name, out in declared.items():
        cond = out.get("Condition")
        if isinstance(cond, str):
            unsafe.append(f"output {name} carries a Condition")
            if not ctx.conditions.get(cond, False):
                continue
        if skipped.get(name) is not None and name not in stored:
            reads_changing = _references_ids(out.get("Value"), changing_ids) or _references_ids(
                out.get("Export"), changing_ids
            )
            if not reads_changing and skipped[name] == skipped_output_digest(template, name):
                continue  # the last deploy skipped it and nothing it reads moved: no row
        before = ctx.kept_placeholders
        try:
            value = resolver.resolve(out.get("Value"))
        except ResolveError as exc:
            thrown.append(name)
            result.warnings.append(f"output {name} could not be resolved ({exc})")
            value = None
            failed = True
        else:
            failed = False
            if _bad_shape(value) or ctx.kept_placeholders != before:
                unsafe.append(f"output {name} resolved to a shape the diff cannot vouch for")
                thrown.append(name)
                failed = True
        export_name = None
        export = out.get("Export")
        if isinstance(export, dict) and "Name" in export:
            try:
                export_name = resolver.resolve(export["Name"])
            except ResolveError as exc:
                unsafe.append(f"the Export.Name of output {name} could not be resolved ({exc})")
                export_name = None
            if export_name is not None and not isinstance(export_name, str):
                unsafe.append(f"the Export.Name of output {name} is not a string")
                export_name = None
            if isinstance(export_name, str) and SECRET_REF_RE.search(export_name):
                secret_names.append(_secret_name_pattern(export_name))
        if failed:
            if isinstance(export_name, str):
                kept.add(export_name)  # the deploy keeps a failed output's alias too
            continue
        value = mask_no_echo(value, no_echo_values)
        desired.append((name, value, False))
        if isinstance(export_name, str):
            desired.append((export_name, value, True))

    merged = False
    if thrown:
        outside = {k: v for k, v in template.items() if k not in ("Resources", "Conditions")}
        if _reads_condition(outside):
            unsafe.append("a condition verdict can reach an output's value")
        if ctx.parameters.unbound or ctx.undecided_conditions:
            unsafe.append("a parameter or condition could not be decided for the diff")
        if resource_changes_pending or unsafe:
            result.omitted = True
            result.warnings.append(
                "the Outputs section is omitted: output(s) " + ", ".join(thrown) + " could not be resolved"
            )
            return result
        merged = True

    declared_keys = {k for k, _, _ in desired} | set(thrown) | kept
    secret_template = has_secret_reference(template)
    # record-wide gate: a declared secret-fed output whose stored value is not its expression
    record_wide = False
    for name, out in declared.items():
        raw = out.get("Value")
        if (
            has_secret_reference(raw)
            and name in stored
            and not (isinstance(stored[name], str) and SECRET_REF_RE.search(stored[name]))
        ):
            record_wide = True
    if merged:
        carried = [stored[k] for k in [*thrown, *kept] if k in stored]  # an alias included
        if not carried or not all(isinstance(v, str) and _WHOLE_SECRET_RE.match(v) for v in carried):
            record_wide = True
            result.warnings.append(
                "outputs "
                + ", ".join(thrown)
                + " could not be resolved; the deploy persists the others and keeps their stored values, "
                "previous values are withheld"
            )
    plain_ssm_secret_stored = any(isinstance(v, str) and "{{resolve:ssm-secure:" in v for v in stored.values())

    def old_side(row: dict[str, Any], key: str, removing: bool) -> None:
        withhold = record_wide or (removing and secret_template and not plain_ssm_secret_stored)
        if withhold:
            row["oldValue"] = WITHHELD
            row["oldValueRedacted"] = True
        else:
            row["oldValue"] = mask_no_echo(stored[key], no_echo_values)

    seen: set[str] = set()
    for key, value, is_export in desired:
        if key in seen:
            continue
        seen.add(key)
        if key not in stored:
            result.rows.append({"name": key, "changeType": "ADD", "newValue": value, "export": is_export})
        elif not json_equal(stored[key], value):
            row: dict[str, Any] = {"name": key, "changeType": "MODIFY"}
            old_side(row, key, removing=False)
            row["newValue"] = value
            row["export"] = is_export
            result.rows.append(row)
    for key in stored:
        if key in declared_keys or key in seen:
            continue
        is_export = key in export_names if export_names is not None else not _LOGICAL_ID_RE.match(key)
        row = {"name": key, "changeType": "REMOVE"}
        old_side(row, key, removing=True)
        row["export"] = is_export
        _redact_name(row, key, secret_names, no_echo_values, withhold_alias=secret_template and is_export)
        result.rows.append(row)
    for row in result.rows:
        if "nameRedacted" not in row:
            _redact_name(row, row["name"], secret_names, no_echo_values, withhold_alias=False)
    return result


def _secret_name_pattern(export_name: str) -> re.Pattern[str]:
    """A stored key the name could have resolved to: its literal text, any secret."""
    parts = re.split(r"\{\{resolve:(?:secretsmanager|ssm-secure):[^}]*\}\}", export_name)
    return re.compile("^" + "(.+?)".join(re.escape(p) for p in parts) + "$", re.S)


def _redact_name(
    row: dict[str, Any], key: str, patterns: list[re.Pattern[str]], needles: list[str], *, withhold_alias: bool
) -> None:
    """Mask the part of a row name a secret covers, or withhold the name (seed 002)."""
    for pattern in patterns:
        m = pattern.match(key)
        if m and m.re.groups:
            masked = key
            for i in range(m.re.groups, 0, -1):
                masked = masked[: m.start(i)] + MASK + masked[m.end(i) :]
            row["name"], row["nameRedacted"] = masked, True
            return
    masked = mask_no_echo(key, needles)
    if masked != key:
        row["name"], row["nameRedacted"] = (masked if MASK in masked else NAME_WITHHELD), True
        return
    if withhold_alias and not _LOGICAL_ID_RE.match(key):
        row["name"], row["nameRedacted"] = NAME_WITHHELD, True
