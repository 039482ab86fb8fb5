"""Mirror every account's state bucket into the database, incrementally.

One sync of an account: list the prefix (paginated), compare each key's ETag with the one
stored, GET only the new or changed records, locks, event indexes and streams (concurrently, with a
bound), and apply the difference: create, update, delete. The `deployments/` event store
(every run's `{runId}.jsonl` and every `index.json`) is mirrored the same way, by
`stacks.eventsync`. Each record's rollback journal is mirrored from the listing alone
(its key, ETag, size and LastModified; never its body). A sync that finds nothing changed
issues no GET. S3 calls happen
outside database transactions; only the main thread of each account writes to the database.

What each record becomes in the mirror (rows, stubs, links) is `stacks.syncrecords`; this
module lists, downloads and orchestrates: one account, several at once, and requested
syncs (SyncRun and its per-account RQ jobs).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.utils import timezone

from engine import schema
from engine.backend import ObjectInfo, StateBucket, StoredObject
from engine.errors import AccessDenied, BucketNotFound, EngineError, NotFound
from engine.keys import KeyKind, KeyLayout
from stacks import eventsync, notify
from stacks.access import accounts_for
from stacks.models import (
    Account,
    BucketStatus,
    EventIndex,
    Lock,
    Role,
    Stack,
    SyncRun,
    SyncStatus,
)
from stacks.syncrecords import (
    JOURNAL_FIELDS,
    _apply_locks,
    _apply_states,
    _delete_stacks,
    _journal_changes,
    _link_locks,
    _link_parents,
    _stub_fields,
    _write_journals,
    too_large_defect,
)

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total) GETs of one account


@dataclass
class AccountResult:
    """What one account's sync did; the shape of `cdkd sync --json` per account."""

    account: str
    bucket: str = ""
    listed: int = 0  # state.json records listed
    fetched: int = 0  # records downloaded (or, over the size bound, recorded as too large)
    unchanged: int = 0  # records skipped because their ETag was unchanged
    removed: int = 0  # records dropped from the mirror
    errors: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_json(self) -> dict:
        return {
            "account": self.account,
            "bucket": self.bucket,
            "listed": self.listed,
            "fetched": self.fetched,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "errors": self.errors,
        }


# --- listing -----------------------------------------------------------------------------


@dataclass
class Listing:
    states: dict[str, ObjectInfo] = field(default_factory=dict)
    locks: dict[str, ObjectInfo] = field(default_factory=dict)
    event_indexes: dict[str, ObjectInfo] = field(default_factory=dict)
    event_streams: dict[str, ObjectInfo] = field(default_factory=dict)
    # rollback-journal.json by the state.json key of the record it sits beside
    journals: dict[str, ObjectInfo] = field(default_factory=dict)


def list_bucket(bucket: StateBucket, layout: KeyLayout) -> Listing:
    listing = Listing()
    for info in bucket.list_objects(layout.list_prefix):
        parsed = layout.parse(info.key)
        if parsed is None:
            continue
        if parsed.kind in (KeyKind.STATE, KeyKind.LEGACY_STATE):
            listing.states[info.key] = info
        elif parsed.kind in (KeyKind.LOCK, KeyKind.LEGACY_LOCK):
            listing.locks[info.key] = info
        elif parsed.kind == KeyKind.EVENT_INDEX:
            listing.event_indexes[info.key] = info
        elif parsed.kind == KeyKind.EVENT_STREAM:
            listing.event_streams[info.key] = info
        elif parsed.kind == KeyKind.ROLLBACK_JOURNAL:
            listing.journals[layout.state_key(parsed.stack_name, parsed.region)] = info
    return listing


def _fetch_all(
    bucket: StateBucket, keys: list[str], progress: Progress | None
) -> tuple[dict[str, StoredObject], dict[str, str], set[str]]:
    """GET every key concurrently. Returns (objects, errors by key, keys that vanished)."""
    objects: dict[str, StoredObject] = {}
    errors: dict[str, str] = {}
    vanished: set[str] = set()
    if not keys:
        return objects, errors, vanished
    done = 0
    workers = min(settings.CDKD_SYNC_CONCURRENCY, len(keys))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sync-get") as pool:
        futures = {pool.submit(bucket.get, key): key for key in keys}
        for future in as_completed(futures):
            key = futures[future]
            try:
                objects[key] = future.result()
            except NotFound:
                vanished.add(key)  # deleted between the listing and the GET
            except EngineError as exc:
                errors[key] = str(exc)
            done += 1
            if progress:
                progress(done, len(keys))
    return objects, errors, vanished


