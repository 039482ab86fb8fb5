"""lock.json: lenient read (`parse_lock`) and cdkd's exact write (`dump_lock`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.schema.decode import _finite, decode_json, describe_region_value_kind
from engine.schema.dump import _to_bytes, js_stringify
from engine.schema.models import LockInfo


@dataclass
class ParsedLock:
    """A stored lock.json. An object that exists always blocks cdkd's `If-None-Match: *`
    acquire, whatever it holds; `info` is None when it is unreadable or not an object."""

    raw: bytes
    info: LockInfo | None  # None when unreadable or a JSON null / non-object (no lock)
    error: str | None  # set when the body is not JSON (an unreadable lock)
    kind: str = "an object"  # what the JSON value is (describe_region_value_kind)

    @property
    def present_but_empty(self) -> bool:
        """JSON that is not an object (null, [], a number): cdkd reads "no lock", yet the
        object still makes every acquire fail until it is deleted (force-unlock)."""
        return self.info is None and self.error is None

    def _expires(self) -> Any:
        return self.info.get("expiresAt") if self.info is not None else None

    def expires_at_ms(self) -> int | None:
        """expiresAt as an int, or None when absent or not a finite number (counts as expired).
        A fractional deadline rounds UP, so `now_ms >= expires_at_ms()` keeps cdkd's verdict."""
        value = self._expires()
        return math.ceil(value) if _finite(value) else None

    def is_expired(self, now_ms: int) -> bool:
        """cdkd's newer rule: expired when expiresAt is not a finite number or now >= expiresAt."""
        value = self._expires()
        return not _finite(value) or now_ms >= value


def parse_lock(body: bytes) -> ParsedLock:
    """Read a stored lock.json body. Never raises."""
    decoded = decode_json(body)
    if decoded.code is not None:
        what = "is too large to read" if decoded.code == "too-large" else "is not valid JSON"
        return ParsedLock(raw=body, info=None, error=f"lock.json {what} ({decoded.reason})", kind="")
    data = decoded.value
    info = LockInfo.model_validate(data) if isinstance(data, dict) else None
    return ParsedLock(raw=body, info=info, error=None, kind=describe_region_value_kind(data))


_LOCK_KEYS = ("owner", "timestamp", "expiresAt", "operation")


def dump_lock(info: LockInfo) -> bytes:
    """cdkd's lock body: `JSON.stringify(lockInfo)` (compact, no trailing newline) with
    owner, timestamp, expiresAt, then operation when present; unknown keys kept after."""
    held = info.to_json_value()
    body = {k: held.pop(k) for k in _LOCK_KEYS if k in held}
    body.update(held)
    return _to_bytes(js_stringify(body, indent=0))
