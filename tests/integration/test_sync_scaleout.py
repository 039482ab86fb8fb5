"""Scale-out of the sync on RQ: one job per account, never two queued or running for the
same account however many schedulers fire, and real worker processes sharing the work.

Needs PostgreSQL and a Redis server (scripts/test.sh): the worker and scheduler processes
share the test's database and Redis db.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from rq import SimpleWorker, Worker
from rq.job import Job, JobStatus

from cdkd_site.queues import get_queue
from stacks.models import Account, Stack, SyncRun, SyncStatus
from tests.support.workers import ROOT, database_url, kill_tree, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ACCOUNT_IDS = [f"{i:012d}" for i in range(100000000001, 100000000021)]  # twenty accounts


@pytest.fixture
def sync_queue():
    if connection.vendor != "postgresql" or not settings.REDIS_URL.startswith("redis://"):
        pytest.skip("needs PostgreSQL and a Redis server shared with other processes (run scripts/test.sh)")
    queue = get_queue("sync")
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


def make_accounts(n: int) -> list[Account]:
    return [Account.objects.create(account_id=a, role_arn=f"arn:aws:iam::{a}:role/cdkd-admin") for a in ACCOUNT_IDS[:n]]


def account_jobs(queue) -> Counter[int]:
    """Queued account jobs, counted by account pk."""
    jobs = [Job.fetch(job_id, connection=queue.connection) for job_id in queue.get_job_ids()]
    return Counter(job.args[0] for job in jobs if job.func_name == "stacks.jobs.sync_account_job")


def env_for_children() -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CDKD_SYNC_INTERVAL": "0",
    }


# --- no duplicates ------------------------------------------------------------------------


def test_it_queues_one_job_per_account_when_the_schedule_fires_twice(sync_queue):
    from stacks.jobs import scheduled_sync

    accounts = make_accounts(5)

    scheduled_sync()
    scheduled_sync()

    assert account_jobs(sync_queue) == Counter({a.pk: 1 for a in accounts})
    # Both runs wait for the same five jobs.
    assert SyncRun.objects.filter(trigger="schedule", status=SyncStatus.QUEUED).count() == 2


def test_it_queues_one_job_per_account_from_two_scheduler_processes_at_once(sync_queue, tmp_path):
    accounts = make_accounts(20)
    start_at = time.time() + 4  # both processes have imported Django by then
    code = (
        "import os, time\n"
        "time.sleep(max(0.0, float(os.environ['START_AT']) - time.time()))\n"
        "from stacks.jobs import scheduled_sync\n"
        "scheduled_sync()\n"
    )
    env = {**env_for_children(), "START_AT": str(start_at)}
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / f"scheduler-{i}.log").open("w"),
        )
        for i in range(2)
    ]
    for proc in procs:
        assert proc.wait(timeout=60) == 0, (tmp_path / "scheduler-0.log").read_text()

    assert account_jobs(sync_queue) == Counter({a.pk: 1 for a in accounts})
    assert SyncRun.objects.filter(trigger="schedule").count() == 2


def test_it_queues_one_job_per_account_from_many_threads_at_once(sync_queue):
    from stacks.sync import dispatch_sync_run

    accounts = make_accounts(10)
    runs = [SyncRun.objects.create(account_ids=[a.pk for a in accounts], trigger="schedule") for _ in range(6)]
    barrier = threading.Barrier(len(runs))
    queued: list[list[int]] = []

    def dispatch(run: SyncRun) -> None:
        try:
            barrier.wait()
            queued.append(dispatch_sync_run(run.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatch, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert account_jobs(sync_queue) == Counter({a.pk: 1 for a in accounts})
    assert sorted(pk for pks in queued for pk in pks) == sorted(a.pk for a in accounts)


def test_it_counts_a_running_job_and_takes_over_from_a_dead_worker(sync_queue):
    from rq.registry import StartedJobRegistry
    from rq.utils import current_timestamp

    from stacks.sync import dispatch_sync_run

    (account,) = make_accounts(1)
    first = SyncRun.objects.create(account_ids=[account.pk], trigger="schedule")
    dispatch_sync_run(first.pk)
    (job_id,) = sync_queue.get_job_ids()
    # A worker takes the job and is running it: its execution has a heartbeat deadline ahead.
    sync_queue.remove(job_id)
    job = Job.fetch(job_id, connection=sync_queue.connection)
    job.set_status(JobStatus.STARTED)
    registry = StartedJobRegistry(sync_queue.name, connection=sync_queue.connection)
    sync_queue.connection.zadd(registry.key, {f"{job_id}:exec1": current_timestamp() + 60})

    second = SyncRun.objects.create(account_ids=[account.pk], trigger="schedule")
    assert dispatch_sync_run(second.pk) == []
    assert sync_queue.get_job_ids() == []

    # The worker was killed: the heartbeat deadline passed and nobody will finish the job.
    sync_queue.connection.zadd(registry.key, {f"{job_id}:exec1": current_timestamp() - 1})
    assert dispatch_sync_run(second.pk) == [account.pk]
    assert list(account_jobs(sync_queue).items()) == [(account.pk, 1)]


def test_it_queues_the_account_again_once_its_job_is_done(sync_queue):
    from stacks.sync import dispatch_sync_run

    (account,) = make_accounts(1)  # no bucket: the job finishes with an error, quickly
    first = SyncRun.objects.create(account_ids=[account.pk], trigger="schedule")
    dispatch_sync_run(first.pk)
    SimpleWorker([sync_queue], connection=sync_queue.connection).work(burst=True)
    first.refresh_from_db()
    assert first.status == SyncStatus.FAILED and first.result["accounts"][0]["account"] == account.account_id

    second = SyncRun.objects.create(account_ids=[account.pk], trigger="schedule")
    assert dispatch_sync_run(second.pk) == [account.pk]


def test_a_run_that_joins_a_queued_job_gets_its_result(sync_queue, aws, django_user_model):
    from stacks.sync import request_sync

    root = django_user_model.objects.create_superuser("root")
    (account,) = make_accounts(1)
    aws.make_bucket(account.account_id, f"cdkd-state-{account.account_id}")
    aws.put(account.account_id, f"cdkd-state-{account.account_id}", "cdkd/S/us-east-1/state.json", {"version": 11})

    mine = request_sync(root, account)
    theirs = request_sync(root)  # every account: joins the job already queued

    assert sync_queue.count == 1
    SimpleWorker([sync_queue], connection=sync_queue.connection).work(burst=True)
    for run in (mine, theirs):
        run.refresh_from_db()
        assert (run.status, run.done, run.total) == (SyncStatus.SUCCEEDED, 1, 1)
        assert [a["fetched"] for a in run.result["accounts"]] == [1]
    assert aws.requests["GetObject"] == 1


# --- worker processes ---------------------------------------------------------------------


@contextmanager
def sync_workers(n: int, endpoint: str, logs):
    """`n` real `rqworker sync` processes (not burst: they wait for jobs), killed on exit."""
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "rqworker", "sync"],
            cwd=ROOT,
            env={**env_for_children(), "AWS_ENDPOINT_URL": endpoint},
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=(logs / f"worker-{i}.log").open("w"),
        )
        for i in range(n)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc.pid)
            proc.wait(timeout=10)


def test_two_worker_processes_share_the_accounts_and_sync_each_once(sync_queue, aws, django_user_model, tmp_path):
    from stacks.sync import request_sync

    root = django_user_model.objects.create_superuser("root")
    accounts = make_accounts(8)
    buckets = {}
    for account in accounts:
        bucket = aws.make_bucket(account.account_id, f"cdkd-state-{account.account_id}")
        buckets[bucket] = account
        aws.put_many(
            account.account_id,
            bucket,
            {f"cdkd/S{i:02d}/us-east-1/state.json": {"version": 11, "resources": {}} for i in range(30)},
        )
    seen: Counter[tuple[str, str]] = Counter()
    lock = threading.Lock()

    def count(api: str, method: str, path: str, headers) -> None:
        with lock:
            seen[(api, path.lstrip("/").partition("/")[0])] += 1

    aws.proxy.add_hook(count)
    aws.proxy.latency = 0.02  # each account takes a while, so one worker cannot take them all

    with sync_workers(2, aws.endpoint, tmp_path):
        wait_for(lambda: len(Worker.all(queue=sync_queue)) == 2, timeout=60, what="two workers")
        run = request_sync(root)
        wait_for(lambda: SyncRun.objects.get(pk=run.pk).finished, timeout=120, what="the sync run")

    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.result
    assert sorted(a["account"] for a in run.result["accounts"]) == [a.account_id for a in accounts]
    assert (run.done, run.total) == (240, 240)
    assert Stack.objects.count() == 240
    # Each account synced exactly once: one listing and thirty GETs per bucket.
    assert {b: seen[("ListObjectsV2", b)] for b in buckets} == dict.fromkeys(buckets, 1)
    assert {b: seen[("GetObject", b)] for b in buckets} == dict.fromkeys(buckets, 30)
    # And the work was spread over both workers.
    by_worker = Counter(a["worker"] for a in run.result["accounts"])
    assert len(by_worker) == 2, by_worker


def test_the_progress_page_follows_a_run_across_its_account_jobs(sync_queue, aws, django_user_model, client):
    from django.urls import reverse

    from stacks.sync import request_sync, run_account_job

    root = django_user_model.objects.create_superuser("root")
    first, second = make_accounts(2)
    for account, n in ((first, 3), (second, 4)):
        bucket = aws.make_bucket(account.account_id, f"cdkd-state-{account.account_id}")
        for i in range(n):
            aws.put(account.account_id, bucket, f"cdkd/S{i}/us-east-1/state.json", {"version": 11})
    run = request_sync(root)
    client.force_login(root)
    page = reverse("sync_status", args=[run.pk])

    run_account_job(first.pk)  # one worker has finished its account, the other has not started
    run.refresh_from_db()
    assert (run.status, run.done, run.total, run.phase) == (SyncStatus.RUNNING, 3, 3, "1 of 2 accounts synced")
    body = client.get(page, headers={"HX-Request": "true"}).content.decode()
    assert "1 of 2 accounts synced" in body and "3 of 3 records downloaded" in body and "hx-trigger" in body

    run_account_job(second.pk)
    run.refresh_from_db()
    assert (run.status, run.done, run.total, run.percent) == (SyncStatus.SUCCEEDED, 7, 7, 100)
    body = client.get(page, headers={"HX-Request": "true"}).content.decode()
    assert "hx-trigger" not in body
    assert f"{first.account_id}: 3 listed, 3 downloaded" in body and f"{second.account_id}: 4 listed" in body


def test_a_killed_work_horse_fails_its_account_instead_of_leaving_the_run_waiting(
    sync_queue, aws, django_user_model, tmp_path
):
    from stacks.sync import dispatch_sync_run, request_sync

    root = django_user_model.objects.create_superuser("root")
    (account,) = make_accounts(1)
    bucket = aws.make_bucket(account.account_id, f"cdkd-state-{account.account_id}")
    aws.put(account.account_id, bucket, "cdkd/S/us-east-1/state.json", {"version": 11})

    def slow_get(api: str, method: str, path: str, headers) -> None:
        if api == "GetObject":
            time.sleep(3)  # the job is mid-download when its work-horse dies

    aws.proxy.add_hook(slow_get)
    with sync_workers(1, aws.endpoint, tmp_path) as (worker,):
        wait_for(lambda: len(Worker.all(queue=sync_queue)) == 1, timeout=60, what="the worker")
        run = request_sync(root)
        wait_for(lambda: SyncRun.objects.get(pk=run.pk).status == SyncStatus.RUNNING, timeout=60, what="the job")
        time.sleep(0.5)
        (horse,) = [
            int(pid)
            for task in Path(f"/proc/{worker.pid}/task").glob("*")
            for pid in (task / "children").read_text().split()
        ]
        os.kill(horse, signal.SIGKILL)
        wait_for(lambda: SyncRun.objects.get(pk=run.pk).finished, timeout=60, what="the run to finish")

    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    (entry,) = run.result["accounts"]
    assert entry["account"] == account.account_id and "work-horse" in entry["errors"][0]
    # The account's booking was released with it: the next sync queues a job again.
    again = SyncRun.objects.create(account_ids=[account.pk], trigger="schedule")
    assert dispatch_sync_run(again.pk) == [account.pk]
