"""engine.destroy against moto through the proxy: the stored record after each step, refusals,
order, retain/skip/fail, nested stacks, cancel, a crashed run resumed, and the event store.

Most tests inject a fake `delete` (a dict of live resources) so every outcome is under the
test's control; the last ones run the real engine.providers against moto.
"""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from typing import Any

import pytest
from botocore.exceptions import ClientError

from engine.backend import StateBucket
from engine.destroy import Destroy, ProviderError, Skip
from engine.errors import AccessDenied
from engine.events import parse_event_stream, parse_run_index
from engine.keys import KeyLayout
from engine.operations import Context, OperationRefused, Plan, StalePlan, spec_for

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
STACK = "App"
BASE = f"cdkd/{STACK}/{REGION}"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/111111111111/app-q"
STATE = f"{BASE}/state.json"
TOKENS = f"{BASE}/create-tokens.json"
JOURNAL = f"{BASE}/rollback-journal.json"
LOCK = f"{BASE}/lock.json"
EVENTS = f"{BASE}/deployments/"
EXPORTS = f"cdkd/_index/{REGION}/exports.json"
CHILD = f"{STACK}~Nested"
CHILD_STATE = f"cdkd/{CHILD}/{REGION}/state.json"


def cdkd_json(value: Any) -> bytes:
    return json.dumps(value, indent=2).encode()


def res(rtype: str, pid: Any, properties: dict | None = None, deps: list[str] | None = None, **extra: Any) -> dict:
    row: dict[str, Any] = {"physicalId": pid, "resourceType": rtype, "properties": properties or {}}
    if deps:
        row["dependencies"] = deps
    row["provisionedBy"] = "sdk"
    row.update(extra)
    return row


def app_resources() -> dict[str, Any]:
    """A function using a role and a queue, a topic with a queue subscription, a log group
    named after the function, and a bucket kept by DeletionPolicy Retain."""
    return {
        "Role": res("AWS::IAM::Role", "app-role"),
        "Queue": res("AWS::SQS::Queue", "https://sqs.us-east-1.amazonaws.com/111111111111/app-q"),
        "Fn": res(
            "AWS::Lambda::Function",
            "app-fn",
            {"Role": {"Fn::GetAtt": ["Role", "Arn"]}, "Environment": {"Variables": {"Q": {"Ref": "Queue"}}}},
        ),
        "Logs": res("AWS::Logs::LogGroup", "/aws/lambda/app-fn", {"LogGroupName": {"Fn::Sub": "/aws/lambda/${Fn}"}}),
        "Topic": res("AWS::SNS::Topic", "arn:aws:sns:us-east-1:111111111111:app-t"),
        "Sub": res(
            "AWS::SNS::Subscription",
            "arn:aws:sns:us-east-1:111111111111:app-t:sub-1",
            {"TopicArn": {"Ref": "Topic"}, "Endpoint": {"Fn::GetAtt": "Queue.Arn"}},
        ),
        "Kept": res("AWS::S3::Bucket", "app-kept-bucket", deletionPolicy="Retain"),
    }


