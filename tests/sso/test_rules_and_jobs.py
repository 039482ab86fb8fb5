"""Group rules: the account admins' page (audited, per-account permissions) and the
re-evaluation at job start, with people who signed in at the real test provider."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from stacks import jobs
from stacks.access import role_on
from stacks.models import (
    ApprovalPolicy,
    AuditEvent,
    GroupRoleRule,
    Membership,
    Operation,
    OperationStatus,
)
from tests.operations_ui.conftest import make_operation
from tests.sso.conftest import PASSWORD, sso_login
from tests.views.conftest import make_account

pytestmark = pytest.mark.django_db


@pytest.fixture
def prod(db):
    return make_account("111111111111", "prod-payments")


@pytest.fixture
def dev(db):
    return make_account("333333333333", "dev-sandbox")


def admin_of(account, name="ada"):
    user = User.objects.create_user(name, password="pw")
    Membership.objects.create(user=user, account=account, role="admin")
    return user


def test_it_lets_an_account_admin_add_and_remove_a_rule_audited(client, sso, prod, dev):
    ada = admin_of(prod)
    sso.user("alice", PASSWORD, "deployers")
    sso_login(client, "alice")
    alice = User.objects.get(username="alice")
    assert role_on(alice, prod) is None
    client.force_login(ada)

    response = client.post(f"/accounts/{prod.account_id}/settings/rules/", {"group": "deployers", "role": "operator"})

    assert response.status_code == 302
    rule = GroupRoleRule.objects.get()
    assert (rule.group, rule.account, rule.account_pattern, rule.role, rule.created_by) == (
        "deployers",
        prod,
        "",
        "operator",
        "ada",
    )
    assert role_on(alice, prod) == "operator" and role_on(alice, dev) is None  # applied at once
    added = AuditEvent.objects.get(action="group_rule.changed")
    assert (added.actor, added.account, added.details["change"]) == (
        "ada",
        prod,
        f"added deployers -> operator on {prod}",
    )
    page = client.get(f"/accounts/{prod.account_id}/settings/").content.decode()
    assert 'id="group-rules"' in page and "deployers" in page and "by group rules only" in page

    response = client.post(f"/accounts/{prod.account_id}/settings/rules/{rule.pk}/remove/")
    assert response.status_code == 302
    assert not GroupRoleRule.objects.exists()
    assert role_on(alice, prod) is None
    assert AuditEvent.objects.filter(action="group_rule.changed", details__change__startswith="removed").exists()


def test_it_refuses_pattern_rules_and_other_accounts_to_an_account_admin(client, prod, dev):
    client.force_login(admin_of(prod))
    response = client.post(
        f"/accounts/{prod.account_id}/settings/rules/", {"group": "leads", "role": "admin", "account_pattern": "*"}
    )
    assert response.status_code == 403 and not GroupRoleRule.objects.exists()
    assert (
        client.post(f"/accounts/{dev.account_id}/settings/rules/", {"group": "x", "role": "viewer"}).status_code == 404
    )
    other = GroupRoleRule.objects.create(group="x", account=dev, role="viewer")
    assert client.post(f"/accounts/{prod.account_id}/settings/rules/{other.pk}/remove/").status_code == 404
    assert GroupRoleRule.objects.filter(pk=other.pk).exists()
    bad = client.post(f"/accounts/{prod.account_id}/settings/rules/", {"group": "", "role": "king"})
    assert bad.status_code == 400 and not GroupRoleRule.objects.filter(account=prod).exists()


def test_it_lets_a_superuser_add_a_pattern_rule(client, sso, prod, dev):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    response = client.post(
        f"/accounts/{prod.account_id}/settings/rules/",
        {"group": "leads", "role": "approver", "account_pattern": "prod-*"},
    )
    assert response.status_code == 302
    rule = GroupRoleRule.objects.get()
    assert rule.account is None and rule.matches(prod) and not rule.matches(dev)


def test_it_refuses_at_job_start_a_requester_whose_group_is_gone(client, sso, prod):
    GroupRoleRule.objects.create(group="deployers", account=prod, role="operator")
    ApprovalPolicy.objects.create(account=prod, kind="orphan", approval_required=False)
    sso.user("alice", PASSWORD, "deployers")
    sso_login(client, "alice")
    alice = User.objects.get(username="alice")
    op = make_operation(prod, alice, status=OperationStatus.QUEUED)
    # Removed from the group at the provider; she signs in again before the job runs.
    sso.user("alice", PASSWORD)
    client.logout()
    sso_login(client, "alice")

    jobs.run_operation(op.pk)

    op.refresh_from_db()
    assert op.status == OperationStatus.REFUSED
    assert op.error == f"Refused at start: alice no longer holds the operator role on {prod}"


def test_it_reevaluates_rules_at_job_start_for_requester_and_approvers(client, sso, prod):
    """No login in between: the pattern stopped matching when the account was renamed, and
    only the job start's re-evaluation notices."""
    GroupRoleRule.objects.create(group="deployers", account_pattern="prod-*", role="operator")
    GroupRoleRule.objects.create(group="leads", account_pattern="prod-*", role="approver")
    sso.user("alice", PASSWORD, "deployers")
    sso.user("bob", PASSWORD, "leads")
    sso_login(client, "alice")
    client.logout()
    sso_login(client, "bob")
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    op = make_operation(prod, alice, status=OperationStatus.QUEUED)
    op.approvals.create(approver=bob, approved=True, plan_digest=op.plan_digest, plan_etag=op.plan_etag)
    assert role_on(alice, prod) == "operator" and role_on(bob, prod) == "approver"
    type(prod).objects.filter(pk=prod.pk).update(name="retired-payments")

    jobs.run_operation(op.pk)

    op = Operation.objects.get(pk=op.pk)
    assert op.status == OperationStatus.REFUSED
    assert "alice no longer holds the operator role" in op.error
    assert role_on(alice, prod) is None and role_on(bob, prod) is None
    reasons = AuditEvent.objects.filter(
        action="membership.changed", details__by=f"group rules (start of operation {op.pk})"
    )
    assert reasons.count() == 2


def test_it_never_removes_a_manual_grant_when_a_rule_goes(sso, prod):
    from stacks.grouproles import refresh_user
    from stacks.models import SsoIdentity

    carol = User.objects.create_user("carol")
    SsoIdentity.objects.create(
        user=carol, issuer=sso.issuer, subject="9", groups=["leads"], last_login_at="2026-01-01T00:00Z"
    )
    Membership.objects.create(user=carol, account=prod, role="operator")
    rule = GroupRoleRule.objects.create(group="leads", account=prod, role="admin")
    refresh_user(carol, reason="test")
    row = Membership.objects.get(user=carol)
    assert (row.role, row.source, row.granted_role, row.rule_role) == ("admin", "manual", "operator", "admin")
    rule.delete()
    refresh_user(carol, reason="test")
    row = Membership.objects.get(user=carol)
    assert (row.role, row.source, row.rule_role) == ("operator", "manual", "")
