"""The demo's single sign-on and API set-up (demo/sso.py, which scripts/demo.py runs): the
group rule on the production account, audited and added once; olivia's read-only token,
which the real API takes and a restarted demo replaces."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from demo.sso import seed_rule, seed_token
from stacks.models import Account, ApiToken, AuditEvent, GroupRoleRule, Membership, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_people():
    users = get_user_model().objects
    users.create_user("admin", is_superuser=True, is_staff=True)
    olivia = users.create_user("olivia")
    prod = Account.objects.create(account_id="111111111111", name="Production")
    staging = Account.objects.create(account_id="222222222222", name="Staging")
    for account in (prod, staging):
        Membership.objects.create(user=olivia, account=account, role=Role.OPERATOR)
    return {"prod": prod, "staging": staging, "olivia": olivia}


def test_it_adds_the_platform_leads_rule_on_production_once_and_audited(demo_people, capsys):
    rule = seed_rule()
    assert seed_rule() == rule  # a restarted demo keeps it

    assert list(GroupRoleRule.objects.values_list("group", "account_pattern", "role")) == [
        ("platform-leads", "Prod*", "approver")
    ]
    assert rule.matches(demo_people["prod"]) and not rule.matches(demo_people["staging"])
    [event] = AuditEvent.objects.filter(action="group_rule.changed")
    assert event.actor == "admin"
    assert event.details["change"] == "added platform-leads -> approver on accounts matching Prod*"
    assert "group rule platform-leads -> approver on accounts matching Prod* (Production)" in capsys.readouterr().out


def test_it_makes_a_read_only_token_the_api_takes_and_revokes_the_last_runs(demo_people, capsys):
    first = seed_token()
    second = seed_token()
    printed = capsys.readouterr().out.split()
    assert printed == [first, second] and first != second

    tokens = list(ApiToken.objects.filter(user=demo_people["olivia"]).order_by("id"))
    assert [(t.read_only, t.revoked_at is not None) for t in tokens] == [(True, True), (True, False)]
    for token, secret in zip(tokens, (first, second), strict=True):
        assert secret not in token.token_hash and secret.startswith(token.prefix)  # stored hashed
    api = Client()
    assert api.get("/api/v1/stacks", HTTP_AUTHORIZATION=f"Bearer {second}").status_code == 200
    assert api.get("/api/v1/stacks", HTTP_AUTHORIZATION=f"Bearer {first}").status_code == 401
    refused = api.post(
        "/api/v1/operations",
        {"account_id": "111111111111", "kind": "force-unlock", "stack_name": "X", "region_slug": "us-east-1"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {second}",
    )
    assert refused.status_code == 403  # read-only: it requests nothing
