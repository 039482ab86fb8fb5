"""engine.deploy.run on a moto server: the golden CDK app (queue, queue policy, topic, SQS
subscription, SSM parameter) plus a log group, deployed, updated in place, replaced and
deleted, with the stored record (bytes and fields, against the record cdkd 0.284.40 wrote for
the same template) and the AWS resources checked after each step."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from engine.backend import StateBucket
from engine.deploy.assembly import open_assembly
from engine.deploy.run import PLAN_CHANGED, Deployer, RetryPolicy
from engine.keys import KeyLayout
from engine.operations import Context, OperationRefused

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
STACK = "GoldenCdkStack"
STATE = f"cdkd/{STACK}/{REGION}/state.json"
JOURNAL = f"cdkd/{STACK}/{REGION}/rollback-journal.json"
EXPORTS = f"cdkd/_index/{REGION}/exports.json"
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "cdkd-0.284.40"
LOGS: list[tuple[str, str]] = []


def golden_template() -> dict[str, Any]:
    return copy.deepcopy(open_assembly(SAMPLE / "assembly").stack(STACK).template)


def with_log_group(template: dict[str, Any], retention: int = 7) -> dict[str, Any]:
    template["Resources"]["Logs6819BB44"] = {
        "Type": "AWS::Logs::LogGroup",
        "Properties": {"RetentionInDays": retention},
        "UpdateReplacePolicy": "Delete",
        "DeletionPolicy": "Delete",
    }
    return template


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


def context(bucket: StateBucket, op: str = "op-deploy-1") -> Context:
    return Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack=STACK,
        region=REGION,
        params={},
        operation_id=op,
        person="alice",
        log=lambda level, message: LOGS.append((level, message)),
    )


def deployer(**kw: Any) -> Deployer:
    return Deployer(retry=RetryPolicy(scale=0.0), **kw)


def stored(aws) -> tuple[bytes, dict[str, Any]]:
    body = aws.get(ACCOUNT, BUCKET, STATE)
    return body, json.loads(body)


def sample_record() -> dict[str, Any]:
    return json.loads((SAMPLE / "state.json").read_bytes())


def unhost(value: Any) -> Any:
    """Queue URLs name the endpoint they were made through; compare the path only."""
    text = json.dumps(value)
    return json.loads(re.sub(r"https?://[^/\"]+/111111111111/", "QUEUE-HOST/111111111111/", text))


class Moto:
    def __init__(self, aws) -> None:
        self.session = aws.account_session(ACCOUNT)
        self.url = aws.moto.url

    def __call__(self, service: str) -> Any:
        return self.session.client(service, region_name=REGION, endpoint_url=self.url)


def test_it_deploys_the_golden_app_and_writes_the_record_cdkd_wrote(aws, bucket):
    template = with_log_group(golden_template())
    result = deployer().deploy(context(bucket), template, account=ACCOUNT)

    assert result.result == "succeeded"
    assert sorted(result.created) == sorted(
        [
            "Queue4A7E3555",
            "QueuePolicy25439813",
            "QueueGoldenCdkStackTopic1060F492172D006E",
            "TopicBFC7AF6E",
            "Param165332EC",
            "Logs6819BB44",
        ]
    )
    body, record = stored(aws)
    # the writer's bytes: 2-space indent, no trailing newline, version 11, key region stamped
    assert not body.endswith(b"\n") and body.startswith(b'{\n  "version": 11,\n  "region": "us-east-1",\n')
    assert json.dumps(record, indent=2, ensure_ascii=False).encode() == body
    assert list(record) == ["version", "region", "stackName", "resources", "outputs", "exportNames", "lastModified"]

    cdkd = sample_record()
    ours = unhost(record)
    theirs = unhost(cdkd)
    for lid, row in theirs["resources"].items():
        mine = ours["resources"][lid]
        assert list(mine) == list(row), lid  # same fields in the same order
        if row["resourceType"] == "AWS::SNS::Subscription":  # the ARN ends in SNS's random id
            assert mine["physicalId"].rsplit(":", 1)[0] == row["physicalId"].rsplit(":", 1)[0]
            mine = dict(mine, physicalId=row["physicalId"])
        for key in (
            "physicalId",
            "resourceType",
            "properties",
            "attributes",
            "dependencies",
            "deletionPolicy",
            "updateReplacePolicy",
            "provisionedBy",
        ):
            assert mine.get(key) == row.get(key), (lid, key)
        assert list(mine["observedProperties"]) == list(row["observedProperties"]), lid
    # the outputs as cdkd resolves them, plus the v9 exportNames
    assert ours["outputs"] == theirs["outputs"]
    assert list(ours["outputs"]) == list(theirs["outputs"])
    assert record["exportNames"] == ["GoldenCdkStack-TopicArn"]
    log_row = record["resources"]["Logs6819BB44"]
    assert log_row["physicalId"] == "/cdkd/GoldenCdkStack-Logs6819BB44"
    assert log_row["attributes"] == {
        "Arn": f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/cdkd/GoldenCdkStack-Logs6819BB44:*"
    }

    # the exports index holds the export only (v9+), not every output
    index = json.loads(aws.get(ACCOUNT, BUCKET, EXPORTS))
    assert list(index["exports"]) == ["GoldenCdkStack-TopicArn"]
    assert index["exports"]["GoldenCdkStack-TopicArn"]["producerStack"] == STACK

    # and AWS has what the record says
    m = Moto(aws)
    queue_url = record["resources"]["Queue4A7E3555"]["physicalId"]
    attrs = m("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "45"
    assert json.loads(attrs["Policy"])["Statement"][0]["Principal"] == {"Service": "sns.amazonaws.com"}
    topic = record["resources"]["TopicBFC7AF6E"]["physicalId"]
    subs = m("sns").list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [s["SubscriptionArn"] for s in subs] == [
        record["resources"]["QueueGoldenCdkStackTopic1060F492172D006E"]["physicalId"]
    ]
    param = m("ssm").get_parameter(Name="/GoldenCdkStack-Param165332EC")["Parameter"]
    assert param["Value"] == f"us-east-1/{topic}"
    groups = m("logs").describe_log_groups(logGroupNamePrefix="/cdkd/")["logGroups"]
    assert [(g["logGroupName"], g.get("retentionInDays")) for g in groups] == [("/cdkd/GoldenCdkStack-Logs6819BB44", 7)]


def test_it_updates_replaces_and_deletes_checking_record_and_aws_each_time(aws, bucket):
    template = with_log_group(golden_template())
    d = deployer()
    d.deploy(context(bucket), template, account=ACCOUNT)
    m = Moto(aws)
    _, first = stored(aws)
    etag_first = aws.etag(ACCOUNT, BUCKET, STATE)

    # update in place: the queue's visibility timeout, the log group's retention, the topic's display name
    template["Resources"]["Queue4A7E3555"]["Properties"]["VisibilityTimeout"] = 60
    template["Resources"]["Logs6819BB44"]["Properties"]["RetentionInDays"] = 14
    template["Resources"]["TopicBFC7AF6E"]["Properties"]["DisplayName"] = "Renamed"
    result = d.deploy(context(bucket), template, account=ACCOUNT, approved_etag=etag_first)
    assert sorted(result.updated) == ["Logs6819BB44", "Queue4A7E3555", "TopicBFC7AF6E"]
    assert result.created == [] and result.replaced == [] and result.deleted == []
    _, second = stored(aws)
    queue = second["resources"]["Queue4A7E3555"]
    assert queue["physicalId"] == first["resources"]["Queue4A7E3555"]["physicalId"]
    assert queue["properties"] == {"VisibilityTimeout": 60}
    assert queue["observedProperties"]["VisibilityTimeout"] == 60
    # untouched rows are carried byte for byte
    assert second["resources"]["Param165332EC"] == first["resources"]["Param165332EC"]
    assert list(second["resources"]) == list(first["resources"])  # updated rows keep their place
    attrs = m("sqs").get_queue_attributes(QueueUrl=queue["physicalId"], AttributeNames=["VisibilityTimeout"])
    assert attrs["Attributes"]["VisibilityTimeout"] == "60"
    topic = second["resources"]["TopicBFC7AF6E"]["physicalId"]
    assert m("sns").get_topic_attributes(TopicArn=topic)["Attributes"]["DisplayName"] == "Renamed"
    group = m("logs").describe_log_groups(logGroupNamePrefix="/cdkd/")["logGroups"][0]
    assert group["retentionInDays"] == 14

    # replace: a new queue name (create the new queue first, then delete the old one)
    template["Resources"]["Queue4A7E3555"]["Properties"]["QueueName"] = "golden-q-2"
    result = d.deploy(context(bucket), template, account=ACCOUNT)
    assert "Queue4A7E3555" in result.replaced
    _, third = stored(aws)
    new_queue = third["resources"]["Queue4A7E3555"]
    assert new_queue["physicalId"].endswith("/111111111111/golden-q-2")
    assert new_queue["attributes"]["QueueName"] == "golden-q-2"
    # the readers of the queue moved with it
    policy = third["resources"]["QueuePolicy25439813"]
    assert policy["physicalId"] == new_queue["physicalId"] and policy["properties"]["Queues"] == [
        new_queue["physicalId"]
    ]
    sub = third["resources"]["QueueGoldenCdkStackTopic1060F492172D006E"]
    assert sub["properties"]["Endpoint"] == "arn:aws:sqs:us-east-1:111111111111:golden-q-2"
    assert third["outputs"]["QueueUrl"] == new_queue["physicalId"]
    names = [u.rsplit("/", 1)[-1] for u in m("sqs").list_queues().get("QueueUrls", [])]
    assert names == ["golden-q-2"]  # the old queue is gone

    # delete: the log group and the parameter leave the template
    del template["Resources"]["Logs6819BB44"]
    del template["Resources"]["Param165332EC"]
    result = d.deploy(context(bucket), template, account=ACCOUNT)
    assert sorted(result.deleted) == ["Logs6819BB44", "Param165332EC"]
    _, fourth = stored(aws)
    assert "Logs6819BB44" not in fourth["resources"] and "Param165332EC" not in fourth["resources"]
    assert m("logs").describe_log_groups(logGroupNamePrefix="/cdkd/")["logGroups"] == []
    with pytest.raises(ClientError):
        m("ssm").get_parameter(Name="/GoldenCdkStack-Param165332EC")

    # and a deploy with nothing to do changes nothing
    etag = aws.etag(ACCOUNT, BUCKET, STATE)
    result = d.deploy(context(bucket), template, account=ACCOUNT)
    assert result.created == result.updated == result.deleted == []
    assert aws.etag(ACCOUNT, BUCKET, STATE) == etag


def test_it_writes_the_first_record_with_if_none_match_and_every_later_save_with_if_match(aws, bucket):
    seen: list[dict[str, Any]] = []
    original = bucket.put

    def spy(key, body, **kw):
        if key == STATE:
            seen.append(kw)
        return original(key, body, **kw)

    bucket.put = spy  # type: ignore[method-assign]
    deployer().deploy(context(bucket), with_log_group(golden_template()), account=ACCOUNT, concurrency=1)
    # one save per resource (6) and the final one
    assert len(seen) == 7
    assert seen[0] == {"if_none_match": True}
    assert all(kw.get("if_match", "").startswith('"') for kw in seen[1:])


def test_it_refuses_when_the_record_moved_since_approval(aws, bucket):
    d = deployer()
    d.deploy(context(bucket), golden_template(), account=ACCOUNT)
    with pytest.raises(OperationRefused, match=PLAN_CHANGED):
        d.deploy(context(bucket), golden_template(), account=ACCOUNT, approved_etag='"not-the-etag"')
    with pytest.raises(OperationRefused, match=PLAN_CHANGED):
        d.deploy(context(bucket), golden_template(), account=ACCOUNT, approved_digest="0" * 64)


def test_it_takes_over_the_record_cdkd_wrote_with_no_change(aws, bucket):
    """The record cdkd 0.284.40 wrote, placed in the bucket with live resources behind it,
    deployed over with its own assembly: no AWS call changes anything and no save is made
    (the stored bytes and ETag stay as cdkd left them)."""
    m = Moto(aws)
    url = m("sqs").create_queue(QueueName="GoldenCdkStack-Queue4A7E3555", Attributes={"VisibilityTimeout": "45"})[
        "QueueUrl"
    ]
    topic = m("sns").create_topic(Name="GoldenCdkStack-TopicBFC7AF6E")["TopicArn"]
    record = (
        (SAMPLE / "state.json")
        .read_bytes()
        .replace(b"http://127.0.0.1:5181/111111111111/", url.rsplit("/", 1)[0].encode() + b"/")
    )
    assert topic in record.decode()
    aws.put(ACCOUNT, BUCKET, STATE, record)
    etag = aws.etag(ACCOUNT, BUCKET, STATE)
    aws.reset_counts()

    result = deployer().deploy(context(bucket), golden_template(), account=ACCOUNT, approved_etag=etag)

    assert result.created == result.updated == result.replaced == result.deleted == []
    assert sorted(result.unchanged) == sorted(json.loads(record)["resources"])
    assert aws.get(ACCOUNT, BUCKET, STATE) == record
    assert aws.etag(ACCOUNT, BUCKET, STATE) == etag
    calls = aws.requests
    assert not any(name.startswith(("Create", "Set", "Subscribe", "Put")) and name != "PutObject" for name in calls)


def test_it_deploys_a_role_and_its_policy_then_deletes_them_dependents_first(aws, bucket):
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    allow = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["Queue4A7E3555", "Arn"]}}
        ],
    }
    template = golden_template()
    template["Resources"]["Role1ABCC5F0"] = {
        "Type": "AWS::IAM::Role",
        "Properties": {"AssumeRolePolicyDocument": trust},
    }
    template["Resources"]["RoleDefaultPolicy5FFB7DAB"] = {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "PolicyDocument": allow,
            "PolicyName": "RoleDefaultPolicy5FFB7DAB",
            "Roles": [{"Ref": "Role1ABCC5F0"}],
        },
    }
    d = deployer()
    d.deploy(context(bucket), template, account=ACCOUNT)
    _, record = stored(aws)
    role = record["resources"]["Role1ABCC5F0"]
    policy = record["resources"]["RoleDefaultPolicy5FFB7DAB"]
    assert role["physicalId"] == "GoldenCdkStack-Role1ABCC5F0" and list(role["attributes"]) == ["Arn", "RoleId"]
    assert policy["physicalId"] == "RoleDefaultPolicy5FFB7DAB"
    assert policy["dependencies"] == ["Queue4A7E3555", "Role1ABCC5F0"]
    assert (
        policy["properties"]["PolicyDocument"]["Statement"][0]["Resource"]
        == record["resources"]["Queue4A7E3555"]["attributes"]["Arn"]
    )
    assert policy["properties"]["Roles"] == ["GoldenCdkStack-Role1ABCC5F0"]
    iam = Moto(aws)("iam")
    assert iam.list_role_policies(RoleName="GoldenCdkStack-Role1ABCC5F0")["PolicyNames"] == [
        "RoleDefaultPolicy5FFB7DAB"
    ]

    del template["Resources"]["Role1ABCC5F0"]
    del template["Resources"]["RoleDefaultPolicy5FFB7DAB"]
    result = d.deploy(context(bucket), template, account=ACCOUNT, concurrency=1)
    assert result.deleted == ["RoleDefaultPolicy5FFB7DAB", "Role1ABCC5F0"]  # the reader first
    assert [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith("Golden")] == []


def test_it_refuses_a_stateful_replacement_without_consent_and_replaces_with_it(aws, bucket):
    template = golden_template()
    d = deployer()
    d.deploy(context(bucket), template, account=ACCOUNT)
    template["Resources"]["Param165332EC"]["Properties"]["Name"] = "/golden/param"
    with pytest.raises(OperationRefused, match="stateful replacement needs explicit consent"):
        d.deploy(context(bucket), template, account=ACCOUNT)
    result = d.deploy(context(bucket), template, account=ACCOUNT, stateful_consent=True)
    assert result.replaced == ["Param165332EC"]
    _, record = stored(aws)
    assert record["resources"]["Param165332EC"]["physicalId"] == "/golden/param"
    ssm = Moto(aws)("ssm")
    assert ssm.get_parameter(Name="/golden/param")["Parameter"]["Value"].startswith("us-east-1/arn:aws:sns:")
    with pytest.raises(ClientError):
        ssm.get_parameter(Name="/GoldenCdkStack-Param165332EC")


def test_it_records_cdkds_event_stream_for_the_run(aws, bucket):
    from engine.events import parse_event_stream

    result = deployer().deploy(context(bucket), golden_template(), account=ACCOUNT)
    key = f"cdkd/{STACK}/{REGION}/deployments/{result.run_id}.jsonl"
    events = parse_event_stream(aws.get(ACCOUNT, BUCKET, key))
    kinds = [e["eventType"] for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert events[0]["command"] == "deploy"
    assert kinds.count("RESOURCE_STARTED") == kinds.count("RESOURCE_SUCCEEDED") == 5
    assert events[-1]["result"] == "SUCCEEDED" and events[-1]["counts"]["created"] == 5


def test_it_refuses_before_any_aws_call_what_no_provider_here_creates(aws, bucket):
    template = golden_template()
    template["Resources"]["Fn"] = {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Code": {"ZipFile": "x"},
            "Handler": "i.h",
            "Runtime": "python3.12",
            "Role": "arn:aws:iam::1:role/r",
        },
    }
    template["Resources"]["Queue4A7E3555"]["Properties"]["SomethingNew"] = 1
    aws.reset_counts()

    def delete_only_lambda(rtype, provisioned_by=None):
        from engine.providers import REGISTRY, deploy_provider_for

        class DeleteOnly:  # what destroy alone knows: a provider without create
            types = ("AWS::Lambda::Function",)
            delete = REGISTRY["AWS::Lambda::Function"].delete

        return DeleteOnly() if rtype == "AWS::Lambda::Function" else deploy_provider_for(rtype, provisioned_by)

    with pytest.raises(OperationRefused) as caught:
        deployer(provider_for=delete_only_lambda).deploy(context(bucket), template, account=ACCOUNT)
    assert "Fn (AWS::Lambda::Function): this engine cannot create or update the type yet" in str(caught.value)
    assert "Queue4A7E3555 (AWS::SQS::Queue): properties SomethingNew are not handled" in str(caught.value)
    assert aws.etag(ACCOUNT, BUCKET, STATE) is None
    assert not any(name in aws.requests for name in ("CreateQueue", "CreateTopic", "PutParameter"))


def test_it_takes_over_the_cdkd_record_with_a_change_keeping_what_it_does_not_touch(aws, bucket):
    m = Moto(aws)
    url = m("sqs").create_queue(QueueName="GoldenCdkStack-Queue4A7E3555", Attributes={"VisibilityTimeout": "45"})[
        "QueueUrl"
    ]
    m("sns").create_topic(Name="GoldenCdkStack-TopicBFC7AF6E")
    text = (
        (SAMPLE / "state.json").read_text().replace("http://127.0.0.1:5181/111111111111/", url.rsplit("/", 1)[0] + "/")
    )
    record = json.loads(text)
    record["resources"]["Param165332EC"]["futureRowField"] = {"kept": True}  # a field a newer cdkd writes
    record["futureStackField"] = [1, 2]
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record, indent=2).encode())

    template = golden_template()
    template["Resources"]["Queue4A7E3555"]["Properties"]["VisibilityTimeout"] = 60
    result = deployer().deploy(context(bucket), template, account=ACCOUNT)

    assert result.updated == ["Queue4A7E3555"] and result.created == result.deleted == []
    body, after = stored(aws)
    assert after["version"] == 11
    assert after["futureStackField"] == [1, 2]
    for lid in ("TopicBFC7AF6E", "Param165332EC", "QueuePolicy25439813", "QueueGoldenCdkStackTopic1060F492172D006E"):
        assert after["resources"][lid] == record["resources"][lid], lid  # carried verbatim
    assert after["resources"]["Param165332EC"]["futureRowField"] == {"kept": True}
    queue = after["resources"]["Queue4A7E3555"]
    assert queue["properties"] == {"VisibilityTimeout": 60} and queue["physicalId"] == url
    assert list(after["resources"]) == list(record["resources"])  # the updated row keeps its place
    assert after["exportNames"] == ["GoldenCdkStack-TopicArn"]
    attrs = m("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "60"


def test_a_consumer_records_the_import_it_resolved(aws, bucket):
    deployer().deploy(context(bucket), golden_template(), account=ACCOUNT)
    consumer = {
        "Resources": {
            "Reader": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Type": "String", "Value": {"Fn::ImportValue": "GoldenCdkStack-TopicArn"}},
            }
        }
    }
    ctx = context(bucket)
    ctx.stack = "Consumer"
    deployer().deploy(ctx, consumer, account=ACCOUNT)
    record = json.loads(aws.get(ACCOUNT, BUCKET, f"cdkd/Consumer/{REGION}/state.json"))
    topic = f"arn:aws:sns:us-east-1:{ACCOUNT}:GoldenCdkStack-TopicBFC7AF6E"
    assert record["resources"]["Reader"]["properties"]["Value"] == topic
    assert record["imports"] == [
        {"exportName": "GoldenCdkStack-TopicArn", "sourceStack": "GoldenCdkStack", "sourceRegion": "us-east-1"}
    ]
    assert record["exportNames"] == [] and record["outputs"] == {}
    assert Moto(aws)("ssm").get_parameter(Name="/Consumer-Reader")["Parameter"]["Value"] == topic


def test_it_deploys_a_function_with_its_role_and_permission(aws, bucket):
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    template = golden_template()
    template["Resources"]["FnRole"] = {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": trust}}
    template["Resources"]["Fn"] = {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Code": {"ZipFile": "def handler(e, c):\n    return 1\n"},
            "Handler": "index.handler",
            "Runtime": "python3.12",
            "Role": {"Fn::GetAtt": ["FnRole", "Arn"]},
        },
        "DependsOn": ["FnRole"],
    }
    template["Resources"]["FnInvoke"] = {
        "Type": "AWS::Lambda::Permission",
        "Properties": {
            "FunctionName": {"Fn::GetAtt": ["Fn", "Arn"]},
            "Action": "lambda:InvokeFunction",
            "Principal": "sns.amazonaws.com",
            "SourceArn": {"Ref": "TopicBFC7AF6E"},
        },
    }
    deployer().deploy(context(bucket), template, account=ACCOUNT)
    _, record = stored(aws)
    fn = record["resources"]["Fn"]
    assert fn["physicalId"] == "GoldenCdkStack-Fn" and fn["dependencies"] == ["FnRole"]
    assert fn["properties"]["Role"] == record["resources"]["FnRole"]["attributes"]["Arn"]
    assert fn["properties"]["Code"] == {"ZipFile": "def handler(e, c):\n    return 1\n"}  # the template's bag
    perm = record["resources"]["FnInvoke"]
    assert perm["physicalId"] == "FnInvoke" and perm["dependencies"] == ["Fn", "TopicBFC7AF6E"]
    lam = Moto(aws)("lambda")
    assert lam.get_function(FunctionName="GoldenCdkStack-Fn")["Configuration"]["Role"].endswith(
        "/GoldenCdkStack-FnRole"
    )
    assert [s["Sid"] for s in json.loads(lam.get_policy(FunctionName="GoldenCdkStack-Fn")["Policy"])["Statement"]] == [
        "FnInvoke"
    ]


def test_iam_propagation_errors_use_the_dense_schedule():
    from engine.deploy.run import retry_class
    from engine.providers.base import ProviderError

    message = "Fn: CreateFunction failed (InvalidParameterValueException): "
    message += "The role defined for the function cannot be assumed by Lambda."
    assert retry_class(ProviderError(message)) == "iam"
    assert retry_class(ProviderError("x", aws_code="ThrottlingException")) == "transient"
    assert retry_class(ProviderError("x", aws_code="ValidationException")) is None
