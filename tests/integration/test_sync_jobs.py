"""Sync as an RQ job: created before it is queued, queued on commit, run by a worker
(Redis from REDIS_URL: the real server under scripts/test.sh and CI)."""

from __future__ import annotations

import pytest
from rq import SimpleWorker

from cdkd_site.queues import get_queue
from stacks.jobs import SCHEDULED_PREFIX, schedule_next_sync
from stacks.models import Account, Membership, Role, Stack, SyncRun, SyncStatus
from stacks.sync import execute_sync_run, request_sync

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1, A2 = "111111111111", "222222222222"


@pytest.fixture
def queue():
    queue = get_queue("sync")
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


@pytest.fixture
def world(aws, django_user_model):
    aws.make_bucket(A1, f"cdkd-state-{A1}")
    for i in range(5):
        aws.put(A1, f"cdkd-state-{A1}", f"cdkd/S{i}/us-east-1/state.json", {"version": 11, "resources": {}})
    a1 = Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    a2 = Account.objects.create(account_id=A2, role_arn=f"arn:aws:iam::{A2}:role/cdkd-admin")
    alice = django_user_model.objects.create_user("alice")
    Membership.objects.create(user=alice, account=a1, role=Role.VIEWER)
    return {"alice": alice, "a1": a1, "a2": a2}


def work(queue) -> None:
    SimpleWorker([queue], connection=queue.connection).work(burst=True)


def test_it_queues_the_run_on_commit_and_a_worker_runs_it(queue, world):
    run = request_sync(world["alice"])

    assert run.account_ids == [world["a1"].pk]  # only the accounts alice can see
    assert queue.count == 1
    work(queue)

    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED
    assert (run.done, run.total, run.percent) == (5, 5, 100)
    assert run.result["accounts"][0]["fetched"] == 5
    assert Stack.objects.count() == 5


def test_it_refuses_an_account_the_person_cannot_see(queue, world):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        request_sync(world["alice"], world["a2"])
    assert not SyncRun.objects.exists() and queue.count == 0


def test_it_runs_a_sync_run_only_once(queue, world):
    run = request_sync(world["alice"])
    work(queue)

    again = execute_sync_run(run.pk)

    assert again.status == SyncStatus.SUCCEEDED and again.finished_at == SyncRun.objects.get(pk=run.pk).finished_at


def test_it_reports_an_account_that_failed(queue, world, django_user_model):
    root = django_user_model.objects.create_superuser("root")
    run = request_sync(root)
    work(queue)

    run.refresh_from_db()
    assert run.status == SyncStatus.PARTIAL
    failed = [a for a in run.result["accounts"] if a["errors"]]
    assert [a["account"] for a in failed] == [A2] and "cdkd bootstrap" in failed[0]["errors"][0]


def test_it_books_one_scheduled_sync(queue, settings):
    settings.CDKD_SYNC_INTERVAL = 60

    assert schedule_next_sync(60) is True
    assert schedule_next_sync(60) is False

    booked = queue.scheduled_job_registry.get_job_ids()
    assert len(booked) == 1 and booked[0].startswith(SCHEDULED_PREFIX)
