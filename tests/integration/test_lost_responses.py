"""Lost answers to writes, through the fault proxy in front of moto: every state write tells
its own landed write (the SDK's retry meets it as a 412 or a 404) from someone else's, and
every operation's result, its audit event and the bucket's bytes agree."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.backend import ABSENT_ETAG, StateBucket
from engine.errors import NotFound, PreconditionFailed, Throttled

pytestmark = pytest.mark.integration

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
KEY = "cdkd/App/us-east-1/state.json"


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(A1, BUCKET)
    return StateBucket.open(aws.access(A1), actor="alice", bucket=BUCKET, region="us-east-1")


# --- the backend ---------------------------------------------------------------------------


def test_it_recognises_its_own_conditional_put_after_a_lost_answer(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.drop_response("PutObject", key=KEY)

    written = bucket.put(KEY, b"v2", if_match=read["ETag"])

    assert aws.get(A1, BUCKET, KEY) == b"v2"
    assert written.recovered and written.etag == aws.etag(A1, BUCKET, KEY)
    assert aws.requests["PutObject"] == 2  # the SDK's retry met our own write as a 412


def test_it_still_reports_someone_elses_write_as_a_lost_condition(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.put(A1, BUCKET, KEY, b"theirs")

    with pytest.raises(PreconditionFailed):
        bucket.put(KEY, b"mine", if_match=read["ETag"])

    assert aws.get(A1, BUCKET, KEY) == b"theirs"
    assert aws.requests["GetObject"] == 0  # a first-attempt 412 is not read back


def test_it_recognises_its_own_conditional_delete_after_a_lost_answer(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.drop_response("DeleteObject", key=KEY)

    assert bucket.delete(KEY, if_match=read["ETag"]) is True

    assert aws.etag(A1, BUCKET, KEY) is None


def test_it_recognises_a_write_answered_500_after_it_landed(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.fail_request("PutObject", 500, "InternalError", key=KEY, commit=True)

    written = bucket.put(KEY, b"v2", if_match=read["ETag"])

    assert written.recovered and aws.get(A1, BUCKET, KEY) == b"v2"


def test_it_retries_a_slow_down_and_reports_throttling_truthfully(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.fail_request("PutObject", 503, "SlowDown", key=KEY, nth=1, count=1)

    bucket.put(KEY, b"v2", if_match=read["ETag"])  # one 503, then the SDK's retry lands
    assert aws.get(A1, BUCKET, KEY) == b"v2"

    aws.proxy.fail_request("PutObject", 503, "SlowDown", key=KEY, count=99)
    with pytest.raises(Throttled, match="SlowDown"):
        bucket.put(KEY, b"v3", if_match=aws.etag(A1, BUCKET, KEY))
    assert aws.get(A1, BUCKET, KEY) == b"v2"  # it did not land, and it is not claimed to have


def test_it_deletes_an_absent_key_only_while_it_stays_absent(aws, bucket):
    with pytest.raises(NotFound):
        bucket.delete(KEY, if_match=ABSENT_ETAG)
    assert bucket.versions(KEY) == []  # no stray delete marker

    aws.put(A1, BUCKET, KEY, b"appeared")
    with pytest.raises(PreconditionFailed):
        bucket.delete(KEY, if_match=ABSENT_ETAG)
    assert aws.get(A1, BUCKET, KEY) == b"appeared"


# --- every operation, end to end -------------------------------------------------------------
#
# Each fault hits one write of the operation: "drop" forwards it (it lands) and loses the
# answer, "commit-500" lands it and answers 500 InternalError, "slowdown" answers the first
# attempt 503 SlowDown without forwarding it. The SDK retries all three. The operation's
# result, its audit event and the bucket must agree.

STACK = "App"
REGION = "us-east-1"
BASE = f"cdkd/{STACK}/{REGION}"
STATE = f"{BASE}/state.json"
TOKENS = f"{BASE}/create-tokens.json"
JOURNAL = f"{BASE}/rollback-journal.json"
EXPORTS = f"cdkd/_index/{REGION}/exports.json"
STREAMS = f"{BASE}/deployments/*"
RUN_INDEX = f"{BASE}/deployments/index.json"


def _drop(proxy, api: str, key: str) -> None:
    proxy.drop_response(api, key=key)


def _commit_500(proxy, api: str, key: str) -> None:
    proxy.fail_request(api, 500, "InternalError", key=key, commit=True)


def _slowdown(proxy, api: str, key: str) -> None:
    proxy.fail_request(api, 503, "SlowDown", key=key)


FAULTS = {"drop": _drop, "commit-500": _commit_500, "slowdown": _slowdown}


def cdkd_json(value: Any) -> bytes:
    return json.dumps(value, indent=2).encode()


def row(name: str, **extra: Any) -> dict[str, Any]:
    return {"physicalId": name, "resourceType": "AWS::SQS::Queue", "properties": {"QueueName": name}, **extra}


def app_record(**extra: Any) -> dict[str, Any]:
    return {
        "version": 11,
        "stackName": STACK,
        "region": REGION,
        "resources": {"Old": row("old"), "Keep": row("keep", dependencies=["Old"])},
        "outputs": {},
        "lastModified": 1_700_000_000_000,
        **extra,
    }


LEDGER = {"ledgerVersion": 1, "nonce": "0" * 32, "sent": {"Old": {"base": "b", "token": "t", "firstSentAt": 1}}}


@pytest.fixture
def account(aws, db):
    from stacks.models import Account

    aws.make_bucket(A1, BUCKET)
    return Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")


def run(account, kind: str, params: dict[str, Any] | None = None):
    from stacks.operations import run_direct

    return run_direct(kind, account, STACK, REGION, params or {}, actor="cli:tess")


def finished(op) -> Any:
    from stacks.models import AuditEvent

    return AuditEvent.objects.get(operation=op, action="operation.finished")


def assert_agrees(aws, op, status: str, key: str = STATE) -> None:
    """The operation's status, its audit event and the bucket's current ETag of `key` agree."""
    op.refresh_from_db()
    event = finished(op)
    assert (op.status, event.result) == (status, status), (op.error, op.result)
    assert (op.etag_after or None) == aws.etag(A1, BUCKET, key) == (event.etag_after or None)


def current_versions(aws, key: str) -> list[dict[str, Any]]:
    answer = aws.s3(A1).list_object_versions(Bucket=BUCKET, Prefix=key)
    return [v for v in answer.get("Versions", []) if v["Key"] == key]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize(("api", "target"), [("DeleteObject", STATE), ("DeleteObject", TOKENS)])
def test_orphan_agrees_with_the_bucket_after_a_lost_answer(aws, account, fault, api, target):
    aws.put(A1, BUCKET, STATE, app_record())
    aws.put(A1, BUCKET, TOKENS, LEDGER)
    aws.put(A1, BUCKET, JOURNAL, {"journalVersion": 1, "segments": []})
    FAULTS[fault](aws.proxy, api, target)

    op = run(account, "orphan")

    assert_agrees(aws, op, "succeeded")
    # Every key went, and the journal cleanup after the record was not skipped.
    assert [aws.etag(A1, BUCKET, k) for k in (STATE, TOKENS, JOURNAL)] == [None, None, None]
    assert current_versions(aws, JOURNAL) == []  # its noncurrent versions were purged too


@pytest.mark.django_db(transaction=True)
def test_orphan_deletes_the_ledger_only_as_it_read_it(aws, account):
    """The create-tokens.json delete is conditional: it carries If-Match on the ledger."""
    aws.put(A1, BUCKET, STATE, app_record())
    ledger = aws.put(A1, BUCKET, TOKENS, LEDGER)
    conditions: list[tuple[str, str | None]] = []

    def spy(api, method, path, headers):
        if api == "DeleteObject":
            conditions.append((path.partition(f"/{BUCKET}/")[2], headers.get("if-match")))

    aws.proxy.add_hook(spy)
    op = run(account, "orphan")

    assert_agrees(aws, op, "succeeded")
    assert conditions[:2] == [(TOKENS, ledger["ETag"]), (STATE, op.plan_etag)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("target", [STATE, TOKENS])
def test_orphan_resources_agrees_with_the_bucket_after_a_lost_answer(aws, account, fault, target):
    aws.put(A1, BUCKET, STATE, app_record())
    aws.put(A1, BUCKET, TOKENS, LEDGER)
    FAULTS[fault](aws.proxy, "PutObject", target)

    op = run(account, "orphan-resources", {"resources": ["Old"]})

    assert_agrees(aws, op, "succeeded")
    stored = json.loads(aws.get(A1, BUCKET, STATE))
    assert list(stored["resources"]) == ["Keep"]
    assert json.loads(aws.get(A1, BUCKET, TOKENS))["nonce"] != LEDGER["nonce"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", FAULTS)
def test_restore_agrees_with_the_bucket_after_a_lost_answer(aws, account, fault):
    older = aws.put(A1, BUCKET, STATE, app_record(outputs={"Back": "yes"}))
    aws.put(A1, BUCKET, STATE, app_record())
    FAULTS[fault](aws.proxy, "PutObject", STATE)

    op = run(account, "restore", {"version_id": older["VersionId"]})

    assert_agrees(aws, op, "succeeded")
    assert json.loads(aws.get(A1, BUCKET, STATE))["outputs"] == {"Back": "yes"}
    assert op.result["details"]["new_version_id"] == current_versions(aws, STATE)[0]["VersionId"]


SECRET = "Pw-db-0123456789abc"


def _scrub_world(aws) -> None:
    sm = aws.account_session(A1).client("secretsmanager", region_name=REGION, endpoint_url=aws.moto.url)
    sm.create_secret(Name="prod/db", SecretString=SECRET)
    aws.put(A1, BUCKET, STATE, app_record(outputs={"DbPassword": SECRET}))
    aws.put(
        A1,
        BUCKET,
        EXPORTS,
        {
            "indexVersion": 1,
            "region": REGION,
            "exports": {"DbPassword": {"value": SECRET, "producerStack": STACK, "producerRegion": REGION}},
            "lastModified": 1,
        },
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("target", [STATE, EXPORTS])
def test_scrub_agrees_with_the_bucket_after_a_lost_answer(aws, account, fault, target):
    _scrub_world(aws)
    FAULTS[fault](aws.proxy, "PutObject", target)

    op = run(account, "scrub")

    assert_agrees(aws, op, "succeeded")
    assert SECRET.encode() not in aws.get(A1, BUCKET, STATE)
    assert SECRET.encode() not in aws.get(A1, BUCKET, EXPORTS)
    assert op.result["details"]["index"] == [{"key": EXPORTS, "entries": ["DbPassword"], "result": "patched"}]


def _queues(aws, names: list[str]) -> dict[str, Any]:
    sqs = aws.account_session(A1).client("sqs", region_name=REGION, endpoint_url=aws.moto.url)
    rows = {}
    for name in names:
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        rows[name.title()] = {**row(url), "properties": {"QueueName": name}, "provisionedBy": "sdk"}
    return rows


def _live_queues(aws) -> list[str]:
    sqs = aws.account_session(A1).client("sqs", region_name=REGION, endpoint_url=aws.moto.url)
    return sqs.list_queues().get("QueueUrls", [])


def _destroy_world(aws) -> None:
    aws.put(A1, BUCKET, STATE, app_record(resources=_queues(aws, ["first", "second"])))
    aws.put(A1, BUCKET, TOKENS, LEDGER)
    aws.put(
        A1,
        BUCKET,
        EXPORTS,
        {
            "indexVersion": 1,
            "exports": {
                "AppUrl": {"value": "u", "producerStack": STACK, "producerRegion": REGION},
                "OtherUrl": {"value": "o", "producerStack": "Other", "producerRegion": REGION},
            },
            "lastModified": 1,
        },
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize(
    ("api", "target", "what"),
    [
        ("PutObject", STATE, "trim"),
        ("DeleteObject", STATE, "final delete"),
        ("DeleteObject", TOKENS, "ledger delete"),
        ("PutObject", EXPORTS, "exports index"),
        ("PutObject", RUN_INDEX, "event store index"),
        ("PutObject", STREAMS, "event stream"),
    ],
)
def test_destroy_agrees_with_the_bucket_after_a_lost_answer(aws, account, fault, api, target, what):
    _destroy_world(aws)
    FAULTS[fault](aws.proxy, api, target)

    op = run(account, "destroy", {"concurrency": 1})

    assert_agrees(aws, op, "succeeded")
    assert op.result["warnings"] == []
    assert _live_queues(aws) == []
    assert [aws.etag(A1, BUCKET, k) for k in (STATE, TOKENS)] == [None, None]
    assert list(json.loads(aws.get(A1, BUCKET, EXPORTS))["exports"]) == ["OtherUrl"]
    runs = json.loads(aws.get(A1, BUCKET, RUN_INDEX))["runs"]
    assert [r["runId"] for r in runs] == [op.result["details"]["run_id"]]
    stream = aws.get(A1, BUCKET, f"{BASE}/deployments/{runs[0]['runId']}.jsonl")
    assert len(stream.splitlines()) == runs[0]["eventCount"]


@pytest.mark.django_db(transaction=True)
def test_the_event_store_recognises_a_stream_write_whose_every_answer_was_lost(aws, account):
    """All of the SDK's attempts land and lose their answers: the read-back still finds the
    stream, so the run index is written and no warning claims the history is incomplete."""
    _destroy_world(aws)
    aws.proxy.drop_response("PutObject", key=STREAMS, count=99)

    op = run(account, "destroy", {"concurrency": 1})

    assert_agrees(aws, op, "succeeded")
    assert op.result["warnings"] == []
    runs = json.loads(aws.get(A1, BUCKET, RUN_INDEX))["runs"]
    assert [r["runId"] for r in runs] == [op.result["details"]["run_id"]]


@pytest.mark.django_db(transaction=True)
def test_a_write_that_never_landed_is_reported_failed_with_the_bucket_unchanged(aws, account, monkeypatch):
    """503 SlowDown on every attempt: nothing landed, and nothing claims it did."""
    from botocore.config import Config

    from engine import aws as engine_aws

    monkeypatch.setattr(engine_aws, "_config", lambda: Config(retries={"mode": "standard", "max_attempts": 2}))
    before = aws.put(A1, BUCKET, STATE, app_record())
    aws.proxy.fail_request("PutObject", 503, "SlowDown", key=STATE, count=99)

    op = run(account, "orphan-resources", {"resources": ["Old"]})

    op.refresh_from_db()
    assert (op.status, finished(op).result) == ("failed", "failed")
    assert "SlowDown" in op.error and "throttling" in op.error
    assert aws.etag(A1, BUCKET, STATE) == before["ETag"]


LOCK = f"{BASE}/lock.json"


def _live_foreign_lock() -> bytes:
    import time

    now = int(time.time() * 1000)
    body = {"owner": "ci@runner-9:77", "timestamp": now, "expiresAt": now + 1_800_000, "operation": "deploy"}
    return json.dumps(body, separators=(",", ":")).encode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", FAULTS)
def test_force_unlock_reports_the_delete_it_made_after_a_lost_answer(aws, account, fault):
    aws.put(A1, BUCKET, LOCK, _live_foreign_lock())
    FAULTS[fault](aws.proxy, "DeleteObject", LOCK)

    op = run(account, "force-unlock")

    assert_agrees(aws, op, "succeeded", key=LOCK)
    assert aws.etag(A1, BUCKET, LOCK) is None
    # It deleted the lock; it was not "already gone" before it came.
    assert op.result["details"]["deleted"] is True and op.result["details"]["already_gone"] is False
    assert op.result["summary"].startswith("Removed the lock held by ci@runner-9:77")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_forced_orphan_removes_the_foreign_lock_after_a_lost_answer(aws, account, fault):
    aws.put(A1, BUCKET, STATE, app_record())
    aws.put(A1, BUCKET, LOCK, _live_foreign_lock())
    FAULTS[fault](aws.proxy, "DeleteObject", LOCK)

    op = run(account, "orphan", {"force": True})

    assert_agrees(aws, op, "succeeded")
    assert [aws.etag(A1, BUCKET, k) for k in (STATE, LOCK)] == [None, None]
    assert op.result["warnings"] == []


@pytest.mark.django_db(transaction=True)
def test_destroy_deletes_its_record_when_a_save_nobody_could_confirm_had_landed(aws, account, monkeypatch):
    """The trims land but their answers are lost AND reading them back fails (503): nobody can
    tell. The final delete then meets a 412; the record holds one of this run's own bodies,
    so it is still ours to delete."""
    import threading

    from botocore.config import Config

    from engine import aws as engine_aws

    monkeypatch.setattr(engine_aws, "_config", lambda: Config(retries={"mode": "standard", "max_attempts": 2}))
    _destroy_world(aws)
    armed = threading.Event()
    done = threading.Event()

    def hook(api, method, path, headers):
        key = path.lstrip("/").partition("/")[2]
        if key != STATE or done.is_set():
            return None
        if api == "PutObject":
            armed.set()
            return "drop"  # lands, answer lost
        if api == "GetObject" and armed.is_set():
            return (503, "SlowDown")  # the read-back cannot tell
        if api == "DeleteObject":
            done.set()
        return None

    aws.proxy.add_hook(hook)

    op = run(account, "destroy", {"concurrency": 1})

    assert armed.is_set() and done.is_set()
    assert_agrees(aws, op, "succeeded")
    assert _live_queues(aws) == [] and aws.etag(A1, BUCKET, STATE) is None


def test_the_run_index_keeps_a_row_another_writer_added_meanwhile(aws, bucket):
    """The index write is conditional: a run that finishes between our read and our write is
    merged in, not overwritten (cdkd's own writer is last-writer-wins)."""
    from engine.events import RESULT_SUCCEEDED, RUN_STARTED, EventRecorder
    from engine.keys import KeyLayout

    theirs = {"runId": "20260101T000000000Z-0000beef", "command": "deploy", "cdkdVersion": "0.284.40"}
    theirs.update(startedAt="2026-01-01T00:00:00.000Z", finishedAt="2026-01-01T00:01:00.000Z", result="SUCCEEDED")
    theirs["eventCount"] = 2
    raced = []

    def hook(api, method, path, headers):
        if api == "PutObject" and path.endswith(RUN_INDEX) and not raced:
            raced.append(True)  # another run's index lands just before ours
            aws.put(A1, BUCKET, RUN_INDEX, {"indexVersion": 1, "stackName": STACK, "region": REGION, "runs": [theirs]})
        return None

    aws.proxy.add_hook(hook)
    recorder = EventRecorder(bucket, KeyLayout(), STACK, REGION, command="destroy")
    recorder.record(RUN_STARTED)

    summary = recorder.finalize(RESULT_SUCCEEDED)

    assert summary is not None and recorder.warnings == []
    runs = json.loads(aws.get(A1, BUCKET, RUN_INDEX))["runs"]
    assert [r["runId"] for r in runs] == [summary.run_id, theirs["runId"]]
    assert aws.requests["PutObject"] == 3  # the stream, the index that lost the race, the merged index
