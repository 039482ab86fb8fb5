"""Issue 10's per-type lifecycle (see test_lifecycle.py) for IAM, Lambda, DynamoDB, Secrets
Manager and KMS: deploy, update in place, replace, remove through the `deploy` operation
spec, the record and moto checked after each step.

What a type cannot show:
- AWS::IAM::Policy has no create-only property: its "replacement" is a new PolicyName and a
  move to another role, an in-place update (the physical id is the new name, the old inline
  policy is taken off the old role).
- AWS::Lambda::Permission: every property is create-only, so there is no in-place update;
  its statement id is its logical id, so a create-first replacement finds the id taken and
  refuses as cdkd does (NAMED_REPLACEMENT_COLLISION), changing nothing. A new logical id is
  the way to replace one (test_it_replaces_a_permission_under_a_new_logical_id).
- AWS::KMS::Key has no create-only property; a KeySpec change cannot be made in place and
  fails as CloudFormation fails it, whatever the UpdateReplacePolicy. Deleting a key only
  schedules its deletion: "gone" is the key PendingDeletion.
- moto cannot run a Lambda function: the checks read the function's configuration and code
  hash, never invoke it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.lifecycle import (
    ACCOUNT,
    ASSETS,
    BUCKET,
    LID,
    STATE,
    Case,
    Moto,
    deploy,
    record,
    run_lifecycle,
    sha256_b64,
    write_app,
)
from tests.deploy.lifecycle import bucket as bucket  # noqa: F401,PLC0414 - the fixture
from tests.deploy.test_lifecycle import no_attributes, raises, step_value

pytestmark = pytest.mark.integration

TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}


def role(**props: Any) -> dict[str, Any]:
    return {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": TRUST, **props}}


def statement(action: str) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}]}


def document(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


# --- IAM -------------------------------------------------------------------------------------


def role_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {"Description": step_value(step, "one", "two"), "MaxSessionDuration": 3600}
    if step == "replace":
        props["RoleName"] = "life-role-2"
    return {LID: role(**props)}


def role_live(m: Moto, row: dict[str, Any]) -> str:
    return m("iam").get_role(RoleName=row["physicalId"])["Role"]["Description"]


def role_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("iam").get_role(RoleName=row["physicalId"]), "NoSuchEntity")


def role_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    live = m("iam").get_role(RoleName=row["physicalId"])["Role"]
    return {"Arn": live["Arn"], "RoleId": live["RoleId"]}


def policy_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "PolicyDocument": statement(step_value(step, "sqs:SendMessage", "sqs:ReceiveMessage")),
        "Roles": [{"Ref": "RoleB" if step == "replace" else "RoleA"}],
    }
    if step == "replace":
        props["PolicyName"] = "life-policy-2"
    return {"RoleA": role(), "RoleB": role(), LID: {"Type": "AWS::IAM::Policy", "Properties": props}}


def policy_live(m: Moto, row: dict[str, Any]) -> str:
    role_name = row["properties"]["Roles"][0]
    doc = m("iam").get_role_policy(RoleName=role_name, PolicyName=row["physicalId"])["PolicyDocument"]
    return document(doc)["Statement"][0]["Action"]


def policy_gone(m: Moto, row: dict[str, Any]) -> bool:
    iam = m("iam")
    return all(
        row["physicalId"] not in iam.list_role_policies(RoleName=r)["PolicyNames"] for r in row["properties"]["Roles"]
    )


def managed_policy_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "PolicyDocument": statement(step_value(step, "sqs:SendMessage", "sqs:ReceiveMessage")),
        "Roles": [{"Ref": "RoleA"}],
    }
    if step == "replace":
        props["ManagedPolicyName"] = "life-managed-2"
    return {"RoleA": role(), LID: {"Type": "AWS::IAM::ManagedPolicy", "Properties": props}}


def managed_policy_live(m: Moto, row: dict[str, Any]) -> tuple[str, list[str]]:
    iam = m("iam")
    policy = iam.get_policy(PolicyArn=row["physicalId"])["Policy"]
    version = iam.get_policy_version(PolicyArn=row["physicalId"], VersionId=policy["DefaultVersionId"])
    attached = iam.list_entities_for_policy(PolicyArn=row["physicalId"])["PolicyRoles"]
    return document(version["PolicyVersion"]["Document"])["Statement"][0]["Action"], [r["RoleName"] for r in attached]


def managed_policy_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("iam").get_policy(PolicyArn=row["physicalId"]), "NoSuchEntity")


# --- Lambda ----------------------------------------------------------------------------------

SOURCE = {"deploy": b"def handler(e, c):\n    return 1\n", "update": b"def handler(e, c):\n    return 2\n"}
ASSET_HASH = {"deploy": "a" * 64, "update": "b" * 64, "replace": "b" * 64}


def function_resources(step: str, *, asset: bool = False) -> dict[str, Any]:
    if asset:  # a file asset of the assembly, published to the bootstrap bucket before the run
        code: dict[str, Any] = {"S3Bucket": {"Fn::Sub": ASSETS.replace(ACCOUNT, "${AWS::AccountId}")}}
        code["S3Key"] = f"{ASSET_HASH[step]}.zip"
    else:
        code = {"ZipFile": SOURCE["deploy"].decode()}
    props: dict[str, Any] = {
        "Code": code,
        "Handler": "index.handler",
        "Runtime": "python3.12",
        "Role": {"Fn::GetAtt": ["FnRole", "Arn"]},
        "Timeout": step_value(step, 3, 10),
    }
    if step == "replace":
        props["FunctionName"] = "life-function-2"
    return {"FnRole": role(), LID: {"Type": "AWS::Lambda::Function", "Properties": props, "DependsOn": ["FnRole"]}}


def function_assets(step: str) -> dict[str, dict[str, bytes]]:
    return {ASSET_HASH[step]: {"index.py": SOURCE["update" if step != "deploy" else "deploy"]}}


def function_live(m: Moto, row: dict[str, Any]) -> tuple[int, str]:
    conf = m("lambda").get_function(FunctionName=row["physicalId"])["Configuration"]
    return conf["Timeout"], conf["Role"].rsplit("/", 1)[-1]


def asset_function_live(m: Moto, row: dict[str, Any]) -> tuple[int, bool]:
    """The timeout, and whether the function runs the published asset's bytes."""
    conf = m("lambda").get_function(FunctionName=row["physicalId"])["Configuration"]
    code = row["properties"]["Code"]
    body = m("s3").get_object(Bucket=code["S3Bucket"], Key=code["S3Key"])["Body"].read()
    return conf["Timeout"], conf["CodeSha256"] == sha256_b64(body)


