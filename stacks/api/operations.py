"""Operations: list (the operations page's tabs and filters), one with its plan, request
(planned by the pipeline, returned with its plan), approve, reject and cancel.

The rules are the pipeline's (`stacks.operations`: roles, policy, four-eyes, approvals
bound to the plan) and the stack page's (`stacks.actions.why_not`); the parameters go
through the confirmation page's own form (`OperationParamsForm`). This module only checks
in the same order as the pages do (404 no role, 403 role too low, 409 refused) and maps
each refusal to its status."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Path, Query, Router
from pydantic import Field

from stacks import actions, operations
from stacks.access import accounts_for, get_stack_or_404, has_role, role_on
from stacks.api.common import ApiError, mutation, page_of, target
from stacks.api.schemas import (
    ACCOUNT_PATTERN,
    DecisionIn,
    ErrorOut,
    Input,
    OperationDetailOut,
    OperationPage,
    OperationRequestIn,
)
from stacks.audit import client_ip
from stacks.forms import OperationParamsForm
from stacks.models import Lock, Operation, OperationKind, OperationStatus, Role
from stacks.secretmask import mask_plan
from stacks.views import picker
from stacks.views.detail import parse_stack
from stacks.views.operations import _missing_confirmation, awaiting_my_approval

router = Router(tags=["operations"])
READ_ERRORS = {401: ErrorOut, 404: ErrorOut, 422: ErrorOut}
WRITE_ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut, 502: ErrorOut}


def operation_out(op: Operation) -> dict[str, Any]:
    return {
        "id": op.pk,
        "kind": op.kind,
        "account_id": op.account.account_id,
        "stack_name": op.stack_name,
        "region": op.region,
        "status": op.status,
        "requester": op.requester_name,
        "via": op.via,
        "reason": op.reason,
        "plan_digest": op.plan_digest,
        "plan_etag": op.plan_etag,
        "error": op.error,
        "created_at": op.created_at,
        "finished_at": op.finished_at,
    }


def _masked(value: Any, kind: type) -> Any:
    """A stored JSON part of an operation as its page shows it: credential shapes masked
    (`mask_plan`, the operation pages' own masker)."""
    if not isinstance(value, kind):
        return kind()
    return mask_plan({"value": value}).get("value", kind())


def operation_detail(user, op: Operation) -> dict[str, Any]:
    policy = operations.policy_for(op.account, op.kind)
    counting = {a.pk for a in operations.valid_approvals(op)}
    return {
        **operation_out(op),
        "plan": mask_plan(op.plan if isinstance(op.plan, dict) else {}),
        "params": _masked(op.params, dict),
        "approvals": [
            {
                "approver": a.approver.get_username(),
                "approved": a.approved,
                "counts": a.pk in counting,
                "comment": a.comment,
                "created_at": a.created_at,
            }
            for a in op.approvals.select_related("approver")
        ],
        "approvals_needed": policy.approvers_needed,
        "approval_required": policy.approval_required,
        "progress": _masked(op.progress, dict),
        "result": _masked(op.result, dict),
        "log": _masked(op.log, list),
        "rerun_of": op.rerun_of_id,
        "can_decide": operations.can(user, op, "decide"),
        "can_cancel": operations.can(user, op, "cancel"),
    }


class OperationFilters(Input):
    tab: Literal["inbox", "mine", "all"] | None = Field(
        None, description="inbox: awaiting my approval; mine: my requests; all. Default as on the page"
    )
    account: str | None = Field(None, pattern=ACCOUNT_PATTERN)
    kind: Literal[tuple(OperationKind.values)] | None = None  # type: ignore[valid-type]
    status: Literal[tuple(OperationStatus.values)] | None = None  # type: ignore[valid-type]
    page: int = Field(1, ge=1, le=100000)
    page_size: int | None = Field(None, ge=1, le=200)


@router.get("/operations", response={200: OperationPage, **READ_ERRORS}, summary="List operations")
def list_operations(request, filters: Query[OperationFilters]):
    user = request.user
    tab = filters.tab or ("inbox" if accounts_for(user, Role.APPROVER).exists() else "mine")
    if tab == "inbox":
        ops = awaiting_my_approval(user)
    elif tab == "mine":
        ops = Operation.objects.filter(requested_by=user, account__in=accounts_for(user))
    else:
        ops = operations.visible_operations(user)
    if filters.account:
        ops = ops.filter(account__account_id=filters.account)
    if filters.kind:
        ops = ops.filter(kind=filters.kind)
    if filters.status:
        ops = ops.filter(status=filters.status)
    ops = ops.select_related("account").order_by("-created_at", "-pk")
    return page_of(ops, filters.page, filters.page_size, operation_out)


def _get_operation(request, op_id: int) -> Operation:
    op = Operation.objects.select_related("account", "requested_by").filter(pk=op_id).first()
    if op is None or role_on(request.user, op.account) is None:
        raise ApiError(404, "No such operation.")
    return op


OpId = Path(..., ge=1, le=2**63 - 1)


@router.get("/operations/{op_id}", response={200: OperationDetailOut, **READ_ERRORS}, summary="One operation")
def get_operation(request, op_id: int = OpId):
    return operation_detail(request.user, _get_operation(request, op_id))


def _form_data(body: OperationRequestIn) -> dict[str, Any]:
    data: dict[str, Any] = body.params.dict()
    data["resources"] = list(data["resources"])
    data["orphan"] = " ".join(data["orphan"])  # the form's field is text, as cdkd's repeated --orphan
    for optional in ("concurrency", "keep", "older_than_days"):
        if data[optional] is None:
            data.pop(optional)
    data["reason"] = body.reason
    return data


def _request(request, body: OperationRequestIn) -> tuple[int, dict]:
    user = request.user
    stack = get_stack_or_404(user, body.account_id, body.region_slug, body.stack_name)
    target(request, account=stack.account)
    kind = body.kind
    if not has_role(user, stack.account, Role.OPERATOR):
        raise ApiError(403, f"You need the operator role on {stack.account} to request this.")
    # The stack page's rule; a lock is the bucket's to tell (force-unlock's plan says).
    why = None if kind == OperationKind.FORCE_UNLOCK else actions.why_not(stack, kind)
    if why:
        raise ApiError(409, why)
    lock = Lock.objects.filter(stack=stack).first() if kind == OperationKind.FORCE_UNLOCK else None
    unreadable = lock is not None and not lock.readable
    rows = picker.pick_rows(parse_stack(stack).resource_rows()) if kind == OperationKind.ORPHAN_RESOURCES else []
    form = OperationParamsForm(
        _form_data(body), kind=kind, logical_ids=[r.logical_id for r in rows], unreadable_lock=unreadable
    )
    if not form.is_valid():
        raise ApiError(400, " ".join(form.worded_errors))
    params = form.params()
    if _missing_confirmation(kind, stack, form, params):
        raise ApiError(400, " ".join(form.worded_errors))
    if unreadable and not params.get("confirm_unreadable"):
        raise ApiError(400, "The lock cannot be read: set params.confirm_unreadable to remove it all the same.")
    op = operations.request_operation(
        user,
        stack.account,
        kind,
        stack.stack_name,
        None if stack.legacy else stack.region,
        params,
        client_address=client_ip(request),
        reason=form.cleaned_data.get("reason") or "",
        via="api",
    )
    target(request, operation=op)
    return 201, operation_detail(user, op)


@router.post(
    "/operations",
    response={201: OperationDetailOut, **WRITE_ERRORS},
    summary="Request an operation on a stack; it is planned now and returned with its plan",
)
def request_operation(request, body: OperationRequestIn):
    return mutation(request, "operation.request", lambda: _request(request, body))


def _decide(request, op_id: int, approve: bool, comment: str) -> tuple[int, dict]:
    op = _get_operation(request, op_id)
    target(request, operation=op)
    if not has_role(request.user, op.account, Role.APPROVER):
        raise ApiError(403, f"You need the approver role on {op.account} to decide on this.")
    op = operations.decide(request.user, op, approve=approve, comment=comment, client_address=client_ip(request))
    return 200, operation_detail(request.user, op)


@router.post(
    "/operations/{op_id}/approve",
    response={200: OperationDetailOut, **WRITE_ERRORS},
    summary="Approve (never your own request); it runs once enough approvers agree",
)
def approve_operation(request, body: DecisionIn, op_id: int = OpId):
    return mutation(request, "operation.approve", lambda: _decide(request, op_id, True, body.comment))


@router.post(
    "/operations/{op_id}/reject",
    response={200: OperationDetailOut, **WRITE_ERRORS},
    summary="Reject (never your own request)",
)
def reject_operation(request, body: DecisionIn, op_id: int = OpId):
    return mutation(request, "operation.reject", lambda: _decide(request, op_id, False, body.comment))


def _cancel(request, op_id: int) -> tuple[int, dict]:
    op = _get_operation(request, op_id)
    target(request, operation=op)
    if not has_role(request.user, op.account, Role.OPERATOR):
        raise ApiError(403, f"You need the operator role on {op.account} to cancel this.")
    op = operations.cancel(request.user, op, client_address=client_ip(request))
    return 200, operation_detail(request.user, op)


@router.post(
    "/operations/{op_id}/cancel",
    response={200: OperationDetailOut, **WRITE_ERRORS},
    summary="Cancel before it runs, or ask a running one that supports it to stop",
)
def cancel_operation(request, op_id: int = OpId):
    return mutation(request, "operation.cancel", lambda: _cancel(request, op_id))
