"""Reads and writes of one state bucket.

Contracts:
- Every S3 call passes `ExpectedBucketOwner` (the account id).
- Failures are `engine.errors` types whose message names the IAM action, the bucket, the
  key and the account: NotFound (missing key or version), BucketNotFound, AccessDenied,
  PreconditionFailed (HTTP 412; never retried), Throttled (after the SDK's retries) and
  EngineError for anything else. Raised errors carry `.code` and `.status` from S3.
- `requests` counts every S3 call made through the bucket, by API name (each page of a
  listing is one call). Safe to use from many threads: one boto3 client per bucket.
- Writes recognise their own work. The SDK retries a request whose answer was lost (a
  dropped connection, a 500, a 503), and the retry of a conditional write that DID land the
  first time meets its own result: a 412 (the ETag moved), or a 404 (the key it deleted is
  gone). So whenever a write failed after the request may have been applied (the SDK
  retried, no answer came, or S3 answered 5xx), `put` reads the key back and treats "the
  current object is exactly the bytes we sent" as success, and `delete` treats "the key
  is gone" as success. Anything else raises the original error (a 412 then means someone
  else wrote). A read-back that itself fails raises UnconfirmedWrite: nobody can tell.
  A 412 on the FIRST attempt is never read back: nothing of ours could have landed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine import aws
from engine.aws import AccountAccess, RequestCounter, ResolvedBucket
from engine.errors import EngineError, NotFound, PreconditionFailed, UnconfirmedWrite

logger = logging.getLogger(__name__)

# The If-Match of a delete that must find NO object (a sibling that was absent when read):
# S3 answers 404 while the key stays absent, 412 once someone has written it. No MD5 is
# all zeros, so it never matches a real object.
ABSENT_ETAG = '"00000000000000000000000000000000"'


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    etag: str  # with its double quotes, as S3 returns it
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class StoredObject:
    key: str
    body: bytes
    etag: str
    version_id: str | None
    last_modified: datetime | None
    # True when the write's answer was lost and the read-back found our bytes.
    recovered: bool = False


@dataclass(frozen=True)
class VersionInfo:
    key: str
    version_id: str
    last_modified: datetime
    size: int
    is_latest: bool
    delete_marker: bool
    etag: str | None


class StateBucket:
    """One account's state bucket. Every call passes ExpectedBucketOwner; errors come out as
    engine.errors types naming the bucket and key. `requests` counts S3 calls by operation."""

    name: str
    region: str
    account_id: str
    access: AccountAccess
    resolved: ResolvedBucket
    requests: RequestCounter

    def __init__(
        self, access: AccountAccess, session: Any, resolved: ResolvedBucket, requests: RequestCounter | None = None
    ) -> None:
        self.access = access
        self.account_id = access.account_id
        self.resolved = resolved
        self.name = resolved.name
        self.region = resolved.region
        self.requests = requests if requests is not None else RequestCounter()
        self.session = session
        self._s3 = aws.client(session, "s3", resolved.region)

    @classmethod
    def open(
        cls, access: AccountAccess, *, actor: str, bucket: str | None = None, region: str | None = None
    ) -> StateBucket:
        """The account's bucket, seen as `actor` (who is named in the role session).

        With `bucket` and `region` (cached by the sync on the account) resolution is
        skipped; otherwise the bucket is resolved as cdkd does (see `aws.resolve_bucket`).
        """
        session = aws.session_for(access, actor)
        requests = RequestCounter()
        if bucket and region:
            resolved = _known_bucket(access, bucket, region)
        else:
            resolved = aws.resolve_bucket(access, session, requests=requests)
        return cls(access, session, resolved, requests)

    def __repr__(self) -> str:
        return f"<StateBucket {self.name} ({self.region}) of account {self.account_id}>"

    @property
    def default_prefix(self) -> str:
        return self.access.prefix.strip("/") + "/"

    # -- reads ---------------------------------------------------------------------------

    def list_objects(self, prefix: str | None = None) -> Iterator[ObjectInfo]:
        """Every object under `prefix` (default: the account's state prefix plus "/"),
        in key order, one ListObjectsV2 page at a time."""
        params: dict[str, Any] = {"Prefix": self.default_prefix if prefix is None else prefix}
        while True:
            page = self._call("ListObjectsV2", self._s3.list_objects_v2, params)
            for item in page.get("Contents", []):
                yield ObjectInfo(
                    key=item["Key"], etag=item["ETag"], size=item["Size"], last_modified=item["LastModified"]
                )
            if not page.get("IsTruncated"):
                return
            params["ContinuationToken"] = page["NextContinuationToken"]

    def get(self, key: str, *, version_id: str | None = None) -> StoredObject:
        """The object's bytes and metadata (a given version when `version_id` is set).
        Raises NotFound for a missing key, a delete marker or an unknown version."""
        params: dict[str, Any] = {"Key": key}
        api = "GetObject"
        if version_id:
            params["VersionId"] = version_id
            api = "GetObjectVersion"
        response = self._call(api, self._s3.get_object, params, key=key, version_id=version_id)
        try:
            body = response["Body"].read()
        except (BotoCoreError, OSError) as exc:
            raise aws.s3_error(exc, api=api, account_id=self.account_id, bucket=self.name, key=key) from None
        return StoredObject(
            key=key,
            body=body,
            etag=response["ETag"],
            version_id=response.get("VersionId"),
            last_modified=response.get("LastModified"),
        )

    def versions(self, key: str) -> list[VersionInfo]:
        """Every version and delete marker of exactly `key` (not of keys that merely start
        with it), newest first."""
        params: dict[str, Any] = {"Prefix": key}
        versions: list[VersionInfo] = []
        markers: list[VersionInfo] = []
        while True:
            page = self._call("ListObjectVersions", self._s3.list_object_versions, params, key=key)
            versions += [_version(item, delete_marker=False) for item in page.get("Versions", []) if item["Key"] == key]
            markers += [
                _version(item, delete_marker=True) for item in page.get("DeleteMarkers", []) if item["Key"] == key
            ]
            if not page.get("IsTruncated"):
                break
            # Keys come in order and `key` sorts first under its own prefix: once the
            # listing has moved past it, the rest belongs to sibling keys.
            if page.get("NextKeyMarker") != key:
                break
            params["KeyMarker"] = page["NextKeyMarker"]
            params["VersionIdMarker"] = page["NextVersionIdMarker"]
        return _newest_first(versions, markers)

    # -- writes --------------------------------------------------------------------------

    def put(
        self,
        key: str,
        body: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        content_type: str = "application/json",
    ) -> StoredObject:
        """Write `body` at `key`: only if its ETag is still `if_match`, or only if the key
        does not exist (`if_none_match`). A lost condition raises PreconditionFailed.

        A write whose answer was lost is read back (module contract): when the key holds
        exactly `body`, the write is ours and this returns normally (`recovered=True`)."""
        params: dict[str, Any] = {"Key": key, "Body": body, "ContentType": content_type}
        if if_match:
            params["IfMatch"] = if_match
        if if_none_match:
            params["IfNoneMatch"] = "*"
        condition = _condition(if_match, if_none_match)
        try:
            response = self._call("PutObject", self._s3.put_object, params, key=key, condition=condition)
        except EngineError as exc:
            if not _maybe_applied(exc):
                raise
            current = self._read_back("PutObject", key, exc)
            if current is None or current.body != body:
                raise  # not ours: someone else's object, or ours never landed
            logger.info(
                "PutObject s3://%s/%s: the answer was lost (%s); read back, the write is ours", self.name, key, exc
            )
            return StoredObject(
                key=key,
                body=body,
                etag=current.etag,
                version_id=current.version_id,
                last_modified=current.last_modified,
                recovered=True,
            )
        return StoredObject(
            key=key,
            body=body,
            etag=response["ETag"],
            version_id=response.get("VersionId"),
            last_modified=None,
        )

    def delete(self, key: str, *, if_match: str | None = None) -> bool:
        """Delete `key` (in a versioned bucket: add a delete marker), only if its ETag is
        still `if_match` when given. A lost condition raises PreconditionFailed; an If-Match
        on a key that is already gone raises NotFound (`ABSENT_ETAG` makes that the success
        of "delete only while absent"). Returns True when the answer was lost and the
        read-back found the key gone: our delete landed."""
        params: dict[str, Any] = {"Key": key}
        if if_match:
            params["IfMatch"] = if_match
        try:
            self._call("DeleteObject", self._s3.delete_object, params, key=key, condition=_condition(if_match, False))
        except EngineError as exc:
            if not _maybe_applied(exc):
                raise
            current = self._read_back("DeleteObject", key, exc)
            if current is None:
                logger.info(
                    "DeleteObject s3://%s/%s: the answer was lost (%s); read back, it is gone", self.name, key, exc
                )
                return True  # gone: what our delete did
            if if_match and current.etag != if_match and isinstance(exc, NotFound):
                raise aws.with_code(
                    PreconditionFailed(
                        f"s3:DeleteObject (DeleteObject) on s3://{self.name}/{key} in account {self.account_id}: "
                        f"precondition failed{_condition(if_match, False)}; it is now at ETag {current.etag}"
                    ),
                    "PreconditionFailed",
                    412,
                ) from None
            raise
        return False

    def delete_current(self, key: str) -> str | None:
        """Delete whatever `key` holds now, conditionally: read its ETag, then delete with
        `If-Match` on it, or, when it is absent, probe with `ABSENT_ETAG` (S3 still checks
        the permission first, no delete marker is added, and a key written meanwhile is not
        deleted). Returns the ETag deleted, or None when there was nothing. Raises
        PreconditionFailed when someone wrote the key between the read and the delete."""
        try:
            etag: str | None = self.get(key).etag
        except NotFound:
            etag = None
        try:
            self.delete(key, if_match=etag or ABSENT_ETAG)
        except NotFound:
            pass  # absent, or deleted by someone since the read: the key is gone either way
        return etag

    def _read_back(self, api: str, key: str, cause: EngineError) -> StoredObject | None:
        """The key's current object (None when gone) after `api` failed with `cause` in a way
        that may have been applied; UnconfirmedWrite when even that read fails."""
        try:
            return self.get(key)
        except NotFound:
            return None
        except EngineError as exc:
            raise aws.with_code(
                UnconfirmedWrite(
                    f"{cause}. The request may have been applied: reading s3://{self.name}/{key} back to tell "
                    f"failed too ({exc}); check the object before trying again"
                ),
                getattr(cause, "code", ""),
                getattr(cause, "status", None),
            ) from None

    def purge_noncurrent(self, keys: Iterable[str]) -> list[VersionInfo]:
        """Permanently delete every noncurrent version and delete marker of each key (the
        current version stays). Returns what was deleted; raises on the first refusal,
        naming the key and version (e.g. Object Lock retention)."""
        doomed = [v for key in keys for v in self.versions(key) if not v.is_latest]
        for start in range(0, len(doomed), 1000):
            batch = doomed[start : start + 1000]
            objects = [{"Key": v.key, "VersionId": v.version_id} for v in batch]
            response = self._call(
                "DeleteObjects", self._s3.delete_objects, {"Delete": {"Objects": objects, "Quiet": True}}
            )
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                raise aws.with_code(
                    EngineError(
                        f"s3:DeleteObjectVersion on s3://{self.name}/{first.get('Key')} "
                        f"(version {first.get('VersionId', '?')}) in account {self.account_id} failed: "
                        f"{first.get('Code')}: {first.get('Message', '')} ({len(errors)} version(s) not purged)"
                    ),
                    str(first.get("Code", "")),
                )
        return doomed

    # -- plumbing ------------------------------------------------------------------------

    def _call(
        self,
        api: str,
        method: Any,
        params: dict[str, Any],
        *,
        key: str | None = None,
        version_id: str | None = None,
        condition: str = "",
    ) -> dict[str, Any]:
        self.requests.add(api)
        try:
            return method(Bucket=self.name, ExpectedBucketOwner=self.account_id, **params)
        except (ClientError, BotoCoreError) as exc:
            err = aws.s3_error(
                exc,
                api=api,
                account_id=self.account_id,
                bucket=self.name,
                key=key,
                version_id=version_id,
                condition=condition,
            )
            # How many times the SDK re-sent it: an answer to a re-send may be about our own
            # earlier attempt (see the module contract).
            metadata = exc.response.get("ResponseMetadata", {}) if isinstance(exc, ClientError) else {}
            err.retry_attempts = metadata.get("RetryAttempts", 0)  # type: ignore[attr-defined]
            raise err from None


def _known_bucket(access: AccountAccess, bucket: str, region: str) -> ResolvedBucket:
    """A ResolvedBucket for a name and region known from an earlier resolution."""
    if access.bucket:
        return ResolvedBucket(name=bucket, source="explicit", region=region)
    new, legacy = aws.default_bucket_names(access)
    if bucket == legacy:
        return ResolvedBucket(
            name=bucket, source="default-legacy", region=region, warning=aws.legacy_warning(access, bucket)
        )
    return ResolvedBucket(name=bucket, source="default" if bucket == new else "explicit", region=region)


def _version(item: dict[str, Any], *, delete_marker: bool) -> VersionInfo:
    return VersionInfo(
        key=item["Key"],
        version_id=item["VersionId"],
        last_modified=item["LastModified"],
        size=0 if delete_marker else item.get("Size", 0),
        is_latest=item.get("IsLatest", False),
        delete_marker=delete_marker,
        etag=None if delete_marker else item.get("ETag"),
    )


def _newest_first(versions: list[VersionInfo], markers: list[VersionInfo]) -> list[VersionInfo]:
    """Merge S3's two newest-first lists (boto3 splits versions from delete markers).

    Timestamps can tie (moto has one-second resolution); then the current entry comes
    first and a delete marker before a version, since one deletes what was written before.
    """
    merged: list[VersionInfo] = []
    i = j = 0
    while i < len(versions) and j < len(markers):
        version, marker = versions[i], markers[j]
        if version.is_latest or (not marker.is_latest and version.last_modified > marker.last_modified):
            merged.append(version)
            i += 1
        else:
            merged.append(marker)
            j += 1
    return merged + versions[i:] + markers[j:]


def _maybe_applied(exc: EngineError) -> bool:
    """Whether a failed write may still have been applied by S3: no answer came (a lost
    connection or timeout, after the SDK's retries), S3 answered 5xx (its 500 may follow a
    commit), or the SDK re-sent it and the answer we see is to a re-send."""
    status = getattr(exc, "status", None)
    if getattr(exc, "retry_attempts", 0) > 0:
        return True
    return status is None or (status >= 500 and status != 501)  # 501: the endpoint cannot do it at all


def _condition(if_match: str | None, if_none_match: bool) -> str:
    if if_match:
        return f": the object changed since it was read (If-Match {if_match})"
    if if_none_match:
        return ": the key already exists (If-None-Match *)"
    return ""
