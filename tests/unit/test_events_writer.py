"""engine.events.EventRecorder: cdkd's event store, byte for byte, against an in-memory bucket."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.errors import AccessDenied, EngineError, NotFound
from engine.events import (
    RESOURCE_FAILED,
    RESOURCE_STARTED,
    RESOURCE_SUCCEEDED,
    EventRecorder,
    iso_timestamp,
    parse_event_stream,
    parse_run_index,
    summarize_stream,
)
from engine.keys import KeyLayout
from engine.masking import Masker

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "cdkd-0.284.40"
PREFIX = "cdkd/ScrubStack/us-east-1/deployments/"
INDEX = PREFIX + "index.json"


@dataclass
class Info:
    key: str


@dataclass
class Stored:
    key: str
    body: bytes
    etag: str


class FakeBucket:
    """get/put/delete/list_objects/purge_noncurrent in memory; `ops` logs every call in order."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.content_types: dict[str, str] = {}
        self.ops: list[tuple[str, str]] = []
        self.puts: list[tuple[str, bytes]] = []
        self.fail_put: set[str] = set()  # keys (or "*") whose PUT raises
        self.fail_get: set[str] = set()
        self.purged: list[str] = []

    def get(self, key: str) -> Stored:
        self.ops.append(("get", key))
        if key in self.fail_get:
            raise AccessDenied(f"s3:GetObject on {key} denied")
        if key not in self.objects:
            raise NotFound(key)
        return Stored(key, self.objects[key], f'"{hash(self.objects[key])}"')

    def put(self, key: str, body: bytes, *, content_type: str = "application/json", **_: Any) -> Stored:
        self.ops.append(("put", key))
        if key in self.fail_put or "*" in self.fail_put:
            raise EngineError(f"s3:PutObject on {key} failed: InternalError password=hunter22")
        self.objects[key] = body
        self.content_types[key] = content_type
        self.puts.append((key, body))
        return Stored(key, body, '"e"')

    def delete(self, key: str, **_: Any) -> None:
        self.ops.append(("delete", key))
        self.objects.pop(key, None)

    def list_objects(self, prefix: str) -> list[Info]:
        self.ops.append(("list", prefix))
        return [Info(k) for k in sorted(self.objects) if k.startswith(prefix)]

    def purge_noncurrent(self, keys: list[str]) -> list[Any]:
        self.ops.append(("purge", ",".join(keys)))
        self.purged += keys
        return []


class ManualTimer:
    """A timer the test fires by hand."""

    def __init__(self, factory: TimerFactory, delay: float, fn: Any) -> None:
        self.factory, self.delay, self.fn = factory, delay, fn
        self.started = self.cancelled = self.fired = False

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        assert self.started and not self.cancelled
        self.fired = True
        self.fn()


class TimerFactory:
    def __init__(self) -> None:
        self.timers: list[ManualTimer] = []

    def __call__(self, delay: float, fn: Any) -> ManualTimer:
        timer = ManualTimer(self, delay, fn)
        self.timers.append(timer)
        return timer

    @property
    def live(self) -> list[ManualTimer]:
        return [t for t in self.timers if t.started and not t.cancelled and not t.fired]


def at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Clock:
    def __init__(self, *moments: str) -> None:
        self.moments = [at(m) for m in moments]
        self.now = self.moments[0] if self.moments else at("2026-11-29T12:00:00.000Z")

    def __call__(self) -> float:
        if self.moments:
            self.now = self.moments.pop(0)
        return self.now


def recorder(bucket: FakeBucket, timers: TimerFactory | None = None, **kwargs: Any) -> EventRecorder:
    kwargs.setdefault("clock", Clock())
    kwargs.setdefault("run_id", "20261129T120000000Z-aaaaaaaa")
    return EventRecorder(bucket, KeyLayout(), "ScrubStack", "us-east-1", timer=timers or TimerFactory(), **kwargs)


def resource_events(rec: EventRecorder, n: int) -> None:
    for i in range(n):
        rec.resource(RESOURCE_STARTED, logical_id=f"R{i}", resource_type="AWS::SQS::Queue", provisioned_by="sdk")


