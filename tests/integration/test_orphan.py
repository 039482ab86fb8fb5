"""engine.orphan against moto through the proxy: whole records and single resources."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from engine.backend import StateBucket
from engine.errors import AccessDenied
from engine.keys import KeyLayout
from engine.operations import Context, OperationRefused, Plan, StalePlan, spec_for

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
PREFIX = "cdkd/App"
STATE = f"{PREFIX}/{REGION}/state.json"
LEGACY = f"{PREFIX}/state.json"
TOKENS = f"{PREFIX}/{REGION}/create-tokens.json"
JOURNAL = f"{PREFIX}/{REGION}/rollback-journal.json"
LOCK = f"{PREFIX}/{REGION}/lock.json"
EVENTS = f"{PREFIX}/{REGION}/deployments/index.json"
NOW_MS = 1_800_000_000_000


def cdkd_json(value: Any) -> bytes:
    """JSON.stringify(value, null, 2) for ASCII content."""
    return json.dumps(value, indent=2).encode()


QUEUE = {
    "physicalId": "https://sqs.us-east-1.amazonaws.com/111111111111/jobs",
    "resourceType": "AWS::SQS::Queue",
    "properties": {"VisibilityTimeout": 30},
    "attributes": {"Arn": "arn:aws:sqs:us-east-1:111111111111:jobs"},
    "dependencies": [],
}


def app_record(**extra: Any) -> dict[str, Any]:
    return {
        "version": 9,
        "stackName": "App",
        "region": REGION,
        "resources": {
            "Queue": QUEUE,
            "Fn": {
                "physicalId": "app-fn",
                "resourceType": "AWS::Lambda::Function",
                "properties": {"Environment": {"Variables": {"QUEUE": {"Ref": "Queue"}}}},
                "attributes": {"Arn": "arn:aws:lambda:us-east-1:111111111111:function:app-fn"},
                "dependencies": ["Queue"],
                "futureRowField": {"kept": True},
            },
        },
        "outputs": {"QueueArn": {"Fn::GetAtt": ["Queue", "Arn"]}},
        "skippedOutputs": {"Broken": "sha256:abc"},
        "lastModified": 1_700_000_000_000,
        "futureTopField": ["kept"],
        **extra,
    }


LEDGER = {
    "ledgerVersion": 1,
    "nonce": "0" * 32,
    "sent": {
        "Queue": {"base": "b1", "token": "t1", "firstSentAt": 1},
        "Fs": {"base": "b2", "token": "t2", "firstSentAt": 2},
    },
    "stateRecorded": True,
}


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


def context(bucket: StateBucket, region: str | None = REGION, **params: Any) -> Context:
    return Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack="App",
        region=region,
        params=params,
        operation_id="op-1",
        person="alice",
    )


def keys(aws) -> list[str]:
    listed = aws.s3(ACCOUNT).list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return sorted(item["Key"] for item in listed)


def versions(aws, key: str) -> list[dict[str, Any]]:
    answer = aws.s3(ACCOUNT).list_object_versions(Bucket=BUCKET, Prefix=key)
    return [v for v in answer.get("Versions", []) + answer.get("DeleteMarkers", []) if v["Key"] == key]


def record_deletes(bucket: StateBucket, monkeypatch) -> list[str]:
    deleted: list[str] = []
    original = bucket.delete

    def spy(key: str, **kwargs: Any) -> None:
        deleted.append(key)
        original(key, **kwargs)

    monkeypatch.setattr(bucket, "delete", spy)
    return deleted


def foreign_lock_body(expires_in_ms: int) -> bytes:
    now = int(time.time() * 1000)
    body = {"owner": "bob@laptop:4242", "timestamp": now, "expiresAt": now + expires_in_ms, "operation": "deploy"}
    return json.dumps(body, separators=(",", ":")).encode()


# --- whole record -------------------------------------------------------------------------------


def test_it_orphans_a_whole_record_in_cdkd_order_and_keeps_event_history(aws, bucket, monkeypatch):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    aws.put(ACCOUNT, BUCKET, TOKENS, cdkd_json(LEDGER))
    for n in range(3):
        aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json({"journalVersion": 1, "n": n, "secret": "hunter2"}))
    aws.put(ACCOUNT, BUCKET, EVENTS, cdkd_json({"runs": []}))
    spec = spec_for("orphan")
    ctx = context(bucket)

    plan = spec.plan(ctx)

    assert plan.etag == bucket.get(STATE).etag
    assert plan.data["keys"] == [TOKENS, STATE, JOURNAL]
    assert "AWS resources are NOT deleted" in plan.summary and "Event history stays" in plan.summary
    assert any("deployments/" in line and "stays" in line for line in plan.changes)
    assert plan.data["foreign_lock"] is None
    deleted = record_deletes(bucket, monkeypatch)

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert outcome.status == "succeeded"
    assert (outcome.etag_before, outcome.etag_after) == (plan.etag, None)
    assert deleted[:3] == [TOKENS, STATE, JOURNAL]  # then the lock's release
    assert keys(aws) == [EVENTS]
    # The journal's bodies are gone for good; only the delete marker is left.
    assert [v.get("IsLatest") for v in versions(aws, JOURNAL)] == [True]
    assert "VersionId" in versions(aws, JOURNAL)[0] and "Size" not in versions(aws, JOURNAL)[0]
    # state.json's earlier versions are the recovery capability: they stay.
    assert len(versions(aws, STATE)) == 2


def test_it_orphans_a_damaged_record(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, b'{"version": 11, "resources": "torn", "outputs": [1]}')
    spec = spec_for("orphan")
    ctx = context(bucket)

    spec.execute(ctx, spec.plan(ctx))

    assert keys(aws) == []


def test_it_refuses_a_record_newer_than_it_knows(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json({**app_record(), "version": 12}))

    with pytest.raises(OperationRefused, match="schema version 12"):
        spec_for("orphan").plan(context(bucket))


def test_it_stops_before_the_record_when_the_ledger_cannot_be_deleted(aws, bucket):
    stored = cdkd_json(app_record())
    aws.put(ACCOUNT, BUCKET, STATE, stored)
    spec = spec_for("orphan")
    ctx = context(bucket)
    plan = spec.plan(ctx)
    aws.proxy.deny_operation("DeleteObject")

    with pytest.raises(AccessDenied):
        spec.execute(ctx, plan)

    aws.proxy.clear_rules()
    assert aws.get(ACCOUNT, BUCKET, STATE) == stored
    assert [v["IsLatest"] for v in versions(aws, STATE)] == [True]


def test_it_refuses_a_stale_whole_record_plan_and_deletes_nothing(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    aws.put(ACCOUNT, BUCKET, TOKENS, cdkd_json(LEDGER))
    spec = spec_for("orphan")
    ctx = context(bucket)
    plan = spec.plan(ctx)
    newer = cdkd_json(app_record(lastModified=1_700_000_000_001))
    aws.put(ACCOUNT, BUCKET, STATE, newer)

    with pytest.raises(StalePlan, match="plan is stale"):
        spec.execute(ctx, plan)

    assert aws.get(ACCOUNT, BUCKET, STATE) == newer
    assert aws.get(ACCOUNT, BUCKET, TOKENS) == cdkd_json(LEDGER)


def test_it_refuses_a_live_foreign_lock_unless_forced_and_then_removes_it(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    lock = aws.put(ACCOUNT, BUCKET, LOCK, foreign_lock_body(10 * 60_000))
    spec = spec_for("orphan")

    plan = spec.plan(context(bucket))
    assert plan.data["foreign_lock"]["owner"] == "bob@laptop:4242"
    assert plan.data["foreign_lock"]["etag"] == lock["ETag"]
    assert any("refuses unless forced" in w for w in plan.warnings)
    with pytest.raises(OperationRefused, match="bob@laptop:4242"):
        spec.execute(context(bucket), plan)
    assert aws.get(ACCOUNT, BUCKET, STATE)  # untouched

    forced = context(bucket, force=True)
    forced_plan = spec.plan(forced)
    outcome = spec.execute(forced, forced_plan)

    assert outcome.status == "succeeded"
    assert keys(aws) == []


def test_it_does_not_force_past_a_lock_that_changed_after_the_plan(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    aws.put(ACCOUNT, BUCKET, LOCK, foreign_lock_body(10 * 60_000))
    spec = spec_for("orphan")
    ctx = context(bucket, force=True)
    plan = spec.plan(ctx)
    renewed = foreign_lock_body(20 * 60_000)
    aws.put(ACCOUNT, BUCKET, LOCK, renewed)

    with pytest.raises(StalePlan):
        spec.execute(ctx, plan)

    assert aws.get(ACCOUNT, BUCKET, LOCK) == renewed
    assert STATE in keys(aws)


def test_it_deletes_the_legacy_key_when_its_region_matches(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    aws.put(ACCOUNT, BUCKET, LEGACY, cdkd_json({"stackName": "App", "region": REGION, "resources": {}}))
    spec = spec_for("orphan")
    ctx = context(bucket)

    plan = spec.plan(ctx)
    spec.execute(ctx, plan)

    assert plan.data["keys"] == [TOKENS, STATE, LEGACY, JOURNAL]
    assert keys(aws) == []


def test_it_leaves_a_region_less_legacy_record_to_its_own_orphan(aws, bucket):
    legacy = cdkd_json({"stackName": "App", "resources": {}})
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    aws.put(ACCOUNT, BUCKET, LEGACY, legacy)
    spec = spec_for("orphan")

    plan = spec.plan(context(bucket))
    spec.execute(context(bucket), plan)

    assert any("legacy record naming no region" in w for w in plan.warnings)
    assert keys(aws) == [LEGACY]

    legacy_ctx = context(bucket, region=None)
    legacy_plan = spec.plan(legacy_ctx)
    assert legacy_plan.data["keys"] == [LEGACY]
    spec.execute(legacy_ctx, legacy_plan)
    assert keys(aws) == []


def test_it_refuses_when_there_is_no_record(aws, bucket):
    with pytest.raises(OperationRefused, match="no state record"):
        spec_for("orphan").plan(context(bucket))


# --- single resources ---------------------------------------------------------------------------


def test_it_orphans_a_resource_and_rewrites_the_stored_bytes(aws, bucket, monkeypatch):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    aws.put(ACCOUNT, BUCKET, TOKENS, cdkd_json(LEDGER))
    monkeypatch.setattr("engine.orphan._now_ms", lambda: NOW_MS)
    spec = spec_for("orphan-resources")
    ctx = context(bucket, resources=["Queue"])

    plan = spec.plan(ctx)

    assert plan.etag == bucket.get(STATE).etag
    assert plan.changes[:3] == [
        "remove Queue (AWS::SQS::Queue, physical id 'https://sqs.us-east-1.amazonaws.com/111111111111/jobs') "
        "from the record; its AWS resource stays",
        'Fn.Properties.Environment.Variables.QUEUE: {"Ref": "Queue"} -> '
        '"https://sqs.us-east-1.amazonaws.com/111111111111/jobs"',
        'Fn.Dependencies: ["Queue"] -> []',
    ]
    assert 'Outputs.QueueArn: {"Fn::GetAtt": ["Queue", "Arn"]} -> "arn:aws:sqs:us-east-1:111111111111:jobs"' in (
        plan.changes
    )
    assert f"rotate the create-token nonce in {TOKENS} and drop the sent entries of Queue" in plan.changes
    assert "writes schema version 9 (the record's own)" in plan.changes

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    expected = app_record()
    del expected["resources"]["Queue"]
    del expected["skippedOutputs"]
    assert expected["version"] == 9  # a repair keeps the record's schema version
    expected["resources"]["Fn"]["properties"]["Environment"]["Variables"]["QUEUE"] = QUEUE["physicalId"]
    expected["resources"]["Fn"]["dependencies"] = []
    expected["outputs"]["QueueArn"] = QUEUE["attributes"]["Arn"]
    expected["lastModified"] = NOW_MS
    stored = aws.get(ACCOUNT, BUCKET, STATE)
    assert stored == cdkd_json(expected)
    assert outcome.etag_before == plan.etag and outcome.etag_after == bucket.get(STATE).etag
    ledger = json.loads(aws.get(ACCOUNT, BUCKET, TOKENS))
    assert ledger["nonce"] != LEDGER["nonce"] and len(ledger["nonce"]) == 32
    assert ledger["sent"] == {"Fs": LEDGER["sent"]["Fs"]}
    assert ledger["stateRecorded"] is True
    assert LOCK not in keys(aws)  # the lock was taken and released


def test_it_refuses_a_stale_resource_plan(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    spec = spec_for("orphan-resources")
    ctx = context(bucket, resources=["Queue"])
    plan = spec.plan(ctx)
    changed = cdkd_json(app_record(lastModified=1))
    aws.put(ACCOUNT, BUCKET, STATE, changed)

    with pytest.raises(StalePlan):
        spec.execute(ctx, plan)

    assert aws.get(ACCOUNT, BUCKET, STATE) == changed


def test_it_refuses_damage_in_what_it_would_keep_but_not_in_what_it_removes(aws, bucket):
    damaged = app_record()
    damaged["resources"]["Fn"]["properties"] = "torn"
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(damaged))
    spec = spec_for("orphan-resources")

    with pytest.raises(OperationRefused, match=r"resources\.Fn\.properties: resource-properties-malformed"):
        spec.plan(context(bucket, resources=["Queue"]))

    ctx = context(bucket, resources=["Fn"])
    spec.execute(ctx, spec.plan(ctx))
    assert list(json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]) == ["Queue"]


def test_it_refuses_unknown_ids_and_newer_records(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    spec = spec_for("orphan-resources")
    with pytest.raises(OperationRefused, match="Nope, Gone"):
        spec.plan(context(bucket, resources=["Queue", "Nope", "Gone"]))

    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json({**app_record(), "version": 12}))
    with pytest.raises(OperationRefused, match="schema version 12"):
        spec.plan(context(bucket, resources=["Queue"]))


def test_it_refuses_unresolvable_references_unless_forced_and_keeps_them(aws, bucket):
    record = app_record()
    record["resources"]["Fn"]["properties"]["Alarm"] = {"Fn::GetAtt": ["Queue", "QueueName"]}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record))
    spec = spec_for("orphan-resources")

    with pytest.raises(OperationRefused, match="Fn.Properties.Alarm: Fn::GetAtt Queue.QueueName"):
        spec.plan(context(bucket, resources=["Queue"]))

    ctx = context(bucket, resources=["Queue"], force=True)
    plan = spec.plan(ctx)
    assert any("kept as written" in w for w in plan.warnings)
    spec.execute(ctx, plan)
    fn = json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]["Fn"]
    assert fn["properties"]["Alarm"] == {"Fn::GetAtt": ["Queue", "QueueName"]}


def test_it_stops_before_saving_when_the_ledger_cannot_be_rotated(aws, bucket, monkeypatch):
    stored = cdkd_json(app_record())
    aws.put(ACCOUNT, BUCKET, STATE, stored)
    aws.put(ACCOUNT, BUCKET, TOKENS, cdkd_json(LEDGER))
    spec = spec_for("orphan-resources")
    ctx = context(bucket, resources=["Queue"])
    plan = spec.plan(ctx)
    original = bucket.put

    def deny_ledger(key: str, body: bytes, **kwargs: Any):
        if key == TOKENS:
            raise AccessDenied(f"s3:PutObject on {key} denied")
        return original(key, body, **kwargs)

    monkeypatch.setattr(bucket, "put", deny_ledger)

    with pytest.raises(AccessDenied):
        spec.execute(ctx, plan)

    assert aws.get(ACCOUNT, BUCKET, STATE) == stored
    assert aws.get(ACCOUNT, BUCKET, TOKENS) == cdkd_json(LEDGER)


def test_it_refuses_to_rotate_an_unreadable_or_newer_ledger(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    spec = spec_for("orphan-resources")
    aws.put(ACCOUNT, BUCKET, TOKENS, b"{torn")
    with pytest.raises(OperationRefused, match="unreadable"):
        spec.plan(context(bucket, resources=["Queue"]))
    aws.put(ACCOUNT, BUCKET, TOKENS, cdkd_json({**LEDGER, "ledgerVersion": 2}))
    with pytest.raises(OperationRefused, match="ledgerVersion 2"):
        spec.plan(context(bucket, resources=["Queue"]))


def test_it_saves_without_a_ledger_when_there_is_none(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(app_record()))
    spec = spec_for("orphan-resources")
    ctx = context(bucket, resources=["Queue"])

    spec.execute(ctx, spec.plan(ctx))

    assert TOKENS not in keys(aws)
    assert list(json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]) == ["Fn"]
