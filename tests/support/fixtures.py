"""pytest fixtures for integration tests against a moto server (no Django imported here).

- `moto_server` (session): a moto server in its own process; `.url`, `.reset()`.
- `proxy` (session): an `S3Proxy` in front of it (latency 0, no rules).
- `aws` (function): a clean moto, the proxy's rules and counts cleared, the environment
  pointed at the proxy (`AWS_ENDPOINT_URL`, fake credentials, us-east-1) and the engine's
  caches cleared before and after. Yields an `AwsHelper`.

The helper's own setup calls (buckets, seeding) go straight to moto, not through the proxy,
so the proxy's counts and deny rules only ever see the code under test.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config

from engine import aws as engine_aws
from tests.support.motoserver import MotoServer
from tests.support.s3proxy import S3Proxy

ROLE_NAME = "cdkd-admin"


def role_arn(account_id: str) -> str:
    return f"arn:aws:iam::{account_id}:role/{ROLE_NAME}"


def to_bytes(body: bytes | str | Mapping[str, Any] | list[Any]) -> bytes:
    """What cdkd would store: JSON with indent 2 and no trailing newline for a dict."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, indent=2).encode()


class AwsHelper:
    """Set up and inspect moto state per account, beside the code under test."""

    def __init__(self, moto: MotoServer, proxy: S3Proxy) -> None:
        self.moto = moto
        self.proxy = proxy
        self.endpoint = proxy.url  # what the code under test talks to
        self._sessions: dict[str, boto3.Session] = {}
        self._clients: dict[tuple[str, str], Any] = {}
        self._config = Config(
            max_pool_connections=32,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )

    @property
    def requests(self) -> Counter[str]:
        """The proxy's counts of requests the code under test made, by API name."""
        return self.proxy.counts

    def reset_counts(self) -> None:
        self.proxy.reset_counts()

    def deny(self, bucket: str) -> None:
        """Every request for `bucket` through the proxy gets S3's 403 AccessDenied."""
        self.proxy.deny(bucket)

    def access(self, account_id: str, **kwargs: Any) -> engine_aws.AccountAccess:
        """An AccountAccess that assumes this helper's role in the account."""
        kwargs.setdefault("role_arn", role_arn(account_id))
        return engine_aws.AccountAccess(account_id=account_id, **kwargs)

    def account_session(self, account_id: str) -> boto3.Session:
        """A boto3 Session assumed into `account_id` (moto scopes resources by account)."""
        if account_id not in self._sessions:
            sts = engine_aws.new_session().client("sts", region_name="us-east-1", endpoint_url=self.moto.url)
            creds = sts.assume_role(RoleArn=role_arn(account_id), RoleSessionName="cdkd-tests")["Credentials"]
            # new_session shares botocore's parsed models: building clients stays cheap.
            self._sessions[account_id] = engine_aws.new_session(
                aws_access_key_id=creds["AccessKeyId"],
                aws_secret_access_key=creds["SecretAccessKey"],
                aws_session_token=creds["SessionToken"],
                region_name="us-east-1",
            )
        return self._sessions[account_id]

    def s3(self, account_id: str, region: str = "us-east-1") -> Any:
        """A plain S3 client in the account, straight to moto (bypasses the proxy)."""
        key = (account_id, region)
        if key not in self._clients:
            self._clients[key] = self.account_session(account_id).client(
                "s3", region_name=region, endpoint_url=self.moto.url, config=self._config
            )
        return self._clients[key]

    def make_bucket(self, account_id: str, name: str, region: str = "us-east-1", versioning: bool = True) -> str:
        s3 = self.s3(account_id, region)
        if region == "us-east-1":
            s3.create_bucket(Bucket=name)
        else:
            s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})
        if versioning:
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name

    def put(self, account_id: str, bucket: str, key: str, body: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
        """Store `body` at `key`; returns S3's answer (ETag with quotes, VersionId)."""
        response = self.s3(account_id).put_object(Bucket=bucket, Key=key, Body=to_bytes(body))
        return {"ETag": response["ETag"], "VersionId": response.get("VersionId")}

    def put_many(
        self, account_id: str, bucket: str, objects: Mapping[str, bytes | str | Mapping[str, Any]], threads: int = 16
    ) -> None:
        """Seed many objects at once (threads: moto runs in its own process)."""
        s3 = self.s3(account_id)
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=to_bytes(kv[1])), objects.items()))

    def get(self, account_id: str, bucket: str, key: str, version_id: str | None = None) -> bytes:
        """The stored bytes, read straight from moto."""
        extra = {"VersionId": version_id} if version_id else {}
        return self.s3(account_id).get_object(Bucket=bucket, Key=key, **extra)["Body"].read()

    def etag(self, account_id: str, bucket: str, key: str) -> str | None:
        """The current ETag of the key, or None when it has no current version."""
        from botocore.exceptions import ClientError

        try:
            return self.s3(account_id).head_object(Bucket=bucket, Key=key)["ETag"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def delete(self, account_id: str, bucket: str, key: str) -> dict[str, Any]:
        """A plain delete (a delete marker in a versioned bucket)."""
        response = self.s3(account_id).delete_object(Bucket=bucket, Key=key)
        return {"DeleteMarker": response.get("DeleteMarker"), "VersionId": response.get("VersionId")}


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def proxy(moto_server: MotoServer) -> Iterator[S3Proxy]:
    server = S3Proxy(moto_server.url).start()
    yield server
    server.stop()


@pytest.fixture
def aws(moto_server: MotoServer, proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsHelper]:
    moto_server.reset()
    proxy.clear_rules()
    proxy.latency = 0.0
    proxy.reset_counts()
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_REGION",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_STS",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # No stray ~/.aws config may change regions, retries or credentials under the tests.
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    engine_aws.clear_caches()
    yield AwsHelper(moto_server, proxy)
    engine_aws.clear_caches()
    proxy.clear_rules()
    proxy.latency = 0.0
