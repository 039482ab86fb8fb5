"""A worker process SIGKILLed mid-deploy, then "Run again" from the operation page, as a person
does it: the operator posts the page's Run again (a new operation, `rerun_of` the killed one,
planned from what the killed run recorded), the approver approves it (the plan differs, so the
deploy's approval floor asks for a new approval), a worker runs it.

Names are deterministic and the runs create in the same order (concurrency 1), so the run
again meets the queue the killed run created last. When the kill landed between that create
and its save, the queue exists but the record does not name it; when it landed between a save
and the next create, the test creates that next queue by hand, as if the kill had landed a
moment later. Either way the run again fails loudly naming it, never adopting it; once a person
has removed it, Run again converges: every queue once in AWS, the record complete, the lock
released, the journal gone. Needs PostgreSQL and a Redis server shared with the worker."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rq import SimpleWorker

from stacks.models import Account, Membership, Operation, OperationStatus, Role
from stacks.operations import reap_abandoned, request_operation
from tests.deploy.test_deploy_killed_worker import shared_queue  # noqa: F401 - the fixture
from tests.deploy.test_deploy_operation import plan_upload
from tests.deploy.zips import GOLDEN, zip_dir
from tests.support.workers import kill_tree, wait_for, worker_process

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("assembly_storage"),
]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
PREFIX = "cdkd/GoldenCdkStack/us-east-1/"
KEY, LOCK, JOURNAL = PREFIX + "state.json", PREFIX + "lock.json", PREFIX + "rollback-journal.json"
COUNT = 8
NAMES = {f"GoldenCdkStack-Q{i}" for i in range(COUNT)}


def only_queues(template: dict) -> None:
    template.clear()
    template["Resources"] = {f"Q{i}": {"Type": "AWS::SQS::Queue"} for i in range(COUNT)}


def sqs(aws):
    return aws.account_session(A1).client("sqs", region_name="us-east-1", endpoint_url=aws.moto.url)


def queue_names(aws) -> set[str]:
    return {u.rsplit("/", 1)[1] for u in sqs(aws).list_queues().get("QueueUrls", [])}


def recorded(aws) -> set[str]:
    try:
        body = aws.get(A1, BUCKET, KEY)
    except Exception:  # noqa: BLE001 - no record yet
        return set()
    return {row["physicalId"].rsplit("/", 1)[1] for row in json.loads(body)["resources"].values()}


def lock_lapsed(aws) -> bool:
    try:
        return json.loads(aws.get(A1, BUCKET, LOCK))["expiresAt"] < time.time() * 1000
    except Exception:  # noqa: BLE001 - no lock at all
        return True


def run_again(world, op: Operation) -> Operation:
    """The operation page's Run again (operator), then the approval the policy asks for."""
    page = world["olivia"].get(reverse("operation", args=[op.pk])).content.decode()
    assert 'id="run-again"' in page, "the page offers no Run again"
    response = world["olivia"].post(reverse("operation_retry", args=[op.pk]))
    new = Operation.objects.exclude(pk=op.pk).latest("id")
    assert response.status_code == 302 and response["Location"] == reverse("operation", args=[new.pk])
    assert new.rerun_of_id == op.pk and new.kind == "deploy"
    if new.status == OperationStatus.AWAITING_APPROVAL:
        decided = world["arthur"].post(reverse("operation_decide", args=[new.pk]), {"decision": "approve"})
        assert decided.status_code == 302
    new.refresh_from_db()
    assert new.status == OperationStatus.QUEUED
    return new


