"""Mirror every account's state bucket into the database, incrementally.

One sync of an account: list the prefix (paginated), compare each key's ETag with the one
stored, GET only the new or changed records, locks, event indexes and streams (concurrently, with a
bound), and apply the difference: create, update, delete. The `deployments/` event store
(every run's `{runId}.jsonl` and every `index.json`) is mirrored the same way, by
`stacks.eventsync`. Each record's rollback journal is mirrored from the listing alone
(its key, ETag, size and LastModified; never its body). A sync that finds nothing changed
issues no GET. S3 calls happen
outside database transactions; only the main thread of each account writes to the database.
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
from stacks import columns, eventsync, notify
from stacks.access import accounts_for
from stacks.consumers import mirror_imports
from stacks.models import (
    Account,
    BucketStatus,
    EventIndex,
    Lock,
    Resource,
    Role,
    Stack,
    SyncRun,
    SyncStatus,
)

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total) GETs of one account

BATCH = 500


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


def _text(value: object, limit: int) -> str:
    """A string safe for a text column (see stacks.columns)."""
    return columns.text(value, limit)


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


JOURNAL_FIELDS = ["journal_key", "journal_etag", "journal_size", "journal_modified"]


def journal_fields(info: ObjectInfo | None) -> dict:
    """The Stack's journal columns for the journal listed beside it (None: there is none).
    A legacy record has no journal key of its own: cdkd's journal is region-scoped."""
    if info is None:
        return {"journal_key": "", "journal_etag": "", "journal_size": None, "journal_modified": None}
    return {
        "journal_key": _text(info.key, 1024),
        "journal_etag": _text(info.etag, 128),
        "journal_size": min(max(info.size or 0, 0), columns.BIGINT_MAX),
        "journal_modified": info.last_modified,
    }


def _journal_changes(account: Account, listing: Listing, stored: dict, written: set[str]) -> list[Stack]:
    """The rows whose journal columns differ from the listing, among the records this sync
    did not write (a written row got its journal columns with the rest)."""
    changed = []
    for key, (pk, _etag, *have) in stored.items():
        if key in written or key not in listing.states:
            continue
        want = journal_fields(listing.journals.get(key))
        if have != [want[f] for f in JOURNAL_FIELDS]:
            changed.append(Stack(pk=pk, **want))
    return changed


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


# --- applying records --------------------------------------------------------------------

# Record-level failures a sync turns into a defect of that one stack (never the account's).
NOT_MIRRORED = "not-mirrored"


def _stack_fields(layout: KeyLayout, obj: StoredObject, now) -> tuple[dict, list[Resource]]:
    """The Stack columns and Resource rows for one stored record. Every value is made safe
    for its column here (stacks.columns): the record is untrusted."""
    key = layout.parse(obj.key)
    assert key is not None
    record = schema.parse_state(obj.body, key_region=key.region)
    legacy = key.kind == KeyKind.LEGACY_STATE
    region = _text(key.region, 64) or None
    if legacy:
        # A legacy key has no region segment: the body's region, when it is a string, is it.
        body_region = record.data.get("region") if isinstance(record.data, dict) else None
        region = (_text(body_region, 64) or None) if isinstance(body_region, str) else None
    rows = record.resource_rows()
    fields = {
        **_key_fields(layout, obj.key),
        "region": region,
        "etag": obj.etag,
        "version_id": _text(obj.version_id or "", 1024),
        "size": len(obj.body),
        "s3_last_modified": obj.last_modified,
        "body": obj.body,
        "schema_version": columns.int_or_none(record.version, columns.INT_MAX),
        "record_last_modified": columns.int_or_none(record.last_modified_ms()),
        "read_only": record.newer_than_supported,
        "defects": columns.clean_json([d.as_dict() for d in record.defects]),
        "has_defects": bool(record.defects),
        "body_region": _text(record.body_region_kind or "", 128),
        "region_mismatch": record.region_mismatch,
        "resource_count": min(len(rows), columns.INT_MAX),
        "output_count": min(len(record.outputs()), columns.INT_MAX),
        "imports": columns.clean_json(mirror_imports(record)),
        "synced_at": now,
    }
    resources = []
    for logical_id, row in rows:
        row = row if isinstance(row, dict) else None
        policy = row.get("deletionPolicy") if row else None
        resources.append(
            Resource(
                logical_id=_text(logical_id, 255),
                resource_type=_text(row.get("resourceType"), 255) if row else "",
                physical_id=_text(row.get("physicalId"), 2048) if row else "",
                provisioned_by=_text(row.get("provisionedBy"), 16) if row else "",
                deletion_policy=_text(policy, 32),
                malformed=row is None,
            )
        )
    return fields, resources


