"""Issue 12's end-to-end check: one stack of each shape CDK synthesizes, built for real in moto
(through boto3), recorded as cdkd records it (physical ids, including the composite ones,
attributes, dependencies, DeletionPolicy, provisionedBy), then destroyed by the real runner
(`Destroy()`: the real providers behind every seam) until nothing is left in moto and the
record is gone.

Two stand-ins, because moto cannot do these things:
- moto cannot run Lambda code, so the auto-delete-objects custom resource's handler is the
  local stand-in of tests/integration/test_custom_resources.py, put in the provider's `invoke`
  seam: it empties the bucket as CDK's handler does and PUTs its answer to the real pre-signed
  URL; the placeholder, GetFunction, polling and cleanup are the provider's own.
- moto leaves a deleted NAT gateway's network interface behind (AWS removes it), so the VPC
  stack's "nothing left" is counted over the types the stack records, and a NAT gateway in
  state `deleted` (AWS lists those for an hour too) counts as gone.

The per-type cases at the end delete every EC2 networking type once for real and again for
"not-found", and show the plan's skip for a composite id that does not decode.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest
from botocore.exceptions import ClientError

from engine.backend import StateBucket
from engine.destroy import Destroy
from engine.keys import KeyLayout
from engine.operations import Context, Plan
from engine.providers import REGISTRY, Clients, ResourceRef, custom, delete_resource, ec2_network, provider_for
from engine.providers.base import COMPOSITE_ID_SKIP_REASON
from tests.integration.test_custom_resources import Handler

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
# moto does not load AWS's managed policies (MOTO_IAM_LOAD_MANAGED_POLICIES): the stand-in for
# AWSLambdaBasicExecutionRole is an account policy made once per test, outside every stack.
BASIC_EXECUTION = f"arn:aws:iam::{ACCOUNT}:policy/service-role/AWSLambdaBasicExecutionRole"
TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}
GONE_CODES = (
    "NoSuchBucket", "NoSuchEntity", "ResourceNotFoundException", "DBInstanceNotFound", "DBInstanceNotFoundFault",
    "InvalidVpcID.NotFound", "InvalidSubnetID.NotFound", "InvalidRouteTableID.NotFound", "InvalidGroup.NotFound",
    "InvalidInternetGatewayID.NotFound", "InvalidAllocationID.NotFound", "404",
)  # fmt: skip


# --- the record, as cdkd writes it -------------------------------------------------------------


def row(
    rtype: str,
    physical_id: str,
    properties: dict | None = None,
    *,
    attributes: dict | None = None,
    deps: list[str] | None = None,
    policy: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"physicalId": physical_id, "resourceType": rtype, "properties": properties or {}}
    if attributes:
        body["attributes"] = attributes
    if deps:
        body["dependencies"] = deps
    if policy:
        body["deletionPolicy"] = policy
        body["updateReplacePolicy"] = policy
    body["provisionedBy"] = "sdk"
    return body


def state_key(stack: str) -> str:
    return f"cdkd/{stack}/{REGION}/state.json"


def write_record(aws, stack: str, resources: dict[str, Any]) -> dict[str, Any]:
    record = {
        "version": 11,
        "stackName": stack,
        "region": REGION,
        "resources": resources,
        "outputs": {},
        "lastModified": 1_700_000_000_000,
    }
    aws.put(ACCOUNT, BUCKET, state_key(stack), json.dumps(record, indent=2))
    return record


def stored(aws, stack: str) -> dict[str, Any] | None:
    try:
        return json.loads(aws.get(ACCOUNT, BUCKET, state_key(stack)))
    except ClientError:
        return None


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


@pytest.fixture
def m(aws):
    """Setup and inspection clients straight to moto (not through the proxy)."""
    session = aws.account_session(ACCOUNT)
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            made[service] = session.client(service, region_name=REGION, endpoint_url=aws.moto.url)
        return made[service]

    return client


def context(bucket: StateBucket, stack: str, **params: Any) -> Context:
    params.setdefault("concurrency", 2)
    return Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack=stack,
        region=REGION,
        params=params,
        operation_id=f"op-destroy-{stack}",
        person="alice",
    )


def destroy(bucket: StateBucket, stack: str, **params: Any) -> tuple[Plan, Any]:
    spec, ctx = Destroy(), context(bucket, stack, **params)
    plan = spec.plan(ctx)
    return plan, spec.execute(ctx, Plan.from_json(plan.as_json()))


def gone(call: Any) -> bool:
    try:
        call()
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        assert code in GONE_CODES, f"unexpected {code}"
        return True
    return False


def all_deleted(outcome: Any, count: int) -> None:
    assert outcome.status == "succeeded", outcome.summary
    assert outcome.details["counts"] == {"deleted": count, "retained": 0, "skipped": 0, "failed": 0, "unverified": 0}


def zipped() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("index.py", "def handler(event, context):\n    return None\n")
    return buf.getvalue()


def lambda_with_role(m, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A CDK `lambda.Function`: its ServiceRole (basic execution attached), the DefaultPolicy
    CDK adds for a grant, and the function. (role, function) answers."""
    iam = m("iam")
    try:
        iam.get_policy(PolicyArn=BASIC_EXECUTION)
    except ClientError:
        logs = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "logs:*", "Resource": "*"}]}
        document = json.dumps(logs)
        iam.create_policy(PolicyName="AWSLambdaBasicExecutionRole", Path="/service-role/", PolicyDocument=document)
    role = iam.create_role(RoleName=f"{name}-ServiceRole", AssumeRolePolicyDocument=json.dumps(TRUST))["Role"]
    iam.attach_role_policy(RoleName=role["RoleName"], PolicyArn=BASIC_EXECUTION)
    policy_doc = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_role_policy(
        RoleName=role["RoleName"], PolicyName=f"{name}DefaultPolicy", PolicyDocument=json.dumps(policy_doc)
    )
    fn = m("lambda").create_function(
        FunctionName=name, Runtime="python3.12", Role=role["Arn"], Handler="index.handler", Code={"ZipFile": zipped()}
    )
    return role | {"PolicyDocument": policy_doc}, fn


