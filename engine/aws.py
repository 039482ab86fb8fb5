"""AWS access per account: one boto3 session per (account, actor), the state bucket's
name and region.

Contracts:
- `session_for` assumes the account's role (with refreshing credentials) or, without a
  role, uses the process's own credentials. Sessions are cached process-wide.
- `client` builds clients with the house config (standard retries, big pool, checksums
  only when required); the endpoint comes from `AWS_ENDPOINT_URL`, which boto3 reads.
- `resolve_bucket` finds the state bucket as cdkd does (reference §1.1) and its region.
- Every S3 call made here passes `ExpectedBucketOwner` (the account id), so a bucket that
  belongs to another account is refused by S3 with a 403.
- Failures come out as `engine.errors` types naming the account, bucket and S3 action.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import BotoCoreError, ClientError

from engine.errors import AccessDenied, BucketNotFound, EngineError, NotFound, PreconditionFailed, Throttled


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


class RequestCounter(Counter):
    """A Counter of AWS calls by API name that several threads may bump at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()

    def add(self, operation: str, n: int = 1) -> None:
        with self._lock:
            self[operation] += n

    def reset(self) -> None:
        with self._lock:
            self.clear()


# Process-wide caches. One lock guards all three: they are filled rarely and read often.
_lock = threading.RLock()
_sessions: dict[tuple[str, str, str, str], boto3.Session] = {}
_clients: dict[tuple[boto3.Session, str, str], Any] = {}
_bucket_regions: dict[str, str] = {}
_loader: Any = None  # one botocore data loader for every session: see new_session

DEFAULT_REGION = "us-east-1"
SESSION_NAME_PREFIX = "cdkd-admin-"
# Throttling codes that survive the SDK's own retries.
THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "503"})

# IAM action behind each S3 API call: what an operator must grant when it is denied.
S3_ACTIONS = {
    "HeadBucket": "s3:ListBucket",
    "ListObjectsV2": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
    "GetBucketLocation": "s3:GetBucketLocation",
    "GetObject": "s3:GetObject",
    "GetObjectVersion": "s3:GetObjectVersion",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjectVersion": "s3:DeleteObjectVersion",
    "DeleteObjects": "s3:DeleteObject",
}


def clear_caches() -> None:
    """Forget every cached session, client and bucket region (tests; credential rotation)."""
    with _lock:
        _sessions.clear()
        _clients.clear()
        _bucket_regions.clear()


def new_session(**kwargs: Any) -> boto3.Session:
    """A fresh boto3 Session that shares the process's botocore data loader.

    Each botocore session otherwise parses the service models (S3's is large) again, which
    costs ~50 ms of CPU per account when a sync opens many accounts. The loader only caches
    read-only model data, so sharing it is safe.
    """
    global _loader
    core = botocore.session.get_session()
    with _lock:
        if _loader is None:
            _loader = core.get_component("data_loader")
        loader = _loader
    core.register_component("data_loader", loader)
    session = boto3.Session(botocore_session=core, **kwargs)
    with _lock:
        # boto3 appends its own data path to the loader on every Session: keep one copy.
        paths = loader.search_paths
        paths[:] = list(dict.fromkeys(paths))
    return session


def role_session_name(actor: str) -> str:
    """`cdkd-admin-<actor>` reduced to what STS accepts: [\\w+=,.@-], 2..64 characters."""
    name = SESSION_NAME_PREFIX + re.sub(r"[^\w+=,.@-]", "-", actor or "unknown", flags=re.ASCII)
    return name[:64]