# --- one account -------------------------------------------------------------------------


def _record_bucket_failure(account: Account, status: str, message: str) -> None:
    Account.objects.filter(pk=account.pk).update(bucket_status=status, bucket_message=message, last_sync_error=message)


def _bucket_status(exc: EngineError) -> str:
    if isinstance(exc, BucketNotFound):
        return BucketStatus.MISSING
    if isinstance(exc, AccessDenied):
        return BucketStatus.DENIED
    return BucketStatus.ERROR


def _cached_bucket(account: Account) -> tuple[str, str] | None:
    """The bucket an earlier sync resolved, while it is recent enough to trust: resolving
    costs two HeadBucket calls and a GetBucketLocation per sync otherwise. An explicit
    bucket that was edited since, or an hour-old answer (cdkd state migrate may have moved
    the state to the new bucket name), is resolved again."""
    if not (account.resolved_bucket and account.bucket_region and account.bucket_checked_at):
        return None
    if account.bucket_status != BucketStatus.OK or (account.bucket and account.bucket != account.resolved_bucket):
        return None
    if timezone.now() - account.bucket_checked_at > timedelta(seconds=settings.CDKD_BUCKET_RECHECK_SECONDS):
        return None
    return account.resolved_bucket, account.bucket_region


def _open_and_list(account: Account, layout: KeyLayout, actor: str) -> tuple[StateBucket, Listing, bool]:
    """The bucket and its listing; the bool says whether the bucket was resolved now."""
    cached = _cached_bucket(account)
    if cached is not None:
        try:
            bucket = StateBucket.open(account.access(), actor=actor, bucket=cached[0], region=cached[1])
            return bucket, list_bucket(bucket, layout), False
        except BucketNotFound:
            pass  # gone since it was resolved: resolve again, as cdkd would
    bucket = StateBucket.open(account.access(), actor=actor)
    return bucket, list_bucket(bucket, layout), True