def record(resources: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    body = {
        "version": 9,
        "stackName": STACK,
        "region": REGION,
        "resources": app_resources() if resources is None else resources,
        "outputs": {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/111111111111/app-q", "Plain": "x"},
        "imports": [{"sourceStack": "Base", "sourceRegion": REGION, "exportName": "BaseVpc"}],
        "outputReads": [{"sourceStack": "Base", "sourceRegion": REGION, "outputName": "Out"}],
        "exportNames": ["QueueUrl"],
        "skippedOutputs": {"Broken": "sha256:abc"},
        "lastModified": 1_700_000_000_000,
        "futureTopField": ["kept"],
    }
    body.update(extra)
    return body


class Killed(BaseException):
    """What a SIGKILL looks like from inside: nothing after it runs."""


class FakeAws:
    """Live resources by physical id. `delete` is the runner's seam; it records each call."""

    def __init__(self, aws: Any = None, live: set[str] | None = None) -> None:
        self.aws = aws
        self.live = set(live or ())
        self.calls: list[tuple[str, bool]] = []
        self.fail: dict[str, BaseException] = {}
        self.kill_at: int | None = None  # call number (1-based) that "kills the worker"
        self.on_call: Any = None  # (ref) -> None, before the delete
        self.lock = threading.Lock()
        self.stored_at_call: list[dict | None] = []

    def delete(self, clients: Any, ref: Any, snapshot: bool = False) -> str:
        with self.lock:
            self.calls.append((ref.logical_id, snapshot))
            number = len(self.calls)
            if self.aws is not None:
                try:
                    self.stored_at_call.append(json.loads(self.aws.get(ACCOUNT, BUCKET, STATE)))
                except ClientError:
                    self.stored_at_call.append(None)
        if self.kill_at is not None and number >= self.kill_at:
            raise Killed()
        if self.on_call is not None:
            self.on_call(ref)
        if ref.physical_id in self.fail:
            raise self.fail[ref.physical_id]
        with self.lock:
            if ref.physical_id not in self.live:
                return "not-found"
            self.live.discard(ref.physical_id)
        return "deleted"

    @property
    def order(self) -> list[str]:
        return [lid for lid, _ in self.calls]


def live_of(resources: dict[str, Any]) -> set[str]:
    return {row["physicalId"] for row in resources.values() if isinstance(row.get("physicalId"), str)}


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


def context(bucket: StateBucket, stack: str = STACK, region: str | None = REGION, **params: Any) -> Context:
    params.setdefault("concurrency", 1)
    return Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack=stack,
        region=region,
        params=params,
        operation_id="op-destroy-1",
        person="alice",
        log=lambda level, message: LOGS.append((level, message)),
    )


LOGS: list[tuple[str, str]] = []


def keys(aws, prefix: str = "") -> list[str]:
    listed = aws.s3(ACCOUNT).list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(item["Key"] for item in listed)


def versions(aws, key: str) -> list[dict[str, Any]]:
    answer = aws.s3(ACCOUNT).list_object_versions(Bucket=BUCKET, Prefix=key)
    return [v for v in answer.get("Versions", []) + answer.get("DeleteMarkers", []) if v["Key"] == key]


def stored(aws, key: str = STATE) -> dict[str, Any] | None:
    try:
        return json.loads(aws.get(ACCOUNT, BUCKET, key))
    except ClientError:
        return None


def snapshot_of(original: dict[str, Any], remaining: list[str], last_modified: int) -> bytes:
    """What cdkd's destroy snapshot must be: {...state, resources (trimmed), outputs: {},
    imports/outputReads dropped, the record's own version}, 2-space JSON, no trailing newline."""
    body = {k: v for k, v in original.items() if k not in ("imports", "outputReads")}
    body["resources"] = {lid: row for lid, row in original["resources"].items() if lid in remaining}
    body["outputs"] = {}
    body["lastModified"] = last_modified
    return json.dumps(body, indent=2).encode()


def run_events(aws, stack: str = STACK) -> tuple[list[dict], list[Any], bytes]:
    prefix = f"cdkd/{stack}/{REGION}/deployments/"
    index_body = aws.get(ACCOUNT, BUCKET, prefix + "index.json")
    runs = parse_run_index(index_body)
    stream = aws.get(ACCOUNT, BUCKET, f"{prefix}{runs[0].run_id}.jsonl")
    return parse_event_stream(stream), runs, stream


def run(spec: Destroy, ctx: Context, plan: Plan | None = None):
    plan = plan or spec.plan(ctx)
    return plan, spec.execute(ctx, Plan.from_json(plan.as_json()))


# --- a whole destroy, step by step -----------------------------------------------------------------


def test_it_destroys_in_reverse_dependency_order_writing_the_trimmed_record_after_each_delete(aws, bucket, monkeypatch):
    original = record()
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(original))
    aws.put(ACCOUNT, BUCKET, TOKENS, cdkd_json({"ledgerVersion": 1, "nonce": "n", "sent": {}}))
    for n in range(3):
        aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json({"journalVersion": 1, "n": n, "failedOperations": ["pw"]}))
    aws.put(
        ACCOUNT,
        BUCKET,
        EXPORTS,
        cdkd_json(
            {
                "indexVersion": 1,
                "region": REGION,
                "exports": {
                    "QueueUrl": {"value": "q", "producerStack": STACK, "producerRegion": REGION},
                    "Other": {"value": "o", "producerStack": "Base", "producerRegion": REGION},
                    "SameNameElsewhere": {"value": "e", "producerStack": STACK, "producerRegion": "eu-west-1"},
                },
                "lastModified": 1,
            }
        ),
    )
    fake = FakeAws(aws, live_of(original["resources"]))
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    deleted_keys: list[str] = []
    original_delete = bucket.delete
    monkeypatch.setattr(bucket, "delete", lambda key, **kw: (deleted_keys.append(key), original_delete(key, **kw)))
    progress: list[tuple[int, int, dict]] = []
    ctx.progress = lambda done, total, detail=None: progress.append((done, total, detail))

    plan, outcome = run(spec, ctx)

    # The plan: deletion order, actions, and nothing decided by AWS yet.
    assert plan.etag == aws.etag(ACCOUNT, BUCKET, STATE) or plan.etag  # the ETag it was computed from
    assert plan.data["levels"] == [["Logs"], ["Fn", "Sub"], ["Role", "Queue", "Topic", "Kept"]]
    assert {lid: r["action"] for lid, r in plan.data["rows"].items()} == {
        "Logs": "delete", "Sub": "delete", "Fn": "delete", "Topic": "delete",
        "Role": "delete", "Queue": "delete", "Kept": "retain",
    }  # fmt: skip
    assert any("keep Kept" in line for line in plan.changes)
    # The deletes: each only after everything depending on it is gone; Kept never touched.
    assert fake.order == ["Logs", "Fn", "Sub", "Role", "Queue", "Topic"]
    assert fake.order.index("Fn") < fake.order.index("Role")
    assert fake.live == {"app-kept-bucket"}
    # The stored record as each delete started: a destroy snapshot (outputs cleared, imports
    # dropped) that still lists every resource not yet deleted. Writes run on their own
    # serial writer (as cdkd chains them), so a snapshot may lag behind the newest deletes,
    # never ahead of them.
    assert fake.stored_at_call[0] == original
    for i, at_call in enumerate(fake.stored_at_call[1:], start=1):
        not_yet_deleted = [lid for lid in original["resources"] if lid not in fake.order[:i]]
        assert at_call is not None
        listed = [lid for lid in original["resources"] if lid in at_call["resources"]]
        assert set(not_yet_deleted) <= set(listed), (i, listed)
        if at_call != original:
            assert json.dumps(at_call, indent=2).encode() == snapshot_of(original, listed, at_call["lastModified"])
            assert at_call["lastModified"] > original["lastModified"]
    # Full success: ledger, then record (If-Match), then journal (+ all its versions), then the lock.
    assert deleted_keys[:3] == [TOKENS, STATE, JOURNAL]
    assert stored(aws) is None and stored(aws, TOKENS) is None
    assert [v.get("IsLatest") for v in versions(aws, JOURNAL)] == [True]  # only the delete marker
    # The original, one or more incremental snapshots (never more than one per delete), the delete marker.
    assert 3 <= len(versions(aws, STATE)) <= 1 + 6 + 1
    assert aws.etag(ACCOUNT, BUCKET, LOCK) is None
    # The exports index lost exactly this stack's entries (stack AND region), formatted as cdkd writes it.
    exports_body = aws.get(ACCOUNT, BUCKET, EXPORTS)
    exports = json.loads(exports_body)
    assert list(exports["exports"]) == ["Other", "SameNameElsewhere"]
    assert exports["lastModified"] > 1 and not exports_body.endswith(b"\n")
    assert exports_body == json.dumps(exports, indent=2).encode()
    # The outcome.
    assert outcome.status == "succeeded"
    assert outcome.details["counts"] == {"deleted": 6, "retained": 1, "skipped": 0, "failed": 0, "unverified": 0}
    assert outcome.etag_after is None and outcome.details["left"] == []
    assert outcome.details["run_id"] in keys(aws, EVENTS)[0]
    # Progress: every resource reported, ending with its outcome.
    done, total, detail = progress[-1]
    assert (done, total, detail["phase"]) == (7, 7, "done")
    assert {k: v["status"] for k, v in detail["items"].items()} == {
        "Logs": "deleted", "Sub": "deleted", "Fn": "deleted", "Topic": "deleted",
        "Role": "deleted", "Queue": "deleted", "Kept": "retained",
    }  # fmt: skip
    assert any(d["items"]["Fn"]["status"] == "deleting" for _, _, d in progress)