# --- the bytes ------------------------------------------------------------------------------------


def test_it_writes_the_stream_and_index_byte_for_byte_as_cdkd_does():
    bucket = FakeBucket()
    clock = Clock(
        "2026-11-29T12:28:11.123Z",
        "2026-11-29T12:28:11.152Z",
        "2026-11-29T12:28:11.174Z",
        "2026-11-29T12:28:11.304Z",
        "2026-11-29T12:28:11.342Z",
    )
    rec = recorder(bucket, clock=clock, run_id="20261129T122811123Z-f37f3ced", cdkd_version="0.284.40")

    rec.start()
    rec.resource(RESOURCE_STARTED, logical_id="Param", resource_type="AWS::SSM::Parameter", provisioned_by="sdk")
    rec.resource(
        RESOURCE_SUCCEEDED,
        logical_id="Param",
        resource_type="AWS::SSM::Parameter",
        provisioned_by="sdk",
        physical_id="/scrub/param",
        duration_ms=22,
    )
    summary = rec.finalize("SUCCEEDED", {"deleted": 1, "failed": 0, "skipped": 0})

    stream_key = PREFIX + "20261129T122811123Z-f37f3ced.jsonl"
    assert bucket.objects[stream_key] == (SAMPLES / "ScrubStack-destroy-run.jsonl").read_bytes()
    assert bucket.content_types[stream_key] == "application/x-ndjson"
    assert bucket.objects[INDEX] == (SAMPLES / "ScrubStack-deployments-index.json").read_bytes()
    assert bucket.content_types[INDEX] == "application/json"
    assert summary is not None and summary.event_count == 4
    # What the app writes, the app's reader (and so `cdkd events`) reads back.
    assert parse_run_index(bucket.objects[INDEX]) == [summary]
    assert summarize_stream(rec.run_id, parse_event_stream(bucket.objects[stream_key])) == summary.__class__(
        **{**summary.__dict__, "finished_at": "2026-11-29T12:28:11.304Z"}
    )


def test_it_makes_run_ids_in_cdkds_shape_from_the_clock():
    rec = EventRecorder(FakeBucket(), KeyLayout(), "S", "us-east-1", clock=lambda: at("2026-06-13T01:23:45.678Z"))
    assert rec.run_id.startswith("20260613T012345678Z-") and len(rec.run_id) == len("20260613T012345678Z-1a2b3c4d")
    assert rec.stream_key == f"cdkd/S/us-east-1/deployments/{rec.run_id}.jsonl"


def test_it_stamps_timestamps_in_iso_milliseconds():
    moment = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC).timestamp()
    assert iso_timestamp(moment) == "2026-01-02T03:04:05.006Z"


def test_it_omits_absent_fields_and_never_records_properties():
    bucket = FakeBucket()
    rec = recorder(bucket)
    rec.resource(RESOURCE_STARTED, logical_id="Q", resource_type="AWS::SQS::Queue", provisioned_by=None)
    rec.record("RESOURCE_SKIPPED", operation="DELETE", logicalId="Q", physicalId=None, reason="no id")
    rec.flush()
    lines = bucket.objects[rec.stream_key].decode().splitlines()
    assert json.loads(lines[0]) == {
        "timestamp": "2026-11-29T12:00:00.000Z",
        "eventType": "RESOURCE_STARTED",
        "stackName": "ScrubStack",
        "operation": "DELETE",
        "logicalId": "Q",
        "resourceType": "AWS::SQS::Queue",
    }
    assert "physicalId" not in lines[1] and "null" not in bucket.objects[rec.stream_key].decode()


def test_it_records_a_nested_childs_events_under_the_childs_name():
    bucket = FakeBucket()
    rec = recorder(bucket)
    rec.resource(RESOURCE_STARTED, logical_id="Q", resource_type="AWS::SQS::Queue", stack_name="ScrubStack~Child")
    rec.flush()
    assert json.loads(bucket.objects[rec.stream_key])["stackName"] == "ScrubStack~Child"


