"""The operation pipeline end to end against moto: request, approve, queue on commit, run in
a worker, audit. Uses the real engine specs (force-unlock, orphan)."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from rq import SimpleWorker

from engine.operations import OperationRefused
from stacks import audit
from stacks.models import Account, ApprovalPolicy, AuditEvent, Membership, Operation, Role
from stacks.operations import decide, expire_stale_requests, request_operation
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
STATE_KEY = "cdkd/Shop/us-east-1/state.json"
LOCK_KEY = "cdkd/Shop/us-east-1/lock.json"
STALE_LOCK = {"owner": "ci@old-runner:7", "timestamp": 1000, "expiresAt": 2000, "operation": "deploy"}
RECORD = {"version": 11, "stackName": "Shop", "region": "us-east-1", "resources": {}, "outputs": {}}


@pytest.fixture
def people(django_user_model):
    return {name: django_user_model.objects.create_user(name) for name in ("olivia", "arthur", "anna", "vic")}


@pytest.fixture
def account(aws, people):
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, STATE_KEY, RECORD)
    aws.put(A1, BUCKET, LOCK_KEY, STALE_LOCK)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    for name, role in (
        ("olivia", Role.OPERATOR),
        ("arthur", Role.APPROVER),
        ("anna", Role.APPROVER),
        ("vic", Role.VIEWER),
    ):
        Membership.objects.create(user=people[name], account=account, role=role)
    sync_account(account)
    return account


def work(queue) -> None:
    SimpleWorker([queue], connection=queue.connection).work(burst=True)


def unlock(people, account) -> Operation:
    return request_operation(people["olivia"], account, "force-unlock", "Shop", "us-east-1", {})


def test_it_runs_only_after_approval_and_audits_each_step(aws, queue, account, people):
    op = unlock(people, account)

    assert op.status == "awaiting-approval" and queue.count == 0
    assert op.plan["etag"] == aws.etag(A1, BUCKET, LOCK_KEY)
    decide(people["arthur"], op, approve=True, comment="stale CI lock")
    assert queue.count == 1
    work(queue)

    op.refresh_from_db()
    assert op.status == "succeeded", op.error
    assert aws.etag(A1, BUCKET, LOCK_KEY) is None
    assert json.loads(aws.get(A1, BUCKET, STATE_KEY)) == RECORD  # force-unlock never touches state.json
    actions = list(AuditEvent.objects.filter(operation=op).order_by("id").values_list("action", "actor"))
    assert actions == [
        ("operation.requested", "olivia"),
        ("operation.approved", "arthur"),
        ("operation.started", "worker"),
        ("operation.finished", "worker"),
    ]
    finished = AuditEvent.objects.filter(operation=op, action="operation.finished").get()
    assert (finished.plan_digest, finished.etag_before, finished.result) == (op.plan_digest, op.plan_etag, "succeeded")
    assert audit.verify(A1) == (4, [])


def test_it_refuses_self_approval(queue, account, people):
    Membership.objects.filter(user=people["olivia"]).update(role=Role.APPROVER)
    op = unlock(people, account)

    with pytest.raises(PermissionDenied, match="your own"):
        decide(people["olivia"], op, approve=True)
    assert Operation.objects.get(pk=op.pk).status == "awaiting-approval" and queue.count == 0


def test_it_waits_for_a_quorum(queue, account, people):
    ApprovalPolicy.objects.create(account=account, kind="force-unlock", approvers_needed=2)
    op = unlock(people, account)

    decide(people["arthur"], op, approve=True)
    assert Operation.objects.get(pk=op.pk).status == "awaiting-approval" and queue.count == 0
    with pytest.raises(OperationRefused, match="already decided"):
        decide(people["arthur"], op, approve=True)
    decide(people["anna"], op, approve=True)

    assert Operation.objects.get(pk=op.pk).status == "queued" and queue.count == 1


def test_it_does_not_count_an_expired_approval(queue, account, people):
    ApprovalPolicy.objects.create(account=account, kind="force-unlock", approvers_needed=2, validity_hours=1)
    op = unlock(people, account)
    decide(people["arthur"], op, approve=True)

    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        decide(people["anna"], op, approve=True)
        assert Operation.objects.get(pk=op.pk).status == "awaiting-approval"
        assert expire_stale_requests() == 1

    assert Operation.objects.get(pk=op.pk).status == "expired" and queue.count == 0


def test_it_queues_at_once_when_no_approval_is_needed(queue, account, people):
    ApprovalPolicy.objects.create(account=account, kind="force-unlock", approval_required=False)

    op = unlock(people, account)

    assert op.status == "queued" and queue.count == 1


def test_it_refuses_a_viewer_and_lets_a_rejection_end_it(queue, account, people):
    with pytest.raises(PermissionDenied):
        request_operation(people["vic"], account, "force-unlock", "Shop", "us-east-1", {})
    op = unlock(people, account)
    with pytest.raises(PermissionDenied):
        decide(people["vic"], op, approve=True)

    decide(people["arthur"], op, approve=False, comment="the deploy is still running")

    op.refresh_from_db()
    assert op.status == "refused" and "the deploy is still running" in op.error and queue.count == 0


def test_it_rechecks_roles_when_the_run_starts(aws, queue, account, people):
    op = unlock(people, account)
    decide(people["arthur"], op, approve=True)
    Membership.objects.filter(user=people["olivia"]).delete()

    work(queue)

    op.refresh_from_db()
    assert op.status == "refused" and "olivia no longer holds the operator role" in op.error
    assert aws.etag(A1, BUCKET, LOCK_KEY) is not None


def test_it_refuses_a_stale_plan(aws, queue, account, people):
    op = request_operation(people["olivia"], account, "orphan", "Shop", "us-east-1", {"force": True})
    decide(people["arthur"], op, approve=True)
    aws.put(A1, BUCKET, STATE_KEY, {**RECORD, "outputs": {"Changed": "yes"}})

    work(queue)

    op.refresh_from_db()
    assert op.status == "refused" and "plan is stale" in op.error
    assert json.loads(aws.get(A1, BUCKET, STATE_KEY))["outputs"] == {"Changed": "yes"}


def test_it_runs_a_command_directly_and_audits_the_os_user(aws, account):
    out = io.StringIO()
    call_command("cdkd", "force-unlock", "Shop", "--account", A1, stdout=out)
    assert "Nothing changed" in out.getvalue() and aws.etag(A1, BUCKET, LOCK_KEY) is not None

    call_command("cdkd", "force-unlock", "Shop", "--account", A1, "--yes", stdout=io.StringIO())

    assert aws.etag(A1, BUCKET, LOCK_KEY) is None
    op = Operation.objects.get(via="cli")
    assert op.status == "succeeded" and op.requester_name.startswith("cli:")
    assert set(AuditEvent.objects.filter(operation=op).values_list("actor", flat=True)) == {op.requester_name}


def test_it_exits_nonzero_with_one_line_when_refused(aws, account):
    aws.delete(A1, BUCKET, LOCK_KEY)

    with pytest.raises(CommandError, match="nothing to unlock"):
        call_command("cdkd", "force-unlock", "Shop", "--account", A1, "--stack-region", "us-east-1", "--yes")


def test_it_detects_a_tampered_audit_log(account, people):
    unlock(people, account)
    unlock(people, account)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE stacks_auditevent SET actor = 'mallory' WHERE action = 'operation.requested'")

    checked, problems = audit.verify(A1)

    assert checked == 2 and {p.message for p in problems} == {"its content does not match its hash (edited)"}
    with pytest.raises(CommandError, match="audit chain is broken"):
        call_command("cdkd", "audit", "--verify", stdout=io.StringIO(), stderr=io.StringIO())


def test_it_keeps_the_audit_log_append_only(account, people):
    unlock(people, account)
    event = AuditEvent.objects.first()

    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.count() == 1
