"""A realistic cdkd world, seeded into S3 (a local moto server) for the demo and the tests.

Three accounts, each the way a real team's state bucket looks after a year of cdkd:
healthy stacks of every schema version across regions, nested stacks, legacy v1 records,
locks in every state, event history, several S3 versions of one record, exports indexes,
ledgers and journals, a record from a newer cdkd, damaged records, and one very big stack.

Everything is deterministic (seeded RNGs); only timestamps follow the clock, so that a
"live" lock is live whenever the demo runs. Bodies are written exactly as cdkd writes them
(`JSON.stringify(value, null, 2)`: 2-space indent, no trailing newline; JSONL compact with a
trailing newline), so what the app reads here is what it would read from a real bucket.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

CDKD_VERSION = "0.290.36"  # what the newest records claim wrote them
SEED = "cdkd-admin-demo"
ROLE_NAME = "cdkd-admin"
BIG_STACK_RESOURCES = 2000
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

JSON_TYPE = "application/json"
NDJSON_TYPE = "application/x-ndjson"


# --------------------------------------------------------------------------------------
# Accounts
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoAccountSpec:
    """One demo account and how the app should be told about it."""

    account_id: str
    name: str
    bucket: str  # the bucket the world is written to
    bucket_region: str
    prefix: str
    regions: tuple[str, ...]  # stack regions
    env: str  # stack-name prefix, e.g. "Prod"
    explicit_bucket: bool  # register with --bucket (else the app resolves the name as cdkd does)
    external_id: str = ""

    @property
    def role_arn(self) -> str:
        return f"arn:aws:iam::{self.account_id}:role/{ROLE_NAME}"


PRODUCTION = DemoAccountSpec(
    account_id="111111111111",
    name="Production",
    bucket="cdkd-state-111111111111",
    bucket_region="us-east-1",
    prefix="cdkd",
    regions=("us-east-1", "us-west-2", "eu-west-1"),
    env="Prod",
    explicit_bucket=False,
)
STAGING = DemoAccountSpec(
    account_id="222222222222",
    name="Staging",
    bucket="cdkd-state-222222222222-us-east-1",  # only the legacy region-suffixed name exists
    bucket_region="us-east-1",
    prefix="cdkd",
    regions=("us-east-1", "us-east-2"),
    env="Staging",
    explicit_bucket=False,
)
PLATFORM_EU = DemoAccountSpec(
    account_id="333333333333",
    name="Platform EU",
    bucket="acme-platform-cdkd-state",
    bucket_region="eu-west-1",
    prefix="teams/platform",
    regions=("eu-west-1", "eu-central-1", "us-east-1"),
    env="Platform",
    explicit_bucket=True,
    external_id="acme-platform-cdkd-admin",
)
DEMO_ACCOUNTS: tuple[DemoAccountSpec, ...] = (PRODUCTION, STAGING, PLATFORM_EU)


def assumed_role_session(
    account_id: str, *, role_name: str = ROLE_NAME, external_id: str = "", session_name: str = "cdkd-admin-demo"
) -> boto3.Session:
    """A session in `account_id` through STS AssumeRole (moto maps the keys to the account)."""
    params: dict[str, Any] = {
        "RoleArn": f"arn:aws:iam::{account_id}:role/{role_name}",
        "RoleSessionName": session_name,
    }
    if external_id:
        params["ExternalId"] = external_id
    creds = boto3.client("sts", region_name="us-east-1").assume_role(**params)["Credentials"]
    return boto3.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name="us-east-1",
    )


# --------------------------------------------------------------------------------------
# What build_demo_world returns
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackRef:
    """Where one interesting record lives."""

    account_id: str
    stack: str
    region: str | None  # None for a legacy v1 key
    key: str
    note: str = ""


@dataclass
class AccountSummary:
    account_id: str
    name: str
    bucket: str
    prefix: str
    state_records: int = 0  # keys ending in state.json (every version counted once)
    healthy_stacks: int = 0
    objects: int = 0  # PUTs, history versions included
    regions: set[str] = field(default_factory=set)


@dataclass
class DemoWorld:
    accounts: list[AccountSummary]
    interesting: dict[str, StackRef]
    seconds: float = 0.0

    @property
    def objects(self) -> int:
        return sum(a.objects for a in self.accounts)

    @property
    def state_records(self) -> int:
        return sum(a.state_records for a in self.accounts)

    def describe(self) -> list[str]:
        """Short lines for the demo's start-up output."""
        lines = []
        for a in self.accounts:
            lines.append(
                f"{a.account_id} {a.name:<12} s3://{a.bucket}/{a.prefix}/  "
                f"{a.state_records} records in {', '.join(sorted(a.regions))}"
            )
        return lines


# --------------------------------------------------------------------------------------
# cdkd's formatting
# --------------------------------------------------------------------------------------


def cdkd_json(value: Any) -> bytes:
    """`JSON.stringify(value, null, 2)`: 2-space indent, no trailing newline, UTF-8 as is."""
    return json.dumps(value, indent=2, ensure_ascii=False).encode()


def cdkd_jsonl(events: Iterable[Mapping[str, Any]]) -> bytes:
    """One compact `JSON.stringify(event)` per line, with a trailing newline."""
    return "".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n" for e in events).encode()


