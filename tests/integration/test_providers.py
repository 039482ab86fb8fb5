"""engine.providers against a real moto server: each SDK type is created in an assumed-role
account, described by a ResourceRef as a cdkd record holds it, deleted through
`delete_resource`, and then looked for in AWS. Setup and checks talk to moto directly; only
the code under test goes through the proxy, so `aws.requests` counts its calls alone."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError

from engine.backend import StateBucket
from engine.providers import (
    CLOUD_CONTROL,
    REGISTRY,
    Clients,
    ProviderError,
    ResourceRef,
    Skip,
    delete_resource,
    provider_for,
)

pytestmark = pytest.mark.integration

A1 = "111111111111"
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
)
POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})


class Moto:
    """Setup/inspection clients in one account, straight to moto (not through the proxy)."""

    def __init__(self, aws: Any, account: str = A1) -> None:
        self.aws = aws
        self.session = aws.account_session(account)
        self._clients: dict[tuple[str, str], Any] = {}

    def __call__(self, service: str, region: str = "us-east-1") -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self.session.client(service, region_name=region, endpoint_url=self.aws.moto.url)
        return self._clients[key]

    def role(self, name: str) -> str:
        return self("iam").create_role(RoleName=name, AssumeRolePolicyDocument=TRUST)["Role"]["Arn"]

    def function(self, name: str) -> str:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("index.py", "def handler(event, context):\n    return 1\n")
        role = self.role(f"{name}-role")
        code = {"ZipFile": buf.getvalue()}
        return self("lambda").create_function(
            FunctionName=name, Runtime="python3.12", Role=role, Handler="index.handler", Code=code
        )["FunctionArn"]


def gone(call: Callable[[], Any], *codes: str) -> bool:
    """True when `call` fails with one of AWS's not-found codes."""
    try:
        call()
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        assert code in codes, f"unexpected {code}"
        return True
    return False


def ref(resource_type: str, physical_id: Any, properties: dict | None = None, **kw: Any) -> ResourceRef:
    kw.setdefault("region", "us-east-1")
    return ResourceRef(
        logical_id=kw.pop("logical_id", "Res"),
        resource_type=resource_type,
        physical_id=physical_id,
        properties=properties or {},
        attributes=kw.pop("attributes", {}),
        region=kw.pop("region"),
        account_id=A1,
        provisioned_by=kw.pop("provisioned_by", "sdk"),
    )


@pytest.fixture
def moto(aws: Any) -> Moto:
    return Moto(aws)


@pytest.fixture
def clients(aws: Any) -> Clients:
    """What the runner would hold: clients of the assumed session, endpoint = the proxy."""
    return Clients(aws.account_session(A1))


# -- one case per SDK type: (make the resource → ResourceRef, is it gone in AWS?) ------------


@dataclass
class Case:
    make: Callable[[Moto], ResourceRef]
    is_gone: Callable[[Moto, ResourceRef], bool]


def _bucket(m: Moto) -> ResourceRef:
    m.aws.make_bucket(A1, "providers-empty-bucket", versioning=False)
    return ref("AWS::S3::Bucket", "providers-empty-bucket", {"BucketName": "providers-empty-bucket"})


def _queue(m: Moto) -> ResourceRef:
    # The URL moto hands out names moto's own port, not the proxy's: the provider must not
    # trust the recorded host, only the account and name in its path.
    url = m("sqs").create_queue(QueueName="providers-q")["QueueUrl"]
    assert url.startswith(m.aws.moto.url)
    return ref("AWS::SQS::Queue", url)


def _topic(m: Moto) -> ResourceRef:
    return ref("AWS::SNS::Topic", m("sns").create_topic(Name="providers-t")["TopicArn"])


def _subscription(m: Moto) -> ResourceRef:
    topic = m("sns").create_topic(Name="providers-sub-t")["TopicArn"]
    queue_arn = f"arn:aws:sqs:us-east-1:{A1}:providers-sub-q"
    m("sqs").create_queue(QueueName="providers-sub-q")
    arn = m("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, ReturnSubscriptionArn=True)[
        "SubscriptionArn"
    ]
    return ref("AWS::SNS::Subscription", arn, {"TopicArn": topic, "Protocol": "sqs", "Endpoint": queue_arn})


