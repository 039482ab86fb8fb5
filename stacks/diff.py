"""Compare two readings of a stack's state record (two S3 versions, or a version and the
mirrored current record).

The comparison works on the decoded JSON as cdkd stored it, through the lenient accessors of
`engine.schema.ParsedRecord`, so it works on damaged records too: a container that cannot be
read counts as empty and the damage itself shows up as a top-level field change.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine.schema import ParsedRecord

# Fields compared row by row (resources) or key by key (outputs); every other top-level
# field of the record is compared as a field.
_CONTAINERS = ("resources", "outputs")
_MISSING = object()
# Fields cdkd writes as epoch milliseconds: the diff shows them as dates too.
_TIME_FIELD = re.compile(r"(?:^|\.)(lastModified|timestamp|createdAt|updatedAt|expiresAt|startedAt|finishedAt)$")
# Containers of a resource row whose entries are compared (and listed) one by one.
_ROW_MAPS = ("properties", "attributes", "observedProperties")


def _as_date(path: str, value: Any) -> datetime | None:
    if not _TIME_FIELD.search(path) or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or not 0 <= value < 32_503_680_000_000:  # before year 3000
        return None
    return datetime.fromtimestamp(value / 1000, tz=UTC)


@dataclass(frozen=True)
class Change:
    """One difference at a JSON path. `before`/`after` are JSON values; a side on which
    the path does not exist is `None` with `added`/`removed` saying so."""

    path: str
    before: Any = None
    after: Any = None
    kind: str = "changed"  # "added", "removed" or "changed"

    @property
    def before_json(self) -> str:
        return "" if self.kind == "added" else _dump(self.before)

    @property
    def after_json(self) -> str:
        return "" if self.kind == "removed" else _dump(self.after)

    @property
    def before_date(self) -> datetime | None:
        return None if self.kind == "added" else _as_date(self.path, self.before)

    @property
    def after_date(self) -> datetime | None:
        return None if self.kind == "removed" else _as_date(self.path, self.after)


@dataclass
class ResourceDiff:
    logical_id: str
    resource_type: str
    status: str  # "added", "removed" or "changed"
    changes: list[Change] = field(default_factory=list)


@dataclass
class RecordDiff:
    fields: list[Change] = field(default_factory=list)
    resources: list[ResourceDiff] = field(default_factory=list)
    outputs: list[Change] = field(default_factory=list)

    @property
    def resources_added(self) -> list[ResourceDiff]:
        return [r for r in self.resources if r.status == "added"]

    @property
    def resources_removed(self) -> list[ResourceDiff]:
        return [r for r in self.resources if r.status == "removed"]

    @property
    def resources_changed(self) -> list[ResourceDiff]:
        return [r for r in self.resources if r.status == "changed"]

    @property
    def identical(self) -> bool:
        return not (self.fields or self.resources or self.outputs)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False, default=str)


def _text(record: ParsedRecord) -> Any:
    if isinstance(record.data, dict):
        return record.data
    return record.raw.decode("utf-8", errors="replace")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def json_changes(before: Any, after: Any, path: str = "") -> list[Change]:
    """Every leaf-level difference between two JSON values, as paths (`a.b[2].c`).

    Objects are compared key by key and lists index by index; where the types differ the
    whole value at that path is one change. A missing side is passed as `_MISSING`."""
    if before is _MISSING and after is _MISSING:
        return []
    if before is _MISSING:
        return [Change(path, None, after, "added")]
    if after is _MISSING:
        return [Change(path, before, None, "removed")]
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in list(before) + [k for k in after if k not in before]:
            changes += json_changes(before.get(key, _MISSING), after.get(key, _MISSING), _join(path, key))
        return changes
    if isinstance(before, list) and isinstance(after, list):
        changes = []
        for i in range(max(len(before), len(after))):
            b = before[i] if i < len(before) else _MISSING
            a = after[i] if i < len(after) else _MISSING
            changes += json_changes(b, a, _join(path, i))
        return changes
    # bool is an int in Python: 1 == True must still count as a change.
    if type(before) is not type(after) or before != after:
        return [Change(path, before, after, "changed")]
    return []


def _resources(record: ParsedRecord) -> dict[str, Any]:
    """logicalId -> the row as stored (a malformed row keeps its raw value)."""
    raw = record.data.get("resources") if isinstance(record.data, dict) else None
    rows: dict[str, Any] = {}
    for logical_id, row in record.resource_rows():
        if row is None and isinstance(raw, dict):
            row = raw.get(logical_id)
        rows[logical_id] = row
    return rows


def _entries(row: Any, kind: str) -> list[Change]:
    """A whole added or removed row, one change per field and per property (not one blob)."""
    if not isinstance(row, dict):
        return [Change("", row if kind == "removed" else None, row if kind == "added" else None, kind)]
    changes: list[Change] = []
    for key, value in row.items():
        items = value.items() if key in _ROW_MAPS and isinstance(value, dict) and value else [(None, value)]
        for sub, inner in items:
            path = key if sub is None else _join(key, sub)
            before, after = (inner, None) if kind == "removed" else (None, inner)
            changes.append(Change(path, before, after, kind))
    return changes


def _type_of(row: Any) -> str:
    value = row.get("resourceType") if isinstance(row, dict) else None
    return value if isinstance(value, str) else ""


def diff_records(before: ParsedRecord, after: ParsedRecord) -> RecordDiff:
    """What changed from `before` to `after`: top-level fields, resources (added, removed,
    changed with property-level paths), outputs."""
    result = RecordDiff()

    b_data = before.data if isinstance(before.data, dict) else {}
    a_data = after.data if isinstance(after.data, dict) else {}
    whole_records = not isinstance(before.data, dict) or not isinstance(after.data, dict)
    if whole_records and before.raw != after.raw:
        # A body that is not a JSON object has no fields to compare: show it whole.
        result.fields.append(Change("(record)", _text(before), _text(after), "changed"))
    for key in list(b_data) + [k for k in a_data if k not in b_data]:
        if key in _CONTAINERS:
            continue
        result.fields += json_changes(b_data.get(key, _MISSING), a_data.get(key, _MISSING), key)
    for key in _CONTAINERS:
        # Readable containers are compared row by row below; one that is (or became)
        # unreadable is a field change of its own, so the damage is visible in the diff.
        b_val, a_val = b_data.get(key, _MISSING), a_data.get(key, _MISSING)
        if all(v is _MISSING or isinstance(v, dict) for v in (b_val, a_val)):
            continue
        result.fields += json_changes(b_val, a_val, key)

    b_rows, a_rows = _resources(before), _resources(after)
    for logical_id in sorted(set(b_rows) | set(a_rows)):
        if logical_id not in b_rows:
            row = a_rows[logical_id]
            result.resources.append(ResourceDiff(logical_id, _type_of(row), "added", _entries(row, "added")))
        elif logical_id not in a_rows:
            row = b_rows[logical_id]
            result.resources.append(ResourceDiff(logical_id, _type_of(row), "removed", _entries(row, "removed")))
        else:
            changes = json_changes(b_rows[logical_id], a_rows[logical_id])
            if changes:
                row_type = _type_of(a_rows[logical_id]) or _type_of(b_rows[logical_id])
                result.resources.append(ResourceDiff(logical_id, row_type, "changed", changes))

    b_out, a_out = before.outputs(), after.outputs()
    for key in list(b_out) + [k for k in a_out if k not in b_out]:
        b_val, a_val = b_out.get(key, _MISSING), a_out.get(key, _MISSING)
        if b_val is _MISSING:
            result.outputs.append(Change(key, None, a_val, "added"))
        elif a_val is _MISSING:
            result.outputs.append(Change(key, b_val, None, "removed"))
        elif json_changes(b_val, a_val):
            result.outputs.append(Change(key, b_val, a_val, "changed"))
    return result
