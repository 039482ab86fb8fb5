"""Who may see and do what, per account. Every view and job asks here; templates only
hide buttons that these checks would refuse anyway."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.http import Http404

from stacks.models import Account, Membership, Role, Stack

AnyUser = AbstractBaseUser | AnonymousUser


def role_on(user: AnyUser, account: Account) -> str | None:
    """The person's role on the account; superusers are admins everywhere."""
    if not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return Role.ADMIN
    membership = Membership.objects.filter(user=user, account=account).only("role").first()
    return membership.role if membership else None


def has_role(user: AnyUser, account: Account, minimum: str) -> bool:
    role = role_on(user, account)
    return role is not None and Role.rank(role) >= Role.rank(minimum)


def accounts_for(user: AnyUser, minimum: str = Role.VIEWER) -> QuerySet[Account]:
    """The accounts on which the person holds at least `minimum`."""
    if not user.is_authenticated or not user.is_active:
        return Account.objects.none()
    if user.is_superuser:
        return Account.objects.all()
    ranked = [r for r in Role.values if Role.rank(r) >= Role.rank(minimum)]
    return Account.objects.filter(memberships__user=user, memberships__role__in=ranked)


def get_account_or_404(user: AnyUser, account_id: str, minimum: str = Role.VIEWER) -> Account:
    """404, not 403, for an account the person may not see: its existence is not theirs to know."""
    account = accounts_for(user, minimum).filter(account_id=account_id).first()
    if account is None:
        raise Http404("No such account")
    return account


def stacks_for(user: AnyUser) -> QuerySet[Stack]:
    # Listings never show a body: leave it (ciphertext, decrypted per row) in the database.
    return Stack.objects.filter(account__in=accounts_for(user)).defer("body")


def get_stack_or_404(user: AnyUser, account_id: str, region_slug: str, stack_name: str) -> Stack:
    account = get_account_or_404(user, account_id)
    legacy = region_slug == "legacy" or region_slug.startswith("legacy-")
    region = (region_slug.removeprefix("legacy").removeprefix("-") or None) if legacy else region_slug
    stack = Stack.objects.filter(account=account, stack_name=stack_name, region=region, legacy=legacy).first()
    if stack is None:
        raise Http404("No such stack")
    return stack
