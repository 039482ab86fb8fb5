"""The bounded decoder every bucket file goes through (engine.schema.decode_json), the
defects it leads to in parse_state and parse_lock, the event readers on top of it, and the
column helpers the sync stores values through (stacks.columns). Issue 8."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from engine import events, schema
from engine.schema import decode_json, nesting_depth, parse_lock, parse_state
from stacks import columns, eventsync


def test_it_measures_nesting_without_counting_brackets_in_strings() -> None:
    assert nesting_depth(b"[" * 500 + b"]" * 500) == 500
    assert nesting_depth(b'{"a": "' + b"[" * 500 + b'"}') == 1  # the brackets in the string do not count
    assert nesting_depth(b'["\\"' + b"[" * 300 + b'", ' + b"{" * 250 + b"}" * 250 + b"]") == 251


def test_it_refuses_bodies_over_the_bounds_before_parsing() -> None:
    assert decode_json(b"[1]" * 10, max_bytes=20).code == "too-large"
    for depth in (schema.MAX_DEPTH + 1, 10_000, 100_000):
        decoded = decode_json(b"[" * depth + b"]" * depth)
        assert decoded.code == "too-deep" and f"{depth:,}" in decoded.reason
    assert decode_json(b"[" * schema.MAX_DEPTH + b"]" * schema.MAX_DEPTH).code is None


def test_it_stays_linear_on_a_body_of_brackets() -> None:
    started = time.monotonic()
    assert decode_json(b"[" * 5_000_000).code == "too-deep"
    assert time.monotonic() - started < 5  # generous: a quadratic scan would take minutes


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"a": NaN}', "not-json"),
        (b'{"a": Infinity}', "not-json"),
        (b'{"a": -Infinity}', "not-json"),
        (b'{"a": 1', "not-json"),
        (b'{"a": "\xff"}', "not-json"),
        (b'\xef\xbb\xbf{"a": 1}', "not-json"),
        (b'{"a": ' + b"9" * 5000 + b"}", "not-json"),
        (b"", "not-json"),
    ],
)
def test_it_names_every_unreadable_body_and_never_raises(body: bytes, code: str) -> None:
    decoded = decode_json(body)
    assert decoded.code == code and decoded.value is None and decoded.reason


def test_it_says_a_bom_is_the_problem() -> None:
    assert "byte order mark" in decode_json(b'\xef\xbb\xbf{"a": 1}').reason


def test_it_finds_duplicate_keys_where_they_are() -> None:
    decoded = decode_json(b'{"outputs": {"A": 1, "A": 2}, "resources": {"Q": {"p": [{"k": 1, "k": 2}]}}}')
    assert decoded.value == {"outputs": {"A": 2}, "resources": {"Q": {"p": [{"k": 2}]}}}
    assert decoded.duplicates == ["outputs.A", "resources.Q.p[0].k"]


def good(**extra) -> dict:
    body = {"version": 11, "stackName": "Shop", "region": "us-east-1", "resources": {}, "outputs": {}}
    body.update(extra)
    return body


def parse(body: dict | bytes):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_state(raw, key_region="us-east-1", stack_name="Shop")


@pytest.mark.parametrize("version", [2**31, 2**40, 1.5e10, 1e300])
def test_it_makes_an_absurd_version_a_defect_and_keeps_the_record_read_only(version) -> None:
    record = parse(good(version=version))
    assert [(d.code, d.path) for d in record.defects] == [("number-out-of-range", "version")]
    assert record.newer_than_supported and not record.writable
    assert "cdkd state orphan Shop --stack-region us-east-1" not in record.defects[0].message  # advice is to fix it


def test_it_keeps_a_plausible_newer_version_without_a_defect() -> None:
    record = parse(good(version=12))
    assert record.defects == [] and record.newer_than_supported


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 1e300, 1e400])
def test_it_makes_an_absurd_last_modified_a_defect(value) -> None:
    raw = json.dumps(good(lastModified=0)).replace(
        '"lastModified": 0', f'"lastModified": {value!r}'.replace("inf", "1e400")
    )
    record = parse(raw.encode())
    assert [(d.code, d.path) for d in record.defects] == [("number-out-of-range", "lastModified")]
    assert record.last_modified_ms() is None


def test_it_makes_duplicate_keys_a_defect_naming_the_path() -> None:
    record = parse(b'{"version": 11, "region": "us-east-1", "resources": {}, "outputs": {"A": 1, "A": 2}}')
    assert [(d.code, d.path) for d in record.defects] == [("duplicate-key", "outputs.A")]
    assert record.outputs() == {"A": 2}  # read as cdkd reads it: the last one


def test_it_words_too_deep_and_too_large_records_with_a_way_out() -> None:
    deep = parse(b'{"resources": {}, "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}")
    assert [d.code for d in deep.defects] == ["too-deep"] and "Restore an earlier version" in deep.defects[0].message
    assert deep.data is None and deep.state is None and not deep.writable


def test_it_reads_a_lock_once_whatever_it_holds() -> None:
    assert parse_lock(b"[" * 10_000 + b"]" * 10_000).error.startswith("lock.json is not valid JSON (it nests")
    assert parse_lock(b'{"expiresAt": NaN}').error
    assert parse_lock(b"[]").kind == "an array" and parse_lock(b"[]").present_but_empty
    huge = parse_lock(json.dumps({"owner": "ci", "expiresAt": 2**64}).encode())
    assert huge.expires_at_ms() == 2**64 and not huge.is_expired(10**13)  # live, as cdkd reads it


def test_it_reads_event_files_under_the_same_bounds() -> None:
    with pytest.raises(ValueError, match="nests"):
        events.parse_run_index(b'{"runs": ' + b"[" * 10_000 + b"]" * 10_000 + b"}")
    index = b'\xef\xbb\xbf{"indexVersion": 1, "runs": [{"runId": "r", "eventCount": 1e300}]}'
    assert [r.run_id for r in events.parse_run_index(index)] == ["r"]
    stream = b"[" * 10_000 + b"]" * 10_000 + b'\n{"a": ' * 300 + b"1" + b"}" * 300 + b'\n{"eventType": "X"}\n'
    assert events.parse_event_stream(stream) == [{"eventType": "X"}]


def test_it_makes_strings_storable() -> None:
    assert columns.text("a\x00b\ud800c", 10) == "ab\ufffdc"
    assert columns.text("\udc00" * 5, 3) == "\ufffd" * 3
    assert columns.text(5, 10) == "" and columns.text("x" * 50, 10) == "x" * 10
    cleaned = columns.clean_json({"\ud800": [float("inf"), "\x00", 2**70, {"k": float("nan")}]})
    assert cleaned == {"\ufffd": [None, "", 2**70, {"k": None}]}
    json.dumps(cleaned).encode("utf-8")  # and json.dumps of it is valid UTF-8


def test_it_clamps_or_drops_numbers_for_integer_columns() -> None:
    assert columns.int_or_none(2**31, columns.INT_MAX) is None
    assert columns.int_or_none(2**31 - 1, columns.INT_MAX) == 2**31 - 1
    assert columns.int_or_none(10**400) is None and columns.int_or_none(float("nan")) is None
    assert columns.int_or_none(True) is None and columns.int_or_none(1.9) == 1
    assert columns.clamp_int(2**64) == columns.BIGINT_MAX and columns.clamp_int(-(2**64)) == -columns.BIGINT_MAX


def test_it_keeps_only_times_postgres_reads_back() -> None:
    assert eventsync.parse_time("0001-01-01T00:00:00+01:00") is None
    assert eventsync.parse_time("9999-12-31T23:59:59-01:00") is None
    assert eventsync.parse_time("2026-11-29T12:28:11.123+02:00") == datetime(
        2026, 11, 29, 10, 28, 11, 123000, tzinfo=UTC
    )
    assert not eventsync.storable_run_id("\ud800x") and not eventsync.storable_run_id("a\x00")
    assert eventsync.storable_run_id("20261129T122811123Z-f37f3ced")
