"""The two faces of a plan: cdkd's `diff --json` array (with the admin's `plan` per node)
and cdkd's text form, plus the exit code. Every value that leaves here is made safe to
print: control, format and bidi characters are escaped in JSON and stripped in text."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from engine.deploy.intrinsics import json_equal
from engine.deploy.outputs import MASK
from engine.deploy.plan import StackPlan


def _escape_char(ch: str) -> bool:
    cp = ord(ch)
    return cp < 0x20 or 0x7F <= cp <= 0x9F or cp in (0x2028, 0x2029) or unicodedata.category(ch) == "Cf"


def render_json(plans: list[StackPlan], *, with_plan: bool = True) -> str:
    """cdkd's `diff --json` array (plus `plan` per node), with every control, format and
    line/paragraph-separator character written as a \\uXXXX escape."""
    text = json.dumps([p.json_node(with_plan=with_plan) for p in plans], indent=2, ensure_ascii=False)
    return "".join(_escaped(ch) if ch != "\n" and _escape_char(ch) else ch for ch in text) + "\n"


def _escaped(ch: str) -> str:
    cp = ord(ch)
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    cp -= 0x10000  # outside the BMP: a surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"


def display(value: Any) -> str:
    """A value for the text form: JSON, stripped of control and bidi characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "".join(ch for ch in text if not _escape_char(ch))


def _strip_unchanged(old: Any, new: Any) -> tuple[Any, Any]:
    """Unchanged sub-values dropped from both sides of an object change, for display."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [
            k
            for k in list(old) + [k for k in new if k not in old]
            if not (k in old and k in new and json_equal(old[k], new[k]))
        ]
        return {k: old[k] for k in keys if k in old}, {k: new[k] for k in keys if k in new}
    return old, new


def render_text(plans: list[StackPlan]) -> str:
    lines: list[str] = []
    for p in plans:
        _render_node(p, lines, indent="")
    nodes = walk(plans)
    cdkd = list(dict.fromkeys(r for p in nodes for r in p.cdkd_blocking))
    admin = [r for r in dict.fromkeys(r for p in nodes for r in p.blocking) if r not in cdkd]
    if cdkd:
        lines.append("Blocking (cdkd deploy will refuse):")
        lines.extend(f"  - {display(r)}" for r in cdkd)
    if admin:
        lines.append("Blocking (the admin's deploy will refuse):")
        lines.extend(f"  - {display(r)}" for r in admin)
    return "\n".join(lines) + "\n"


def walk(plans: list[StackPlan]) -> list[StackPlan]:
    """Every node, depth first."""
    out = []
    for p in plans:
        out.append(p)
        out.extend(walk(p.children))
    return out


def _render_node(p: StackPlan, lines: list[str], indent: str) -> None:
    changes = p.node["changes"]
    outputs = p.node["outputChanges"]
    head = f"{indent}Stack {display(p.stack)} ({p.region})"
    if not changes and not outputs and not p.dropped:
        lines.append(f"{head}: no changes")
    else:
        lines.append(head)
        actions = {a["logicalId"]: a for a in p.plan["actions"]}
        for c in changes:
            lid, rtype = display(c["logicalId"]), c["resourceType"]
            action = actions.get(c["logicalId"], {})
            route = " [via CC API]" if action.get("route") == "cc-api" else ""
            if c["changeType"] == "CREATE":
                lines.append(f"{indent}  [+] {lid} ({rtype}){route}")
                continue
            if c["changeType"] == "DELETE":
                lines.append(f"{indent}  [-] {lid} ({rtype}){route}")
                continue
            mark = ""
            if action.get("action") == "replace":
                mark = " [stateful replacement]" if action.get("stateful") else " [replacement]"
            lines.append(f"{indent}  [~] {lid} ({rtype}){mark}{route}")
            for pc in c.get("propertyChanges", []):
                flags = "".join(
                    f" [{t}]"
                    for t, on in (
                        ("requires replacement", pc.get("requiresReplacement")),
                        ("replacement propagated", pc.get("replacementPropagated")),
                    )
                    if on
                )
                lines.append(f"{indent}      - {display(pc['path'])}:{flags}")
                old, new = _strip_unchanged(pc.get("oldValue"), pc.get("newValue"))
                if "oldValue" in pc:
                    lines.append(f"{indent}          old: {display(old)}")
                if "newValue" in pc:
                    lines.append(f"{indent}          new: {display(new)}")
            for ac in c.get("attributeChanges", []):
                lines.append(f"{indent}      - {ac['attribute']}: (metadata only, no AWS API call)")
                lines.append(f"{indent}          old: {display(ac.get('oldValue', '(none)'))}")
                lines.append(f"{indent}          new: {display(ac.get('newValue', '(none)'))}")
        n = {t: sum(1 for c in changes if c["changeType"] == t) for t in ("CREATE", "UPDATE", "DELETE")}
        lines.append(f"{indent}  {n['CREATE']} to create, {n['UPDATE']} to update, {n['DELETE']} to delete")
        if outputs:
            lines.append(f"{indent}  Outputs:")
            for o in outputs:
                sign = {"ADD": "[+]", "MODIFY": "[~]", "REMOVE": "[-]"}[o["changeType"]]
                export = " (export)" if o.get("export") else ""
                masked = " (name masked: it contains a secret)" if o.get("nameRedacted") and MASK in o["name"] else ""
                lines.append(f"{indent}    {sign} {display(o['name'])}{masked}{export}")
                if "oldValue" in o:
                    lines.append(f"{indent}        old: {display(o['oldValue'])}")
                if "newValue" in o:
                    lines.append(f"{indent}        new: {display(o['newValue'])}")
        m = {t: sum(1 for o in outputs if o["changeType"] == t) for t in ("ADD", "MODIFY", "REMOVE")}
        lines.append(f"{indent}  {m['ADD']} output(s) to add, {m['MODIFY']} to change, {m['REMOVE']} to remove")
        if p.dropped:
            shown = ", ".join(display(d) for d in p.dropped[:10])
            more = f" and {len(p.dropped) - 10} more" if len(p.dropped) > 10 else ""
            lines.append(f"{indent}  dropped from the record: {shown}{more}")
    if p.no_echo_unchanged:
        lines.append(
            f"{indent}  {p.no_echo_unchanged} unchanged resource(s) read a NoEcho parameter, whose value state holds "
            "only as ***: the deploy compares it with AWS, and updates a resource whose value changed"
        )
    for w in p.warnings:
        lines.append(f"{indent}  warning: {display(w)}")
    lines.append(f"{indent}  plan digest: {p.plan['digest']}")
    for child in p.children:
        _render_node(child, lines, indent + "  ")


def exit_code(plans: list[StackPlan], *, fail: bool) -> int:
    """3 when a deploy would refuse, else 1 with --fail and something to change, else 0."""
    if any(p.blocking for p in walk(plans)):
        return 3
    if fail and any(p.has_changes for p in plans):
        return 1
    return 0