def session_for(access: AccountAccess, actor: str) -> boto3.Session:
    """A boto3 Session for the account (AssumeRole with refreshing credentials).

    With `access.role_arn`, credentials come from sts:AssumeRole (session name from
    `actor`, `ExternalId` when set) and are renewed by botocore before they expire. Without
    it, the process's own credentials are used. Cached per (account, role, external id,
    actor). Raises AccessDenied when AssumeRole is refused.
    """
    key = (access.account_id, access.role_arn, access.external_id, actor)
    with _lock:
        cached = _sessions.get(key)
    if cached is not None:
        return cached
    # AssumeRole happens outside the lock: one slow STS call must not stall every account.
    session = _assumed_session(access, actor) if access.role_arn else new_session()
    with _lock:
        return _sessions.setdefault(key, session)


def _assumed_session(access: AccountAccess, actor: str) -> boto3.Session:
    region = access.region or DEFAULT_REGION
    sts = client(_base_session(), "sts", region)
    params: dict[str, Any] = {"RoleArn": access.role_arn, "RoleSessionName": role_session_name(actor)}
    if access.external_id:
        params["ExternalId"] = access.external_id

    def fetch() -> dict[str, str]:
        try:
            credentials = sts.assume_role(**params)["Credentials"]
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise AccessDenied(
                f"Could not assume role {access.role_arn} for account {access.account_id} "
                f"(sts:AssumeRole): {error.get('Code', '?')}: {error_message(exc, 'sts')}".rstrip(": ")
            ) from None
        except BotoCoreError as exc:
            raise EngineError(
                f"sts:AssumeRole of {access.role_arn} for account {access.account_id} failed: {exc}"
            ) from None
        return {
            "access_key": credentials["AccessKeyId"],
            "secret_key": credentials["SecretAccessKey"],
            "token": credentials["SessionToken"],
            "expiry_time": credentials["Expiration"].isoformat(),
        }

    # Assume eagerly so a refused role is reported now, not on the first S3 call.
    credentials = RefreshableCredentials.create_from_metadata(
        metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
    )
    session = new_session(region_name=region)
    session._session._credentials = credentials  # the usual way to give a session refreshable creds
    return session


def _base_session() -> boto3.Session:
    """The process's own credentials, which assume every account's role."""
    with _lock:
        base = _sessions.get(("", "", "", ""))
        if base is None:
            base = _sessions[("", "", "", "")] = new_session()
        return base


def client(session: boto3.Session, service: str, region: str | None = None) -> Any:
    """A client with the house config, cached per (session, service, region).

    The endpoint is boto3's own business (`AWS_ENDPOINT_URL`), so tests point it at moto.
    """
    region = region or session.region_name or DEFAULT_REGION
    key = (session, service, region)
    with _lock:
        cached = _clients.get(key)
        if cached is None:
            # Session.client is not thread-safe; creating under the lock keeps it correct.
            cached = session.client(service, region_name=region, config=_config())
            _clients[key] = cached
        return cached


