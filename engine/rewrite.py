"""Pure reference rewriting for orphaning resources out of a state record (no I/O).

`rewrite_references(state, orphan_ids)` is cdkd's `rewriteResourceReferences` for
`cdkd state orphan <stack> --resource <id>` (reference §6.2, §10.7), reading values from the
record only (this app has no providers, so `Fn::GetAtt` reads the cached `attributes`):

- the orphaned rows leave `resources`; every other field of the record is kept as it was;
- in every surviving row's `properties` and `attributes`, and in every `outputs` value:
  `{"Ref": X}` -> what CloudFormation's `Ref` returns (`ref_value`: the physical id, or for
  a composite `a|b` id the part seed 001's "The composite id is NOT what `Ref` returns"
  table names); `{"Fn::GetAtt": [X, A]}` / `{"Fn::GetAtt": "X.A"}` -> `attributes[A]`;
  `${X}` / `${X.A}` inside `Fn::Sub` (string and `[string, vars]` forms; a var of the same
  name shadows, `${!Literal}` is an escape) are substituted in place;
- `dependencies` entries naming an orphan are dropped;
- `observedProperties` is NOT rewritten (it is AWS's readback, never an intrinsic; cdkd
  does not rewrite it either), nor are `orphans` records (they are not surviving rows).

A reference that cannot be resolved (unreadable orphaned row, no physical id, no cached
attribute, an unreadable attributes cache, a masked `***` value, a composite id of a type
the table does not cover) is listed in `unresolved` and its intrinsic is kept as it was;
`rewrite_references` raises `UnresolvedReferences` for them unless `force=True`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.operations import OperationRefused

MASK = "***"  # what cdkd stores for a NoEcho value; never a value to substitute

# Where each part of a row shows up in a rewrite path (`Properties.Environment.Variables.Q`).
_ROW_SECTIONS = (("properties", "Properties"), ("attributes", "Attributes"))
OUTPUTS = "Outputs"  # the `logicalId` of rewrites inside `outputs`

# The AppSync children's Ref is the ARN the provider records as this attribute (seed 001).
_APPSYNC_ARN_ATTRIBUTE = {
    "AWS::AppSync::ApiKey": "Arn",
    "AWS::AppSync::DataSource": "DataSourceArn",
    "AWS::AppSync::Resolver": "ResolverArn",
}

_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


class UnresolvedReferences(OperationRefused):
    """References to orphaned resources that have no value to put in their place."""

    def __init__(self, unresolved: list[dict[str, Any]]) -> None:
        self.unresolved = unresolved
        sites = "; ".join(f"{u['logicalId']}.{u['path']}: {u['reference']} ({u['reason']})" for u in unresolved)
        super().__init__(
            f"{len(unresolved)} reference(s) to the orphaned resources cannot be resolved from the record: "
            f"{sites}. Use force to keep those intrinsics as they are."
        )


@dataclass
class RewriteResult:
    state: dict[str, Any]  # the new record (a copy; the input is untouched)
    rewrites: list[dict[str, Any]] = field(default_factory=list)  # {kind, logicalId, path, before, after}
    unresolved: list[dict[str, Any]] = field(default_factory=list)  # {logicalId, path, reference, reason}
    removed: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The audit table for people: `logicalId.path: before -> after`."""
        return [f"{r['logicalId']}.{r['path']}: {_show(r['before'])} -> {_show(r['after'])}" for r in self.rewrites]


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


@dataclass(frozen=True)
class _Resolved:
    ok: bool
    value: Any = None
    reason: str = ""


def _miss(reason: str) -> _Resolved:
    return _Resolved(False, None, reason)


def _row_is_readable(row: Any) -> bool:
    return isinstance(row, dict) and isinstance(row.get("resourceType"), str)


def ref_value(row: Any) -> _Resolved:
    """What CloudFormation's `Ref` returns for the resource recorded as `row`.

    Plain ids pass through. Composite (`|`-joined) ids follow seed 001's table; a composite
    id of a type the table does not name is unresolved rather than guessed.
    """
    if not _row_is_readable(row):
        return _miss("the orphaned resource record is unreadable")
    physical_id = row.get("physicalId")
    if not isinstance(physical_id, str) or not physical_id:
        return _miss("the orphaned resource has no physical id")
    rtype = row["resourceType"]
    if rtype in _APPSYNC_ARN_ATTRIBUTE:
        # The ARN is not a segment at all; a record lacking it falls back to the raw id (seed 001).
        attributes = row.get("attributes")
        arn = attributes.get(_APPSYNC_ARN_ATTRIBUTE[rtype]) if isinstance(attributes, dict) else None
        return _Resolved(True, arn if isinstance(arn, str) and arn and arn != MASK else physical_id)
    if "|" not in physical_id:
        return _Resolved(True, physical_id)
    segments = physical_id.split("|")
    if rtype == "AWS::ApiGateway::Method":
        return _Resolved(True, physical_id)  # no segment reconstructs it: cdkd passes it through
    if rtype == "AWS::EC2::EIP":
        return _Resolved(True, segments[0])  # the public IP
    if rtype in ("AWS::S3Tables::Namespace", "AWS::S3Tables::Table"):
        return _Resolved(True, segments[-1])
    if rtype == "AWS::Lambda::Permission":
        # Older Cloud Control records hold `<functionArn>|<statementId>`; cdkd reads both forms.
        return _Resolved(True, segments[-1])
    if rtype == "AWS::Glue::Table":
        return _glue_table_name(row, physical_id, segments)
    if rtype == "AWS::Route53::RecordSet":
        return _record_set_name(row, physical_id, segments)
    return _miss(f"composite physical id of {rtype}, whose Ref value the seeds do not define")