def test_it_writes_cdkds_event_stream_and_index_field_by_field(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record()))
    fake = FakeAws(aws, live_of(app_resources()) - {"app-fn"})  # Fn already gone: "not found" = deleted
    _, outcome = run(Destroy(delete=fake.delete), context(bucket))

    events, runs, stream = run_events(aws)
    assert stream.endswith(b"}\n") and b"\n\n" not in stream and b": " not in stream  # compact JSONL
    head = aws.s3(ACCOUNT).head_object(Bucket=BUCKET, Key=f"{EVENTS}{runs[0].run_id}.jsonl")
    assert head["ContentType"] == "application/x-ndjson"
    assert list(events[0]) == ["timestamp", "eventType", "stackName", "command", "region", "cdkdVersion"]
    assert (events[0]["eventType"], events[0]["command"], events[0]["region"]) == ("RUN_STARTED", "destroy", REGION)
    per_resource = events[1:-1]
    for event in per_resource:
        assert event["stackName"] == STACK and event["operation"] == "DELETE"
        assert "properties" not in event
        base = ["timestamp", "eventType", "stackName", "operation", "logicalId", "resourceType", "provisionedBy"]
        if event["eventType"] == "RESOURCE_SUCCEEDED":
            assert list(event) == base + ["physicalId", "durationMs"]
            assert isinstance(event["durationMs"], int)
        else:
            assert list(event) == base
    assert [e["eventType"] for e in per_resource if e["logicalId"] == "Kept"] == ["RESOURCE_RETAINED"]
    assert [e["eventType"] for e in per_resource if e["logicalId"] == "Fn"] == [
        "RESOURCE_STARTED",
        "RESOURCE_SUCCEEDED",
    ]
    assert list(events[-1]) == ["timestamp", "eventType", "stackName", "result", "counts"]
    assert events[-1]["result"] == "SUCCEEDED"
    assert events[-1]["counts"] == {"created": 0, "updated": 0, "deleted": 6}
    # The index: cdkd's shape, newest first, this run's summary.
    index_body = aws.get(ACCOUNT, BUCKET, f"{EVENTS}index.json")
    index = json.loads(index_body)
    assert list(index) == ["indexVersion", "stackName", "region", "runs", "lastModified"]
    assert (index["indexVersion"], index["stackName"], index["region"]) == (1, STACK, REGION)
    assert list(index["runs"][0]) == [
        "runId", "command", "cdkdVersion", "startedAt", "finishedAt", "result", "eventCount",
    ]  # fmt: skip
    assert index["runs"][0]["eventCount"] == len(events) and index["runs"][0]["startedAt"] == events[0]["timestamp"]
    assert index_body == json.dumps(index, indent=2).encode()
    assert runs[0].run_id == outcome.details["run_id"]


# --- refusals ---------------------------------------------------------------------------------------


def test_it_refuses_a_missing_record(aws, bucket):
    with pytest.raises(OperationRefused, match="no state record"):
        Destroy(delete=FakeAws().delete).plan(context(bucket))


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b'{"version": 11, "resources": "torn", "outputs": {}}', "damaged"),
        (cdkd_json(record(resources={"A": None})), "damaged"),
        (cdkd_json(record(resources={"A": {"resourceType": "T", "physicalId": "a", "properties": "x"}})), "damaged"),
        (cdkd_json(record(outputs=["a"])), "damaged"),
        (cdkd_json(record(orphans="x")), "damaged"),
        (b"{not json", "damaged"),
        (cdkd_json(record(version=12)), "schema version 12"),
        (cdkd_json(record(region="eu-west-1")), "other than its key"),
    ],
)
def test_it_refuses_before_any_lock_and_touches_nothing(aws, bucket, body, match):
    aws.put(ACCOUNT, BUCKET, STATE, body)
    aws.reset_counts()
    fake = FakeAws()

    with pytest.raises(OperationRefused, match=match):
        Destroy(delete=fake.delete).plan(context(bucket))

    assert fake.calls == [] and aws.get(ACCOUNT, BUCKET, STATE) == body
    assert aws.requests.get("PutObject", 0) == 0 and aws.etag(ACCOUNT, BUCKET, LOCK) is None


