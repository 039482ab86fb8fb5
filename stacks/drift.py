"""Drift checks on the Django side: run engine.drift for a stack and keep the result
(`DriftCheck`), the scheduled checks (each account its own RQ job on the "sync" queue,
every `CDKD_DRIFT_INTERVAL` seconds; 0 = off), and the queries the pages use.

A check only reads (the record, then each resource through its provider), so it is not an
Operation; accept, revert and refresh-observed are (engine/refresh.py). What is stored is
engine.drift's report JSON, which never holds a masked position's value.
"""

from __future__ import annotations

import hashlib
import logging
import time

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from engine.drift import DRIFTED, DriftReport, check_stack
from engine.errors import EngineError
from engine.keys import KeyLayout
from engine.operations import OperationRefused
from stacks import notify
from stacks.models import Account, DriftCheck, EventKind, Stack
from stacks.records import open_bucket

logger = logging.getLogger(__name__)

SCHEDULED_PREFIX = "cdkd-scheduled-drift"
JOB = "stacks.drift.drift_stack_job"  # one stack's check asked for now


def record_check(
    account: Account,
    stack_name: str,
    region: str,
    *,
    report: DriftReport | None,
    error: str = "",
    trigger: str,
) -> DriftCheck:
    """Store one check and make it the stack's latest, in one transaction."""
    stack = Stack.objects.filter(account=account, stack_name=stack_name, region=region, legacy=False).first()
    with transaction.atomic():
        DriftCheck.objects.filter(account=account, stack_name=stack_name, region=region, latest=True).update(
            latest=False
        )
        check = DriftCheck.objects.create(
            account=account,
            stack=stack,
            stack_name=stack_name,
            region=region,
            checked_at=timezone.now(),
            trigger=trigger,
            record_etag=(report.etag or "") if report else "",
            drifted=len(report.drifted) if report else 0,
            errors=len(report.errors) if report else 0,
            counts=report.counts() if report else {},
            resources=report.as_json()["resources"] if report else [],
            api_calls=report.api_calls if report else 0,
            duration_ms=report.duration_ms if report else 0,
            error=error[:2000],
            latest=True,
        )
        if check.drifted > 0:
            notify_drift(check)
        return check


def drift_dedupe_key(check: DriftCheck) -> str:
    """The same drift is told once: the same resources in the same state at the same paths,
    on the same record version, since the stack was last seen in sync (a stack that drifts,
    is put right and drifts the same way again is news again). Paths only, never values: the
    key is stored in clear and a live value may be sensitive."""
    in_sync = (
        DriftCheck.objects.filter(
            account=check.account, stack_name=check.stack_name, region=check.region, drifted=0, errors=0, error=""
        )
        .exclude(pk=check.pk)
        .order_by("-checked_at", "-pk")
        .values_list("pk", flat=True)
        .first()
    )
    shape = sorted((r.get("logicalId", ""), r.get("status", ""), _paths(r)) for r in _drifted_rows(check))
    text = repr((check.account_id, check.stack_name, check.region, check.record_etag, in_sync or 0, shape))
    return "drift.found:" + hashlib.sha256(text.encode()).hexdigest()[:40]


def _paths(row: dict) -> list[str]:
    return sorted(str(d.get("path", "")) for d in row.get("differences") or [] if isinstance(d, dict))


def _drifted_rows(check: DriftCheck) -> list[dict]:
    return [r for r in check.resources if isinstance(r, dict) and r.get("status") in DRIFTED]


def notify_drift(check: DriftCheck) -> None:
    """drift.found, once per drift (see drift_dedupe_key), with the drifted logical ids
    (sorted: the record's order is the order its resources were written in)."""
    drifted = sorted(str(r.get("logicalId", "")) for r in _drifted_rows(check))
    notify.emit(
        EventKind.DRIFT_FOUND,
        check.account,
        dedupe=drift_dedupe_key(check),
        stack=check.stack_name,
        region=check.region,
        drifted=check.drifted,
        resources=drifted,
        drift=check,
    )


def run_check(
    account: Account, stack_name: str, region: str, *, actor: str, trigger: str, concurrency: int | None = None
) -> tuple[DriftCheck, DriftReport | None]:
    """Check one stack now and store the result; an unusable record is stored as an error."""
    try:
        report = check_stack(
            open_bucket(account, actor),
            KeyLayout(account.prefix),
            stack_name,
            region,
            concurrency=concurrency or settings.CDKD_DRIFT_CONCURRENCY,
        )
    except EngineError as exc:
        return record_check(account, stack_name, region, report=None, error=str(exc), trigger=trigger), None
    return record_check(account, stack_name, region, report=report, trigger=trigger), report


def check_account(account: Account, *, trigger: str = "schedule") -> list[DriftCheck]:
    """Every region-scoped stack of the account that this app may read (not a newer schema)."""
    checks = []
    stacks = Stack.objects.filter(account=account, legacy=False, read_only=False).exclude(region=None)
    for stack_name, region in stacks.values_list("stack_name", "region"):
        try:
            check, _ = run_check(account, stack_name, region, actor="drift-schedule", trigger=trigger)
        except Exception:  # one stack's bug never ends the account's checks
            logger.exception("drift check of %s (%s) in %s failed", stack_name, region, account.account_id)
            continue
        checks.append(check)
    return checks


# --- the schedule ---------------------------------------------------------------------------


