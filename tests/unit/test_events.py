from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.events import RunSummary, parse_event_stream, parse_run_index, summarize_stream

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "cdkd-0.284.40"

SAMPLE_RUN = RunSummary(
    run_id="20261129T122811123Z-f37f3ced",
    command="destroy",
    cdkd_version="0.284.40",
    started_at="2026-11-29T12:28:11.123Z",
    finished_at="2026-11-29T12:28:11.342Z",
    result="SUCCEEDED",
    event_count=4,
)


def _index(runs: object, **extra: object) -> bytes:
    return json.dumps({"indexVersion": 1, "stackName": "S", "region": "us-east-1", "runs": runs, **extra}).encode()


def _row(run_id: str, **fields: object) -> dict:
    row = {
        "runId": run_id,
        "command": "deploy",
        "cdkdVersion": "0.284.40",
        "startedAt": "2026-01-01T00:00:00.000Z",
        "finishedAt": "2026-01-01T00:00:01.000Z",
        "result": "SUCCEEDED",
        "eventCount": 3,
    }
    row.update(fields)
    return row


def test_it_parses_the_sample_index():
    runs = parse_run_index((SAMPLES / "ScrubStack-deployments-index.json").read_bytes())
    assert runs == [SAMPLE_RUN]


def test_it_keeps_the_index_order_newest_first():
    body = _index([_row("20260103T000000000Z-cccccccc"), _row("20260102T000000000Z-bbbbbbbb"), _row("b-no-time")])
    assert [run.run_id for run in parse_run_index(body)] == [
        "20260103T000000000Z-cccccccc",
        "20260102T000000000Z-bbbbbbbb",
        "b-no-time",
    ]