def _key_fields(layout: KeyLayout, key_text: str) -> dict:
    """The columns the key alone decides (name, legacy, nesting)."""
    key = layout.parse(key_text)
    assert key is not None
    lineage = key.lineage
    return {
        "stack_name": _text(key.stack_name, 1024),
        "region": _text(key.region, 64) or None,
        "legacy": key.kind == KeyKind.LEGACY_STATE,
        "parent_stack_name": _text(key.parent_name or "", 1024),
        "parent_logical_id": _text(key.child_logical_id or "", 255),
        "root_name": _text(lineage[0] if lineage else key.stack_name, 1024),
        "depth": min(max(len(lineage) - 1, 0), 32767),
    }


def _stub_fields(
    layout: KeyLayout, key: str, info: ObjectInfo | StoredObject, defect: schema.Defect, now, *, etag: str
) -> dict:
    """A Stack row for a record the mirror could not hold in full: the key's columns, no
    resources, and the defect that says why. `etag` "" marks the row incomplete, so the
    next sync fetches the record again instead of calling it unchanged."""
    return {
        **_key_fields(layout, key),
        "etag": etag,
        "version_id": "",
        "size": min(getattr(info, "size", 0) or len(getattr(info, "body", b"")), columns.BIGINT_MAX),
        "s3_last_modified": info.last_modified,
        "body": b"",
        "schema_version": None,
        "record_last_modified": None,
        "read_only": True,
        "defects": columns.clean_json([defect.as_dict()]),
        "has_defects": True,
        "body_region": "",
        "region_mismatch": False,
        "resource_count": 0,
        "output_count": 0,
        "synced_at": now,
    }


def too_large_defect(key: str, size: int) -> schema.Defect:
    return schema.Defect(
        "too-large",
        "",
        f"{key} is {size:,} bytes, over the {schema.MAX_BODY_BYTES:,} this app downloads, so it is not mirrored "
        f"(nothing in it is shown here). cdkd deploy, destroy, orphan, import, rollback and scrub still read it; "
        f"inspect it with `aws s3 cp s3://<bucket>/{key} -`, and restore an earlier version if it grew by mistake.",
    )


def not_mirrored_defect(key: str, exc: BaseException) -> schema.Defect:
    return schema.Defect(
        NOT_MIRRORED,
        "",
        f"{key} could not be stored in the mirror ({type(exc).__name__}); it is shown without its resources and "
        f"fetched again by the next sync. The record in the bucket is unchanged: download it from the bucket to "
        f"inspect it, and report this message if it persists.",
    )


def _write_stacks(account: Account, batch: list[tuple[Stack, list[Resource]]], stored: dict) -> None:
    """One transaction: the Stack rows (ETag included) and all their Resource rows, so a
    row's ETag is never stored without its resources."""
    update_fields = [f for f in _stack_fields_names() if f not in ("account", "key")]
    with transaction.atomic():
        creates = [s for s, _ in batch if s.key not in stored]
        updates = [s for s, _ in batch if s.key in stored]
        Stack.objects.bulk_create(creates)
        if updates:
            Stack.objects.bulk_update(updates, update_fields)
            Resource.objects.filter(stack_id__in=[s.pk for s in updates]).delete()
        rows = []
        for stack, resources in batch:
            for resource in resources:
                resource.stack_id = stack.pk
                rows.append(resource)
        Resource.objects.bulk_create(rows, batch_size=2000)


def _stack(account: Account, key: str, fields: dict, stored: dict, journals: dict[str, ObjectInfo]) -> Stack:
    pk = stored[key][0] if key in stored else None
    return Stack(pk=pk, account=account, key=key, **fields, **journal_fields(journals.get(key)))


