"""cdkd's deployments/ event store: the read side (reference §4.3, §4.6).

Mirrors `DeploymentEventsReader` in cdkd: the index is a derived, last-writer-wins view;
the per-run `{runId}.jsonl` streams are the source of truth. Everything here is pure
(bytes in, values out); listing and fetching belong to engine.backend.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

INDEX_VERSION = 1  # DEPLOYMENT_EVENTS_INDEX_VERSION
MAX_INDEX_RUNS = 20  # DEPLOYMENT_EVENTS_MAX_INDEX_RUNS

RESULT_SUCCEEDED = "SUCCEEDED"
RESULT_FAILED = "FAILED"
# Only ever derived by a reader: a stream with no RUN_FINISHED has no known result, and
# cdkd refuses to fabricate FAILED for it.
RESULT_UNKNOWN = "UNKNOWN"

# What `cdkd events` shows for a run whose stream is empty or unreadable.
FALLBACK_COMMAND = "deploy"
FALLBACK_VERSION = "unknown"


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    command: str
    cdkd_version: str
    started_at: str
    finished_at: str
    result: str  # SUCCEEDED | FAILED | UNKNOWN
    event_count: int

    def as_dict(self) -> dict[str, Any]:
        """cdkd's `DeploymentRunSummary` JSON shape (camelCase), for `--json` output."""
        return {
            "runId": self.run_id,
            "command": self.command,
            "cdkdVersion": self.cdkd_version,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "result": self.result,
            "eventCount": self.event_count,
        }


def _str_field(row: Mapping[str, Any], name: str, default: str = "") -> str:
    value = row.get(name)
    return value if isinstance(value, str) else default


def _count_field(row: Mapping[str, Any], name: str) -> int:
    value = row.get(name)
    # bool is an int in Python; `true` is not a count.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


def _reject_constant(name: str) -> Any:
    # JSON.parse (cdkd) rejects NaN/Infinity; Python's json would accept them.
    raise ValueError(f"not JSON: {name}")


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def parse_run_index(body: bytes) -> list[RunSummary]:
    """The runs of an index.json, newest first. Raises ValueError with a readable message.

    Lenient like cdkd's reader: a missing or mistyped field becomes "" (or 0 for
    `eventCount`), `result` is kept as written, a row that is not an object is skipped.
    The order is the file's (cdkd writes newest first). ValueError when the body is not
    JSON, has no `runs` array (the caller then falls back to the streams, as
    `cdkd events` does), or declares an `indexVersion` newer than 1.
    """
    try:
        text = body.decode("utf-8-sig") if isinstance(body, bytes | bytearray) else str(body)
        data = _loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"deployments index is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"deployments index is not a JSON object (got {type(data).__name__})")
    version = data.get("indexVersion")
    if isinstance(version, int | float) and not isinstance(version, bool) and version > INDEX_VERSION:
        raise ValueError(
            f"deployments index has indexVersion {version}, newer than the supported {INDEX_VERSION}; "
            "it was written by a newer cdkd"
        )
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise ValueError("deployments index has no 'runs' array")
    return [
        RunSummary(
            run_id=_str_field(row, "runId"),
            command=_str_field(row, "command"),
            cdkd_version=_str_field(row, "cdkdVersion"),
            started_at=_str_field(row, "startedAt"),
            finished_at=_str_field(row, "finishedAt"),
            result=_str_field(row, "result"),
            event_count=_count_field(row, "eventCount"),
        )
        for row in runs
        if isinstance(row, dict)
    ]


def parse_event_stream(body: bytes) -> list[dict]:
    """The events of a {runId}.jsonl; blank and torn lines skipped.

    Each line is decoded on its own, so a flush torn mid-character spoils only its own
    line; undecodable bytes become U+FFFD as in Node. Lines that parse to something other
    than a JSON object are skipped too: an event is an object.
    """
    raw = body if isinstance(body, bytes | bytearray) else str(body).encode("utf-8")
    events: list[dict] = []
    for raw_line in bytes(raw).split(b"\n"):
        # JS String.prototype.trim also strips a BOM; str.strip() does not.
        line = raw_line.decode("utf-8", errors="replace").strip().strip("\ufeff").strip()
        if not line:
            continue
        try:
            event = _loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def summarize_stream(run_id: str, events: Iterable[Mapping[str, Any]]) -> RunSummary:
    """The summary `cdkd events` derives from a run's own stream when the index is missing.

    command/version/startedAt come from the FIRST `RUN_STARTED`, result/finishedAt from the
    LAST `RUN_FINISHED`; no `RUN_FINISHED` gives `UNKNOWN` (never a fabricated FAILED).
    An empty stream gives the fallback row: `deploy`, `unknown`, empty times, 0 events.
    """
    events = [event for event in events if isinstance(event, Mapping)]
    started: Mapping[str, Any] | None = None
    finished: Mapping[str, Any] | None = None
    for event in events:
        event_type = event.get("eventType")
        if event_type == "RUN_STARTED" and started is None:
            started = event
        elif event_type == "RUN_FINISHED":
            finished = event
    started = started or {}
    finished = finished or {}
    return RunSummary(
        run_id=run_id,
        command=_str_field(started, "command", FALLBACK_COMMAND),
        cdkd_version=_str_field(started, "cdkdVersion", FALLBACK_VERSION),
        started_at=_str_field(started, "timestamp"),
        finished_at=_str_field(finished, "timestamp"),
        result=_str_field(finished, "result", RESULT_UNKNOWN),
        event_count=len(events),
    )
