"""Issue 10, "Deploy through the engine": on moto, each SDK type of the messaging and storage
half (SQS, SNS, SSM, Logs, S3) deployed, updated in place, replaced and removed through the
`deploy` operation spec that `cdkd deploy` runs, with the stored record and the AWS resource
checked after every step (tests.deploy.lifecycle does the steps; this file holds the cases).
The IAM, Lambda, DynamoDB, Secrets Manager and KMS cases are in test_lifecycle_iam.py.

The policy types (SQS queue policy, SNS topic policy) have no create-only property: their
"replacement" is the policy moving to another queue or topic, an in-place update whose
physical id (the first queue URL / the topic ARNs) changes and whose old target loses it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.deploy.lifecycle import ACCOUNT, LID, REGION, Case, Moto, run_lifecycle
from tests.deploy.lifecycle import bucket as bucket  # noqa: F401,PLC0414 - the fixture

pytestmark = pytest.mark.integration


def step_value(step: str, deploy: Any, update: Any, replace: Any = None) -> Any:
    return {"deploy": deploy, "update": update, "replace": update if replace is None else replace}[step]


def raises(fn: Any, *codes: str) -> bool:
    """True when the call fails with one of AWS's codes (the thing is not there)."""
    try:
        fn()
    except ClientError as exc:
        if exc.response["Error"]["Code"] in codes:
            return True
        raise
    return False


def allow(principal: str, action: str, resource: Any) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": principal}, "Action": action, "Resource": resource}],
    }


# --- SQS -------------------------------------------------------------------------------------


def queue_resources(step: str, *, retain: bool = False) -> dict[str, Any]:
    props: dict[str, Any] = {"VisibilityTimeout": step_value(step, 45, 60)}
    if step == "replace":
        props["QueueName"] = "life-queue-2"  # create-only (cdkd's hand rule)
    resource: dict[str, Any] = {"Type": "AWS::SQS::Queue", "Properties": props}
    if retain:
        resource["UpdateReplacePolicy"] = "Retain"
    return {LID: resource}


def queue_live(m: Moto, row: dict[str, Any]) -> str:
    attrs = m("sqs").get_queue_attributes(QueueUrl=row["physicalId"], AttributeNames=["VisibilityTimeout"])
    return attrs["Attributes"]["VisibilityTimeout"]


def queue_gone(m: Moto, row: dict[str, Any]) -> bool:
    name = row["physicalId"].rsplit("/", 1)[-1]
    return name not in [u.rsplit("/", 1)[-1] for u in m("sqs").list_queues().get("QueueUrls", [])]


def queue_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    name = row["physicalId"].rsplit("/", 1)[-1]
    return {"Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}", "QueueUrl": row["physicalId"], "QueueName": name}


def queue_policy_resources(step: str) -> dict[str, Any]:
    target = "QueueB" if step == "replace" else "QueueA"
    action = step_value(step, "sqs:SendMessage", "sqs:GetQueueAttributes")
    return {
        "QueueA": {"Type": "AWS::SQS::Queue"},
        "QueueB": {"Type": "AWS::SQS::Queue"},
        LID: {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "PolicyDocument": allow("sns.amazonaws.com", action, {"Fn::GetAtt": [target, "Arn"]}),
                "Queues": [{"Ref": target}],
            },
        },
    }


def queue_policy(m: Moto, url: str) -> dict[str, Any] | None:
    attrs = m("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {})
    return json.loads(attrs["Policy"]) if attrs.get("Policy") else None


def queue_policy_live(m: Moto, row: dict[str, Any]) -> Any:
    policy = queue_policy(m, row["physicalId"])
    return policy and policy["Statement"][0]["Action"]


def queue_policy_gone(m: Moto, row: dict[str, Any]) -> bool:
    return all(queue_policy(m, url) is None for url in row["properties"]["Queues"])


# --- SNS -------------------------------------------------------------------------------------


def topic_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {"DisplayName": step_value(step, "one", "two")}
    if step == "replace":
        props["TopicName"] = "life-topic-2"
    return {LID: {"Type": "AWS::SNS::Topic", "Properties": props}}


def topic_live(m: Moto, row: dict[str, Any]) -> str:
    return m("sns").get_topic_attributes(TopicArn=row["physicalId"])["Attributes"]["DisplayName"]


def topic_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("sns").get_topic_attributes(TopicArn=row["physicalId"]), "NotFound")


def subscription_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "Protocol": "sqs",
        "TopicArn": {"Ref": "Topic"},
        "Endpoint": {"Fn::GetAtt": ["QueueB" if step == "replace" else "QueueA", "Arn"]},  # create-only
        "RawMessageDelivery": step_value(step, False, True),
    }
    return {
        "Topic": {"Type": "AWS::SNS::Topic"},
        "QueueA": {"Type": "AWS::SQS::Queue"},
        "QueueB": {"Type": "AWS::SQS::Queue"},
        LID: {"Type": "AWS::SNS::Subscription", "Properties": props},
    }


