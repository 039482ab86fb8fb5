"""One operation's page: plan, approvals, live region, and the decide/cancel/retry actions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from stacks.models import Approval, ApprovalPolicy, AuditEvent, OperationStatus
from tests.operations_ui.conftest import login, make_operation

pytestmark = pytest.mark.django_db


def url(op, name: str = "operation") -> str:
    return reverse(name, args=[op.pk])


def test_it_shows_the_plan_requester_and_target(client, vera, olivia, web):
    op = make_operation(web.account, olivia, kind="orphan-resources", params={"resources": ["Queue"]})
    response = login(client, vera).get(url(op))
    content = response.content.decode().replace("&quot;", '"')
    assert response.status_code == 200
    assert "Orphan resources" in content and "olivia" in content
    assert reverse("stack", args=[web.account.account_id, "us-east-1", "web"]) in content
    text = content
    assert 'id="plan-rewrites"' in text and '<td class="mono small">Fn.Properties.Q</td>' in text
    assert '<td class="mono small diff-before">{"Ref": "Queue"}</td>' in text
    assert 'Fn.Properties.Q: {"Ref": "Queue"} -> "q-orders"\n' in text  # the text form, one per line
    assert op.plan_digest in content and op.plan_etag.replace('"', "") in content
    assert 'class="badge status-awaiting-approval"' in content
    assert 'hx-trigger="every 2s"' in content
    assert 'id="decide"' not in content  # a viewer cannot decide


def test_it_offers_the_decision_to_approvers_but_not_to_the_requester(client, olivia, arthur, web):
    op = make_operation(web.account, olivia)
    assert b'id="decide"' in login(client, arthur).get(url(op)).content
    page = login(client, olivia).get(url(op)).content
    assert b'id="decide"' not in page and b"someone else must approve it" in page


def test_it_polls_while_running_and_stops_with_286_when_finished(client, vera, olivia, web):
    op = make_operation(
        web.account,
        olivia,
        status=OperationStatus.RUNNING,
        progress={"done": 1, "total": 4, "phase": "deleting", "items": {"Queue": {"status": "succeeded"}}},
        log=[{"at": "2024-03-19T08:00:00+00:00", "level": "warning", "message": "took over an expired lock"}],
    )
    login(client, vera)
    running = client.get(url(op), headers={"HX-Request": "true"})
    assert running.status_code == 200
    assert b"<html" not in running.content  # the fragment, not the page
    assert b'aria-valuenow="25"' in running.content and b"took over an expired lock" in running.content
    assert b'hx-trigger="every 2s"' in running.content
    op.status, op.result, op.etag_after = OperationStatus.SUCCEEDED, {"summary": "orphaned web"}, '"etag-2"'
    op.save()
    done = client.get(url(op), headers={"HX-Request": "true"})
    assert done.status_code == 286
    assert b"Succeeded" in done.content and b"orphaned web" in done.content and b"etag-2" in done.content
    assert b"hx-trigger" not in done.content


def test_it_approves_and_queues_with_one_approver(client, olivia, arthur, web):
    op = make_operation(web.account, olivia)
    response = login(client, arthur).post(url(op, "operation_decide"), {"decision": "approve", "comment": "ok"})
    op.refresh_from_db()
    assert response.status_code == 302 and response.url == url(op)
    assert op.status == OperationStatus.QUEUED
    assert Approval.objects.get().comment == "ok"
    assert AuditEvent.objects.filter(action="operation.approved", actor="arthur").exists()


def test_it_needs_a_quorum_of_two(client, olivia, arthur, april, web):
    ApprovalPolicy.objects.create(account=web.account, kind="orphan", approvers_needed=2)
    op = make_operation(web.account, olivia)
    login(client, arthur).post(url(op, "operation_decide"), {"decision": "approve"})
    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL
    page = client.get(url(op)).content.decode()
    assert "Approvals (1 of 2 needed" in page
    again = client.post(url(op, "operation_decide"), {"decision": "approve"})
    assert again.status_code == 409 and b"already decided" in again.content
    login(client, april).post(url(op, "operation_decide"), {"decision": "approve"})
    op.refresh_from_db()
    assert op.status == OperationStatus.QUEUED


def test_it_refuses_self_approval(client, arthur, web):
    op = make_operation(web.account, arthur)
    response = login(client, arthur).post(url(op, "operation_decide"), {"decision": "approve"})
    assert response.status_code == 403
    assert b"your own request" in response.content
    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL and not Approval.objects.exists()


def test_it_rejects_with_a_comment(client, olivia, arthur, web):
    op = make_operation(web.account, olivia)
    login(client, arthur).post(url(op, "operation_decide"), {"decision": "reject", "comment": "wrong stack"})
    op.refresh_from_db()
    assert op.status == OperationStatus.REFUSED
    assert "wrong stack" in op.error
    assert AuditEvent.objects.filter(action="operation.rejected").exists()


def test_it_refuses_a_decision_from_operators_and_a_bad_form(client, olivia, arthur, web):
    op = make_operation(web.account, olivia)
    assert login(client, olivia).post(url(op, "operation_decide"), {"decision": "approve"}).status_code == 403
    assert login(client, arthur).post(url(op, "operation_decide"), {"decision": "maybe"}).status_code == 400
    assert not Approval.objects.exists()


def test_it_shows_which_approvals_still_count(client, olivia, arthur, april, web):
    ApprovalPolicy.objects.create(account=web.account, kind="orphan", approvers_needed=2, validity_hours=1)
    op = make_operation(web.account, olivia)
    Approval.objects.create(
        operation=op, approver=arthur, approved=True, plan_digest=op.plan_digest, plan_etag=op.plan_etag
    )
    old = Approval.objects.create(
        operation=op, approver=april, approved=True, plan_digest=op.plan_digest, plan_etag=op.plan_etag
    )
    Approval.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=2))
    page = login(client, olivia).get(url(op)).content.decode()
    assert page.count(">counts<") == 1 and page.count("no longer counts") == 1


def test_it_lets_the_requester_cancel(client, olivia, web):
    op = make_operation(web.account, olivia)
    login(client, olivia)
    assert url(op, "operation_cancel").encode() in client.get(url(op) + "?confirm=cancel").content
    response = client.post(url(op, "operation_cancel"), {"confirm": "yes"})
    op.refresh_from_db()
    assert response.status_code == 302 and op.status == OperationStatus.CANCELLED
    assert AuditEvent.objects.filter(action="operation.cancelled", actor="olivia").exists()
    again = client.post(url(op, "operation_cancel"), {"confirm": "yes"})
    assert again.status_code == 409 and b"already ended" in again.content


def test_it_refuses_cancel_by_another_operator_and_a_viewer(client, olivia, vera, web):
    op = make_operation(web.account, None, status=OperationStatus.QUEUED)
    assert login(client, olivia).post(url(op, "operation_cancel")).status_code == 403
    assert login(client, vera).post(url(op, "operation_cancel")).status_code == 403
    op.refresh_from_db()
    assert op.status == OperationStatus.QUEUED


def test_it_queues_an_abandoned_operation_again_as_it_was(client, olivia, arthur, web):
    # A failed (not abandoned) one is planned again instead: tests/operations_ui/test_actions_rerun.py
    cancelled = make_operation(web.account, olivia, status=OperationStatus.CANCELLED)
    abandoned = make_operation(
        web.account, olivia, status=OperationStatus.FAILED, result={"abandoned": True}, error="worker stopped"
    )
    login(client, arthur)
    assert url(cancelled, "operation_retry").encode() not in client.get(url(cancelled)).content
    assert url(abandoned, "operation_retry").encode() in client.get(url(abandoned)).content
    assert client.post(url(cancelled, "operation_retry")).status_code == 409
    assert client.post(url(abandoned, "operation_retry")).status_code == 302
    abandoned.refresh_from_db()
    assert abandoned.status == OperationStatus.QUEUED
    assert AuditEvent.objects.filter(action="operation.retried", operation=abandoned).exists()


def test_it_refuses_run_again_to_operators(client, olivia, web):
    op = make_operation(web.account, olivia, status=OperationStatus.FAILED, result={"abandoned": True})
    login(client, olivia)
    assert b"Run again" not in client.get(url(op)).content
    assert client.post(url(op, "operation_retry")).status_code == 403


def test_it_hides_operations_of_other_accounts(client, otto, olivia, web):
    op = make_operation(web.account, olivia)
    login(client, otto)
    assert client.get(url(op)).status_code == 404
    assert client.get(url(op), headers={"HX-Request": "true"}).status_code == 404
    assert client.post(url(op, "operation_decide"), {"decision": "approve"}).status_code == 404


def test_it_refuses_get_on_actions(client, arthur, olivia, web):
    op = make_operation(web.account, olivia)
    login(client, arthur)
    for name in ("operation_decide", "operation_cancel", "operation_retry"):
        assert client.get(url(op, name)).status_code == 405


def test_it_masks_secret_looking_parameters(client, vera, olivia, web):
    params = {"parameters": {"DbPassword": "hunter2-hunter2", "Url": "postgres://app:S3cr3t-pw@db/x", "Env": "prod"}}
    op = make_operation(web.account, olivia, kind="orphan", params=params)
    content = login(client, vera).get(url(op)).content.decode().replace("&quot;", '"')
    assert "hunter2-hunter2" not in content and "S3cr3t-pw" not in content
    assert '"DbPassword": "***"' in content and '"Env": "prod"' in content
