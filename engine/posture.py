"""Posture of a state bucket: the bucket settings cdkd's safety depends on, read (never
changed) and judged one check at a time.

Each check answers `ok`, `problem` or `unknown`, what it found and what to change. A denied
read is `unknown` naming the IAM action ("no permission for s3:GetBucketPolicy"), never
`ok`: a check that could not look has not passed. Any other failure to read is `unknown`
too, with the error. Every call passes `ExpectedBucketOwner`.

What cdkd bootstrap sets up (seed 001, reference §1.1): versioning on, AES-256 default
encryption, a bucket policy that denies access from outside the account. The others are
judged by what they do to cdkd's state and history:
- public access block: all four settings on;
- Object Lock default retention blocks every noncurrent-version purge (journals,
  placeholders, `scrub --purge-history`) until it runs out;
- replication keeps copies of what a purge removes (S3 never replicates a version-id
  delete, seed 000), so a scrubbed secret survives in the destination;
- lifecycle: an expiration of CURRENT objects under the state prefix deletes live state; a
  noncurrent-version expiration shorter than the audit retention removes the versions the
  audit log names before the audit entry itself goes; none at all while old versions hold
  flagged secrets keeps those secrets forever;
- the bootstrap markers (`cdkd-bootstrap/{region}.json`) must be readable, of a supported
  `assetSupportVersion`, and name an asset bucket that exists (a deploy hard-fails otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine import aws
from engine.keys import BOOTSTRAP_PREFIX, KeyLayout

OK, PROBLEM, UNKNOWN = "ok", "problem", "unknown"

# The check keys, in the order a page shows them, with their labels.
CHECKS = {
    "versioning": "Versioning",
    "encryption": "Default encryption",
    "public-access-block": "Public access block",
    "policy": "Deny-external-access policy",
    "object-lock": "Object Lock",
    "replication": "Replication",
    "lifecycle": "Lifecycle rules",
    "bootstrap-marker": "Bootstrap marker",
}

# IAM action behind each read, named when it is denied.
ACTIONS = {
    "GetBucketVersioning": "s3:GetBucketVersioning",
    "GetBucketEncryption": "s3:GetEncryptionConfiguration",
    "GetPublicAccessBlock": "s3:GetBucketPublicAccessBlock",
    "GetBucketPolicy": "s3:GetBucketPolicy",
    "GetObjectLockConfiguration": "s3:GetBucketObjectLockConfiguration",
    "GetBucketReplication": "s3:GetReplicationConfiguration",
    "GetBucketLifecycleConfiguration": "s3:GetLifecycleConfiguration",
    "ListObjectsV2": "s3:ListBucket",
    "GetObject": "s3:GetObject",
    "HeadBucket": "s3:ListBucket",
}

# "Not configured" answers: the setting is absent, which is a finding, not a failure.
ABSENT = {
    "ServerSideEncryptionConfigurationNotFoundError",
    "NoSuchPublicAccessBlockConfiguration",
    "NoSuchBucketPolicy",
    "ObjectLockConfigurationNotFoundError",
    "ReplicationConfigurationNotFoundError",
    "NoSuchLifecycleConfiguration",
}
PAB_FIELDS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
MARKER_VERSION = 1  # assetSupportVersion cdkd knows
MAX_MARKERS = 50  # one per region; more is not a bucket cdkd wrote
MAX_MARKER_BYTES = 64 * 1024


@dataclass(frozen=True)
class CheckResult:
    key: str
    status: str  # ok | problem | unknown
    found: str
    change: str = ""

    @property
    def label(self) -> str:
        return CHECKS.get(self.key, self.key)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


@dataclass(frozen=True)
class SecretHistory:
    """What the last secret scans say about the bucket's old versions (from stacks.scans):
    `scanned` False when no scan that reads history has run on the account."""

    scanned: bool
    flagged_versions: int = 0


class _Absent(Exception):
    """The setting is not configured (S3's NoSuch... answer)."""


class _Unknown(Exception):
    def __init__(self, found: str, change: str) -> None:
        super().__init__(found)
        self.found, self.change = found, change


class Reader:
    """The bucket-configuration reads of one bucket, with errors sorted into absent,
    denied (unknown: no permission) and other (unknown: the error)."""

    def __init__(self, s3: Any, bucket: str, account_id: str) -> None:
        self.s3, self.bucket, self.account_id = s3, bucket, account_id

    def call(self, api: str, method: Callable[..., dict[str, Any]], **params: Any) -> dict[str, Any]:
        try:
            return method(Bucket=params.pop("Bucket", self.bucket), ExpectedBucketOwner=self.account_id, **params)
        except ClientError as exc:
            code = aws.error_code(exc)
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ABSENT:
                raise _Absent(code) from None
            action = ACTIONS.get(api, f"s3:{api}")
            if code in ("AccessDenied", "AllAccessDisabled", "403") or status == 403:
                raise _Unknown(
                    f"unknown: no permission for {action}",
                    f"Grant {action} on {self.bucket} to the admin's role in account {self.account_id}.",
                ) from None
            raise _Unknown(
                f"unknown: {api} failed: {code or status}: {aws.error_message(exc, 's3')}".rstrip(": "),
                "Check again later; if it persists, look at the bucket in the console.",
            ) from None
        except BotoCoreError as exc:
            raise _Unknown(f"unknown: {api} failed: {aws.bounded(str(exc))}", "Check again later.") from None


def check_bucket(
    s3: Any,
    bucket: str,
    account_id: str,
    *,
    layout: KeyLayout,
    retention_days: int,
    secrets: SecretHistory,
    head_bucket: Callable[[str], bool | None] | None = None,
) -> list[CheckResult]:
    """Every check of `bucket`, in CHECKS order. `s3` is a client in the bucket's region
    (tests pass a Stubber-wrapped one); `head_bucket(name)` says whether a marker's asset
    bucket exists (None: cannot tell), default a HeadBucket through `s3`."""
    reader = Reader(s3, bucket, account_id)
    head = head_bucket or (lambda name: _head(reader, name))
    checks: list[tuple[str, Callable[[], tuple[str, str, str]]]] = [
        ("versioning", lambda: _versioning(reader)),
        ("encryption", lambda: _encryption(reader)),
        ("public-access-block", lambda: _public_access_block(reader)),
        ("policy", lambda: _policy(reader)),
        ("object-lock", lambda: _object_lock(reader)),
        ("replication", lambda: _replication(reader)),
        ("lifecycle", lambda: _lifecycle(reader, layout, retention_days, secrets)),
        ("bootstrap-marker", lambda: _bootstrap_markers(reader, head)),
    ]
    results = []
    for key, run in checks:
        try:
            status, found, change = run()
        except _Unknown as exc:
            status, found, change = UNKNOWN, exc.found, exc.change
        results.append(CheckResult(key, status, found, change))
    return results


# --- the checks: each returns (status, found, change) --------------------------------------


def _versioning(r: Reader) -> tuple[str, str, str]:
    status = r.call("GetBucketVersioning", r.s3.get_bucket_versioning).get("Status")
    change = f"aws s3api put-bucket-versioning --bucket {r.bucket} --versioning-configuration Status=Enabled"
    if status == "Enabled":
        return OK, "enabled", ""
    if status == "Suspended":
        return PROBLEM, "suspended: overwrites and deletes of state.json keep no earlier version", change
    return PROBLEM, "never enabled: a bad write or delete of a record cannot be undone", change


def _encryption(r: Reader) -> tuple[str, str, str]:
    change = (
        f"aws s3api put-bucket-encryption --bucket {r.bucket} --server-side-encryption-configuration "
        '\'{"Rules":[{"ApplyServerSideEncryptionByDefault":{"SSEAlgorithm":"AES256"}}]}\''
    )
    try:
        config = r.call("GetBucketEncryption", r.s3.get_bucket_encryption)
    except _Absent:
        return PROBLEM, "no default encryption configured", change
    rules = (config.get("ServerSideEncryptionConfiguration") or {}).get("Rules") or []
    algorithms = [((rule.get("ApplyServerSideEncryptionByDefault") or {}).get("SSEAlgorithm") or "") for rule in rules]
    algorithms = [a for a in algorithms if a]
    if not algorithms:
        return PROBLEM, "an encryption configuration with no default algorithm", change
    found = ", ".join(algorithms)
    if any(a in ("AES256", "aws:kms", "aws:kms:dsse") for a in algorithms):
        return OK, found, ""
    return PROBLEM, f"unrecognised default algorithm {found}", change


def _public_access_block(r: Reader) -> tuple[str, str, str]:
    change = (
        f"aws s3api put-public-access-block --bucket {r.bucket} --public-access-block-configuration "
        "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true"
    )
    try:
        config = r.call("GetPublicAccessBlock", r.s3.get_public_access_block)
    except _Absent:
        return PROBLEM, "no public access block on the bucket", change
    settings = config.get("PublicAccessBlockConfiguration") or {}
    off = [name for name in PAB_FIELDS if settings.get(name) is not True]
    if not off:
        return OK, "all four settings on", ""
    return PROBLEM, f"off: {', '.join(off)}", change


def _policy(r: Reader) -> tuple[str, str, str]:
    change = (
        f'Add a Deny statement for Principal "*", Action "s3:*", Resource arn:aws:s3:::{r.bucket} and '
        f'arn:aws:s3:::{r.bucket}/*, Condition {{"StringNotEquals": {{"aws:PrincipalAccount": "{r.account_id}"}}}} '
        "(what cdkd bootstrap writes)"
    )
    try:
        raw = r.call("GetBucketPolicy", r.s3.get_bucket_policy).get("Policy") or ""
    except _Absent:
        return PROBLEM, "no bucket policy: nothing denies access from outside the account", change
    try:
        policy = json.loads(raw)
    except ValueError:
        return PROBLEM, "the bucket policy is not valid JSON", change
    statements = policy.get("Statement") if isinstance(policy, dict) else None
    if isinstance(statements, dict):
        statements = [statements]
    for statement in statements if isinstance(statements, list) else []:
        if isinstance(statement, dict) and _denies_outsiders(statement, r.bucket, r.account_id):
            sid = statement.get("Sid")
            return OK, f"statement {sid!r} denies other accounts" if sid else "a statement denies other accounts", ""
    return PROBLEM, "the bucket policy has no statement denying access from outside the account", change


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _denies_outsiders(statement: dict[str, Any], bucket: str, account_id: str) -> bool:
    """A Deny for everyone, every S3 action, the bucket's objects, unless the caller's
    account is ours (aws:PrincipalAccount, or an account-owned principal ARN condition)."""
    if statement.get("Effect") != "Deny":
        return False
    principal = statement.get("Principal")
    if not (principal == "*" or (isinstance(principal, dict) and "*" in _as_list(principal.get("AWS")))):
        return False
    if not any(a in ("s3:*", "*") for a in _as_list(statement.get("Action"))):
        return False
    resources = _as_list(statement.get("Resource"))
    if f"arn:aws:s3:::{bucket}/*" not in resources and "*" not in resources:
        return False
    condition = statement.get("Condition")
    if not isinstance(condition, dict):
        return False
    for operator, tests in condition.items():
        if not (isinstance(operator, str) and operator.startswith("StringNotEquals")) or not isinstance(tests, dict):
            continue
        for name, value in tests.items():
            if str(name).lower() == "aws:principalaccount" and account_id in _as_list(value):
                return True
    return False


def _object_lock(r: Reader) -> tuple[str, str, str]:
    try:
        config = r.call("GetObjectLockConfiguration", r.s3.get_object_lock_configuration)
    except _Absent:
        return OK, "not enabled: cdkd's noncurrent-version purges and scrub can remove history", ""
    lock = config.get("ObjectLockConfiguration") or {}
    if lock.get("ObjectLockEnabled") != "Enabled":
        return OK, "not enabled", ""
    retention = (lock.get("Rule") or {}).get("DefaultRetention") or {}
    if not retention:
        return OK, "enabled, no default retention: versions are locked only when a writer asks", ""
    days = retention.get("Days") or 0
    years = retention.get("Years") or 0
    span = f"{years} year(s)" if years else f"{days} day(s)"
    return (
        PROBLEM,
        f"default retention {retention.get('Mode', '?')} for {span}: every noncurrent-version purge "
        "(rollback journals, custom-resource placeholders, scrub --purge-history) fails until it runs out",
        f"Remove the default retention (aws s3api put-object-lock-configuration --bucket {r.bucket} "
        '--object-lock-configuration \'{"ObjectLockEnabled":"Enabled"}\'); keep locked audit copies in a '
        "separate bucket",
    )


def _replication(r: Reader) -> tuple[str, str, str]:
    try:
        config = r.call("GetBucketReplication", r.s3.get_bucket_replication)
    except _Absent:
        return OK, "not replicated", ""
    rules = (config.get("ReplicationConfiguration") or {}).get("Rules") or []
    if not rules:
        return OK, "a replication configuration with no rules", ""
    destinations = sorted(
        {
            str((rule.get("Destination") or {}).get("Bucket", "?")).removeprefix("arn:aws:s3:::")
            for rule in rules
            if isinstance(rule, dict)
        }
    )
    disabled = all(isinstance(rule, dict) and rule.get("Status") != "Enabled" for rule in rules)
    state = "disabled rules (what they copied stays)" if disabled else "replicated"
    return (
        PROBLEM,
        f"{state} to {', '.join(destinations)}: S3 never replicates a version-id delete, so versions cdkd "
        "or scrub purge here stay readable in the destination",
        "Exclude the prefixes cdkd purges under from the rule, or purge the destination by hand after "
        "each scrub (aws s3api list-object-versions, then delete-object --version-id)",
    )


def _rule_covers(rule: dict[str, Any], prefix: str) -> bool:
    """Whether a lifecycle rule may act on keys under `prefix` (tag and size filters are
    assumed to match: they cannot be judged without reading each object)."""
    if rule.get("Status") != "Enabled":
        return False
    filt = rule.get("Filter")
    if filt is None:
        rule_prefix = rule.get("Prefix", "")
    elif "And" in filt:
        rule_prefix = (filt.get("And") or {}).get("Prefix", "")
    else:
        rule_prefix = filt.get("Prefix", "")
    rule_prefix = rule_prefix or ""
    return prefix.startswith(rule_prefix) or rule_prefix.startswith(prefix)


def _lifecycle(r: Reader, layout: KeyLayout, retention_days: int, secrets: SecretHistory) -> tuple[str, str, str]:
    prefix = layout.list_prefix
    try:
        rules = r.call("GetBucketLifecycleConfiguration", r.s3.get_bucket_lifecycle_configuration).get("Rules") or []
    except _Absent:
        rules = []
    covering = [rule for rule in rules if isinstance(rule, dict) and _rule_covers(rule, prefix)]
    for rule in covering:
        if rule.get("Expiration", {}).get("Days") or rule.get("Expiration", {}).get("Date"):
            return (
                PROBLEM,
                f"rule {rule.get('ID', '?')!r} expires CURRENT objects under {prefix}: live records are deleted",
                f"Remove the Expiration action from rule {rule.get('ID', '?')!r} (or scope it away from {prefix})",
            )
    shortest = min(
        (
            int(rule["NoncurrentVersionExpiration"]["NoncurrentDays"])
            for rule in covering
            if isinstance((rule.get("NoncurrentVersionExpiration") or {}).get("NoncurrentDays"), int)
        ),
        default=None,
    )
    if shortest is not None:
        if shortest < retention_days:
            return (
                PROBLEM,
                f"noncurrent versions expire after {shortest} day(s), sooner than the audit retention "
                f"({retention_days} days): the versions the audit log names are gone first",
                f"Raise NoncurrentDays to at least {retention_days}, or lower CDKD_AUDIT_RETENTION_DAYS",
            )
        return OK, f"noncurrent versions expire after {shortest} day(s) (audit retention {retention_days})", ""
    if not secrets.scanned:
        return (
            UNKNOWN,
            "unknown: noncurrent versions are kept forever and no secret scan of the history has run, so "
            "whether they hold secrets is not known",
            "Run a secret scan of the account (with history)",
        )
    if secrets.flagged_versions:
        return (
            PROBLEM,
            f"noncurrent versions are kept forever and {secrets.flagged_versions} old version(s) hold flagged secrets",
            f"Scrub with --purge-history, or add a NoncurrentVersionExpiration of at least {retention_days} days",
        )
    return OK, "noncurrent versions are kept forever; the last scan flagged no secret in them", ""


def _bootstrap_markers(r: Reader, head: Callable[[str], bool | None]) -> tuple[str, str, str]:
    listing = r.call("ListObjectsV2", r.s3.list_objects_v2, Prefix=f"{BOOTSTRAP_PREFIX}/", MaxKeys=MAX_MARKERS)
    keys = [item["Key"] for item in listing.get("Contents", []) if item["Key"].endswith(".json")]
    if not keys:
        return (
            OK,
            "no marker: deploys publish assets to the CDK bootstrap destinations (legacy asset mode)",
            "",
        )
    regions, problems = [], []
    for key in sorted(keys):
        region = key[len(BOOTSTRAP_PREFIX) + 1 : -len(".json")]
        body = r.call("GetObject", r.s3.get_object, Key=key)["Body"].read(MAX_MARKER_BYTES + 1)
        problem = _marker_problem(body, head)
        if problem:
            problems.append(f"{key}: {problem}")
        else:
            regions.append(region)
    if problems:
        return (
            PROBLEM,
            "; ".join(problems[:5]) + ("" if len(problems) <= 5 else f" (and {len(problems) - 5} more)"),
            "Re-run cdkd bootstrap in that region (a deploy there fails until the marker is valid), or remove the "
            "region's marker with cdkd bootstrap --destroy",
        )
    return OK, f"cdkd asset storage in {', '.join(regions)}", ""


def _marker_problem(body: bytes, head: Callable[[str], bool | None]) -> str:
    if len(body) > MAX_MARKER_BYTES:
        return "too large to be a marker"
    try:
        marker = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return "not valid JSON (INVALID_BOOTSTRAP_MARKER)"
    if not isinstance(marker, dict):
        return "not a JSON object (INVALID_BOOTSTRAP_MARKER)"
    for name in ("assetBucket", "containerRepo", "createdAt"):
        if not isinstance(marker.get(name), str) or not marker[name]:
            return f"{name} missing or not a string (INVALID_BOOTSTRAP_MARKER)"
    version = marker.get("assetSupportVersion")
    if isinstance(version, bool) or not isinstance(version, int | float):
        return "assetSupportVersion missing or not a number (INVALID_BOOTSTRAP_MARKER)"
    if version > MARKER_VERSION:
        return f"assetSupportVersion {version} is newer than {MARKER_VERSION} (UNSUPPORTED_BOOTSTRAP_MARKER_VERSION)"
    if head(marker["assetBucket"]) is False:
        return f"its asset bucket {marker['assetBucket']} does not exist: deploys there fail"
    return ""


def _head(r: Reader, name: str) -> bool | None:
    """Whether the asset bucket exists; None when it cannot be told (denied, error)."""
    try:
        r.s3.head_bucket(Bucket=name, ExpectedBucketOwner=r.account_id)
        return True
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return False if status == 404 or aws.error_code(exc) in ("404", "NoSuchBucket") else None
    except BotoCoreError:
        return None
