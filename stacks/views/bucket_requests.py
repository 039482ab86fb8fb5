"""Requesting `state migrate` from the web: an account's operation (it moves the legacy
`cdkd-state-{account}-{region}` bucket's records, not one stack's), reached from the
account settings page and the attention board's legacy-bucket row.

The same two steps as a stack's request page (`stacks.views.operations.operation_new`):
GET plans (the engine reads both buckets) and shows it, POST requests it through
`stacks.operations.request_operation`, which checks the role again, audits, and queues
it per the account's policy. The Operation names its target as the CLI does: no stack
(`stack_name` ""), `region` the one in the legacy bucket's name.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from engine.errors import EngineError
from engine.operations import OperationRefused
from stacks import actions, operations
from stacks.access import accounts_for, has_role
from stacks.audit import client_ip
from stacks.forms import StateMigrateForm
from stacks.models import Account, OperationKind, Role
from stacks.views.common import AuthedRequest
from stacks.views.operations import plan_context, refusal

TEMPLATE = "stacks/state_migrate_new.html"
KIND = OperationKind.STATE_MIGRATE


def _account_or_404(request: AuthedRequest, account_id: str) -> Account:
    account = accounts_for(request.user).filter(account_id=account_id).first()
    if account is None:
        raise Http404("No such account")
    return account


@never_cache
@require_http_methods(["GET", "POST"])
def state_migrate_new(request: AuthedRequest, account_id: str) -> HttpResponse:
    """GET: the plan for `?region=` (default: the legacy bucket's) and `remove_legacy`.
    POST: request it; removing the legacy bucket needs its own tick."""
    account = _account_or_404(request, account_id)
    if not has_role(request.user, account, Role.OPERATOR):
        return refusal(request, f"You need the operator role on {account} to request this.", 403)
    why = actions.migrate_why_not(account)
    if why:
        return refusal(request, why, 409, title=f"State migrate cannot run on {account}")
    data = request.POST if request.method == "POST" else request.GET.copy()
    if request.method == "GET" and not data.get("region"):
        data["region"] = actions.migrate_region(account)
    form = StateMigrateForm(data)
    context = {"account": account, "form": form, "kind": KIND, "kind_label": OperationKind(KIND).label}
    if not form.is_valid():
        return render(request, TEMPLATE, context, status=400)
    region, params = form.cleaned_data["region"], form.params()
    context.update(region=region, params=params)
    status = 200
    if request.method == "POST" and params["remove_legacy"] and not form.cleaned_data.get("confirm_remove"):
        form.add_error("confirm_remove", "Tick the second confirmation to remove the legacy bucket and its history.")
        status = 400  # show the plan again, with the error
    elif request.method == "POST":
        try:
            op = operations.request_operation(
                request.user,
                account,
                KIND,
                "",
                region,
                params,
                client_address=client_ip(request),
                reason=form.cleaned_data.get("reason") or "",
            )
        except PermissionDenied as exc:
            return refusal(request, str(exc) or "Not allowed.", 403)
        except OperationRefused as exc:
            return render(request, TEMPLATE, {**context, "refusal": str(exc)}, status=409)
        except EngineError as exc:
            return render(request, TEMPLATE, {**context, "engine_error": str(exc)}, status=502)
        seen = form.cleaned_data.get("plan_digest")
        if seen and seen != op.plan_digest:
            messages.warning(request, "The buckets changed after the preview: the operation holds a new plan.")
        messages.success(request, f"Requested operation #{op.pk}: state migrate of {account} ({region}).")
        return redirect("operation", op_id=op.pk)
    try:
        plan = operations.compute_plan(account, KIND, "", region, params, request.user.get_username())
    except OperationRefused as exc:
        return render(request, TEMPLATE, {**context, "refusal": str(exc)}, status=409)
    except EngineError as exc:
        return render(request, TEMPLATE, {**context, "engine_error": str(exc)}, status=502)
    context.update(plan_context(plan.as_json()), digest=plan.digest)
    return render(request, TEMPLATE, context, status=status)
