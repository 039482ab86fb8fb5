"""RQ entry points for the mirror: thin wrappers around stacks.sync."""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import timedelta

from django.conf import settings

from stacks.models import Account
from stacks.sync import account_job_failed, execute_sync_run, run_account_job, start_sync_run

logger = logging.getLogger(__name__)

SCHEDULED_PREFIX = "cdkd-scheduled-sync"


def run_sync(sync_run_id: int) -> None:
    """A SyncRun queued as one job (before account jobs): queue its accounts' jobs."""
    execute_sync_run(sync_run_id)


def sync_account_job(account_pk: int) -> None:
    """One account's sync, for every open SyncRun waiting for it."""
    from rq import get_current_job

    job = get_current_job()
    worker = (job.worker_name if job else "") or f"{socket.gethostname()}.{os.getpid()}"
    run_account_job(account_pk, job_id=job.id if job else None, worker=worker)


def sync_account_failed(job, connection, exc_type, exc_value, tb) -> None:
    """RQ's failure callback of an account job (timed out, work-horse killed, abandoned)."""
    account_job_failed(job.args[0], job.id, f"{getattr(exc_type, '__name__', 'error')}: {exc_value}")


def run_scan(scan_run_id: int) -> None:
    """A secret scan; its only argument is the ScanRun id (never a value)."""
    from stacks.scans import execute_scan_run

    execute_scan_run(scan_run_id)


def posture_check(account_pk: int) -> None:
    """One account's bucket posture check (stacks.posture); reads bucket settings only."""
    from stacks.posture import check_account

    account = Account.objects.filter(pk=account_pk).first()
    if account is not None:
        check_account(account)


def scheduled_sync() -> None:
    """Queue a sync job for every account that has none queued or running, then book the
    next run. The booking lives in Redis, so the schedule survives worker restarts; the
    account jobs run on whichever workers listen on the "sync" queue."""
    try:
        housekeeping()
        start_sync_run(list(Account.objects.values_list("pk", flat=True)), trigger="schedule")
        from stacks.posture import queue_due_checks

        queue_due_checks()
    finally:
        schedule_next_sync(settings.CDKD_SYNC_INTERVAL)


def schedule_next_sync(delay_seconds: int) -> bool:
    """Book a scheduled sync unless one is already booked. Returns whether it booked one."""
    if settings.CDKD_SYNC_INTERVAL <= 0:
        return False
    return book_once(SCHEDULED_PREFIX, "stacks.jobs.scheduled_sync", delay_seconds)


def book_once(prefix: str, func: str, delay_seconds: int) -> bool:
    """Queue `func` on the sync queue in `delay_seconds` unless a job whose id starts with
    `prefix` is already booked or queued: the booking lives in Redis, so a schedule survives
    worker restarts. Under a lock, so workers starting at once on several machines book one."""
    from cdkd_site.queues import get_queue

    queue = get_queue("sync")
    lock = queue.connection.lock(f"cdkd:{prefix}:lock", timeout=30, blocking_timeout=10)
    if not lock.acquire():
        return False  # another process is booking it
    try:
        pending = queue.scheduled_job_registry.get_job_ids() + queue.get_job_ids()
        if any(job_id.startswith(prefix) for job_id in pending):
            return False
        queue.enqueue_in(timedelta(seconds=delay_seconds), func, job_id=f"{prefix}-{time.time_ns()}")
        return True
    finally:
        lock.release()


def run_operation(operation_id: int) -> None:
    from stacks.grouproles import refresh_for_operation
    from stacks.operations import run_operation as run

    # Group-rule roles as the people's groups and the rules are now, so the run's role
    # re-check refuses a requester (or drops an approval) whose group no longer gives it.
    refresh_for_operation(operation_id)
    run(operation_id)


def housekeeping() -> None:
    """Mark operations whose worker died, and requests that waited too long."""
    from stacks.operations import expire_stale_requests, reap_abandoned

    reap_abandoned()
    expire_stale_requests()