def _config() -> Config:
    return Config(
        max_pool_connections=64,
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=5,
        read_timeout=30,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


def s3_error(
    exc: Exception,
    *,
    api: str,
    account_id: str,
    bucket: str,
    key: str | None = None,
    version_id: str | None = None,
    condition: str = "",
) -> EngineError:
    """The engine error for an S3 failure, naming the action, bucket, key and account.

    `condition` explains a 412 (e.g. which If-Match lost). The error carries S3's `.code`
    and `.status` so callers can branch on, e.g., a 409 ConditionalRequestConflict.
    """
    action = S3_ACTIONS.get(api, f"s3:{api}")
    where = f"s3://{bucket}/{key}" if key else f"bucket {bucket}"
    if version_id:
        where += f" (version {version_id})"
    what = f"{action} ({api}) on {where} in account {account_id}"
    if isinstance(exc, BotoCoreError):
        return with_code(EngineError(f"{what} failed: {exc}"), type(exc).__name__)
    if not isinstance(exc, ClientError):
        return with_code(EngineError(f"{what} failed: {exc}"), type(exc).__name__)
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    message = error_message(exc, "s3")
    suffix = f": {message}" if message else ""
    if code == "NoSuchBucket":
        err: EngineError = BucketNotFound(f"State bucket {bucket} for account {account_id} does not exist ({api})")
    elif code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
        err = AccessDenied(f"Access denied: {what}{suffix}")
    elif code == "PreconditionFailed" or status == 412:
        err = PreconditionFailed(
            f"{what}: precondition failed (HTTP 412){condition or ': the object changed since it was read'}"
        )
    elif code == "NoSuchVersion":
        err = NotFound(f"{what}: no such version")
    elif code in ("NoSuchKey", "404", "NotFound") or status == 404:
        err = NotFound(f"{what}: not found")
    elif code in THROTTLE_CODES or status == 503:
        err = Throttled(f"{what}: AWS is throttling requests ({code}) and retries ran out")
    else:
        err = EngineError(f"{what} failed: {code or status}{suffix}")
    return with_code(err, code or str(status), status)


# An error body that is a page, not an AWS error (an HTML 500 from a proxy or a local
# endpoint that does not serve the service): botocore pastes it whole into Message.
_MARKUP = re.compile(r"^\s*<(?:!doctype|html|head|body|\?xml)\b", re.IGNORECASE)
MAX_ERROR_MESSAGE = 300  # characters of AWS's message kept in an operation's message


def error_code(exc: BaseException) -> str:
    """AWS's error code of a ClientError ("" for anything else). When the body named none,
    botocore puts the HTTP status there ("404" from a HEAD): callers compare with it."""
    if not isinstance(exc, ClientError):
        return ""
    return str(exc.response.get("Error", {}).get("Code", "") or "")


def named_error_code(exc: BaseException) -> str:
    """`error_code` for messages: "" when it is only botocore's stand-in HTTP status."""
    code = error_code(exc)
    return "" if code.isdigit() else code


def error_message(exc: BaseException, service: str = "") -> str:
    """AWS's message, fit for a page and the audit: one line, at most MAX_ERROR_MESSAGE
    characters, and never a markup page: "HTTP 500 from cloudcontrol (no error code)"."""
    if not isinstance(exc, ClientError):
        return bounded(str(exc))
    message = str(exc.response.get("Error", {}).get("Message", "") or "")
    if _MARKUP.match(message) or (not message.strip() and not named_error_code(exc)):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "error"
        where = f" from {service}" if service else ""
        return f"HTTP {status}{where}" + ("" if named_error_code(exc) else " (no error code)")
    return bounded(message)


def bounded(text: str, limit: int = MAX_ERROR_MESSAGE) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def with_code(err: EngineError, code: str, status: int | None = None) -> EngineError:
    # Callers such as the lock manager branch on the raw code (e.g. 409 conflict).
    err.code = code  # type: ignore[attr-defined]
    err.status = status  # type: ignore[attr-defined]
    return err


def bucket_region(
    session: boto3.Session, bucket: str, expected_owner: str, *, requests: RequestCounter | None = None
) -> str:
    """The bucket's region from GetBucketLocation (None/"" → us-east-1, "EU" → eu-west-1).

    Cached per bucket name, process-wide, only when the lookup succeeded, so a transient
    denial does not stick. `requests`, when given, counts the call.
    """
    with _lock:
        cached = _bucket_regions.get(bucket)
    if cached is not None:
        return cached
    s3 = client(session, "s3", DEFAULT_REGION)
    if requests is not None:
        requests.add("GetBucketLocation")
    try:
        response = s3.get_bucket_location(Bucket=bucket, ExpectedBucketOwner=expected_owner)
    except (ClientError, BotoCoreError) as exc:
        raise s3_error(exc, api="GetBucketLocation", account_id=expected_owner, bucket=bucket) from None
    location = response.get("LocationConstraint") or DEFAULT_REGION
    region = "eu-west-1" if location == "EU" else location
    with _lock:
        _bucket_regions[bucket] = region
    return region


def default_bucket_names(access: AccountAccess) -> tuple[str, str]:
    """cdkd's current and legacy default bucket names for the account."""
    new = f"cdkd-state-{access.account_id}"
    return new, f"{new}-{access.region or DEFAULT_REGION}"


def legacy_warning(access: AccountAccess, legacy: str) -> str:
    new, _ = default_bucket_names(access)
    region = access.region or DEFAULT_REGION
    return (
        f"State bucket {legacy} for account {access.account_id} uses the legacy region-suffixed name; "
        f"run `cdkd state migrate --region {region}` to move the state to {new}."
    )


def resolve_bucket(
    access: AccountAccess, session: boto3.Session, *, requests: RequestCounter | None = None
) -> ResolvedBucket:
    """The account's state bucket, found as cdkd finds it, with its region.

    An explicit `access.bucket` is used verbatim (HeadBucket verifies it). Otherwise the new
    default name `cdkd-state-{account}` wins over the legacy `cdkd-state-{account}-{region}`,
    unless only the legacy one holds state under `{prefix}/`. A 403 on the probe counts as
    "exists". Raises BucketNotFound when nothing is there, AccessDenied on a denial.
    """
    account = access.account_id
    if access.bucket:
        if not _head_bucket(session, access.bucket, account, requests, denied_exists=False):
            raise BucketNotFound(f"State bucket {access.bucket} for account {account} does not exist")
        region = bucket_region(session, access.bucket, account, requests=requests)
        return ResolvedBucket(name=access.bucket, source="explicit", region=region)

    new, legacy = default_bucket_names(access)
    new_exists = _head_bucket(session, new, account, requests)
    legacy_exists = _head_bucket(session, legacy, account, requests)
    if not new_exists and not legacy_exists:
        raise BucketNotFound(
            f"No state bucket for account {account}: neither {new} nor the legacy {legacy} exists. "
            f"Run `cdkd bootstrap` in that account, or set the account's bucket."
        )
    use_legacy = legacy_exists and not new_exists
    if new_exists and legacy_exists:
        prefix = access.prefix.strip("/") + "/"
        # Only a bucket known to be empty loses; when unsure, cdkd's preference (new) holds.
        use_legacy = _has_objects(session, new, prefix, account, requests) is False and bool(
            _has_objects(session, legacy, prefix, account, requests)
        )
    if use_legacy:
        region = bucket_region(session, legacy, account, requests=requests)
        return ResolvedBucket(
            name=legacy, source="default-legacy", region=region, warning=legacy_warning(access, legacy)
        )
    return ResolvedBucket(name=new, source="default", region=bucket_region(session, new, account, requests=requests))


def _head_bucket(
    session: boto3.Session,
    bucket: str,
    account: str,
    requests: RequestCounter | None,
    *,
    denied_exists: bool = True,
) -> bool:
    """Whether the bucket exists. A 403 means it exists but is not ours to read: for cdkd's
    name probe that counts as existing; for an explicit bucket it is an error."""
    if requests is not None:
        requests.add("HeadBucket")
    try:
        client(session, "s3", DEFAULT_REGION).head_bucket(Bucket=bucket, ExpectedBucketOwner=account)
        return True
    except (ClientError, BotoCoreError) as exc:
        err = s3_error(exc, api="HeadBucket", account_id=account, bucket=bucket)
        if isinstance(err, BucketNotFound) or getattr(err, "status", None) == 404:
            return False
        if isinstance(err, AccessDenied) and denied_exists:
            return True
        raise err from None


def _has_objects(
    session: boto3.Session, bucket: str, prefix: str, account: str, requests: RequestCounter | None
) -> bool | None:
    """True/False when the bucket has/has no object under the prefix; None when unknown."""
    if requests is not None:
        requests.add("ListObjectsV2")
    try:
        response = client(session, "s3", DEFAULT_REGION).list_objects_v2(
            Bucket=bucket, Prefix=prefix, MaxKeys=1, ExpectedBucketOwner=account
        )
    except (ClientError, BotoCoreError):
        return None
    return response.get("KeyCount", 0) > 0
