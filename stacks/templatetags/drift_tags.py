"""`{% drift_panel %}`: the stack page's last drift check per resource (stacks.drift), with
Check now (a queued read, stacks.drift.request_check), and Accept / Revert / Refresh observed
through the operation request page (stacks.actions decides whether each is offered, as it
does for every repair button)."""

from __future__ import annotations

from django import template

from stacks.access import has_role
from stacks.actions import DRIFT_KINDS, why_not
from stacks.drift import check_pending, check_why_not, latest_for_stack
from stacks.models import OperationKind, Role

register = template.Library()


@register.inclusion_tag("stacks/_drift.html", takes_context=True)
def drift_panel(context) -> dict:
    stack, user = context["stack"], context["request"].user
    check = latest_for_stack(stack)
    operator = has_role(user, stack.account, Role.OPERATOR)
    buttons = []
    for kind in DRIFT_KINDS:
        if kind != OperationKind.REFRESH_OBSERVED and not (check and check.drifted):
            continue  # accept and revert only where the last check found drift
        reason = why_not(stack, kind) if operator else f"You need the operator role on {stack.account}."
        buttons.append({"kind": kind, "label": OperationKind(kind).label, "allowed": reason is None, "reason": reason})
    rows = [r for r in (check.resources if check else []) if isinstance(r, dict)]
    check_reason = check_why_not(stack) if operator else f"You need the operator role on {stack.account}."
    return {
        "stack": stack,
        "check": check,
        "rows": rows,
        "buttons": buttons,
        "check_reason": check_reason,
        "pending": check_reason is None and check_pending(stack),
        "csrf_token": context.get("csrf_token"),
    }
