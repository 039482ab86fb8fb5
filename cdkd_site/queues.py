"""RQ queues, with an in-memory Redis when REDIS_URL is fakeredis:// (tests, demo fallback)."""

from __future__ import annotations

import functools

import django_rq
from django.conf import settings
from rq import Queue, Worker


@functools.cache
def _fake_connection(url: str):
    import fakeredis

    return fakeredis.FakeStrictRedis(server=fakeredis.FakeServer())


def get_connection(name: str = "default"):
    if settings.REDIS_URL.startswith("fakeredis://"):
        return _fake_connection(settings.REDIS_URL)
    return django_rq.get_connection(name)


def get_queue(name: str = "default") -> Queue:
    """The named queue. Enqueue inside a transaction and the job is sent on commit."""
    if settings.REDIS_URL.startswith("fakeredis://"):
        return django_rq.get_queue(name, connection=get_connection(name))
    return django_rq.get_queue(name)


# --- one job per key ---------------------------------------------------------------------
#
# A key (e.g. "sync-account:7") names at most one live job: `cdkd:unique:<key>` holds the id
# of the job queued or running for it. Enqueuers check and book it under a short Redis
# lock, so two schedulers (web apps, workers, machines) never both enqueue; the job clears
# the booking when its work is done (`release_unique`). A booking whose job is finished,
# failed, gone, or "started" by a worker whose heartbeat lapsed (the worker died) is stale
# and is taken over.

UNIQUE_PREFIX = "cdkd:unique:"
LIVE_STATUSES = ("queued", "scheduled", "deferred")

# Compare-and-delete: clear the booking only if it still names this job.
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def job_alive(queue: Queue, job_id: str) -> bool:
    """Whether the job is queued, or running on a worker that is still alive."""
    from rq.exceptions import NoSuchJobError
    from rq.job import Job
    from rq.registry import StartedJobRegistry
    from rq.utils import current_timestamp

    try:
        job = Job.fetch(job_id, connection=queue.connection)
    except NoSuchJobError:
        return False
    status = job.get_status(refresh=False)
    status = getattr(status, "value", status)
    if status in LIVE_STATUSES:
        return True
    if status != "started":
        return False
    # Each execution's score is its heartbeat deadline; a dead worker's deadline passes.
    registry = StartedJobRegistry(queue.name, connection=queue.connection)
    live = queue.connection.zrangebyscore(registry.key, current_timestamp(), "+inf")
    return any(member.decode().rsplit(":", 1)[0] == job_id for member in live)


def enqueue_unique(queue: Queue, key: str, func: str, *args, job_id: str, **options):
    """Enqueue `func(*args)` as `job_id` unless a live job is booked for `key`. Returns the
    new job, or None when one is already queued or running (or another enqueuer holds the
    booking lock right now, which means it is booking one). Call outside transactions."""
    from django.db import connection

    if connection.in_atomic_block:
        raise RuntimeError("enqueue_unique runs outside a transaction (the job must see committed rows)")
    redis = queue.connection
    booking = UNIQUE_PREFIX + key
    lock = redis.lock(booking + ":lock", timeout=30, blocking_timeout=5)
    if not lock.acquire():
        return None
    try:
        current = redis.get(booking)
        if current is not None and job_alive(queue, current.decode()):
            return None
        # Booked before it is enqueued: a worker can finish the job before this returns.
        redis.set(booking, job_id)
        return queue.enqueue_call(func, args=args, job_id=job_id, **options)
    finally:
        lock.release()


def release_unique(queue: Queue, key: str, job_id: str) -> bool:
    """Clear the booking of `key` if it still names `job_id`; says whether it did."""
    return bool(queue.connection.eval(_RELEASE, 1, UNIQUE_PREFIX + key, job_id))


def booked_job(queue: Queue, key: str) -> str | None:
    value = queue.connection.get(UNIQUE_PREFIX + key)
    return value.decode() if value is not None else None


# --- the worker ---------------------------------------------------------------------------


class PreloadingWorker(Worker):
    """RQ's forking worker with the job code and the AWS service models loaded once, in
    the parent: each job runs in a fresh fork, which would otherwise import boto3 and parse
    S3's model again (about half a second of CPU per account job, on every job)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        preload()

    @property
    def dequeue_timeout(self) -> int:
        """An idle worker renews its heartbeat each time its blocking pop times out: every
        CDKD_WORKER_HEARTBEAT_SECONDS instead of RQ's worker_ttl - 15 (405 s), so /healthz
        can tell a live idle worker from a dead one within a minute or two."""
        return max(1, min(super().dequeue_timeout, settings.CDKD_WORKER_HEARTBEAT_SECONDS))

    def handle_work_horse_killed(self, job, retpid, ret_val, rusage) -> None:
        """RQ fails a job whose work-horse died (SIGKILL, out of memory) without calling its
        failure callback: call it here, so an account sync's runs hear of it at once."""
        from django.db import connections

        super().handle_work_horse_killed(job, retpid, ret_val, rusage)
        if job.failure_callback is None:
            return
        error = WorkHorseKilled(f"the work-horse running it died (waitpid returned {ret_val})")
        try:
            job.failure_callback(job, self.connection, WorkHorseKilled, error, None)
        except Exception:
            self.log.exception("failure callback of job %s", job.id)
        finally:
            connections.close_all()  # the next job's fork must not inherit a connection


class WorkHorseKilled(Exception):
    pass


def preload() -> None:
    import stacks.jobs  # noqa: F401 (imported for the fork to inherit)
    from engine import aws

    # Dummy keys: nothing is signed or sent, the clients only load their models.
    session = aws.new_session(aws_access_key_id="preload", aws_secret_access_key="preload", region_name="us-east-1")
    for service in ("s3", "sts"):
        session.client(service, region_name="us-east-1")
