"""AWS::S3::Bucket: DeleteBucket, and nothing else.

A bucket that still holds objects (or versions, or delete markers) fails as CloudFormation
fails it: `BucketNotEmpty`. The provider never empties a bucket; emptying is a person's
decision (cdkd does it only under `--force`/CDK's auto-delete, which the admin does not offer).
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from engine.providers.base import DELETED, Clients, ProviderError, ResourceRef, SdkProvider, describe, request_id


class BucketProvider(SdkProvider):
    types = ("AWS::S3::Bucket",)
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


PROVIDERS = (BucketProvider(),)
