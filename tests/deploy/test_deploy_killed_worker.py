"""A worker process SIGKILLed mid-deploy, then the deploy run again: it converges with no
duplicate resource. Names are deterministic, so the second run finds what the first one
recorded (nothing to create again); a queue created but not yet recorded when the worker died
is never adopted: the second run fails loudly naming it."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from django.conf import settings as django_settings
from django.db import connection
from rq import SimpleWorker

from cdkd_site.queues import get_queue
from stacks.models import Account, ApprovalPolicy, OperationStatus
from stacks.operations import request_operation
from tests.deploy.zips import GOLDEN
from tests.support.workers import kill_tree, wait_for, worker_process

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"
COUNT = 8


@pytest.fixture
def shared_queue():
    """The operations queue, shared with a worker process (needs PostgreSQL and a Redis server)."""
    if connection.vendor != "postgresql" or not django_settings.REDIS_URL.startswith("redis://"):
        pytest.skip("needs PostgreSQL and a Redis server shared with a worker process")
    queue = get_queue("default")
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


def app_of_queues(tmp_path) -> str:
    app = tmp_path / "cdk.out"
    shutil.copytree(GOLDEN, app)
    template = {"Resources": {f"Q{i}": {"Type": "AWS::SQS::Queue"} for i in range(COUNT)}}
    (app / "GoldenCdkStack.template.json").write_text(json.dumps(template))
    return str(app)


def queue_names(aws) -> set[str]:
    sqs = aws.account_session(A1).client("sqs", region_name="us-east-1", endpoint_url=aws.moto.url)
    return {u.rsplit("/", 1)[1] for u in sqs.list_queues().get("QueueUrls", [])}


def recorded(aws) -> set[str]:
    try:
        body = aws.get(A1, BUCKET, KEY)
    except Exception:  # noqa: BLE001 - no record yet
        return set()
    return {row["physicalId"].rsplit("/", 1)[1] for row in json.loads(body)["resources"].values()}


def test_a_deploy_killed_mid_run_converges_when_run_again(aws, shared_queue, settings, tmp_path, django_user_model):
    settings.CDKD_MIN_APPROVERS_DEPLOY = 0
    aws.make_bucket(A1, BUCKET)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    ApprovalPolicy.objects.create(account=account, kind="deploy", approval_required=False)
    root = django_user_model.objects.create_superuser("root")
    params = {"account": A1, "app": app_of_queues(tmp_path), "concurrency": 1}
    first = request_operation(root, account, "deploy", "GoldenCdkStack", "us-east-1", params)

    aws.proxy.latency = 0.3
    with worker_process(aws.endpoint, CDKD_MIN_APPROVERS_DEPLOY="0") as worker:
        wait_for(lambda: len(recorded(aws)) >= 3, timeout=90, what="three queues recorded")
        kill_tree(worker.pid)
        worker.wait(timeout=10)
    aws.proxy.latency = 0.0
    before = recorded(aws)
    made = queue_names(aws)
    assert before <= made and len(before) < COUNT and len(made - before) <= 1  # at most one unrecorded
    first.refresh_from_db()
    assert first.status == OperationStatus.RUNNING  # killed: the reaper marks it abandoned later

    time.sleep(4.5)  # the killed run's lock (4 s TTL) lapses; a new operation does not adopt it
    again = request_operation(root, account, "deploy", "GoldenCdkStack", "us-east-1", params)
    assert again.plan_etag == aws.etag(A1, BUCKET, KEY)  # planned from what the killed run recorded
    SimpleWorker([shared_queue], connection=shared_queue.connection).work(burst=True)
    again.refresh_from_db()
    names = queue_names(aws)
    assert len(names) == COUNT  # no duplicate, none missing
    if made == before:  # killed between a save and the next create: converges
        assert again.status == OperationStatus.SUCCEEDED, again.error
        assert recorded(aws) == names
        assert sorted(again.result["details"]["result"]["created"]) == sorted(
            f"Q{i}" for i in range(COUNT) if f"GoldenCdkStack-Q{i}" not in before
        )
    else:  # killed between a create and its save: that queue is never adopted
        (orphan,) = made - before
        assert again.status == OperationStatus.FAILED and "refusing to adopt" in again.error, again.error
        assert orphan not in recorded(aws)
