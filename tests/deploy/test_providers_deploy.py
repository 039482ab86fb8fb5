"""The deploy half of engine.providers: create, update, read and attribute lookup per type on
moto (the AWS resource checked after each call), name collisions refused, and the Cloud
Control route through botocore's Stubber, because moto has no Cloud Control API."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from engine.providers import CLOUD_CONTROL, DEPLOY_REGISTRY, REGISTRY, Clients, deploy_provider_for
from engine.providers.base import ALREADY_EXISTS_CODE, DeployTarget, ProviderError, ResourceRef
from engine.providers.cloudcontrol import CloudControlProvider, patch_document

A1 = "111111111111"
TARGET = DeployTarget("Stack", "us-east-1", A1)


def ref(rtype: str, pid: str, properties: dict, attributes: dict | None = None, lid: str = "Res") -> ResourceRef:
    return ResourceRef(lid, rtype, pid, properties, attributes or {}, "us-east-1", A1, "sdk")


@pytest.fixture
def clients(aws) -> Clients:
    return Clients(aws.account_session(A1))


@pytest.fixture
def moto(aws):
    session = aws.account_session(A1)
    return lambda service: session.client(service, region_name="us-east-1", endpoint_url=aws.moto.url)


def test_the_destroy_registry_is_unchanged_and_the_deploy_registry_adds_the_policies():
    assert "AWS::SQS::QueuePolicy" not in REGISTRY and "AWS::SNS::TopicPolicy" not in REGISTRY
    assert {"AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy", "AWS::SQS::Queue"} <= set(DEPLOY_REGISTRY)
    assert deploy_provider_for("AWS::Events::Rule") is CLOUD_CONTROL  # no SDK provider: Cloud Control
    assert deploy_provider_for("AWS::SQS::Queue", "cc-api") is CLOUD_CONTROL  # cc-api sticks
    assert deploy_provider_for("AWS::IAM::Role", "cc-api") is not CLOUD_CONTROL  # Cloud Control cannot
    assert deploy_provider_for("Custom::Thing") is None


@pytest.mark.integration
def test_queue_create_update_read_and_collision(clients, moto):
    p = DEPLOY_REGISTRY["AWS::SQS::Queue"]
    made = p.create(
        clients, "Jobs", "AWS::SQS::Queue", {"VisibilityTimeout": 45, "Tags": [{"Key": "a", "Value": "1"}]}, TARGET
    )
    assert made.physical_id.endswith(f"/{A1}/Stack-Jobs")
    assert made.attributes == {
        "Arn": f"arn:aws:sqs:us-east-1:{A1}:Stack-Jobs",
        "QueueUrl": made.physical_id,
        "QueueName": "Stack-Jobs",
    }
    sqs = moto("sqs")
    assert sqs.get_queue_attributes(QueueUrl=made.physical_id, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "45"
    }
    # CreateQueue would hand back the same queue: the create refuses to adopt it
    with pytest.raises(ProviderError) as caught:
        p.create(clients, "Jobs", "AWS::SQS::Queue", {"VisibilityTimeout": 45}, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    # update: a removed property goes back to its default, tags are diffed
    r = ref("AWS::SQS::Queue", made.physical_id, {"VisibilityTimeout": 45, "Tags": [{"Key": "a", "Value": "1"}]})
    p.update(clients, r, {"DelaySeconds": 5, "Tags": [{"Key": "b", "Value": "2"}]}, TARGET)
    attrs = sqs.get_queue_attributes(QueueUrl=made.physical_id, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "30" and attrs["DelaySeconds"] == "5"
    assert sqs.list_queue_tags(QueueUrl=made.physical_id)["Tags"] == {"b": "2"}
    observed = p.read(clients, ref("AWS::SQS::Queue", made.physical_id, {}))
    assert observed["DelaySeconds"] == 5 and observed["Tags"] == [{"Key": "b", "Value": "2"}]
    assert p.get_attribute(clients, r, "Arn") == f"arn:aws:sqs:us-east-1:{A1}:Stack-Jobs"
    assert p.get_attribute(clients, r, "Nope") is None


@pytest.mark.integration
def test_topic_subscription_and_topic_policy(clients, moto):
    topics = DEPLOY_REGISTRY["AWS::SNS::Topic"]
    made = topics.create(clients, "Alerts", "AWS::SNS::Topic", {"DisplayName": "A"}, TARGET)
    assert made.physical_id == f"arn:aws:sns:us-east-1:{A1}:Stack-Alerts"
    assert made.attributes == {"TopicArn": made.physical_id, "TopicName": "Stack-Alerts"}
    with pytest.raises(ProviderError) as caught:
        topics.create(clients, "Alerts", "AWS::SNS::Topic", {}, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    topics.update(clients, ref("AWS::SNS::Topic", made.physical_id, {"DisplayName": "A"}), {"DisplayName": "B"}, TARGET)
    sns = moto("sns")
    assert sns.get_topic_attributes(TopicArn=made.physical_id)["Attributes"]["DisplayName"] == "B"

    queue = moto("sqs").create_queue(QueueName="subq")["QueueUrl"]
    subs = DEPLOY_REGISTRY["AWS::SNS::Subscription"]
    props = {"Endpoint": f"arn:aws:sqs:us-east-1:{A1}:subq", "Protocol": "sqs", "TopicArn": made.physical_id}
    sub = subs.create(clients, "Sub", "AWS::SNS::Subscription", props, TARGET)
    assert sub.attributes == {} and sub.physical_id.startswith(made.physical_id + ":")
    subs.update(
        clients, ref("AWS::SNS::Subscription", sub.physical_id, props), dict(props, RawMessageDelivery=True), TARGET
    )
    attrs = sns.get_subscription_attributes(SubscriptionArn=sub.physical_id)["Attributes"]
    assert attrs["RawMessageDelivery"] == "true"
    assert subs.read(clients, ref("AWS::SNS::Subscription", sub.physical_id, {}))["RawMessageDelivery"] is True

    policies = DEPLOY_REGISTRY["AWS::SNS::TopicPolicy"]
    doc = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sns:Publish", "Resource": made.physical_id}
        ],
    }
    pol = policies.create(
        clients, "Pol", "AWS::SNS::TopicPolicy", {"PolicyDocument": doc, "Topics": [made.physical_id]}, TARGET
    )
    assert pol.physical_id == made.physical_id and pol.attributes == {}
    assert json.loads(sns.get_topic_attributes(TopicArn=made.physical_id)["Attributes"]["Policy"]) == doc
    policies.delete(clients, ref("AWS::SNS::TopicPolicy", pol.physical_id, {"Topics": [made.physical_id]}))
    restored = json.loads(sns.get_topic_attributes(TopicArn=made.physical_id)["Attributes"]["Policy"])
    assert restored["Id"] == "__default_policy_ID"
    _ = queue


@pytest.mark.integration
def test_parameter_and_log_group(clients, moto):
    params = DEPLOY_REGISTRY["AWS::SSM::Parameter"]
    made = params.create(clients, "Flag", "AWS::SSM::Parameter", {"Value": "on", "Tags": {"team": "x"}}, TARGET)
    assert made.physical_id == "/Stack-Flag"
    assert made.attributes == {
        "Type": "String",
        "Value": "on",
        "Arn": f"arn:aws:ssm:us-east-1:{A1}:parameter/Stack-Flag",
    }
    with pytest.raises(ProviderError) as caught:
        params.create(clients, "Flag", "AWS::SSM::Parameter", {"Value": "on"}, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    updated = params.update(
        clients,
        ref("AWS::SSM::Parameter", "/Stack-Flag", {"Value": "on", "Tags": {"team": "x"}}),
        {"Value": "off"},
        TARGET,
    )
    assert updated.attributes["Value"] == "off"
    ssm = moto("ssm")
    assert ssm.get_parameter(Name="/Stack-Flag")["Parameter"]["Value"] == "off"
    assert ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId="/Stack-Flag")["TagList"] == []
    assert params.read(clients, ref("AWS::SSM::Parameter", "/Stack-Flag", {}))["Value"] == "off"

    groups = DEPLOY_REGISTRY["AWS::Logs::LogGroup"]
    made = groups.create(clients, "Logs", "AWS::Logs::LogGroup", {"RetentionInDays": 7}, TARGET)
    assert made.physical_id == "/cdkd/Stack-Logs"
    logs = moto("logs")
    assert logs.describe_log_groups(logGroupNamePrefix="/cdkd/")["logGroups"][0]["retentionInDays"] == 7
    with pytest.raises(ProviderError) as caught:
        groups.create(clients, "Logs", "AWS::Logs::LogGroup", {}, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    groups.update(clients, ref("AWS::Logs::LogGroup", made.physical_id, {"RetentionInDays": 7}), {}, TARGET)
    assert "retentionInDays" not in logs.describe_log_groups(logGroupNamePrefix="/cdkd/")["logGroups"][0]


# -- Cloud Control through botocore's Stubber (moto has no Cloud Control) ---------------------


class StubClients:
    def __init__(self, client: Any) -> None:
        self.client = client

    def __call__(self, service: str, region: str) -> Any:
        assert service == "cloudcontrol"
        return self.client


def _cc():
    client = boto3.client("cloudcontrol", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def test_cloud_control_create_polls_and_records_the_model():
    client, stub = _cc()
    stub.add_response(
        "create_resource",
        {"ProgressEvent": {"OperationStatus": "IN_PROGRESS", "RequestToken": "t1"}},
        {"TypeName": "AWS::Events::Rule", "DesiredState": json.dumps({"ScheduleExpression": "rate(1 hour)"})},
    )
    stub.add_response(
        "get_resource_request_status",
        {
            "ProgressEvent": {
                "OperationStatus": "SUCCESS",
                "RequestToken": "t1",
                "Identifier": "Stack-Rule",
                "ResourceModel": json.dumps(
                    {"Arn": f"arn:aws:events:us-east-1:{A1}:rule/Stack-Rule", "Name": "Stack-Rule"}
                ),
            }
        },
        {"RequestToken": "t1"},
    )
    provider = CloudControlProvider(sleep=lambda s: None)
    with stub:
        made = provider.create(
            StubClients(client),
            "Rule",
            "AWS::Events::Rule",
            {"ScheduleExpression": "rate(1 hour)", "Description": None},
            TARGET,
        )
        stub.assert_no_pending_responses()
    assert made.physical_id == "Stack-Rule"
    assert made.attributes == {"Arn": f"arn:aws:events:us-east-1:{A1}:rule/Stack-Rule", "Name": "Stack-Rule"}


def test_cloud_control_update_sends_a_top_level_patch_and_skips_an_empty_one():
    old = {"ScheduleExpression": "rate(1 hour)", "Description": "d", "State": "ENABLED"}
    new = {"ScheduleExpression": "rate(2 hours)", "State": "ENABLED", "Name": "n/x"}
    patch = patch_document(old, new)
    assert patch == [
        {"op": "replace", "path": "/ScheduleExpression", "value": "rate(2 hours)"},
        {"op": "add", "path": "/Name", "value": "n/x"},
        {"op": "remove", "path": "/Description"},
    ]
    client, stub = _cc()
    stub.add_response(
        "update_resource",
        {"ProgressEvent": {"OperationStatus": "SUCCESS", "RequestToken": "t2", "Identifier": "Stack-Rule"}},
        {"TypeName": "AWS::Events::Rule", "Identifier": "Stack-Rule", "PatchDocument": json.dumps(patch)},
    )
    provider = CloudControlProvider(sleep=lambda s: None)
    r = ResourceRef("Rule", "AWS::Events::Rule", "Stack-Rule", old, {}, "us-east-1", A1, "cc-api")
    with stub:
        result = provider.update(StubClients(client), r, new, TARGET)
        assert provider.update(StubClients(client), r, dict(old), TARGET).physical_id == "Stack-Rule"  # no call
        stub.assert_no_pending_responses()
    assert result.physical_id == "Stack-Rule" and result.attributes is None


def test_cloud_control_create_failure_names_the_code():
    client, stub = _cc()
    stub.add_response(
        "create_resource",
        {
            "ProgressEvent": {
                "OperationStatus": "FAILED",
                "RequestToken": "t3",
                "ErrorCode": "AlreadyExists",
                "StatusMessage": "taken",
            }
        },
        {"TypeName": "AWS::Events::Rule", "DesiredState": "{}"},
    )
    with stub, pytest.raises(ProviderError) as caught:
        CloudControlProvider(sleep=lambda s: None).create(StubClients(client), "Rule", "AWS::Events::Rule", {}, TARGET)
    assert caught.value.aws_code == "AlreadyExists" and "taken" in str(caught.value)


def test_cloud_control_read_is_the_resource_model():
    client, stub = _cc()
    stub.add_response(
        "get_resource",
        {
            "TypeName": "AWS::Events::Rule",
            "ResourceDescription": {"Identifier": "Stack-Rule", "Properties": json.dumps({"State": "ENABLED"})},
        },
        {"TypeName": "AWS::Events::Rule", "Identifier": "Stack-Rule"},
    )
    r = ResourceRef("Rule", "AWS::Events::Rule", "Stack-Rule", {}, {}, "us-east-1", A1, "cc-api")
    with stub:
        assert CloudControlProvider().read(StubClients(client), r) == {"State": "ENABLED"}


TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}
ALLOW = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}


@pytest.mark.integration
def test_role_and_inline_policy(clients, moto):
    roles = DEPLOY_REGISTRY["AWS::IAM::Role"]
    props = {"AssumeRolePolicyDocument": TRUST, "Policies": [{"PolicyName": "inline", "PolicyDocument": ALLOW}]}
    made = roles.create(clients, "FnRole", "AWS::IAM::Role", props, TARGET)
    assert made.physical_id == "Stack-FnRole"
    assert made.attributes["Arn"] == f"arn:aws:iam::{A1}:role/Stack-FnRole" and made.attributes["RoleId"]
    iam = moto("iam")
    assert iam.list_role_policies(RoleName="Stack-FnRole")["PolicyNames"] == ["inline"]
    with pytest.raises(ProviderError) as caught:
        roles.create(clients, "FnRole", "AWS::IAM::Role", props, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    # a supplied name is sanitized without the stack prefix (Pattern B)
    named = roles.create(
        clients, "Other", "AWS::IAM::Role", {"RoleName": "my_role", "AssumeRolePolicyDocument": TRUST}, TARGET
    )
    assert named.physical_id == "my-role"

    managed = iam.create_policy(PolicyName="mp", PolicyDocument=json.dumps(ALLOW))["Policy"]["Arn"]
    new = {"AssumeRolePolicyDocument": TRUST, "ManagedPolicyArns": [managed], "Description": "d"}
    roles.update(clients, ref("AWS::IAM::Role", made.physical_id, props), new, TARGET)
    assert iam.list_role_policies(RoleName="Stack-FnRole")["PolicyNames"] == []
    assert [p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName="Stack-FnRole")["AttachedPolicies"]] == [
        managed
    ]
    assert iam.get_role(RoleName="Stack-FnRole")["Role"]["Description"] == "d"
    observed = roles.read(clients, ref("AWS::IAM::Role", made.physical_id, new))
    assert observed["ManagedPolicyArns"] == [managed] and observed["AssumeRolePolicyDocument"] == TRUST

    policies = DEPLOY_REGISTRY["AWS::IAM::Policy"]
    pprops = {"PolicyDocument": ALLOW, "Roles": ["Stack-FnRole"]}
    pol = policies.create(clients, "FnPolicy", "AWS::IAM::Policy", pprops, TARGET)
    assert pol.physical_id == "Stack-FnPolicy" and pol.attributes == {"PolicyName": "Stack-FnPolicy"}
    assert iam.list_role_policies(RoleName="Stack-FnRole")["PolicyNames"] == ["Stack-FnPolicy"]
    policies.update(
        clients,
        ref("AWS::IAM::Policy", pol.physical_id, pprops),
        {"PolicyDocument": ALLOW, "Roles": ["my-role"]},
        TARGET,
    )
    assert iam.list_role_policies(RoleName="Stack-FnRole")["PolicyNames"] == []
    assert iam.list_role_policies(RoleName="my-role")["PolicyNames"] == ["Stack-FnPolicy"]
    with pytest.raises(ProviderError):
        policies.create(clients, "Lonely", "AWS::IAM::Policy", {"PolicyDocument": ALLOW}, TARGET)


@pytest.mark.integration
def test_managed_policy(clients, moto):
    iam = moto("iam")
    iam.create_role(RoleName="mp-role", AssumeRolePolicyDocument=json.dumps(TRUST))
    p = DEPLOY_REGISTRY["AWS::IAM::ManagedPolicy"]
    made = p.create(clients, "Mp", "AWS::IAM::ManagedPolicy", {"PolicyDocument": ALLOW, "Roles": ["mp-role"]}, TARGET)
    assert made.physical_id == f"arn:aws:iam::{A1}:policy/Stack-Mp" and made.attributes == {
        "PolicyArn": made.physical_id
    }
    assert [a["PolicyArn"] for a in iam.list_attached_role_policies(RoleName="mp-role")["AttachedPolicies"]] == [
        made.physical_id
    ]
    with pytest.raises(ProviderError) as caught:
        p.create(clients, "Mp", "AWS::IAM::ManagedPolicy", {"PolicyDocument": ALLOW}, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    deny = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "s3:*", "Resource": "*"}]}
    for _ in range(6):  # more new documents than IAM keeps versions of
        current = p.read(clients, ref("AWS::IAM::ManagedPolicy", made.physical_id, {}))["PolicyDocument"]
        nxt = deny if current == ALLOW else ALLOW
        p.update(
            clients,
            ref("AWS::IAM::ManagedPolicy", made.physical_id, {"PolicyDocument": current, "Roles": ["mp-role"]}),
            {"PolicyDocument": nxt},
            TARGET,
        )
    assert len(iam.list_policy_versions(PolicyArn=made.physical_id)["Versions"]) == 5
    assert iam.list_attached_role_policies(RoleName="mp-role")["AttachedPolicies"] == []


@pytest.mark.integration
def test_bucket_subset_with_the_sample_records_attribute_names(clients, moto):
    p = DEPLOY_REGISTRY["AWS::S3::Bucket"]
    props = {
        "BucketName": "deploy-bucket-xyz",
        "VersioningConfiguration": {"Status": "Enabled"},
        "Tags": [{"Key": "a", "Value": "1"}],
    }
    made = p.create(clients, "Bucket83908E77", "AWS::S3::Bucket", props, TARGET)
    assert made.physical_id == "deploy-bucket-xyz"
    # the attributes cdkd 0.284.40 recorded for this very bucket (deploy-written-DeployStack-state.json)
    assert made.attributes == {
        "Arn": "arn:aws:s3:::deploy-bucket-xyz",
        "DomainName": "deploy-bucket-xyz.s3.amazonaws.com",
        "DualStackDomainName": "deploy-bucket-xyz.s3.dualstack.us-east-1.amazonaws.com",
        "RegionalDomainName": "deploy-bucket-xyz.s3.us-east-1.amazonaws.com",
        "WebsiteURL": "http://deploy-bucket-xyz.s3-website-us-east-1.amazonaws.com",
    }
    s3 = moto("s3")
    assert s3.get_bucket_versioning(Bucket="deploy-bucket-xyz")["Status"] == "Enabled"
    with pytest.raises(ProviderError) as caught:
        p.create(clients, "Bucket83908E77", "AWS::S3::Bucket", props, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    p.update(clients, ref("AWS::S3::Bucket", made.physical_id, props), {"BucketName": "deploy-bucket-xyz"}, TARGET)
    assert s3.get_bucket_versioning(Bucket="deploy-bucket-xyz")["Status"] == "Suspended"
    observed = p.read(clients, ref("AWS::S3::Bucket", made.physical_id, {}))
    assert observed["Tags"] == [] and observed["VersioningConfiguration"] == {"Status": "Suspended"}
    # a generated name is lowercased
    gen = p.create(clients, "MyBucket", "AWS::S3::Bucket", {}, TARGET)
    assert gen.physical_id == "stack-mybucket"


@pytest.mark.integration
def test_table_create_update_and_collision(clients, moto):
    p = DEPLOY_REGISTRY["AWS::DynamoDB::Table"]
    props = {
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamViewType": "NEW_IMAGE"},
        "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True},
    }
    made = p.create(clients, "Table", "AWS::DynamoDB::Table", props, TARGET)
    assert made.physical_id == "Stack-Table"
    assert list(made.attributes) == ["Arn", "TableId", "StreamArn", "TableName"]
    assert made.attributes["Arn"] == f"arn:aws:dynamodb:us-east-1:{A1}:table/Stack-Table"
    ddb = moto("dynamodb")
    assert ddb.describe_time_to_live(TableName="Stack-Table")["TimeToLiveDescription"]["TimeToLiveStatus"] == "ENABLED"
    with pytest.raises(ProviderError) as caught:
        p.create(clients, "Table", "AWS::DynamoDB::Table", props, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    new = dict(
        props, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}, Tags=[{"Key": "a", "Value": "1"}]
    )
    p.update(clients, ref("AWS::DynamoDB::Table", made.physical_id, props), new, TARGET)
    backups = ddb.describe_continuous_backups(TableName="Stack-Table")["ContinuousBackupsDescription"]
    assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
    assert ddb.list_tags_of_resource(ResourceArn=made.attributes["Arn"])["Tags"] == [{"Key": "a", "Value": "1"}]


@pytest.mark.integration
def test_function_and_permission(clients, moto):
    iam = moto("iam")
    role = iam.create_role(RoleName="fn-role", AssumeRolePolicyDocument=json.dumps(TRUST))["Role"]["Arn"]
    p = DEPLOY_REGISTRY["AWS::Lambda::Function"]
    code = {"ZipFile": "def handler(e, c):\n    return 1\n"}
    props = {"Code": code, "Handler": "index.handler", "Runtime": "python3.12", "Role": role}
    made = p.create(clients, "Fn", "AWS::Lambda::Function", props, TARGET)
    assert made.physical_id == "Stack-Fn"
    assert made.attributes == {"Arn": f"arn:aws:lambda:us-east-1:{A1}:function:Stack-Fn", "FunctionName": "Stack-Fn"}
    with pytest.raises(ProviderError) as caught:
        p.create(clients, "Fn", "AWS::Lambda::Function", props, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE
    p.update(clients, ref("AWS::Lambda::Function", "Stack-Fn", props), dict(props, Timeout=30, Description="d"), TARGET)
    conf = moto("lambda").get_function(FunctionName="Stack-Fn")["Configuration"]
    assert conf["Timeout"] == 30 and conf["Description"] == "d"

    perms = DEPLOY_REGISTRY["AWS::Lambda::Permission"]
    pprops = {"FunctionName": "Stack-Fn", "Action": "lambda:InvokeFunction", "Principal": "sns.amazonaws.com"}
    perm = perms.create(clients, "Fn.Invoke-Perm", "AWS::Lambda::Permission", pprops, TARGET)
    assert perm.physical_id == "FnInvoke-Perm" and perm.attributes == {"Id": "FnInvoke-Perm"}
    policy = json.loads(moto("lambda").get_policy(FunctionName="Stack-Fn")["Policy"])
    assert [s["Sid"] for s in policy["Statement"]] == ["FnInvoke-Perm"]


@pytest.mark.integration
def test_kms_key_alias_secret_and_bucket_policy(clients, moto):
    keys = DEPLOY_REGISTRY["AWS::KMS::Key"]
    key = keys.create(clients, "Key", "AWS::KMS::Key", {"Description": "k", "EnableKeyRotation": True}, TARGET)
    assert list(key.attributes) == ["Arn", "KeyId"] and key.attributes["KeyId"] == key.physical_id
    kms = moto("kms")
    assert kms.get_key_rotation_status(KeyId=key.physical_id)["KeyRotationEnabled"] is True
    keys.update(
        clients,
        ref("AWS::KMS::Key", key.physical_id, {"Description": "k", "EnableKeyRotation": True}),
        {"Description": "k2"},
        TARGET,
    )
    assert kms.describe_key(KeyId=key.physical_id)["KeyMetadata"]["Description"] == "k2"
    assert kms.get_key_rotation_status(KeyId=key.physical_id)["KeyRotationEnabled"] is False

    aliases = DEPLOY_REGISTRY["AWS::KMS::Alias"]
    alias = aliases.create(
        clients, "Alias", "AWS::KMS::Alias", {"AliasName": "alias/app", "TargetKeyId": key.physical_id}, TARGET
    )
    assert alias.physical_id == "alias/app" and alias.attributes == {}
    with pytest.raises(ProviderError) as caught:
        aliases.create(
            clients, "Alias", "AWS::KMS::Alias", {"AliasName": "alias/app", "TargetKeyId": key.physical_id}, TARGET
        )
    assert caught.value.aws_code == ALREADY_EXISTS_CODE

    secrets = DEPLOY_REGISTRY["AWS::SecretsManager::Secret"]
    spec = {
        "GenerateSecretString": {
            "SecretStringTemplate": '{"user":"app"}',
            "GenerateStringKey": "password",
            "PasswordLength": 20,
        }
    }
    secret = secrets.create(clients, "Db/Secret_1", "AWS::SecretsManager::Secret", spec, TARGET)
    assert secret.attributes == {"Id": secret.physical_id} and ":secret:Stack-Db/Secret_1-" in secret.physical_id
    value = json.loads(moto("secretsmanager").get_secret_value(SecretId=secret.physical_id)["SecretString"])
    assert value["user"] == "app" and len(value["password"]) == 20
    with pytest.raises(ProviderError) as caught:
        secrets.create(clients, "Db/Secret_1", "AWS::SecretsManager::Secret", spec, TARGET)
    assert caught.value.aws_code == ALREADY_EXISTS_CODE

    moto("s3").create_bucket(Bucket="pol-bucket")
    policies = DEPLOY_REGISTRY["AWS::S3::BucketPolicy"]
    doc = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": "arn:aws:s3:::pol-bucket/*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }
    made = policies.create(
        clients, "Pol", "AWS::S3::BucketPolicy", {"Bucket": "pol-bucket", "PolicyDocument": doc}, TARGET
    )
    assert made.physical_id == "pol-bucket" and made.attributes == {}
    assert json.loads(moto("s3").get_bucket_policy(Bucket="pol-bucket")["Policy"]) == doc
    policies.delete(clients, ref("AWS::S3::BucketPolicy", "pol-bucket", {}))
    with pytest.raises(ClientError):
        moto("s3").get_bucket_policy(Bucket="pol-bucket")