def function_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("lambda").get_function(FunctionName=row["physicalId"]), "ResourceNotFoundException")


def function_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    conf = m("lambda").get_function(FunctionName=row["physicalId"])["Configuration"]
    return {"Arn": conf["FunctionArn"], "FunctionName": row["physicalId"]}


def permission_resources(step: str, lid: str = LID) -> dict[str, Any]:
    function = function_resources("deploy")
    return {
        "FnRole": function["FnRole"],
        "Fn": function[LID],
        "TopicA": {"Type": "AWS::SNS::Topic"},
        "TopicB": {"Type": "AWS::SNS::Topic"},
        lid: {
            "Type": "AWS::Lambda::Permission",
            "Properties": {
                "FunctionName": {"Fn::GetAtt": ["Fn", "Arn"]},
                "Action": "lambda:InvokeFunction",
                "Principal": "sns.amazonaws.com",
                "SourceArn": {"Ref": "TopicB" if step == "replace" else "TopicA"},  # create-only
            },
        },
    }


def statements(m: Moto, function: str) -> dict[str, str]:
    """Statement id -> the source ARN it allows, from the function's resource policy."""
    try:
        policy = json.loads(m("lambda").get_policy(FunctionName=function)["Policy"])
    except m("lambda").exceptions.ResourceNotFoundException:
        return {}
    return {s["Sid"]: s["Condition"]["ArnLike"]["AWS:SourceArn"].rsplit(":", 1)[-1] for s in policy["Statement"]}


def permission_live(m: Moto, row: dict[str, Any]) -> str | None:
    return statements(m, row["properties"]["FunctionName"]).get(row["physicalId"])


def permission_gone(m: Moto, row: dict[str, Any]) -> bool:
    return row["physicalId"] not in statements(m, row["properties"]["FunctionName"])


# --- DynamoDB, Secrets Manager, KMS ---------------------------------------------------------


def table_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": step_value(step, False, True)},
    }
    if step == "replace":
        props["TableName"] = "life-table-2"
    # CDK's default for a table is Retain; Delete so that step 4 deletes it
    resource = {"Type": "AWS::DynamoDB::Table", "Properties": props, "DeletionPolicy": "Delete"}
    return {LID: dict(resource, UpdateReplacePolicy="Delete")}


