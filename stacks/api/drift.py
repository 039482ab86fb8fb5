"""A stack's drift from a script: its latest check (what the Drift panel shows) and a check
now (queued on the "sync" queue, one live check per stack: stacks.drift.request_check)."""

from __future__ import annotations

from typing import Any

from ninja import Path, Router
from redis.exceptions import RedisError

from stacks import drift
from stacks.access import get_stack_or_404
from stacks.api.common import ApiError, mutation, target
from stacks.api.schemas import ACCOUNT_PATTERN, TEXT_PATTERN, DriftCheckOut, DriftQueuedOut, ErrorOut
from stacks.audit import client_ip
from stacks.models import DriftCheck

router = Router(tags=["drift"])
READ_ERRORS = {401: ErrorOut, 404: ErrorOut, 422: ErrorOut}
WRITE_ERRORS = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut, 503: ErrorOut}
STACK_PATH = "/stacks/{account_id}/{region_slug}/{stack_name}"


def check_out(check: DriftCheck) -> dict[str, Any]:
    return {
        "id": check.pk,
        "checked_at": check.checked_at,
        "trigger": check.trigger,
        "record_etag": check.record_etag,
        "drifted": check.drifted,
        "errors": check.errors,
        "counts": check.counts or {},
        "api_calls": check.api_calls,
        "error": check.error,
        "resources": [r for r in check.resources or [] if isinstance(r, dict)],
    }


@router.get(f"{STACK_PATH}/drift", response={200: DriftCheckOut, **READ_ERRORS}, summary="A stack's latest drift check")
def latest_drift(
    request,
    account_id: str = Path(..., pattern=ACCOUNT_PATTERN),
    region_slug: str = Path(..., max_length=80, pattern=TEXT_PATTERN),
    stack_name: str = Path(..., max_length=1024, pattern=TEXT_PATTERN),
):
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    check = drift.latest_for_stack(stack)
    if check is None:
        raise ApiError(404, f"No drift check of {stack.stack_name} yet: POST …/drift-check to queue one.")
    return check_out(check)


def _check_now(request, account_id: str, region_slug: str, stack_name: str) -> tuple[int, dict]:
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    target(request, account=stack.account, stack_name=stack.stack_name, region=stack.region)
    try:
        queued = drift.request_check(request.user, stack, client_address=client_ip(request))
    except RedisError as exc:
        raise ApiError(503, "The job queue (Redis) cannot be reached: nothing was queued.") from exc
    message = "queued" if queued else "a check of this stack is already queued or running"
    return 202, {"queued": queued, "message": message}


@router.post(
    f"{STACK_PATH}/drift-check",
    response={202: DriftQueuedOut, **WRITE_ERRORS},
    summary="Queue a drift check of a stack now; GET …/drift reads its result once stored",
)
def check_drift(
    request,
    account_id: str = Path(..., pattern=ACCOUNT_PATTERN),
    region_slug: str = Path(..., max_length=80, pattern=TEXT_PATTERN),
    stack_name: str = Path(..., max_length=1024, pattern=TEXT_PATTERN),
):
    return mutation(request, "drift.check", lambda: _check_now(request, account_id, region_slug, stack_name))