def _properties(row: dict[str, Any]) -> dict[str, Any]:
    props = row.get("properties")
    return props if isinstance(props, dict) else {}


def _glue_table_name(row: dict[str, Any], physical_id: str, segments: list[str]) -> _Resolved:
    # Both names may hold `|`: the table is everything after the recorded DatabaseName (seed 000).
    database = _properties(row).get("DatabaseName")
    if isinstance(database, str) and physical_id.startswith(database + "|"):
        return _Resolved(True, physical_id[len(database) + 1 :])
    if len(segments) == 2:
        return _Resolved(True, segments[1])
    return _miss("Glue table id with more than one '|' and no recorded DatabaseName to split it by")


def _record_set_name(row: dict[str, Any], physical_id: str, segments: list[str]) -> _Resolved:
    # `<zone>|<name>|<type>`; the name (which may hold `|`) counts only when it matches the
    # recorded Name (a trailing "." aside: Route 53 adds it) and the last segment the recorded
    # Type; otherwise the id IS the name (seed 000).
    if len(segments) < 3:
        return _Resolved(True, physical_id)
    middle = physical_id[len(segments[0]) + 1 : len(physical_id) - len(segments[-1]) - 1]
    props = _properties(row)
    name, rtype = props.get("Name"), props.get("Type")
    if not isinstance(name, str) or not isinstance(rtype, str):
        return _Resolved(True, middle) if len(segments) == 3 else _Resolved(True, physical_id)
    if rtype == segments[-1] and middle.rstrip(".") == name.rstrip("."):
        return _Resolved(True, middle)
    return _Resolved(True, physical_id)


def getatt_value(row: Any, attribute: Any) -> _Resolved:
    """The cached `attributes[attribute]` of an orphaned row (never read from a damaged cache)."""
    if not _row_is_readable(row):
        return _miss("the orphaned resource record is unreadable")
    if not isinstance(attribute, str):
        return _miss("the attribute name is not a plain string")
    attributes = row.get("attributes")
    if "attributes" in row and not isinstance(attributes, dict):
        return _miss("the orphaned resource's attributes cache is unreadable")
    if not isinstance(attributes, dict) or attribute not in attributes:
        return _miss(f"no cached value of attribute {attribute}")
    value = attributes[attribute]
    if value == MASK:
        return _miss(f"attribute {attribute} is stored masked (***)")
    return _Resolved(True, copy.deepcopy(value))