def test_it_records_error_metadata_with_only_the_message_masked():
    class ProviderError(Exception):
        def __init__(self, message: str) -> None:
            super().__init__(message)
            self.aws_code = "AccessDeniedException"
            self.request_id = "req-123"

    bucket = FakeBucket()
    rec = recorder(bucket, mask=Masker(["s3cr3t-value"]))
    try:
        try:
            raise ProviderError("denied for s3cr3t-value with AKIAABCDEFGHIJKLMNOP")
        except ProviderError as inner:
            raise RuntimeError("delete failed: s3cr3t-value") from inner
    except RuntimeError as exc:
        rec.resource(RESOURCE_FAILED, logical_id="Q", resource_type="T", duration_ms=5, error=exc)
    rec.flush()
    event = json.loads(bucket.objects[rec.stream_key])
    assert event["durationMs"] == 5
    assert event["error"] == {
        "name": "RuntimeError",
        "message": "delete failed: ***",
        "awsErrorCode": "AccessDeniedException",
        "requestId": "req-123",
    }
    assert b"s3cr3t" not in bucket.objects[rec.stream_key]


# --- flushing -----------------------------------------------------------------------------------


def test_it_flushes_after_the_debounce_not_on_every_event():
    bucket, timers = FakeBucket(), TimerFactory()
    rec = recorder(bucket, timers)

    rec.start()
    resource_events(rec, 5)

    assert bucket.puts == []
    assert [t.delay for t in timers.timers] == [2.0]  # one timer for the whole burst
    timers.timers[0].fire()
    assert len(bucket.puts) == 1 and len(parse_event_stream(bucket.puts[0][1])) == 6
    assert rec.persisted_count == 6

    resource_events(rec, 1)  # a new burst arms a new timer
    assert [t.delay for t in timers.live] == [2.0]
    timers.live[0].fire()
    assert len(parse_event_stream(bucket.puts[-1][1])) == 7  # the WHOLE stream, re-PUT


def test_it_flushes_at_once_at_fifty_unpersisted_events():
    bucket, timers = FakeBucket(), TimerFactory()
    rec = recorder(bucket, timers)

    resource_events(rec, 49)
    assert [t.delay for t in timers.live] == [2.0]
    resource_events(rec, 1)

    debounce, immediate = timers.timers
    assert debounce.cancelled and immediate.delay == 0.0
    immediate.fire()
    assert len(parse_event_stream(bucket.objects[rec.stream_key])) == 50
    # Persisted events no longer count: 49 more do not trigger an immediate flush.
    resource_events(rec, 49)
    assert [t.delay for t in timers.live] == [2.0]


def test_it_flushes_with_a_real_timer(monkeypatch):
    import threading

    bucket = FakeBucket()
    done = threading.Event()
    original = bucket.put

    def put(*args: Any, **kwargs: Any) -> Stored:
        result = original(*args, **kwargs)
        done.set()
        return result

    monkeypatch.setattr(bucket, "put", put)
    rec = EventRecorder(bucket, KeyLayout(), "S", "us-east-1", flush_interval=0.05)
    rec.start()
    assert done.wait(5)
    assert len(parse_event_stream(bucket.objects[rec.stream_key])) == 1


# --- finalize, index, prune -----------------------------------------------------------------------


def run_row(run_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "runId": run_id,
        "command": "deploy",
        "cdkdVersion": "0.284.40",
        "startedAt": "x",
        "finishedAt": "y",
        "result": "SUCCEEDED",
        "eventCount": 3,
        **extra,
    }


def old_ids(n: int) -> list[str]:
    return [f"202601{d:02d}T000000000Z-{d:08x}" for d in range(n, 0, -1)]  # newest first


