"""The test proxy in front of moto: forwarding, latency, counting, denials."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.support.s3proxy import classify

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"


def _s3(aws, account: str = ACCOUNT):
    """A client in the account that goes through the proxy (the env's AWS_ENDPOINT_URL)."""
    session = aws.account_session(account)
    config = Config(max_pool_connections=64, request_checksum_calculation="when_required")
    return session.client("s3", region_name="us-east-1", config=config)


def test_it_forwards_requests_and_bodies_verbatim(aws):
    aws.make_bucket(ACCOUNT, "proxy-forward")
    s3 = _s3(aws)

    body = bytes(range(256)) * 64
    put = s3.put_object(Bucket="proxy-forward", Key="dir/a b+c.bin", Body=body)

    assert aws.get(ACCOUNT, "proxy-forward", "dir/a b+c.bin") == body  # stored as sent
    got = s3.get_object(Bucket="proxy-forward", Key="dir/a b+c.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == put["ETag"]
    assert s3.head_object(Bucket="proxy-forward", Key="dir/a b+c.bin")["ContentLength"] == len(body)


def test_it_uses_path_style_urls_for_an_ip_endpoint(aws):
    aws.make_bucket(ACCOUNT, "proxy-path-style")
    s3 = _s3(aws)
    urls: list[str] = []
    s3.meta.events.register("before-send.s3", lambda request, **kw: urls.append(request.url))

    s3.list_objects_v2(Bucket="proxy-path-style")

    assert urls == [f"{aws.endpoint}/proxy-path-style?list-type=2&encoding-type=url"]


def test_it_counts_requests_by_operation(aws):
    aws.make_bucket(ACCOUNT, "proxy-count")
    s3 = _s3(aws)
    aws.reset_counts()

    s3.head_bucket(Bucket="proxy-count")
    s3.get_bucket_location(Bucket="proxy-count")
    s3.put_object(Bucket="proxy-count", Key="k", Body=b"v")
    s3.put_object(Bucket="proxy-count", Key="k", Body=b"w")
    s3.get_object(Bucket="proxy-count", Key="k")
    s3.head_object(Bucket="proxy-count", Key="k")
    s3.list_objects_v2(Bucket="proxy-count")
    s3.list_object_versions(Bucket="proxy-count", Prefix="k")
    s3.delete_object(Bucket="proxy-count", Key="k")

    assert dict(aws.requests) == {
        "HeadBucket": 1,
        "GetBucketLocation": 1,
        "PutObject": 2,
        "GetObject": 1,
        "HeadObject": 1,
        "ListObjectsV2": 1,
        "ListObjectVersions": 1,
        "DeleteObject": 1,
    }
    aws.reset_counts()
    assert dict(aws.requests) == {}


def test_it_counts_sts_calls(aws):
    sts = boto3.Session().client("sts", region_name="us-east-1")

    sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/x", RoleSessionName="probe")
    sts.get_caller_identity()

    assert aws.requests["AssumeRole"] == 1
    assert aws.requests["GetCallerIdentity"] == 1


def test_it_adds_latency_to_each_request(aws):
    aws.make_bucket(ACCOUNT, "proxy-latency")
    s3 = _s3(aws)
    s3.head_bucket(Bucket="proxy-latency")  # warm the connection

    aws.proxy.latency = 0.1
    start = time.monotonic()
    for _ in range(3):
        s3.head_bucket(Bucket="proxy-latency")
    elapsed = time.monotonic() - start

    assert elapsed >= 0.3


def test_it_serves_concurrent_requests_in_parallel(aws):
    aws.make_bucket(ACCOUNT, "proxy-concurrent")
    aws.put_many(ACCOUNT, "proxy-concurrent", {f"k{i}": f"v{i}" for i in range(64)})
    s3 = _s3(aws)
    aws.proxy.latency = 0.2

    start = time.monotonic()
    with ThreadPoolExecutor(64) as pool:
        bodies = list(
            pool.map(lambda i: s3.get_object(Bucket="proxy-concurrent", Key=f"k{i}")["Body"].read(), range(64))
        )
    elapsed = time.monotonic() - start

    assert bodies == [f"v{i}".encode() for i in range(64)]
    assert aws.requests["GetObject"] == 64
    # 64 sequential requests would take 12.8 s; in parallel it is a few round trips.
    assert elapsed < 3.0


def test_it_denies_a_bucket_with_s3s_access_denied(aws):
    aws.make_bucket(ACCOUNT, "proxy-denied")
    aws.make_bucket(ACCOUNT, "proxy-allowed")
    aws.put(ACCOUNT, "proxy-denied", "k", b"secret")
    s3 = _s3(aws)
    aws.deny("proxy-denied")

    with pytest.raises(ClientError) as get_error:
        s3.get_object(Bucket="proxy-denied", Key="k")
    with pytest.raises(ClientError) as head_error:
        s3.head_bucket(Bucket="proxy-denied")

    assert get_error.value.response["Error"]["Code"] == "AccessDenied"
    assert get_error.value.response["Error"]["Message"] == "Access Denied"
    assert get_error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert head_error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert s3.list_objects_v2(Bucket="proxy-allowed")["KeyCount"] == 0  # others still work
    assert aws.requests["GetObject"] == 1  # denied requests are counted too

    aws.proxy.allow("proxy-denied")
    assert s3.get_object(Bucket="proxy-denied", Key="k")["Body"].read() == b"secret"


def test_it_denies_an_operation(aws):
    aws.proxy.deny_operation("AssumeRole")
    sts = boto3.Session().client("sts", region_name="us-east-1")

    with pytest.raises(ClientError) as error:
        sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/x", RoleSessionName="probe")

    assert error.value.response["Error"]["Code"] == "AccessDenied"
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_it_classifies_s3_and_sts_requests():
    assert classify("GET", "/b", "list-type=2&prefix=cdkd%2F") == "ListObjectsV2"
    assert classify("GET", "/b", "versions&prefix=k") == "ListObjectVersions"
    assert classify("GET", "/b", "location") == "GetBucketLocation"
    assert classify("HEAD", "/b", "") == "HeadBucket"
    assert classify("GET", "/b/cdkd/s/us-east-1/state.json", "") == "GetObject"
    assert classify("GET", "/b/k", "versionId=v1") == "GetObject"
    assert classify("PUT", "/b/k", "") == "PutObject"
    assert classify("PUT", "/b/k", "", headers={"X-Amz-Copy-Source": "/b/j"}) == "CopyObject"
    assert classify("DELETE", "/b/k", "") == "DeleteObject"
    assert classify("HEAD", "/b/k", "") == "HeadObject"
    assert classify("POST", "/b", "delete") == "DeleteObjects"
    assert classify("PUT", "/b", "") == "CreateBucket"
    assert classify("POST", "/", "", b"Action=AssumeRole&Version=2011-06-15") == "AssumeRole"
