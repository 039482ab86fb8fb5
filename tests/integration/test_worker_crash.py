"""SIGKILL a real worker process in the middle of an operation.

Needs what a second process can share: PostgreSQL and a Redis server (scripts/test.sh and
CI provide both; with the SQLite/fakeredis fallback this test is skipped, saying why).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from rq import SimpleWorker

from stacks.models import Account, ApprovalPolicy
from stacks.operations import reap_abandoned, request_operation, retry
from stacks.sync import sync_account
from tests.support.workers import kill_tree, wait_for, worker_process

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
KEY = "cdkd/Shop/us-east-1/state.json"
LOCK_KEY = "cdkd/Shop/us-east-1/lock.json"


def row(name: str, **extra) -> dict:
    return {"physicalId": name, "resourceType": "AWS::SQS::Queue", "properties": {"QueueName": name}, **extra}


RECORD = {
    "version": 11,
    "stackName": "Shop",
    "region": "us-east-1",
    "resources": {"Old": row("old"), "Keep": row("keep", dependencies=["Old"]), "Other": row("other")},
    "outputs": {},
    "x_unknown": {"kept": True},
}


def test_it_survives_a_killed_worker(aws, shared_queue, django_user_model):
    queue = shared_queue
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, KEY, RECORD)
    account = Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    sync_account(account)
    ApprovalPolicy.objects.create(account=account, kind="orphan-resources", approval_required=False)
    root = django_user_model.objects.create_superuser("root")
    op = request_operation(root, account, "orphan-resources", "Shop", "us-east-1", {"resources": ["Old"]})
    assert op.status == "queued"

    aws.proxy.latency = 1.0  # every S3 call now takes a second: the kill lands mid-operation
    with worker_process(aws.endpoint) as worker:
        wait_for(lambda: aws.etag(A1, BUCKET, LOCK_KEY) is not None, what="the worker to take the lock")
        kill_tree(worker.pid)  # the worker and its work-horse (which runs in its own session)
        worker.wait(timeout=10)
    aws.proxy.latency = 0.0

    op.refresh_from_db()
    assert op.status == "running"  # nobody is left to say otherwise...
    assert json.loads(aws.get(A1, BUCKET, KEY)) == RECORD  # ...and the record was not touched

    # The lock stops being renewed, and expires on its own.
    first = json.loads(aws.get(A1, BUCKET, LOCK_KEY))
    time.sleep(max(0.0, first["expiresAt"] / 1000 - time.time()) + 1.5)
    assert json.loads(aws.get(A1, BUCKET, LOCK_KEY)) == first and first["expiresAt"] < time.time() * 1000

    # The reaper marks it abandoned instead of leaving it running forever.
    assert reap_abandoned(now=timezone.now() + timedelta(seconds=settings.CDKD_OPERATION_ABANDON_SECONDS + 1)) == [
        op.pk
    ]
    op.refresh_from_db()
    assert op.status == "failed" and op.result["abandoned"] is True

    # Running it again is safe: it adopts its own stale lock and finishes exactly once.
    retry(root, op)
    SimpleWorker([queue], connection=queue.connection).work(burst=True)
    op.refresh_from_db()
    assert op.status == "succeeded", op.error
    stored = json.loads(aws.get(A1, BUCKET, KEY))
    assert sorted(stored["resources"]) == ["Keep", "Other"]
    assert stored["resources"]["Keep"].get("dependencies", []) == []
    assert stored["x_unknown"] == {"kept": True}
    assert aws.etag(A1, BUCKET, LOCK_KEY) is None
