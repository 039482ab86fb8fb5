"""The demo world (demo) seeded into a moto server: the stored bytes are cdkd's.

Checks representative objects byte for byte: locks in cdkd's exact JSON, the legacy v1
keys, nested children and their parent fields, the four S3 versions of the history record,
the damaged records, the event store, and that seeding stays fast.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from demo import (
    DEMO_ACCOUNTS,
    PLATFORM_EU,
    PRODUCTION,
    STAGING,
    DemoWorld,
    build_demo_world,
    cdkd_json,
    plan_demo_world,
)
from engine.backend import StateBucket

pytestmark = pytest.mark.integration

SPECS = {s.account_id: s for s in DEMO_ACCOUNTS}


class Seeded:
    """The world plus byte-level access to what it stored."""

    def __init__(self, aws: Any, world: DemoWorld, now_ms: int) -> None:
        self.aws = aws
        self.world = world
        self.now = now_ms

    def s3(self, account_id: str) -> Any:
        return self.aws.s3(account_id, SPECS[account_id].bucket_region)

    def raw(self, name: str) -> bytes:
        ref = self.world.interesting[name]
        return self.object(ref.account_id, ref.key)

    def object(self, account_id: str, key: str, version_id: str | None = None) -> bytes:
        extra = {"VersionId": version_id} if version_id else {}
        s3 = self.s3(account_id)
        return s3.get_object(Bucket=SPECS[account_id].bucket, Key=key, **extra)["Body"].read()

    def json(self, name: str) -> Any:
        return json.loads(self.raw(name))

    def keys(self, account_id: str, prefix: str) -> list[str]:
        pages = (
            self.s3(account_id)
            .get_paginator("list_objects_v2")
            .paginate(Bucket=SPECS[account_id].bucket, Prefix=prefix)
        )
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.fixture
def seeded(aws: Any) -> Seeded:
    now = int(time.time() * 1000)
    started = time.monotonic()
    world = build_demo_world(aws.account_session, now_ms=now, resources=False)  # AWS side: test_demo_destroy
    # "well under a minute" on a local moto server; generous for a loaded CI machine.
    assert time.monotonic() - started < 60
    return Seeded(aws, world, now)


def assert_cdkd_format(body: bytes) -> Any:
    """`JSON.stringify(value, null, 2)`: re-serialising gives the same bytes, no newline at the end."""
    value = json.loads(body)
    assert body == cdkd_json(value)
    assert not body.endswith(b"\n")
    return value


def test_buckets_as_cdkd_names_them(seeded: Seeded) -> None:
    for spec in DEMO_ACCOUNTS:
        s3 = seeded.s3(spec.account_id)
        assert spec.bucket in {b["Name"] for b in s3.list_buckets()["Buckets"]}
        assert s3.get_bucket_versioning(Bucket=spec.bucket)["Status"] == "Enabled"
    # Staging has only the legacy region-suffixed name; Platform EU lives in eu-west-1.
    assert STAGING.bucket == "cdkd-state-222222222222-us-east-1"
    staging_buckets = {b["Name"] for b in seeded.s3(STAGING.account_id).list_buckets()["Buckets"]}
    assert "cdkd-state-222222222222" not in staging_buckets
    location = seeded.s3(PLATFORM_EU.account_id).get_bucket_location(Bucket=PLATFORM_EU.bucket)
    assert location["LocationConstraint"] == "eu-west-1"
    assert seeded.keys(PLATFORM_EU.account_id, "teams/platform/")
    assert not seeded.keys(PLATFORM_EU.account_id, "cdkd/")


def test_summary_counts(seeded: Seeded) -> None:
    by_id = {a.account_id: a for a in seeded.world.accounts}
    assert set(by_id) == {PRODUCTION.account_id, STAGING.account_id, PLATFORM_EU.account_id}
    for account in by_id.values():
        assert 40 <= account.healthy_stacks <= 80
        assert len(account.regions) >= 2
        listed = [
            k
            for k in seeded.keys(account.account_id, SPECS[account.account_id].prefix + "/")
            if k.endswith("/state.json")
        ]
        assert len(listed) == account.state_records
    assert seeded.world.describe()[0].startswith("111111111111 Production")


def test_locks_are_cdkd_locks(seeded: Seeded) -> None:
    live = seeded.raw("live_lock")
    value = assert_cdkd_format(live)
    assert list(value) == ["owner", "timestamp", "expiresAt", "operation"]
    assert live == (
        b'{\n  "owner": "' + value["owner"].encode() + b'",\n  "timestamp": ' + str(value["timestamp"]).encode()
        + b',\n  "expiresAt": ' + str(value["expiresAt"]).encode() + b',\n  "operation": "deploy"\n}'
    )  # fmt: skip
    assert value["timestamp"] <= seeded.now < value["expiresAt"]
    assert value["expiresAt"] - value["timestamp"] == 30 * 60_000

    expired = assert_cdkd_format(seeded.raw("expired_lock"))
    assert expired["expiresAt"] <= seeded.now

    bad_expiry = assert_cdkd_format(seeded.raw("lock_bad_expiry"))
    assert isinstance(bad_expiry["expiresAt"], str)

    with pytest.raises(ValueError):
        json.loads(seeded.raw("lock_unreadable"))

    first_deploy = seeded.world.interesting["lock_without_state"]
    assert assert_cdkd_format(seeded.raw("lock_without_state"))["expiresAt"] > seeded.now
    beside = first_deploy.key.rsplit("/", 1)[0] + "/"
    keys = seeded.keys(first_deploy.account_id, beside)
    assert first_deploy.key in keys
    assert not [k for k in keys if k.endswith("state.json")]
    assert [k for k in keys if k.endswith(".jsonl")]  # its run has started


def test_legacy_v1_records(seeded: Seeded) -> None:
    with_region = seeded.world.interesting["legacy_v1_with_region"]
    assert with_region.key == "cdkd/LegacyMonolith/state.json"
    body = assert_cdkd_format(seeded.raw("legacy_v1_with_region"))
    assert body["version"] == 1 and body["region"] == "us-east-1"
    assert all("observedProperties" not in row and "provisionedBy" not in row for row in body["resources"].values())

    without = seeded.world.interesting["legacy_v1_no_region"]
    assert without.key == "cdkd/LegacyCron/state.json"
    body = assert_cdkd_format(seeded.raw("legacy_v1_no_region"))
    assert body["version"] == 1 and "region" not in body

    assert seeded.world.interesting["legacy_v1_platform"].key == "teams/platform/Platform-BreakGlass/state.json"


def test_every_schema_version_and_a_newer_one(seeded: Seeded) -> None:
    for version in range(1, 12):
        ref = seeded.world.interesting[f"version_{version}"]
        assert json.loads(seeded.object(ref.account_id, ref.key))["version"] == version
    newer = assert_cdkd_format(seeded.raw("newer_version"))
    assert newer["version"] == 12


def test_nested_children_and_grandchild(seeded: Seeded) -> None:
    parent_ref = seeded.world.interesting["nested_parent"]
    parent = assert_cdkd_format(seeded.raw("nested_parent"))
    nested_rows = {
        lid for lid, row in parent["resources"].items() if row["resourceType"] == "AWS::CloudFormation::Stack"
    }
    assert len(nested_rows) == 2

    child_ref = seeded.world.interesting["nested_child"]
    lid = child_ref.stack.split("~", 1)[1]
    assert lid in nested_rows
    assert child_ref.key == f"cdkd/{parent_ref.stack}~{lid}/{parent_ref.region}/state.json"
    child = assert_cdkd_format(seeded.raw("nested_child"))
    assert child["stackName"] == f"{parent_ref.stack}~{lid}"
    assert (child["parentStack"], child["parentLogicalId"], child["parentRegion"]) == (
        parent_ref.stack,
        lid,
        parent_ref.region,
    )

    grand_ref = seeded.world.interesting["nested_grandchild"]
    grand = assert_cdkd_format(seeded.raw("nested_grandchild"))
    middle = seeded.world.interesting["nested_child_2"].stack
    assert grand_ref.stack.startswith(middle + "~") and grand_ref.stack.count("~") == 2
    assert grand["parentStack"] == middle
    assert grand["parentLogicalId"] == grand_ref.stack.rsplit("~", 1)[1]
    assert "conditionVerdicts" in json.loads(
        seeded.object(PRODUCTION.account_id, seeded.world.interesting["nested_child_2"].key)
    )


def test_history_record_has_four_versions(seeded: Seeded) -> None:
    ref = seeded.world.interesting["history"]
    s3 = seeded.s3(ref.account_id)
    listed = s3.list_object_versions(Bucket=PRODUCTION.bucket, Prefix=ref.key)
    versions = [v for v in listed["Versions"] if v["Key"] == ref.key]
    assert len(versions) == 4
    # Oldest first: created, resource added, property + output changed, resource removed.
    bodies = [
        assert_cdkd_format(seeded.object(ref.account_id, ref.key, v["VersionId"]))
        for v in sorted(versions, key=lambda v: v["LastModified"])
    ]
    if len({v["LastModified"] for v in versions}) < 4:  # same-second writes: order by content
        bodies.sort(key=lambda b: b["lastModified"])
    first, second, third, fourth = bodies
    assert len(second["resources"]) == len(first["resources"]) + 1
    changed = [
        lid
        for lid in second["resources"]
        if lid in third["resources"] and second["resources"][lid]["properties"] != third["resources"][lid]["properties"]
    ]
    assert changed
    assert second["outputs"] != third["outputs"]
    assert len(fourth["resources"]) == len(third["resources"]) - 1
    assert json.loads(seeded.raw("history")) == fourth

    index = assert_cdkd_format(seeded.raw("events_history"))
    assert index["indexVersion"] == 1 and index["stackName"] == ref.stack
    results = [run["result"] for run in index["runs"]]
    assert results.count("FAILED") == 1 and results.count("SUCCEEDED") == 4
    run_ids = [run["runId"] for run in index["runs"]]
    assert run_ids == sorted(run_ids, reverse=True)  # newest first


def test_event_streams_are_cdkd_jsonl(seeded: Seeded) -> None:
    ref = seeded.world.interesting["events_history"]
    index = json.loads(seeded.raw("events_history"))
    for run in index["runs"]:
        key = ref.key.replace("index.json", f"{run['runId']}.jsonl")
        body = seeded.object(ref.account_id, key)
        assert body.endswith(b"\n")
        lines = body.decode().splitlines()
        assert len(lines) == run["eventCount"]
        events = [json.loads(line) for line in lines]
        assert all(line == json.dumps(e, separators=(",", ":")) for line, e in zip(lines, events, strict=True))
        assert events[0]["eventType"] == "RUN_STARTED" and events[-1]["eventType"] == "RUN_FINISHED"
        assert events[-1]["result"] == run["result"]

    skipped = seeded.world.interesting["skipped_destroy"]
    index_key = skipped.key.replace("state.json", "deployments/index.json")
    runs = json.loads(seeded.object(skipped.account_id, index_key))["runs"]
    destroy = next(r for r in runs if r["command"] == "destroy")
    assert destroy["result"] == "FAILED"
    stream = seeded.object(skipped.account_id, index_key.replace("index.json", f"{destroy['runId']}.jsonl"))
    assert b'"eventType":"RESOURCE_SKIPPED"' in stream

    gone = seeded.world.interesting["destroyed_with_events"]
    assert not [k for k in seeded.keys(gone.account_id, f"cdkd/{gone.stack}/") if k.endswith("state.json")]


def test_malformed_records(seeded: Seeded) -> None:
    assert seeded.json("malformed_resources_list")["resources"] == []
    assert isinstance(seeded.json("malformed_outputs_string")["outputs"], str)
    rows = seeded.json("malformed_row_no_type")["resources"].values()
    assert any("resourceType" not in row for row in rows)
    rows = seeded.json("malformed_properties_null")["resources"].values()
    assert any("properties" in row and row["properties"] is None for row in rows)
    assert not isinstance(seeded.json("malformed_orphans")["orphans"], list)
    with pytest.raises(ValueError):
        json.loads(seeded.raw("malformed_not_json"))
    mismatch = seeded.world.interesting["region_mismatch"]
    assert mismatch.key.endswith("/us-east-1/state.json")
    assert seeded.json("region_mismatch")["region"] == "us-west-2"


def test_v11_showcase_fields(seeded: Seeded) -> None:
    record = assert_cdkd_format(seeded.raw("v11_showcase"))
    assert record["version"] == 11
    for name in ("orphans", "skippedOutputs", "conditionVerdicts", "exportNames"):
        assert name in record
    rows = record["resources"].values()
    assert any(row.get("noEchoLeaves") for row in rows)
    assert any(row.get("noEchoAttributeNames") for row in rows)
    assert any(row.get("observedBaselineRefused") is True for row in rows)
    assert "***" in json.dumps(record)
    assert "{{resolve:secretsmanager:" in json.dumps(record)


def test_outputs_exports_and_composite_ids(seeded: Seeded) -> None:
    dns = seeded.json("dns")
    assert isinstance(dns["outputs"]["NameServers"], list)
    assert set(dns["exportNames"]) <= set(dns["outputs"])

    exports_keys = [k for k in seeded.keys(PRODUCTION.account_id, "cdkd/_index/") if k.endswith("/exports.json")]
    assert exports_keys
    index = assert_cdkd_format(seeded.object(PRODUCTION.account_id, exports_keys[0]))
    assert index["indexVersion"] == 1 and index["exports"]
    entry = next(iter(index["exports"].values()))
    assert set(entry) == {"value", "producerStack", "producerRegion"}

    big = seeded.json("big")
    assert len(big["resources"]) >= 1900
    # Somewhere in the world: a Glue table's `db|table` id, cc-api and absent provisionedBy.
    plan = plan_demo_world(seeded.now)
    everything = b"".join(body for objects in plan.values() for _key, body in objects)
    assert b'"resourceType": "AWS::Glue::Table"' in everything
    assert b'"provisionedBy": "cc-api"' in everything
    assert b'"deletionPolicy": "Snapshot"' in everything


def test_ledger_journal_and_bootstrap_marker(seeded: Seeded) -> None:
    ref = seeded.world.interesting["with_journal_and_ledger"]
    base = ref.key.rsplit("/", 1)[0]
    ledger = assert_cdkd_format(seeded.object(ref.account_id, f"{base}/create-tokens.json"))
    assert ledger["ledgerVersion"] == 1 and ledger["nonce"] and ledger["sent"]
    journal = assert_cdkd_format(seeded.object(ref.account_id, f"{base}/rollback-journal.json"))
    assert journal["journalVersion"] == 1 and journal["segments"][0]["operations"]
    marker = assert_cdkd_format(seeded.object(PRODUCTION.account_id, "cdkd-bootstrap/us-east-1.json"))
    assert marker["assetSupportVersion"] == 1


def test_plan_is_deterministic() -> None:
    now = 1_795_955_307_315
    assert plan_demo_world(now, big_stack_resources=50) == plan_demo_world(now, big_stack_resources=50)


def test_it_plants_a_stack_whose_secrets_the_scan_finds(aws):
    from demo import DEMO_ACCOUNTS, LEAK_ACCOUNT, plant_leaked_secrets
    from engine.keys import KeyLayout
    from engine.scrub import scan

    spec = next(s for s in DEMO_ACCOUNTS if s.account_id == LEAK_ACCOUNT)
    aws.make_bucket(LEAK_ACCOUNT, spec.bucket)
    ref = plant_leaked_secrets(aws.account_session(LEAK_ACCOUNT))

    bucket = StateBucket.open(aws.access(LEAK_ACCOUNT), actor="test")
    findings = scan(bucket, KeyLayout(spec.prefix), stacks=[ref.stack]).findings

    where = {(f.versionId is None, tuple(f.path)) for f in findings}
    assert (True, ("outputs", "DbUrl")) in where  # embedded in the current output
    assert (True, ("resources", "Db", "attributes", "ApiKey")) in where  # the SSM value
    assert (False, ("resources", "Db", "properties", "MasterUserPassword")) in where  # an older version
    assert all("Paym3nts" not in f.source for f in findings)
