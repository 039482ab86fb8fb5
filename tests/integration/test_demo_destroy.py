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


def test_it_destroys_the_demo_stacks_it_offers_deleting_every_resource_for_real(aws):
    world = build_demo_world(aws.account_session, big_stack_resources=20)
    assert world.resources > 300
    assert len(world.destroyable) >= 30
    # One stack of each destroyable kind in every account.
    picked = {}
    for ref in world.destroyable:
        picked.setdefault((ref.account_id, ref.note), ref)
    assert len(picked) == 2 * len(DEMO_ACCOUNTS)

    for ref in picked.values():
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
