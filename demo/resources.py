"""The AWS resources the demo's healthy records describe, created in the demo's moto server.

A destroy in the demo deletes real things: every SQS queue, SNS topic and subscription,
DynamoDB table, S3 bucket, IAM role and inline policy, SSM parameter, Lambda function and
log group, KMS key and Secrets Manager secret that a healthy stack's record lists is created
under the physical id the record holds. Where AWS picks the id (an SNS subscription's ARN, a
KMS key's id, a secret's ARN suffix), the record is given AWS's id, everywhere it appears,
before it is written. The types only Cloud Control deletes (which moto does not serve) are
not created: the stacks the demo offers to destroy (`DESTROYABLE_KINDS`, less the Data
stacks an Api stack imports from, which a destroy refuses) hold none of them.
"""

from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from demo.records import StackBuilder

# The stack kinds whose every row is an SDK type the demo creates: a destroy of one ends
# Succeeded with every row deleted.
DESTROYABLE_KINDS = ("Data", "Events", "Api")

_SESSION_LOCK = threading.Lock()
_CONFIG = Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=32)
# moto validates inline policy documents; the record's own holds CloudFormation intrinsics.
_POLICY = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sqs:SendMessage","Resource":"*"}]}'


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.js", "exports.handler = async () => ({ statusCode: 200 });\n")
    return buffer.getvalue()


CODE = _zip()


@dataclass
class LiveStack:
    """One healthy stack whose resources exist in AWS; `record` is the dict written to S3."""

    builder: StackBuilder
    record: dict[str, Any]
    kind: str
    put: Any  # the record's pending S3 write, re-encoded once AWS has named what it names


def _order(rows: dict[str, dict[str, Any]]) -> list[str]:
    """Logical ids, dependencies first (a role before its policy and function, ...)."""
    done: list[str] = []
    seen: set[str] = set()

    def visit(lid: str) -> None:
        if lid in seen or lid not in rows:
            return
        seen.add(lid)
        for dep in rows[lid].get("dependencies", []):
            visit(dep)
        done.append(lid)

    for lid in rows:
        visit(lid)
    return done


class _Clients:
    """One client per (account, service, region), shared by the threads: building a client
    costs tens of milliseconds, and a client is thread-safe once built."""

    def __init__(self, get_session: Callable[[str], boto3.Session]) -> None:
        self.get_session = get_session
        self._sessions: dict[str, boto3.Session] = {}  # one AssumeRole per account
        self._cache: dict[tuple[str, str, str], Any] = {}

    def __call__(self, account: str, service: str, region: str) -> Any:
        key = (account, service, "us-east-1" if service == "iam" else region)
        with _SESSION_LOCK:  # Session.client is not thread-safe
            if key not in self._cache:
                if account not in self._sessions:
                    self._sessions[account] = self.get_session(account)
                session = self._sessions[account]
                self._cache[key] = session.client(service, region_name=key[2], config=_CONFIG)
            return self._cache[key]