def test_it_destroys_a_region_mismatched_record_that_lists_nothing(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={}, region="eu-west-1")))
    _, outcome = run(Destroy(delete=FakeAws().delete), context(bucket))
    assert outcome.status == "succeeded" and stored(aws) is None


def test_it_refuses_a_legacy_record(aws, bucket):
    aws.put(ACCOUNT, BUCKET, f"cdkd/{STACK}/state.json", cdkd_json(record(version=1)))
    with pytest.raises(OperationRefused, match="legacy"):
        Destroy(delete=FakeAws().delete).plan(context(bucket, region=None))


def test_it_refuses_a_stack_another_stack_imports_from(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record()))
    consumer = record(resources={}, stackName="Consumer", region="eu-west-1")
    consumer["imports"] = [{"sourceStack": STACK, "sourceRegion": REGION, "exportName": "QueueUrl"}]
    aws.put(ACCOUNT, BUCKET, "cdkd/Consumer/eu-west-1/state.json", cdkd_json(consumer))
    # Same name in another region is another stack; importing from IT does not block.
    other = record(resources={}, stackName="Other")
    other["imports"] = [{"sourceStack": STACK, "sourceRegion": "eu-west-1", "exportName": "X"}]
    aws.put(ACCOUNT, BUCKET, "cdkd/Other/us-east-1/state.json", cdkd_json(other))

    with pytest.raises(OperationRefused, match=r"still imported by another stack: Consumer \(eu-west-1\): imports"):
        Destroy(delete=FakeAws().delete).plan(context(bucket))


def test_it_skips_unreadable_consumer_records_but_names_them(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record()))
    aws.put(ACCOUNT, BUCKET, "cdkd/Torn/us-east-1/state.json", b"{torn")
    plan = Destroy(delete=FakeAws().delete).plan(context(bucket))
    assert any("cdkd/Torn/us-east-1/state.json" in w and "skipped by the import check" in w for w in plan.warnings)


def test_it_refuses_a_dependency_cycle(aws, bucket):
    cyclic = {"A": res("AWS::SQS::Queue", "a", {"X": {"Ref": "B"}}), "B": res("AWS::SQS::Queue", "b", deps=["A"])}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=cyclic)))
    with pytest.raises(OperationRefused, match="A -> B -> A"):
        Destroy(delete=FakeAws().delete).plan(context(bucket))


def test_it_refuses_under_the_lock_an_import_that_appeared_after_the_plan_and_records_the_run(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record()))
    fake = FakeAws(aws, live_of(app_resources()))
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    consumer = record(resources={}, stackName="Late")
    consumer["imports"] = [{"sourceStack": STACK, "sourceRegion": REGION, "exportName": "QueueUrl"}]
    aws.put(ACCOUNT, BUCKET, "cdkd/Late/us-east-1/state.json", cdkd_json(consumer))

    with pytest.raises(OperationRefused, match="Late"):
        spec.execute(ctx, plan)

    assert fake.calls == [] and stored(aws) == record()
    assert aws.etag(ACCOUNT, BUCKET, LOCK) is None
    events, runs, _ = run_events(aws)
    assert [e["eventType"] for e in events] == ["RUN_STARTED", "RUN_FINISHED"]
    assert events[-1]["result"] == "FAILED" and "Late" in events[-1]["error"]["message"]
    assert runs[0].result == "FAILED"


def test_it_refuses_a_stale_plan_and_deletes_nothing(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record()))
    fake = FakeAws(aws, live_of(app_resources()))
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    changed = record()
    changed["resources"]["Queue"]["properties"] = {"VisibilityTimeout": 99}  # someone redeployed
    del changed["resources"]["Logs"]  # ...and dropped a row: not a pure trim any more
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(changed))

    with pytest.raises(StalePlan):
        spec.execute(ctx, plan)
    assert fake.calls == [] and stored(aws) == changed


# --- retain, skip, fail ---------------------------------------------------------------------------


