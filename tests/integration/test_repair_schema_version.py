"""A repair keeps the record's schema version (so the cdkd that wrote it still reads it),
unless the record holds a field only a newer version knows; each plan says which version
it writes. The v8 record here is the one cdkd 0.284.40 wrote itself (it reads nothing newer).

Against moto through the proxy: orphan-resources, restore, scrub and a partial destroy's
trim, each checked on the stored bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.backend import StateBucket
from engine.destroy import Destroy, ProviderError
from engine.keys import KeyLayout
from engine.operations import Context, Plan, spec_for
from engine.schema import js_stringify

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
STACK = "DeployStack"
STATE = f"cdkd/{STACK}/{REGION}/state.json"
SAMPLE = Path("/work/shared/samples/cdkd-0.284.40/deploy-written-DeployStack-state.json")


def v8() -> dict[str, Any]:
    return json.loads(SAMPLE.read_bytes())


def put(aws, body: dict[str, Any]) -> dict[str, Any]:
    return aws.put(ACCOUNT, BUCKET, STATE, js_stringify(body, indent=2).encode())


def stored(aws) -> dict[str, Any]:
    return json.loads(aws.get(ACCOUNT, BUCKET, STATE))


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


def context(bucket: StateBucket, **params: Any) -> Context:
    return Context(
        bucket=bucket, layout=KeyLayout(), stack=STACK, region=REGION, params=params, operation_id="op-1", person="a"
    )


def test_orphaning_a_resource_of_a_v8_record_writes_v8(aws, bucket):
    assert SAMPLE.read_bytes().startswith(b'{\n  "version": 8,')
    put(aws, v8())
    spec = spec_for("orphan-resources")
    ctx = context(bucket, resources=["TopicBFC7AF6E"])

    plan = spec.plan(ctx)
    spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert "writes schema version 8 (the record's own)" in plan.changes
    assert plan.data["schema_version"] == 8
    after = stored(aws)
    assert after["version"] == 8 and "TopicBFC7AF6E" not in after["resources"]
    assert aws.get(ACCOUNT, BUCKET, STATE).startswith(b'{\n  "version": 8,')


def test_a_repair_of_a_record_holding_a_v10_field_writes_v10(aws, bucket):
    body = v8()
    body["resources"]["Queue4A7E3555"]["observedBaselineRefused"] = True  # known from version 10 on
    put(aws, body)
    spec = spec_for("orphan-resources")
    ctx = context(bucket, resources=["TopicBFC7AF6E"])

    plan = spec.plan(ctx)
    spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert "writes schema version 10 (was 8; the lowest version that knows every field it holds)" in plan.changes
    assert stored(aws)["version"] == 10


def test_a_restore_writes_the_chosen_versions_schema_version(aws, bucket):
    old = put(aws, v8())
    newer = {**v8(), "version": 11, "lastModified": 1_800_000_000_000}
    put(aws, newer)
    spec = spec_for("restore")
    ctx = context(bucket, version_id=old["VersionId"])

    plan = spec.plan(ctx)
    spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert "writes schema version 8 (the chosen version's own)" in plan.changes
    assert aws.get(ACCOUNT, BUCKET, STATE) == SAMPLE.read_bytes()  # the bytes cdkd 0.284 wrote, exactly


def test_a_scrub_of_a_v8_record_writes_v8(aws, bucket):
    body = v8()
    body["outputs"]["Leaked"] = "sk_live_" + "a" * 24  # a credential shape: found without reading any secret
    put(aws, body)
    spec = spec_for("scrub")
    ctx = context(bucket)

    plan = spec.plan(ctx)
    assert f"{STATE}: writes schema version 8 (the record's own)" in plan.changes
    spec.execute(ctx, Plan.from_json(plan.as_json()))

    after = stored(aws)
    assert after["version"] == 8 and after["outputs"]["Leaked"] == "***"


def test_a_partial_destroy_trims_a_v8_record_at_v8(aws, bucket):
    put(aws, v8())
    gone: list[str] = []

    def delete(clients: Any, ref: Any, snapshot: bool = False) -> str:
        if ref.logical_id == "Queue4A7E3555":
            raise ProviderError("The queue is busy", aws_code="Throttling")
        gone.append(ref.logical_id)
        return "deleted"

    spec = Destroy(delete=delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    assert any("writes schema version 8 (the record's own)" in c for c in plan.changes if isinstance(c, str))

    outcome = spec.execute(ctx, plan)

    assert outcome.status == "partial" and gone == ["TopicBFC7AF6E"]
    after = stored(aws)
    # The queue failed and the bucket is retained: both stay, in a record cdkd 0.284 still reads.
    assert after["version"] == 8 and sorted(after["resources"]) == ["Bucket83908E77", "Queue4A7E3555"]
