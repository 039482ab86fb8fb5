"""Stacks (with the stacks page's filters and sorts), one stack with its resources, lock,
warnings and the repair actions it offers, and a resource search across accounts.

Every query starts from `stacks.access`, so a token sees what its person sees on the pages;
a record is read masked (`stacks.views.detail.parse_stack`, the pages' own reader)."""

from __future__ import annotations

from typing import Literal

from django.db.models import Q, Subquery
from ninja import Path, Query, Router
from pydantic import Field

from stacks.access import get_stack_or_404, stacks_for
from stacks.actions import stack_actions
from stacks.api.common import page_of
from stacks.api.schemas import (
    ACCOUNT_PATTERN,
    TEXT_PATTERN,
    ErrorOut,
    Input,
    LockStateName,
    ResourcePage,
    StackDetailOut,
    StackPage,
)
from stacks.columns import utf8_safe
from stacks.models import Lock, Resource, Stack, now_ms
from stacks.secretmask import mask_string
from stacks.views import present
from stacks.views.detail import parse_stack, stack_warnings
from stacks.views.listing import SORTS, filter_stacks

router = Router(tags=["stacks"])
ERRORS = {401: ErrorOut, 404: ErrorOut, 422: ErrorOut}

SortName = Literal[tuple(SORTS) + tuple(f"-{k}" for k in SORTS)]  # type: ignore[valid-type]


class StackFilters(Input):
    """The stacks page's search box and filters; every one optional."""

    q: str = Field("", max_length=200, description="In stack names, logical and physical resource ids")
    account: str | None = Field(None, pattern=ACCOUNT_PATTERN)
    region: str = Field("", max_length=64, description="A region, or `legacy` for records without one")
    lock: LockStateName | None = None
    defects: Literal["yes", "no"] | None = None
    version: int | None = Field(None, ge=0, le=2**31 - 1, description="The record's schema version")
    nesting: Literal["top", "nested"] | None = None
    sort: SortName = Field("name", description="A column, `-` first for descending")  # type: ignore[valid-type]
    page: int = Field(1, ge=1, le=100000)
    page_size: int | None = Field(None, ge=1, le=200)


def _ms(value) -> int | None:
    return value if isinstance(value, int) else None


def stack_out(stack: Stack) -> dict:
    """A row of the stacks table; `stack` comes from `filter_stacks` (lock state, last run
    and findings annotated)."""
    return {
        "account_id": stack.account.account_id,
        "stack_name": stack.stack_name,
        "region": stack.region,
        "region_slug": stack.region_slug,
        "legacy": stack.legacy,
        "schema_version": stack.schema_version,
        "read_only": stack.read_only,
        "resource_count": stack.resource_count,
        "output_count": stack.output_count,
        "has_defects": stack.has_defects,
        "lock_state": stack.lock_state,
        "depth": stack.depth,
        "parent_stack_name": stack.parent_stack_name,
        "record_last_modified_ms": _ms(stack.record_last_modified),
        "last_run_id": stack.last_run_id,
        "last_run_result": stack.last_run_result,
        "secret_findings": stack.secret_count or 0,
        "etag": stack.etag,
        "synced_at": stack.synced_at,
    }


@router.get("/stacks", response={200: StackPage, **ERRORS}, summary="List stacks, filtered as on the stacks page")
def list_stacks(request, filters: Query[StackFilters]):
    chosen = filters.dict(exclude={"sort", "page", "page_size"})
    chosen["q"] = chosen["q"].strip()
    stacks = filter_stacks(stacks_for(request.user), chosen, now_ms(), filters.sort)
    return page_of(stacks, filters.page, filters.page_size, stack_out)


def _lock_out(lock: Lock | None, at_ms: int) -> dict | None:
    if lock is None:
        return None
    return {
        "state": lock.state(at_ms),
        "owner": lock.owner,
        "operation": lock.operation,
        "timestamp_ms": lock.timestamp_ms,
        "expires_at_ms": lock.expires_at_ms,
        "readable": lock.readable,
        "error": lock.error,
    }


