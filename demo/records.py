"""One stack record: CDK-shaped resource rows, outputs, and the schema-version downgrade."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from demo.accounts import (
    JSON_TYPE,
    SEED,
    AccountSummary,
    DemoAccountSpec,
)
from demo.formats import _hash8, _sha256, _suffix, _uuid, cdkd_json

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

    def table(
        self, path: str, *, pk: str = "pk", sk: str | None = "sk", stream: bool = False, retain: bool = True
    ) -> str:
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
            deletion="Retain" if retain else None,
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
                "Roles": [self.resources[role]["physicalId"]],  # resolved, as cdkd stores it
            },
            deps=[role],
        )

    def log_group(self, function: str, days: int = 30, *, retain: bool = True) -> str:
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
            deletion="Retain" if retain else "Delete",
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

    def kms_key(self, path: str, alias: str | None = None, *, retain: bool = True) -> str:
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
            deletion="Retain" if retain else None,
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


# Where the objects go before they are written


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