def table_live(m: Moto, row: dict[str, Any]) -> str:
    backups = m("dynamodb").describe_continuous_backups(TableName=row["physicalId"])["ContinuousBackupsDescription"]
    return backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"]


def table_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("dynamodb").describe_table(TableName=row["physicalId"]), "ResourceNotFoundException")


def table_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    table = m("dynamodb").describe_table(TableName=row["physicalId"])["Table"]
    # moto 5.2.5 answers no TableId, so the row holds null there; AWS always answers one
    return {"Arn": table["TableArn"], "TableId": table.get("TableId"), "TableName": table["TableName"]}


def secret_resources(step: str) -> dict[str, Any]:
    # a generated value: a literal SecretString would be a secret in the record
    props: dict[str, Any] = {
        "Description": step_value(step, "one", "two"),
        "GenerateSecretString": {"PasswordLength": 24, "ExcludePunctuation": True},
    }
    if step == "replace":
        props["Name"] = "life/secret-2"
    return {LID: {"Type": "AWS::SecretsManager::Secret", "Properties": props}}


def secret_live(m: Moto, row: dict[str, Any]) -> tuple[str, int]:
    sm = m("secretsmanager")
    meta = sm.describe_secret(SecretId=row["physicalId"])
    return meta["Description"], len(sm.get_secret_value(SecretId=row["physicalId"])["SecretString"])


def secret_gone(m: Moto, row: dict[str, Any]) -> bool:
    return raises(lambda: m("secretsmanager").describe_secret(SecretId=row["physicalId"]), "ResourceNotFoundException")


def key_resources(step: str) -> dict[str, Any]:
    props: dict[str, Any] = {"Description": step_value(step, "one", "two"), "EnableKeyRotation": step != "deploy"}
    if step == "replace":
        props["KeySpec"] = "RSA_2048"  # immutable: no replacement, the update fails
        props["KeyUsage"] = "SIGN_VERIFY"
    return {LID: {"Type": "AWS::KMS::Key", "Properties": props}}


def key_live(m: Moto, row: dict[str, Any]) -> tuple[str, bool, str]:
    kms = m("kms")
    meta = kms.describe_key(KeyId=row["physicalId"])["KeyMetadata"]
    rotation = kms.get_key_rotation_status(KeyId=row["physicalId"])["KeyRotationEnabled"]
    return meta["Description"], rotation, meta["KeySpec"]


def key_gone(m: Moto, row: dict[str, Any]) -> bool:
    return m("kms").describe_key(KeyId=row["physicalId"])["KeyMetadata"]["KeyState"] == "PendingDeletion"


def key_attributes(m: Moto, row: dict[str, Any]) -> dict[str, Any]:
    meta = m("kms").describe_key(KeyId=row["physicalId"])["KeyMetadata"]
    return {"Arn": meta["Arn"], "KeyId": meta["KeyId"]}


def alias_resources(step: str) -> dict[str, Any]:
    return {
        "KeyA": {"Type": "AWS::KMS::Key"},
        "KeyB": {"Type": "AWS::KMS::Key"},
        LID: {
            "Type": "AWS::KMS::Alias",
            "Properties": {
                "AliasName": "alias/life-2" if step == "replace" else "alias/life",
                "TargetKeyId": {"Ref": step_value(step, "KeyA", "KeyB")},  # mutable: UpdateAlias
            },
        },
    }


def alias_target(m: Moto, name: str) -> str | None:
    aliases = m("kms").list_aliases()["Aliases"]
    return next((a.get("TargetKeyId") for a in aliases if a["AliasName"] == name), None)


def alias_live(m: Moto, row: dict[str, Any]) -> bool:
    return alias_target(m, row["physicalId"]) == row["properties"]["TargetKeyId"]


