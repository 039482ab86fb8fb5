"""Writing state.json as cdkd's `saveState` does (`dump_state`), through an exact
`JSON.stringify` (`js_stringify`)."""

from __future__ import annotations

import math
from decimal import Decimal
from json.encoder import encode_basestring  # type: ignore[attr-defined]  # JSON.stringify's string quoting
from typing import Any

from pydantic import BaseModel

from engine.errors import RecordRefused
from engine.schema.defects import state_defects
from engine.schema.models import StackState
from engine.schema.versions import SUPPORTED_VERSION, _version_verdict, write_version

_MAX_SAFE = 2**53
_MAX_INDEX = 2**32 - 2


def _js_number(value: float) -> str:
    """ECMAScript Number::toString (what JSON.stringify prints); non-finite -> null."""
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr gives the shortest round-trip digits, as JavaScript does.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # type: ignore[operator]
    k = len(digits)
    n = exponent + k  # type: ignore[operator]
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + text


def _js_int(value: int) -> str:
    if -_MAX_SAFE <= value <= _MAX_SAFE:
        return str(value)
    try:  # JSON.parse would have rounded it to a double
        return _js_number(float(value))
    except OverflowError:
        return "null"


def _is_array_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and int(key) <= _MAX_INDEX


def _js_keys(obj: dict[str, Any]) -> list[str]:
    """JavaScript's own-key order: array-index keys ascending, then the rest as inserted."""
    index_keys = [k for k in obj if _is_array_index(k)]
    if not index_keys:
        return list(obj)
    index_keys.sort(key=int)
    return index_keys + [k for k in obj if not _is_array_index(k)]


def js_stringify(value: Any, *, indent: int = 2) -> str:
    """`JSON.stringify(value, null, indent)` (indent 0 = compact) over decoded JSON values."""
    parts: list[str] = []
    colon = ": " if indent else ":"

    def emit(v: Any, depth: int) -> None:
        if v is None:
            parts.append("null")
        elif v is True:
            parts.append("true")
        elif v is False:
            parts.append("false")
        elif isinstance(v, str):
            parts.append(encode_basestring(v))
        elif isinstance(v, int):
            parts.append(_js_int(v))
        elif isinstance(v, float):
            parts.append(_js_number(v))
        elif isinstance(v, BaseModel):
            emit(v.model_dump(), depth)
        elif isinstance(v, dict):
            keys = _js_keys(v)
            if not keys:
                parts.append("{}")
                return
            inner = "\n" + " " * (indent * (depth + 1)) if indent else ""
            parts.append("{")
            for i, k in enumerate(keys):
                if i:
                    parts.append(",")
                parts.append(inner)
                parts.append(encode_basestring(k))
                parts.append(colon)
                emit(v[k], depth + 1)
            parts.append("\n" + " " * (indent * depth) + "}" if indent else "}")
        elif isinstance(v, list | tuple):
            if not v:
                parts.append("[]")
                return
            inner = "\n" + " " * (indent * (depth + 1)) if indent else ""
            parts.append("[")
            for i, item in enumerate(v):
                if i:
                    parts.append(",")
                parts.append(inner)
                emit(item, depth + 1)
            parts.append("\n" + " " * (indent * depth) + "]" if indent else "]")
        else:
            raise TypeError(f"{type(v).__name__} is not a JSON value")

    emit(value, 0)
    return "".join(parts)


def _to_bytes(text: str) -> bytes:
    # A lone surrogate (legal in JSON text) cannot be UTF-8; JSON.stringify writes it as a
    # lowercase \udXXX escape, which is exactly what backslashreplace produces.
    return text.encode("utf-8", errors="backslashreplace")


def dump_state(state: StackState, *, stack_name: str, region: str, version: int | None = None) -> bytes:
    """cdkd's writer: `version` as `write_version` decides (11 for a new record, the
    record's own for a repair unless its fields need newer) or as given (a deploy or a
    rollback writes SUPPORTED_VERSION, as cdkd's saveState does), stackName/region stamped from
    the key, 2-space indent, no trailing newline, unknown fields as read. Raises
    engine.errors.RecordRefused for a record newer than SUPPORTED_VERSION, and for a record
    with any blocking defect."""
    body = state.to_json_value()
    if "version" in body:
        verdict, number = _version_verdict(body["version"])
        if verdict == "newer":
            raise RecordRefused(
                f"state.json of {stack_name} ({region}) has schema version {number}, newer than the "
                f"{SUPPORTED_VERSION} this app writes; it is read-only here. Upgrade cdkd Admin before changing it."
            )
    defects = state_defects(body, stack_name=stack_name, region=region)
    if defects:
        listed = "; ".join(f"{d.path or '(root)'}: {d.code}" for d in defects)
        raise RecordRefused(
            f"Refusing to write state.json of {stack_name} ({region}): the record is damaged ({listed}). "
            f"{defects[0].message}"
        )
    # {...state, version, stackName, region}: keys already held keep their position.
    body["version"] = write_version(body) if version is None else version
    body["stackName"] = stack_name
    body["region"] = region
    return _to_bytes(js_stringify(body, indent=2))