def lambda_rows(prefix: str, role: dict[str, Any], fn: dict[str, Any]) -> dict[str, Any]:
    return {
        f"{prefix}ServiceRole": row(
            "AWS::IAM::Role",
            role["RoleName"],
            {"AssumeRolePolicyDocument": TRUST, "ManagedPolicyArns": [BASIC_EXECUTION]},
            attributes={"Arn": role["Arn"], "RoleId": role["RoleId"]},
        ),
        f"{prefix}ServiceRoleDefaultPolicy": row(
            "AWS::IAM::Policy",
            f"{fn['FunctionName']}DefaultPolicy",
            {
                "PolicyName": f"{fn['FunctionName']}DefaultPolicy",
                "PolicyDocument": role["PolicyDocument"],
                "Roles": [role["RoleName"]],
            },
            deps=[f"{prefix}ServiceRole"],
        ),
        prefix: row(
            "AWS::Lambda::Function",
            fn["FunctionName"],
            {"Role": role["Arn"], "Handler": "index.handler", "Runtime": "python3.12"},
            attributes={"Arn": fn["FunctionArn"]},
            deps=[f"{prefix}ServiceRole", f"{prefix}ServiceRoleDefaultPolicy"],
        ),
    }


# --- 1. a bucket with autoDeleteObjects ------------------------------------------------------------------