def drift_account_job(account_pk: int) -> int:
    """The RQ job of one account's scheduled checks; returns how many stacks it checked."""
    from cdkd_site.queues import get_queue, release_unique

    account = Account.objects.filter(pk=account_pk).first()
    try:
        return len(check_account(account)) if account is not None else 0
    finally:
        from rq import get_current_job

        job = get_current_job()
        if job is not None:
            release_unique(get_queue("sync"), f"drift-account:{account_pk}", job.id)


def scheduled_drift() -> None:
    """Queue each account's drift job (one live job per account), then book the next run."""
    from cdkd_site.queues import enqueue_unique, get_queue

    try:
        queue = get_queue("sync")
        for pk in Account.objects.values_list("pk", flat=True):
            enqueue_unique(
                queue,
                f"drift-account:{pk}",
                "stacks.drift.drift_account_job",
                pk,
                job_id=f"drift-account-{pk}-{time.time_ns()}",
            )
    finally:
        schedule_next_drift(settings.CDKD_DRIFT_INTERVAL)


def schedule_next_drift(delay_seconds: int) -> bool:
    """Book the next scheduled drift run unless one is booked (or the interval is 0)."""
    from stacks.jobs import book_once

    if settings.CDKD_DRIFT_INTERVAL <= 0:
        return False
    return book_once(SCHEDULED_PREFIX, "stacks.drift.scheduled_drift", delay_seconds)


# --- a check now, from the stack page or the API -----------------------------------------------


def _stack_key(stack_pk: int) -> str:
    return f"drift-stack:{stack_pk}"


def check_why_not(stack: Stack) -> str | None:
    """Why this stack cannot be checked now, in one line, or None (the scheduled checks
    skip the same records: check_account)."""
    if stack.legacy or not stack.region:
        return "A legacy record (no region in its key) has no drift baseline here; a cdkd deploy migrates it first."
    if stack.read_only:
        return "The record is newer than this app knows: its resources are not compared."
    return None if stack.resource_count else "The record lists no resources."


def check_pending(stack: Stack) -> bool:
    """Whether a check of this stack is queued or running now."""
    from redis.exceptions import RedisError

    from cdkd_site.queues import booked_job, get_queue, job_alive

    try:
        queue = get_queue("sync")
        job_id = booked_job(queue, _stack_key(stack.pk))
        return job_id is not None and job_alive(queue, job_id)
    except RedisError:
        return False  # the page still shows; the request itself says when Redis is down


def request_check(user, stack: Stack, *, client_address: str | None = None) -> bool:
    """Queue a check of `stack` now, on the "sync" queue once the request commits; False
    when one is already queued or running (one live check per stack). Reads only, so not
    an Operation, but audited: it reads every resource with the account's role. Refuses as
    the pages do: PermissionDenied without the operator role, then OperationRefused with
    `check_why_not`'s reason."""
    from cdkd_site.queues import enqueue_unique, get_queue
    from stacks import audit
    from stacks.access import has_role
    from stacks.models import Role

    if not has_role(user, stack.account, Role.OPERATOR):
        raise PermissionDenied(f"Checking drift needs the operator role on {stack.account}.")
    why = check_why_not(stack)
    if why:
        raise OperationRefused(why)
    get_queue("sync").connection.ping()  # RedisError: nothing is audited or queued
    if check_pending(stack):
        return False
    audit.record(
        "drift.check-requested",
        actor=user.get_username(),
        actor_user=user,
        account=stack.account,
        stack_name=stack.stack_name,
        region=stack.region or "",
        client_address=client_address,
    )
    job_id, actor = f"drift-stack-{stack.pk}-{time.time_ns()}", user.get_username()

    def enqueue() -> None:
        enqueue_unique(get_queue("sync"), _stack_key(stack.pk), JOB, stack.pk, actor, job_id=job_id)

    transaction.on_commit(enqueue, robust=True)  # the request has answered "queued" by then
    return True


def drift_stack_job(stack_pk: int, actor: str) -> int | None:
    """The RQ job of one check asked for now; the stored check's id (None: the stack is gone)."""
    from cdkd_site.queues import get_queue, release_unique

    try:
        stack = Stack.objects.select_related("account").filter(pk=stack_pk).first()
        if stack is None or check_why_not(stack):
            return None
        check, _ = run_check(stack.account, stack.stack_name, stack.region, actor=actor, trigger="web")
        return check.pk
    finally:
        from rq import get_current_job

        job = get_current_job()
        if job is not None:
            release_unique(get_queue("sync"), _stack_key(stack_pk), job.id)


# --- queries ----------------------------------------------------------------------------------


def latest_drifted(accounts: QuerySet[Account] | list[Account] | None = None) -> QuerySet[DriftCheck]:
    """The latest check of every stack that found drifted resources (MODIFIED or DELETED),
    newest first: one filter on the partial index `drift_latest_drifted`. Pass the accounts
    the person may see (stacks.access.accounts_for)."""
    checks = DriftCheck.objects.filter(latest=True, drifted__gt=0)
    if accounts is not None:
        checks = checks.filter(account__in=accounts)
    return checks.select_related("account", "stack").order_by("account", "-checked_at")


def latest_for_stack(stack: Stack) -> DriftCheck | None:
    return DriftCheck.objects.filter(
        account_id=stack.account_id, stack_name=stack.stack_name, region=stack.region, latest=True
    ).first()