def iso(ms: int) -> str:
    """`new Date(ms).toISOString()`."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def run_id(ms: int, rng: random.Random) -> str:
    """cdkd's run id: compact ISO timestamp, `-`, the first 8 chars of a UUID."""
    compact = iso(ms).replace("-", "").replace(":", "").replace(".", "")
    return f"{compact}-{_uuid(rng)[:8]}"


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _suffix(
    rng: random.Random, n: int = 12, alphabet: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _hash8(*parts: str) -> str:
    return hashlib.md5("/".join(parts).encode()).hexdigest()[:8].upper()


def _sha256(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


# --------------------------------------------------------------------------------------
# Building one stack record
# --------------------------------------------------------------------------------------


class StackBuilder:
    """Adds CDK-shaped resources to one stack record: logical ids with CDK's 8-hex suffix,
    physical ids and ARNs in the stack's account and region, typical properties,
    attributes and observed (read-back) properties."""

    def __init__(self, spec: DemoAccountSpec, stack: str, region: str, *, version: int = 11) -> None:
        self.spec = spec
        self.account = spec.account_id
        self.stack = stack
        self.region = region
        self.version = version
        self.rng = random.Random(f"{SEED}:{spec.account_id}:{stack}:{region}")
        self.resources: dict[str, dict[str, Any]] = {}
        self.outputs: dict[str, Any] = {}
        self.export_names: list[str] = []
        self.imports: list[dict[str, str]] = []
        self.output_reads: list[dict[str, str]] = []
        self.extra: dict[str, Any] = {}  # fields placed before lastModified (orphans, ...)
        self.parent: tuple[str, str] | None = None  # (parent stack, logical id)

    # -- naming ------------------------------------------------------------------------

    def lid(self, path: str) -> str:
        """CDK's logical id: the construct path squashed, plus 8 hex of its hash."""
        parts = (part[:1].upper() + part[1:] for part in path.replace("-", "/").split("/"))
        squashed = "".join(ch for ch in "".join(parts) if ch.isalnum())
        return f"{squashed}{_hash8(self.stack, path)}"

    def generated_name(self, lid: str, limit: int = 64, lower: bool = False) -> str:
        """CloudFormation-style generated name: `{stack}-{logicalId}-{random}`."""
        head = f"{self.stack.replace('~', '-')}-{lid}"[: limit - 13]
        name = f"{head}-{_suffix(self.rng)}"
        return name.lower() if lower else name

    def arn(self, service: str, resource: str, *, region: bool = True) -> str:
        return f"arn:aws:{service}:{self.region if region else ''}:{self.account}:{resource}"

    # -- resource rows -----------------------------------------------------------------

    def add(
        self,
        lid: str,
        rtype: str,
        physical: str,
        properties: dict[str, Any],
        attributes: dict[str, Any] | None = None,
        *,
        deps: Iterable[str] = (),
        deletion: str | None = None,
        provisioned_by: str | None = "sdk",
        observed: dict[str, Any] | None = None,
        **extra: Any,
    ) -> str:
        row: dict[str, Any] = {"physicalId": physical, "resourceType": rtype, "properties": properties}
        if attributes:
            row["attributes"] = attributes
        deps = list(deps)
        if deps:
            row["dependencies"] = deps
        if deletion:
            row["deletionPolicy"] = deletion
            row["updateReplacePolicy"] = deletion
        if provisioned_by:
            row["provisionedBy"] = provisioned_by
        if observed is not None:
            row["observedProperties"] = observed
        row.update(extra)
        self.resources[lid] = row
        return lid

    def output(self, name: str, value: Any, export: str | None = None) -> None:
        self.outputs[name] = value
        if export:
            self.outputs[export] = value
            self.export_names.append(export)

    def bucket(self, path: str, *, retain: bool = True, kms_key: str | None = None) -> str:
        lid = self.lid(path)
        name = self.generated_name(lid, 63, lower=True)
        props: dict[str, Any] = {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "ServerSideEncryptionByDefault": (
                            {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": self.resources[kms_key]["attributes"]["Arn"]}
                            if kms_key
                            else {"SSEAlgorithm": "AES256"}
                        )
                    }
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "VersioningConfiguration": {"Status": "Enabled"},
            "Tags": [{"Key": "aws-cdk:auto-delete-objects", "Value": "false"}],
        }
        observed = {**copy.deepcopy(props), "BucketName": name, "OwnershipControls": {"Rules": []}, "Tags": []}
        return self.add(
            lid,
            "AWS::S3::Bucket",
            name,
            props,
            {
                "Arn": f"arn:aws:s3:::{name}",
                "DomainName": f"{name}.s3.amazonaws.com",
                "DualStackDomainName": f"{name}.s3.dualstack.{self.region}.amazonaws.com",
                "RegionalDomainName": f"{name}.s3.{self.region}.amazonaws.com",
                "WebsiteURL": f"http://{name}.s3-website-{self.region}.amazonaws.com",
            },
            deps=[kms_key] if kms_key else (),
            deletion="Retain" if retain else None,
            observed=observed,
        )

    def bucket_policy(self, bucket: str) -> str:
        lid = self.lid(f"{bucket[:-8]}/Policy")
        name = self.resources[bucket]["physicalId"]
        return self.add(
            lid,
            "AWS::S3::BucketPolicy",
            name,
            {
                "Bucket": {"Ref": bucket},
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "DenyInsecureTransport",
                            "Effect": "Deny",
                            "Principal": {"AWS": "*"},
                            "Action": "s3:*",
                            "Resource": [
                                {"Fn::GetAtt": [bucket, "Arn"]},
                                {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, "/*"]]},
                            ],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        }
                    ],
                },
            },
            deps=[bucket],
        )

    def queue(self, path: str, *, dlq: str | None = None, fifo: bool = False, cc_api: bool = False) -> str:
        lid = self.lid(path)
        name = self.generated_name(lid, 75 if not fifo else 70) + (".fifo" if fifo else "")
        url = f"https://sqs.{self.region}.amazonaws.com/{self.account}/{name}"
        props: dict[str, Any] = {"VisibilityTimeout": 300, "MessageRetentionPeriod": 1209600}
        if fifo:
            props["FifoQueue"] = True
            props["ContentBasedDeduplication"] = True
        if dlq:
            props["RedrivePolicy"] = {
                "deadLetterTargetArn": self.resources[dlq]["attributes"]["Arn"],
                "maxReceiveCount": 5,
            }
        observed = {
            **props,
            "QueueName": name,
            "MaximumMessageSize": 262144,
            "DelaySeconds": 0,
            "ReceiveMessageWaitTimeSeconds": 0,
            "SqsManagedSseEnabled": True,
            "KmsMasterKeyId": "",
            "Tags": [],
        }
        observed.setdefault("RedrivePolicy", {})
        return self.add(
            lid,
            "AWS::SQS::Queue",
            url,
            props,
            {"Arn": self.arn("sqs", name), "QueueUrl": url, "QueueName": name},
            deps=[dlq] if dlq else (),
            deletion="Delete",
            provisioned_by="cc-api" if cc_api else "sdk",
            observed=observed,
        )

    def topic(self, path: str, *, display: str = "") -> str:
        lid = self.lid(path)
        name = self.generated_name(lid, 256)
        arn = self.arn("sns", name)
        props = {"DisplayName": display} if display else {}
        return self.add(
            lid,
            "AWS::SNS::Topic",
            arn,
            props,
            {"TopicArn": arn, "TopicName": name},
            observed={"TopicName": name, "DisplayName": display, "KmsMasterKeyId": "", "Tags": []},
        )

    def subscription(self, topic: str, queue: str) -> str:
        lid = self.lid(f"{queue[:-8]}/{topic[:-8]}Subscription")
        topic_arn = self.resources[topic]["physicalId"]
        return self.add(
            lid,
            "AWS::SNS::Subscription",
            f"{topic_arn}:{_uuid(self.rng)}",
            {
                "Protocol": "sqs",
                "TopicArn": {"Ref": topic},
                "Endpoint": {"Fn::GetAtt": [queue, "Arn"]},
                "RawMessageDelivery": True,
            },
            deps=[topic, queue],
        )

    def table(self, path: str, *, pk: str = "pk", sk: str | None = "sk", stream: bool = False) -> str:
        lid = self.lid(path)
        name = self.generated_name(lid, 255)
        keys = [{"AttributeName": pk, "KeyType": "HASH"}] + ([{"AttributeName": sk, "KeyType": "RANGE"}] if sk else [])
        props: dict[str, Any] = {
            "KeySchema": keys,
            "AttributeDefinitions": [{"AttributeName": k["AttributeName"], "AttributeType": "S"} for k in keys],
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True},
        }
        arn = self.arn("dynamodb", f"table/{name}")
        attrs = {"Arn": arn}
        if stream:
            props["StreamSpecification"] = {"StreamViewType": "NEW_AND_OLD_IMAGES"}
            month, day, minute = self.rng.randint(1, 9), self.rng.randint(10, 28), self.rng.randint(10, 59)
            attrs["StreamArn"] = f"{arn}/stream/2026-0{month}-{day}T08:{minute}:04.512"
        return self.add(
            lid,
            "AWS::DynamoDB::Table",
            name,
            props,
            attrs,
            deletion="Retain",
            observed={**copy.deepcopy(props), "TableName": name, "DeletionProtectionEnabled": False, "Tags": []},
        )

    def role(self, path: str, service: str = "lambda.amazonaws.com", managed: Iterable[str] = ()) -> str:
        lid = self.lid(path)
        name = self.generated_name(lid, 64)
        return self.add(
            lid,
            "AWS::IAM::Role",
            name,
            {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
                },
                "ManagedPolicyArns": [
                    {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":iam::aws:policy/{m}"]]} for m in managed
                ],
            },
            {
                "Arn": f"arn:aws:iam::{self.account}:role/{name}",
                "RoleId": "AROA" + _suffix(self.rng, 17, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
            },
        )

    def policy(self, role: str, statements: list[dict[str, Any]]) -> str:
        lid = self.lid(f"{role[:-8]}/DefaultPolicy")
        name = f"{role[:-8][:10]}DefaultPolicy{_hash8(self.stack, lid)}"
        return self.add(
            lid,
            "AWS::IAM::Policy",
            f"{self.stack[:5]}-{role[:5]}-{_suffix(self.rng, 12, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')}",
            {
                "PolicyDocument": {"Version": "2012-10-17", "Statement": statements},
                "PolicyName": name,
                "Roles": [{"Ref": role}],
            },
            deps=[role],
        )

    def log_group(self, function: str, days: int = 30) -> str:
        lid = self.lid(f"{function[:-8]}/LogGroup")
        fn_name = self.resources[function]["physicalId"]
        name = f"/aws/lambda/{fn_name}"
        return self.add(
            lid,
            "AWS::Logs::LogGroup",
            name,
            {"LogGroupName": {"Fn::Sub": "/aws/lambda/${" + function + "}"}, "RetentionInDays": days},
            {"Arn": self.arn("logs", f"log-group:{name}:*")},
            deps=[function],
            deletion="Retain",
            observed={"LogGroupName": name, "RetentionInDays": days, "Tags": []},
        )

    def function(self, path: str, role: str, env: dict[str, Any] | None = None, *, deps: Iterable[str] = ()) -> str:
        lid = self.lid(path)
        name = self.generated_name(lid, 64)
        code_hash = _sha256(self.stack, path)
        props = {
            "Code": {
                "S3Bucket": f"cdkd-assets-{self.account}-{self.region}",
                "S3Key": f"{code_hash}.zip",
            },
            "Role": {"Fn::GetAtt": [role, "Arn"]},
            "Handler": "index.handler",
            "Runtime": self.rng.choice(["nodejs20.x", "nodejs22.x", "python3.12"]),
            "MemorySize": self.rng.choice([256, 512, 1024]),
            "Timeout": self.rng.choice([10, 30, 60]),
            "Architectures": ["arm64"],
            "Environment": {"Variables": env or {}},
            "TracingConfig": {"Mode": "Active"},
        }
        observed = {
            **{k: v for k, v in props.items() if k not in ("Code", "Role")},
            "Role": self.resources[role]["attributes"]["Arn"],
            "FunctionName": name,
            "PackageType": "Zip",
            "EphemeralStorage": {"Size": 512},
            "Tags": [],
        }
        return self.add(
            lid,
            "AWS::Lambda::Function",
            name,
            props,
            {"Arn": self.arn("lambda", f"function:{name}")},
            deps=[role, *deps],
            observed=observed,
        )

    def event_source(self, function: str, queue: str) -> str:
        lid = self.lid(f"{function[:-8]}/SqsEventSource{queue[:-8]}")
        return self.add(
            lid,
            "AWS::Lambda::EventSourceMapping",
            _uuid(self.rng),
            {
                "FunctionName": {"Ref": function},
                "EventSourceArn": {"Fn::GetAtt": [queue, "Arn"]},
                "BatchSize": 10,
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
            },
            deps=[function, queue],
            provisioned_by="cc-api",
        )

    def parameter(self, path: str, name: str, value: str) -> str:
        lid = self.lid(path)
        return self.add(
            lid,
            "AWS::SSM::Parameter",
            name,
            {"Type": "String", "Name": name, "Value": value, "Tier": "Standard"},
            observed={"Type": "String", "Name": name, "Value": value, "Tier": "Standard", "DataType": "text"},
        )

    def kms_key(self, path: str, alias: str | None = None) -> str:
        lid = self.lid(path)
        key_id = _uuid(self.rng)
        self.add(
            lid,
            "AWS::KMS::Key",
            key_id,
            {
                "EnableKeyRotation": True,
                "KeyPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": f"arn:aws:iam::{self.account}:root"},
                            "Action": "kms:*",
                            "Resource": "*",
                        }
                    ],
                },
            },
            {"Arn": self.arn("kms", f"key/{key_id}"), "KeyId": key_id},
            deletion="Retain",
        )
        if alias:
            self.add(
                self.lid(f"{path}/Alias"),
                "AWS::KMS::Alias",
                f"alias/{alias}",
                {"AliasName": f"alias/{alias}", "TargetKeyId": {"Fn::GetAtt": [lid, "Arn"]}},
                deps=[lid],
            )
        return lid

    def secret(self, path: str, name: str, kms: str | None = None) -> str:
        lid = self.lid(path)
        arn = self.arn("secretsmanager", f"secret:{name}-{_suffix(self.rng, 6)}")
        props: dict[str, Any] = {
            "Name": name,
            "GenerateSecretString": {
                "SecretStringTemplate": '{"username":"app"}',
                "GenerateStringKey": "password",
                "ExcludeCharacters": " %+~`#$&*()|[]{}:;<>?!'/@\"\\",
                "PasswordLength": 32,
            },
        }
        if kms:
            props["KmsKeyId"] = {"Fn::GetAtt": [kms, "Arn"]}
        return self.add(lid, "AWS::SecretsManager::Secret", arn, props, {"Id": arn}, deps=[kms] if kms else ())

    def database(self, path: str, secret: str, kms: str) -> str:
        lid = self.lid(path)
        ident = self.generated_name(lid, 63, lower=True)
        secret_arn = self.resources[secret]["physicalId"]
        endpoint = (
            f"{ident}.c{_suffix(self.rng, 11, 'abcdefghijklmnopqrstuvwxyz0123456789')}.{self.region}.rds.amazonaws.com"
        )
        subnet_group = self.add(
            self.lid(f"{path}/SubnetGroup"),
            "AWS::RDS::DBSubnetGroup",
            f"{ident[:40]}-subnetgroup-{_suffix(self.rng, 12, 'abcdefghijklmnopqrstuvwxyz0123456789')}",
            {
                "DBSubnetGroupDescription": f"Subnet group for {path} database",
                "SubnetIds": [f"subnet-0{_suffix(self.rng, 16, '0123456789abcdef')}" for _ in range(3)],
            },
        )
        return self.add(
            lid,
            "AWS::RDS::DBInstance",
            ident,
            {
                "Engine": "postgres",
                "EngineVersion": "16.4",
                "DBInstanceClass": "db.r7g.large",
                "AllocatedStorage": "100",
                "StorageEncrypted": True,
                "KmsKeyId": {"Fn::GetAtt": [kms, "Arn"]},
                "MasterUsername": "{{resolve:secretsmanager:" + secret_arn + ":SecretString:username::}}",
                "MasterUserPassword": "{{resolve:secretsmanager:" + secret_arn + ":SecretString:password::}}",
                "DBSubnetGroupName": {"Ref": subnet_group},
                "MultiAZ": True,
                "BackupRetentionPeriod": 14,
                "DeletionProtection": True,
            },
            {"Endpoint.Address": endpoint, "Endpoint.Port": "5432", "DBInstanceArn": self.arn("rds", f"db:{ident}")},
            deps=[secret, kms, subnet_group],
            deletion="Snapshot",
            provisioned_by="cc-api",
        )

    def glue(self, path: str, bucket: str) -> tuple[str, str]:
        db_lid = self.lid(f"{path}/Database")
        db_name = (self.stack.replace("-", "_") + "_" + path).lower()
        self.add(
            db_lid,
            "AWS::Glue::Database",
            db_name,
            {"CatalogId": self.account, "DatabaseInput": {"Name": db_name}},
        )
        table = "events"
        bucket_name = self.resources[bucket]["physicalId"]
        table_lid = self.add(
            self.lid(f"{path}/EventsTable"),
            "AWS::Glue::Table",
            f"{db_name}|{table}",  # composite physical id: not what CloudFormation's Ref gives
            {
                "CatalogId": self.account,
                "DatabaseName": {"Ref": db_lid},
                "TableInput": {
                    "Name": table,
                    "TableType": "EXTERNAL_TABLE",
                    "Parameters": {"classification": "parquet"},
                    "PartitionKeys": [{"Name": "dt", "Type": "string"}],
                    "StorageDescriptor": {
                        "Location": {"Fn::Sub": "s3://${" + bucket + "}/events/"},
                        "Columns": [
                            {"Name": "id", "Type": "string"},
                            {"Name": "type", "Type": "string"},
                            {"Name": "payload", "Type": "string"},
                            {"Name": "ts", "Type": "timestamp"},
                        ],
                        "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                        "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
                        "SerdeInfo": {
                            "SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
                        },
                    },
                },
            },
            deps=[db_lid, bucket],
            observed={"DatabaseName": db_name, "Name": table, "Location": f"s3://{bucket_name}/events/"},
        )
        return db_lid, table_lid

    def hosted_zone(self, path: str, domain: str) -> str:
        lid = self.lid(path)
        zone_id = "Z0" + _suffix(self.rng, 19, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        ns = [
            f"ns-{self.rng.randint(1, 2047)}.awsdns-{self.rng.randint(0, 63):02d}.{tld}"
            for tld in ("org", "co.uk", "com", "net")
        ]
        return self.add(
            lid,
            "AWS::Route53::HostedZone",
            zone_id,
            {"Name": f"{domain}."},
            {"Id": zone_id, "NameServers": ns},
        )

    def nested_stack(self, path: str, params: dict[str, Any] | None = None) -> str:
        """An `AWS::CloudFormation::Stack` row; its child record lives at `{stack}~{lid}`."""
        lid = self.lid(f"{path}.NestedStack/{path}.NestedStackResource")
        from_name = f"{self.stack}~{lid}"
        self.add(
            lid,
            "AWS::CloudFormation::Stack",
            from_name,
            {
                "TemplateURL": f"https://s3.{self.region}.amazonaws.com/cdkd-assets-{self.account}-{self.region}/{_sha256(from_name)}.json",
                "Parameters": params or {},
            },
            {},
        )
        return lid

    # -- the record ----------------------------------------------------------------------

    def state(self, last_modified: int) -> dict[str, Any]:
        """The record as a current (v11) writer would save it; `downgrade` makes older ones."""
        record: dict[str, Any] = {
            "version": self.version,
            "region": self.region,
            "stackName": self.stack,
            "resources": self.resources,
            "outputs": self.outputs,
        }
        if self.imports:
            record["imports"] = self.imports
        if self.output_reads:
            record["outputReads"] = self.output_reads
        record["exportNames"] = list(self.export_names)  # [] is written, not omitted
        record.update(self.extra)
        if self.parent:
            record["parentStack"], record["parentLogicalId"] = self.parent
            record["parentRegion"] = self.region
        record["lastModified"] = last_modified
        return downgrade(record, self.version)


def downgrade(record: dict[str, Any], version: int) -> dict[str, Any]:
    """Strip what the given schema version did not have yet (reference §2.1, §10.1)."""
    record = copy.deepcopy(record)
    record["version"] = version
    drop_top = []
    drop_row = []
    if version < 3:
        drop_row.append("observedProperties")
    if version < 4:
        drop_top.append("imports")
    if version < 5:
        drop_row += ["deletionPolicy", "updateReplacePolicy"]
    if version < 6:
        drop_top += ["parentStack", "parentLogicalId", "parentRegion"]
    if version < 7:
        drop_row.append("provisionedBy")
    if version < 8:
        drop_top.append("outputReads")
    if version < 9:
        drop_top.append("exportNames")
    if version < 10:
        drop_row += ["observedBaselineRefused", "observedBaselineRefusalReason"]
    if version < 11:
        drop_row += ["noEchoLeaves", "noEchoAttributeNames"]
    for name in drop_top:
        record.pop(name, None)
    resources = record.get("resources")
    if isinstance(resources, dict):
        for row in resources.values():
            if isinstance(row, dict):
                for name in drop_row:
                    row.pop(name, None)
    return record


# --------------------------------------------------------------------------------------
# Stack kinds: what a typical team's stacks hold
# --------------------------------------------------------------------------------------

DOMAINS = {
    PRODUCTION.account_id: [
        "Orders",
        "Payments",
        "Inventory",
        "Catalog",
        "Shipping",
        "Notifications",
        "Search",
        "Billing",
        "Identity",
        "Checkout",
        "Carts",
        "Returns",
        "Loyalty",
        "Pricing",
    ],
    STAGING.account_id: [
        "Orders",
        "Payments",
        "Inventory",
        "Catalog",
        "Shipping",
        "Notifications",
        "Search",
        "Billing",
        "Identity",
        "Reviews",
        "Recommendations",
        "Media",
        "Webhooks",
    ],
    PLATFORM_EU.account_id: [
        "Network",
        "Observability",
        "Logging",
        "Artifacts",
        "Secrets",
        "Backup",
        "Guardrails",
        "Registry",
        "Mesh",
        "CostReports",
        "Scheduler",
        "AuditTrail",
    ],
}


def export_alias(stack: str, lid: str, attr: str) -> tuple[str, str]:
    """CDK's automatic cross-stack export: (output key, Export.Name)."""
    key = f"ExportsOutputFnGetAtt{lid}{attr}{_hash8(stack, lid, attr)}"
    return key, f"{stack}:{key}"


def build_data(b: StackBuilder, domain: str) -> None:
    key = b.kms_key(f"{domain}DataKey", alias=f"{b.stack.lower()}/{domain.lower()}-data")
    table = b.table(f"{domain}Table", stream=True)
    bucket = b.bucket(f"{domain}Archive", kms_key=key)
    b.bucket_policy(bucket)
    for attr, value in (
        ("Arn", b.resources[table]["attributes"]["Arn"]),
        ("StreamArn", b.resources[table]["attributes"]["StreamArn"]),
    ):
        out, alias = export_alias(b.stack, table, attr)
        b.output(out, value, alias)
    b.output(f"{domain}TableName", b.resources[table]["physicalId"])
    b.output(f"{domain}ArchiveBucketName", b.resources[bucket]["physicalId"])


def build_events(b: StackBuilder, domain: str) -> None:
    topic = b.topic(f"{domain}Events", display=f"{domain} domain events")
    dlq = b.queue(f"{domain}EventsDlq")
    queue = b.queue(f"{domain}EventsQueue", dlq=dlq, cc_api=b.rng.random() < 0.3)
    b.subscription(topic, queue)
    rule_lid = b.lid(f"{domain}NightlyRule")
    b.add(
        rule_lid,
        "AWS::Events::Rule",
        f"{b.stack[:30]}-{rule_lid[:20]}-{_suffix(b.rng, 12, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')}",
        {
            "ScheduleExpression": "cron(0 2 * * ? *)",
            "State": "ENABLED",
            "Targets": [{"Arn": {"Ref": topic}, "Id": "Target0"}],
        },
        {"Arn": b.arn("events", f"rule/{rule_lid}")},
        deps=[topic],
    )
    out, alias = export_alias(b.stack, topic, "TopicArn")
    b.output(out, b.resources[topic]["physicalId"], alias)
    b.output("EventsTopicArn", b.resources[topic]["physicalId"])
    b.output("EventsQueueUrl", b.resources[queue]["physicalId"])


def build_api(b: StackBuilder, domain: str, data: StackBuilder | None, events: StackBuilder | None) -> None:
    role = b.role(f"{domain}Handler/ServiceRole", managed=["service-role/AWSLambdaBasicExecutionRole"])
    queue_dlq = b.queue(f"{domain}WorkDlq")
    queue = b.queue(f"{domain}WorkQueue", dlq=queue_dlq)
    param = b.parameter(
        f"{domain}EndpointParam",
        f"/{b.spec.env.lower()}/{domain.lower()}/endpoint",
        f"https://{domain.lower()}.{b.region}.internal.acme.io",
    )
    env: dict[str, Any] = {
        "QUEUE_URL": {"Ref": queue},
        "ENDPOINT_PARAM": {"Ref": param},
        "POWERTOOLS_SERVICE_NAME": domain.lower(),
    }
    statements: list[dict[str, Any]] = [
        {
            "Effect": "Allow",
            "Action": ["sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
            "Resource": {"Fn::GetAtt": [queue, "Arn"]},
        },
        {
            "Effect": "Allow",
            "Action": "ssm:GetParameter",
            "Resource": {
                "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter"
                + b.resources[param]["physicalId"]
            },
        },
    ]
    if data is not None:
        table_lid = next(k for k, v in data.resources.items() if v["resourceType"] == "AWS::DynamoDB::Table")
        _, alias = export_alias(data.stack, table_lid, "Arn")
        env["TABLE_ARN"] = data.outputs[alias]
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
                "Resource": data.outputs[alias],
            }
        )
        b.imports.append({"sourceStack": data.stack, "sourceRegion": data.region, "exportName": alias})
    if events is not None:
        env["EVENTS_TOPIC_ARN"] = events.outputs["EventsTopicArn"]
        b.output_reads.append(
            {"sourceStack": events.stack, "sourceRegion": events.region, "outputName": "EventsTopicArn"}
        )
    policy = b.policy(role, statements)
    fn = b.function(f"{domain}Handler", role, env, deps=[policy, queue, param])
    b.log_group(fn)
    b.event_source(fn, queue)
    b.output("HandlerFunctionArn", b.resources[fn]["attributes"]["Arn"])
    b.output("WorkQueueUrl", b.resources[queue]["physicalId"])