def test_it_destroys_a_cdk_bucket_with_auto_delete_objects_to_nothing(aws, bucket, m, monkeypatch):
    stand_in = Handler(aws)  # see the module docstring: moto cannot run the handler's code
    monkeypatch.setattr(custom.PROVIDER, "invoke", stand_in)
    stack, data = "Assets", "assets-databucket-1a2b3c"
    s3 = aws.s3(ACCOUNT)
    aws.make_bucket(ACCOUNT, data)
    tags = [{"Key": "aws-cdk:auto-delete-objects", "Value": "true"}]
    s3.put_bucket_tagging(Bucket=data, Tagging={"TagSet": tags})
    for n in range(3):
        s3.put_object(Bucket=data, Key=f"site/{n}.html", Body=b"v1")
        s3.put_object(Bucket=data, Key=f"site/{n}.html", Body=b"v2")
    role, fn = lambda_with_role(m, "Assets-CustomS3AutoDeleteObjectsHandler")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": role["Arn"]}, "Action": ["s3:DeleteObject*", "s3:List*"],
             "Resource": [f"arn:aws:s3:::{data}", f"arn:aws:s3:::{data}/*"]},
        ],
    }  # fmt: skip
    s3.put_bucket_policy(Bucket=data, Policy=json.dumps(policy))
    resources = {
        **lambda_rows("CustomS3AutoDeleteObjectsCustomResourceProviderHandler", role, fn),
        "DataBucket": row(
            "AWS::S3::Bucket",
            data,
            {"Tags": tags},
            attributes={"Arn": f"arn:aws:s3:::{data}"},
            policy="Delete",
        ),
        "DataBucketPolicy": row(
            "AWS::S3::BucketPolicy", data, {"Bucket": data, "PolicyDocument": policy}, deps=["DataBucket"]
        ),
        "DataBucketAutoDeleteObjectsCustomResource": row(
            "Custom::S3AutoDeleteObjects",
            "assets-databucket-autodelete-7f3e",
            {"ServiceToken": fn["FunctionArn"], "BucketName": data},
            deps=["DataBucket", "DataBucketPolicy", "CustomS3AutoDeleteObjectsCustomResourceProviderHandler"],
            policy="Delete",
        ),
    }
    write_record(aws, stack, resources)

    plan, outcome = destroy(bucket, stack)

    assert {r["action"] for r in plan.data["rows"].values()} == {"delete"}
    all_deleted(outcome, 6)
    assert stored(aws, stack) is None
    [request] = stand_in.requests  # the Delete went to the handler once, before the bucket
    assert request["RequestType"] == "Delete" and request["ResourceProperties"]["BucketName"] == data
    assert gone(lambda: s3.head_bucket(Bucket=data))
    assert gone(lambda: m("iam").get_role(RoleName=role["RoleName"]))
    assert gone(lambda: m("lambda").get_function(FunctionName=fn["FunctionName"]))


# --- 2. a Lambda with a role -------------------------------------------------------------------------------


def test_it_destroys_a_cdk_function_with_its_role_and_policy_to_nothing(aws, bucket, m):
    stack = "Api"
    role, fn = lambda_with_role(m, "Api-Handler886CB40B")
    write_record(aws, stack, lambda_rows("Handler", role, fn))

    plan, outcome = destroy(bucket, stack)

    # The function first, then its policy, then the role (the record's own edges).
    assert plan.data["levels"] == [["Handler"], ["HandlerServiceRoleDefaultPolicy"], ["HandlerServiceRole"]]
    all_deleted(outcome, 3)
    assert stored(aws, stack) is None
    assert gone(lambda: m("lambda").get_function(FunctionName=fn["FunctionName"]))
    assert gone(lambda: m("iam").get_role(RoleName=role["RoleName"]))
    assert m("iam").get_policy(PolicyArn=BASIC_EXECUTION)["Policy"]["AttachmentCount"] == 0  # detached, not deleted


# --- 3. a VPC with an internet gateway (and a NAT gateway) ----------------------------------------------------


