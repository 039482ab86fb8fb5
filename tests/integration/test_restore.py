"""engine.restore against moto through the proxy."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.backend import StateBucket
from engine.keys import KeyLayout
from engine.operations import Context, OperationRefused, Plan, StalePlan, spec_for
from engine.restore import diff_records

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
STATE = f"cdkd/App/{REGION}/state.json"
LOCK = f"cdkd/App/{REGION}/lock.json"


def cdkd_json(value: Any) -> bytes:
    return json.dumps(value, indent=2).encode()


def row(physical_id: str, **properties: Any) -> dict[str, Any]:
    return {"physicalId": physical_id, "resourceType": "AWS::S3::Bucket", "properties": properties}


OLD = {
    "version": 9,
    "stackName": "App",
    "region": REGION,
    "resources": {"Logs": row("app-logs"), "Data": row("app-data", Versioned=True)},
    "outputs": {"LogsName": "app-logs"},
    "skippedOutputs": {"Broken": "sha256:abc"},
    "futureField": {"kept": 1},
    "lastModified": 1_700_000_000_000,
}
NEW = {
    "version": 11,
    "stackName": "App",
    "region": REGION,
    "resources": {"Data": row("app-data-2", Versioned=True), "Cache": row("app-cache")},
    "outputs": {"LogsName": "gone", "CacheName": "app-cache"},
    "lastModified": 1_700_000_100_000,
}


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


def context(bucket: StateBucket, version_id: str | None, region: str | None = REGION) -> Context:
    return Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack="App",
        region=region,
        params={"version_id": version_id},
        operation_id="op-7",
        person="alice",
    )


def history(aws) -> list[dict[str, Any]]:
    answer = aws.s3(ACCOUNT).list_object_versions(Bucket=BUCKET, Prefix=STATE)
    return answer.get("Versions", []) + answer.get("DeleteMarkers", [])


def test_it_writes_the_chosen_version_as_the_new_current_one(aws, bucket):
    old = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(OLD))
    new = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(NEW))
    spec = spec_for("restore")
    ctx = context(bucket, old["VersionId"])

    plan = spec.plan(ctx)

    assert plan.etag == new["ETag"]
    assert plan.changes == [
        "resource Logs comes back (AWS::S3::Bucket)",
        "resource Cache leaves the record (its AWS resource is untouched)",
        "resource Data changes: physicalId (physical id 'app-data-2' -> 'app-data')",
        "output LogsName changes",
        "output CacheName is removed",
        "version: 11 -> 9",
        "lastModified: 1700000100000 -> 1700000000000",
        "futureField comes back",
        "writes schema version 9 (the chosen version's own)",
        "skippedOutputs is dropped (every save outside a deploy does)",
    ]

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    expected = {k: v for k, v in OLD.items() if k != "skippedOutputs"}
    assert expected["version"] == 9  # the chosen version's schema version, as it was written
    assert aws.get(ACCOUNT, BUCKET, STATE) == cdkd_json(expected)
    assert outcome.etag_before == new["ETag"] and outcome.etag_after == bucket.get(STATE).etag
    assert outcome.details["restored_from"] == old["VersionId"]
    # Both earlier versions stay readable in the key's history.
    assert aws.get(ACCOUNT, BUCKET, STATE, version_id=new["VersionId"]) == cdkd_json(NEW)
    assert aws.get(ACCOUNT, BUCKET, STATE, version_id=old["VersionId"]) == cdkd_json(OLD)
    assert len(history(aws)) == 3
    assert LOCK not in [v["Key"] for v in history(aws)]


def test_it_stamps_the_keys_region_and_name(aws, bucket):
    old = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json({**NEW, "region": "eu-west-1", "stackName": "Other"}))
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(NEW))
    spec = spec_for("restore")
    ctx = context(bucket, old["VersionId"])

    plan = spec.plan(ctx)
    spec.execute(ctx, plan)

    assert "stackName and region are stamped from the key (App, us-east-1)" in plan.changes
    assert aws.get(ACCOUNT, BUCKET, STATE) == cdkd_json(NEW)


def test_it_refuses_a_stale_plan(aws, bucket):
    old = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(OLD))
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(NEW))
    spec = spec_for("restore")
    ctx = context(bucket, old["VersionId"])
    plan = spec.plan(ctx)
    changed = cdkd_json({**NEW, "lastModified": 1})
    aws.put(ACCOUNT, BUCKET, STATE, changed)

    with pytest.raises(StalePlan, match="plan is stale"):
        spec.execute(ctx, plan)

    assert aws.get(ACCOUNT, BUCKET, STATE) == changed


def test_it_brings_back_a_deleted_record_only_if_it_is_still_absent(aws, bucket):
    old = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(NEW))
    aws.delete(ACCOUNT, BUCKET, STATE)
    spec = spec_for("restore")
    ctx = context(bucket, old["VersionId"])

    plan = spec.plan(ctx)
    assert plan.etag is None
    assert plan.changes[0] == "there is no current record: the chosen version becomes the record"
    spec.execute(ctx, plan)

    assert aws.get(ACCOUNT, BUCKET, STATE) == cdkd_json(NEW)
    with pytest.raises(StalePlan):
        spec.execute(ctx, plan)  # the record exists again: the plan no longer holds


def test_it_refuses_versions_it_must_not_write(aws, bucket):
    damaged = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json({**OLD, "resources": "torn"}))
    newer = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json({**OLD, "version": 12}))
    not_json = aws.put(ACCOUNT, BUCKET, STATE, b"{torn")
    marker = aws.delete(ACCOUNT, BUCKET, STATE)
    current = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(NEW))
    spec = spec_for("restore")

    for version_id, message in [
        (damaged["VersionId"], "resources-malformed"),
        (newer["VersionId"], "schema version 12"),
        (not_json["VersionId"], "not-json"),
        (marker["VersionId"], "delete marker"),
        (current["VersionId"], "already the current version"),
        ("no-such-version", "has no version"),
    ]:
        with pytest.raises(OperationRefused, match=message):
            spec.plan(context(bucket, version_id))


def test_it_refuses_to_overwrite_a_newer_record_and_to_restore_a_legacy_one(aws, bucket):
    old = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(OLD))
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json({**NEW, "version": 12}))
    spec = spec_for("restore")

    with pytest.raises(OperationRefused, match="never overwritten"):
        spec.plan(context(bucket, old["VersionId"]))
    with pytest.raises(OperationRefused, match="needs a region"):
        spec.plan(context(bucket, old["VersionId"], region=None))


def test_it_restores_over_a_damaged_current_record(aws, bucket):
    old = aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(NEW))
    aws.put(ACCOUNT, BUCKET, STATE, b'{"resources": [')
    spec = spec_for("restore")
    ctx = context(bucket, old["VersionId"])

    spec.execute(ctx, spec.plan(ctx))

    assert aws.get(ACCOUNT, BUCKET, STATE) == cdkd_json(NEW)


def test_it_diffs_two_records_in_plain_lines():
    assert diff_records({"resources": {}, "a": 1}, {"resources": {}, "a": 1}) == []
    assert (
        diff_records("(not JSON)", {"resources": {}})
        == [
            "the current record is not a JSON object; it is replaced whole",
            "resources comes back",
        ][:1]
    )