def build_analytics(b: StackBuilder, domain: str) -> None:
    bucket = b.bucket(f"{domain}Lake", retain=True)
    b.glue(f"{domain}Catalog", bucket)
    role = b.role(f"{domain}Crawler/Role", service="glue.amazonaws.com", managed=["service-role/AWSGlueServiceRole"])
    b.policy(
        role,
        [
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [{"Fn::GetAtt": [bucket, "Arn"]}, {"Fn::Sub": "${" + bucket + ".Arn}/*"}],
            }
        ],
    )
    b.output("LakeBucketName", b.resources[bucket]["physicalId"])


def build_db(b: StackBuilder, domain: str) -> None:
    key = b.kms_key(f"{domain}DbKey")
    secret = b.secret(f"{domain}DbCredentials", f"{b.spec.env.lower()}/{domain.lower()}/db", kms=key)
    db = b.database(f"{domain}Db", secret, key)
    b.output("DbEndpoint", b.resources[db]["attributes"]["Endpoint.Address"])
    b.output("DbSecretArn", b.resources[secret]["physicalId"])


# --------------------------------------------------------------------------------------
# Event history
# --------------------------------------------------------------------------------------


class RunRecorder:
    """One cdkd run's events and its index summary, timed from `start_ms`."""

    def __init__(
        self, stack: str, region: str, command: str, start_ms: int, rng: random.Random, version: str = CDKD_VERSION
    ):
        self.stack, self.region, self.command = stack, region, command
        self.rng = rng
        self.clock = start_ms
        self.start_ms = start_ms
        self.run_id = run_id(start_ms, rng)
        self.version = version
        self.counts = {"created": 0, "updated": 0, "deleted": 0}
        self.failed = 0
        self.skipped = 0
        self.events: list[dict[str, Any]] = [
            {
                "timestamp": iso(start_ms),
                "eventType": "RUN_STARTED",
                "stackName": stack,
                "command": command,
                "region": region,
                "cdkdVersion": version,
            }
        ]
        self.finished_ms: int | None = None

    def _tick(self, lo: int = 15, hi: int = 400) -> int:
        self.clock += self.rng.randint(lo, hi)
        return self.clock

    def resource(
        self,
        operation: str,
        lid: str,
        rtype: str,
        physical: str | None = None,
        *,
        provisioned_by: str | None = "sdk",
        outcome: str = "ok",
        reason: str = "",
        error: dict[str, str] | None = None,
        stack: str | None = None,
    ) -> None:
        base: dict[str, Any] = {
            "stackName": stack or self.stack,
            "operation": operation,
            "logicalId": lid,
            "resourceType": rtype,
        }
        if provisioned_by:
            base["provisionedBy"] = provisioned_by
        started = self._tick()
        self.events.append({"timestamp": iso(started), "eventType": "RESOURCE_STARTED", **base})
        done = self._tick(200, 9000)
        event: dict[str, Any] = {"timestamp": iso(done), **base}
        if outcome == "ok":
            event["eventType"] = "RESOURCE_SUCCEEDED"
            if physical:
                event["physicalId"] = physical
            event["durationMs"] = done - started
            self.counts[{"CREATE": "created", "UPDATE": "updated", "DELETE": "deleted"}[operation]] += 1
        elif outcome == "retain":
            event["eventType"] = "RESOURCE_RETAINED"
            if physical:
                event["physicalId"] = physical
        elif outcome == "skip":
            event["eventType"] = "RESOURCE_SKIPPED"
            if physical:
                event["physicalId"] = physical
            event["reason"] = reason
            self.skipped += 1
        else:
            event["eventType"] = "RESOURCE_FAILED"
            event["durationMs"] = done - started
            event["error"] = error or {"name": "Error", "message": "failed"}
            self.failed += 1
        # Keep the event's own key order close to cdkd's: timestamp, eventType, then the rest.
        self.events.append({"timestamp": event.pop("timestamp"), "eventType": event.pop("eventType"), **event})

    def finish(self, error: dict[str, str] | None = None) -> int:
        end = self._tick(50, 300)
        self.finished_ms = end
        result = "FAILED" if (self.failed or self.skipped or error) else "SUCCEEDED"
        counts: dict[str, int] = dict(self.counts)
        if self.failed:
            counts["failed"] = self.failed
        if self.skipped:
            counts["skipped"] = self.skipped
        event: dict[str, Any] = {
            "timestamp": iso(end),
            "eventType": "RUN_FINISHED",
            "stackName": self.stack,
            "result": result,
        }
        if self.command == "deploy":
            event["durationMs"] = end - self.start_ms
        event["counts"] = counts
        if result == "FAILED" and (error or self.failed):
            event["error"] = error or next(e["error"] for e in self.events if e["eventType"] == "RESOURCE_FAILED")
        self.events.append(event)
        return end

    def summary(self) -> dict[str, Any]:
        assert self.finished_ms is not None
        return {
            "runId": self.run_id,
            "command": self.command,
            "cdkdVersion": self.version,
            "startedAt": iso(self.start_ms),
            "finishedAt": iso(self.finished_ms),
            "result": self.events[-1]["result"],
            "eventCount": len(self.events),
        }