def build_vpc(m) -> tuple[dict[str, Any], dict[str, str]]:
    """`new ec2.Vpc(this, 'Vpc', {maxAzs: 1, natGateways: 1})` plus a security group: the rows
    as cdkd records them, and the AWS ids by kind for the "nothing left" count."""
    ec2 = m("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    ids: dict[str, str] = {"vpc": vpc, "igw": igw}
    rows: dict[str, Any] = {
        "Vpc8378EB38": row(
            "AWS::EC2::VPC", vpc, {"CidrBlock": "10.0.0.0/16", "EnableDnsHostnames": True},
            attributes={"VpcId": vpc, "CidrBlock": "10.0.0.0/16"},
        ),
        "VpcIGWD7BA715C": row("AWS::EC2::InternetGateway", igw, {}, attributes={"InternetGatewayId": igw}),
        "VpcVPCGWBF912B6E": row(
            "AWS::EC2::VPCGatewayAttachment", f"{igw}|{vpc}", {"VpcId": vpc, "InternetGatewayId": igw},
            deps=["Vpc8378EB38", "VpcIGWD7BA715C"],
        ),
    }  # fmt: skip
    for kind, cidr in (("Public", "10.0.0.0/17"), ("Private", "10.0.128.0/17")):
        lid = f"Vpc{kind}Subnet1"
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        assoc = ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)["AssociationId"]
        ids |= {f"{kind}Subnet": subnet, f"{kind}Table": table}
        rows[f"{lid}Subnet"] = row(
            "AWS::EC2::Subnet", subnet, {"VpcId": vpc, "CidrBlock": cidr, "AvailabilityZone": f"{REGION}a"},
            attributes={"SubnetId": subnet}, deps=["Vpc8378EB38"],
        )  # fmt: skip
        rows[f"{lid}RouteTable"] = row(
            "AWS::EC2::RouteTable", table, {"VpcId": vpc}, attributes={"RouteTableId": table}, deps=["Vpc8378EB38"]
        )
        rows[f"{lid}RouteTableAssociation"] = row(
            "AWS::EC2::SubnetRouteTableAssociation", assoc, {"RouteTableId": table, "SubnetId": subnet},
            deps=[f"{lid}RouteTable", f"{lid}Subnet"],
        )  # fmt: skip
    public_table, private_table = ids["PublicTable"], ids["PrivateTable"]
    ec2.create_route(RouteTableId=public_table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    rows["VpcPublicSubnet1DefaultRoute"] = row(
        "AWS::EC2::Route", f"{public_table}|0.0.0.0/0",
        {"RouteTableId": public_table, "DestinationCidrBlock": "0.0.0.0/0", "GatewayId": igw},
        deps=["VpcPublicSubnet1RouteTable", "VpcIGWD7BA715C", "VpcVPCGWBF912B6E"],
    )  # fmt: skip
    eip = ec2.allocate_address(Domain="vpc")
    nat = ec2.create_nat_gateway(SubnetId=ids["PublicSubnet"], AllocationId=eip["AllocationId"])["NatGateway"]
    ids |= {"eip": eip["AllocationId"], "nat": nat["NatGatewayId"]}
    rows["VpcPublicSubnet1EIP"] = row(
        "AWS::EC2::EIP", f"{eip['PublicIp']}|{eip['AllocationId']}", {"Domain": "vpc"},
        attributes={"AllocationId": eip["AllocationId"], "PublicIp": eip["PublicIp"]},
    )  # fmt: skip
    rows["VpcPublicSubnet1NATGateway"] = row(
        "AWS::EC2::NatGateway", nat["NatGatewayId"],
        {"SubnetId": ids["PublicSubnet"], "AllocationId": eip["AllocationId"]},
        deps=["VpcPublicSubnet1EIP", "VpcPublicSubnet1Subnet", "VpcPublicSubnet1DefaultRoute",
              "VpcPublicSubnet1RouteTableAssociation"],
    )  # fmt: skip
    ec2.create_route(RouteTableId=private_table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat["NatGatewayId"])
    rows["VpcPrivateSubnet1DefaultRoute"] = row(
        "AWS::EC2::Route", f"{private_table}|0.0.0.0/0",
        {"RouteTableId": private_table, "DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": nat["NatGatewayId"]},
        deps=["VpcPrivateSubnet1RouteTable", "VpcPublicSubnet1NATGateway"],
    )  # fmt: skip
    sg = ec2.create_security_group(GroupName="Network-AppSg", Description="app", VpcId=vpc)["GroupId"]
    ids["sg"] = sg
    rows["AppSgA1B2C3D4"] = row(
        "AWS::EC2::SecurityGroup", sg, {"GroupDescription": "app", "VpcId": vpc},
        attributes={"GroupId": sg, "VpcId": vpc}, deps=["Vpc8378EB38"],
    )  # fmt: skip
    return rows, ids


def vpc_leftovers(m, ids: dict[str, str]) -> dict[str, list[Any]]:
    ec2, vpc = m("ec2"), ids["vpc"]
    by_vpc = [{"Name": "vpc-id", "Values": [vpc]}]
    nats = ec2.describe_nat_gateways(Filter=by_vpc)["NatGateways"]
    return {
        "vpcs": ec2.describe_vpcs(Filters=by_vpc)["Vpcs"],
        "subnets": ec2.describe_subnets(Filters=by_vpc)["Subnets"],
        "route tables": ec2.describe_route_tables(Filters=by_vpc)["RouteTables"],
        "security groups": ec2.describe_security_groups(Filters=by_vpc)["SecurityGroups"],
        "internet gateways": ec2.describe_internet_gateways(
            Filters=[{"Name": "internet-gateway-id", "Values": [ids["igw"]]}]
        )["InternetGateways"],
        "addresses": ec2.describe_addresses(Filters=[{"Name": "allocation-id", "Values": [ids["eip"]]}])["Addresses"],
        "nat gateways": [n for n in nats if n["State"] != "deleted"],
    }


def test_it_destroys_a_cdk_vpc_with_an_internet_gateway_and_a_nat_gateway_to_nothing(aws, bucket, m):
    stack = "Network"
    rows, ids = build_vpc(m)
    assert all(vpc_leftovers(m, ids).values())  # every kind is there before
    write_record(aws, stack, rows)

    plan, outcome = destroy(bucket, stack, concurrency=4)

    assert {lid: r["action"] for lid, r in plan.data["rows"].items()} == dict.fromkeys(rows, "delete")
    all_deleted(outcome, len(rows))
    assert stored(aws, stack) is None
    assert vpc_leftovers(m, ids) == dict.fromkeys(vpc_leftovers(m, ids), [])
    # cdkd's implicit order held: the gateway went after its attachment and the NAT gateway,
    # the subnets after their associations, the VPC last.
    level_of = {lid: n for n, level in enumerate(plan.data["levels"]) for lid in level}
    assert level_of["VpcIGWD7BA715C"] > max(level_of["VpcVPCGWBF912B6E"], level_of["VpcPublicSubnet1NATGateway"])
    assert level_of["VpcPublicSubnet1Subnet"] > level_of["VpcPublicSubnet1RouteTableAssociation"]
    assert level_of["Vpc8378EB38"] == len(plan.data["levels"]) - 1


# --- 4. an RDS instance with DeletionPolicy Snapshot -----------------------------------------------------------


def build_database(m, name: str) -> dict[str, Any]:
    """`new rds.DatabaseInstance(..., {removalPolicy: SNAPSHOT})` in an imported VPC: its
    generated secret, its security group and the instance."""
    ec2, sm = m("ec2"), m("secretsmanager")
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]  # outside the stack (fromLookup)
    sg = ec2.create_security_group(GroupName=f"{name}-sg", Description="db", VpcId=vpc)["GroupId"]
    secret = sm.create_secret(Name=f"{name}Secret", SecretString='{"username":"postgres","password":"pw-123456"}')
    m("rds").create_db_instance(
        DBInstanceIdentifier=name, Engine="postgres", DBInstanceClass="db.t3.micro", AllocatedStorage=20,
        MasterUsername="postgres", MasterUserPassword="pw-123456", VpcSecurityGroupIds=[sg],
    )  # fmt: skip
    resolve = f"{{{{resolve:secretsmanager:{secret['ARN']}:SecretString:password::}}}}"
    return {
        "DatabaseSecret3B817195": row(
            "AWS::SecretsManager::Secret", secret["ARN"], {"Name": f"{name}Secret"}, policy="Delete"
        ),
        "DatabaseSecurityGroup5C91FDCB": row(
            "AWS::EC2::SecurityGroup", sg, {"GroupDescription": "db", "VpcId": vpc}, attributes={"GroupId": sg}
        ),
        "DatabaseB269D8BB": row(
            "AWS::RDS::DBInstance",
            name,
            {"Engine": "postgres", "DBInstanceClass": "db.t3.micro", "MasterUsername": "postgres",
             "MasterUserPassword": resolve, "VPCSecurityGroups": [sg]},
            attributes={"Endpoint.Port": "5432"},
            deps=["DatabaseSecret3B817195", "DatabaseSecurityGroup5C91FDCB"],
            policy="Snapshot",
        ),
    }  # fmt: skip


