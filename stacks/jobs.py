"""RQ entry points for the mirror: thin wrappers around stacks.sync."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from stacks.models import Account, SyncRun
from stacks.sync import execute_sync_run

logger = logging.getLogger(__name__)

SCHEDULED_PREFIX = "cdkd-scheduled-sync"


def run_sync(sync_run_id: int) -> None:
    execute_sync_run(sync_run_id)


def run_scan(scan_run_id: int) -> None:
    """A secret scan; its only argument is the ScanRun id (never a value)."""
    from stacks.scans import execute_scan_run

    execute_scan_run(scan_run_id)


def scheduled_sync() -> None:
    """Sync every account, then book the next run. The booking lives in Redis, so the
    schedule survives worker restarts."""
    try:
        housekeeping()
        with transaction.atomic():
            run = SyncRun.objects.create(
                account_ids=list(Account.objects.values_list("pk", flat=True)), trigger="schedule"
            )
        execute_sync_run(run.pk)
    finally:
        schedule_next_sync(settings.CDKD_SYNC_INTERVAL)


def schedule_next_sync(delay_seconds: int) -> bool:
    """Book a scheduled sync unless one is already booked. Returns whether it booked one."""
    from cdkd_site.queues import get_queue

    if settings.CDKD_SYNC_INTERVAL <= 0:
        return False
    queue = get_queue("sync")
    pending = queue.scheduled_job_registry.get_job_ids() + queue.get_job_ids()
    if any(job_id.startswith(SCHEDULED_PREFIX) for job_id in pending):
        return False
    queue.enqueue_in(
        timedelta(seconds=delay_seconds), "stacks.jobs.scheduled_sync", job_id=f"{SCHEDULED_PREFIX}-{time.time_ns()}"
    )
    return True


def run_operation(operation_id: int) -> None:
    from stacks.operations import run_operation as run

    run(operation_id)


def housekeeping() -> None:
    """Mark operations whose worker died, and requests that waited too long."""
    from stacks.operations import expire_stale_requests, reap_abandoned

    reap_abandoned()
    expire_stale_requests()