def test_it_reads_index_rows_leniently():
    body = _index(
        [
            {"runId": "r1"},  # everything else missing
            _row("r2", result="PARTIAL", eventCount="7", command=None, cdkdVersion=12),
            _row("r3", eventCount=True),
            _row("r4", eventCount=5.0, result="UNKNOWN"),
            "not a row",
            None,
            7,
        ]
    )
    assert parse_run_index(body) == [
        RunSummary("r1", "", "", "", "", "", 0),
        RunSummary(
            "r2", "", "", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", "PARTIAL", 0
        ),  # result kept as written
        RunSummary("r3", "deploy", "0.284.40", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", "SUCCEEDED", 0),
        RunSummary("r4", "deploy", "0.284.40", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", "UNKNOWN", 5),
    ]


def test_it_keeps_unknown_fields_out_of_the_way():
    body = _index([_row("r1", futureField={"x": 1})], futureTop=True)
    assert [run.run_id for run in parse_run_index(body)] == ["r1"]


def test_it_accepts_an_empty_runs_array_and_missing_index_version():
    assert parse_run_index(b'{"runs": []}') == []
    assert parse_run_index(json.dumps({"indexVersion": 1, "runs": [_row("r")]}).encode())[0].run_id == "r"
    assert parse_run_index(b'\xef\xbb\xbf{"runs": []}') == []  # a BOM is not a reason to fail


@pytest.mark.parametrize("version", [2, 11, 1.5])
def test_it_refuses_a_newer_index_version(version):
    body = json.dumps({"indexVersion": version, "runs": []}).encode()
    with pytest.raises(ValueError, match=rf"indexVersion {version}\b"):
        parse_run_index(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not valid JSON"),
        (b'{"runs": [', "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b'{"runs": NaN}', "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b"null", "not a JSON object"),
        (b"{}", "no 'runs' array"),
        (b'{"runs": {"r": {}}}', "no 'runs' array"),
        (b'{"runs": null}', "no 'runs' array"),
    ],
)
def test_it_explains_an_unreadable_index(body, message):
    with pytest.raises(ValueError, match=message):
        parse_run_index(body)


def test_it_parses_the_sample_stream():
    events = parse_event_stream((SAMPLES / "ScrubStack-destroy-run.jsonl").read_bytes())
    assert [event["eventType"] for event in events] == [
        "RUN_STARTED",
        "RESOURCE_STARTED",
        "RESOURCE_SUCCEEDED",
        "RUN_FINISHED",
    ]
    assert events[2]["physicalId"] == "/scrub/param"
    assert events[2]["durationMs"] == 22
    assert events[3]["counts"] == {"created": 0, "updated": 0, "deleted": 1}


def test_it_skips_blank_and_torn_lines():
    body = (
        b'{"eventType":"RUN_STARTED","timestamp":"t1"}\n'
        b"\n"
        b"   \r\n"
        b"not json at all\n"
        b'{"eventType":"RESOURCE_STARTED","logicalId":"A"}\r\n'
        b"42\n"
        b'["a list"]\n'
        b'{"eventType":"NaN","durationMs":NaN}\n'
        b'\xef\xbb\xbf{"eventType":"RESOURCE_SUCCEEDED","logicalId":"A"}\n'
        b'{"eventType":"RUN_FINISHED","result":"SUCC'  # torn final flush
    )
    assert parse_event_stream(body) == [
        {"eventType": "RUN_STARTED", "timestamp": "t1"},
        {"eventType": "RESOURCE_STARTED", "logicalId": "A"},
        {"eventType": "RESOURCE_SUCCEEDED", "logicalId": "A"},
    ]


def test_it_keeps_a_line_whose_torn_neighbour_split_a_character():
    good = '{"eventType":"RESOURCE_FAILED","error":{"message":"名前"}}'.encode()
    torn = '{"eventType":"RUN_FINISHED","reason":"名'.encode()[:-1]  # half a UTF-8 character
    events = parse_event_stream(good + b"\n" + torn)
    assert events == [{"eventType": "RESOURCE_FAILED", "error": {"message": "名前"}}]


def test_it_reads_an_empty_stream_as_no_events():
    assert parse_event_stream(b"") == []
    assert parse_event_stream(b"\n\n") == []


def test_it_summarizes_the_sample_stream_like_the_index():
    events = parse_event_stream((SAMPLES / "ScrubStack-destroy-run.jsonl").read_bytes())
    summary = summarize_stream("20261129T122811123Z-f37f3ced", events)
    # finishedAt differs from the index: the index stamps finalize() time, the stream
    # only has the RUN_FINISHED event's timestamp.
    assert summary == RunSummary(
        run_id="20261129T122811123Z-f37f3ced",
        command="destroy",
        cdkd_version="0.284.40",
        started_at="2026-11-29T12:28:11.123Z",
        finished_at="2026-11-29T12:28:11.304Z",
        result="SUCCEEDED",
        event_count=4,
    )


def test_it_takes_the_first_run_started_and_the_last_run_finished():
    events = [
        {"eventType": "RESOURCE_STARTED", "timestamp": "t0"},
        {"eventType": "RUN_STARTED", "timestamp": "t1", "command": "deploy", "cdkdVersion": "1.0.0"},
        {"eventType": "RUN_FINISHED", "timestamp": "t2", "result": "FAILED"},
        {"eventType": "RUN_STARTED", "timestamp": "t3", "command": "rollback", "cdkdVersion": "2.0.0"},
        {"eventType": "RUN_FINISHED", "timestamp": "t4", "result": "SUCCEEDED"},
    ]
    assert summarize_stream("r", events) == RunSummary("r", "deploy", "1.0.0", "t1", "t4", "SUCCEEDED", 5)


def test_it_reports_unknown_without_run_finished():
    events = [
        {"eventType": "RUN_STARTED", "timestamp": "t1", "command": "destroy", "cdkdVersion": "0.284.40"},
        {"eventType": "RESOURCE_STARTED", "timestamp": "t2"},
    ]
    assert summarize_stream("r", events) == RunSummary("r", "destroy", "0.284.40", "t1", "", "UNKNOWN", 2)


def test_it_reports_unknown_when_run_finished_has_no_result():
    events = [{"eventType": "RUN_FINISHED", "timestamp": "t9"}]
    assert summarize_stream("r", events) == RunSummary("r", "deploy", "unknown", "", "t9", "UNKNOWN", 1)


def test_it_falls_back_for_an_empty_stream():
    assert summarize_stream("r", []) == RunSummary("r", "deploy", "unknown", "", "", "UNKNOWN", 0)


def test_it_serialises_summaries_in_cdkds_shape():
    index = json.loads((SAMPLES / "ScrubStack-deployments-index.json").read_bytes())
    assert SAMPLE_RUN.as_dict() == index["runs"][0]