def final_snapshots(m, name: str) -> list[str]:
    snaps = m("rds").describe_db_snapshots(SnapshotType="manual")["DBSnapshots"]
    return [s["DBSnapshotIdentifier"] for s in snaps if s["DBInstanceIdentifier"] == name]


@pytest.mark.parametrize("skip", [False, True], ids=["final-snapshot", "skip-final-snapshot"])
def test_it_destroys_a_cdk_database_leaving_its_final_snapshot_unless_told_not_to(aws, bucket, m, skip):
    stack, name = "Data", "data-databaseb269d8bb-abc123"
    write_record(aws, stack, build_database(m, name))

    plan, outcome = destroy(bucket, stack, skip_final_snapshot=skip)

    assert plan.data["rows"]["DatabaseB269D8BB"]["action"] == ("delete" if skip else "snapshot")
    all_deleted(outcome, 3)
    assert stored(aws, stack) is None
    assert gone(lambda: m("rds").describe_db_instances(DBInstanceIdentifier=name))
    assert gone(lambda: m("secretsmanager").describe_secret(SecretId=f"{name}Secret"))
    assert (
        m("ec2").describe_security_groups(Filters=[{"Name": "group-name", "Values": [f"{name}-sg"]}])["SecurityGroups"]
        == []
    )
    snapshots = final_snapshots(m, name)
    if skip:
        assert snapshots == []
    else:
        [snapshot] = snapshots  # cdkd's `<base>-final-<yyyymmdd-hhmmss>`
        assert snapshot.startswith(f"{name}-final-") and len(snapshot) == len(name) + len("-final-20260101-120000")


