"""Per-record mirroring for `stacks.sync`: what one listed or downloaded state.json, its
rollback journal and lock.json become in the mirror (Stack and Resource rows, Lock rows,
defect stubs for records that cannot be read or stored), written in batches, and the
parent and lock links between them. Only the sync's main thread of an account calls these.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction

from engine import schema
from engine.backend import ObjectInfo, StoredObject
from engine.keys import KeyKind, KeyLayout
from stacks import columns
from stacks.consumers import mirror_imports
from stacks.models import (
    Account,
    Lock,
    Resource,
    Stack,
)

if TYPE_CHECKING:
    from stacks.sync import Listing

# The sync's own logger: these records were always logged as stacks.sync's.
logger = logging.getLogger("stacks.sync")

BATCH = 500


def _text(value: object, limit: int) -> str:
    """A string safe for a text column (see stacks.columns)."""
    return columns.text(value, limit)


# --- rollback journals (from the listing alone) ------------------------------------------

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


def _write_journals(rows: list[Stack]) -> None:
    Stack.objects.bulk_update(rows, JOURNAL_FIELDS, batch_size=BATCH)


def _delete_stacks(account: Account, keys: list[str]) -> None:
    for start in range(0, len(keys), BATCH):
        Stack.objects.filter(account=account, key__in=keys[start : start + BATCH]).delete()


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