def test_it_keeps_a_skipped_row_with_its_reason_and_makes_no_aws_call_for_it(aws, bucket):
    resources = app_resources()
    resources["NoId"] = res("AWS::SSM::Parameter", None)
    resources["Perm"] = res("AWS::Lambda::Permission", "app-fn|no-statement", {"FunctionName": {"Ref": "Fn"}})
    original = record(resources=resources)
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(original))
    fake = FakeAws(aws, live_of(resources))

    def provider_skips_perm(ref: Any) -> None:
        if ref.logical_id == "Perm":
            raise Skip("malformed physicalId in state — no delete issued")

    fake.on_call = provider_skips_perm

    plan, outcome = run(Destroy(delete=fake.delete), context(bucket))

    assert plan.data["rows"]["NoId"] == {**plan.data["rows"]["NoId"], "action": "skip",
                                         "reason": "state record has no physical id"}  # fmt: skip
    assert "NoId" not in fake.order  # no AWS call for a row the plan knew it cannot address
    assert "Perm" in fake.order  # the provider's own Skip: also kept
    # The function its permission belongs to is still deleted (seed 004: that removes the grant).
    assert "Fn" in fake.order and "app-fn" not in fake.live
    assert outcome.status == "partial"
    assert outcome.details["counts"] == {"deleted": 6, "retained": 1, "skipped": 2, "failed": 0, "unverified": 0}
    left = stored(aws)
    assert list(left["resources"]) == ["Kept", "NoId", "Perm"]  # retained and skipped rows stay
    assert left["outputs"] == {} and "imports" not in left and "outputReads" not in left
    assert left["skippedOutputs"] == original["skippedOutputs"] and left["futureTopField"] == ["kept"]
    assert aws.get(ACCOUNT, BUCKET, STATE) == snapshot_of(original, ["Kept", "NoId", "Perm"], left["lastModified"])
    events, runs, _ = run_events(aws)
    skipped = {e["logicalId"]: e for e in events if e["eventType"] == "RESOURCE_SKIPPED"}
    assert skipped["NoId"]["reason"] == "state record has no physical id" and "physicalId" not in skipped["NoId"]
    assert skipped["Perm"]["physicalId"] == "app-fn|no-statement"
    assert events[-1]["result"] == "FAILED"  # skips alone make the run FAILED, as in cdkd
    assert events[-1]["counts"] == {"created": 0, "updated": 0, "deleted": 6, "skipped": 2}


def test_it_leaves_a_failed_resource_and_what_it_depends_on_then_a_rerun_finishes(aws, bucket):
    original = record()
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(original))
    fake = FakeAws(aws, live_of(original["resources"]))
    fake.fail["app-fn"] = ProviderError(
        "Fn (AWS::Lambda::Function app-fn): DeleteFunction failed (AccessDeniedException): token=abcdefgh1234",
        aws_code="AccessDeniedException",
        request_id="req-42",
    )
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket, concurrency=4)

    plan, outcome = run(spec, ctx)

    assert outcome.status == "partial"
    assert outcome.details["counts"] == {"deleted": 3, "retained": 1, "skipped": 2, "failed": 1, "unverified": 0}
    assert "Role" not in fake.order and "Queue" not in fake.order  # Fn still uses both
    assert fake.live == {"app-fn", "app-role", QUEUE_URL, "app-kept-bucket"}
    assert list(stored(aws)["resources"]) == ["Role", "Queue", "Fn", "Kept"]
    events, _, _ = run_events(aws)
    failed = next(e for e in events if e["eventType"] == "RESOURCE_FAILED")
    assert failed["logicalId"] == "Fn" and isinstance(failed["durationMs"], int)
    assert failed["error"]["awsErrorCode"] == "AccessDeniedException" and failed["error"]["requestId"] == "req-42"
    assert "abcdefgh1234" not in failed["error"]["message"]  # masked
    blocked = {e["logicalId"]: e["reason"] for e in events if e["eventType"] == "RESOURCE_SKIPPED"}
    assert set(blocked) == {"Role", "Queue"} and all("Fn" in reason for reason in blocked.values())

    # The cause is fixed; the SAME approved plan is run again (the record is a trim of it).
    del fake.fail["app-fn"]
    fake.calls.clear()
    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert fake.order == ["Fn", "Role", "Queue"]
    assert outcome.status == "succeeded" and stored(aws) is None
    assert outcome.details["already_gone"] == ["Logs", "Sub", "Topic"]


def test_it_fails_a_resource_whose_snapshot_cannot_be_taken_and_snapshots_where_it_can(aws, bucket):
    resources = {
        "Table": res("AWS::DynamoDB::Table", "t1", deletionPolicy="Snapshot"),
        "Db": res("AWS::RDS::DBInstance", "db1", deletionPolicy="Snapshot"),
    }
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    fake = FakeAws(aws, {"t1", "db1"})
    spec = Destroy(delete=fake.delete, supports_snapshot=lambda ref: ref.resource_type == "AWS::RDS::DBInstance")

    plan, outcome = run(spec, context(bucket))

    assert {lid: r["action"] for lid, r in plan.data["rows"].items()} == {"Table": "fail-snapshot", "Db": "snapshot"}
    assert fake.calls == [("Db", True)]
    assert outcome.status == "partial" and list(stored(aws)["resources"]) == ["Table"]
    events, _, _ = run_events(aws)
    assert [e["eventType"] for e in events if e.get("logicalId") == "Table"] == ["RESOURCE_STARTED", "RESOURCE_FAILED"]

    plan = spec.plan(context(bucket, skip_final_snapshot=True))
    assert plan.data["rows"]["Table"]["action"] == "delete"