def test_a_killed_deploy_run_again_from_the_page_fails_loudly_then_converges(
    aws,
    shared_queue,  # noqa: F811
    django_user_model,
):
    aws.make_bucket(A1, BUCKET)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    world: dict = {"aws": aws}
    users = {}
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        users[name] = django_user_model.objects.create_user(name)
        Membership.objects.create(user=users[name], account=account, role=role)
        world[name] = Client()
        world[name].force_login(users[name])
    plan = plan_upload(world, zip_dir(GOLDEN, template=only_queues))
    params = {  # what the plan page's request sends, at concurrency 1 so the order is fixed
        "account": A1,
        "assembly_digest": plan.assembly.digest,
        "parameters": {},
        "deploy_plan": plan.pk,
        "deploy_plan_digest": plan.digest,
        "deploy_plan_etag": plan.state_etag,
        "stateful_consent": False,
        "concurrency": 1,
    }
    first = request_operation(users["olivia"], account, "deploy", "GoldenCdkStack", "us-east-1", params)
    assert (
        world["arthur"].post(reverse("operation_decide", args=[first.pk]), {"decision": "approve"}).status_code == 302
    )

    aws.proxy.latency = 0.3
    with worker_process(aws.endpoint) as worker:
        wait_for(lambda: len(recorded(aws)) >= 3, timeout=90, what="three queues recorded")
        kill_tree(worker.pid)
        worker.wait(timeout=10)
    aws.proxy.latency = 0.0
    before, made = recorded(aws), queue_names(aws)
    assert before <= made and 3 <= len(before) < COUNT and len(made - before) <= 1
    next_name = f"GoldenCdkStack-Q{min(i for i in range(COUNT) if f'GoldenCdkStack-Q{i}' not in before)}"
    if made == before:  # killed between a save and the next create: the create lands "a moment later"
        sqs(aws).create_queue(QueueName=next_name)
    assert queue_names(aws) - before == {next_name}

    first.refresh_from_db()
    assert first.status == OperationStatus.RUNNING  # nobody is left to say otherwise
    later = timezone.now() + timedelta(seconds=settings.CDKD_OPERATION_ABANDON_SECONDS + 1)
    assert reap_abandoned(now=later) == [first.pk]
    wait_for(lambda: lock_lapsed(aws), timeout=30, what="the killed run's lock to lapse")

    # Run again: planned from the killed run's record, so it needs its own approval
    second = run_again(world, Operation.objects.get(pk=first.pk))
    assert second.plan_etag == aws.etag(A1, BUCKET, KEY) and second.plan_digest != first.plan_digest
    assert {c["logicalId"] for c in second.plan["changes"]} == {
        f"Q{i}" for i in range(COUNT) if f"GoldenCdkStack-Q{i}" not in before
    }
    SimpleWorker([shared_queue], connection=shared_queue.connection).work(burst=True)
    second.refresh_from_db()
    assert second.status == OperationStatus.FAILED, second.error
    assert next_name in second.error and "refusing to adopt" in second.error  # loud, never adopted
    assert next_name not in recorded(aws) and next_name in queue_names(aws)  # and never deleted either
    assert len(queue_names(aws)) == len(before) + 1  # nothing else was created
    assert aws.etag(A1, BUCKET, LOCK) is None

    # a person checks the stray queue is this stack's lost create, removes it, runs again
    sqs(aws).delete_queue(QueueUrl=sqs(aws).get_queue_url(QueueName=next_name)["QueueUrl"])
    third = run_again(world, second)
    SimpleWorker([shared_queue], connection=shared_queue.connection).work(burst=True)
    third.refresh_from_db()
    assert third.status == OperationStatus.SUCCEEDED, third.error
    assert queue_names(aws) == NAMES and recorded(aws) == NAMES  # every queue once, all recorded
    record = json.loads(aws.get(A1, BUCKET, KEY))
    assert sorted(record["resources"]) == sorted(f"Q{i}" for i in range(COUNT))
    assert sorted(third.result["details"]["result"]["created"]) == sorted(
        f"Q{i}" for i in range(COUNT) if f"GoldenCdkStack-Q{i}" not in before
    )
    assert aws.etag(A1, BUCKET, LOCK) is None and aws.etag(A1, BUCKET, JOURNAL) is None
    assert [o.rerun_of_id for o in Operation.objects.order_by("id")] == [None, first.pk, second.pk]
