"""Purging noncurrent versions (cdkd's noncurrent-version purge), Object Lock and the
replication check that follows a purge.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.backend import StateBucket
from engine.errors import EngineError
from engine.scrub.scanner import _call, _s3

MAX_NAMED_KEYS = 5  # the purge warning names up to five keys, then "(and N more)"

# --- purging history ------------------------------------------------------------------------------


@dataclass
class PurgeReport:
    """Per-key results of a noncurrent-version purge. Never raised: failures are data."""

    deleted: dict[str, int] = field(default_factory=dict)  # key -> versions removed
    failures: dict[str, str] = field(default_factory=dict)  # key -> "Code: s3:Action"
    body_purged: bool = False  # a body (not only markers) was removed, or it is unknown

    def warning(self, bucket: str) -> str | None:
        """cdkd's one warning for every key that could not be purged (None: all purged)."""
        if not self.failures:
            return None
        keys = sorted(self.failures)
        named = ", ".join(f"{k} ({self.failures[k]})" for k in keys[:MAX_NAMED_KEYS])
        more = f" (and {len(keys) - MAX_NAMED_KEYS} more)" if len(keys) > MAX_NAMED_KEYS else ""
        return (
            f"Could not purge noncurrent versions of {len(keys)} key(s) in s3://{bucket}. Their previous versions "
            f"survive and remain readable via GetObject with a VersionId (state records, journals, exports index "
            f"bodies or custom-resource responses that held a secret). Grant s3:ListBucketVersions and "
            f"s3:DeleteObjectVersion on the state bucket, or purge the key(s) by hand. Failures: {named}{more}"
        )


def purge_noncurrent(bucket: StateBucket, keys: Iterable[str]) -> PurgeReport:
    """Delete every noncurrent version and delete marker (IsLatest false) of each key in
    the set; the current version is never touched. `DeleteObjects` in batches of 1,000;
    its per-key `Errors` are read (a missing s3:DeleteObjectVersion shows up there), a
    per-key NoSuchVersion counts as done, and a denied listing or call fails only the keys
    concerned. Never raises."""
    report = PurgeReport()
    doomed: list[tuple[str, str, bool]] = []  # (key, version id, is a body)
    for key in dict.fromkeys(keys):
        try:
            versions = bucket.versions(key)  # exactly this key: membership is the safety filter
        except EngineError as exc:
            report.failures[key] = f"{getattr(exc, 'code', '') or type(exc).__name__}: s3:ListBucketVersions"
            report.body_purged = True  # unknown what survives: the replication check must run
            continue
        report.deleted.setdefault(key, 0)
        doomed += [(v.key, v.version_id, not v.delete_marker) for v in versions if not v.is_latest]
    s3 = _s3(bucket)
    for start in range(0, len(doomed), 1000):
        batch = doomed[start : start + 1000]
        objects = [{"Key": k, "VersionId": v} for k, v, _ in batch]
        try:
            response = _call(bucket, "DeleteObjects", s3.delete_objects, Delete={"Objects": objects, "Quiet": True})
        except EngineError as exc:
            for k, _, _ in batch:
                report.failures.setdefault(
                    k, f"{getattr(exc, 'code', '') or type(exc).__name__}: s3:DeleteObjectVersion"
                )
            report.body_purged = True
            continue
        failed: set[tuple[str, str]] = set()
        for error in response.get("Errors") or []:
            k, v, code = error.get("Key", ""), error.get("VersionId", ""), error.get("Code", "")
            if code == "NoSuchVersion":
                continue  # already gone: the state the purge exists to produce
            failed.add((k, v))
            report.failures.setdefault(k, f"{code or 'Error'}: s3:DeleteObjectVersion")
        for k, v, body in batch:
            if (k, v) not in failed:
                report.deleted[k] = report.deleted.get(k, 0) + 1
                report.body_purged = report.body_purged or body
            else:
                report.body_purged = True
    return report


def object_lock_enabled(bucket: StateBucket) -> bool | None:
    """True when the bucket has Object Lock enabled, False when not, None when unknown."""
    s3 = _s3(bucket)
    try:
        response = _call(bucket, "GetObjectLockConfiguration", s3.get_object_lock_configuration)
    except EngineError as exc:
        if getattr(exc, "code", "") in ("ObjectLockConfigurationNotFoundError", "NoSuchObjectLockConfiguration"):
            return False
        return None
    return (response.get("ObjectLockConfiguration") or {}).get("ObjectLockEnabled") == "Enabled"


def replication_destinations(bucket: StateBucket, keys: Iterable[str]) -> tuple[list[str], str | None]:
    """(destination buckets of replication rules covering any of `keys`, a note when the
    configuration could not be read). Tag-filtered rules are assumed to match; disabled
    rules still count (they stop future copies, not what was already copied)."""
    s3 = _s3(bucket)
    try:
        response = _call(bucket, "GetBucketReplication", s3.get_bucket_replication)
    except EngineError as exc:
        if getattr(exc, "code", "") == "ReplicationConfigurationNotFoundError":
            return [], None
        return [], f"replication could not be checked (s3:GetReplicationConfiguration: {getattr(exc, 'code', '')})"
    keys = list(keys)
    found: list[str] = []
    for rule in (response.get("ReplicationConfiguration") or {}).get("Rules", []):
        prefix = _rule_prefix(rule)
        if prefix is not None and not any(k.startswith(prefix) for k in keys):
            continue
        destination = (rule.get("Destination") or {}).get("Bucket", "")
        name = destination.rsplit(":", 1)[-1] if destination else "(unknown)"
        if rule.get("Status") == "Disabled":
            name += " (rule disabled)"
        if name not in found:
            found.append(name)
    return found, None


def _rule_prefix(rule: dict[str, Any]) -> str | None:
    """The key prefix a replication rule is limited to; None when it may cover any key."""
    if "Prefix" in rule:
        return rule["Prefix"] or None
    flt = rule.get("Filter") or {}
    if "Prefix" in flt:
        return flt["Prefix"] or None
    return (flt.get("And") or {}).get("Prefix") or None