class _Rewriter:
    def __init__(self, resources: dict[str, Any], orphan_ids: set[str]) -> None:
        self.resources = resources
        self.orphans = orphan_ids
        self.rewrites: list[dict[str, Any]] = []
        self.unresolved: list[dict[str, Any]] = []
        self.logical_id = ""

    def _record(self, kind: str, path: str, before: Any, after: Any) -> None:
        self.rewrites.append(
            {"kind": kind, "logicalId": self.logical_id, "path": path, "before": before, "after": after}
        )

    def _unresolved(self, path: str, reference: str, reason: str) -> None:
        self.unresolved.append({"logicalId": self.logical_id, "path": path, "reference": reference, "reason": reason})

    def walk(self, value: Any, path: str) -> Any:
        if isinstance(value, list):
            return [self.walk(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" and isinstance(arg, str) and arg in self.orphans:
                return self._ref(value, arg, path)
            if key == "Fn::GetAtt":
                target = _getatt_target(arg)
                if target is not None and target[0] in self.orphans:
                    return self._getatt(value, target[0], target[1], path)
            if key == "Fn::Sub":
                return self._sub(value, arg, path)
        return {k: self.walk(v, f"{path}.{k}" if path else k) for k, v in value.items()}

    def _ref(self, node: dict[str, Any], target: str, path: str) -> Any:
        resolved = ref_value(self.resources.get(target))
        if not resolved.ok:
            self._unresolved(path, f"Ref {target}", resolved.reason)
            return copy.deepcopy(node)
        self._record("ref", path, copy.deepcopy(node), resolved.value)
        return resolved.value

    def _getatt(self, node: dict[str, Any], target: str, attribute: Any, path: str) -> Any:
        resolved = getatt_value(self.resources.get(target), attribute)
        if not resolved.ok:
            self._unresolved(path, f"Fn::GetAtt {target}.{attribute}", resolved.reason)
            return copy.deepcopy(node)
        self._record("getAtt", path, copy.deepcopy(node), resolved.value)
        return resolved.value

    def _sub(self, node: dict[str, Any], arg: Any, path: str) -> Any:
        if isinstance(arg, str):
            template, variables, shadow = arg, None, set()
        elif isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str) and isinstance(arg[1], dict):
            template, variables = arg[0], arg[1]
            shadow = set(variables)  # a var of the same name is what `${name}` means there
        else:
            return {"Fn::Sub": self.walk(arg, f"{path}.Fn::Sub")}
        new_variables = (
            {k: self.walk(v, f"{path}.Fn::Sub[1].{k}") for k, v in variables.items()} if variables is not None else None
        )
        new_template = _SUB_VARIABLE.sub(lambda m: self._placeholder(m, shadow, path), template)
        if new_template != template:
            after = {"Fn::Sub": new_template if new_variables is None else [new_template, new_variables]}
            self._record("sub", path, copy.deepcopy(node), after)
            return after
        return copy.deepcopy(node) if new_variables is None else {"Fn::Sub": [template, new_variables]}

    def _placeholder(self, match: re.Match[str], shadow: set[str], path: str) -> str:
        name = match.group(1)
        if name.startswith("!") or name in shadow:
            return match.group(0)  # an escape, or a variable of the Sub's own map
        target, dot, attribute = name.partition(".")
        if target not in self.orphans:
            return match.group(0)
        row = self.resources.get(target)
        resolved = getatt_value(row, attribute) if dot else ref_value(row)
        if resolved.ok and not _substitutable(resolved.value):
            resolved = _miss("the value is not a string and cannot go into an Fn::Sub string")
        if not resolved.ok:
            self._unresolved(path, "${" + name + "}", resolved.reason)
            return match.group(0)
        text = resolved.value if isinstance(resolved.value, str) else str(resolved.value)
        # A substituted value must not be read as a variable itself: `${!` is Sub's literal escape.
        return text.replace("${", "${!")


def _substitutable(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _getatt_target(arg: Any) -> tuple[str, Any] | None:
    """(logicalId, attribute) of an Fn::GetAtt argument in list or `"X.Attr"` form."""
    if isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str):
        return arg[0], arg[1]
    if isinstance(arg, str) and "." in arg:
        target, _, attribute = arg.partition(".")
        return target, attribute
    return None


def rewrite_references(state: dict[str, Any], orphan_ids: Iterable[str], *, force: bool = False) -> RewriteResult:
    """The record without `orphan_ids`, every reference to them rewritten (module docstring).

    `state` is the decoded record (a dict with a `resources` object); it is not modified.
    Raises KeyError naming ids that are not in `resources`, and `UnresolvedReferences`
    when some reference cannot be resolved and `force` is False. Rows, maps and outputs
    that are not objects are carried verbatim (the caller refuses such records).
    """
    ids = list(dict.fromkeys(orphan_ids))
    resources = state.get("resources")
    if not isinstance(resources, dict):
        raise ValueError("the record's resources is not an object")
    missing = [i for i in ids if i not in resources]
    if missing:
        raise KeyError(", ".join(missing))
    orphans = set(ids)
    rewriter = _Rewriter(resources, orphans)
    new_state: dict[str, Any] = {}
    for key, value in state.items():
        if key == "resources":
            value = {
                lid: _rewrite_row(rewriter, lid, row, orphans) for lid, row in resources.items() if lid not in orphans
            }
        elif key == "outputs" and isinstance(value, dict):
            rewriter.logical_id = OUTPUTS
            value = {name: rewriter.walk(v, name) for name, v in value.items()}
        else:
            value = copy.deepcopy(value)
        new_state[key] = value
    result = RewriteResult(new_state, rewriter.rewrites, rewriter.unresolved, ids)
    if result.unresolved and not force:
        raise UnresolvedReferences(result.unresolved)
    return result


def _rewrite_row(rewriter: _Rewriter, logical_id: str, row: Any, orphans: set[str]) -> Any:
    if not isinstance(row, dict):
        return copy.deepcopy(row)
    rewriter.logical_id = logical_id
    new_row: dict[str, Any] = {}
    for key, value in row.items():
        section = dict(_ROW_SECTIONS).get(key)
        if section is not None and isinstance(value, dict):
            value = {k: rewriter.walk(v, f"{section}.{k}") for k, v in value.items()}
        elif (
            key == "dependencies" and isinstance(value, list) and any(d in orphans for d in value if isinstance(d, str))
        ):
            kept = [d for d in value if not (isinstance(d, str) and d in orphans)]
            rewriter._record("dependency", "Dependencies", copy.deepcopy(value), kept)
            value = kept
        else:
            value = copy.deepcopy(value)
        new_row[key] = value
    return new_row
