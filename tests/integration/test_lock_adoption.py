"""A "run again" adopts the lock of its own operation, whichever worker host the crashed run
was on, and nothing else's; the adopted lock is still a plain cdkd lock."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from engine.backend import StateBucket
from engine.locks import LockContention, StackLock, owner_operation, same_operation
from engine.schema import parse_lock

pytestmark = pytest.mark.integration

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
STATE = "cdkd/Shop/us-east-1/state.json"
LOCK = "cdkd/Shop/us-east-1/lock.json"


def cdkd_lock(owner: str, *, age_ms: int = 0, ttl_ms: int = 1_800_000, operation: str = "orphan") -> bytes:
    """A live lock exactly as cdkd writes it (JSON.stringify, compact, in field order)."""
    ts = int(time.time() * 1000) - age_ms
    body = {"owner": owner, "timestamp": ts, "expiresAt": ts + ttl_ms, "operation": operation}
    return json.dumps(body, separators=(",", ":")).encode()


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(A1, BUCKET)
    return StateBucket.open(aws.access(A1), actor="alice", bucket=BUCKET, region="us-east-1")


def test_it_reads_the_person_and_operation_from_an_admin_owner_only():
    assert owner_operation("cdkd-admin:alice@worker-a:op-7-0123abcd") == ("alice", "op-7-0123abcd")
    assert owner_operation("cdkd-admin:cli:al@ex.com@worker-a:op-7-x") == ("cli:al@ex.com", "op-7-x")
    assert owner_operation("alice@worker-a:4242") is None  # cdkd's own owner
    assert owner_operation("cdkd-admin:alice@worker-a:plan") is None
    assert owner_operation(None) is None
    assert same_operation("cdkd-admin:alice@worker-a:op-7-x", "cdkd-admin:alice@worker-b:op-7-x")
    assert not same_operation("cdkd-admin:alice@worker-a:op-7-x", "cdkd-admin:alice@worker-b:op-8-x")
    assert not same_operation("cdkd-admin:bob@worker-a:op-7-x", "cdkd-admin:alice@worker-b:op-7-x")
    assert not same_operation("alice@worker-a:4242", "alice@worker-b:4242")


def test_a_rerun_on_another_host_adopts_its_operations_live_lock(aws, bucket):
    left = cdkd_lock("cdkd-admin:alice@worker-a:op-7-0123abcd", age_ms=60_000)
    aws.put(A1, BUCKET, LOCK, left)
    warnings: list[str] = []

    lock = StackLock(
        bucket, LOCK, owner="cdkd-admin:alice@worker-b:op-7-0123abcd", operation="orphan", on_warning=warnings.append
    )
    lock.acquire()

    stored = aws.get(A1, BUCKET, LOCK)
    info = json.loads(stored)
    assert lock.held and lock.body == stored
    assert info["owner"] == "cdkd-admin:alice@worker-b:op-7-0123abcd"  # the new holder names itself
    assert info["timestamp"] > json.loads(left)["timestamp"]
    # Still exactly what cdkd writes and reads: four fields, compact, in cdkd's order.
    assert list(info) == ["owner", "timestamp", "expiresAt", "operation"]
    assert stored == json.dumps(info, separators=(",", ":")).encode()
    assert parse_lock(stored).info is not None and not parse_lock(stored).is_expired(int(time.time() * 1000))
    assert len(warnings) == 1 and "earlier run of this operation" in warnings[0]
    lock.release()
    assert aws.etag(A1, BUCKET, LOCK) is None


@pytest.mark.parametrize(
    "holder",
    [
        "cdkd-admin:alice@worker-a:op-8-0123abcd",  # another operation of the same person
        "cdkd-admin:bob@worker-a:op-7-0123abcd",  # another person
        "alice@worker-a:4242",  # a cdkd CLI run
    ],
)
def test_a_live_lock_of_anything_else_is_contention(aws, bucket, holder):
    aws.put(A1, BUCKET, LOCK, cdkd_lock(holder))

    with pytest.raises(LockContention):
        StackLock(bucket, LOCK, owner="cdkd-admin:alice@worker-b:op-7-0123abcd", operation="orphan").acquire()

    assert json.loads(aws.get(A1, BUCKET, LOCK))["owner"] == holder


# --- the pipeline's "run again" ----------------------------------------------------------------


RECORD = {
    "version": 11,
    "stackName": "Shop",
    "region": "us-east-1",
    "resources": {
        "Old": {"physicalId": "old", "resourceType": "AWS::SQS::Queue", "properties": {}},
        "Keep": {"physicalId": "keep", "resourceType": "AWS::SQS::Queue", "properties": {}},
    },
    "outputs": {},
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["orphan-resources", "orphan"])
def test_run_again_on_another_host_adopts_the_lock_the_crashed_run_left(
    aws, queue, django_user_model, monkeypatch, settings, kind
):
    from stacks import operations
    from stacks.models import Account, ApprovalPolicy, Operation, OperationStatus
    from stacks.operations import reap_abandoned, request_operation, retry, run_operation

    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, STATE, RECORD)
    account = Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    ApprovalPolicy.objects.create(account=account, kind=kind, approval_required=False)
    root = django_user_model.objects.create_superuser("root")
    params = {"resources": ["Old"]} if kind == "orphan-resources" else {}
    op = request_operation(root, account, kind, "Shop", "us-east-1", params)

    # The first run, on worker-a, took the lock and died: its lock is live for 30 minutes.
    monkeypatch.setattr(operations.socket, "gethostname", lambda: "worker-a")
    first = operations._context(op)
    StackLock(first.bucket, LOCK, owner=first.lock_owner, operation="orphan").acquire()  # never released
    crashed_owner = json.loads(aws.get(A1, BUCKET, LOCK))["owner"]
    assert "@worker-a:" in crashed_owner and crashed_owner.startswith("cdkd-admin:root@")
    Operation.objects.filter(pk=op.pk).update(status=OperationStatus.RUNNING, heartbeat_at=timezone.now())
    later = timezone.now() + timedelta(seconds=settings.CDKD_OPERATION_ABANDON_SECONDS + 1)
    assert reap_abandoned(now=later) == [op.pk]

    # An approver runs it again; worker-b picks it up.
    monkeypatch.setattr(operations.socket, "gethostname", lambda: "worker-b")
    retry(root, Operation.objects.get(pk=op.pk))
    run_operation(op.pk)

    op.refresh_from_db()
    assert op.status == "succeeded", op.error
    assert any("Adopted the lock" in line["message"] and "worker-a" in line["message"] for line in op.log)
    assert aws.etag(A1, BUCKET, LOCK) is None  # released by the run that adopted it
    if kind == "orphan-resources":
        assert list(json.loads(aws.get(A1, BUCKET, STATE))["resources"]) == ["Keep"]
    else:
        assert aws.etag(A1, BUCKET, STATE) is None


@pytest.mark.django_db(transaction=True)
def test_the_lock_owner_names_person_host_and_a_unique_operation_id(aws, django_user_model, monkeypatch):
    from stacks import operations
    from stacks.models import Account, Operation

    aws.make_bucket(A1, BUCKET)
    account = Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    monkeypatch.setattr(operations.socket, "gethostname", lambda: "worker-a")
    one = Operation.objects.create(kind="orphan", account=account, stack_name="Shop", requester_name="ann")
    two = Operation.objects.create(kind="orphan", account=account, stack_name="Shop", requester_name="ann")

    owner = operations._context(one).lock_owner
    assert owner.startswith(f"cdkd-admin:ann@worker-a:op-{one.pk}-")
    assert owner_operation(owner) == ("ann", operations.lock_operation_id(one))
    assert operations.lock_operation_id(one) == operations.lock_operation_id(Operation.objects.get(pk=one.pk))
    assert operations.lock_operation_id(one) != operations.lock_operation_id(two)
