"""Bucket posture per account: run `engine.posture` on the account's state bucket, keep the
result in `BucketPosture`, and hand the failing checks to the attention board.

Checks run as one RQ job per account (`stacks.jobs.posture_check`, job id `posture-{pk}`
so an account never has two queued), booked by the sync schedule for accounts whose last
check is older than `CDKD_POSTURE_INTERVAL`. A check only reads bucket settings; it needs no
person, like a sync. Who sees a result is decided where it is shown (the account page is
for the account's admins; the board passes only the accounts a person can see).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from engine import aws
from engine import posture as engine_posture
from engine.errors import EngineError
from engine.keys import KeyLayout
from stacks.models import Account, BucketPosture, ScanRun, SecretFinding, SyncStatus
from stacks.records import open_bucket

logger = logging.getLogger(__name__)

QUEUE = "sync"  # read-only background work, beside the syncs


def secret_history(account: Account) -> engine_posture.SecretHistory:
    """Whether a scan that reads history has run on the account, and how many old versions
    its findings name (findings hold where a secret is, never its value)."""
    scanned = ScanRun.objects.filter(
        Q(account=account) | Q(account__isnull=True, account_ids__contains=[account.pk]),
        history=True,
        status__in=[SyncStatus.SUCCEEDED, SyncStatus.PARTIAL],
    ).exists()
    flagged = (
        SecretFinding.objects.filter(account=account, version_id__isnull=False).values("key", "version_id").distinct()
    ).count()
    return engine_posture.SecretHistory(scanned=scanned, flagged_versions=flagged)


def check_account(account: Account, *, actor: str = "posture") -> BucketPosture:
    """Check the account's bucket now and store the result (also when no check could run:
    then `error` says why and every check is unknown)."""
    now = timezone.now()
    try:
        bucket = open_bucket(account, actor)
        s3 = aws.client(bucket.session, "s3", bucket.region)
        results = engine_posture.check_bucket(
            s3,
            bucket.name,
            account.account_id,
            layout=KeyLayout(account.prefix),
            retention_days=settings.CDKD_AUDIT_RETENTION_DAYS,
            secrets=secret_history(account),
        )
        name, error = bucket.name, ""
    except EngineError as exc:
        name, error = account.resolved_bucket or account.bucket, str(exc)
        results = [
            engine_posture.CheckResult(key, engine_posture.UNKNOWN, f"unknown: the bucket could not be opened ({exc})")
            for key in engine_posture.CHECKS
        ]
    return store(account, name, results, now, error=error)


def store(account: Account, bucket: str, results: list, at, *, error: str = "") -> BucketPosture:
    """Save the results; a check keeps the `since` of the last result when its status is the same."""
    previous = BucketPosture.objects.filter(account=account).first()
    before = {r.get("key"): r for r in (previous.results if previous else []) if isinstance(r, dict)}
    rows = []
    for result in results:
        row = result.as_json()
        old = before.get(row["key"])
        row["since"] = (
            old["since"] if old and old.get("status") == row["status"] and old.get("since") else at.isoformat()
        )
        rows.append(row)
    problems = sum(1 for r in rows if r["status"] == engine_posture.PROBLEM)
    posture, _ = BucketPosture.objects.update_or_create(
        account=account,
        defaults={"bucket": bucket, "checked_at": at, "results": rows, "problem_count": problems, "error": error},
    )
    return posture


def posture_problems(account_ids: Iterable[Any]) -> list[dict[str, Any]]:
    """The failing checks (status "problem") of the given accounts, one dict per check:
    {account_id, bucket, check (label), key, status, found, change, since, checked_at}.
    `account_ids` are AWS account ids (or Account pks). One query, whatever the count."""
    ids = list(account_ids)
    refs = [str(i) for i in ids if not isinstance(i, int)]
    pks = [i for i in ids if isinstance(i, int)]
    rows = (
        BucketPosture.objects.filter(Q(account__account_id__in=refs) | Q(account_id__in=pks), problem_count__gt=0)
        .select_related("account")
        .order_by("account__account_id")
    )
    out = []
    for posture in rows:
        for check in posture.results:
            if isinstance(check, dict) and check.get("status") == engine_posture.PROBLEM:
                out.append(
                    {
                        "account_id": posture.account.account_id,
                        "bucket": posture.bucket,
                        "check": check.get("label") or check.get("key"),
                        "key": check.get("key"),
                        "status": check.get("status"),
                        "found": check.get("found", ""),
                        "change": check.get("change", ""),
                        "since": _time(check.get("since")) or posture.checked_at,
                        "checked_at": posture.checked_at,
                    }
                )
    return out


def _time(value: Any):
    from django.utils.dateparse import parse_datetime

    return parse_datetime(value) if isinstance(value, str) else None


def queue_check(account: Account) -> None:
    from cdkd_site.queues import get_queue

    get_queue(QUEUE).enqueue("stacks.jobs.posture_check", account.pk, job_id=f"posture-{account.pk}")


def queue_due_checks(now=None) -> int:
    """Queue a check of every account whose last one is older than CDKD_POSTURE_INTERVAL
    (or that has none). Returns how many were queued."""
    interval = settings.CDKD_POSTURE_INTERVAL
    if interval <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=interval)
    due = Account.objects.filter(Q(posture__isnull=True) | Q(posture__checked_at__lt=cutoff))
    count = 0
    for account in due:
        try:
            queue_check(account)
            count += 1
        except Exception:  # the schedule must go on; the next round tries again
            logger.exception("could not queue the posture check of %s", account.account_id)
    return count