# --- 5. a protected DynamoDB table -----------------------------------------------------------------------------


def test_it_keeps_a_protected_table_unless_asked_to_remove_protection(aws, bucket, m):
    stack, table = "Orders", "Orders-Table-1X2Y3Z"
    ddb = m("dynamodb")
    ddb.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST", DeletionProtectionEnabled=True,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )  # fmt: skip
    arn = ddb.describe_table(TableName=table)["Table"]["TableArn"]
    resources = {
        "Table": row(
            "AWS::DynamoDB::Table", table,
            {"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}], "BillingMode": "PAY_PER_REQUEST",
             "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
             "DeletionProtectionEnabled": True},
            attributes={"Arn": arn}, policy="Delete",
        ),
    }  # fmt: skip
    original = write_record(aws, stack, resources)

    # Not asked: the delete is refused by the guard, which stays on; the table and its row stay.
    plan, outcome = destroy(bucket, stack)

    assert plan.data["options"]["remove_protection"] is False
    assert outcome.status != "succeeded" and outcome.details["counts"]["failed"] == 1
    assert outcome.details["counts"]["deleted"] == 0
    assert ddb.describe_table(TableName=table)["Table"]["DeletionProtectionEnabled"] is True
    assert stored(aws, stack)["resources"] == original["resources"]

    # Asked: the guard comes off, the table goes, and so does the record.
    plan, outcome = destroy(bucket, stack, remove_protection=True)

    assert plan.data["options"]["remove_protection"] is True
    all_deleted(outcome, 1)
    assert stored(aws, stack) is None
    assert gone(lambda: ddb.describe_table(TableName=table))


