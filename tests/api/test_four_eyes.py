"""Four eyes through the API: the pipeline's rules (stacks.operations.decide), unchanged.
A requester never decides on their own request; a second approval by the same approver
does not count twice; an approval policy of two needs two other people.
FAKE ENGINE: `compute_plan` is replaced (planning reads S3)."""

from __future__ import annotations

import json

import pytest

from stacks.models import ApprovalPolicy, AuditEvent, Operation, OperationStatus, Role
from tests.api.conftest import STACK_NAME, A, call, token_for
from tests.operations_ui.conftest import member

pytestmark = pytest.mark.django_db


def request_orphan(secret: str) -> Operation:
    body = {"account_id": A, "region_slug": "us-east-1", "stack_name": STACK_NAME, "kind": "orphan"}
    response = call("POST", "/api/v1/operations", secret, body)
    assert response.status_code == 201, response.content
    return Operation.objects.get(pk=json.loads(response.content)["id"])


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_it_lets_no_requester_decide_on_their_own_request(world, planned, decision):
    secret = token_for(world["people"]["approver"])
    op = request_orphan(secret)

    response = call("POST", f"/api/v1/operations/{op.pk}/{decision}", secret, {"comment": "mine"})

    assert response.status_code == 403
    assert "your own request" in json.loads(response.content)["message"]
    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL and not op.approvals.exists()
    refused = AuditEvent.objects.filter(action=f"api.operation.{decision}").get()
    assert refused.result == "refused" and refused.operation == op


def test_it_queues_once_another_approver_agrees(world, planned):
    op = request_orphan(token_for(world["people"]["approver"]))
    admin = token_for(world["people"]["admin"])

    response = call("POST", f"/api/v1/operations/{op.pk}/approve", admin, {"comment": "looks right"})

    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["status"] == OperationStatus.QUEUED
    assert [(a["approver"], a["counts"]) for a in body["approvals"]] == [("ada", True)]
    assert AuditEvent.objects.filter(action="operation.approved", operation=op, actor="ada").exists()


def test_it_counts_one_approver_once(world, planned):
    ApprovalPolicy.objects.create(account=world["prod"], kind="orphan", approval_required=True, approvers_needed=2)
    op = request_orphan(token_for(world["people"]["operator"]))
    arthur = token_for(world["people"]["approver"])

    first = call("POST", f"/api/v1/operations/{op.pk}/approve", arthur, {})
    again = call("POST", f"/api/v1/operations/{op.pk}/approve", arthur, {})

    assert first.status_code == 200 and json.loads(first.content)["status"] == OperationStatus.AWAITING_APPROVAL
    assert again.status_code == 409 and "already decided" in json.loads(again.content)["message"]
    april = token_for(member("april", world["prod"], Role.APPROVER))
    last = call("POST", f"/api/v1/operations/{op.pk}/approve", april, {})
    assert json.loads(last.content)["status"] == OperationStatus.QUEUED
    assert json.loads(last.content)["approvals_needed"] == 2


def test_it_rejects_and_ends_the_request(world, planned):
    op = request_orphan(token_for(world["people"]["operator"]))

    response = call(
        "POST", f"/api/v1/operations/{op.pk}/reject", token_for(world["people"]["approver"]), {"comment": "no"}
    )

    assert response.status_code == 200
    op.refresh_from_db()
    assert op.status == OperationStatus.REFUSED and op.error == "Rejected by arthur: no"
    assert call("POST", f"/api/v1/operations/{op.pk}/cancel", token_for(world["people"]["admin"])).status_code == 409


def test_it_lets_the_requester_cancel(world, planned):
    secret = token_for(world["people"]["operator"])
    op = request_orphan(secret)

    response = call("POST", f"/api/v1/operations/{op.pk}/cancel", secret)

    assert response.status_code == 200 and json.loads(response.content)["status"] == OperationStatus.CANCELLED
    assert AuditEvent.objects.filter(action="operation.cancelled", operation=op, actor="olivia").exists()
