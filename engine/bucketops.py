"""Whole-bucket and whole-prefix S3 calls that `engine.backend.StateBucket` does not make
(it works key by key): version listings of a prefix, batch version deletes, and the bucket
calls of `state migrate` (create with cdkd bootstrap's hardening, delete when empty).

Same contract as the backend: every call names the account's `ExpectedBucketOwner` (except
CreateBucket, which has no such parameter), and failures are `engine.errors` types naming
the IAM action, bucket and account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine import aws
from engine.backend import StateBucket, VersionInfo, _version
from engine.errors import EngineError

BATCH = 1000  # DeleteObjects takes at most 1,000 keys


def call(bucket: StateBucket, api: str, method_name: str, **params: Any) -> dict[str, Any]:
    """`bucket`'s client method `method_name`, counted, with ExpectedBucketOwner, errors mapped."""
    s3 = aws.client(bucket.session, "s3", bucket.region)
    bucket.requests.add(api)
    params.setdefault("Bucket", bucket.name)
    if api != "CreateBucket":
        params["ExpectedBucketOwner"] = bucket.account_id
    try:
        return getattr(s3, method_name)(**params)
    except (ClientError, BotoCoreError) as exc:
        raise aws.s3_error(exc, api=api, account_id=bucket.account_id, bucket=params["Bucket"]) from None


def all_versions(bucket: StateBucket, prefix: str = "") -> Iterator[VersionInfo]:
    """Every version and delete marker under `prefix` (the whole bucket by default)."""
    params: dict[str, Any] = {"Prefix": prefix}
    while True:
        page = call(bucket, "ListObjectVersions", "list_object_versions", **params)
        for item in page.get("Versions", []):
            yield _version(item, delete_marker=False)
        for item in page.get("DeleteMarkers", []):
            yield _version(item, delete_marker=True)
        if not page.get("IsTruncated"):
            return
        params["KeyMarker"] = page["NextKeyMarker"]
        params["VersionIdMarker"] = page.get("NextVersionIdMarker")


@dataclass
class DeleteResult:
    deleted: int
    errors: list[str]  # "key (version v): Code: message", for people


def delete_versions(bucket: StateBucket, versions: list[VersionInfo]) -> DeleteResult:
    """Permanently delete these versions and markers. A refusal of one (DeleteObjects
    reports them per key and still answers 200) is collected, not raised; NoSuchVersion
    counts as deleted (it is gone, which is what was asked)."""
    deleted, errors = 0, []
    for start in range(0, len(versions), BATCH):
        batch = versions[start : start + BATCH]
        objects = [{"Key": v.key, "VersionId": v.version_id} for v in batch]
        response = call(bucket, "DeleteObjects", "delete_objects", Delete={"Objects": objects, "Quiet": True})
        failed = [e for e in response.get("Errors") or [] if e.get("Code") != "NoSuchVersion"]
        deleted += len(batch) - len(failed)
        errors += [
            f"{e.get('Key')} (version {e.get('VersionId', '?')}): {e.get('Code')}: {e.get('Message', '')}".rstrip(": ")
            for e in failed
        ]
    return DeleteResult(deleted, errors)


def deny_external_policy(bucket_name: str, account_id: str) -> str:
    """The account-only policy cdkd bootstrap puts on a state bucket."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyExternalAccess",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [f"arn:aws:s3:::{bucket_name}", f"arn:aws:s3:::{bucket_name}/*"],
                    "Condition": {"StringNotEquals": {"aws:PrincipalAccount": account_id}},
                }
            ],
        }
    )


def create_hardened(bucket: StateBucket, *, policy: bool = True) -> bool:
    """Create `bucket` (in `bucket.region`) as cdkd bootstrap does: versioning on, AES-256
    default encryption, every public access blocked, and (unless `policy` is False: the
    caller puts it later with `put_policy`) the deny-external-access policy. Returns False
    when it already existed and was ours (then it is left as it is)."""
    params: dict[str, Any] = {}
    if bucket.region != aws.DEFAULT_REGION:
        params["CreateBucketConfiguration"] = {"LocationConstraint": bucket.region}
    try:
        call(bucket, "CreateBucket", "create_bucket", **params)
    except EngineError as exc:
        if getattr(exc, "code", "") == "BucketAlreadyOwnedByYou":
            return False
        raise
    call(bucket, "PutBucketVersioning", "put_bucket_versioning", VersioningConfiguration={"Status": "Enabled"})
    call(
        bucket,
        "PutBucketEncryption",
        "put_bucket_encryption",
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    call(
        bucket,
        "PutPublicAccessBlock",
        "put_public_access_block",
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    if policy:
        put_policy(bucket)
    return True


def put_policy(bucket: StateBucket) -> None:
    call(bucket, "PutBucketPolicy", "put_bucket_policy", Policy=deny_external_policy(bucket.name, bucket.account_id))


def exists(bucket: StateBucket, name: str) -> bool:
    """HeadBucket: True, False on 404; a denial or another error raises."""
    try:
        call(bucket, "HeadBucket", "head_bucket", Bucket=name)
        return True
    except EngineError as exc:
        if getattr(exc, "status", None) == 404 or getattr(exc, "code", "") in ("404", "NoSuchBucket"):
            return False
        raise


def get_with_type(bucket: StateBucket, key: str) -> tuple[bytes, str, str]:
    """(bytes, ETag, Content-Type) of the current object at `key`."""
    response = call(bucket, "GetObject", "get_object", Key=key)
    try:
        body = response["Body"].read()
    except (BotoCoreError, OSError) as exc:
        raise aws.s3_error(exc, api="GetObject", account_id=bucket.account_id, bucket=bucket.name, key=key) from None
    return body, response["ETag"], response.get("ContentType") or "binary/octet-stream"