def subscription_live(m: Moto, row: dict[str, Any]) -> tuple[str, str]:
    attrs = m("sns").get_subscription_attributes(SubscriptionArn=row["physicalId"])["Attributes"]
    return attrs["Endpoint"].rsplit(":", 1)[-1], attrs["RawMessageDelivery"]


def subscription_gone(m: Moto, row: dict[str, Any]) -> bool:
    topic = row["properties"]["TopicArn"]
    subs = m("sns").list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    return row["physicalId"] not in [s["SubscriptionArn"] for s in subs]


def topic_policy_resources(step: str) -> dict[str, Any]:
    target = "TopicB" if step == "replace" else "TopicA"
    action = step_value(step, "sns:Publish", "sns:Subscribe")
    return {
        "TopicA": {"Type": "AWS::SNS::Topic"},
        "TopicB": {"Type": "AWS::SNS::Topic"},
        LID: {
            "Type": "AWS::SNS::TopicPolicy",
            "Properties": {
                "PolicyDocument": allow("events.amazonaws.com", action, {"Ref": target}),
                "Topics": [{"Ref": target}],
            },
        },
    }


def topic_policy(m: Moto, arn: str) -> dict[str, Any]:
    return json.loads(m("sns").get_topic_attributes(TopicArn=arn)["Attributes"]["Policy"])


def topic_policy_live(m: Moto, row: dict[str, Any]) -> Any:
    return [topic_policy(m, arn)["Statement"][0]["Action"] for arn in row["physicalId"].split(",")]


def topic_policy_gone(m: Moto, row: dict[str, Any]) -> bool:
    # a topic always has a policy: without the stack's, SNS's default is back
    return all(
        topic_policy(m, arn)["Statement"][0].get("Sid") == "__default_statement_ID"
        for arn in row["properties"]["Topics"]
    )


# --- SSM, Logs -------------------------------------------------------------------------------


def parameter_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {"Type": "String", "Value": step_value(step, "one", "two")}
    if step == "replace":
        props["Name"] = "/life/param-2"
    return {LID: {"Type": "AWS::SSM::Parameter", "Properties": props}}


def parameter_live(m: Moto, row: dict[str, Any]) -> str:
    return m("ssm").get_parameter(Name=row["physicalId"])["Parameter"]["Value"]


def parameter_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("ssm").get_parameter(Name=row["physicalId"]), "ParameterNotFound")


def parameter_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    param = m("ssm").get_parameter(Name=row["physicalId"])["Parameter"]
    return {"Type": "String", "Value": param["Value"], "Arn": param["ARN"]}


def log_group_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {"RetentionInDays": step_value(step, 7, 14)}
    if step == "replace":
        props["LogGroupName"] = "/life/lg-2"
    return {LID: {"Type": "AWS::Logs::LogGroup", "Properties": props}}


def log_group(m: Moto, name: str) -> dict[str, Any] | None:
    groups = m("logs").describe_log_groups(logGroupNamePrefix=name)["logGroups"]
    return next((g for g in groups if g["logGroupName"] == name), None)


def log_group_live(m: Moto, row: dict[str, Any]) -> Any:
    return (log_group(m, row["physicalId"]) or {}).get("retentionInDays")


def log_group_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    return {"Arn": (log_group(m, row["physicalId"]) or {}).get("arn")}


# --- S3 --------------------------------------------------------------------------------------


def bucket_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "VersioningConfiguration": {"Status": step_value(step, "Enabled", "Suspended")},
        "Tags": [{"Key": "stage", "Value": step_value(step, "one", "two")}],
    }
    if step == "replace":
        props["BucketName"] = "life-bucket-2"
    return {LID: {"Type": "AWS::S3::Bucket", "Properties": props}}


def bucket_live(m: Moto, row: dict[str, Any]) -> tuple[str, list[dict[str, str]]]:
    s3 = m("s3")
    return (
        s3.get_bucket_versioning(Bucket=row["physicalId"]).get("Status"),
        s3.get_bucket_tagging(Bucket=row["physicalId"])["TagSet"],
    )


def bucket_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("s3").head_bucket(Bucket=row["physicalId"]), "404", "NoSuchBucket")


def bucket_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    name = row["physicalId"]
    assert m("s3").get_bucket_location(Bucket=name).get("LocationConstraint") in (None, REGION)
    return {
        "Arn": f"arn:aws:s3:::{name}",
        "DomainName": f"{name}.s3.amazonaws.com",
        "DualStackDomainName": f"{name}.s3.dualstack.{REGION}.amazonaws.com",
        "RegionalDomainName": f"{name}.s3.{REGION}.amazonaws.com",
        "WebsiteURL": f"http://{name}.s3-website-{REGION}.amazonaws.com",
    }


