"""AWS::S3::Bucket: DeleteBucket; and for deploys create, update, read of a subset.

A bucket that still holds objects (or versions, or delete markers) fails as CloudFormation
fails it: `BucketNotEmpty`. The provider never empties a bucket; emptying is a person's
decision (cdkd does it only under `--force`/CDK's auto-delete, which the admin does not offer).

Deploy (reference 5.7, 7.2 order 2): the bucket name is the physical id (lowercase,
`[a-z0-9.-]`, max 63); attributes `Arn`, `DomainName`, `DualStackDomainName`,
`RegionalDomainName`, `WebsiteURL`, all derived from name and region as cdkd records them;
`CreateBucketConfiguration` outside us-east-1; the sub-configurations of the subset
(`VersioningConfiguration`, `BucketEncryption`, `PublicAccessBlockConfiguration`,
`OwnershipControls`, `Tags`) are applied after CreateBucket, and a failure there deletes the
bucket again. `BucketAlreadyOwnedByYou` is a name collision here: this engine never adopts.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from engine.deploy.names import physical_name
from engine.providers.base import (
    DELETED,
    Clients,
    CreateResult,
    DeployCalls,
    DeployTarget,
    ProviderError,
    ResourceRef,
    SdkProvider,
    UpdateResult,
    already_exists,
    describe,
    error_code,
    provider_error,
    request_id,
    tag_map,
)

BUCKET = "AWS::S3::Bucket"


def bucket_attributes(name: str, region: str, partition: str = "aws") -> dict[str, str]:
    suffix = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    return {
        "Arn": f"arn:{partition}:s3:::{name}",
        "DomainName": f"{name}.s3.{suffix}",
        "DualStackDomainName": f"{name}.s3.dualstack.{region}.{suffix}",
        "RegionalDomainName": f"{name}.s3.{region}.{suffix}",
        "WebsiteURL": f"http://{name}.s3-website-{region}.{suffix}",
    }


class BucketProvider(SdkProvider, DeployCalls):
    types = (BUCKET,)
    handled = frozenset(
        {
            "BucketName",
            "VersioningConfiguration",
            "BucketEncryption",
            "PublicAccessBlockConfiguration",
            "OwnershipControls",
            "Tags",
        }
    )
    not_found_codes = frozenset({"NoSuchBucket"})
    action = "DeleteBucket"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        s3 = clients("s3", ref.region)
        params = {"Bucket": physical_id}
        if ref.account_id:
            # A same-named bucket in another account is not ours: S3 answers 403, never deletes it.
            params["ExpectedBucketOwner"] = ref.account_id
        try:
            s3.delete_bucket(**params)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "BucketNotEmpty":
                raise ProviderError(
                    f"{describe(ref, physical_id)}: DeleteBucket failed: bucket not empty (BucketNotEmpty); "
                    f"empty it (every object version and delete marker) and run the destroy again",
                    aws_code="BucketNotEmpty",
                    request_id=request_id(exc),
                ) from None
            raise
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(BUCKET, logical_id, properties, stack_name=target.stack_name)
        s3 = clients("s3", target.region)
        try:  # us-east-1 answers 200 to CreateBucket of a bucket you own: ask first
            s3.head_bucket(Bucket=name)
        except ClientError as exc:
            if error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
                raise already_exists(logical_id, resource_type, name) from None  # 403: someone else's
        else:
            raise already_exists(logical_id, resource_type, name)
        params: dict[str, Any] = {"Bucket": name}
        if target.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": target.region}
        try:
            s3.create_bucket(**params)
        except ClientError as exc:
            if error_code(exc) in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, BUCKET, name), "CreateBucket", exc) from None
        try:
            self._configure(s3, logical_id, name, {}, properties)
        except ProviderError:
            s3.delete_bucket(Bucket=name)  # cdkd's rule: never leave what the engine cannot record
            raise
        return CreateResult(name, bucket_attributes(name, target.region, target.partition))

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        name = ref.physical_id or ""
        self._configure(clients("s3", ref.region), ref.logical_id, name, ref.properties, properties)
        return UpdateResult(name, bucket_attributes(name, ref.region, target.partition))

    def _configure(self, s3: Any, lid: str, name: str, old: dict, new: dict) -> None:
        def call(action: str, fn: Any, **kw: Any) -> None:
            self._guarded(lid, BUCKET, name, action, fn, Bucket=name, **kw)

        if old.get("VersioningConfiguration") != new.get("VersioningConfiguration"):
            status = (new.get("VersioningConfiguration") or {}).get("Status") or (
                "Suspended" if old.get("VersioningConfiguration") else None
            )
            if status:
                call("PutBucketVersioning", s3.put_bucket_versioning, VersioningConfiguration={"Status": status})
        if old.get("BucketEncryption") != new.get("BucketEncryption"):
            if new.get("BucketEncryption"):
                call(
                    "PutBucketEncryption",
                    s3.put_bucket_encryption,
                    ServerSideEncryptionConfiguration={
                        "Rules": (new["BucketEncryption"].get("ServerSideEncryptionConfiguration") or [])
                    },
                )
            else:
                call("DeleteBucketEncryption", s3.delete_bucket_encryption)
        if old.get("PublicAccessBlockConfiguration") != new.get("PublicAccessBlockConfiguration"):
            if new.get("PublicAccessBlockConfiguration"):
                call(
                    "PutPublicAccessBlock",
                    s3.put_public_access_block,
                    PublicAccessBlockConfiguration=new["PublicAccessBlockConfiguration"],
                )
            else:
                call("DeletePublicAccessBlock", s3.delete_public_access_block)
        if old.get("OwnershipControls") != new.get("OwnershipControls"):
            if new.get("OwnershipControls"):
                call(
                    "PutBucketOwnershipControls",
                    s3.put_bucket_ownership_controls,
                    OwnershipControls=new["OwnershipControls"],
                )
            else:
                call("DeleteBucketOwnershipControls", s3.delete_bucket_ownership_controls)
        if tag_map(old.get("Tags")) != tag_map(new.get("Tags")):
            tags = tag_map(new.get("Tags"))
            if tags:
                call(
                    "PutBucketTagging",
                    s3.put_bucket_tagging,
                    Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]},
                )
            else:
                call("DeleteBucketTagging", s3.delete_bucket_tagging)

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        name = ref.physical_id or ""
        s3 = clients("s3", ref.region)

        def get(fn: Any, key: str, default: Any, missing: tuple[str, ...]) -> Any:
            try:
                return fn(Bucket=name).get(key, default)
            except ClientError as exc:
                if error_code(exc) in missing:
                    return default
                raise

        try:
            versioning = s3.get_bucket_versioning(Bucket=name).get("Status", "Suspended")
            rules = get(
                s3.get_bucket_encryption,
                "ServerSideEncryptionConfiguration",
                {},
                ("ServerSideEncryptionConfigurationNotFoundError",),
            )
            pab = get(
                s3.get_public_access_block,
                "PublicAccessBlockConfiguration",
                {},
                ("NoSuchPublicAccessBlockConfiguration",),
            )
            own = get(s3.get_bucket_ownership_controls, "OwnershipControls", {}, ("OwnershipControlsNotFoundError",))
            tags = get(s3.get_bucket_tagging, "TagSet", [], ("NoSuchTagSet",))
        except ClientError:
            return None
        return {
            "BucketName": name,
            "VersioningConfiguration": {"Status": versioning},
            "BucketEncryption": {"ServerSideEncryptionConfiguration": rules.get("Rules", []) if rules else []},
            "OwnershipControls": {"Rules": own.get("Rules", []) if own else []},
            "PublicAccessBlockConfiguration": {
                k: bool(pab.get(k, False))
                for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")
            },
            "Tags": [{"Key": t["Key"], "Value": t["Value"]} for t in tags],
        }


class BucketPolicyProvider(SdkProvider, DeployCalls):
    """AWS::S3::BucketPolicy: the bucket name is the physical id, attributes {}. DeleteBucketPolicy
    answers 204 for a bucket without a policy, so GetBucketPolicy asks first: a re-run says
    "not-found"."""

    types = ("AWS::S3::BucketPolicy",)
    handled = frozenset({"Bucket", "PolicyDocument"})
    not_found_codes = frozenset({"NoSuchBucket", "NoSuchBucketPolicy"})
    action = "DeleteBucketPolicy"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        s3 = clients("s3", ref.region)
        owner = {"ExpectedBucketOwner": ref.account_id} if ref.account_id else {}  # not another account's
        s3.get_bucket_policy(Bucket=physical_id, **owner)  # NoSuchBucketPolicy / NoSuchBucket → "not-found"
        s3.delete_bucket_policy(Bucket=physical_id, **owner)
        return DELETED

    def _put(self, clients: Clients, lid: str, properties: dict, region: str) -> str:
        bucket = properties.get("Bucket")
        if not isinstance(bucket, str) or not bucket:
            raise ProviderError(f"{lid} (AWS::S3::BucketPolicy): Bucket must name a bucket")
        doc = properties.get("PolicyDocument")
        policy = doc if isinstance(doc, str) else json.dumps(doc, separators=(",", ":"))
        s3 = clients("s3", region)
        self._guarded(
            lid, "AWS::S3::BucketPolicy", bucket, "PutBucketPolicy", s3.put_bucket_policy, Bucket=bucket, Policy=policy
        )
        return bucket

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        return CreateResult(self._put(clients, logical_id, properties, target.region), {})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        return UpdateResult(self._put(clients, ref.logical_id, properties, ref.region), {})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        try:
            policy = clients("s3", ref.region).get_bucket_policy(Bucket=ref.physical_id)["Policy"]
        except ClientError:
            return None
        return {"Bucket": ref.physical_id, "PolicyDocument": json.loads(policy)}


PROVIDERS = (BucketProvider(), BucketPolicyProvider())  # Cloud Control cannot delete a bucket policy
