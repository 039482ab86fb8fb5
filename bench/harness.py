"""What the moto-backed benchmarks share: a moto server behind the S3 proxy (which counts
requests and can add latency), the environment that points boto3 at it, and the bench
account's assumed-role session with its versioned state bucket."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def moto_world() -> Iterator[Any]:
    """A started moto server and its S3 proxy (yielded), stopped on exit."""
    from tests.support.motoserver import MotoServer
    from tests.support.s3proxy import S3Proxy

    moto = MotoServer().start()
    proxy = S3Proxy(moto.url, latency=0.0).start()
    os.environ.update(
        AWS_ENDPOINT_URL=moto.url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        yield proxy
    finally:
        proxy.stop()
        moto.stop()


def account_session(account: str) -> Any:
    """The account's session, through the role the app assumes (`cdkd-admin`)."""
    import boto3

    sts = boto3.client("sts", region_name="us-east-1")
    creds = sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/cdkd-admin", RoleSessionName="bench")["Credentials"]
    return boto3.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name="us-east-1",
    )


def versioned_bucket(session: Any, bucket: str) -> None:
    s3 = session.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
