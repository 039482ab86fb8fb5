"""The audit log and the event history (deployment runs), filtered as on their pages and
a page at a time; one run with its events, credential shapes masked (`masked_event`, the
run page's own masker)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from ninja import Path, Query, Router
from pydantic import Field, field_validator, model_validator

from stacks.access import get_account_or_404
from stacks.api.common import ApiError, page_of
from stacks.api.schemas import ACCOUNT_PATTERN, TEXT_PATTERN, AuditPage, ErrorOut, Input, RunDetailOut, RunPage
from stacks.columns import storable_time
from stacks.models import EVENT_TYPES, RUN_COMMANDS, AuditEvent, DeploymentRun, RunResult
from stacks.views.audit import filter_events, visible_events
from stacks.views.events import filter_runs, masked_event, visible_runs

router = Router()
ERRORS = {400: ErrorOut, 401: ErrorOut, 404: ErrorOut, 422: ErrorOut}


class _Period(Input):
    since: datetime | None = Field(None, description="From (ISO 8601)")
    until: datetime | None = Field(None, description="To (ISO 8601)")
    page: int = Field(1, ge=1, le=100000)
    page_size: int | None = Field(None, ge=1, le=200)

    @field_validator("since", "until")
    @classmethod
    def _storable(cls, value: datetime | None) -> datetime | None:
        # In UTC (PostgreSQL refuses some offsets Python accepts), naive read as UTC, and in
        # the years the database keeps.
        if value is None:
            return None
        moment = storable_time(value if value.tzinfo else value.replace(tzinfo=UTC))
        if moment is None:
            raise ValueError("must be a time between the years 2 and 9998")
        return moment

    @model_validator(mode="after")
    def _ordered(self):
        if self.since and self.until and self.since > self.until:
            raise ValueError("The end of the period (until) is before its start (since).")
        return self


class AuditFilters(_Period):
    account: str | None = Field(None, pattern=ACCOUNT_PATTERN)
    actor: str = Field("", max_length=255, description="The person (exactly, case-blind)")
    action: str = Field("", max_length=64, description="An action, or its beginning (`operation.`)")
    stack: str = Field("", max_length=1024, description="In the stack's name")


def audit_out(e: AuditEvent) -> dict:
    return {
        "id": e.pk,
        "at": e.created_at,
        "actor": e.actor,
        "action": e.action,
        "account_id": e.account_ref,
        "stack_name": e.stack_name,
        "region": e.region,
        "operation": e.operation_id,
        "operation_kind": e.operation_kind,
        "plan_digest": e.plan_digest,
        "etag_before": e.etag_before,
        "etag_after": e.etag_after,
        "result": e.result,
        "error": e.error,
        "client_address": e.client_address,
        "details": e.details if isinstance(e.details, dict) else {},
        "prev_hash": e.prev_hash,
        "hash": e.hash,
    }


@router.get("/audit", response={200: AuditPage, **ERRORS}, tags=["audit"], summary="The audit log, newest first")
def list_audit(request, filters: Query[AuditFilters]):
    events = filter_events(visible_events(request.user), filters.dict())
    return page_of(events, filters.page, filters.page_size, audit_out)


class RunFilters(_Period):
    account: str | None = Field(None, pattern=ACCOUNT_PATTERN)
    stack: str = Field("", max_length=1024, description="In the stack's name")
    region: str = Field("", max_length=64)
    command: Literal[tuple(RUN_COMMANDS)] | None = None  # type: ignore[valid-type]
    result: Literal[tuple(RunResult.values)] | None = None  # type: ignore[valid-type]
    event_type: Literal[tuple(EVENT_TYPES)] | None = Field(None, description="Runs holding an event of this type")  # type: ignore[valid-type]
    person: str = Field("", max_length=255, description="Requester of the operation that caused the run")


def run_out(run: DeploymentRun) -> dict:
    return {
        "account_id": run.account.account_id,
        "stack_name": run.stack_name,
        "region": run.region,
        "run_id": run.run_id,
        "command": run.command,
        "cdkd_version": run.cdkd_version,
        "started_at": run.started_at_raw,
        "finished_at": run.finished_at_raw,
        "result": run.result,
        "event_count": run.event_count,
        "in_index": run.in_index,
        "has_stream": run.has_stream,
        "operation": run.operation_id,
        "person": run.operation.requester_name if run.operation else None,
    }


@router.get("/events", response={200: RunPage, **ERRORS}, tags=["events"], summary="Deployment runs, newest first")
def list_runs(request, filters: Query[RunFilters]):
    runs = filter_runs(visible_runs(request.user), filters.dict())
    return page_of(runs, filters.page, filters.page_size, run_out)


@router.get(
    "/events/{account_id}/{region}/{stack_name}/{run_id}",
    response={200: RunDetailOut, **ERRORS},
    tags=["events"],
    summary="One run with its events in order",
)
def get_run(
    request,
    account_id: str = Path(..., pattern=ACCOUNT_PATTERN),
    region: str = Path(..., max_length=64, pattern=TEXT_PATTERN),
    stack_name: str = Path(..., max_length=1024, pattern=TEXT_PATTERN),
    run_id: str = Path(..., max_length=128, pattern=TEXT_PATTERN),
):
    account = get_account_or_404(request.user, account_id)
    run = (
        DeploymentRun.objects.filter(account=account, stack_name=stack_name, region=region, run_id=run_id)
        .select_related("account", "operation")
        .first()
    )
    if run is None:
        raise ApiError(404, "No such run.")
    events = [masked_event(e.raw) for e in run.events.order_by("seq").only("raw")]
    return {**run_out(run), "events": [e if isinstance(e, dict) else {"raw": e} for e in events]}
