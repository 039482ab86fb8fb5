"""cdkd's deployments/ event store: the read side (reference §4.3, §4.6) and the writer
(`EventRecorder`, reference §4.1-4.5, at the end of the module).

Mirrors `DeploymentEventsReader` in cdkd: the index is a derived, last-writer-wins view;
the per-run `{runId}.jsonl` streams are the source of truth. The read side is pure (bytes
in, values out; listing and fetching belong to engine.backend); the writer writes through
an engine.backend.StateBucket.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import EngineError, NotFound, PreconditionFailed
from engine.keys import EVENT_STREAM_SUFFIX, KeyLayout, new_run_id
from engine.schema import decode_json, js_stringify

if TYPE_CHECKING:
    from engine.backend import StateBucket

INDEX_VERSION = 1  # DEPLOYMENT_EVENTS_INDEX_VERSION
MAX_INDEX_RUNS = 20  # DEPLOYMENT_EVENTS_MAX_INDEX_RUNS
INDEX_WRITE_ATTEMPTS = 3  # read-merge-write rounds against concurrent index writers

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
    raw = bytes(body) if isinstance(body, bytes | bytearray) else str(body).encode("utf-8", "surrogatepass")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    decoded = decode_json(raw)  # bounded in size and depth, never raising
    if decoded.code is not None:
        raise ValueError(f"deployments index is not valid JSON: {decoded.reason}")
    data = decoded.value
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
        decoded = decode_json(line.encode("utf-8"))  # a line nested too deep is skipped, like a torn one
        if decoded.code is not None:
            continue
        event = decoded.value
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


# === The writer (reference §4.1-4.5): cdkd's DeploymentEventsStore ===========================
#
# Byte format, checked against files cdkd 0.284.40 wrote (tests/fixtures/cdkd-0.284.40/):
# - `{runId}.jsonl`: one compact `JSON.stringify(event)` per line, every line ending in
#   "\n", stored as `application/x-ndjson`; keys in cdkd's order (timestamp, eventType,
#   stackName, then the event's own fields); absent fields are omitted, never null.
# - `index.json`: `JSON.stringify(index, null, 2)`, no trailing newline.

_logger = logging.getLogger(__name__)

EVENTS_CONTENT_TYPE = "application/x-ndjson"
FLUSH_INTERVAL_S = 2.0  # FLUSH_INTERVAL_MS = 2000
FLUSH_EVENT_THRESHOLD = 50  # FLUSH_EVENT_THRESHOLD
DEFAULT_CDKD_VERSION = "cdkd-admin"
ERROR_CHAIN_DEPTH = 10  # cdkd walks at most 10 `.cause` links for awsErrorCode / requestId

RUN_STARTED = "RUN_STARTED"
RUN_FINISHED = "RUN_FINISHED"
RESOURCE_STARTED = "RESOURCE_STARTED"
RESOURCE_SUCCEEDED = "RESOURCE_SUCCEEDED"
RESOURCE_FAILED = "RESOURCE_FAILED"
RESOURCE_RETAINED = "RESOURCE_RETAINED"
RESOURCE_SKIPPED = "RESOURCE_SKIPPED"
RESOURCE_GUARD_INDETERMINATE = "RESOURCE_GUARD_INDETERMINATE"


class Timer(Protocol):
    def start(self) -> None: ...

    def cancel(self) -> None: ...


TimerFactory = Callable[[float, Callable[[], None]], Timer]
Clock = Callable[[], float]  # epoch seconds, like time.time
WriterLog = Callable[[str, str], None]  # (level, message), like engine.operations.LogFn


def _thread_timer(delay: float, fn: Callable[[], None]) -> Timer:
    # cdkd unref()s its timers; a daemon thread is the equivalent (never keeps a worker alive).
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    return timer


def iso_timestamp(epoch_s: float) -> str:
    """`new Date(ms).toISOString()`: `2026-11-29T12:28:11.123Z` (milliseconds, UTC, `Z`)."""
    ms = int(epoch_s * 1000)
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def _encode_line(event: dict[str, Any]) -> str:
    return js_stringify(event, indent=0) + "\n"


def _utf8(text: str) -> bytes:
    # A lone surrogate cannot be UTF-8; JSON.stringify writes it as a \udXXX escape.
    return text.encode("utf-8", errors="backslashreplace")


def error_fields(error: BaseException | Mapping[str, Any], mask: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """cdkd's error metadata `{name, message, awsErrorCode?, requestId?}`.

    `name`/`message` are the outer error's; `awsErrorCode`/`requestId` come from the deepest
    error in the cause chain (at most 10 links) that carries them: attributes `aws_code` /
    `request_id` (engine.providers' ProviderError), `code` (engine.errors), or a botocore
    ClientError's response. Only `message` is masked, as in cdkd. A mapping is taken as an
    already-built error object (its message is masked again: masking is idempotent).
    """
    masker = mask or (lambda value: value)
    if isinstance(error, Mapping):
        built = {k: v for k, v in error.items() if v is not None}
        if "message" in built:
            built["message"] = masker(str(built["message"]))
        return built
    result: dict[str, Any] = {
        "name": getattr(error, "name", None) if isinstance(getattr(error, "name", None), str) else type(error).__name__,
        "message": masker(str(error)),
    }
    code: str | None = None
    request_id: str | None = None
    seen: set[int] = set()
    current: BaseException | None = error
    for _ in range(ERROR_CHAIN_DEPTH + 1):
        if current is None or id(current) in seen:
            break
        seen.add(id(current))
        found_code, found_request = _aws_metadata(current)
        if found_code or found_request:
            code, request_id = found_code or code, found_request or request_id
        current = current.__cause__ or current.__context__
    if code:
        result["awsErrorCode"] = code
    if request_id:
        result["requestId"] = request_id
    return result


def _aws_metadata(error: BaseException) -> tuple[str | None, str | None]:
    code = getattr(error, "aws_code", None) or getattr(error, "code", None)
    request_id = getattr(error, "request_id", None)
    response = getattr(error, "response", None)
    if isinstance(response, Mapping):  # botocore ClientError
        code = code or (response.get("Error") or {}).get("Code")
        request_id = request_id or (response.get("ResponseMetadata") or {}).get("RequestId")
    return (
        code if isinstance(code, str) and code else None,
        request_id if isinstance(request_id, str) and request_id else None,
    )


class EventRecorder:
    """One run's event stream and its row in the stack's run index, written as cdkd writes them.

    Contracts:
    - `record(event_type, **fields)` is cheap, thread-safe and never raises; it is ignored
      after `finalize`. Fields whose value is None are omitted; `stackName=` overrides the
      recorder's stack (a nested child's events inside its parent's run carry the CHILD's
      name). Never pass resource properties: cdkd never records them.
    - Flushing (re-PUT of the WHOLE stream, S3 has no append): a timer started by the first
      unpersisted event fires `flush_interval` seconds later (not re-armed by later events,
      so a steady trickle still flushes every 2 s), and reaching `flush_threshold`
      unpersisted events replaces it with an immediate (0 s) timer. Timers come from
      `timer(delay, fn)` (default: a daemon `threading.Timer`; tests inject a manual one),
      so `record()` never waits for S3. PUTs are serialised by one lock.
    - A failed PUT warns once through `log` (later failures go to the Python logger at
      debug level) and never raises; the events stay buffered for the next flush. A PUT
      whose answer was lost but which landed is a success (`StateBucket.put` reads back).
    - `finalize(result, counts, error=None)`: records RUN_FINISHED, flushes, and only if
      that flush succeeded reads the index, prepends this run's summary (duplicates of this
      runId removed, at most 20 runs), writes it conditionally on what it read (a
      concurrent writer's 412 means read and merge again, up to 3 times), and only after
      that write succeeded prunes `{runId}.jsonl` streams older than the oldest retained
      run (only once the index holds 20), purging their noncurrent versions. A run with no events writes
      nothing. Returns the summary written, or None.
    """

    def __init__(
        self,
        bucket: StateBucket,
        layout: KeyLayout,
        stack: str,
        region: str,
        *,
        command: str = "destroy",
        cdkd_version: str = DEFAULT_CDKD_VERSION,
        clock: Clock = time.time,
        flush_interval: float = FLUSH_INTERVAL_S,
        flush_threshold: int = FLUSH_EVENT_THRESHOLD,
        mask: Callable[[Any], Any] | None = None,
        log: WriterLog | None = None,
        timer: TimerFactory = _thread_timer,
        run_id: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.layout = layout
        self.stack = stack
        self.region = region
        self.command = command
        self.cdkd_version = cdkd_version
        self.clock = clock
        self.flush_interval = flush_interval
        self.flush_threshold = max(1, int(flush_threshold))
        self.mask = mask or (lambda value: value)
        self.log = log or (lambda level, message: None)
        self._timer_factory = timer
        self.run_id = run_id or new_run_id(datetime.fromtimestamp(clock(), tz=UTC))
        self.stream_key = layout.event_stream_key(stack, region, self.run_id)
        self.index_key = layout.event_index_key(stack, region)
        self.warnings: list[str] = []
        self.write_failures = 0
        self._events: list[dict[str, Any]] = []
        self._lines: list[str] = []  # each event encoded once, at record time
        self._persisted = 0  # events in the last stream body S3 accepted
        self._finalized = False
        self._timer: Timer | None = None
        self._timer_delay = 0.0
        self._lock = threading.Lock()  # the buffer and the timer
        self._write_lock = threading.Lock()  # one PUT at a time, in order

    # -- recording ---------------------------------------------------------------------------

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(event) for event in self._events]

    @property
    def persisted_count(self) -> int:
        with self._lock:
            return self._persisted

    @property
    def finalized(self) -> bool:
        return self._finalized

    def start(self) -> None:
        """Record RUN_STARTED (command, region, cdkdVersion), as cdkd's recorder does first."""
        self.record(RUN_STARTED, command=self.command, region=self.region, cdkdVersion=self.cdkd_version)

    def record(self, event_type: str, **fields: Any) -> None:
        try:
            stack_name = fields.pop("stackName", None) or self.stack
            event: dict[str, Any] = {
                "timestamp": iso_timestamp(self.clock()),
                "eventType": event_type,
                "stackName": stack_name,
            }
            for key, value in fields.items():
                if value is None:
                    continue
                if key == "reason" and isinstance(value, str):
                    value = self.mask(value)
                elif key == "error":
                    value = error_fields(value, self.mask)
                event[key] = value
            line = _encode_line(event)  # a value that is not JSON drops this event, not the stream
            with self._lock:
                if self._finalized:
                    return
                self._events.append(event)
                self._lines.append(line)
                unpersisted = len(self._events) - self._persisted
                timer = self._arm(0.0 if unpersisted >= self.flush_threshold else self.flush_interval)
            if timer is not None:
                timer.start()  # outside the lock: a timer may fire at once (tests, delay 0)
        except Exception as exc:  # noqa: BLE001 - recording must never break the run
            _logger.debug("event not recorded: %s", exc)

    def resource(
        self,
        event_type: str,
        *,
        logical_id: str,
        resource_type: Any,
        provisioned_by: Any = None,
        operation: str = "DELETE",
        stack_name: str | None = None,
        physical_id: Any = None,
        duration_ms: int | None = None,
        error: BaseException | Mapping[str, Any] | None = None,
        reason: str | None = None,
        **extra: Any,
    ) -> None:
        """A per-resource event in cdkd's field order: operation, logicalId, resourceType,
        provisionedBy (when known), physicalId, durationMs, reason / error, then `extra`."""
        self.record(
            event_type,
            stackName=stack_name,
            operation=operation,
            logicalId=logical_id,
            resourceType=resource_type if isinstance(resource_type, str) else None,
            provisionedBy=provisioned_by if provisioned_by in ("sdk", "cc-api") else None,
            physicalId=physical_id if isinstance(physical_id, str) and physical_id else None,
            durationMs=duration_ms,
            reason=reason,
            error=error,
            **extra,
        )

    def _arm(self, delay: float) -> Timer | None:
        """Under self._lock: the timer to start, or None when one already covers `delay`."""
        if self._timer is not None:
            if delay > 0 or self._timer_delay == 0:
                return None
            self._timer.cancel()  # the threshold was reached: flush now, not at the debounce
        holder: list[Timer] = []

        def fire() -> None:
            with self._lock:
                if holder and self._timer is holder[0]:
                    self._timer = None
            self.flush()

        timer = self._timer_factory(delay, fire)
        holder.append(timer)
        self._timer = timer
        self._timer_delay = delay
        return timer

    # -- writing -------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write the whole stream now if anything is unpersisted. True when S3 holds every
        event recorded before the call. Never raises."""
        with self._write_lock:
            with self._lock:
                lines = list(self._lines)
                persisted = self._persisted
            if len(lines) <= persisted:
                return True
            try:
                body = _utf8("".join(lines))
                self.bucket.put(self.stream_key, body, content_type=EVENTS_CONTENT_TYPE)
            except Exception as exc:  # noqa: BLE001 - a write failure never fails the run
                self._write_failed(f"could not write the event stream {self.stream_key}", exc)
                return False
            with self._lock:
                self._persisted = max(self._persisted, len(lines))
            return True

    def _write_failed(self, what: str, exc: BaseException) -> None:
        self.write_failures += 1
        message = f"{what}: {self.mask(str(exc))}; the run continues, its event history may be incomplete"
        if self.write_failures == 1:
            self.warnings.append(message)
            try:
                self.log("warning", message)
            except Exception:  # noqa: BLE001
                pass
        else:
            _logger.debug(message)

    def finalize(
        self,
        result: str,
        counts: Mapping[str, int] | None = None,
        *,
        error: BaseException | Mapping[str, Any] | None = None,
    ) -> RunSummary | None:
        """End the run (see the class contract). Idempotent: a second call returns None."""
        try:
            with self._lock:
                if self._finalized or not self._events:
                    self._finalized = True
                    return None
            self.record(
                RUN_FINISHED,
                result=result,
                counts=_run_counts(counts),
                error=error if result == RESULT_FAILED else None,
            )
            with self._lock:
                self._finalized = True
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                events = list(self._events)
            if not self.flush():
                return None  # the index only ever names a stream S3 holds
            finished = self.clock()
            started = next((e for e in events if e.get("eventType") == RUN_STARTED), events[0])
            summary = RunSummary(
                run_id=self.run_id,
                command=self.command,
                cdkd_version=self.cdkd_version,
                started_at=str(started.get("timestamp", "")),
                finished_at=iso_timestamp(finished),
                result=result,
                event_count=len(events),
            )
            runs = self._write_index(summary, int(finished * 1000))
            if runs is None:
                return None
            self._prune(runs)
            return summary
        except Exception as exc:  # noqa: BLE001 - never fails the run
            self._write_failed("could not finish the event history", exc)
            return None

    def _write_index(self, summary: RunSummary, finished_ms: int) -> list[dict[str, Any]] | None:
        """Prepend `summary` to the stored index and write it; the runs written, or None.

        The write is conditional on the index as read (`If-Match`, or `If-None-Match` when
        there was none), so a concurrent writer's row is never dropped: on a 412 that is not
        our own landed write (the backend reads that back) it reads and merges again."""
        for _ in range(INDEX_WRITE_ATTEMPTS):
            try:
                stored = self.bucket.get(self.index_key)
            except NotFound:
                stored = None
            except EngineError as exc:
                # Writing without having read would drop every other run from the index.
                self._write_failed(f"could not read the run index {self.index_key}", exc)
                return None
            rows: list[dict[str, Any]] = []
            if stored is not None:
                try:
                    data = _loads(stored.body.decode("utf-8-sig"))
                except (UnicodeDecodeError, ValueError, RecursionError):
                    data = None  # corrupt: rebuilt from this run (cdkd does the same)
                if isinstance(data, dict):
                    version = data.get("indexVersion")
                    if isinstance(version, int | float) and not isinstance(version, bool) and version > INDEX_VERSION:
                        self._write_failed(
                            f"the run index {self.index_key} has indexVersion {version} (newer cdkd); left as it is",
                            EngineError("not overwritten"),
                        )
                        return None
                    if isinstance(data.get("runs"), list):
                        rows = [row for row in data["runs"] if isinstance(row, dict)]
            runs = [summary.as_dict()] + [row for row in rows if row.get("runId") != self.run_id]
            runs = runs[:MAX_INDEX_RUNS]
            index = {
                "indexVersion": INDEX_VERSION,
                "stackName": self.stack,
                "region": self.region,
                "runs": runs,
                "lastModified": finished_ms,
            }
            body = _utf8(js_stringify(index, indent=2))
            try:
                if stored is None:
                    self.bucket.put(self.index_key, body, if_none_match=True, content_type="application/json")
                else:
                    self.bucket.put(self.index_key, body, if_match=stored.etag, content_type="application/json")
            except PreconditionFailed:
                continue  # someone else wrote the index since we read it: merge again
            except Exception as exc:  # noqa: BLE001
                self._write_failed(f"could not write the run index {self.index_key}", exc)
                return None
            return runs
        self._write_failed(
            f"could not write the run index {self.index_key}",
            EngineError(f"other writers kept changing it ({INDEX_WRITE_ATTEMPTS} attempts)"),
        )
        return None

    def _prune(self, runs: list[dict[str, Any]]) -> None:
        """Delete streams older than the oldest indexed run, once the index is full (§4.5).

        Best effort: the index is already written, so a failure here only leaves extra
        streams behind. Each deleted key's noncurrent versions are purged too (seed 000:
        every path that deletes from the event store does, since each flush left a version).
        """
        if len(runs) < MAX_INDEX_RUNS:
            return
        oldest = runs[-1].get("runId")
        if not isinstance(oldest, str) or not oldest:
            return
        prefix = self.layout.events_prefix(self.stack, self.region)
        try:
            doomed = []
            for item in self.bucket.list_objects(prefix):
                name = item.key[len(prefix) :]
                if "/" in name or not name.endswith(EVENT_STREAM_SUFFIX):
                    continue
                run_id = name[: -len(EVENT_STREAM_SUFFIX)]
                if run_id and run_id < oldest:
                    doomed.append(item.key)
            for key in doomed:
                self.bucket.delete(key)
            if doomed:
                self.bucket.purge_noncurrent(doomed)
        except Exception as exc:  # noqa: BLE001
            self._write_failed(f"could not prune old event streams under {prefix}", exc)


def _run_counts(counts: Mapping[str, int] | None) -> dict[str, int]:
    """cdkd's `counts`: created, updated, deleted always; failed and skipped only when non-zero."""
    counts = counts if isinstance(counts, Mapping) else {}

    def number(name: str) -> int:
        value = counts.get(name, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    result = {"created": number("created"), "updated": number("updated"), "deleted": number("deleted")}
    for optional in ("failed", "skipped"):
        if number(optional):
            result[optional] = number(optional)
    return result
