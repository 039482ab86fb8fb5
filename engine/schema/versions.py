"""Schema versions: the newest this app reads and writes (`SUPPORTED_VERSION`), how a
record's `version` is judged, and which version a write stamps (`write_version`)."""

from __future__ import annotations

from typing import Any

from engine.schema.decode import _finite
from engine.schema.models import StackState

SUPPORTED_VERSION = 11  # the newest schema this app reads AND writes


def _version_verdict(value: Any) -> tuple[str, int | None]:
    """('ok' | 'newer' | 'invalid', the version as int). JS numbers: 3.0 is 3."""
    if not _finite(value):
        return "invalid", None
    if isinstance(value, float):
        if not value.is_integer():
            return "invalid", None
        value = int(value)
    if value < 1:
        return "invalid", None
    return ("newer" if value > SUPPORTED_VERSION else "ok"), value


# The schema version that introduced each field (seed 000, "Schema version history"); a
# field the seeds mark "no bump" is absent. Region-scoped keys (every write here) are v2+.
_TOP_FIELD_VERSIONS = {
    "imports": 4,
    "parentStack": 6,
    "parentLogicalId": 6,
    "parentRegion": 6,
    "outputReads": 8,
    "exportNames": 9,
}
_ROW_FIELD_VERSIONS = {
    "observedProperties": 3,
    "deletionPolicy": 5,
    "updateReplacePolicy": 5,
    "provisionedBy": 7,
    "observedBaselineRefused": 10,
    "noEchoLeaves": 11,
    "noEchoAttributeNames": 11,
}
_REGION_KEY_VERSION = 2


def fields_version(body: dict[str, Any]) -> int:
    """The lowest schema version whose readers know every field `body` holds (rows and
    orphan records' rows included), at least 2: every write goes to a region-scoped key."""
    needed = _REGION_KEY_VERSION
    for name, version in _TOP_FIELD_VERSIONS.items():
        if name in body:
            needed = max(needed, version)
    resources = body.get("resources")
    rows = list(resources.values()) if isinstance(resources, dict) else []
    orphans = body.get("orphans")
    rows += [o.get("state") for o in orphans if isinstance(o, dict)] if isinstance(orphans, list) else []
    for row in rows:
        if isinstance(row, dict):
            for name, version in _ROW_FIELD_VERSIONS.items():
                if name in row:
                    needed = max(needed, version)
    return needed


def write_version(state: StackState | dict[str, Any]) -> int:
    """The `version` `dump_state` stamps: a record without one is new and is written at
    SUPPORTED_VERSION (seeds: new records are v11); a repair keeps the record's version, or
    the lowest newer one its fields need (`fields_version`), so an older cdkd that reads the
    record now still reads it after the repair. A plan states this number."""
    body = state.to_json_value() if isinstance(state, StackState) else state
    if "version" not in body:
        return SUPPORTED_VERSION
    verdict, number = _version_verdict(body["version"])
    if verdict != "ok" or number is None:
        return SUPPORTED_VERSION  # never reached by dump_state: a bad version is a blocking defect
    return max(number, fields_version(body))


def version_line(was: Any, version: int) -> str:
    """The line a plan shows for its save: the version `write_version` stamps, and why."""
    if was is None:
        return f"writes schema version {version} (the record names none: written as a new record)"
    if was == version:
        return f"writes schema version {version} (the record's own)"
    return f"writes schema version {version} (was {was}; the lowest version that knows every field it holds)"
