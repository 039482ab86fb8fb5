"""Roles from identity-provider groups: GroupRoleRule rows applied to the groups a person's
last single sign-on login named (`SsoIdentity.groups`).

Evaluated at each login, at each job start (for the requester and the approvers) and when a
rule is added or removed. A rule only ever writes `Membership.rule_role` and the effective
`role` it feeds; an admin's grant stays as it was, so a rule never removes or lowers it.
Every change is in the audit log."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction

from stacks import audit
from stacks.models import Account, GroupRoleRule, Membership, Operation, Role, SsoIdentity

logger = logging.getLogger(__name__)

ACTOR = "group-rules"


def groups_of(user) -> list[str]:
    identity = SsoIdentity.objects.filter(user=user).only("groups").first()
    return [g for g in (identity.groups if identity else []) if isinstance(g, str)]


def roles_from_groups(groups: Iterable[str], accounts: list[Account] | None = None) -> dict[int, str]:
    """{account pk: the highest role any rule for these groups gives there}."""
    groups = set(groups)
    if not groups:
        return {}
    rules = list(GroupRoleRule.objects.filter(group__in=groups))
    if not rules:
        return {}
    if accounts is None:
        accounts = list(Account.objects.only("pk", "account_id", "name"))
    roles: dict[int, str] = {}
    for account in accounts:
        for rule in rules:
            current = roles.get(account.pk)
            if rule.matches(account) and (current is None or Role.rank(rule.role) > Role.rank(current)):
                roles[account.pk] = rule.role
    return roles


def refresh_user(user, *, reason: str) -> list[str]:
    """Bring the person's rule-derived roles in line with their stored groups. Returns the
    changes made, as the audit log words them ("alice: none->approver")."""
    desired = roles_from_groups(groups_of(user))
    name = user.get_username()
    changes: list[str] = []
    with transaction.atomic():
        rows = {m.account_id: m for m in Membership.objects.select_for_update().filter(user=user)}
        for account_pk in set(rows) | set(desired):
            row = rows.get(account_pk)
            want = desired.get(account_pk, "")
            if row is None:
                row = Membership(user=user, account_id=account_pk)
                row.combine("", want)
                row.save()
                changes.append(_audit(row, name, "none", reason))
                continue
            if row.rule_role == want:
                continue
            before, manual = row.role, row.manual_role
            if not manual and not want:
                row.delete()
                changes.append(_audit(row, name, before, reason, after="none"))
                continue
            row.combine(manual, want)
            row.save(update_fields=["role", "source", "granted_role", "rule_role"])
            changes.append(_audit(row, name, before, reason))
    return changes


def _audit(row: Membership, name: str, before: str, reason: str, *, after: str | None = None) -> str:
    after = after or row.role
    change = f"{name}: {before}->{after}" if before != after else f"{name}: rule role {row.rule_role or 'none'}"
    audit.record(
        "membership.changed",
        actor=ACTOR,
        account=row.account,
        result="ok",
        details={"change": change, "by": f"group rules ({reason})"},
    )
    return change


def refresh_everyone(*, reason: str) -> int:
    """After a rule changed: everyone who signed in through the provider, or still holds a
    rule role. Returns how many memberships changed."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(sso_identity__isnull=False) | get_user_model().objects.filter(
        memberships__rule_role__gt=""
    )
    return sum(len(refresh_user(user, reason=reason)) for user in users.distinct())


def refresh_for_operation(operation_id: int) -> None:
    """At job start: the requester's and the approvers' rule roles, from the groups of their
    last login, so the run's role checks see a person removed from a group (or a rule gone)."""
    op = Operation.objects.filter(pk=operation_id).select_related("requested_by").first()
    if op is None:
        return
    people = {a.approver_id: a.approver for a in op.approvals.select_related("approver")}
    if op.requested_by is not None:
        people[op.requested_by_id] = op.requested_by
    for user in people.values():
        refresh_user(user, reason=f"start of operation {op.pk}")