def sync_account(account: Account, *, actor: str = "sync", progress: Progress | None = None) -> AccountResult:
    """Bring the mirror of one account up to date with its bucket. Never raises for AWS
    trouble: a missing or denied bucket is recorded on the account and returned as an
    error, and the stacks mirrored before stay (a denied bucket is not an empty one)."""
    started = time.monotonic()
    result = AccountResult(account=account.account_id)
    # A sync that ended half-way (a crash, a lost worker) may have stored records without
    # the links between them: this one then re-links everything, changed or not.
    previous = Account.objects.filter(pk=account.pk).values("last_sync_started_at", "last_synced_at").first() or {}
    relink = previous.get("last_sync_started_at") is not None and (
        previous.get("last_synced_at") is None or previous["last_synced_at"] < previous["last_sync_started_at"]
    )
    Account.objects.filter(pk=account.pk).update(last_sync_started_at=timezone.now())
    layout = KeyLayout(account.prefix)
    try:
        bucket, listing, resolved_now = _open_and_list(account, layout, actor)
    except EngineError as exc:
        result.errors.append(str(exc))
        _record_bucket_failure(account, _bucket_status(exc), str(exc))
        return result
    result.bucket = bucket.name
    resolved = bucket.resolved

    # (pk, etag, *journal columns) by key; [0] and [1] are what every kind of row stores.
    stored_states = {
        row[1]: (row[0], row[2], *row[3:])
        for row in Stack.objects.filter(account=account).values_list("pk", "key", "etag", *JOURNAL_FIELDS)
    }
    stored_locks = {
        k: (pk, etag) for pk, k, etag in Lock.objects.filter(account=account).values_list("pk", "key", "etag")
    }
    stored_indexes = {
        k: (pk, etag) for pk, k, etag in EventIndex.objects.filter(account=account).values_list("pk", "key", "etag")
    }
    stored_streams = eventsync.stored_streams(account)

    def changed(listed: dict[str, ObjectInfo], stored: dict) -> list[str]:
        return [k for k, info in listed.items() if k not in stored or stored[k][1] != info.etag]

    now = timezone.now()
    state_keys = changed(listing.states, stored_states)
    lock_keys = changed(listing.locks, stored_locks)
    index_keys = changed(listing.event_indexes, stored_indexes)
    stream_keys = changed(listing.event_streams, stored_streams)
    result.listed = len(listing.states)
    result.unchanged = result.listed - len(state_keys)

    # Objects over the size bound are never downloaded: memory stays bounded, and each
    # becomes a defect (or an unreadable lock, or an empty stream) on its own stack.
    listed = {**listing.states, **listing.locks, **listing.event_indexes, **listing.event_streams}
    too_large = {k for k in state_keys + lock_keys + index_keys + stream_keys if listed[k].size > schema.MAX_BODY_BYTES}
    stubs = {
        k: _stub_fields(layout, k, listed[k], too_large_defect(k, listed[k].size), now, etag=listed[k].etag)
        for k in state_keys
        if k in too_large
    }
    fetch = [k for k in state_keys + lock_keys + index_keys + stream_keys if k not in too_large]
    objects, errors, vanished = _fetch_all(bucket, fetch, progress)
    for k in too_large:
        if k in listing.event_indexes or k in listing.event_streams:
            info = listed[k]
            objects[k] = StoredObject(
                key=k, body=b"", etag=info.etag, version_id=None, last_modified=info.last_modified
            )
    result.errors.extend(f"{key}: {message}" for key, message in sorted(errors.items()))

    state_objs = {k: objects[k] for k in state_keys if k in objects}
    lost = _apply_states(account, layout, state_objs, stored_states, now, journals=listing.journals, stubs=stubs)
    result.errors.extend(f"{key}: could not be stored in the mirror" for key in lost)
    result.fetched = len(state_objs) + len(stubs)

    gone_states = [k for k in stored_states if k not in listing.states or k in vanished]
    if gone_states:
        _delete_stacks(account, gone_states)
    result.removed = len(gone_states)
    # A journal appears or goes (a failed deploy, a rollback) while its record stays the same.
    journal_rows = _journal_changes(account, listing, stored_states, set(state_objs) | set(stubs))
    if journal_rows:
        _write_journals(journal_rows)
    if state_objs or stubs or gone_states or relink:
        _link_parents(account)

    lock_objs = {k: objects[k] for k in lock_keys if k in objects}
    large_locks = {k: listed[k] for k in lock_keys if k in too_large}
    lost = _apply_locks(account, layout, lock_objs, stored_locks, now, too_large=large_locks)
    result.errors.extend(f"{key}: could not be stored in the mirror" for key in lost)
    gone_locks = [k for k in stored_locks if k not in listing.locks or k in vanished]
    Lock.objects.filter(account=account, key__in=gone_locks).delete()
    if state_objs or stubs or gone_states or lock_keys or gone_locks or relink:
        _link_locks(account)
    notify.stale_locks(account)  # once per lock (key and ETag) older than CDKD_LOCK_STALE_SECONDS

    found = eventsync.changes(
        listing.event_indexes,
        listing.event_streams,
        stored_indexes,
        stored_streams,
        objects,
        vanished,
        index_keys + stream_keys,
    )
    found.too_large = too_large
    try:
        eventsync.mirror_event_store(account, layout, found, now)
    except Exception as exc:  # noqa: BLE001 - the records are mirrored; the events are read again next time
        logger.exception("the event store of account %s could not be mirrored", account.account_id)
        result.errors.append(f"event history: could not be stored in the mirror ({type(exc).__name__})")
    eventsync.link_operations(account)

    result.requests = dict(bucket.requests)
    result.seconds = round(time.monotonic() - started, 3)
    status_message = resolved.warning if resolved else ""
    error_text = "\n".join(result.errors)
    checked = {"bucket_checked_at": timezone.now()} if resolved_now else {}
    Account.objects.filter(pk=account.pk).update(
        resolved_bucket=bucket.name,
        bucket_source=resolved.source if resolved else "",
        bucket_region=bucket.region,
        bucket_status=BucketStatus.OK,
        bucket_message=status_message,
        last_synced_at=timezone.now(),
        last_sync_error=error_text,
        last_sync_counts=result.as_json(),
        **checked,
    )
    return result


def sync_accounts(
    accounts: Iterable[Account], *, actor: str = "sync", progress: Callable[[int, int], None] | None = None
) -> list[AccountResult]:
    """Sync several accounts at once; one account's failure does not stop the others.
    `progress(done, total)` reports GETs summed over every account."""
    accounts = list(accounts)
    totals: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()

    def one(account: Account) -> AccountResult:
        def report(done: int, total: int) -> None:
            if progress is None:
                return
            with lock:
                totals[account.pk] = (done, total)
                progress(sum(d for d, _ in totals.values()), sum(t for _, t in totals.values()))

        try:
            return sync_account(account, actor=actor, progress=report)
        except Exception as exc:  # a bug must not take the other accounts down with it
            logger.exception("sync of account %s failed", account.account_id)
            Account.objects.filter(pk=account.pk).update(last_sync_error=f"Sync failed: {exc}")
            return AccountResult(account=account.account_id, errors=[f"Sync failed: {exc}"])
        finally:
            if threading.current_thread() is not threading.main_thread():
                connection.close()

    # SQLite has one writer at a time (and tests share one in-memory database): accounts
    # go one after the other there; each account's GETs stay concurrent either way.
    if len(accounts) <= 1 or connection.vendor == "sqlite":
        return [one(a) for a in accounts]
    workers = min(settings.CDKD_SYNC_ACCOUNT_CONCURRENCY, len(accounts))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sync-account") as pool:
        return list(pool.map(one, accounts))


