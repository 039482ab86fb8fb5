"""Account settings: approval policy and people, for the account's admins only; audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from stacks.models import ApprovalPolicy, AuditEvent, Membership, Role
from tests.operations_ui.conftest import login
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db


def url(account, name: str = "account_settings", *args) -> str:
    return reverse(name, args=[account.account_id, *args])


def test_it_shows_policies_and_members_to_admins(client, ada, vera, prod):
    response = login(client, ada).get(url(prod))
    content = response.content.decode()
    assert response.status_code == 200
    assert 'id="policy-orphan"' in content and 'id="policy-destroy"' in content
    assert 'id="member-vera"' in content and 'id="member-ada"' in content


def test_it_refuses_non_admins_with_403_and_outsiders_with_404(client, arthur, otto, prod):
    assert login(client, arthur).get(url(prod)).status_code == 403
    assert (
        client.post(
            url(prod, "account_policy"), {"kind": "orphan", "approvers_needed": 1, "validity_hours": 1}
        ).status_code
        == 403
    )
    assert login(client, otto).get(url(prod)).status_code == 404
    assert not ApprovalPolicy.objects.exists()


def test_it_saves_a_policy_and_audits_it(client, ada, prod):
    data = {"kind": "orphan", "approval_required": "on", "approvers_needed": 2, "validity_hours": 4}
    response = login(client, ada).post(url(prod, "account_policy"), data, REMOTE_ADDR="10.1.1.1")
    assert response.status_code == 302
    policy = ApprovalPolicy.objects.get(account=prod, kind="orphan")
    assert (policy.approval_required, policy.approvers_needed, policy.validity_hours) == (True, 2, 4)
    event = AuditEvent.objects.get(action="policy.changed")
    assert (event.actor, event.account, event.details, event.client_address) == (
        "ada",
        prod,
        {"change": "orphan: 2x 4h"},
        "10.1.1.1",
    )
    client.post(url(prod, "account_policy"), {"kind": "orphan", "approvers_needed": 1, "validity_hours": 24})
    policy.refresh_from_db()
    assert policy.approval_required is False
    assert AuditEvent.objects.filter(action="policy.changed").first().details == {"change": "orphan: no approval"}


def test_it_refuses_a_bad_policy_with_400(client, ada, prod):
    login(client, ada)
    for bad in (
        {"kind": "orphan", "approvers_needed": 0, "validity_hours": 24},
        {"kind": "deploy", "approvers_needed": 1, "validity_hours": 24},
        {"kind": "orphan", "approvers_needed": "two", "validity_hours": 24},
    ):
        assert client.post(url(prod, "account_policy"), bad).status_code == 400
    assert not ApprovalPolicy.objects.exists() and not AuditEvent.objects.exists()


def test_it_adds_changes_and_removes_a_member(client, ada, prod):
    make_user("nina")
    login(client, ada)
    assert client.post(url(prod, "account_member_add"), {"username": "nina", "role": "operator"}).status_code == 302
    membership = Membership.objects.get(user__username="nina", account=prod)
    assert membership.role == Role.OPERATOR
    client.post(url(prod, "account_member_change", membership.pk), {"role": "approver"})
    membership.refresh_from_db()
    assert membership.role == Role.APPROVER
    client.post(url(prod, "account_member_remove", membership.pk))
    assert not Membership.objects.filter(user__username="nina").exists()
    results = list(e.details["change"] for e in AuditEvent.objects.filter(action="membership.changed").order_by("id"))
    assert results == ["nina: none->operator", "nina: operator->approver", "nina: approver->none"]


def test_it_refuses_unknown_people_duplicates_and_bad_roles(client, ada, vera, prod):
    login(client, ada)
    response = client.post(url(prod, "account_member_add"), {"username": "ghost", "role": "viewer"})
    assert response.status_code == 400 and b"No person is called" in response.content
    assert client.post(url(prod, "account_member_add"), {"username": "vera", "role": "admin"}).status_code == 409
    membership = Membership.objects.get(user=vera)
    assert client.post(url(prod, "account_member_change", membership.pk), {"role": "god"}).status_code == 400
    membership.refresh_from_db()
    assert membership.role == Role.VIEWER
    assert not AuditEvent.objects.exists()


def test_it_refuses_an_admin_changing_their_own_role(client, ada, prod):
    own = Membership.objects.get(user=ada)
    login(client, ada)
    assert client.post(url(prod, "account_member_change", own.pk), {"role": "viewer"}).status_code == 400
    assert client.post(url(prod, "account_member_remove", own.pk)).status_code == 400
    own.refresh_from_db()
    assert own.role == Role.ADMIN


def test_it_404s_a_membership_of_another_account(client, ada, otto, prod):
    theirs = Membership.objects.get(user=otto)
    login(client, ada)
    assert client.post(url(prod, "account_member_remove", theirs.pk)).status_code == 404
    assert Membership.objects.filter(pk=theirs.pk).exists()


def test_it_lets_a_superuser_manage_any_account(client, root, prod):
    assert login(client, root).get(url(prod)).status_code == 200


def test_it_links_settings_from_the_accounts_page_for_admins(client, ada, vera, prod):
    assert url(prod).encode() in login(client, ada).get(reverse("accounts")).content
    assert url(prod).encode() not in login(client, vera).get(reverse("accounts")).content
