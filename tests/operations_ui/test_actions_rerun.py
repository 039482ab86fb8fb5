"""Run again (a partial or failed operation: a new plan, a new approval only when the plan
differs) and cancel (a confirmation step, no script).

FAKE ENGINE: `planned` (conftest) plans `fake_plan(...)`, whose digest depends on the
record's ETag: `etag` below moves it to say "the record changed"."""

from __future__ import annotations

import pytest
from django.urls import reverse

from stacks import operations
from stacks.models import Approval, AuditEvent, Operation, OperationStatus
from tests.operations_ui.conftest import fake_plan, login, make_operation

pytestmark = pytest.mark.django_db


def url(op, name: str = "operation") -> str:
    return reverse(name, args=[op.pk])


def approved_then(status: str, web, olivia, arthur, **fields) -> Operation:
    op = make_operation(web.account, olivia, status=status, params={"force": False}, reason="OPS-9", **fields)
    Approval.objects.create(
        operation=op, approver=arthur, approved=True, plan_digest=op.plan_digest, plan_etag=op.plan_etag
    )
    return op


@pytest.mark.parametrize("status", [OperationStatus.PARTIAL, OperationStatus.FAILED])
def test_it_runs_the_same_plan_again_without_a_new_approval(client, olivia, arthur, web, planned, status):
    op = approved_then(status, web, olivia, arthur, error="S3 said no")
    login(client, olivia)
    page = client.get(url(op)).content.decode()
    assert 'id="run-again"' in page
    response = client.post(url(op, "operation_retry"))
    new = Operation.objects.exclude(pk=op.pk).get()
    assert response.status_code == 302 and response["Location"] == url(new)
    assert new.rerun_of_id == op.pk and new.params == op.params and new.plan_digest == op.plan_digest
    assert new.reason == f"Run again of #{op.pk}: OPS-9"
    assert new.status == OperationStatus.QUEUED  # arthur's approval of this exact plan carried over
    assert [a.approver.username for a in operations.valid_approvals(new)] == ["arthur"]
    event = AuditEvent.objects.get(action="operation.requested", operation=new)
    assert event.details["rerun_of"] == op.pk and event.details["same_plan"] is True
    op.refresh_from_db()
    assert op.status == status  # the old one keeps its result


def test_it_asks_for_a_new_approval_when_the_plan_differs(client, olivia, arthur, web, monkeypatch):
    op = approved_then(OperationStatus.PARTIAL, web, olivia, arthur)
    monkeypatch.setattr(
        operations, "compute_plan", lambda a, kind, s, r, params, p: fake_plan(kind, s, r, params, etag='"etag-2"')
    )
    login(client, olivia).post(url(op, "operation_retry"))
    new = Operation.objects.exclude(pk=op.pk).get()
    assert new.plan_digest != op.plan_digest and new.status == OperationStatus.AWAITING_APPROVAL
    assert not new.approvals.exists()
    assert "a new plan: approved anew" in client.get(url(new)).content.decode()


def test_it_does_not_count_the_new_requester_s_own_carried_approval(client, olivia, arthur, web, planned):
    op = approved_then(OperationStatus.FAILED, web, olivia, arthur)
    login(client, arthur).post(url(op, "operation_retry"))
    new = Operation.objects.exclude(pk=op.pk).get()
    assert new.requested_by == arthur and new.status == OperationStatus.AWAITING_APPROVAL


def test_it_offers_run_again_only_after_a_partial_or_failed_end(client, olivia, vera, web, planned):
    done = make_operation(web.account, olivia, status=OperationStatus.SUCCEEDED)
    login(client, olivia)
    assert 'id="run-again"' not in client.get(url(done)).content.decode()
    assert client.post(url(done, "operation_retry")).status_code == 409
    failed = make_operation(web.account, olivia, status=OperationStatus.FAILED)
    assert login(client, vera).post(url(failed, "operation_retry")).status_code == 403
    assert Operation.objects.count() == 2 and planned == []


def test_it_asks_to_confirm_a_cancel_and_cancels_only_when_confirmed(client, olivia, web):
    op = make_operation(web.account, olivia)
    login(client, olivia)
    page = client.get(url(op)).content.decode()
    assert f'href="{url(op)}?confirm=cancel#cancel-confirm"' in page and 'id="cancel-confirm"' not in page
    assert "onclick" not in page and "<script>" not in page
    confirm = client.get(url(op) + "?confirm=cancel").content.decode()
    assert 'id="cancel-confirm"' in confirm and 'name="confirm" value="yes"' in confirm
    bare = client.post(url(op, "operation_cancel"))  # no confirmation: only the question again
    op.refresh_from_db()
    assert bare.status_code == 200 and 'id="cancel-confirm"' in bare.content.decode()
    assert op.status == OperationStatus.AWAITING_APPROVAL
    done = client.post(url(op, "operation_cancel"), {"confirm": "yes"})
    op.refresh_from_db()
    assert done.status_code == 302 and op.status == OperationStatus.CANCELLED


def test_it_never_shows_the_cancel_question_to_someone_who_cannot_cancel(client, vera, olivia, web):
    op = make_operation(web.account, olivia)
    page = login(client, vera).get(url(op) + "?confirm=cancel").content.decode()
    assert 'id="cancel-confirm"' not in page and "cancel-button" not in page
