"""Mirror each account's `deployments/` event store: every `{runId}.jsonl` stream and every
`index.json`, into DeploymentRun and DeploymentEvent rows (reference §4).

`stacks.sync` lists the bucket, GETs only the streams and indexes whose ETag changed, and
hands the results here. What a run shows follows `cdkd events`: the index row's summary
when the index lists the run; else the summary derived from the run's own stream
(`engine.events.summarize_stream`: `UNKNOWN` without `RUN_FINISHED`); a run the index
lists whose stream was pruned keeps its summary, with no events; a run that is in neither
is dropped. Torn and blank lines are skipped by `engine.events.parse_event_stream`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import transaction

from engine import events, schema
from engine.backend import ObjectInfo, StoredObject
from engine.keys import KeyLayout, run_id_timestamp_ms
from stacks import columns
from stacks.models import Account, DeploymentEvent, DeploymentRun, EventIndex, Operation

logger = logging.getLogger(__name__)

BATCH = 500
# Event rows mirrored per run at most (the run's summary still counts every event): a
# stream near the size bound holds ~1M tiny lines, too many rows to build at once.
MAX_EVENTS_PER_RUN = 100_000
RunKey = tuple[str, str, str]  # (stack_name, region, run_id)
Group = tuple[str, str]  # (stack_name, region)

RUN_SUMMARY_FIELDS = [
    "command",
    "cdkd_version",
    "started_at_raw",
    "finished_at_raw",
    "started_at",
    "finished_at",
    "run_at",
    "result",
    "event_count",
]
RUN_UPDATE_FIELDS = [
    *RUN_SUMMARY_FIELDS,
    "index",
    "in_index",
    "stream_key",
    "stream_etag",
    "has_stream",
    "synced_at",
]


text = columns.text  # a string safe for a text column
clean_json = columns.clean_json  # a value safe for a jsonb column


def parse_time(value: object) -> datetime | None:
    """An ISO-8601 time as cdkd writes it (`2026-11-29T12:28:11.123Z`), in UTC, else None.
    A time without an offset is taken as UTC; one PostgreSQL could not store and read back
    (before year 2 or after 9998 once in UTC) is None too."""
    if not isinstance(value, str) or not value or len(value) > 64 or "T" not in value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return columns.storable_time(moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment)


def run_id_time(run_id: str) -> datetime | None:
    ms = run_id_timestamp_ms(run_id)
    if ms is None:
        return None
    try:
        return columns.storable_time(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms))
    except OverflowError:
        return None


def finite_int(value: object) -> int | None:
    return columns.int_or_none(value)


def storable_run_id(run_id: object) -> bool:
    """A run id the mirror can key a row by, as it is (no NUL, no lone surrogate, 128 max)."""
    return isinstance(run_id, str) and 0 < len(run_id) <= 128 and columns.utf8_safe(run_id) == run_id


def apply_summary(run: DeploymentRun, summary: events.RunSummary) -> None:
    run.command = text(summary.command, 32)
    run.cdkd_version = text(summary.cdkd_version, 64)
    run.started_at_raw = text(summary.started_at, 64)
    run.finished_at_raw = text(summary.finished_at, 64)
    run.started_at = parse_time(summary.started_at)
    run.finished_at = parse_time(summary.finished_at)
    run.run_at = run.started_at or run_id_time(run.run_id)
    run.result = text(summary.result, 16)
    run.event_count = columns.int_or_none(summary.event_count, columns.INT_MAX) or 0


def event_row(seq: int, event: dict) -> DeploymentEvent:
    error = event.get("error")
    counts = event.get("counts")
    physical = event.get("physicalId")
    return DeploymentEvent(
        seq=seq,
        timestamp_raw=text(event.get("timestamp"), 64),
        timestamp=parse_time(event.get("timestamp")),
        event_type=text(event.get("eventType"), 64),
        stack_name=text(event.get("stackName"), 1024),
        logical_id=text(event.get("logicalId"), 255),
        resource_type=text(event.get("resourceType"), 255),
        physical_id=text(physical, 2048),
        operation=text(event.get("operation"), 16),
        provisioned_by=text(event.get("provisionedBy"), 16),
        result=text(event.get("result"), 16),
        reason=text(event.get("reason"), 100_000),
        duration_ms=finite_int(event.get("durationMs")),
        error=clean_json(error) if isinstance(error, dict) else None,
        counts=clean_json(counts) if isinstance(counts, dict) else None,
        raw=clean_json(event),
    )


@dataclass
class EventStoreChanges:
    """What a sync found changed in the event store of one account."""

    index_objects: dict[str, StoredObject]
    stream_objects: dict[str, StoredObject]
    gone_indexes: list[str]
    gone_streams: list[str]
    too_large: set[str] = field(default_factory=set)  # listed over the size bound: not downloaded

    def __bool__(self) -> bool:
        return bool(self.index_objects or self.stream_objects or self.gone_indexes or self.gone_streams)


def stored_streams(account: Account) -> dict[str, tuple[int, str]]:
    """{stream key: (run pk, ETag)} of the streams mirrored for the account."""
    return {
        key: (pk, etag)
        for pk, key, etag in DeploymentRun.objects.filter(account=account, has_stream=True).values_list(
            "pk", "stream_key", "stream_etag"
        )
    }


def changes(
    listed_indexes: dict[str, ObjectInfo],
    listed_streams: dict[str, ObjectInfo],
    stored_index: dict[str, tuple[int, str]],
    stored_stream: dict[str, tuple[int, str]],
    objects: dict[str, StoredObject],
    vanished: set[str],
    fetched_keys: Iterable[str],
) -> EventStoreChanges:
    fetched = set(fetched_keys)
    return EventStoreChanges(
        index_objects={k: objects[k] for k in listed_indexes if k in fetched and k in objects},
        stream_objects={k: objects[k] for k in listed_streams if k in fetched and k in objects},
        gone_indexes=[k for k in stored_index if k not in listed_indexes or k in vanished],
        gone_streams=[k for k in stored_stream if k not in listed_streams or k in vanished],
    )


def _storable_key(parsed) -> bool:
    """A key whose stack name and region the run rows hold exactly (a region segment of 65
    characters is no region; a row keyed by a cut name would not be found again)."""
    if parsed is None or parsed.stack_name is None or parsed.region is None:
        return False
    return text(parsed.stack_name, 1024) == parsed.stack_name and text(parsed.region, 64) == parsed.region


def _existing_runs(account: Account, groups: set[Group]) -> dict[RunKey, DeploymentRun]:
    names = sorted({name for name, _ in groups})
    found: dict[RunKey, DeploymentRun] = {}
    for start in range(0, len(names), BATCH):
        for run in DeploymentRun.objects.filter(account=account, stack_name__in=names[start : start + BATCH]):
            if (run.stack_name, run.region) in groups:
                found[(run.stack_name, run.region, run.run_id)] = run
    return found


def mirror_event_store(account: Account, layout: KeyLayout, found: EventStoreChanges, now) -> None:
    """Apply what changed in the account's event store to the mirror."""
    if not found:
        return
    groups: set[Group] = set()

    # Indexes: a group whose index changed or went away gets its `in_index` flags rewritten.
    index_rows: dict[Group, dict[str, events.RunSummary]] = {}
    index_writes: dict[Group, tuple[str, str, str]] = {}
    for key, obj in found.index_objects.items():
        parsed = layout.parse(key)
        if not _storable_key(parsed):
            continue
        group = (parsed.stack_name, parsed.region)
        if not obj.body and obj.key in found.too_large:
            runs, error = [], f"{key}: over {schema.MAX_BODY_BYTES:,} bytes, not read"
        else:
            try:
                runs, error = events.parse_run_index(obj.body), ""
            except Exception as exc:  # noqa: BLE001 - like `cdkd events`: fall back to the streams
                runs, error = [], f"{key}: {exc}"
        # Written with the runs, in the transaction below: an index ETag is never stored
        # without the run rows it lists.
        index_writes[group] = (key, obj.etag, text(error, 2000))
        rows: dict[str, events.RunSummary] = {}
        for run in runs:
            if storable_run_id(run.run_id):
                rows.setdefault(run.run_id, run)  # newest first: the first row of an id wins
        index_rows[group] = rows
        groups.add(group)
    for key in found.gone_indexes:
        parsed = layout.parse(key)
        if not _storable_key(parsed):
            continue
        group = (parsed.stack_name, parsed.region)
        if group not in index_rows:
            index_rows[group] = {}
        groups.add(group)

    # Streams: new or changed ones replace their events; gone ones drop them.
    new_streams: dict[RunKey, tuple[str, str, list[dict]]] = {}
    for key, obj in found.stream_objects.items():
        parsed = layout.parse(key)
        if not _storable_key(parsed) or parsed.run_id is None:
            continue
        if not storable_run_id(parsed.run_id):
            continue
        run_key = (parsed.stack_name, parsed.region, parsed.run_id)
        new_streams[run_key] = (key, obj.etag, events.parse_event_stream(obj.body))
        groups.add((parsed.stack_name, parsed.region))
    gone_streams: set[RunKey] = set()
    for key in found.gone_streams:
        parsed = layout.parse(key)
        if not _storable_key(parsed) or parsed.run_id is None:
            continue
        gone_streams.add((parsed.stack_name, parsed.region, parsed.run_id))
        groups.add((parsed.stack_name, parsed.region))

    existing = _existing_runs(account, groups)
    candidates: set[RunKey] = set(new_streams) | gone_streams
    for group, rows in index_rows.items():
        candidates.update((group[0], group[1], run_id) for run_id in rows)
        candidates.update(k for k in existing if (k[0], k[1]) == group)

    to_create: list[DeploymentRun] = []
    to_update: list[DeploymentRun] = []
    to_delete: list[int] = []
    rederive: list[DeploymentRun] = []  # stream unchanged, index row gone: derive from stored events
    replace_events: dict[RunKey, list[dict]] = {}
    for run_key in sorted(candidates):
        stack_name, region, run_id = run_key
        group = (stack_name, region)
        run = existing.get(run_key) or DeploymentRun(
            account=account,
            stack_name=text(stack_name, 1024),
            region=text(region, 64),
            run_id=run_id,
        )
        was_in_index = run.in_index
        if run_key in new_streams:
            key, etag, stream_events = new_streams[run_key]
            run.has_stream, run.stream_key, run.stream_etag = True, key, etag
            replace_events[run_key] = stream_events
        elif run_key in gone_streams:
            run.has_stream, run.stream_etag = False, ""
            replace_events[run_key] = []
        if group in index_rows:
            summary = index_rows[group].get(run_id)
            run.in_index = summary is not None
            run.index_group = group if summary is not None else None  # its pk is known once written
            if summary is not None:
                apply_summary(run, summary)
        if not run.in_index:
            if not run.has_stream:
                if run.pk:
                    to_delete.append(run.pk)  # its events go with it (CASCADE)
                replace_events.pop(run_key, None)
                continue
            if run_key in new_streams:
                apply_summary(run, events.summarize_stream(run_id, new_streams[run_key][2]))
            elif was_in_index or not run.pk:
                rederive.append(run)
        run.synced_at = now
        (to_update if run.pk else to_create).append(run)

    if rederive:
        stored: dict[int, list[dict]] = defaultdict(list)
        pks = [run.pk for run in rederive]
        for start in range(0, len(pks), BATCH):
            for run_pk, raw in (
                DeploymentEvent.objects.filter(run_id__in=pks[start : start + BATCH])
                .order_by("run_id", "seq")
                .values_list("run_id", "raw")
            ):
                stored[run_pk].append(raw)
        for run in rederive:
            apply_summary(run, events.summarize_stream(run.run_id, stored.get(run.pk, [])))

    with transaction.atomic():
        index_pks: dict[Group, int] = {}
        for group, (key, etag, error) in index_writes.items():
            index, _ = EventIndex.objects.update_or_create(
                account=account,
                key=key,
                defaults={
                    "stack_name": text(group[0], 1024),
                    "region": text(group[1], 64),
                    "etag": etag,
                    "error": error,
                    "synced_at": now,
                },
            )
            index_pks[group] = index.pk
        for run in to_create + to_update:
            group = getattr(run, "index_group", False)
            if group is not False:
                run.index_id = index_pks.get(group) if group is not None else None
        if found.gone_indexes:
            EventIndex.objects.filter(account=account, key__in=found.gone_indexes).delete()
        for start in range(0, len(to_delete), BATCH):
            DeploymentRun.objects.filter(pk__in=to_delete[start : start + BATCH]).delete()
        DeploymentRun.objects.bulk_create(to_create, batch_size=BATCH)
        DeploymentRun.objects.bulk_update(to_update, RUN_UPDATE_FIELDS, batch_size=BATCH)
        by_key = {(r.stack_name, r.region, r.run_id): r.pk for r in to_create + to_update}
        replaced = [by_key[k] for k in replace_events]
        for start in range(0, len(replaced), BATCH):
            DeploymentEvent.objects.filter(run_id__in=replaced[start : start + BATCH]).delete()
        rows = []
        for run_key, stream_events in replace_events.items():
            for seq, event in enumerate(stream_events[:MAX_EVENTS_PER_RUN]):
                row = event_row(seq, event)
                row.run_id = by_key[run_key]
                rows.append(row)
        DeploymentEvent.objects.bulk_create(rows, batch_size=2000)


def link_operations(account: Account) -> int:
    """Point runs at the Operation whose result names their run id
    (`result["details"]["run_id"]`). Returns how many runs were linked."""
    named: dict[str, int] = {}
    for pk, run_id in (
        Operation.objects.filter(account=account, result__details__run_id__isnull=False)
        .order_by("pk")
        .values_list("pk", "result__details__run_id")
    ):
        if isinstance(run_id, str) and run_id:
            named[run_id] = pk
    if not named:
        return 0
    linked = 0
    ids = list(named)
    for start in range(0, len(ids), BATCH):
        runs = list(
            DeploymentRun.objects.filter(
                account=account, operation__isnull=True, run_id__in=ids[start : start + BATCH]
            ).only("pk", "run_id")
        )
        for run in runs:
            run.operation_id = named[run.run_id]
        DeploymentRun.objects.bulk_update(runs, ["operation"], batch_size=BATCH)
        linked += len(runs)
    return linked
