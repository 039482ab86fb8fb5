"""The demo world's destroys succeed: its seed creates, in the moto server, the AWS resources
its healthy records describe (under the physical ids the records hold), so destroying one of
the stacks it offers deletes every row for real: result Succeeded, each row "deleted" (none
"already gone"), and the resources gone from AWS afterwards."""

from __future__ import annotations

import json
from typing import Any

import pytest

from demo import DEMO_ACCOUNTS, build_demo_world
from engine.backend import StateBucket
from engine.destroy import Destroy
from engine.keys import KeyLayout
from engine.operations import Context, Plan

pytestmark = pytest.mark.integration

SPECS = {s.account_id: s for s in DEMO_ACCOUNTS}


def exists(session: Any, region: str, row: dict[str, Any]) -> bool:
    """Whether the row's resource is in the moto server, asked the way a person would."""
    rtype, pid = row["resourceType"], row["physicalId"]
    c = lambda service: session.client(service, region_name="us-east-1" if service == "iam" else region)  # noqa: E731
    try:
        if rtype == "AWS::SQS::Queue":
            c("sqs").get_queue_url(QueueName=pid.rsplit("/", 1)[1])
        elif rtype == "AWS::SNS::Topic":
            c("sns").get_topic_attributes(TopicArn=pid)
        elif rtype == "AWS::SNS::Subscription":
            c("sns").get_subscription_attributes(SubscriptionArn=pid)
        elif rtype == "AWS::IAM::Role":
            c("iam").get_role(RoleName=pid)
        elif rtype == "AWS::IAM::Policy":
            role = row["properties"]["Roles"][0]
            c("iam").get_role_policy(RoleName=role, PolicyName=row["properties"]["PolicyName"])
        elif rtype == "AWS::SSM::Parameter":
            c("ssm").get_parameter(Name=pid)
        elif rtype == "AWS::Lambda::Function":
            c("lambda").get_function(FunctionName=pid)
        elif rtype == "AWS::DynamoDB::Table":
            c("dynamodb").describe_table(TableName=pid)
        elif rtype == "AWS::S3::Bucket":
            c("s3").head_bucket(Bucket=pid)
        elif rtype == "AWS::KMS::Key":
            # KMS cannot delete a key at once: scheduled for deletion is as gone as it gets.
            return c("kms").describe_key(KeyId=pid)["KeyMetadata"]["KeyState"] != "PendingDeletion"
        elif rtype == "AWS::SecretsManager::Secret":
            return "DeletedDate" not in c("secretsmanager").describe_secret(SecretId=pid)
        elif rtype == "AWS::Logs::LogGroup":
            groups = c("logs").describe_log_groups(logGroupNamePrefix=pid)["logGroups"]
            return any(g["logGroupName"] == pid for g in groups)
        else:
            raise AssertionError(f"a destroyable demo stack holds {rtype}, which the demo does not create")
    except Exception as exc:  # noqa: BLE001 - botocore's per-service not-found errors
        if "AssertionError" in type(exc).__name__:
            raise
        return False
    return True


def test_it_destroys_every_demo_stack_it_offers_deleting_every_resource_for_real(aws):
    world = build_demo_world(aws.account_session, big_stack_resources=20)
    assert world.resources > 300
    assert len(world.destroyable) >= 40
    # Every kind the demo offers, in every account, is among them.
    kinds = {(ref.account_id, ref.note) for ref in world.destroyable}
    assert kinds == {(spec.account_id, kind) for spec in DEMO_ACCOUNTS for kind in ("Data", "Events", "Api")}

    for ref in world.destroyable:  # every one, not a sample: each must end Succeeded
        spec = SPECS[ref.account_id]
        session = aws.account_session(ref.account_id)
        bucket = StateBucket.open(
            aws.access(ref.account_id), actor="arthur", bucket=spec.bucket, region=spec.bucket_region
        )
        record = json.loads(aws.get(ref.account_id, spec.bucket, ref.key))
        rows = record["resources"]
        assert rows and all(exists(session, ref.region, row) for row in rows.values()), ref.stack

        items: dict[str, Any] = {}
        ctx = Context(
            bucket=bucket,
            layout=KeyLayout(spec.prefix),
            stack=ref.stack,
            region=ref.region,
            params={"concurrency": 4},
            operation_id=f"op-{ref.stack}",
            person="arthur",
            log=lambda level, message: None,
            progress=lambda done, total, detail=None, items=items: items.update((detail or {}).get("items", {})),
        )
        spec_ = Destroy()
        plan = spec_.plan(ctx)
        outcome = spec_.execute(ctx, Plan.from_json(plan.as_json()))

        assert outcome.status == "succeeded", (ref.stack, outcome.details)
        assert outcome.details["counts"] == {
            "deleted": len(rows), "retained": 0, "skipped": 0, "failed": 0, "unverified": 0,
        }, ref.stack  # fmt: skip
        assert {lid: item["status"] for lid, item in items.items()} == {lid: "deleted" for lid in rows}
        assert not [lid for lid, item in items.items() if item.get("message")], items  # no "already gone"
        assert not [lid for lid, row in rows.items() if exists(session, ref.region, row)], ref.stack
        assert not aws_keys(aws, ref), ref.stack  # the record itself is gone too


def aws_keys(aws: Any, ref: Any) -> list[str]:
    spec = SPECS[ref.account_id]
    listed = aws.s3(ref.account_id, spec.bucket_region).list_objects_v2(Bucket=spec.bucket, Prefix=ref.key)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_it_refuses_up_front_to_destroy_a_data_stack_an_api_stack_imports(aws):
    """The Data stacks the demo does not offer: the plan refuses, naming the importer, so the
    destroy page says so before anything is requested (nothing is deleted, nothing partial)."""
    from engine.operations import OperationRefused

    world = build_demo_world(aws.account_session, big_stack_resources=20)
    offered = {(ref.account_id, ref.stack, ref.region) for ref in world.destroyable}
    spec = DEMO_ACCOUNTS[0]
    bucket = StateBucket.open(
        aws.access(spec.account_id), actor="arthur", bucket=spec.bucket, region=spec.bucket_region
    )
    layout = KeyLayout(spec.prefix)
    pages = aws.s3(spec.account_id, spec.bucket_region).get_paginator("list_objects_v2")
    listed = pages.paginate(Bucket=spec.bucket, Prefix=spec.prefix + "/")
    keys = [o["Key"] for p in listed for o in p.get("Contents", [])]
    # Top-level records of the Data kind: prefix/<Env-DomainData>/<region>/state.json
    data = [k for k in keys if len(k.split("/")) == 4 and k.split("/")[1].endswith("Data") and k.endswith("state.json")]
    refused = 0
    for key in data:
        _, stack, region, _ = key.split("/")
        if (spec.account_id, stack, region) in offered:
            continue
        ctx = Context(
            bucket=bucket, layout=layout, stack=stack, region=region, params={}, operation_id="op-refuse",
            person="arthur", log=lambda level, message: None, progress=lambda *a, **k: None,
        )  # fmt: skip
        with pytest.raises(OperationRefused, match="import"):
            Destroy().plan(ctx)
        refused += 1
    assert refused >= 3
