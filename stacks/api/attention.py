"""The attention board (stacks.attention, the board page's own builder): every stuck or
unsafe stack or bucket of the accounts the caller sees, its evidence and next step."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Query, Router, Schema
from pydantic import Field

from stacks import attention
from stacks.api.common import page_of
from stacks.api.schemas import ACCOUNT_PATTERN, ErrorOut, Input, PageOut
from stacks.attentionrows import KINDS, Context, Row

router = Router(tags=["attention"])

AttentionKind = Literal[tuple(k for k, _label in KINDS)]  # type: ignore[valid-type]


class AttentionFilters(Input):
    account: str | None = Field(None, pattern=ACCOUNT_PATTERN)
    kind: AttentionKind | None = None  # type: ignore[valid-type]
    page: int = Field(1, ge=1, le=100000)
    page_size: int | None = Field(None, ge=1, le=200)


class StepOut(Schema):
    label: str
    operation: str = Field(..., description="The operation kind to request, when the step is one")
    url: str
    method: str
    command: str
    allowed: bool
    reason: str
    approval: str
    advice: str


class AttentionRowOut(Schema):
    kind: AttentionKind  # type: ignore[valid-type]
    problem: str
    account_id: str
    target: Literal["stack", "bucket"]
    stack_name: str
    region: str | None
    legacy: bool
    since: str | None
    evidence: list[str]
    next_step: StepOut


class AttentionCounts(Schema):
    total: int = Field(..., description="Every row of the caller's accounts, before the filters")
    by_account: dict[str, int]
    by_kind: dict[str, int]


class AttentionPage(PageOut):
    counts: AttentionCounts
    items: list[AttentionRowOut]


def row_out(row: Row) -> dict[str, Any]:
    data = row.as_json()
    return {
        "kind": data["kind"],
        "problem": data["problem"],
        "account_id": data["account"],
        "target": data["target"],
        "stack_name": data["stack"],
        "region": data["region"],
        "legacy": data["legacy"],
        "since": data["since"],
        "evidence": [str(e) for e in data["evidence"]],
        "next_step": data["nextStep"],
    }


@router.get(
    "/attention",
    response={200: AttentionPage, 401: ErrorOut, 422: ErrorOut},
    summary="What needs attention, as on the attention board",
)
def list_attention(request, filters: Query[AttentionFilters]):
    board = attention.build(Context.for_user(request.user), account_id=filters.account, kind=filters.kind)
    counts = {
        "total": board.total,
        "by_account": {a.account_id: n for a, n in board.by_account},
        "by_kind": {k: n for k, _label, n in board.by_kind},
    }
    return {"counts": counts, **page_of(board.rows, filters.page, filters.page_size, row_out)}