def run_index(stack: str, region: str, runs: list[RunRecorder]) -> dict[str, Any]:
    """index.json: newest first, at most 20."""
    ordered = sorted((r for r in runs if r.finished_ms is not None), key=lambda r: r.run_id, reverse=True)[:20]
    return {
        "indexVersion": 1,
        "stackName": stack,
        "region": region,
        "runs": [r.summary() for r in ordered],
        "lastModified": max(r.finished_ms or 0 for r in ordered) + 40,
    }


# --------------------------------------------------------------------------------------
# Seeding
# --------------------------------------------------------------------------------------


@dataclass
class _Put:
    key: str
    body: bytes
    content_type: str = JSON_TYPE


@dataclass
class _AccountPlan:
    spec: DemoAccountSpec
    puts: list[_Put] = field(default_factory=list)
    sequences: list[list[_Put]] = field(default_factory=list)  # written in order (S3 versions)
    summary: AccountSummary | None = None

    def key(self, stack: str, region: str | None, leaf: str) -> str:
        return f"{self.spec.prefix}/{stack}/{region}/{leaf}" if region else f"{self.spec.prefix}/{stack}/{leaf}"

    def put(self, key: str, body: bytes, content_type: str = JSON_TYPE) -> None:
        self.puts.append(_Put(key, body, content_type))

    def put_state(self, record: Any, stack: str, region: str | None) -> str:
        key = self.key(stack, region, "state.json")
        self.put(key, record if isinstance(record, bytes) else cdkd_json(record))
        return key