# --- the EC2 networking provider, type by type -----------------------------------------------------------------


def ref(rtype: str, physical_id: str, **properties: Any) -> ResourceRef:
    return ResourceRef(
        logical_id="Res", resource_type=rtype, physical_id=physical_id, properties=properties,
        region=REGION, account_id=ACCOUNT, provisioned_by="sdk",
    )  # fmt: skip


def _network(m) -> dict[str, str]:
    ec2 = m("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.2.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.2.0.0/24")["Subnet"]["SubnetId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    return {"vpc": vpc, "subnet": subnet, "table": table, "igw": igw}


def _make(rtype: str, m) -> ResourceRef:
    ec2 = m("ec2")
    if rtype == ec2_network.VPC:
        return ref(rtype, ec2.create_vpc(CidrBlock="10.3.0.0/16")["Vpc"]["VpcId"])
    n = _network(m)
    if rtype == ec2_network.SUBNET:
        return ref(rtype, n["subnet"])
    if rtype == ec2_network.ROUTE_TABLE:
        return ref(rtype, n["table"])
    if rtype == ec2_network.ROUTE:
        ec2.attach_internet_gateway(InternetGatewayId=n["igw"], VpcId=n["vpc"])
        ec2.create_route(RouteTableId=n["table"], DestinationCidrBlock="0.0.0.0/0", GatewayId=n["igw"])
        return ref(rtype, f"{n['table']}|0.0.0.0/0")
    if rtype == ec2_network.SUBNET_ROUTE_TABLE_ASSOCIATION:
        return ref(rtype, ec2.associate_route_table(RouteTableId=n["table"], SubnetId=n["subnet"])["AssociationId"])
    if rtype == ec2_network.INTERNET_GATEWAY:
        return ref(rtype, n["igw"])
    if rtype == ec2_network.GATEWAY_ATTACHMENT:
        ec2.attach_internet_gateway(InternetGatewayId=n["igw"], VpcId=n["vpc"])
        return ref(rtype, f"{n['igw']}|{n['vpc']}")
    if rtype == ec2_network.SECURITY_GROUP:
        return ref(rtype, ec2.create_security_group(GroupName="t-sg", Description="t", VpcId=n["vpc"])["GroupId"])
    if rtype == ec2_network.EIP:
        eip = ec2.allocate_address(Domain="vpc")
        return ref(rtype, f"{eip['PublicIp']}|{eip['AllocationId']}")
    eip = ec2.allocate_address(Domain="vpc")
    nat = ec2.create_nat_gateway(SubnetId=n["subnet"], AllocationId=eip["AllocationId"])["NatGateway"]
    return ref(rtype, nat["NatGatewayId"])


def _present(rtype: str, m, r: ResourceRef) -> bool:
    ec2, pid = m("ec2"), r.physical_id
    if rtype == ec2_network.ROUTE:
        table, cidr = pid.split("|")
        routes = ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"][0]["Routes"]
        return any(route.get("DestinationCidrBlock") == cidr for route in routes)
    if rtype == ec2_network.SUBNET_ROUTE_TABLE_ASSOCIATION:
        by_id = [{"Name": "association.route-table-association-id", "Values": [pid]}]
        tables = ec2.describe_route_tables(Filters=by_id)
        return bool(tables["RouteTables"])
    if rtype == ec2_network.GATEWAY_ATTACHMENT:
        igw, vpc = pid.split("|")
        attached = ec2.describe_internet_gateways(InternetGatewayIds=[igw])["InternetGateways"][0]["Attachments"]
        return any(a["VpcId"] == vpc for a in attached)
    if rtype == ec2_network.NAT_GATEWAY:
        return ec2.describe_nat_gateways(NatGatewayIds=[pid])["NatGateways"][0]["State"] != "deleted"
    lookups = {
        ec2_network.VPC: lambda: ec2.describe_vpcs(VpcIds=[pid]),
        ec2_network.SUBNET: lambda: ec2.describe_subnets(SubnetIds=[pid]),
        ec2_network.ROUTE_TABLE: lambda: ec2.describe_route_tables(RouteTableIds=[pid]),
        ec2_network.INTERNET_GATEWAY: lambda: ec2.describe_internet_gateways(InternetGatewayIds=[pid]),
        ec2_network.SECURITY_GROUP: lambda: ec2.describe_security_groups(GroupIds=[pid]),
        ec2_network.EIP: lambda: ec2.describe_addresses(AllocationIds=[pid.split("|")[1]]),
    }
    return not gone(lookups[rtype])


@pytest.mark.parametrize("rtype", ec2_network.TYPES)
def test_it_deletes_each_ec2_network_type_and_a_second_delete_finds_it_gone(aws, m, rtype):
    r = _make(rtype, m)
    assert _present(rtype, m, r)
    clients = Clients(aws.account_session(ACCOUNT))
    assert provider_for(r) is REGISTRY[rtype]  # no longer Cloud Control's (unreachable here)

    assert delete_resource(clients, r) == "deleted"
    assert not _present(rtype, m, r)
    assert delete_resource(clients, r) == "not-found"


@pytest.mark.parametrize(
    ("rtype", "physical_id", "expected"),
    [
        (ec2_network.ROUTE, "rtb-0abc", "<routeTableId>|<destination>"),
        (ec2_network.ROUTE, "rtb-0abc|not-a-cidr", "<routeTableId>|<destination CIDR or prefix list id>"),
        (ec2_network.GATEWAY_ATTACHMENT, "igw-0abc", "<internetGatewayId>|<vpcId>"),
        (ec2_network.EIP, "eip-of-some-kind", "<publicIp>|<allocationId>"),
        (ec2_network.SUBNET_ROUTE_TABLE_ASSOCIATION, "subnet-0abc|rtb-0abc", "rtbassoc-<id>"),
    ],
)
def test_the_plan_skips_a_composite_id_that_does_not_decode_and_the_run_calls_nothing(
    aws, bucket, rtype, physical_id, expected
):
    stack = "Odd"
    write_record(aws, stack, {"Odd": row(rtype, physical_id)})
    aws.reset_counts()

    plan, outcome = destroy(bucket, stack)

    reason = f"{COMPOSITE_ID_SKIP_REASON} (expected {expected})"
    assert plan.data["rows"]["Odd"] == plan.data["rows"]["Odd"] | {"action": "skip", "reason": reason}
    assert outcome.details["counts"]["skipped"] == 1 and outcome.details["counts"]["deleted"] == 0
    assert list(stored(aws, stack)["resources"]) == ["Odd"]
    ec2_calls = {"DeleteRoute", "DetachInternetGateway", "DetachVpnGateway", "ReleaseAddress", "DescribeAddresses",
                 "DisassociateRouteTable"}  # fmt: skip
    assert not ec2_calls & set(aws.proxy.snapshot())  # no EC2 call at all


def test_a_deploy_still_creates_the_network_types_through_cloud_control():
    """The provider only deletes: a deploy's route for these types is unchanged."""
    from engine.providers import CLOUD_CONTROL, deploy_provider_for

    assert {deploy_provider_for(t, None) for t in ec2_network.TYPES} == {CLOUD_CONTROL}