def _table(m: Moto) -> ResourceRef:
    m("dynamodb").create_table(
        TableName="providers-table",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return ref("AWS::DynamoDB::Table", "providers-table")


def _role(m: Moto) -> ResourceRef:
    m.role("providers-role")
    return ref("AWS::IAM::Role", "providers-role")


def _inline_policy(m: Moto) -> ResourceRef:
    m.role("providers-pol-role")
    m("iam").create_user(UserName="providers-pol-user")
    m("iam").put_role_policy(RoleName="providers-pol-role", PolicyName="InlinePol", PolicyDocument=POLICY)
    m("iam").put_user_policy(UserName="providers-pol-user", PolicyName="InlinePol", PolicyDocument=POLICY)
    props = {"PolicyName": "InlinePol", "PolicyDocument": json.loads(POLICY)}
    props |= {"Roles": ["providers-pol-role"], "Users": ["providers-pol-user"]}
    return ref("AWS::IAM::Policy", "InlinePol", props)


def _inline_policy_gone(m: Moto, r: ResourceRef) -> bool:
    iam = m("iam")
    role = gone(lambda: iam.get_role_policy(RoleName="providers-pol-role", PolicyName="InlinePol"), "NoSuchEntity")
    user = gone(lambda: iam.get_user_policy(UserName="providers-pol-user", PolicyName="InlinePol"), "NoSuchEntity")
    return role and user


def _managed_policy(m: Moto) -> ResourceRef:
    iam = m("iam")
    arn = iam.create_policy(PolicyName="providers-mp", PolicyDocument=POLICY)["Policy"]["Arn"]
    iam.create_policy_version(PolicyArn=arn, PolicyDocument=POLICY, SetAsDefault=False)
    m.role("providers-mp-role")
    iam.attach_role_policy(RoleName="providers-mp-role", PolicyArn=arn)
    iam.create_group(GroupName="providers-mp-group")
    iam.attach_group_policy(GroupName="providers-mp-group", PolicyArn=arn)
    return ref("AWS::IAM::ManagedPolicy", arn)


def _managed_policy_gone(m: Moto, r: ResourceRef) -> bool:
    iam = m("iam")
    still_attached = iam.list_attached_role_policies(RoleName="providers-mp-role")["AttachedPolicies"]
    still_attached += iam.list_attached_group_policies(GroupName="providers-mp-group")["AttachedPolicies"]
    return gone(lambda: iam.get_policy(PolicyArn=r.physical_id), "NoSuchEntity") and not still_attached


def _function(m: Moto) -> ResourceRef:
    m.function("providers-fn")
    return ref("AWS::Lambda::Function", "providers-fn")


def _permission(m: Moto) -> ResourceRef:
    m.function("providers-perm-fn")
    m("lambda").add_permission(
        FunctionName="providers-perm-fn",
        StatementId="TopicInvoke",
        Action="lambda:InvokeFunction",
        Principal="sns.amazonaws.com",
    )
    # cdkd records the bare statement id and the function in the properties.
    return ref("AWS::Lambda::Permission", "TopicInvoke", {"FunctionName": "providers-perm-fn"})


def _statement_gone(function: str, sid: str) -> Callable[[Moto, ResourceRef], bool]:
    def check(m: Moto, r: ResourceRef) -> bool:
        try:
            policy = json.loads(m("lambda").get_policy(FunctionName=function)["Policy"])
        except ClientError as exc:
            return exc.response["Error"]["Code"] == "ResourceNotFoundException"
        return sid not in [s.get("Sid") for s in policy.get("Statement", [])]

    return check


def _log_group(m: Moto) -> ResourceRef:
    m("logs").create_log_group(logGroupName="/cdkd/providers-lg")
    return ref("AWS::Logs::LogGroup", "/cdkd/providers-lg")


def _parameter(m: Moto) -> ResourceRef:
    m("ssm").put_parameter(Name="/providers/param", Value="v", Type="String")
    return ref("AWS::SSM::Parameter", "/providers/param")


def _secret(m: Moto) -> ResourceRef:
    arn = m("secretsmanager").create_secret(Name="providers-secret", SecretString="s3cr3t")["ARN"]
    return ref("AWS::SecretsManager::Secret", arn)


def _key(m: Moto) -> ResourceRef:
    meta = m("kms").create_key(Description="providers")["KeyMetadata"]
    return ref("AWS::KMS::Key", meta["KeyId"], attributes={"Arn": meta["Arn"], "KeyId": meta["KeyId"]})


def _key_gone(m: Moto, r: ResourceRef) -> bool:
    # A KMS key is never deleted at once: "gone" is scheduled for deletion.
    return m("kms").describe_key(KeyId=r.physical_id)["KeyMetadata"]["KeyState"] == "PendingDeletion"


CASES: dict[str, Case] = {
    "AWS::S3::Bucket": Case(
        _bucket, lambda m, r: gone(lambda: m("s3").head_bucket(Bucket=r.physical_id), "404", "NoSuchBucket")
    ),
    "AWS::SQS::Queue": Case(
        _queue,
        lambda m, r: gone(
            lambda: m("sqs").get_queue_url(QueueName="providers-q"),
            "AWS.SimpleQueueService.NonExistentQueue",
            "QueueDoesNotExist",
        ),
    ),
    "AWS::SNS::Topic": Case(
        _topic, lambda m, r: gone(lambda: m("sns").get_topic_attributes(TopicArn=r.physical_id), "NotFound")
    ),
    "AWS::SNS::Subscription": Case(
        _subscription,
        lambda m, r: gone(lambda: m("sns").get_subscription_attributes(SubscriptionArn=r.physical_id), "NotFound"),
    ),
    "AWS::DynamoDB::Table": Case(
        _table,
        lambda m, r: gone(lambda: m("dynamodb").describe_table(TableName=r.physical_id), "ResourceNotFoundException"),
    ),
    "AWS::IAM::Role": Case(_role, lambda m, r: gone(lambda: m("iam").get_role(RoleName=r.physical_id), "NoSuchEntity")),
    "AWS::IAM::Policy": Case(_inline_policy, _inline_policy_gone),
    "AWS::IAM::ManagedPolicy": Case(_managed_policy, _managed_policy_gone),
    "AWS::Lambda::Function": Case(
        _function,
        lambda m, r: gone(lambda: m("lambda").get_function(FunctionName=r.physical_id), "ResourceNotFoundException"),
    ),
    "AWS::Lambda::Permission": Case(_permission, _statement_gone("providers-perm-fn", "TopicInvoke")),
    "AWS::Logs::LogGroup": Case(
        _log_group,
        lambda m, r: not m("logs").describe_log_groups(logGroupNamePrefix=r.physical_id)["logGroups"],
    ),
    "AWS::SSM::Parameter": Case(
        _parameter, lambda m, r: gone(lambda: m("ssm").get_parameter(Name=r.physical_id), "ParameterNotFound")
    ),
    "AWS::SecretsManager::Secret": Case(
        _secret,
        lambda m, r: gone(
            lambda: m("secretsmanager").describe_secret(SecretId=r.physical_id), "ResourceNotFoundException"
        ),
    ),
    "AWS::KMS::Key": Case(_key, _key_gone),
}


def test_it_has_a_case_for_every_sdk_type():
    # The destroy-side types of issue 12 have theirs in test_providers_destroy_more.py, which
    # checks that the two files together cover REGISTRY.
    assert set(CASES) <= set(REGISTRY)


@pytest.mark.parametrize("resource_type", sorted(CASES))
def test_it_deletes_each_sdk_type_and_then_finds_it_gone(aws, moto, clients, resource_type):
    case = CASES[resource_type]
    r = case.make(moto)
    assert not case.is_gone(moto, r)

    assert delete_resource(clients, r) == "deleted"
    assert case.is_gone(moto, r)

    # Deleting again is how a re-run after a crash finds it: already gone, nothing else done.
    assert delete_resource(clients, r) == "not-found"
    assert case.is_gone(moto, r)


# -- IAM role with everything hanging on it ---------------------------------------------------


def test_it_strips_a_role_of_managed_inline_policies_and_profiles_before_deleting_it(aws, moto, clients):
    iam = moto("iam")
    moto.role("loaded-role")
    managed = iam.create_policy(PolicyName="loaded-mp", PolicyDocument=POLICY)["Policy"]["Arn"]
    iam.attach_role_policy(RoleName="loaded-role", PolicyArn=managed)
    other = iam.create_policy(PolicyName="loaded-mp-2", PolicyDocument=POLICY)["Policy"]["Arn"]
    iam.attach_role_policy(RoleName="loaded-role", PolicyArn=other)
    iam.put_role_policy(RoleName="loaded-role", PolicyName="inline-a", PolicyDocument=POLICY)
    iam.put_role_policy(RoleName="loaded-role", PolicyName="inline-b", PolicyDocument=POLICY)
    iam.create_instance_profile(InstanceProfileName="loaded-profile")
    iam.add_role_to_instance_profile(InstanceProfileName="loaded-profile", RoleName="loaded-role")
    role_arn = iam.get_role(RoleName="loaded-role")["Role"]["Arn"]

    # The record may hold the role's ARN rather than its name: both address it.
    assert delete_resource(clients, ref("AWS::IAM::Role", role_arn)) == "deleted"

    assert gone(lambda: iam.get_role(RoleName="loaded-role"), "NoSuchEntity")
    # What was attached is still there, only detached: the managed policy and the profile
    # are their own resources (their own rows, or not this stack's at all).
    assert iam.get_policy(PolicyArn=managed)["Policy"]["AttachmentCount"] == 0
    assert iam.get_policy(PolicyArn=other)["Policy"]["AttachmentCount"] == 0
    assert iam.get_instance_profile(InstanceProfileName="loaded-profile")["InstanceProfile"]["Roles"] == []


def test_it_deletes_an_inline_policy_named_only_by_its_physical_id(aws, moto, clients):
    moto.role("pid-role")
    moto("iam").put_role_policy(RoleName="pid-role", PolicyName="PidPolicy", PolicyDocument=POLICY)

    r = ref("AWS::IAM::Policy", "PidPolicy", {"PolicyName": "***", "Roles": ["pid-role"]})
    assert delete_resource(clients, r) == "deleted"

    assert moto("iam").list_role_policies(RoleName="pid-role")["PolicyNames"] == []


# -- S3: a non-empty bucket fails as CloudFormation fails it ----------------------------------


def test_it_refuses_a_non_empty_bucket_and_leaves_bucket_and_objects(aws, moto, clients):
    aws.make_bucket(A1, "providers-full-bucket")  # versioned
    aws.put(A1, "providers-full-bucket", "data/a.json", {"a": 1})
    aws.put(A1, "providers-full-bucket", "data/a.json", {"a": 2})  # two versions

    with pytest.raises(ProviderError) as err:
        delete_resource(clients, ref("AWS::S3::Bucket", "providers-full-bucket", logical_id="DataBucket"))

    message = str(err.value)
    assert "bucket not empty (BucketNotEmpty)" in message
    assert "DataBucket" in message and "AWS::S3::Bucket" in message and "providers-full-bucket" in message
    assert err.value.aws_code == "BucketNotEmpty"
    assert aws.requests["DeleteBucket"] == 1
    assert not any(api.startswith("DeleteObject") for api in aws.requests)  # never emptied
    versions = moto("s3").list_object_versions(Bucket="providers-full-bucket")["Versions"]
    assert len(versions) == 2
    assert json.loads(aws.get(A1, "providers-full-bucket", "data/a.json")) == {"a": 2}


# -- DynamoDB: protection -------------------------------------------------------


def test_it_refuses_a_table_with_deletion_protection(aws, moto, clients):
    moto("dynamodb").create_table(
        TableName="guarded-table",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        DeletionProtectionEnabled=True,
    )

    with pytest.raises(ProviderError) as err:
        delete_resource(clients, ref("AWS::DynamoDB::Table", "guarded-table"))

    assert "deletion protection" in str(err.value) and "DeletionProtectionEnabled" in str(err.value)
    assert "guarded-table" in str(err.value)
    assert moto("dynamodb").describe_table(TableName="guarded-table")["Table"]["TableStatus"] == "ACTIVE"


def test_it_refuses_a_snapshot_on_a_type_that_cannot_take_one_without_calling_aws(aws, moto, clients):
    r = _queue(moto)
    assert not provider_for(r).supports_snapshot
    aws.reset_counts()

    with pytest.raises(ProviderError, match="Snapshot"):
        delete_resource(clients, r, snapshot=True)

    assert sum(aws.requests.values()) == 0
    assert moto("sqs").get_queue_url(QueueName="providers-q")["QueueUrl"]


# -- addressing variants ----------------------------------------------------------------------


def test_it_finds_a_queue_from_an_aws_shaped_url_and_in_another_region(aws, moto, clients):
    moto("sqs", "eu-west-1").create_queue(QueueName="far-q.fifo", Attributes={"FifoQueue": "true"})
    recorded = f"https://sqs.eu-west-1.amazonaws.com/{A1}/far-q.fifo"

    assert delete_resource(clients, ref("AWS::SQS::Queue", recorded, region="eu-west-1")) == "deleted"

    assert gone(
        lambda: moto("sqs", "eu-west-1").get_queue_url(QueueName="far-q.fifo"),
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
    )


def test_it_removes_a_permission_recorded_as_function_arn_and_statement(aws, moto, clients):
    fn_arn = moto.function("legacy-perm-fn")
    moto("lambda").add_permission(
        FunctionName="legacy-perm-fn",
        StatementId="Legacy",
        Action="lambda:InvokeFunction",
        Principal="s3.amazonaws.com",
    )

    # Older Cloud Control records: "<functionArn>|<statementId>", no FunctionName property.
    assert delete_resource(clients, ref("AWS::Lambda::Permission", f"{fn_arn}|Legacy")) == "deleted"

    assert _statement_gone("legacy-perm-fn", "Legacy")(moto, None)  # type: ignore[arg-type]


def test_it_counts_a_key_already_pending_deletion_as_not_found(aws, moto, clients):
    key_id = moto("kms").create_key()["KeyMetadata"]["KeyId"]
    first = moto("kms").schedule_key_deletion(KeyId=key_id, PendingWindowInDays=30)["DeletionDate"]

    assert delete_resource(clients, ref("AWS::KMS::Key", key_id)) == "not-found"

    meta = moto("kms").describe_key(KeyId=key_id)["KeyMetadata"]
    assert meta["KeyState"] == "PendingDeletion" and meta["DeletionDate"] == first  # not rescheduled


def test_it_schedules_a_key_with_the_records_pending_window(aws, moto, clients):
    meta = moto("kms").create_key()["KeyMetadata"]

    assert delete_resource(clients, ref("AWS::KMS::Key", meta["Arn"], {"PendingWindowInDays": 21})) == "deleted"

    after = moto("kms").describe_key(KeyId=meta["KeyId"])["KeyMetadata"]
    assert after["KeyState"] == "PendingDeletion"
    assert 20 <= (after["DeletionDate"] - meta["CreationDate"]).days <= 21


def test_it_force_deletes_a_secret_already_in_its_recovery_window(aws, moto, clients):
    sm = moto("secretsmanager")
    arn = sm.create_secret(Name="windowed-secret", SecretString="x")["ARN"]
    sm.delete_secret(SecretId=arn, RecoveryWindowInDays=7)

    assert delete_resource(clients, ref("AWS::SecretsManager::Secret", arn)) == "deleted"

    assert gone(lambda: sm.describe_secret(SecretId=arn), "ResourceNotFoundException")
    # The name is free at once, as after a CloudFormation delete: a redeploy can recreate it.
    assert sm.create_secret(Name="windowed-secret", SecretString="y")["Name"] == "windowed-secret"


def test_it_counts_a_pending_confirmation_subscription_as_deleted_without_calling_aws(aws, clients):
    aws.reset_counts()
    r = ref("AWS::SNS::Subscription", "PendingConfirmation", {"Protocol": "email", "Endpoint": "ops@example.com"})

    assert delete_resource(clients, r) == "deleted"

    assert sum(aws.requests.values()) == 0


# -- rows that cannot be addressed: Skip, and not one AWS call --------------------------------

SKIPS = {
    "no physical id": ref("AWS::SQS::Queue", None),
    "blank physical id": ref("AWS::SNS::Topic", "   "),
    "physical id not a string": ref("AWS::S3::Bucket", 42),
    "redacted physical id": ref("AWS::SSM::Parameter", "***"),
    "permission without function": ref("AWS::Lambda::Permission", "Stmt"),
    "permission with redacted function only": ref("AWS::Lambda::Permission", "Stmt", {"FunctionName": "***"}),
    "permission id without statement": ref("AWS::Lambda::Permission", "my-fn|", {"FunctionName": "my-fn"}),
    "inline policy naming no principal": ref("AWS::IAM::Policy", "Pol", {"PolicyName": "Pol"}),
    "inline policy with no name at all": ref("AWS::IAM::Policy", "arn:aws:iam::1:x", {"Roles": ["r"]}),
    "inline policy roles not a list": ref("AWS::IAM::Policy", "Pol", {"Roles": "role-a"}),
    "inline policy role given as an ARN": ref(
        "AWS::IAM::Policy", "Pol", {"Roles": [f"arn:aws:iam::{A1}:role/r"], "Users": ["u"]}
    ),
    "inline policy secret-derived principals": ref(
        "AWS::IAM::Policy", "Pol", {"Roles": ["{{resolve:secretsmanager:principals:SecretString:role}}"]}
    ),
    "queue id that is no queue URL": ref("AWS::SQS::Queue", "https://example.com/not/a/queue/url"),
    "managed policy id that is no ARN": ref("AWS::IAM::ManagedPolicy", "just-a-name"),
    "custom resource whose ServiceToken is masked": ref("Custom::Thing", "abc", {"ServiceToken": "***"}),
    "cc-api row of a type Cloud Control cannot delete": ref("AWS::CloudFormation::Stack", "s", provisioned_by="cc-api"),
}


@pytest.mark.parametrize("case", sorted(SKIPS))
def test_it_skips_a_row_it_cannot_address_without_calling_aws(aws, clients, case):
    aws.reset_counts()

    with pytest.raises(Skip) as skipped:
        delete_resource(clients, SKIPS[case])

    assert str(skipped.value)  # the reason the runner records
    assert sum(aws.requests.values()) == 0


def test_it_names_type_physical_id_and_code_when_aws_refuses(aws, moto, clients):
    moto.role("denied-role")
    aws.proxy.deny_operation("DeleteRole")

    with pytest.raises(ProviderError) as err:
        delete_resource(clients, ref("AWS::IAM::Role", "denied-role", logical_id="AppRole"))

    message = str(err.value)
    assert err.value.aws_code == "AccessDenied"
    assert "AppRole" in message and "AWS::IAM::Role" in message and "denied-role" in message
    assert "DeleteRole" in message and "AccessDenied" in message
    assert moto("iam").get_role(RoleName="denied-role")["Role"]["RoleName"] == "denied-role"


def test_it_leaves_a_same_named_bucket_of_another_account_alone(aws, moto, clients):
    aws.make_bucket("222222222222", "someone-elses-bucket", versioning=False)

    # The record says this stack's account owns it; S3 (with ExpectedBucketOwner) disagrees.
    assert delete_resource(clients, ref("AWS::S3::Bucket", "someone-elses-bucket")) == "not-found"

    head = aws.s3("222222222222").head_bucket(Bucket="someone-elses-bucket")
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_it_routes_cc_api_rows_and_unknown_types_to_cloud_control():
    assert provider_for(ref("AWS::SQS::Queue", "u", provisioned_by="cc-api")) is CLOUD_CONTROL
    assert provider_for(ref("AWS::EC2::LaunchTemplate", "lt-1")) is CLOUD_CONTROL
    assert provider_for(ref("AWS::SQS::Queue", "u", provisioned_by=None)) is REGISTRY["AWS::SQS::Queue"]
    # Cloud Control cannot delete IAM roles: a cc-api role still goes through IAM.
    assert provider_for(ref("AWS::IAM::Role", "r", provisioned_by="cc-api")) is REGISTRY["AWS::IAM::Role"]


def test_it_destroys_a_stack_holding_every_sdk_type_through_the_runner(aws, moto):
    """The destroy operation itself (plan, lock, ordered deletes, record and events) over one
    stack with a row of every SDK type, each made for real in moto first."""
    from engine.keys import KeyLayout
    from engine.operations import Context, spec_for

    made = {rtype: case.make(moto) for rtype, case in CASES.items()}
    resources = {
        rtype.split("::", 1)[1].replace("::", ""): {
            "physicalId": r.physical_id,
            "resourceType": rtype,
            "properties": r.properties,
            "attributes": r.attributes,
            "provisionedBy": "sdk",
        }
        for rtype, r in made.items()
    }
    aws.make_bucket(A1, f"cdkd-state-{A1}")
    key = "cdkd/Everything/us-east-1/state.json"
    aws.put(
        A1,
        f"cdkd-state-{A1}",
        key,
        {"version": 11, "stackName": "Everything", "region": "us-east-1", "resources": resources, "outputs": {}},
    )
    bucket = StateBucket.open(aws.access(A1), actor="test")
    ctx = Context(
        bucket=bucket, layout=KeyLayout("cdkd"), stack="Everything", region="us-east-1", params={},
        operation_id="every-type", person="test",
    )  # fmt: skip
    spec = spec_for("destroy")

    outcome = spec.execute(ctx, spec.plan(ctx))

    assert outcome.status == "succeeded", outcome.details
    assert outcome.details["counts"]["deleted"] == len(CASES)
    assert aws.etag(A1, f"cdkd-state-{A1}", key) is None
    still_there = [rtype for rtype, r in made.items() if not CASES[rtype].is_gone(moto, r)]
    assert still_there == []