def _apply_states(
    account: Account,
    layout: KeyLayout,
    objects: dict[str, StoredObject],
    stored: dict,
    now,
    *,
    journals: dict[str, ObjectInfo],
    stubs: dict | None = None,
) -> list[str]:
    """Create or update the Stack rows (and their resources) of the fetched records, a
    batch per transaction. A batch that fails is written again record by record; a record
    that still fails becomes a stub row with a `not-mirrored` defect (fetched again next
    time), so one record never stops the others. `stubs` are rows built already (records
    too large to download). Returns the keys that could not be stored at all."""
    prepared: list[tuple[Stack, list[Resource]]] = []
    for key, obj in objects.items():
        try:
            fields, resources = _stack_fields(layout, obj, now)
        except Exception as exc:  # noqa: BLE001 - a parsing bug must cost one record only
            logger.exception("record %s could not be read for the mirror", key)
            fields, resources = _stub_fields(layout, key, obj, not_mirrored_defect(key, exc), now, etag=""), []
        prepared.append((_stack(account, key, fields, stored, journals), resources))
    for key, fields in (stubs or {}).items():
        prepared.append((_stack(account, key, fields, stored, journals), []))

    lost: list[str] = []
    for start in range(0, len(prepared), BATCH):
        batch = prepared[start : start + BATCH]
        try:
            _write_stacks(account, batch, stored)
            continue
        except Exception:  # noqa: BLE001 - find the record(s) at fault, one at a time
            logger.exception("a batch of records of account %s failed; writing them one by one", account.account_id)
            for stack, _ in batch:
                if stack.key not in stored:
                    stack.pk = None  # bulk_create may have set it before the rollback
        for stack, resources in batch:
            try:
                _write_stacks(account, [(stack, resources)], stored)
            except Exception as exc:  # noqa: BLE001
                logger.exception("record %s could not be stored", stack.key)
                if stack.key not in stored:
                    stack.pk = None
                fields = _stub_fields(
                    layout, stack.key, stack_info(stack), not_mirrored_defect(stack.key, exc), now, etag=""
                )
                try:
                    _write_stacks(account, [(_stack(account, stack.key, fields, stored, journals), [])], stored)
                except Exception:  # noqa: BLE001
                    logger.exception("not even a stub of %s could be stored", stack.key)
                    lost.append(stack.key)
    return lost


@dataclass
class _Info:
    size: int
    last_modified: object


def stack_info(stack: Stack) -> _Info:
    return _Info(size=stack.size or 0, last_modified=stack.s3_last_modified)


def _stack_fields_names() -> list[str]:
    return [f.name for f in Stack._meta.concrete_fields if not f.primary_key and f.name not in ("parent",)]


def _link_parents(account: Account) -> None:
    """Point each nested child at its parent record (same account, same region)."""
    rows = list(
        Stack.objects.filter(account=account).values_list(
            "pk", "stack_name", "region", "legacy", "parent_id", "parent_stack_name"
        )
    )
    by_name = {(name, region): pk for pk, name, region, legacy, _, _ in rows if not legacy}
    changed = []
    for pk, _name, region, _legacy, parent_id, parent_name in rows:
        want = by_name.get((parent_name, region)) if parent_name else None
        if want != parent_id:
            changed.append(Stack(pk=pk, parent_id=want))
    if changed:
        Stack.objects.bulk_update(changed, ["parent"], batch_size=BATCH)


LOCK_FIELDS = [
    "stack_name",
    "region",
    "etag",
    "s3_last_modified",
    "body",
    "readable",
    "error",
    "owner",
    "operation",
    "timestamp_ms",
    "expires_at_ms",
    "synced_at",
]


def _lock_row(account: Account, layout: KeyLayout, key: str, obj: StoredObject, stored: dict, now) -> Lock:
    """The Lock row of one stored lock.json, parsed once (bounded, never raising), every
    value made safe for its column."""
    parsed_key = layout.parse(key)
    lock = schema.parse_lock(obj.body)
    error = lock.error
    if lock.present_but_empty:
        error = f"{key} holds {lock.kind}, not a lock object; it still blocks cdkd"
    info = lock.info
    owner = info.get("owner") if info is not None else None
    operation = info.get("operation") if info is not None else None
    return Lock(
        pk=stored[key][0] if key in stored else None,
        account=account,
        key=key,
        stack_name=_text(parsed_key.stack_name, 1024),
        region=_text(parsed_key.region, 64) or None,
        etag=obj.etag,
        s3_last_modified=obj.last_modified,
        body=obj.body,
        readable=lock.error is None,
        error=_text(error or "", 2000),
        owner=_text(owner, 2000),
        operation=_text(operation, 255),
        timestamp_ms=columns.int_or_none(info.get("timestamp") if info is not None else None),
        # A deadline beyond bigint stays in the future: cdkd counts the lock as live.
        expires_at_ms=columns.clamp_int(lock.expires_at_ms()),
        synced_at=now,
    )


