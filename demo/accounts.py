"""The demo's three accounts, how to reach them, and what seeding them returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import boto3

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
    resources: int = 0  # AWS resources created in the demo's moto server
    destroyable: list[StackRef] = field(default_factory=list)  # a destroy of one ends Succeeded

    @property
    def objects(self) -> int:
        return sum(a.objects for a in self.accounts)

    @property
    def state_records(self) -> int:
        return sum(a.state_records for a in self.accounts)

    def count_planted(self, ref: StackRef, versions: int = 2) -> None:
        """Count a record written after the seed (`plant_leaked_secrets`), so the summary
        names what a sync will list."""
        for a in self.accounts:
            if a.account_id == ref.account_id:
                a.state_records += 1
                a.objects += versions
                if ref.region:
                    a.regions.add(ref.region)

    def describe(self) -> list[str]:
        """Short lines for the demo's start-up output."""
        lines = []
        for a in self.accounts:
            lines.append(
                f"{a.account_id} {a.name:<12} s3://{a.bucket}/{a.prefix}/  "
                f"{a.state_records} records in {', '.join(sorted(a.regions))}"
            )
        return lines