class _World:
    """Collects every object for every account, then the caller writes them."""

    def __init__(self, now_ms: int, big_resources: int) -> None:
        self.now = now_ms
        self.big_resources = big_resources
        self.plans: dict[str, _AccountPlan] = {s.account_id: _AccountPlan(s) for s in DEMO_ACCOUNTS}
        self.interesting: dict[str, StackRef] = {}
        self.versions_seen: dict[int, StackRef] = {}
        self.exports: dict[tuple[str, str], dict[str, Any]] = {}  # (account, region) -> exports

    def note(self, name: str, spec: DemoAccountSpec, stack: str, region: str | None, key: str, note: str = "") -> None:
        self.interesting[name] = StackRef(spec.account_id, stack, region, key, note)

    def ago(self, rng: random.Random, lo_days: float, hi_days: float) -> int:
        return self.now - int(rng.uniform(lo_days, hi_days) * DAY_MS)

    def save(self, b: StackBuilder, last_modified: int | None = None, note: str = "") -> str:
        plan = self.plans[b.account]
        record = b.state(last_modified or self.ago(b.rng, 0.5, 200))
        key = plan.put_state(record, b.stack, b.region)
        ref = StackRef(b.account, b.stack, b.region, key, note)
        self.versions_seen.setdefault(b.version, ref)
        # The region's exports index: Export.Name aliases only (what a v9+ rebuild publishes).
        if b.export_names:
            idx = self.exports.setdefault((b.account, b.region), {})
            for name in b.export_names:
                idx[name] = {"value": b.outputs[name], "producerStack": b.stack, "producerRegion": b.region}
        return key

    # -- healthy stacks ------------------------------------------------------------------

    def healthy(self, spec: DemoAccountSpec) -> int:
        rng = random.Random(f"{SEED}:{spec.account_id}:layout")
        mix = [11] * 12 + [10, 10, 9, 9, 8, 8, 7, 6, 5, 4, 3, 2]
        forced = list(range(2, 12))  # every version 2..11 at least once per account
        count = 0

        def version() -> int:
            return forced.pop(0) if forced else rng.choice(mix)

        for domain in DOMAINS[spec.account_id]:
            home = rng.choice(spec.regions[:2])
            regions = [home]
            if rng.random() < 0.3:
                regions.append(rng.choice([r for r in spec.regions if r != home]))
            for region in regions:
                data = events = None
                kinds = ["Data", "Api"]
                if rng.random() < 0.7:
                    kinds.insert(1, "Events")
                if rng.random() < 0.35:
                    kinds.append("Analytics")
                if rng.random() < 0.25:
                    kinds.append("Db")
                for kind in kinds:
                    stack = f"{spec.env}-{domain}{kind}"
                    if (stack, region) == ("Prod-OrdersApi", "us-east-1"):
                        continue  # the history record, written below with four versions
                    v = version()
                    b = StackBuilder(spec, stack, region, version=v)
                    if kind == "Data":
                        build_data(b, domain)
                        data = b
                    elif kind == "Events":
                        build_events(b, domain)
                        events = b
                    elif kind == "Api":
                        build_api(b, domain, data if v >= 4 else None, events if v >= 8 else None)
                    elif kind == "Analytics":
                        build_analytics(b, domain)
                    else:
                        build_db(b, domain)
                    # A producer an importer binds to must publish its export names.
                    self.save(b)
                    count += 1
        return count

    # -- the showcase records ------------------------------------------------------------

    def production(self) -> None:
        spec = PRODUCTION
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:prod:extras")
        self.history_record(spec)
        self.nested_tree(spec, "Prod-Checkout", "us-east-1")
        self.big_stack(spec, "Prod-EventRouting", "us-east-1")
        self.v11_showcase(spec, "Prod-PaymentsGateway", "us-east-1")
        self.newer_version(spec, "Prod-FeatureFlags", "us-west-2")
        self.dns_stack(spec, "Prod-PublicDns", "us-east-1")

        # Legacy v1 records: one names its region in the body, one does not.
        b = StackBuilder(spec, "LegacyMonolith", "us-east-1", version=1)
        build_api(b, "Monolith", None, None)
        record = b.state(self.now - 700 * DAY_MS)
        key = plan.put_state(record, b.stack, None)
        self.note("legacy_v1_with_region", spec, b.stack, None, key, "v1 legacy key, body region us-east-1")
        self.versions_seen.setdefault(1, self.interesting["legacy_v1_with_region"])

        b = StackBuilder(spec, "LegacyCron", "us-east-1", version=1)
        b.role("CronJob/ServiceRole", managed=["service-role/AWSLambdaBasicExecutionRole"])
        record = b.state(self.now - 820 * DAY_MS)
        del record["region"]  # pre-v2 writers could leave it out; it then matches any region
        key = plan.put_state(record, b.stack, None)
        self.note("legacy_v1_no_region", spec, b.stack, None, key, "v1 legacy key, no region in the body")

        # Locks: a live deploy, an expired one left by a crashed run.
        self.lock(
            spec,
            "Prod-InventoryData",
            None,
            rng,
            "live_lock",
            owner="github-actions@runner-prod-3:2817",
            age_min=6,
            ttl_min=30,
        )
        self.lock(
            spec,
            "Prod-SearchApi",
            None,
            rng,
            "expired_lock",
            owner="maria@mbp-maria.local:51734",
            age_min=26 * 60,
            ttl_min=30,
            operation="destroy",
        )

        # A destroyed stack: its event history outlives its record.
        runs = []
        start = self.now - 12 * DAY_MS
        r = RunRecorder("Prod-LegacyReports", "us-west-2", "deploy", start, rng, "0.284.40")
        r.resource(
            "CREATE",
            "ReportsBucketB1E4F8A2",
            "AWS::S3::Bucket",
            "prod-legacyreports-reportsbucketb1e4f8a2-8xq2ml0pzt7r",
        )
        r.resource(
            "CREATE",
            "ReportsFunction9D3C7E21",
            "AWS::Lambda::Function",
            "Prod-LegacyReports-ReportsFunction9D3C7E21-Kq8ZpLm2Xw4N",
        )
        r.finish()
        runs.append(r)
        r = RunRecorder("Prod-LegacyReports", "us-west-2", "destroy", self.now - 2 * DAY_MS, rng)
        r.resource(
            "DELETE",
            "ReportsFunction9D3C7E21",
            "AWS::Lambda::Function",
            "Prod-LegacyReports-ReportsFunction9D3C7E21-Kq8ZpLm2Xw4N",
        )
        r.resource(
            "DELETE",
            "ReportsBucketB1E4F8A2",
            "AWS::S3::Bucket",
            "prod-legacyreports-reportsbucketb1e4f8a2-8xq2ml0pzt7r",
            outcome="retain",
        )
        r.finish()
        runs.append(r)
        self.write_runs(spec, "Prod-LegacyReports", "us-west-2", runs)
        self.note(
            "destroyed_with_events",
            spec,
            "Prod-LegacyReports",
            "us-west-2",
            plan.key("Prod-LegacyReports", "us-west-2", "deployments/index.json"),
            "events only, no state.json",
        )

        # A failed deploy left a rollback journal and a create-token ledger beside a record.
        self.failed_deploy_leftovers(spec, "Prod-ShippingFiles", "us-west-2")

        plan.put(
            "cdkd-bootstrap/us-east-1.json",
            cdkd_json(
                {
                    "assetBucket": f"cdkd-assets-{spec.account_id}-us-east-1",
                    "containerRepo": f"cdkd-container-assets-{spec.account_id}-us-east-1",
                    "assetSupportVersion": 1,
                    "createdAt": iso(self.now - 400 * DAY_MS),
                }
            ),
        )

    def staging(self) -> None:
        spec = STAGING
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:staging:extras")

        # Damaged records (reference §10.2): each one defect class.
        def broken(stack: str, region: str, mutate: Callable[[dict[str, Any]], None], name: str, note: str) -> None:
            b = StackBuilder(spec, stack, region, version=11)
            build_events(b, stack.split("-", 1)[1])
            record = b.state(self.ago(b.rng, 1, 30))
            mutate(record)
            key = plan.put_state(record, stack, region)
            self.note(name, spec, stack, region, key, note)

        broken(
            "Staging-LegacyImport",
            "us-east-1",
            lambda r: r.__setitem__("resources", []),
            "malformed_resources_list",
            "resources is []",
        )
        broken(
            "Staging-Emails",
            "us-east-1",
            lambda r: r.__setitem__("outputs", "arn:aws:sns:us-east-1:222222222222:emails"),
            "malformed_outputs_string",
            "outputs is a string",
        )

        def no_type(r: dict[str, Any]) -> None:
            row = next(iter(r["resources"].values()))
            del row["resourceType"]

        broken("Staging-Thumbnails", "us-east-2", no_type, "malformed_row_no_type", "a row without resourceType")

        def null_props(r: dict[str, Any]) -> None:
            rows = list(r["resources"].values())
            rows[-1]["properties"] = None

        broken("Staging-Digests", "us-east-1", null_props, "malformed_properties_null", "a row with properties: null")

        def bad_orphans(r: dict[str, Any]) -> None:
            r["orphans"] = {
                "LegacyQueue4A7E3555": {"physicalId": "https://sqs.us-east-1.amazonaws.com/222222222222/legacy"}
            }
            r["lastModified"] = r.pop("lastModified")

        broken("Staging-Fanout", "us-east-1", bad_orphans, "malformed_orphans", "orphans is an object, not a list")

        # A body that is not JSON: an upload cut off half way.
        b = StackBuilder(spec, "Staging-Truncated", "us-east-1", version=11)
        build_data(b, "Truncated")
        body = cdkd_json(b.state(self.now - 3 * DAY_MS))
        key = plan.put_state(body[: len(body) * 2 // 5], "Staging-Truncated", "us-east-1")
        self.note("malformed_not_json", spec, "Staging-Truncated", "us-east-1", key, "body is not JSON")

        # The key says us-east-1, the body says us-west-2 (a hand copy between regions).
        b = StackBuilder(spec, "Staging-CopiedQueues", "us-east-1", version=9)
        build_events(b, "CopiedQueues")
        record = b.state(self.now - 9 * DAY_MS)
        record["region"] = "us-west-2"
        key = plan.put_state(record, b.stack, "us-east-1")
        self.note("region_mismatch", spec, b.stack, "us-east-1", key, "body region us-west-2 under a us-east-1 key")

        # Another legacy record, under the legacy bucket (v1 stays v1 until its next deploy).
        b = StackBuilder(spec, "Staging-Sandbox", "us-east-1", version=1)
        b.queue("SandboxQueue")
        b.topic("SandboxTopic")
        key = plan.put_state(b.state(self.now - 500 * DAY_MS), b.stack, None)
        self.note("legacy_v1_staging", spec, b.stack, None, key, "v1 record in the legacy-named bucket")

        # Locks in every damaged form.
        self.lock(
            spec,
            "Staging-PaymentsApi",
            None,
            rng,
            "lock_bad_expiry",
            owner="deploy-bot@ci-staging:900",
            age_min=40,
            ttl_min=30,
            expires="2026-11-29T13:00:00Z",
        )
        truncated = cdkd_json(
            {
                "owner": "sam@ws-sam:4121",
                "timestamp": self.now - 15 * MINUTE_MS,
                "expiresAt": self.now + 15 * MINUTE_MS,
                "operation": "scrub",
            }
        )
        self.lock(spec, "Staging-CatalogData", None, rng, "lock_unreadable", raw=truncated[:47])

        # A first deploy in progress: a live lock and a run started, no state.json yet.
        self.lock(
            spec,
            "Staging-SearchIndexer",
            "us-east-1",
            rng,
            "lock_without_state",
            owner="github-actions@runner-stg-1:3310",
            age_min=2,
            ttl_min=30,
        )
        r = RunRecorder("Staging-SearchIndexer", "us-east-1", "deploy", self.now - 2 * MINUTE_MS, rng)
        r.events.append(
            {
                "timestamp": iso(r._tick()),
                "eventType": "RESOURCE_STARTED",
                "stackName": r.stack,
                "operation": "CREATE",
                "logicalId": "IndexerRoleA1B2C3D4",
                "resourceType": "AWS::IAM::Role",
                "provisionedBy": "sdk",
            }
        )
        # No index.json yet: cdkd writes it only when the run finalizes.
        plan.put(plan.key(r.stack, "us-east-1", f"deployments/{r.run_id}.jsonl"), cdkd_jsonl(r.events), NDJSON_TYPE)

        # A destroy that could not address a resource: FAILED with a RESOURCE_SKIPPED, record kept.
        self.skipped_destroy(spec, "Staging-ImageResizer", "us-east-2")

    def platform(self) -> None:
        spec = PLATFORM_EU
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:platform:extras")
        self.nested_tree(spec, "Platform-SharedVpc", "eu-west-1", small=True)
        self.dns_stack(spec, "Platform-Dns", "us-east-1")
        self.lock(
            spec,
            "Platform-ObservabilityData",
            None,
            rng,
            "platform_live_lock",
            owner="platform-ci@build-eu-2:7781",
            age_min=1,
            ttl_min=30,
            operation="deploy",
        )
        b = StackBuilder(spec, "Platform-BreakGlass", "eu-west-1", version=1)
        b.role("BreakGlassRole", service="ec2.amazonaws.com", managed=["AdministratorAccess"])
        key = plan.put_state(b.state(self.now - 600 * DAY_MS), b.stack, None)
        self.note("legacy_v1_platform", spec, b.stack, None, key, "v1 record under a custom prefix")
        plan.put(
            "cdkd-bootstrap/eu-west-1.json",
            cdkd_json(
                {
                    "assetBucket": f"cdkd-assets-{spec.account_id}-eu-west-1",
                    "containerRepo": f"cdkd-container-assets-{spec.account_id}-eu-west-1",
                    "assetSupportVersion": 1,
                    "createdAt": iso(self.now - 300 * DAY_MS),
                }
            ),
        )

    # -- pieces ---------------------------------------------------------------------------

    def lock(
        self,
        spec: DemoAccountSpec,
        stack: str,
        region: str | None,
        rng: random.Random,
        name: str,
        *,
        owner: str = "",
        age_min: int = 0,
        ttl_min: int = 30,
        operation: str = "deploy",
        expires: Any = None,
        raw: bytes | None = None,
    ) -> str:
        """A lock.json beside a stack's record, in cdkd's exact shape and order."""
        plan = self.plans[spec.account_id]
        if region is None:
            # Beside an existing healthy record: find the region it was written to.
            region = next(
                p.key.split("/")[-2]
                for p in plan.puts
                if p.key.startswith(f"{spec.prefix}/{stack}/") and p.key.endswith("/state.json")
            )
        key = plan.key(stack, region, "lock.json")
        if raw is None:
            ts = self.now - age_min * MINUTE_MS - rng.randint(0, 59_999)
            raw = cdkd_json(
                {
                    "owner": owner,
                    "timestamp": ts,
                    "expiresAt": expires if expires is not None else ts + ttl_min * MINUTE_MS,
                    "operation": operation,
                }
            )
        plan.put(key, raw)
        self.note(name, spec, stack, region, key)
        return key

    def write_runs(self, spec: DemoAccountSpec, stack: str, region: str, runs: list[RunRecorder]) -> None:
        plan = self.plans[spec.account_id]
        for r in runs:
            plan.put(plan.key(stack, region, f"deployments/{r.run_id}.jsonl"), cdkd_jsonl(r.events), NDJSON_TYPE)
        plan.put(plan.key(stack, region, "deployments/index.json"), cdkd_json(run_index(stack, region, runs)))

    def history_record(self, spec: DemoAccountSpec) -> None:
        """`Prod-OrdersApi`: four S3 versions (resource added, property + output changed,
        resource removed) and the deploy runs that wrote them, plus one failed run."""
        stack, region = "Prod-OrdersApi", "us-east-1"
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:history")
        b = StackBuilder(spec, stack, region, version=11)
        build_api(b, "Orders", None, None)
        rows = b.resources
        runs: list[RunRecorder] = []
        t = self.now - 30 * DAY_MS

        r = RunRecorder(stack, region, "deploy", t, rng)
        for lid, row in rows.items():
            r.resource("CREATE", lid, row["resourceType"], row["physicalId"], provisioned_by=row.get("provisionedBy"))
        t = r.finish()
        runs.append(r)
        versions = [b.state(t)]

        # 2: a resource added (an alarm topic).
        t += 9 * DAY_MS
        r = RunRecorder(stack, region, "deploy", t, rng)
        alarm = b.topic("OrdersAlarms", display="Orders alarms")
        b.output("AlarmTopicArn", b.resources[alarm]["physicalId"])
        r.resource("CREATE", alarm, "AWS::SNS::Topic", b.resources[alarm]["physicalId"])
        t = r.finish()
        runs.append(r)
        versions.append(b.state(t))

        # A failed deploy in between: the record is unchanged.
        t += 2 * DAY_MS
        fn = next(k for k, v in rows.items() if v["resourceType"] == "AWS::Lambda::Function")
        r = RunRecorder(stack, region, "deploy", t, rng)
        r.resource(
            "UPDATE",
            fn,
            "AWS::Lambda::Function",
            rows[fn]["physicalId"],
            outcome="fail",
            error={
                "name": "ProvisioningError",
                "message": f"Failed to update {fn}: Lambda was unable to configure your environment variables "
                "because the environment variables you have provided exceeded the 4KB limit.",
                "awsErrorCode": "InvalidParameterValueException",
                "requestId": _uuid(rng),
            },
        )
        t = r.finish()
        runs.append(r)

        # 3: a property changed (memory, timeout) and an output changed.
        t += 3 * DAY_MS
        r = RunRecorder(stack, region, "deploy", t, rng)
        rows[fn]["properties"]["MemorySize"] = 2048
        rows[fn]["properties"]["Timeout"] = 90
        rows[fn]["observedProperties"]["MemorySize"] = 2048
        rows[fn]["observedProperties"]["Timeout"] = 90
        b.outputs["WorkQueueUrl"] = b.outputs["WorkQueueUrl"].replace(
            "sqs.us-east-1.amazonaws.com", "sqs.us-east-1.api.aws"
        )
        r.resource("UPDATE", fn, "AWS::Lambda::Function", rows[fn]["physicalId"])
        t = r.finish()
        runs.append(r)
        versions.append(b.state(t))

        # 4: a resource removed (the SSM parameter).
        t += 5 * DAY_MS
        r = RunRecorder(stack, region, "deploy", t, rng)
        param = next(k for k, v in rows.items() if v["resourceType"] == "AWS::SSM::Parameter")
        removed = rows.pop(param)
        rows[fn]["properties"]["Environment"]["Variables"].pop("ENDPOINT_PARAM", None)
        for row in rows.values():
            if param in row.get("dependencies", []):
                row["dependencies"].remove(param)
        r.resource("DELETE", param, "AWS::SSM::Parameter", removed["physicalId"])
        t = r.finish()
        runs.append(r)
        versions.append(b.state(t))

        key = plan.key(stack, region, "state.json")
        plan.sequences.append([_Put(key, cdkd_json(v)) for v in versions])
        self.note("history", spec, stack, region, key, "4 S3 versions")
        self.write_runs(spec, stack, region, runs)
        self.note(
            "events_history",
            spec,
            stack,
            region,
            plan.key(stack, region, "deployments/index.json"),
            "5 deploy runs, one FAILED",
        )

    def nested_tree(self, spec: DemoAccountSpec, parent: str, region: str, *, small: bool = False) -> None:
        """A parent with two `AWS::CloudFormation::Stack` rows, their children, and a grandchild."""
        top = StackBuilder(spec, parent, region, version=11)
        domain = parent.split("-", 1)[1]
        if small:
            top.kms_key("FlowLogsKey", alias=f"{parent.lower()}/flow-logs")
            top.bucket("FlowLogs")
        else:
            build_api(top, domain, None, None)
        first = top.nested_stack("Database" if not small else "Subnets")
        second = top.nested_stack("Payments" if not small else "Endpoints")
        children = []
        for lid, kind in ((first, "data"), (second, "api")):
            child = StackBuilder(spec, f"{parent}~{lid}", region, version=11)
            child.parent = (parent, lid)
            if kind == "data":
                build_data(child, "Nested")
                child.export_names.clear()
                child.outputs = {k: v for k, v in child.outputs.items() if ":" not in k}
            else:
                build_events(child, "Nested")
                child.export_names.clear()
                child.outputs = {k: v for k, v in child.outputs.items() if ":" not in k}
                child.extra["conditionVerdicts"] = {
                    "UseCustomerManagedKey": {
                        "verdict": True,
                        "fingerprint": "sha256:" + _sha256(child.stack, "UseCustomerManagedKey"),
                    }
                }
            # The parent row's attributes carry the child's outputs, as Fn::GetAtt sees them.
            top.resources[lid]["attributes"] = {f"Outputs.{k}": v for k, v in child.outputs.items()}
            children.append(child)
        # A grandchild under the second child.
        grand_lid = children[1].nested_stack("Fraud" if not small else "Resolver")
        grand = StackBuilder(spec, f"{children[1].stack}~{grand_lid}", region, version=11)
        grand.parent = (children[1].stack, grand_lid)
        grand.queue("ReviewQueue", fifo=True)
        grand.table("Decisions", sk=None)
        grand.output("ReviewQueueUrl", next(iter(grand.resources.values()))["physicalId"])
        children[1].resources[grand_lid]["attributes"] = {f"Outputs.{k}": v for k, v in grand.outputs.items()}
        top.output("NestedStacksCount", 3)

        tag = "platform_" if small else ""
        # One deploy wrote the whole tree, children first.
        deployed = self.now - 4 * DAY_MS
        key = self.save(top, deployed + 9_000, note="nested parent")
        self.note(f"{tag}nested_parent", spec, parent, region, key)
        for i, child in enumerate(children):
            key = self.save(child, deployed + 5_000 + i * 1_000, note="nested child")
            self.note(f"{tag}nested_child" + ("" if i == 0 else f"_{i + 1}"), spec, child.stack, region, key)
        key = self.save(grand, deployed + 3_000, note="nested grandchild")
        self.note(f"{tag}nested_grandchild", spec, grand.stack, region, key)

        # The parent's deploy run carries the children's events under the children's names.
        rng = random.Random(f"{SEED}:{parent}:events")
        r = RunRecorder(parent, region, "deploy", self.now - 4 * DAY_MS, rng)
        for builder in (top, *children, grand):
            for lid, row in list(builder.resources.items())[:4]:
                r.resource(
                    "CREATE",
                    lid,
                    row["resourceType"],
                    row["physicalId"],
                    provisioned_by=row.get("provisionedBy"),
                    stack=builder.stack,
                )
        r.finish()
        self.write_runs(spec, parent, region, [r])

    def big_stack(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        """~2,000 resources: a per-tenant event fan-out, as a generated CDK app produces."""
        b = StackBuilder(spec, stack, region, version=11)
        bus_lid = b.lid("RoutingBus")
        bus = b.add(
            bus_lid,
            "AWS::Events::EventBus",
            f"{stack}-routing",
            {"Name": f"{stack}-routing"},
            {"Arn": b.arn("events", f"event-bus/{stack}-routing"), "Name": f"{stack}-routing"},
        )
        topic = b.topic("TenantFanout")
        per_tenant = 5
        tenants = max(1, (self.big_resources - 2) // per_tenant)
        for i in range(tenants):
            t = f"Tenant{i:04d}"
            q = b.queue(f"{t}/Inbox")
            b.subscription(topic, q)
            rule = b.lid(f"{t}/Rule")
            b.add(
                rule,
                "AWS::Events::Rule",
                f"{stack}-routing|" + f"{stack}-{rule}"[:64],
                {
                    "EventBusName": {"Ref": bus},
                    "EventPattern": {"detail": {"tenantId": [t.lower()]}},
                    "Targets": [{"Arn": {"Fn::GetAtt": [q, "Arn"]}, "Id": "Target0"}],
                },
                {"Arn": b.arn("events", f"rule/{stack}-routing/{rule}")},
                deps=[bus, q],
            )
            b.add(
                b.lid(f"{t}/InboxPolicy"),
                "AWS::SQS::QueuePolicy",
                b.resources[q]["physicalId"],
                {
                    "Queues": [{"Ref": q}],
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "events.amazonaws.com"},
                                "Action": "sqs:SendMessage",
                                "Resource": {"Fn::GetAtt": [q, "Arn"]},
                                "Condition": {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [rule, "Arn"]}}},
                            }
                        ],
                    },
                },
                deps=[q, rule],
            )
            b.parameter(f"{t}/InboxUrl", f"/prod/routing/{t.lower()}/inbox-url", b.resources[q]["physicalId"])
        b.output("RoutingBusArn", b.resources[bus]["attributes"]["Arn"])
        b.output("TenantCount", tenants)
        key = self.save(b, self.now - 6 * HOUR_MS)
        self.note("big", spec, stack, region, key, f"{len(b.resources)} resources")

    def v11_showcase(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        """Every v11 and no-bump field: NoEcho masks, orphans, skipped outputs, condition
        verdicts, a refused observed baseline, masked-property fingerprints."""
        b = StackBuilder(spec, stack, region, version=11)
        build_api(b, "Gateway", None, None)
        key_lid = b.kms_key("GatewayKey")
        secret = b.secret("ProviderApiKey", "prod/payments/provider-api-key", kms=key_lid)
        fn = next(k for k, v in b.resources.items() if v["resourceType"] == "AWS::Lambda::Function")
        env = b.resources[fn]["properties"]["Environment"]["Variables"]
        env["PROVIDER_WEBHOOK_SECRET"] = "***"  # a NoEcho parameter supplied it
        env["PROVIDER_API_KEY"] = (
            "{{resolve:secretsmanager:" + b.resources[secret]["physicalId"] + ":SecretString:apiKey::}}"
        )
        b.resources[fn]["observedProperties"]["Environment"] = {"Variables": {**env}}
        b.resources[fn]["noEchoLeaves"] = [["Environment", "Variables", "PROVIDER_WEBHOOK_SECRET"]]
        b.resources[fn]["noEchoExactEchoLeaves"] = [["Environment", "Variables", "PROVIDER_WEBHOOK_SECRET"]]
        b.resources[fn]["maskedPropertyFingerprints"] = {"Environment": "sha256:" + _sha256(stack, fn, "Environment")}
        b.resources[fn]["maskedPropertyInputFingerprints"] = {
            "Environment": "inputs-sha256:"
            + _sha256(stack, fn, "inputs")
            + "+sha256:"
            + _sha256(stack, fn, "Environment")
        }
        # A custom resource whose handler answered NoEcho: attributes masked.
        cr = b.lid("ProviderRegistration")
        b.add(
            cr,
            "Custom::ProviderRegistration",
            f"registration-{_uuid(b.rng)[:13]}",
            {"ServiceToken": b.resources[fn]["attributes"]["Arn"], "MerchantId": "acme-prod-01", "Nonce": "3"},
            {"ClientId": "acme-prod-01-client", "ClientSecret": "***", "WebhookSigningKey": "***"},
            deps=[fn],
            provisioned_by=None,
            noEchoAttributeNames=["ClientSecret", "WebhookSigningKey"],
        )
        b.output("ProviderClientSecret", "***")
        # An imported table whose observed baseline cdkd import declined to capture.
        imported = b.table("LegacyLedger", sk=None)
        row = b.resources[imported]
        row.pop("observedProperties")
        row["observedBaselineRefused"] = True
        row["observedBaselineRefusalReason"] = "unverifiable-parameter"
        b.extra["skippedOutputs"] = {"ProviderDashboardUrl": _sha256(stack, "ProviderDashboardUrl")}
        orphan_q = b.lid("ReconciliationQueue")
        b.extra["orphans"] = [
            {
                "logicalId": orphan_q,
                "orphanedAt": self.now - 5 * DAY_MS,
                "state": {
                    "physicalId": f"https://sqs.{region}.amazonaws.com/{spec.account_id}/{stack}-{orphan_q}-9fKq2LmZp0Xa",
                    "resourceType": "AWS::SQS::Queue",
                    "properties": {"QueueName": f"{stack}-{orphan_q}-9fKq2LmZp0Xa", "VisibilityTimeout": 120},
                    "attributes": {"Arn": b.arn("sqs", f"{stack}-{orphan_q}-9fKq2LmZp0Xa")},
                    "deletionPolicy": "Retain",
                    "provisionedBy": "sdk",
                },
            }
        ]
        b.extra["conditionVerdicts"] = {
            "HasProviderSandbox": {"verdict": False, "fingerprint": "sha256:" + _sha256(stack, "HasProviderSandbox")}
        }
        key = self.save(b, self.now - 3 * HOUR_MS)
        self.note("v11_showcase", spec, stack, region, key, "NoEcho masks, orphans, skippedOutputs, conditionVerdicts")

    def newer_version(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        b = StackBuilder(spec, stack, region, version=11)
        build_events(b, "FeatureFlags")
        record = b.state(self.now - 1 * DAY_MS)
        record["version"] = 12  # written by a cdkd newer than this app knows
        record["resourceGraphDigest"] = "sha256:" + _sha256(stack, "graph")
        record["lastModified"] = record.pop("lastModified")
        key = self.plans[spec.account_id].put_state(record, stack, region)
        self.note("newer_version", spec, stack, region, key, "version 12: read-only")

    def dns_stack(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        b = StackBuilder(spec, stack, region, version=11)
        domain = "acme.io" if spec is PRODUCTION else "platform.acme.eu"
        zone = b.hosted_zone("PublicZone", domain)
        b.output("NameServers", b.resources[zone]["attributes"]["NameServers"])  # a list, not a string
        out, alias = export_alias(stack, zone, "Id")
        b.output(out, b.resources[zone]["physicalId"], alias)
        b.output("ZoneConfig", {"domain": domain, "dnssec": False, "ttl": 300})
        key = self.save(b)
        self.note(
            "dns" if spec is PRODUCTION else "platform_dns", spec, stack, region, key, "NameServers output is a list"
        )

    def failed_deploy_leftovers(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:{stack}")
        b = StackBuilder(spec, stack, region, version=11)
        build_data(b, "ShippingFiles")
        fs = b.lid("LabelsFileSystem")
        b.add(
            fs,
            "AWS::EFS::FileSystem",
            f"fs-0{_suffix(b.rng, 16, '0123456789abcdef')}",
            {"Encrypted": True, "PerformanceMode": "generalPurpose", "ThroughputMode": "elastic"},
            {"Arn": b.arn("elasticfilesystem", "file-system/fs-0")},
            deletion="Retain",
        )
        key = self.save(b, self.now - 20 * HOUR_MS)
        self.note(
            "with_journal_and_ledger",
            spec,
            stack,
            region,
            key,
            "rollback-journal.json and create-tokens.json beside it",
        )
        r = RunRecorder(stack, region, "deploy", self.now - 20 * HOUR_MS, rng)
        r.resource("CREATE", fs, "AWS::EFS::FileSystem", b.resources[fs]["physicalId"])
        ap = b.lid("LabelsAccessPoint")
        r.resource(
            "CREATE",
            ap,
            "AWS::EFS::AccessPoint",
            outcome="fail",
            error={
                "name": "ProvisioningError",
                "message": f"Failed to create {ap}: AccessPointLimitExceeded",
                "awsErrorCode": "AccessPointLimitExceeded",
                "requestId": _uuid(rng),
            },
        )
        r.finish()
        self.write_runs(spec, stack, region, [r])
        nonce = _suffix(rng, 32, "0123456789abcdef")
        base = _sha256(stack, fs)[:32]
        plan.put(
            plan.key(stack, region, "create-tokens.json"),
            cdkd_json(
                {
                    "ledgerVersion": 1,
                    "nonce": nonce,
                    "sent": {
                        fs: {
                            "base": base,
                            "token": _sha256(base, nonce)[:32],
                            "firstSentAt": self.now - 20 * HOUR_MS + 900,
                        }
                    },
                    "stateRecorded": True,
                }
            ),
        )
        plan.put(
            plan.key(stack, region, "rollback-journal.json"),
            cdkd_json(
                {
                    "journalVersion": 1,
                    "stackName": stack,
                    "region": region,
                    "segments": [
                        {
                            "runId": r.run_id,
                            "timestamp": r.finished_ms,
                            "reason": "no-rollback-failure",
                            "initialDeploy": False,
                            "cdkdVersion": CDKD_VERSION,
                            "operations": [
                                {
                                    "logicalId": fs,
                                    "changeType": "CREATE",
                                    "resourceType": "AWS::EFS::FileSystem",
                                    "provisionedBy": "sdk",
                                    "physicalId": b.resources[fs]["physicalId"],
                                    "properties": b.resources[fs]["properties"],
                                }
                            ],
                            "failedOperations": [
                                {
                                    "logicalId": ap,
                                    "changeType": "CREATE",
                                    "resourceType": "AWS::EFS::AccessPoint",
                                    "attemptedProperties": {
                                        "FileSystemId": {"Ref": fs},
                                        "PosixUser": {"Uid": "1000", "Gid": "1000"},
                                    },
                                }
                            ],
                        }
                    ],
                }
            ),
        )

    def skipped_destroy(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        rng = random.Random(f"{SEED}:{stack}")
        b = StackBuilder(spec, stack, region, version=10)
        build_analytics(b, "ImageResizer")
        table = next(k for k, v in b.resources.items() if v["resourceType"] == "AWS::Glue::Table")
        b.resources[table]["physicalId"] = "images_catalog"  # not `db|table`: the delete cannot address it
        keep = {table}
        r = RunRecorder(stack, region, "destroy", self.now - 3 * DAY_MS, rng)
        for lid, row in list(b.resources.items()):
            if lid == table:
                r.resource(
                    "DELETE",
                    lid,
                    row["resourceType"],
                    row["physicalId"],
                    outcome="skip",
                    reason="malformed composite physical id 'images_catalog' (expected 'database|table')",
                )
            elif row.get("deletionPolicy") == "Retain":
                r.resource("DELETE", lid, row["resourceType"], row["physicalId"], outcome="retain")
            else:
                r.resource("DELETE", lid, row["resourceType"], row["physicalId"])
        r.finish()
        b.resources = {k: v for k, v in b.resources.items() if k in keep}
        b.outputs = {}
        key = self.save(b, r.finished_ms)
        self.note("skipped_destroy", spec, stack, region, key, "destroy FAILED with RESOURCE_SKIPPED")
        prev = RunRecorder(stack, region, "deploy", self.now - 40 * DAY_MS, rng, "0.284.40")
        for lid, row in list(b.resources.items()):
            prev.resource("CREATE", lid, row["resourceType"], row["physicalId"])
        prev.finish()
        self.write_runs(spec, stack, region, [prev, r])

    def exports_indexes(self) -> None:
        for (account, region), exports in sorted(self.exports.items()):
            plan = self.plans[account]
            plan.put(
                f"{plan.spec.prefix}/_index/{region}/exports.json",
                cdkd_json(
                    {"indexVersion": 1, "region": region, "exports": exports, "lastModified": self.now - HOUR_MS}
                ),
            )

    def build(self) -> None:
        for spec in DEMO_ACCOUNTS:
            self.plans[spec.account_id].summary = AccountSummary(spec.account_id, spec.name, spec.bucket, spec.prefix)
            self.plans[spec.account_id].summary.healthy_stacks = self.healthy(spec)
        self.production()
        self.staging()
        self.platform()
        self.exports_indexes()
        for name, ref in self.versions_seen.items():
            self.interesting.setdefault(f"version_{name}", ref)
        for plan in self.plans.values():
            summary = plan.summary
            assert summary is not None
            all_puts = plan.puts + [p for seq in plan.sequences for p in seq]
            summary.objects = len(all_puts)
            state_keys = {p.key for p in all_puts if p.key.endswith("/state.json")}
            summary.state_records = len(state_keys)
            for k in state_keys:
                parts = k[len(plan.spec.prefix) + 1 :].split("/")
                if len(parts) == 3:
                    summary.regions.add(parts[1])


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------

SessionSource = Mapping[str, boto3.Session] | Callable[[str], boto3.Session]


def _s3(session: boto3.Session, region: str):
    config = Config(
        max_pool_connections=32,
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": "path"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return session.client("s3", region_name=region, config=config)


def _create_bucket(s3, spec: DemoAccountSpec) -> None:
    params: dict[str, Any] = {"Bucket": spec.bucket}
    if spec.bucket_region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": spec.bucket_region}
    try:
        s3.create_bucket(**params)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
            raise
    # cdkd bootstrap creates state buckets versioned; the history page depends on it.
    s3.put_bucket_versioning(Bucket=spec.bucket, VersioningConfiguration={"Status": "Enabled"})


def plan_demo_world(
    now_ms: int, *, big_stack_resources: int = BIG_STACK_RESOURCES
) -> dict[str, list[tuple[str, bytes]]]:
    """Every object the world holds, per account, in write order, without touching S3
    (a key written several times appears once per S3 version)."""
    world = _World(now_ms, big_stack_resources)
    world.build()
    return {
        account_id: [(p.key, p.body) for p in plan.puts] + [(p.key, p.body) for seq in plan.sequences for p in seq]
        for account_id, plan in world.plans.items()
    }


def build_demo_world(
    sessions: SessionSource,
    *,
    now_ms: int | None = None,
    big_stack_resources: int = BIG_STACK_RESOURCES,
    workers: int = 16,
) -> DemoWorld:
    """Create the three demo buckets and fill them. `sessions` gives a boto3 Session per
    account id (a mapping, or a callable such as `assumed_role_session`). The endpoint comes
    from `AWS_ENDPOINT_URL`, as everywhere else in the engine."""
    started = time.monotonic()
    world = _World(now_ms if now_ms is not None else int(time.time() * 1000), big_stack_resources)
    world.build()

    get_session = sessions if callable(sessions) else sessions.__getitem__
    clients = {}
    for spec in DEMO_ACCOUNTS:
        s3 = _s3(get_session(spec.account_id), spec.bucket_region)
        _create_bucket(s3, spec)
        clients[spec.account_id] = s3

    def write(account_id: str, puts: list[_Put]) -> None:
        s3 = clients[account_id]
        bucket = world.plans[account_id].spec.bucket
        for p in puts:
            s3.put_object(
                Bucket=bucket, Key=p.key, Body=p.body, ContentType=p.content_type, ExpectedBucketOwner=account_id
            )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = []
        for account_id, plan in world.plans.items():
            # Big bodies first so they do not finish last on their own.
            for p in sorted(plan.puts, key=lambda p: -len(p.body)):
                futures.append(pool.submit(write, account_id, [p]))
            for seq in plan.sequences:
                futures.append(pool.submit(write, account_id, seq))
        for f in futures:
            f.result()

    summaries = [p.summary for p in world.plans.values() if p.summary is not None]
    return DemoWorld(accounts=summaries, interesting=world.interesting, seconds=time.monotonic() - started)


# --------------------------------------------------------------------------------------
# A stack that leaked secrets, for the scan and scrub pages
# --------------------------------------------------------------------------------------

LEAK_ACCOUNT = "111111111111"
LEAK_STACK = "Prod-PaymentsLegacy"
LEAK_REGION = "us-east-1"


def plant_leaked_secrets(session: boto3.Session) -> StackRef:
    """In the Production account: a Secrets Manager secret and an SSM SecureString, and a
    record whose history holds them in plaintext (an older version's resolved property, the
    current version's output and attribute), as records written before cdkd masked them do.
    Kept apart from `build_demo_world` so its fixed counts stay as they are."""
    spec = next(s for s in DEMO_ACCOUNTS if s.account_id == LEAK_ACCOUNT)
    password, api_key = "Paym3nts-Db-Passw0rd-2024", "pk_live_51DemoKeyForTheScrubPage9xQ"
    sm = session.client("secretsmanager", region_name=LEAK_REGION)
    secret_arn = sm.create_secret(
        Name="prod/payments/db", SecretString=json.dumps({"username": "payments", "password": password})
    )["ARN"]
    session.client("ssm", region_name=LEAK_REGION).put_parameter(
        Name="/prod/payments/api-key", Value=api_key, Type="SecureString"
    )
    db = {
        "physicalId": "payments-legacy-db",
        "resourceType": "AWS::RDS::DBInstance",
        "properties": {
            "DBInstanceIdentifier": "payments-legacy-db",
            "MasterUsername": "payments",
            "MasterUserPassword": f"{{{{resolve:secretsmanager:{secret_arn}:SecretString:password::}}}}",
        },
        "attributes": {"Endpoint.Address": "payments-legacy-db.demo.us-east-1.rds.amazonaws.com"},
        "provisionedBy": "sdk",
        "deletionPolicy": "Snapshot",
    }
    older = {"version": 8, "stackName": LEAK_STACK, "region": LEAK_REGION, "lastModified": 1760000000000}
    older["resources"] = {"Db": {**db, "properties": {**db["properties"], "MasterUserPassword": password}}}
    older["outputs"] = {}
    current = {"version": 11, "stackName": LEAK_STACK, "region": LEAK_REGION, "lastModified": 1790000000000}
    current["resources"] = {"Db": {**db, "attributes": {**db["attributes"], "ApiKey": api_key}}}
    current["outputs"] = {"DbUrl": f"postgres://payments:{password}@payments-legacy-db:5432/payments"}
    current["exportNames"] = []
    s3 = _s3(session, spec.bucket_region)
    key = f"{spec.prefix}/{LEAK_STACK}/{LEAK_REGION}/state.json"
    for body in (older, current):  # one after the other: two versions, the plaintext one first
        s3.put_object(Bucket=spec.bucket, Key=key, Body=cdkd_json(body), ContentType="application/json")
    return StackRef(spec.account_id, LEAK_STACK, LEAK_REGION, key, "secrets in plaintext, current and history")
