"""The installation's approval floor (CDKD_MIN_APPROVERS_<KIND>; destroy 1 by default): no
account policy goes below it. Ada (admin) cannot switch destroy's approval off or lower it,
and a policy row that says otherwise (saved before the floor, or edited in the database)
does not let Olivia's destroy run without Arthur's approval."""

from __future__ import annotations

import pytest
from django.urls import reverse

from stacks import operations
from stacks.models import ApprovalPolicy, AuditEvent, Operation, OperationStatus
from tests.operations_ui.conftest import login

pytestmark = pytest.mark.django_db


def policy_url(account) -> str:
    return reverse("account_policy", args=[account.account_id])


def test_the_defaults_require_one_approver_for_destroy_only(settings):
    assert settings.CDKD_MIN_APPROVERS_DESTROY == 1 and settings.CDKD_MIN_APPROVERS_DEPLOY == 1
    assert settings.CDKD_MIN_APPROVERS_ORPHAN == 0 and settings.CDKD_MIN_APPROVERS_FORCE_UNLOCK == 0


def test_an_admin_cannot_switch_destroy_approval_off(client, ada, prod):
    response = login(client, ada).post(
        policy_url(prod), {"kind": "destroy", "approvers_needed": 1, "validity_hours": 24}
    )

    assert response.status_code == 400
    page = response.content.decode()
    assert "destroy needs at least 1 approver(s) on every account (CDKD_MIN_APPROVERS_DESTROY=1)" in page
    assert "__all__" not in page
    assert not ApprovalPolicy.objects.exists() and not AuditEvent.objects.exists()


def test_an_admin_cannot_go_below_a_raised_floor_but_may_meet_it(client, ada, prod, settings):
    settings.CDKD_MIN_APPROVERS_DESTROY = 2
    login(client, ada)
    below = {"kind": "destroy", "approval_required": "on", "approvers_needed": 1, "validity_hours": 24}
    assert client.post(policy_url(prod), below).status_code == 400
    assert not ApprovalPolicy.objects.exists()

    assert client.post(policy_url(prod), {**below, "approvers_needed": 3}).status_code == 302
    assert ApprovalPolicy.objects.get(kind="destroy").approvers_needed == 3
    page = client.get(reverse("account_settings", args=[prod.account_id])).content.decode()
    assert "at least 2 approvers on every account" in page


def test_kinds_without_a_floor_may_still_switch_approval_off(client, ada, prod):
    response = login(client, ada).post(policy_url(prod), {"kind": "orphan", "approvers_needed": 1, "validity_hours": 1})
    assert response.status_code == 302
    assert ApprovalPolicy.objects.get(kind="orphan").approval_required is False


def test_the_admin_site_refuses_a_row_below_the_floor(prod):
    from django.core.exceptions import ValidationError

    row = ApprovalPolicy(account=prod, kind="destroy", approval_required=False, approvers_needed=1)
    with pytest.raises(ValidationError, match="CDKD_MIN_APPROVERS_DESTROY"):
        row.full_clean()


def test_a_row_below_the_floor_does_not_let_a_destroy_run_unapproved(olivia, arthur, prod, web, planned, settings):
    # Saved before the floor existed (or edited in the database): the row says "no approval".
    ApprovalPolicy.objects.create(account=prod, kind="destroy", approval_required=False, approvers_needed=1)
    policy = operations.policy_for(prod, "destroy")
    assert (policy.approval_required, policy.approvers_needed) == (True, 1)

    op = operations.request_operation(olivia, prod, "destroy", "web", "us-east-1", {})
    assert op.status == OperationStatus.AWAITING_APPROVAL  # not queued at once

    # One queued by the old rule, with no approval: the worker refuses it at start.
    Operation.objects.filter(pk=op.pk).update(status=OperationStatus.QUEUED)
    ran = operations.run_operation(op.pk)
    assert ran.status == OperationStatus.REFUSED and "approvals no longer hold" in ran.error

    settings.CDKD_MIN_APPROVERS_DESTROY = 2
    second = operations.request_operation(olivia, prod, "destroy", "web", "us-east-1", {})
    operations.decide(arthur, second, approve=True)
    second.refresh_from_db()
    assert second.status == OperationStatus.AWAITING_APPROVAL  # one approval of the two the floor asks