def _resources(stack: Stack) -> tuple[list[dict], list[dict]]:
    parsed = parse_stack(stack)  # masked, as the stack page reads it
    rows = []
    for logical_id, row in parsed.resource_rows():
        view = present.resource_row(logical_id, row, None, {})
        rows.append(
            {
                "logical_id": utf8_safe(view.logical_id),
                "resource_type": utf8_safe(view.resource_type),
                "physical_id": utf8_safe(view.physical_id),
                "provisioned_by": utf8_safe(view.provisioned_by),
                "deletion_policy": utf8_safe(view.deletion_policy),
                "malformed": view.malformed,
            }
        )
    warnings = [
        {"code": w.code, "path": utf8_safe(w.path), "message": utf8_safe(w.message), "blocking": w.blocking}
        for w in stack_warnings(stack, parsed)
    ]
    return rows, warnings


@router.get(
    "/stacks/{account_id}/{region_slug}/{stack_name}",
    response={200: StackDetailOut, **ERRORS},
    summary="One stack: its resources, lock, warnings and the repair operations it offers you",
)
def get_stack(
    request,
    account_id: str = Path(..., pattern=ACCOUNT_PATTERN),
    region_slug: str = Path(..., max_length=80, pattern=TEXT_PATTERN),
    stack_name: str = Path(..., max_length=1024, pattern=TEXT_PATTERN),
):
    found = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    at_ms = now_ms()
    stack = filter_stacks(Stack.objects.filter(pk=found.pk), {}, at_ms).first()
    lock = Lock.objects.filter(stack=stack).first()
    resources, warnings = _resources(stack)
    actions = stack_actions(request.user, stack, lock=lock, lock_known=True)
    return {
        **stack_out(stack),
        "lock": _lock_out(lock, at_ms),
        "resources": resources,
        "warnings": warnings,
        "actions": [{"kind": a.kind, "allowed": a.allowed, "reason": a.reason} for a in actions.buttons],
    }


class ResourceFilters(Input):
    q: str = Field("", max_length=300, description="In logical and physical ids")
    type: str = Field("", max_length=255, description="A resource type, exactly (AWS::SQS::Queue)")
    account: str | None = Field(None, pattern=ACCOUNT_PATTERN)
    region: str = Field("", max_length=64)
    page: int = Field(1, ge=1, le=100000)
    page_size: int | None = Field(None, ge=1, le=200)


def _hit(resource: Resource) -> dict:
    stack = resource.stack
    return {
        "account_id": stack.account.account_id,
        "stack_name": stack.stack_name,
        "region": stack.region,
        "region_slug": stack.region_slug,
        "logical_id": resource.logical_id,
        "resource_type": resource.resource_type,
        # The mirror's column is the record's value: masked as the stack page masks it.
        "physical_id": mask_string(resource.physical_id),
        "provisioned_by": resource.provisioned_by or "(sdk, legacy default)",
        "deletion_policy": resource.deletion_policy,
        "malformed": resource.malformed,
    }


@router.get(
    "/resources", response={200: ResourcePage, **ERRORS}, tags=["resources"], summary="Search resources across accounts"
)
def search_resources(request, filters: Query[ResourceFilters]):
    resources = Resource.objects.filter(stack__in=Subquery(stacks_for(request.user).values("pk")))
    if q := filters.q.strip():
        resources = resources.filter(Q(logical_id__icontains=q) | Q(physical_id__icontains=q))
    if filters.type:
        resources = resources.filter(resource_type=filters.type)
    if filters.account:
        resources = resources.filter(stack__account__account_id=filters.account)
    if region := filters.region:
        resources = (
            resources.filter(stack__legacy=True) if region == "legacy" else resources.filter(stack__region=region)
        )
    resources = resources.select_related("stack", "stack__account").order_by(
        "stack__account__account_id", "stack__stack_name", "stack__region", "logical_id", "pk"
    )
    return page_of(resources, filters.page, filters.page_size, _hit)
