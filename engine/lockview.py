"""A stored lock.json as read and as people are told about it: `read_lock` gives a
`LockView` (holder, operation, deadline, cdkd's expiry rule, one-line description), and
the owner strings this app writes are recognised (`owner_operation`, `same_operation`).
Reads only; holding, renewing, releasing and force-unlocking a lock is `engine.locks`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from engine.backend import StateBucket
from engine.errors import NotFound
from engine.keys import LOCK_FILE
from engine.schema import LockInfo, ParsedLock, parse_lock

LockState = Literal["live", "expired", "unreadable"]


@dataclass(frozen=True)
class LockView:
    """A stored lock.json as read: its ETag, raw bytes and what they parse to."""

    key: str
    etag: str
    raw: bytes
    parsed: ParsedLock
    version_id: str | None = None
    last_modified: datetime | None = None

    @property
    def info(self) -> LockInfo | None:
        """The lock object, or None when unreadable or JSON that is not an object."""
        return self.parsed.info

    @property
    def error(self) -> str | None:
        """Why the body is not JSON, or None."""
        return self.parsed.error

    @property
    def readable(self) -> bool:
        return self.parsed.info is not None

    @property
    def owner(self) -> str | None:
        """The owner string exactly as stored (None when absent or not a string)."""
        value = self.info.get("owner") if self.info is not None else None
        return value if isinstance(value, str) else None

    @property
    def operation(self) -> str | None:
        value = self.info.get("operation") if self.info is not None else None
        return value if isinstance(value, str) else None

    @property
    def timestamp_ms(self) -> int | None:
        value = self.info.get("timestamp") if self.info is not None else None
        return int(value) if _finite(value) else None

    @property
    def expires_at_ms(self) -> int | None:
        return self.parsed.expires_at_ms()

    def state(self, now_ms: int) -> LockState:
        """`unreadable` (not JSON, or JSON that is not an object), else cdkd's newer expiry
        rule: `expired` when expiresAt is not a finite number or `now >= expiresAt`."""
        if self.info is None:
            return "unreadable"
        return "expired" if self.parsed.is_expired(now_ms) else "live"

    def holder(self) -> str:
        """The owner for people: printable ASCII, or `an unnamed holder`."""
        return display_safe(self.owner) or "an unnamed holder"

    def expiry_phrase(self, now_ms: int) -> str:
        """cdkd's phrasing: `in ~Nm`, `in under a minute`, `already expired`, `at an unknown time`."""
        deadline = self.expires_at_ms
        if deadline is None:
            return "at an unknown time"
        remaining = deadline - now_ms
        if remaining <= 0:
            return "already expired"
        if remaining < 60_000:
            return "in under a minute"
        return f"in ~{max(1, round(remaining / 60_000))}m"

    def problem(self) -> str | None:
        """Why this lock cannot be read as a lock, for people; None when it can."""
        if self.error is not None:
            return f"{LOCK_FILE} cannot be read: {self.error}"
        if self.info is None:
            return f"{LOCK_FILE} holds {_json_kind(self.raw)}, not a lock object, yet it still blocks every acquire"
        return None

    def describe(self, now_ms: int | None = None) -> str:
        """One line for people: holder, operation, acquired, deadline and state."""
        now = _now_ms(time.time) if now_ms is None else now_ms
        problem = self.problem()
        if problem is not None:
            return f"unreadable lock ({problem}; ETag {self.etag})"
        parts = [f"held by {self.holder()}"]
        if self.operation is not None:
            parts.append(f"operation: {display_safe(self.operation) or '?'}")
        parts.append(f"acquired {format_ms(self.timestamp_ms)}")
        state = self.state(now)
        if self.expires_at_ms is None:
            parts.append("deadline not a finite number (counts as expired)")
        else:
            parts.append(f"deadline {format_ms(self.expires_at_ms)} ({self.expiry_phrase(now)})")
        return ", ".join(parts) + f" - {state}"


def read_lock(bucket: StateBucket, key: str) -> LockView | None:
    """The lock at `key`, or None when there is none (missing key or a delete marker).
    Other read failures raise the backend's EngineError."""
    try:
        stored = bucket.get(key)
    except NotFound:
        return None
    return LockView(
        key=key,
        etag=stored.etag,
        raw=stored.body,
        parsed=parse_lock(stored.body),
        version_id=stored.version_id,
        last_modified=stored.last_modified,
    )


def format_ms(value: int | None) -> str:
    """Epoch milliseconds as `2026-11-29 13:17:59 UTC` (`unknown` when absent)."""
    if value is None:
        return "unknown"
    try:
        return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{value} (epoch ms)"


# --- owners -------------------------------------------------------------------------------

ADMIN_OWNER_PREFIX = "cdkd-admin:"


def owner_operation(owner: Any) -> tuple[str, str] | None:
    """(person, operation id) of an owner string this app writes,
    `cdkd-admin:{person}@{host}:{operation id}`; None for any other owner (cdkd's own
    `user@host:pid`, a plan probe's `...:plan`). The host is left out on purpose: a re-run of
    the same operation on another worker host is the same holder."""
    if not isinstance(owner, str) or not owner.startswith(ADMIN_OWNER_PREFIX):
        return None
    who, sep, operation = owner[len(ADMIN_OWNER_PREFIX) :].rpartition(":")
    person, at, host = who.rpartition("@")  # a person may hold "@" (an email); a host never does
    if not sep or not at or not host or not operation or operation == "plan":
        return None
    return person, operation


def same_operation(stored: Any, ours: str) -> bool:
    """Whether a stored lock owner is this operation's: the same string, or an owner this app
    wrote for the same person and operation id (from any host). Operation ids are unique per
    operation (the pipeline adds a token to the row id), so this never matches another one."""
    if stored == ours:
        return True
    key = owner_operation(ours)
    return key is not None and owner_operation(stored) == key


# --- helpers --------------------------------------------------------------------------------


def display_safe(value: Any) -> str | None:
    """Printable ASCII only (control and non-ASCII characters become `?`), at most 200
    characters; None for a non-string or empty result (cdkd's displaySafe)."""
    if not isinstance(value, str):
        return None
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in value).strip()
    if len(cleaned) > 200:
        cleaned = cleaned[:197] + "..."
    return cleaned or None


def _json_kind(raw: bytes) -> str:
    text = raw.strip()[:1]
    return {b"n": "JSON null", b"[": "a JSON array", b'"': "a JSON string", b"t": "a JSON boolean"}.get(
        text, "a JSON boolean" if text == b"f" else "a JSON number"
    )


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)
