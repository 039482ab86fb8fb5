"""File assets of a stack, published as cdkd publishes them before taking the stack's lock
(deploy-engine.md 1.3; cdkd's `file-asset-publisher.ts`).

For each file asset of the stack's asset manifest (the stack's own `*.template.json` is
skipped), for each destination: `${AWS::AccountId}`, `${AWS::Region}` and
`${AWS::Partition}` are substituted in `bucketName`, `objectKey` and `region`; the object is
HEADed and, when it exists, skipped; otherwise uploaded: `packaging: file` as the file's
bytes, `zip` as an in-memory zip of the directory (or of the single file), with fixed
timestamps and sorted names so the same input gives the same bytes. A 301 /
PermanentRedirect on the HEAD names a bucket in another region.

Docker image assets are a blocking reason of the plan, never published here. The cdkd
asset-storage mode (a `cdkd-bootstrap/{region}.json` marker in the state bucket, which makes
cdkd rewrite the template's bucket names) is refused: `asset_mode_refusal` says so.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from engine.deploy.assembly import Assembly, StackArtifact
from engine.deploy.intrinsics import partition_for
from engine.errors import EngineError, NotFound
from engine.keys import BOOTSTRAP_PREFIX

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


class AssetError(EngineError):
    """A file asset could not be published; the message names the asset and destination."""


@dataclass(frozen=True)
class Published:
    asset_id: str
    destination_id: str
    bucket: str
    key: str
    outcome: str  # "uploaded" | "exists"


def substitute(value: str, *, account: str, region: str, partition: str) -> str:
    return (
        value.replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", region)
        .replace("${AWS::Partition}", partition)
    )


def asset_bytes(files: dict[str, bytes], path: str, packaging: str) -> bytes:
    """The bytes to upload for a source path (relative to the assembly root)."""
    if packaging == "file":
        if path not in files:
            raise AssetError(f"file asset {path} is not in the assembly")
        return files[path]
    prefix = path.rstrip("/") + "/"
    members = sorted((name[len(prefix) :], body) for name, body in files.items() if name.startswith(prefix))
    if not members and path in files:
        members = [(posixpath.basename(path), files[path])]
    if not members:
        raise AssetError(f"zip asset {path} is not in the assembly")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in members:
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, body)
    return buf.getvalue()


def publish_file_assets(
    clients: Any, assembly: Assembly, stack: StackArtifact, *, account: str, region: str
) -> list[Published]:
    """Publish the stack's file assets (HEAD, then skip what exists). `clients(service, region)`
    gives boto3 clients of the deploying account."""
    manifest = stack.asset_manifest or {}
    base = posixpath.dirname(stack.asset_manifest_file or "")
    partition = partition_for(region)
    out: list[Published] = []
    for asset_id, asset in (manifest.get("files") or {}).items():
        source = asset.get("source") or {}
        rel = str(source.get("path") or "")
        if rel.endswith(".template.json"):
            continue  # the stack's own template
        path = posixpath.normpath(posixpath.join(base, rel)) if base else posixpath.normpath(rel)
        body: bytes | None = None
        for dest_id, dest in (asset.get("destinations") or {}).items():
            bucket = substitute(str(dest.get("bucketName", "")), account=account, region=region, partition=partition)
            key = substitute(str(dest.get("objectKey", "")), account=account, region=region, partition=partition)
            dest_region = substitute(
                str(dest.get("region") or region), account=account, region=region, partition=partition
            )
            s3 = clients("s3", dest_region)
            try:
                s3.head_object(Bucket=bucket, Key=key)
                out.append(Published(asset_id, dest_id, bucket, key, "exists"))
                continue
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if code in ("301", "PermanentRedirect") or status == 301:
                    raise AssetError(
                        f"asset {asset_id}: bucket {bucket} is not in {dest_region} (PermanentRedirect)"
                    ) from None
                if code not in ("404", "NoSuchKey", "NotFound"):
                    raise AssetError(f"asset {asset_id}: HEAD s3://{bucket}/{key} failed ({code})") from None
            if body is None:
                body = asset_bytes(files=assembly.files, path=path, packaging=str(source.get("packaging", "file")))
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                raise AssetError(f"asset {asset_id}: upload to s3://{bucket}/{key} failed ({code})") from None
            out.append(Published(asset_id, dest_id, bucket, key, "uploaded"))
    return out


def asset_mode_refusal(state_bucket: Any, region: str) -> str | None:
    """A refusal when the state bucket holds cdkd's asset-storage marker for the region."""
    key = f"{BOOTSTRAP_PREFIX}/{region}.json"
    try:
        state_bucket.get(key)
    except NotFound:
        return None
    return (
        f"the state bucket holds {key}: cdkd redirects assets to its own asset bucket and rewrites the template "
        "there, which this admin does not do yet; deploy this stack with cdkd"
    )
