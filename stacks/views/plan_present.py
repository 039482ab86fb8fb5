"""The plan page's rows, built from a stored (masked) plan document: changes grouped by
their top-level construct with replacements first, property old/new values as cdkd's text
form shows them, outputs, and whether the mirror still holds the record the plan read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.deploy.intrinsics import json_equal
from engine.deploy.render import display
from stacks.models import DeployPlan, Stack

SEVERITY = {"replace-stateful": 0, "replace": 1, "delete": 2, "create": 3, "update": 3, "metadata": 3}


def _strip_unchanged(old: Any, new: Any) -> tuple[Any, Any]:
    """Unchanged sub-values dropped from both sides of an object change (as cdkd's text form)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [
            k
            for k in [*old, *(k for k in new if k not in old)]
            if not (k in old and k in new and json_equal(old[k], new[k]))
        ]
        return {k: old[k] for k in keys if k in old}, {k: new[k] for k in keys if k in new}
    return old, new


def _pretty(value: Any) -> str:
    """A value as the text form shows it (control and bidi characters stripped), JSON on
    several lines when it is not a string."""
    if isinstance(value, str):
        return display(value)
    return "\n".join(display(line) for line in json.dumps(value, indent=2, ensure_ascii=False).splitlines())


@dataclass
class ChangeView:
    logical_id: str
    resource_type: str
    change_type: str
    action: str
    stateful: bool
    route: str
    construct_path: str
    properties: list[dict[str, Any]] = field(default_factory=list)
    attributes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def severity(self) -> int:
        return SEVERITY["replace-stateful" if self.stateful else self.action]

    @property
    def css(self) -> str:
        return "stateful" if self.stateful else self.action


@dataclass
class NodeView:
    stack: str
    region: str
    depth: int
    groups: list[tuple[str, list[ChangeView]]]
    outputs: list[dict[str, Any]]
    counts: dict[str, int]
    output_counts: dict[str, int]
    dropped: list[str]
    blocking: list[str]
    warnings: list[str]
    repairs: list[dict[str, Any]]
    digest: str
    no_changes: bool
    replacements: int
    stateful: int


def _group_of(path: str) -> str:
    """The top-level construct a resource belongs to (`Stack/Queue` for
    `Stack/Queue/Policy/Resource`)."""
    if not path:
        return "(no construct path)"
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else path


def node_view(node: dict[str, Any], depth: int = 0) -> NodeView:
    plan = node.get("plan") or {}
    actions = {a.get("logicalId"): a for a in plan.get("actions") or [] if isinstance(a, dict)}
    changes: list[ChangeView] = []
    for c in node.get("changes") or []:
        a = actions.get(c.get("logicalId"), {})
        after = set(a.get("knownAfterApply") or [])
        view = ChangeView(
            logical_id=c.get("logicalId", ""),
            resource_type=c.get("resourceType", ""),
            change_type=c.get("changeType", ""),
            action=a.get("action") or c.get("changeType", "").lower(),
            stateful=bool(a.get("stateful")),
            route=a.get("route", ""),
            construct_path=a.get("constructPath", ""),
        )
        if view.action not in SEVERITY:
            view.action = "update"
        for pc in c.get("propertyChanges") or []:
            old, new = _strip_unchanged(pc.get("oldValue"), pc.get("newValue"))
            view.properties.append(
                {
                    "path": pc.get("path", ""),
                    "has_old": "oldValue" in pc,
                    "has_new": "newValue" in pc,
                    "old": _pretty(old),
                    "new": _pretty(new),
                    "replacement": bool(pc.get("requiresReplacement")),
                    "propagated": bool(pc.get("replacementPropagated")),
                    "after_apply": pc.get("path") in after,
                }
            )
        for ac in c.get("attributeChanges") or []:
            view.attributes.append(
                {
                    "attribute": ac.get("attribute", ""),
                    "old": _pretty(ac.get("oldValue", "(none)")),
                    "new": _pretty(ac.get("newValue", "(none)")),
                }
            )
        changes.append(view)
    order = {id(c): i for i, c in enumerate(changes)}
    grouped: dict[str, list[ChangeView]] = {}
    for c in sorted(changes, key=lambda c: (c.severity, order[id(c)])):
        grouped.setdefault(_group_of(c.construct_path), []).append(c)
    groups = sorted(grouped.items(), key=lambda kv: (min(c.severity for c in kv[1]), kv[0]))
    outputs = []
    for o in node.get("outputChanges") or []:
        outputs.append(
            {
                "name": display(o.get("name", "")),
                "change": o.get("changeType", ""),
                "has_old": "oldValue" in o,
                "has_new": "newValue" in o,
                "old": _pretty(o.get("oldValue")),
                "new": _pretty(o.get("newValue")),
                "old_redacted": bool(o.get("oldValueRedacted")),
                "export": o.get("export"),
                "name_redacted": bool(o.get("nameRedacted")),
            }
        )
    dropped = list(plan.get("dropped") or [])
    counts = {t: sum(1 for c in changes if c.change_type == t) for t in ("CREATE", "UPDATE", "DELETE")}
    output_counts = {t: sum(1 for o in outputs if o["change"] == t) for t in ("ADD", "MODIFY", "REMOVE")}
    return NodeView(
        stack=display(node.get("stack", "")),
        region=node.get("region", ""),
        depth=depth,
        groups=groups,
        outputs=outputs,
        counts=counts,
        output_counts=output_counts,
        dropped=dropped,
        blocking=list(plan.get("blocking") or []),
        warnings=list(plan.get("warnings") or []),
        repairs=list(plan.get("repairs") or []),
        digest=plan.get("digest", ""),
        no_changes=not changes and not outputs and not dropped,
        replacements=sum(1 for c in changes if c.action == "replace"),
        stateful=sum(1 for c in changes if c.stateful),
    )


def plan_nodes(document: dict[str, Any]) -> list[NodeView]:
    out: list[NodeView] = []
    todo = [(document, 0)]
    while todo:
        node, depth = todo.pop(0)
        if not isinstance(node, dict):
            continue
        out.append(node_view(node, depth))
        todo[0:0] = [(child, depth + 1) for child in node.get("children") or []]
    return out


def record_notice(plan: DeployPlan) -> str:
    """Whether the mirrored record still is the one the plan was computed from."""
    mirror = Stack.objects.filter(account=plan.account, key=plan.state_key).only("etag", "synced_at").first()
    if not plan.state_etag:
        if mirror is not None:
            return "A record for this stack has appeared since this plan (it was planned as a new stack): plan again."
        return ""
    if mirror is None:
        return "The record this plan was computed from is no longer in the mirror: plan again."
    if mirror.etag != plan.state_etag:
        return (
            f"The record has changed since this plan: the plan was computed from ETag {plan.state_etag}, "
            f"the mirror now holds {mirror.etag}. Plan again before deploying."
        )
    return ""