def test_it_prepends_dedupes_and_truncates_the_index_to_twenty():
    bucket = FakeBucket()
    rec = recorder(bucket)
    ids = old_ids(20)
    rows = [run_row(rec.run_id, result="FAILED")] + [run_row(i) for i in ids]
    rows[1]["futureField"] = {"kept": True}
    bucket.objects[INDEX] = json.dumps({"indexVersion": 1, "runs": rows}).encode()

    rec.start()
    summary = rec.finalize("FAILED", {"deleted": 1, "failed": 2})

    index = json.loads(bucket.objects[INDEX])
    assert list(index) == ["indexVersion", "stackName", "region", "runs", "lastModified"]
    assert [r["runId"] for r in index["runs"]] == [rec.run_id] + ids[:19]
    assert index["runs"][0] == summary.as_dict()
    assert index["runs"][1]["futureField"] == {"kept": True}
    assert not bucket.objects[INDEX].endswith(b"\n")
    finished = parse_event_stream(bucket.objects[rec.stream_key])[-1]
    assert finished["counts"] == {"created": 0, "updated": 0, "deleted": 1, "failed": 2}
    assert finished["result"] == "FAILED" and "error" not in finished  # no error given


def test_it_prunes_only_after_the_index_is_written_and_only_older_streams():
    bucket = FakeBucket()
    rec = recorder(bucket)
    ids = old_ids(22)  # 22 stored runs: the two oldest fall out of the index
    bucket.objects[INDEX] = json.dumps({"indexVersion": 1, "runs": [run_row(i) for i in ids]}).encode()
    for run_id in ids:
        bucket.objects[f"{PREFIX}{run_id}.jsonl"] = b"{}\n"
    bucket.objects[f"{PREFIX}nested/x.jsonl"] = b""  # not a stream of this prefix

    rec.start()
    rec.finalize("SUCCEEDED", {"deleted": 0})

    kept = [rec.run_id] + ids[:19]
    assert [r["runId"] for r in json.loads(bucket.objects[INDEX])["runs"]] == kept
    doomed = [f"{PREFIX}{i}.jsonl" for i in ids[19:]]
    assert all(key not in bucket.objects for key in doomed)
    assert all(f"{PREFIX}{i}.jsonl" in bucket.objects for i in kept)
    assert f"{PREFIX}nested/x.jsonl" in bucket.objects
    index_put = bucket.ops.index(("put", INDEX))
    assert bucket.ops.index(("delete", doomed[0])) > index_put
    assert bucket.purged == sorted(doomed, reverse=True) or sorted(bucket.purged) == sorted(doomed)


def test_it_neither_writes_the_index_nor_prunes_when_the_stream_write_fails():
    bucket = FakeBucket()
    rec = recorder(bucket)
    ids = old_ids(21)
    bucket.objects[INDEX] = json.dumps({"indexVersion": 1, "runs": [run_row(i) for i in ids]}).encode()
    before = bucket.objects[INDEX]
    bucket.fail_put.add(rec.stream_key)

    rec.start()
    assert rec.finalize("SUCCEEDED", {}) is None

    assert bucket.objects[INDEX] == before
    assert not any(op == "delete" for op, _ in bucket.ops)


def test_it_does_not_prune_when_the_index_write_fails():
    bucket = FakeBucket()
    rec = recorder(bucket)
    ids = old_ids(21)
    for run_id in ids:
        bucket.objects[f"{PREFIX}{run_id}.jsonl"] = b"{}\n"
    bucket.objects[INDEX] = json.dumps({"indexVersion": 1, "runs": [run_row(i) for i in ids]}).encode()
    bucket.fail_put.add(INDEX)

    rec.start()
    assert rec.finalize("SUCCEEDED", {}) is None

    assert all(f"{PREFIX}{i}.jsonl" in bucket.objects for i in ids)
    assert not any(op in ("delete", "list") for op, _ in bucket.ops)


def test_it_rebuilds_a_corrupt_index_and_leaves_a_newer_one_alone():
    bucket = FakeBucket()
    rec = recorder(bucket)
    bucket.objects[INDEX] = b"{torn"
    rec.start()
    rec.finalize("SUCCEEDED", {})
    assert [r["runId"] for r in json.loads(bucket.objects[INDEX])["runs"]] == [rec.run_id]

    newer = json.dumps({"indexVersion": 2, "runs": []}).encode()
    bucket.objects[INDEX] = newer
    second = recorder(bucket, run_id="20261129T130000000Z-bbbbbbbb")
    second.start()
    assert second.finalize("SUCCEEDED", {}) is None
    assert bucket.objects[INDEX] == newer
    assert second.stream_key in bucket.objects  # the stream itself is written


