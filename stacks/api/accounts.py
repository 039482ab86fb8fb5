"""Accounts the caller holds a role on (the accounts page's list)."""

from __future__ import annotations

from django.db.models import Count, Q
from ninja import Path, Query, Router

from stacks.access import accounts_for, get_account_or_404, role_on
from stacks.api.common import page_of
from stacks.api.schemas import ACCOUNT_PATTERN, AccountOut, AccountPage, ErrorOut
from stacks.models import Account

router = Router(tags=["accounts"])
ERRORS = {401: ErrorOut, 404: ErrorOut, 422: ErrorOut}


def _counted(user):
    return accounts_for(user).annotate(
        stack_count=Count("stacks", distinct=True),
        defect_count=Count("stacks", filter=Q(stacks__has_defects=True), distinct=True),
    )


def account_out(user, account: Account) -> dict:
    return {
        "account_id": account.account_id,
        "name": account.name,
        "role": role_on(user, account),
        "bucket": account.resolved_bucket,
        "bucket_status": account.bucket_status,
        "bucket_message": account.bucket_message,
        "last_synced_at": account.last_synced_at,
        "last_sync_error": account.last_sync_error,
        "stack_count": account.stack_count,
        "defect_count": account.defect_count,
    }


@router.get("/accounts", response={200: AccountPage, **ERRORS}, summary="List the accounts you hold a role on")
def list_accounts(request, page: int = Query(1, ge=1, le=100000), page_size: int = Query(None, ge=1, le=200)):
    accounts = _counted(request.user).order_by("name", "account_id")
    return page_of(accounts, page, page_size, lambda a: account_out(request.user, a))


@router.get("/accounts/{account_id}", response={200: AccountOut, **ERRORS}, summary="One account")
def get_account(request, account_id: str = Path(..., pattern=ACCOUNT_PATTERN)):
    get_account_or_404(request.user, account_id)
    return account_out(request.user, _counted(request.user).get(account_id=account_id))