class _Creator:
    def __init__(self, clients: _Clients, account: str, region: str) -> None:
        self.clients = clients
        self.account = account
        self.region = region

    def client(self, service: str) -> Any:
        return self.clients(self.account, service, self.region)

    def create(self, live: LiveStack) -> int:
        """Create the stack's resources; returns how many. Rewrites AWS-chosen ids in `live.record`."""
        self.live = live
        rows = live.record["resources"]
        made = 0
        for lid in _order(rows):
            row = rows[lid]
            maker = getattr(self, "_" + row["resourceType"].replace("::", "_").lower(), None)
            if maker is not None:
                maker(row, rows)
                made += 1
        return made

    def _aws_sqs_queue(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        name = row["physicalId"].rsplit("/", 1)[1]
        attributes = {"VisibilityTimeout": "300"}
        if name.endswith(".fifo"):
            attributes["FifoQueue"] = "true"
        self.client("sqs").create_queue(QueueName=name, Attributes=attributes)

    def _aws_sns_topic(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        self.client("sns").create_topic(Name=row["physicalId"].rsplit(":", 1)[1])

    def _aws_sns_subscription(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        topic = rows[row["properties"]["TopicArn"]["Ref"]]["physicalId"]
        queue = rows[row["properties"]["Endpoint"]["Fn::GetAtt"][0]]["attributes"]["Arn"]
        answer = self.client("sns").subscribe(
            TopicArn=topic, Protocol="sqs", Endpoint=queue, ReturnSubscriptionArn=True
        )
        row["physicalId"] = answer["SubscriptionArn"]  # AWS names a subscription, not the template

    def _aws_dynamodb_table(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        props = row["properties"]
        params: dict[str, Any] = {
            "TableName": row["physicalId"],
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": "PAY_PER_REQUEST",
        }
        if "StreamSpecification" in props:
            params["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
        self.client("dynamodb").create_table(**params)

    def _aws_s3_bucket(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        params: dict[str, Any] = {"Bucket": row["physicalId"]}
        if self.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        self.client("s3").create_bucket(**params)

    def _aws_iam_role(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        document = json.dumps(row["properties"]["AssumeRolePolicyDocument"])
        self.client("iam").create_role(RoleName=row["physicalId"], AssumeRolePolicyDocument=document)

    def _aws_iam_policy(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        props = row["properties"]
        for role in props["Roles"]:
            self.client("iam").put_role_policy(RoleName=role, PolicyName=props["PolicyName"], PolicyDocument=_POLICY)

    def _aws_ssm_parameter(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        props = row["properties"]
        self.client("ssm").put_parameter(Name=row["physicalId"], Value=props["Value"], Type="String", Overwrite=True)

    def _aws_lambda_function(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        props = row["properties"]
        role = rows[props["Role"]["Fn::GetAtt"][0]]["attributes"]["Arn"]
        self.client("lambda").create_function(
            FunctionName=row["physicalId"],
            Runtime=props["Runtime"],
            Role=role,
            Handler=props["Handler"],
            Code={"ZipFile": CODE},
            MemorySize=props["MemorySize"],
            Timeout=props["Timeout"],
        )

    def _aws_logs_loggroup(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        self.client("logs").create_log_group(logGroupName=row["physicalId"])

    def _aws_kms_key(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        meta = self.client("kms").create_key(Description=row["physicalId"])["KeyMetadata"]
        self.rename(row["physicalId"], meta["KeyId"])  # the ARN ends with the id
        arn = (row.get("attributes") or {}).get("Arn")
        if arn and arn != meta["Arn"]:
            self.rename(arn, meta["Arn"])

    def _aws_secretsmanager_secret(self, row: dict[str, Any], rows: dict[str, Any]) -> None:
        props = row["properties"]
        # The value is the demo's own (never shown: the record holds no secret string).
        answer = self.client("secretsmanager").create_secret(
            Name=props["Name"], SecretString='{"username":"app","password":"demo-only"}'
        )
        self.rename(row["physicalId"], answer["ARN"])

    def rename(self, old: str, new: str) -> None:
        """AWS chose `new` for what the record called `old`: rewrite every string of the
        record that holds it (the row's id and attributes, references such as a bucket's
        KMSMasterKeyID, `{{resolve:secretsmanager:...}}`, outputs)."""

        def walk(value: Any) -> Any:
            if isinstance(value, str):
                return value.replace(old, new) if old in value else value
            if isinstance(value, dict):
                for k in value:
                    value[k] = walk(value[k])
            elif isinstance(value, list):
                value[:] = [walk(v) for v in value]
            return value

        walk(self.live.record)


def create_resources(get_session: Callable[[str], boto3.Session], stacks: list[LiveStack], *, workers: int = 8) -> int:
    """Create every listed stack's resources (stacks in parallel, rows in dependency order);
    returns how many resources were created."""

    clients = _Clients(get_session)

    def one(live: LiveStack) -> int:
        return _Creator(clients, live.builder.account, live.builder.region).create(live)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(one, stacks))