def test_it_counts_guards_that_reached_no_verdict_as_unverified(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", "q")})))

    class Result:
        status = "deleted"
        unverified = [{"guard": "cc-delete-region-identity", "reason": "no s3:GetBucketLocation"}]

    _, outcome = run(Destroy(delete=lambda clients, ref, snapshot=False: Result()), context(bucket))

    assert outcome.status == "succeeded"
    assert outcome.details["counts"] == {"deleted": 1, "retained": 0, "skipped": 0, "failed": 0, "unverified": 1}
    events, _, _ = run_events(aws)
    guard = next(e for e in events if e["eventType"] == "RESOURCE_GUARD_INDETERMINATE")
    assert (guard["guard"], guard["operation"]) == ("cc-delete-region-identity", "DELETE")
    assert events[-1]["result"] == "SUCCEEDED"


def test_it_reports_failed_when_nothing_could_be_deleted(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", "q")})))
    fake = FakeAws(aws, {"q"})
    fake.fail["q"] = ProviderError("Q: DeleteQueue failed (AccessDenied)", aws_code="AccessDenied")
    _, outcome = run(Destroy(delete=fake.delete), context(bucket))
    assert outcome.status == "failed" and list(stored(aws)["resources"]) == ["Q"]


# --- nested stacks ----------------------------------------------------------------------------------


def child_record(**extra: Any) -> dict[str, Any]:
    return {
        "version": 11,
        "stackName": CHILD,
        "region": REGION,
        "resources": {
            "ChildFn": res("AWS::Lambda::Function", "child-fn", {"Role": {"Fn::GetAtt": ["ChildRole", "Arn"]}}),
            "ChildRole": res("AWS::IAM::Role", "child-role"),
        },
        "outputs": {},
        "parentStack": STACK,
        "parentLogicalId": "Nested",
        "parentRegion": REGION,
        "lastModified": 1,
        **extra,
    }


def parent_with_child() -> dict[str, Any]:
    """A queue and a nested stack whose parameters read it: the child must go first."""
    return record(
        resources={
            "Queue": res("AWS::SQS::Queue", "parent-q"),
            "Nested": res("AWS::CloudFormation::Stack", None, {"Parameters": {"Q": {"Ref": "Queue"}}}),
        }
    )


def test_it_destroys_a_nested_child_first_under_its_own_lock(aws, bucket, monkeypatch):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(parent_with_child()))
    aws.put(ACCOUNT, BUCKET, CHILD_STATE, cdkd_json(child_record()))
    fake = FakeAws(aws, {"parent-q", "child-fn", "child-role"})
    locks_held: list[str] = []
    fake.on_call = lambda ref: locks_held.extend(
        k for k in (LOCK, f"cdkd/{CHILD}/{REGION}/lock.json") if aws.etag(ACCOUNT, BUCKET, k)
    )
    spec = Destroy(delete=fake.delete)

    plan, outcome = run(spec, context(bucket))

    row = plan.data["rows"]["Nested"]
    assert row["action"] == "nested" and row["child"]["order"] == ["ChildFn", "ChildRole"]
    assert fake.order == ["ChildFn", "ChildRole", "Queue"]
    assert f"cdkd/{CHILD}/{REGION}/lock.json" in locks_held[:2]
    assert outcome.status == "succeeded"
    assert stored(aws) is None and stored(aws, CHILD_STATE) is None
    assert outcome.details["stacks"][CHILD]["status"] == "succeeded"
    events, _, _ = run_events(aws)
    child_events = [e for e in events if e["stackName"] == CHILD]
    assert [(e["eventType"], e["logicalId"]) for e in child_events] == [
        ("RESOURCE_STARTED", "ChildFn"), ("RESOURCE_SUCCEEDED", "ChildFn"),
        ("RESOURCE_STARTED", "ChildRole"), ("RESOURCE_SUCCEEDED", "ChildRole"),
    ]  # fmt: skip
    nested = [e["eventType"] for e in events if e.get("logicalId") == "Nested"]
    assert nested == ["RESOURCE_STARTED", "RESOURCE_SUCCEEDED"]
    assert keys(aws, f"cdkd/{CHILD}/") == []  # the child writes no event store of its own


def test_it_fails_the_nested_row_when_the_child_fails_and_keeps_both_records(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(parent_with_child()))
    aws.put(ACCOUNT, BUCKET, CHILD_STATE, cdkd_json(child_record()))
    fake = FakeAws(aws, {"parent-q", "child-fn", "child-role"})
    fake.fail["child-fn"] = ProviderError("ChildFn: DeleteFunction failed (Throttling)", aws_code="Throttling")

    _, outcome = run(Destroy(delete=fake.delete), context(bucket))

    # A throttle is transient: tried 4 times (cdkd's 3 retries); ChildRole waits for ChildFn,
    # Queue for the child.
    assert fake.order == ["ChildFn"] * 4
    assert outcome.status == "failed"
    assert list(stored(aws)["resources"]) == ["Queue", "Nested"]
    assert list(stored(aws, CHILD_STATE)["resources"]) == ["ChildFn", "ChildRole"]
    events, _, _ = run_events(aws)
    failed = next(e for e in events if e["eventType"] == "RESOURCE_FAILED" and e["stackName"] == STACK)
    assert failed["logicalId"] == "Nested" and "App~Nested: 1 resource(s) failed" in failed["error"]["message"]


def test_it_fails_the_nested_row_of_a_damaged_child_and_finishes_the_rest(aws, bucket):
    resources = parent_with_child()["resources"] | {"Other": res("AWS::SNS::Topic", "t")}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    aws.put(ACCOUNT, BUCKET, CHILD_STATE, cdkd_json(child_record(resources=[])))
    fake = FakeAws(aws, {"parent-q", "t"})

    plan, outcome = run(Destroy(delete=fake.delete), context(bucket))

    assert plan.data["rows"]["Nested"]["action"] == "fail" and "damaged" in plan.data["rows"]["Nested"]["reason"]
    assert fake.order == ["Other"]  # Queue is still referenced by the failed nested row
    assert outcome.status == "partial" and list(stored(aws)["resources"]) == ["Queue", "Nested"]


def test_it_counts_a_missing_child_record_as_deleted(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(parent_with_child()))
    fake = FakeAws(aws, {"parent-q"})
    plan, outcome = run(Destroy(delete=fake.delete), context(bucket))
    assert plan.data["rows"]["Nested"]["action"] == "gone"
    assert outcome.status == "succeeded" and fake.order == ["Queue"]


# --- cancel and crash -------------------------------------------------------------------------------


def test_it_cancels_between_deletes_persists_and_releases_the_lock(aws, bucket):
    original = record()
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(original))
    fake = FakeAws(aws, live_of(original["resources"]))
    ctx = context(bucket)
    fake.on_call = lambda ref: ctx.cancel_event.set() if ref.logical_id == "Sub" else None

    _, outcome = run(Destroy(delete=fake.delete), ctx)

    assert fake.order == ["Logs", "Fn", "Sub"]  # Sub was in flight: it finished; nothing new started
    assert outcome.status == "partial" and outcome.details["reason"] == "cancelled"
    left = stored(aws)
    assert list(left["resources"]) == ["Role", "Queue", "Topic", "Kept"]
    assert aws.etag(ACCOUNT, BUCKET, LOCK) is None
    events, _, _ = run_events(aws)
    assert events[-1]["result"] == "FAILED" and events[-1]["counts"]["deleted"] == 3