def bucket_policy_resources(step: str) -> dict[str, Any]:
    target = "BucketB" if step == "replace" else "BucketA"  # Bucket is create-only: a real replacement
    action = step_value(step, "s3:GetObject", "s3:ListBucket")
    resource = {"Fn::GetAtt": [target, "Arn"]}
    return {
        "BucketA": {"Type": "AWS::S3::Bucket"},
        "BucketB": {"Type": "AWS::S3::Bucket"},
        LID: {
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {
                "Bucket": {"Ref": target},
                "PolicyDocument": allow("logging.s3.amazonaws.com", action, resource),
            },
        },
    }


def bucket_policy_live(m: Moto, row: dict[str, Any]) -> Any:
    return json.loads(m("s3").get_bucket_policy(Bucket=row["physicalId"])["Policy"])["Statement"][0]["Action"]


def bucket_policy_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("s3").get_bucket_policy(Bucket=row["physicalId"]), "NoSuchBucketPolicy", "NoSuchBucket")


def no_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    return {}


def tags(value: str) -> list[dict[str, str]]:
    return [{"Key": "stage", "Value": value}]


CASES = [
    Case(
        "sqs-queue",
        "AWS::SQS::Queue",
        queue_resources,
        queue_live,
        {"deploy": "45", "update": "60", "replace": "60"},
        queue_gone,
        queue_attributes,
    ),
    Case(
        "sqs-queue-retained",
        "AWS::SQS::Queue",
        lambda step: queue_resources(step, retain=True),
        queue_live,
        {"deploy": "45", "update": "60", "replace": "60"},
        queue_gone,
        queue_attributes,
        retained=True,
    ),
    Case(
        "sqs-queue-policy",
        "AWS::SQS::QueuePolicy",
        queue_policy_resources,
        queue_policy_live,
        {"deploy": "sqs:SendMessage", "update": "sqs:GetQueueAttributes", "replace": "sqs:GetQueueAttributes"},
        queue_policy_gone,
        no_attributes,
        deps=lambda step: ("QueueB",) if step == "replace" else ("QueueA",),
        replace="updated",  # no create-only property: moving it to QueueB is an in-place update
    ),
    Case(
        "sns-topic",
        "AWS::SNS::Topic",
        topic_resources,
        topic_live,
        {"deploy": "one", "update": "two", "replace": "two"},
        topic_gone,
        lambda m, row: {"TopicArn": row["physicalId"], "TopicName": row["physicalId"].rsplit(":", 1)[-1]},
    ),
    Case(
        "sns-subscription",
        "AWS::SNS::Subscription",
        subscription_resources,
        subscription_live,
        {
            "deploy": ("LifeStack-QueueA", "false"),
            "update": ("LifeStack-QueueA", "true"),
            "replace": ("LifeStack-QueueB", "true"),
        },
        subscription_gone,
        no_attributes,
        deps=lambda step: ("Topic", "QueueB" if step == "replace" else "QueueA"),
    ),
    Case(
        "sns-topic-policy",
        "AWS::SNS::TopicPolicy",
        topic_policy_resources,
        topic_policy_live,
        {"deploy": ["sns:Publish"], "update": ["sns:Subscribe"], "replace": ["sns:Subscribe"]},
        topic_policy_gone,
        no_attributes,
        deps=lambda step: ("TopicB",) if step == "replace" else ("TopicA",),
        replace="updated",  # no create-only property: moving it to TopicB is an in-place update
    ),
    Case(
        "ssm-parameter",
        "AWS::SSM::Parameter",
        parameter_resources,
        parameter_live,
        {"deploy": "one", "update": "two", "replace": "two"},
        parameter_gone,
        parameter_attributes,
        stateful=True,
    ),
    Case(
        "logs-log-group",
        "AWS::Logs::LogGroup",
        log_group_resources,
        log_group_live,
        {"deploy": 7, "update": 14, "replace": 14},
        lambda m, row: log_group(m, row["physicalId"]) is None,
        log_group_attributes,
        stateful=True,  # a retention > 0 makes a log group stateful (cdkd's guard)
    ),
    Case(
        "s3-bucket",
        "AWS::S3::Bucket",
        bucket_resources,
        bucket_live,
        {
            "deploy": ("Enabled", tags("one")),
            "update": ("Suspended", tags("two")),
            "replace": ("Suspended", tags("two")),
        },
        bucket_gone,
        bucket_attributes,
        stateful=True,
    ),
    Case(
        "s3-bucket-policy",
        "AWS::S3::BucketPolicy",
        bucket_policy_resources,
        bucket_policy_live,
        {"deploy": "s3:GetObject", "update": "s3:ListBucket", "replace": "s3:ListBucket"},
        bucket_policy_gone,
        no_attributes,
        deps=lambda step: ("BucketB",) if step == "replace" else ("BucketA",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_it_deploys_updates_replaces_and_removes(case, aws, bucket, tmp_path):  # noqa: F811
    run_lifecycle(case, aws, bucket, tmp_path)
