"""AWS access per account: one boto3 session per (account, actor), the state bucket's
name and region. INTERFACE STUB: implemented by the AWS helper; signatures are fixed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AccountAccess:
    account_id: str
    role_arn: str = ""  # empty: use the process's own credentials
    external_id: str = ""
    bucket: str = ""  # explicit bucket; empty resolves as cdkd does
    prefix: str = "cdkd"
    region: str = "us-east-1"  # cdkd's CLI region (names the legacy bucket)


@dataclass(frozen=True)
class ResolvedBucket:
    name: str
    source: str  # "explicit" | "default" | "default-legacy"
    region: str  # from GetBucketLocation
    warning: str = ""  # e.g. the legacy-name deprecation warning


def session_for(access: AccountAccess, actor: str):
    """A boto3 Session for the account (AssumeRole with refreshing credentials)."""
    raise NotImplementedError


def client(session, service: str, region: str | None = None):
    raise NotImplementedError


def resolve_bucket(access: AccountAccess, session) -> ResolvedBucket:
    raise NotImplementedError


def bucket_region(session, bucket: str, expected_owner: str) -> str:
    raise NotImplementedError