# --- requested syncs ---------------------------------------------------------------------
#
# A SyncRun covers one or more accounts; each account syncs as its own RQ job on the "sync"
# queue, so several worker processes (on one or more machines) share a run. An account has
# at most one job queued or running (`cdkd_site.queues.enqueue_unique`): a run that finds
# one waits for it instead of queueing another. Each job reports to every open run waiting
# for its account, and the last account of a run finishes the run.

OPEN = (SyncStatus.QUEUED, SyncStatus.RUNNING)


def account_job_key(account_pk: int) -> str:
    return f"sync-account:{account_pk}"


def request_sync(user, account: Account | None = None, *, trigger: str = "ui") -> SyncRun:
    """Create a SyncRun for one account (or every account the person can see) and queue
    its accounts' jobs when the transaction commits."""
    visible = accounts_for(user, Role.VIEWER)
    if account is not None:
        if not visible.filter(pk=account.pk).exists():
            raise PermissionDenied("You have no role on this account")
        ids = [account.pk]
    else:
        ids = list(visible.values_list("pk", flat=True))
    return start_sync_run(ids, account=account, user=user if user.is_authenticated else None, trigger=trigger)


def start_sync_run(account_ids: list[int], *, trigger: str, account: Account | None = None, user=None) -> SyncRun:
    with transaction.atomic():
        run = SyncRun.objects.create(account=account, account_ids=account_ids, requested_by=user, trigger=trigger)
        # The jobs must see the committed run.
        transaction.on_commit(lambda: dispatch_sync_run(run.pk))
    return run


def dispatch_sync_run(run_id: int) -> list[int]:
    """Queue a job for each account of the run that has none queued or running (the run
    waits for the one there is). Idempotent; returns the pks of the accounts queued now."""
    from rq import Callback

    from cdkd_site.queues import enqueue_unique, get_queue

    run = SyncRun.objects.filter(pk=run_id).first()
    if run is None or run.finished:
        return []
    if not run.account_ids:
        _finish_if_complete(run_id)
        return []
    queue = get_queue("sync")
    labels = dict(Account.objects.filter(pk__in=run.account_ids).values_list("pk", "account_id"))
    queued = []
    for pk in run.account_ids:
        job = enqueue_unique(
            queue,
            account_job_key(pk),
            "stacks.jobs.sync_account_job",
            pk,
            job_id=f"sync-account-{pk}-{uuid.uuid4().hex[:12]}",
            description=f"sync account {labels.get(pk, pk)}",
            result_ttl=600,
            failure_ttl=86400,
            on_failure=Callback("stacks.jobs.sync_account_failed"),
        )
        if job is not None:
            queued.append(pk)
    return queued


def execute_sync_run(run_id: int) -> SyncRun | None:
    """Start a SyncRun queued before account jobs existed (a `run_sync` job): queue its
    accounts' jobs. Safe to call twice, and a no-op for a finished run."""
    dispatch_sync_run(run_id)
    return SyncRun.objects.filter(pk=run_id).first()


def _waiting_runs(account_pk: int) -> list[int]:
    """Open runs that cover the account and have no result for it yet (few: a handful)."""
    rows = SyncRun.objects.filter(status__in=OPEN).values_list("pk", "account_ids", "result")
    return [pk for pk, ids, result in rows if account_pk in ids and account_pk not in (result or {}).get("synced", [])]


def _update_run(run_id: int, change: Callable[[SyncRun], bool]) -> None:
    """Apply `change` to the run under a row lock (account jobs of one run write at once);
    `change` answers whether to save."""
    with transaction.atomic():
        run = SyncRun.objects.select_for_update().filter(pk=run_id).first()
        if run is not None and not run.finished and change(run):
            run.save(update_fields=["status", "started_at", "finished_at", "phase", "done", "total", "result"])


def _phase(run: SyncRun) -> str:
    synced = len(run.result.get("synced", []))
    return f"{synced} of {len(run.account_ids)} accounts synced" if len(run.account_ids) > 1 else "downloading"


