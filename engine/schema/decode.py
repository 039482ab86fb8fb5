"""Decoding an untrusted JSON body as JSON.parse would, within bounds on size and depth
(`decode_json`), and the small checks on decoded values the rest of the package shares."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

# --- small value helpers ------------------------------------------------------------------


def describe_region_value_kind(value: Any) -> str:
    """cdkd's `describeRegionValueKind`: the KIND of a JSON value, never the value itself
    ("null", "an array", or an article plus the JavaScript `typeof` name)."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an object"


def _is_object(value: Any) -> bool:
    # cdkd's isReadableBag: typeof x === 'object' && x !== null && !Array.isArray(x)
    return isinstance(value, dict)


def _row_is_readable(row: Any) -> bool:
    return isinstance(row, dict) and isinstance(row.get("resourceType"), str)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """JavaScript's Number.isFinite over a decoded JSON value."""
    if not _is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a double is Infinity in JavaScript
        return False


# --- decoding under bounds ---------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    # JSON.parse has no NaN / Infinity literals; Python's json.loads would accept them.
    raise ValueError(f"{name} is not valid JSON")


# Bounds on what is decoded at all. cdkd's own records stay far below both; beyond them a
# body is a defect, never a parse that could exhaust memory, time or the stack.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 200  # nested arrays/objects; pydantic, jsonb and the templates all recurse

# The largest values the mirror's integer columns hold (PostgreSQL integer and bigint).
INT_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = tuple(1 if b in b"[{" else -1 for b in range(256))


def nesting_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, without parsing it and
    without recursion: strings are cut out (their brackets do not count), then the brackets
    that are left are summed. Linear in the size of the body."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return 0  # cannot be deeper than the bound: skip the scan
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


@dataclass
class Decoded:
    """A body decoded under the bounds: `value`, or `code` (too-large, too-deep, not-json)
    with `reason` saying why. `duplicates` are the paths of keys that appear more than once
    in one object (JSON.parse and json.loads both keep the last)."""

    value: Any = None
    code: str | None = None
    reason: str | None = None
    duplicates: list[str] = field(default_factory=list)
    text: str = ""


def decode_json(body: bytes, *, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_DEPTH) -> Decoded:
    """Decode an untrusted JSON body as JSON.parse would, bounded in size and depth. Never
    raises: every failure becomes a `code` and a `reason`."""
    if len(body) > max_bytes:
        return Decoded(code="too-large", reason=f"it is {len(body):,} bytes, over the {max_bytes:,} this app reads")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        return Decoded(code="not-json", reason=f"it is not UTF-8 text (invalid byte at offset {exc.start})")
    if text.startswith("\ufeff"):
        return Decoded(
            code="not-json",
            reason="it starts with a UTF-8 byte order mark (EF BB BF), which JSON.parse refuses; remove those 3 bytes",
        )
    depth = nesting_depth(bytes(body))
    if depth > max_depth:
        return Decoded(code="too-deep", reason=f"it nests {depth:,} levels deep, over the {max_depth} this app reads")
    seen_twice: dict[int, list[str]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            counts: dict[str, int] = {}
            for k, _ in items:
                counts[k] = counts.get(k, 0) + 1
            seen_twice[id(obj)] = [k for k, n in counts.items() if n > 1]
        return obj

    try:
        value = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        return Decoded(code="not-json", reason=f"{exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:
        return Decoded(code="too-deep", reason="it nests too deeply to read")
    except Exception as exc:  # noqa: BLE001 - e.g. an integer of more than 4300 digits
        return Decoded(code="not-json", reason=str(exc)[:200] or type(exc).__name__)
    duplicates = _duplicate_paths(value, seen_twice) if seen_twice else []
    return Decoded(value=value, duplicates=duplicates, text=text)


def _duplicate_paths(value: Any, seen_twice: dict[int, list[str]]) -> list[str]:
    """Where the duplicated keys are (`outputs.A`), found without recursion."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack and len(found) < 20:
        path, node = stack.pop()
        if isinstance(node, dict):
            found += [f"{path}.{k}" if path else k for k in seen_twice.get(id(node), [])]
            stack += [(f"{path}.{k}" if path else k, v) for k, v in node.items() if isinstance(v, dict | list)]
        elif isinstance(node, list):
            stack += [(f"{path}[{i}]", v) for i, v in enumerate(node) if isinstance(v, dict | list)]
    return sorted(found)[:20]


def in_range(value: Any, limit: int) -> bool:
    """A JSON number whose whole part fits a column holding -limit..limit."""
    if not _finite(value):
        return False
    return abs(value) <= limit