def test_it_resumes_after_a_crash_without_deleting_anything_twice_or_losing_a_row(aws, bucket):
    original = record()
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(original))
    aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json({"journalVersion": 1}))
    fake = FakeAws(aws, live_of(original["resources"]))
    fake.kill_at = 4  # the worker dies as it starts the 4th delete
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)

    with pytest.raises(Killed):
        spec.execute(ctx, Plan.from_json(plan.as_json()))

    # What the crash left: every completed delete recorded, nothing else lost.
    done_before = fake.order[:3]
    assert done_before == ["Logs", "Fn", "Sub"]
    left = stored(aws)
    assert list(left["resources"]) == ["Role", "Queue", "Topic", "Kept"]
    assert aws.get(ACCOUNT, BUCKET, STATE) == snapshot_of(original, list(left["resources"]), left["lastModified"])
    # A SIGKILL leaves the lock behind; the re-run of the same operation adopts it.
    now = int(time.time() * 1000)
    lock = {"owner": ctx.lock_owner, "timestamp": now, "expiresAt": now + 1_800_000, "operation": "destroy"}
    aws.put(ACCOUNT, BUCKET, LOCK, json.dumps(lock, separators=(",", ":")))
    fake.kill_at = None
    fake.calls.clear()

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert fake.order == ["Role", "Queue", "Topic"]
    assert not set(fake.order) & set(done_before)  # nothing deleted twice
    assert outcome.status == "succeeded" and outcome.details["already_gone"] == ["Logs", "Fn", "Sub"]
    assert fake.live == {"app-kept-bucket"}
    assert stored(aws) is None and stored(aws, JOURNAL) is None and aws.etag(ACCOUNT, BUCKET, LOCK) is None


def test_it_finishes_the_cleanup_when_a_crash_came_after_the_record_was_deleted(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={})))
    spec = Destroy(delete=FakeAws().delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    aws.delete(ACCOUNT, BUCKET, STATE)  # as if the run died right after deleting the record
    aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json({"journalVersion": 1}))

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert outcome.status == "succeeded" and "already gone" in outcome.warnings[0]
    assert stored(aws, JOURNAL) is None


def test_it_stops_before_the_record_when_the_ledger_cannot_be_deleted(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", "q")})))
    fake = FakeAws(aws, {"q"})
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    original_delete = bucket.delete

    def delete(key: str, **kwargs: Any) -> None:
        if key == TOKENS:
            raise AccessDenied(f"s3:DeleteObject on {key} denied")
        original_delete(key, **kwargs)

    bucket.delete = delete  # type: ignore[method-assign]
    outcome = spec.execute(ctx, plan)

    assert outcome.status == "partial" and any(TOKENS in w for w in outcome.warnings)
    assert stored(aws)["resources"] == {}  # the record stays, listing what still exists: nothing


# --- concurrency ------------------------------------------------------------------------------------


def test_it_runs_independent_deletes_concurrently_within_the_bound(aws, bucket):
    queues = {f"Q{i}": res("AWS::SQS::Queue", f"q{i}") for i in range(12)}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=queues)))
    active, peak, lock = [0], [0], threading.Lock()

    def slow_delete(clients: Any, ref: Any, snapshot: bool = False) -> str:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return "deleted"

    _, outcome = run(Destroy(delete=slow_delete), context(bucket, concurrency=4))

    assert outcome.status == "succeeded" and outcome.details["counts"]["deleted"] == 12
    assert peak[0] == 4


# --- the real providers, against moto -----------------------------------------------------------------

TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }  # fmt: skip
)


