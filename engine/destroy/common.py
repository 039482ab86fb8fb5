"""Constants, row actions and outcomes, and the small helpers every part of destroy shares."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from engine.backend import StoredObject
from engine.destroy.seams import _make_ref
from engine.errors import NotFound
from engine.masking import MASK
from engine.operations import Context, OperationRefused

NESTED_STACK_TYPE = "AWS::CloudFormation::Stack"
DEFAULT_CONCURRENCY = 8
MAX_NESTING = 10  # a `~` chain deeper than this is refused rather than followed
EXPORTS_ATTEMPTS = 5  # cdkd's export-index store: 5 attempts, 100 ms doubling to a 1 s cap
EXPORTS_BACKOFF_S = 0.1
EXPORTS_BACKOFF_CAP_S = 1.0
NO_PHYSICAL_ID = "state record has no physical id"

# Substrings cdkd's runner reads as "already deleted" in an error message (reference §8.2).
NOT_FOUND_MARKERS = ("does not exist", "not found", "No policy found", "NoSuchEntity", "NotFoundException")
NOT_FOUND_CODES = frozenset(
    {
        "NoSuchEntity",
        "NotFoundException",
        "ResourceNotFoundException",
        "NoSuchBucket",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "ParameterNotFound",
        "NotFound",
    }
)

ACTION_DELETE = "delete"
ACTION_SNAPSHOT = "snapshot"
ACTION_FAIL_SNAPSHOT = "fail-snapshot"
ACTION_RETAIN = "retain"
ACTION_SKIP = "skip"
ACTION_NESTED = "nested"
ACTION_GONE = "gone"
ACTION_FAIL = "fail"
CALL_ACTIONS = frozenset({ACTION_DELETE, ACTION_SNAPSHOT, ACTION_NESTED, ACTION_GONE})

# Row outcomes (also the progress item statuses).
PENDING, DELETING, DELETED, RETAINED, SKIPPED, FAILED = (
    "pending",
    "deleting",
    "deleted",
    "retained",
    "skipped",
    "failed",
)
# A dependent in one of these no longer stands in the way of what it depends on.
RELEASES = frozenset({DELETED, RETAINED, SKIPPED})


# --- small helpers --------------------------------------------------------------------------


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", errors="backslashreplace")).hexdigest()


# Fields a destroy snapshot may change; everything else must stay as planned.
_SNAPSHOT_FIELDS = ("resources", "outputs", "imports", "outputReads", "lastModified", "version", "stackName", "region")


_TRIM_DROPS = ("imports", "outputReads")  # what a destroy snapshot leaves out


def _residual_digest(data: dict[str, Any]) -> str:
    return _digest({k: v for k, v in data.items() if k not in _SNAPSHOT_FIELDS})


def _cross_digest(data: dict[str, Any]) -> str:
    return _digest({k: data.get(k) for k in ("outputs", "imports", "outputReads")})


def _trimmed_cross(data: dict[str, Any]) -> bool:
    """outputs/imports/outputReads as a destroy snapshot leaves them."""
    return data.get("outputs", {}) == {} and "imports" not in data and "outputReads" not in data


def _now_ms() -> int:
    return int(time.time() * 1000)


def _physical_id_problem(row: dict[str, Any]) -> str | None:
    """Seed 004's first skip cause, plus the redaction mask (names nothing in AWS)."""
    physical_id = row.get("physicalId")
    if not isinstance(physical_id, str) or not physical_id.strip():
        return NO_PHYSICAL_ID
    if physical_id == MASK or physical_id.startswith("{{resolve:"):
        return "state record's physical id is redacted (the *** mask or a secret reference) — no delete issued"
    return None


def _read(ctx: Context, key: str) -> StoredObject | None:
    try:
        return ctx.bucket.get(key)
    except NotFound:
        return None


def _where(stack: str, region: str | None) -> str:
    return f"{stack} ({region or 'legacy, no region'})"


class _ChildRefused(Exception):
    """A nested child cannot be destroyed; its parent row fails with this message."""


def _ref(ctx: Context, region: str, lid: str, row: dict[str, Any]) -> Any:
    properties = row.get("properties")
    attributes = row.get("attributes")
    return _make_ref(
        logical_id=lid,
        resource_type=row.get("resourceType"),
        physical_id=row.get("physicalId") if isinstance(row.get("physicalId"), str) else None,
        properties=properties if isinstance(properties, dict) else {},
        attributes=attributes if isinstance(attributes, dict) else {},
        region=region,
        account_id=ctx.bucket.account_id,
        provisioned_by=row.get("provisionedBy") if isinstance(row.get("provisionedBy"), str) else None,
    )


def _concurrency(ctx: Context) -> int:
    value = ctx.params.get("concurrency", DEFAULT_CONCURRENCY)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 64:
        raise OperationRefused(f"concurrency must be a whole number from 1 to 64, got {value!r}")
    return value


class RefusedDelete(Exception):  # noqa: N818 - it is the error recorded for the row
    """A row that fails without an AWS error (snapshot refusal, nested child refusal)."""


def _reads_as_not_found(exc: BaseException) -> bool:
    """cdkd's runner treats these as already deleted (reference §8.2 step 7)."""
    code = getattr(exc, "aws_code", None) or getattr(exc, "code", None)
    if isinstance(code, str) and code in NOT_FOUND_CODES:
        return True
    message = str(exc)
    return any(marker in message for marker in NOT_FOUND_MARKERS)


def _is_trimmed_subset(parsed: Any, data: dict[str, Any]) -> bool:
    """True when the record differs from the planned one only as this destroy's own
    snapshots change it: rows removed (each remaining row unchanged), outputs cleared,
    imports/outputReads dropped, lastModified/version/stackName/region restamped."""
    if parsed.defects or parsed.newer_than_supported or not isinstance(parsed.data, dict):
        return False
    planned = data["rows"]
    for lid, row in parsed.resource_rows():
        if row is None or lid not in planned or _digest(row) != planned[lid]["digest"]:
            return False
    if _residual_digest(parsed.data) != data["residual"]:
        return False
    return _cross_digest(parsed.data) == data["cross"] or _trimmed_cross(parsed.data)