def _record_progress(run: SyncRun, account_pk: int, done: int, total: int) -> None:
    progress = run.result.setdefault("progress", {})
    progress[str(account_pk)] = [done, total]
    run.done = sum(d for d, _ in progress.values())
    run.total = sum(t for _, t in progress.values())
    if run.status == SyncStatus.QUEUED:
        run.status, run.started_at = SyncStatus.RUNNING, timezone.now()
    run.phase = _phase(run)


def _finish_if_complete(run_id: int) -> None:
    def finish(run: SyncRun) -> bool:
        synced = run.result.get("synced", [])
        if not set(run.account_ids) <= set(synced):
            return False
        order = {pk: i for i, pk in enumerate(run.account_ids)}
        pairs = sorted(zip(synced, run.result.get("accounts", []), strict=True), key=lambda p: order.get(p[0], 0))
        accounts = [entry for _, entry in pairs]
        failed = [a for a in accounts if a["errors"]]
        run.status = (
            SyncStatus.SUCCEEDED
            if not failed
            else (SyncStatus.FAILED if len(failed) == len(accounts) else SyncStatus.PARTIAL)
        )
        run.started_at = run.started_at or timezone.now()
        run.finished_at = timezone.now()
        run.phase = ""
        run.result = {"accounts": accounts}
        return True

    _update_run(run_id, finish)


class _RunProgress:
    """`progress(done, total)` of one account job, written to every run waiting for it."""

    def __init__(self, account_pk: int) -> None:
        self.account_pk = account_pk
        self.last = (0, 0)
        self.written = 0.0

    def __call__(self, done: int, total: int) -> None:
        self.last = (done, total)
        # Progress is for a polling page: a write every quarter second is plenty.
        if done == total or time.monotonic() - self.written > 0.25:
            self.written = time.monotonic()
            self.write()

    def write(self) -> None:
        def change(run: SyncRun) -> bool:
            _record_progress(run, self.account_pk, *self.last)
            return True

        for run_id in _waiting_runs(self.account_pk):
            _update_run(run_id, change)


def report_account(account_pk: int, result: AccountResult, *, worker: str = "", last=(0, 0)) -> list[int]:
    """Give the account's result to every run waiting for it; finish the runs it completes."""
    entry = {**result.as_json(), "worker": worker}
    reported = []
    for run_id in _waiting_runs(account_pk):

        def change(run: SyncRun) -> bool:
            if account_pk in run.result.get("synced", []):
                return False
            _record_progress(run, account_pk, *last)
            run.result.setdefault("synced", []).append(account_pk)
            run.result.setdefault("accounts", []).append(entry)
            run.phase = _phase(run)
            return True

        _update_run(run_id, change)
        _finish_if_complete(run_id)
        reported.append(run_id)
    return reported


def run_account_job(account_pk: int, *, job_id: str | None = None, worker: str = "") -> AccountResult:
    """One account job: sync the account, clear its booking, report to the waiting runs.
    Never raises for a sync that failed: the runs get the error."""
    from cdkd_site.queues import get_queue, release_unique

    progress = _RunProgress(account_pk)
    progress.write()  # the waiting runs show this account as started
    account = Account.objects.filter(pk=account_pk).first()
    if account is None:
        result = AccountResult(account=f"#{account_pk}", errors=["The account was removed before it was synced"])
    else:
        try:
            result = sync_account(account, actor="sync", progress=progress)
        except Exception as exc:  # a bug must not leave the runs waiting
            logger.exception("sync of account %s failed", account.account_id)
            Account.objects.filter(pk=account.pk).update(last_sync_error=f"Sync failed: {exc}")
            result = AccountResult(account=account.account_id, errors=[f"Sync failed: {exc}"])
    if job_id:
        # Cleared before reporting: a run that joined this job while it ran is still open
        # below, and a run created from now on queues a job of its own.
        release_unique(get_queue("sync"), account_job_key(account_pk), job_id)
    report_account(account_pk, result, worker=worker, last=progress.last)
    return result


def account_job_failed(account_pk: int, job_id: str, error: str) -> None:
    """The job died (its worker was killed, it timed out): the waiting runs get the error,
    unless another job has taken the account over since."""
    from cdkd_site.queues import get_queue, release_unique

    if not release_unique(get_queue("sync"), account_job_key(account_pk), job_id):
        return
    label = Account.objects.filter(pk=account_pk).values_list("account_id", flat=True).first()
    report_account(account_pk, AccountResult(account=label or f"#{account_pk}", errors=[f"Sync failed: {error}"]))
