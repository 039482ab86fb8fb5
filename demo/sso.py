"""The demo's single sign-on and API set-up, run inside Django once the accounts and people
exist (scripts/demo.py does; each is safe to run again):

    manage.py shell -c "from demo.sso import seed_rule; seed_rule()"
        the group rule `platform-leads` -> approver on every account whose name matches
        `Prod*` (the demo's Production account), added as an admin would, audited;
    manage.py shell -c "from demo.sso import seed_token; seed_token()"
        a read-only API token of olivia, printed once (to the demo's console only); the
        tokens earlier demo runs made for her are revoked first, audited.

The person who signs in through the loopback provider (demo/oidc_provider) is made by that
provider; this app makes her at her first login and gives her the rule's role then.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from stacks import audit, grouproles
from stacks.api.tokens import create_token, revoke_token
from stacks.models import Account, ApiToken, GroupRoleRule, Role

GROUP = "platform-leads"
PATTERN = "Prod*"
TOKEN_PERSON = "olivia"
TOKEN_NAME = "demo console (read-only)"
TOKEN_DAYS = 7


def seed_rule() -> GroupRoleRule:
    rule = GroupRoleRule.objects.filter(group=GROUP, account_pattern=PATTERN).first()
    matched = [a.label for a in Account.objects.order_by("name") if GroupRoleRule(account_pattern=PATTERN).matches(a)]
    if rule is None:
        with transaction.atomic():
            rule = GroupRoleRule.objects.create(
                group=GROUP, account_pattern=PATTERN, role=Role.APPROVER, created_by="admin"
            )
            audit.record(
                "group_rule.changed",
                actor="admin",
                actor_user=get_user_model().objects.filter(username="admin").first(),
                result="ok",
                details={"change": f"added {rule.group} -> {rule.role} on {rule.target}", "by": "the demo's set-up"},
            )
            grouproles.refresh_everyone(reason="rule added by the demo's set-up")
    print(f"  SSO        group rule {rule.group} -> {rule.role} on {rule.target} ({', '.join(matched) or 'none yet'})")
    return rule


def seed_token() -> str:
    user = get_user_model().objects.get(username=TOKEN_PERSON)
    for old in ApiToken.objects.filter(user=user, name=TOKEN_NAME, revoked_at__isnull=True):
        revoke_token(user, old)  # a restarted demo hands out a new one
    _token, secret = create_token(
        user, TOKEN_NAME, expires_at=timezone.now() + timedelta(days=TOKEN_DAYS), read_only=True
    )
    print(secret)  # read by scripts/demo.py from this process's stdout, shown once on its console
    return secret