def test_it_does_not_overwrite_an_index_it_could_not_read():
    bucket = FakeBucket()
    rec = recorder(bucket)
    bucket.objects[INDEX] = json.dumps({"indexVersion": 1, "runs": [run_row("r1")]}).encode()
    before = bucket.objects[INDEX]
    bucket.fail_get.add(INDEX)
    rec.start()
    assert rec.finalize("SUCCEEDED", {}) is None
    assert bucket.objects[INDEX] == before


def test_it_writes_nothing_for_a_run_without_events():
    bucket = FakeBucket()
    assert recorder(bucket).finalize("SUCCEEDED", {}) is None
    assert bucket.ops == []


def test_it_ignores_events_after_finalize_and_a_second_finalize():
    bucket = FakeBucket()
    rec = recorder(bucket)
    rec.start()
    rec.finalize("SUCCEEDED", {})
    resource_events(rec, 3)
    assert rec.finalize("FAILED", {}) is None
    assert len(parse_event_stream(bucket.objects[rec.stream_key])) == 2


def test_it_records_the_error_of_a_failed_run():
    bucket = FakeBucket()
    rec = recorder(bucket, mask=Masker())
    rec.start()
    rec.finalize("FAILED", {"deleted": 0, "skipped": 1}, error=RuntimeError("lock held; token=abcd1234efgh"))
    finished = parse_event_stream(bucket.objects[rec.stream_key])[-1]
    assert finished["counts"] == {"created": 0, "updated": 0, "deleted": 0, "skipped": 1}
    assert finished["error"] == {"name": "RuntimeError", "message": "lock held; token=***"}


# --- failures -------------------------------------------------------------------------------------


def test_it_warns_once_and_never_raises_when_writes_fail():
    bucket, timers = FakeBucket(), TimerFactory()
    bucket.fail_put.add("*")
    logged: list[tuple[str, str]] = []
    rec = recorder(bucket, timers, log=lambda level, message: logged.append((level, message)), mask=Masker())

    rec.start()
    for _ in range(3):
        resource_events(rec, 50)
        for timer in timers.live:
            timer.fire()
    assert rec.finalize("SUCCEEDED", {"deleted": 1}) is None

    assert rec.write_failures >= 4
    assert [level for level, _ in logged] == ["warning"]
    assert "could not write the event stream" in logged[0][1]
    assert "hunter22" not in logged[0][1]  # warnings are masked too
    assert INDEX not in bucket.objects


def test_it_survives_a_bucket_that_raises_anything():
    class Broken:
        def put(self, *args: Any, **kwargs: Any) -> None:
            raise ValueError("boom")

        def get(self, *args: Any, **kwargs: Any) -> None:
            raise ValueError("boom")

    rec = EventRecorder(Broken(), KeyLayout(), "S", "us-east-1", timer=TimerFactory())  # type: ignore[arg-type]
    rec.start()
    rec.record("RESOURCE_STARTED", logicalId=object())  # not JSON: the flush fails, nothing raises
    assert rec.flush() is False
    assert rec.finalize("SUCCEEDED", {}) is None


@pytest.mark.parametrize("bad", [None, {"created": "x"}])
def test_it_tolerates_odd_counts(bad):
    bucket = FakeBucket()
    rec = recorder(bucket)
    rec.start()
    rec.finalize("SUCCEEDED", bad)
    assert rec.finalized


# --- masking (engine.masking) -------------------------------------------------------------------------


def test_it_masks_known_values_longest_first_and_credential_shapes():
    mask = Masker(["abc", "hunter22", "hunter22-extended"])  # "abc" is too short to mask
    text = (
        "pw hunter22-extended and hunter22, key AKIAABCDEFGHIJKLMNOP, "
        "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, "
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload, url postgres://app:s3cr3tpw@db/app, abc"
    )
    assert mask(text) == (
        "pw *** and ***, key ***, aws_secret_access_key=***, Authorization: Bearer ***, "
        "url postgres://app:***@db/app, abc"
    )
    assert mask(None) is None and mask(5) == 5
    assert mask("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----") == "***"
