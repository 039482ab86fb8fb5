"""Values from a bucket made safe for the mirror's columns.

Every value a sync writes comes from an untrusted object. PostgreSQL refuses NUL in text
and `\\u0000` in jsonb, psycopg cannot encode a lone surrogate (`"\\ud800"` is legal JSON),
jsonb has no NaN or Infinity, and integer columns overflow. These helpers turn each into
something storable, so a damaged record is a defect on its stack, never a failed account.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

INT_MAX = 2**31 - 1  # integer
BIGINT_MAX = 2**63 - 1  # bigint

_SURROGATE = re.compile("[\ud800-\udfff]")

# Aware datetimes PostgreSQL stores and psycopg reads back (years 1..9999 in UTC).
_EARLIEST = datetime(2, 1, 1, tzinfo=UTC)
_LATEST = datetime(9998, 12, 31, tzinfo=UTC)


def utf8_safe(value: str) -> str:
    """`value` without NUL, with each lone surrogate replaced by U+FFFD."""
    if "\x00" in value:
        value = value.replace("\x00", "")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = _SURROGATE.sub("\ufffd", value)
    return value


def text(value: object, limit: int) -> str:
    """A string for a text column of at most `limit` characters; "" for a non-string."""
    if not isinstance(value, str):
        return ""
    return utf8_safe(value[: limit * 2])[:limit]


def clean_json(value: Any, depth: int = 0) -> Any:
    """`value` storable in jsonb: strings and keys through `utf8_safe`, non-finite floats
    as null, nesting below 100 levels cut off (a jsonb value and json.dumps recurse)."""
    if isinstance(value, str):
        return utf8_safe(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= 100:
        return None
    if isinstance(value, dict):
        return {utf8_safe(str(k)): clean_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v, depth + 1) for v in value]
    return None


def int_or_none(value: object, limit: int = BIGINT_MAX) -> int | None:
    """A JSON number as an int when it fits -limit..limit, else None (NaN, infinities,
    booleans, non-numbers and out-of-range values alike)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        if not math.isfinite(value):
            return None
    except OverflowError:  # an int too large for a float
        return None
    if abs(value) > limit:
        return None
    return int(value)


def clamp_int(value: int | None, limit: int = BIGINT_MAX) -> int | None:
    """An int pinned into -limit..limit (a deadline beyond the column's range stays in the
    future, so a lock keeps cdkd's `live` verdict); None stays None."""
    if value is None:
        return None
    return max(-limit, min(limit, value))


def storable_time(moment: datetime | None) -> datetime | None:
    """An aware datetime PostgreSQL stores and reads back, in UTC; None otherwise."""
    if moment is None:
        return None
    try:
        moment = moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return moment if _EARLIEST <= moment <= _LATEST else None
