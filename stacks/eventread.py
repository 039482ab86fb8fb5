"""Live reads of a stack's event store straight from its bucket (not the mirror), the way
`cdkd events` reads it (reference §4.6): region discovery from `deployments/` keys, runs
from `index.json` with a fallback to the streams, one run's events from its stream."""

from __future__ import annotations

from engine import events
from engine.backend import StateBucket
from engine.errors import EngineError, NotFound
from engine.keys import DEPLOYMENTS_DIR, EVENT_STREAM_SUFFIX, KeyLayout


class EventsError(EngineError):
    """`cdkd events` refused: `code` is cdkd's (EVENTS_NOT_FOUND, EVENTS_REGION_AMBIGUOUS,
    EVENTS_RUN_NOT_FOUND)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def event_regions(bucket: StateBucket, layout: KeyLayout, stack: str) -> list[str]:
    """cdkd's `listRegions`: keys `{prefix}/{stack}/{region}/deployments/{file}` (exactly
    three segments under the stack, the middle one `deployments`) name a region. Works after
    the stack's state.json is gone."""
    prefix = layout.stack_prefix(stack)
    regions: set[str] = set()
    for info in bucket.list_objects(prefix):
        parts = info.key[len(prefix) :].split("/")
        if len(parts) == 3 and parts[0] and parts[1] == DEPLOYMENTS_DIR and parts[2]:
            regions.add(parts[0])
    return sorted(regions)


def resolve_region(bucket: StateBucket, layout: KeyLayout, stack: str, given: str | None) -> str:
    if given:
        return given
    regions = event_regions(bucket, layout, stack)
    if not regions:
        raise EventsError("EVENTS_NOT_FOUND", f"no event history for {stack} (bucket {bucket.name})")
    if len(regions) > 1:
        raise EventsError(
            "EVENTS_REGION_AMBIGUOUS",
            f"{stack} exists in several regions ({', '.join(regions)}): pass --stack-region",
        )
    return regions[0]


def stream_run_ids(bucket: StateBucket, layout: KeyLayout, stack: str, region: str) -> list[str]:
    """The run ids of the `.jsonl` streams, newest first."""
    prefix = layout.events_prefix(stack, region)
    ids = []
    for info in bucket.list_objects(prefix):
        name = info.key[len(prefix) :]
        if "/" not in name and name.endswith(EVENT_STREAM_SUFFIX) and len(name) > len(EVENT_STREAM_SUFFIX):
            ids.append(name[: -len(EVENT_STREAM_SUFFIX)])
    return sorted(ids, reverse=True)


def list_runs(
    bucket: StateBucket, layout: KeyLayout, stack: str, region: str
) -> tuple[list[events.RunSummary], str | None]:
    """(runs newest first, why the index was not used or None). From `index.json`; when it
    is missing or has no `runs` array, each stream's own summary."""
    try:
        body = bucket.get(layout.event_index_key(stack, region)).body
        return events.parse_run_index(body), None
    except NotFound:
        note = "no index.json: runs derived from their streams"
    except ValueError as exc:
        note = f"{exc}: runs derived from their streams"
    runs = []
    for run_id in stream_run_ids(bucket, layout, stack, region):
        try:
            stream = events.parse_event_stream(bucket.get(layout.event_stream_key(stack, region, run_id)).body)
        except (NotFound, ValueError):
            stream = []  # unreadable or gone since the listing: cdkd's fallback row
        runs.append(events.summarize_stream(run_id, stream))
    return runs, note


def read_run(bucket: StateBucket, layout: KeyLayout, stack: str, region: str, run_id: str) -> list[dict]:
    """The run's events in stream order, blank and torn lines skipped."""
    try:
        key = layout.event_stream_key(stack, region, run_id)
    except ValueError:
        key = None
    try:
        if key is None:
            raise NotFound(run_id)
        body = bucket.get(key).body
    except NotFound:
        raise EventsError("EVENTS_RUN_NOT_FOUND", f"no run {run_id} of {stack} in {region}") from None
    return events.parse_event_stream(body)


def event_line(event: dict) -> list[str]:
    """cdkd's human rendering of one event: one line, then `reason` and `error` indented."""

    def s(name: str) -> str:
        value = event.get(name)
        return value if isinstance(value, str) else ""

    parts = [s("timestamp"), s("eventType")]
    if s("logicalId"):
        parts.append(f"{s('logicalId')} ({s('resourceType')})" if s("resourceType") else s("logicalId"))
    for name in ("operation",):
        if s(name):
            parts.append(s(name))
    if s("provisionedBy"):
        parts.append(f"[{s('provisionedBy')}]")
    for name in ("command", "region", "cdkdVersion", "result"):
        if s(name):
            parts.append(s(name))
    duration = event.get("durationMs")
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        parts.append(f"{duration:g}ms")
    counts = event.get("counts")
    if isinstance(counts, dict):

        def n(name: str) -> int:
            value = counts.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        text = f"+{n('created')}/~{n('updated')}/-{n('deleted')}"
        if n("failed"):
            text += f" !{n('failed')}"
        if n("skipped"):
            text += f" ⚠{n('skipped')}"
        parts.append(text)
    lines = ["  ".join(p for p in parts if p)]
    if s("reason"):
        lines.append(f"    reason: {s('reason')}")
    error = event.get("error")
    if isinstance(error, dict):
        name = error.get("name") if isinstance(error.get("name"), str) else "Error"
        message = error.get("message") if isinstance(error.get("message"), str) else ""
        code = error.get("awsErrorCode")
        lines.append(f"    error: {name}: {message}" + (f" ({code})" if isinstance(code, str) and code else ""))
    return lines