def test_it_destroys_real_resources_through_the_providers(aws, bucket):
    session = aws.account_session(ACCOUNT)

    def client(service: str) -> Any:
        return session.client(service, region_name=REGION, endpoint_url=aws.moto.url)

    iam, lam, sqs, sns = client("iam"), client("lambda"), client("sqs"), client("sns")
    role_arn = iam.create_role(RoleName="real-role", AssumeRolePolicyDocument=TRUST)["Role"]["Arn"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("index.py", "def handler(e, c):\n    return 1\n")
    lam.create_function(
        FunctionName="real-fn", Runtime="python3.12", Role=role_arn, Handler="index.handler",
        Code={"ZipFile": buf.getvalue()},
    )  # fmt: skip
    queue_url = sqs.create_queue(QueueName="real-q")["QueueUrl"]
    topic_arn = sns.create_topic(Name="real-t")["TopicArn"]
    aws.make_bucket(ACCOUNT, "real-data-bucket", versioning=False)
    aws.s3(ACCOUNT).put_object(Bucket="real-data-bucket", Key="data.txt", Body=b"x")
    aws.make_bucket(ACCOUNT, "real-kept-bucket", versioning=False)
    resources = {
        "Role": res("AWS::IAM::Role", "real-role"),
        "Fn": res("AWS::Lambda::Function", "real-fn", {"Role": {"Fn::GetAtt": ["Role", "Arn"]}}),
        "Queue": res("AWS::SQS::Queue", queue_url),
        "Topic": res("AWS::SNS::Topic", topic_arn, deps=["Queue"]),
        "Data": res("AWS::S3::Bucket", "real-data-bucket"),
        "Kept": res("AWS::S3::Bucket", "real-kept-bucket", deletionPolicy="Retain"),
    }
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    from engine.providers import Clients, delete_resource

    calls: list[str] = []

    def spy(clients: Any, ref: Any, snapshot: bool = False) -> str:
        calls.append(ref.logical_id)
        return delete_resource(clients, ref, snapshot=snapshot)

    spec = Destroy(delete=spy, clients=lambda ctx: Clients(ctx.bucket.session))
    ctx = context(bucket, concurrency=8)

    _, outcome = run(spec, ctx)

    # A non-empty bucket fails as CloudFormation fails it; the rest is gone.
    assert outcome.status == "partial" and outcome.details["counts"]["failed"] == 1
    assert calls.index("Fn") < calls.index("Role") and calls.index("Topic") < calls.index("Queue")
    assert list(stored(aws)["resources"]) == ["Data", "Kept"]
    with pytest.raises(ClientError):
        iam.get_role(RoleName="real-role")
    with pytest.raises(ClientError):
        lam.get_function(FunctionName="real-fn")
    assert aws.s3(ACCOUNT).head_bucket(Bucket="real-kept-bucket")

    aws.s3(ACCOUNT).delete_object(Bucket="real-data-bucket", Key="data.txt")
    _, outcome = run(spec, ctx)  # a new plan from the trimmed record

    assert outcome.status == "succeeded" and stored(aws) is None
    with pytest.raises(ClientError):
        aws.s3(ACCOUNT).head_bucket(Bucket="real-data-bucket")
    assert aws.s3(ACCOUNT).head_bucket(Bucket="real-kept-bucket")  # Retain: still there


def test_it_is_registered_with_the_default_providers(aws, bucket):
    spec = spec_for("destroy")
    assert (spec.kind, spec.label, spec.cancellable) == ("destroy", "Destroy", True)
    sqs = aws.account_session(ACCOUNT).client("sqs", region_name=REGION, endpoint_url=aws.moto.url)
    url = sqs.create_queue(QueueName="registered-q")["QueueUrl"]
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", url)})))

    _, outcome = run(spec, context(bucket))

    assert outcome.status == "succeeded"
    assert "registered-q" not in json.dumps(sqs.list_queues())


# --- conditional writes under races ---------------------------------------------------------------


def test_it_adopts_its_own_record_write_whose_answer_was_lost(aws, bucket):
    from tests.support.s3proxy import DROP

    queues = {f"Q{i}": res("AWS::SQS::Queue", f"q{i}") for i in range(3)}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=queues)))
    fake = FakeAws(aws, {"q0", "q1", "q2"})
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    dropped = [0]

    def drop_first_record_write(api: str, method: str, path: str, headers: Any) -> str | None:
        if api == "PutObject" and path.split("?")[0].endswith("state.json") and not dropped[0]:
            dropped[0] += 1
            return DROP
        return None

    aws.proxy.add_hook(drop_first_record_write)
    outcome = spec.execute(ctx, plan)

    assert dropped[0] == 1
    assert fake.order == ["Q0", "Q1", "Q2"]
    assert outcome.status == "succeeded" and stored(aws) is None
    assert not any("changed by another writer" in w for w in outcome.warnings)


def test_it_retries_the_exports_index_when_another_writer_got_there_first(aws, bucket, monkeypatch):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={})))
    index = {
        "indexVersion": 1,
        "region": REGION,
        "exports": {"QueueUrl": {"value": "q", "producerStack": STACK, "producerRegion": REGION}},
        "lastModified": 1,
    }
    aws.put(ACCOUNT, BUCKET, EXPORTS, cdkd_json(index))
    original_get = bucket.get
    raced = [False]

    def racing_get(key: str, **kwargs: Any) -> Any:
        result = original_get(key, **kwargs)
        if key == EXPORTS and not raced[0]:
            raced[0] = True  # a deploy of another stack writes the index between our read and write
            index["exports"]["Racer"] = {"value": "r", "producerStack": "Racer", "producerRegion": REGION}
            aws.put(ACCOUNT, BUCKET, EXPORTS, cdkd_json(index))
        return result

    monkeypatch.setattr(bucket, "get", racing_get)
    _, outcome = run(Destroy(delete=FakeAws().delete), context(bucket))

    assert outcome.status == "succeeded" and not outcome.warnings
    assert list(json.loads(aws.get(ACCOUNT, BUCKET, EXPORTS))["exports"]) == ["Racer"]