def _too_large_lock(account: Account, layout: KeyLayout, key: str, info: ObjectInfo, stored: dict, now) -> Lock:
    parsed_key = layout.parse(key)
    limit = schema.MAX_BODY_BYTES
    return Lock(
        pk=stored[key][0] if key in stored else None,
        account=account,
        key=key,
        stack_name=_text(parsed_key.stack_name, 1024),
        region=_text(parsed_key.region, 64) or None,
        etag=info.etag,
        s3_last_modified=info.last_modified,
        body=b"",
        readable=False,
        error=f"lock.json is {info.size:,} bytes, over the {limit:,} this app reads; it still blocks cdkd",
        synced_at=now,
    )


def _write_locks(rows: list[Lock]) -> None:
    with transaction.atomic():
        Lock.objects.bulk_create([r for r in rows if r.pk is None])
        Lock.objects.bulk_update([r for r in rows if r.pk is not None], LOCK_FIELDS, batch_size=BATCH)


def _apply_locks(
    account: Account,
    layout: KeyLayout,
    objects: dict[str, StoredObject],
    stored: dict,
    now,
    *,
    too_large: dict[str, ObjectInfo] | None = None,
) -> list[str]:
    """Write the Lock rows of the fetched locks; a lock that cannot be stored is left out
    (its ETag unstored, so the next sync reads it again). Returns those keys."""
    rows = [_lock_row(account, layout, key, obj, stored, now) for key, obj in objects.items()]
    rows += [_too_large_lock(account, layout, key, info, stored, now) for key, info in (too_large or {}).items()]
    try:
        _write_locks(rows)
        return []
    except Exception:  # noqa: BLE001 - find the lock at fault
        logger.exception("the locks of account %s failed as a batch; writing them one by one", account.account_id)
    lost = []
    for row in rows:
        if row.key not in stored:
            row.pk = None
        try:
            _write_locks([row])
        except Exception:  # noqa: BLE001
            logger.exception("lock %s could not be stored", row.key)
            lost.append(row.key)
    return lost


def _link_locks(account: Account) -> None:
    stacks = {
        (name, region, legacy): pk
        for pk, name, region, legacy in Stack.objects.filter(account=account).values_list(
            "pk", "stack_name", "region", "legacy"
        )
    }
    changed = []
    for lock in Lock.objects.filter(account=account).only("pk", "stack_name", "region", "key", "stack_id"):
        legacy_lock = lock.region is None
        if legacy_lock:
            # A legacy lock guards the legacy record, whatever region its body names.
            want = next((pk for (n, _r, lg), pk in stacks.items() if lg and n == lock.stack_name), None)
        else:
            want = stacks.get((lock.stack_name, lock.region, False))
        if want != lock.stack_id:
            lock.stack_id = want
            changed.append(lock)
    # A stack has at most one lock row pointing at it (OneToOne): clear before setting.
    if changed:
        with transaction.atomic():
            Lock.objects.filter(pk__in=[lk.pk for lk in changed]).update(stack=None)
            Lock.objects.bulk_update([lk for lk in changed if lk.stack_id], ["stack"], batch_size=BATCH)


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
        for start in range(0, len(gone_states), BATCH):
            Stack.objects.filter(account=account, key__in=gone_states[start : start + BATCH]).delete()
    result.removed = len(gone_states)
    # A journal appears or goes (a failed deploy, a rollback) while its record stays the same.
    journal_rows = _journal_changes(account, listing, stored_states, set(state_objs) | set(stubs))
    if journal_rows:
        Stack.objects.bulk_update(journal_rows, JOURNAL_FIELDS, batch_size=BATCH)
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