CASES = [
    Case(
        "iam-role",
        "AWS::IAM::Role",
        role_resources,
        role_live,
        {"deploy": "one", "update": "two", "replace": "two"},
        role_gone,
        role_attributes,
    ),
    Case(
        "iam-policy",
        "AWS::IAM::Policy",
        policy_resources,
        policy_live,
        {"deploy": "sqs:SendMessage", "update": "sqs:ReceiveMessage", "replace": "sqs:ReceiveMessage"},
        policy_gone,
        lambda m, row: {"PolicyName": row["physicalId"]},
        deps=lambda step: ("RoleB",) if step == "replace" else ("RoleA",),
        replace="updated",  # no create-only property: a rename and a move, in place
    ),
    Case(
        "iam-managed-policy",
        "AWS::IAM::ManagedPolicy",
        managed_policy_resources,
        managed_policy_live,
        {
            "deploy": ("sqs:SendMessage", ["LifeStack-RoleA"]),
            "update": ("sqs:ReceiveMessage", ["LifeStack-RoleA"]),
            "replace": ("sqs:ReceiveMessage", ["LifeStack-RoleA"]),
        },
        managed_policy_gone,
        lambda m, row: {"PolicyArn": row["physicalId"]},
        deps=("RoleA",),
    ),
    Case(
        "lambda-function-zipfile",
        "AWS::Lambda::Function",
        function_resources,
        function_live,
        {"deploy": (3, "LifeStack-FnRole"), "update": (10, "LifeStack-FnRole"), "replace": (10, "LifeStack-FnRole")},
        function_gone,
        function_attributes,
        deps=("FnRole",),
    ),
    Case(
        "lambda-function-file-asset",
        "AWS::Lambda::Function",
        lambda step: function_resources(step, asset=True),
        asset_function_live,
        {"deploy": (3, True), "update": (10, True), "replace": (10, True)},
        function_gone,
        function_attributes,
        deps=("FnRole",),
        assets=function_assets,
    ),
    Case(
        "lambda-permission",
        "AWS::Lambda::Permission",
        permission_resources,
        permission_live,
        {"deploy": "LifeStack-TopicA", "replace": "LifeStack-TopicA"},
        permission_gone,
        lambda m, row: {"Id": LID},
        deps=("Fn", "TopicA"),
        update="n/a: every property of a permission is create-only",
        replace="collision",
    ),
    Case(
        "dynamodb-table",
        "AWS::DynamoDB::Table",
        table_resources,
        table_live,
        {"deploy": "DISABLED", "update": "ENABLED", "replace": "ENABLED"},
        table_gone,
        table_attributes,
        stateful=True,
    ),
    Case(
        "secretsmanager-secret",
        "AWS::SecretsManager::Secret",
        secret_resources,
        secret_live,
        {"deploy": ("one", 24), "update": ("two", 24), "replace": ("two", 24)},
        secret_gone,
        lambda m, row: {"Id": row["physicalId"]},
        stateful=True,
    ),
    Case(
        "kms-key",
        "AWS::KMS::Key",
        key_resources,
        key_live,
        {
            "deploy": ("one", False, "SYMMETRIC_DEFAULT"),
            "update": ("two", True, "SYMMETRIC_DEFAULT"),
            "replace": ("two", True, "SYMMETRIC_DEFAULT"),
        },
        key_gone,
        key_attributes,
        replace="refused: KeySpec, KeyUsage cannot change on an existing key",
    ),
    Case(
        "kms-alias",
        "AWS::KMS::Alias",
        alias_resources,
        alias_live,
        {"deploy": True, "update": True, "replace": True},
        lambda m, row: alias_target(m, row["physicalId"]) is None,
        no_attributes,
        deps=lambda step: ("KeyA",) if step == "deploy" else ("KeyB",),
    ),
]


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id) for c in CASES],
)
def test_it_deploys_updates_replaces_and_removes(case, aws, bucket, tmp_path):  # noqa: F811
    run_lifecycle(case, aws, bucket, tmp_path)


def test_it_replaces_a_permission_under_a_new_logical_id(aws, bucket, tmp_path):  # noqa: F811
    """What replacing a permission takes here (its statement id is its logical id): one
    deploy creates the new one and deletes the old one."""
    m = Moto(aws)
    assert deploy(bucket, write_app(tmp_path / "a", permission_resources("deploy"))).status == "succeeded"
    out = deploy(bucket, write_app(tmp_path / "b", permission_resources("replace", lid="Target2")))
    assert out.status == "succeeded", out.summary
    result = out.details["result"]
    assert (result["created"], result["deleted"]) == (["Target2"], [LID])
    rows = record(aws)["resources"]
    assert LID not in rows and rows["Target2"]["physicalId"] == "Target2"
    assert statements(m, rows["Fn"]["attributes"]["Arn"]) == {"Target2": "LifeStack-TopicB"}


def test_it_keeps_the_generated_secret_value_out_of_the_record(aws, bucket, tmp_path):  # noqa: F811
    assert deploy(bucket, write_app(tmp_path / "a", secret_resources("deploy"))).status == "succeeded"
    body = aws.get(ACCOUNT, BUCKET, STATE)
    arn = json.loads(body)["resources"][LID]["physicalId"]
    value = Moto(aws)("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
    assert len(value) == 24 and value.encode() not in body
