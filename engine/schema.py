"""cdkd's state.json and lock.json: lenient read, exact write.

INTERFACE STUB: implemented by the schema helper. Names and signatures below are fixed;
stacks.sync, the views and later operations rely on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUPPORTED_VERSION = 11  # the newest schema this app reads AND writes


@dataclass(frozen=True)
class Defect:
    """A damaged part of a record. `code` is stable (tests and filters use it), `path` says
    where (`resources.MyQueue.properties`), `message` says what is wrong, where, and how a
    cdkd user repairs it."""

    code: str
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "path": self.path, "message": self.message}


# Defect codes (stable strings):
#   not-json, root-not-object, version-invalid, resources-missing, resources-malformed,
#   resource-row-malformed, resource-properties-malformed, resource-attributes-malformed,
#   outputs-malformed, orphans-malformed, orphan-record-malformed, export-names-malformed
# (the helper may add more; each with a message.)


class ResourceState:  # pydantic model in the real module
    """Every ResourceState field of the seeds, unknown fields kept, key order kept."""


class StackState:  # pydantic model in the real module
    """Every StackState field of versions 1-11, unknown fields kept, key order kept."""


class LockInfo:  # pydantic model in the real module
    """owner, timestamp, expiresAt, operation (optional); unknown fields kept."""


@dataclass
class ParsedRecord:
    """What a stored state.json body is, never raising on bad input."""

    raw: bytes
    data: Any  # the decoded JSON value (None if not JSON)
    state: StackState | None  # None when the body is not a JSON object
    defects: list[Defect] = field(default_factory=list)
    version: int | None = None
    key_region: str | None = None
    body_region_kind: str | None = None  # set when the body's region disagrees with the key's

    @property
    def newer_than_supported(self) -> bool: ...
    @property
    def region_mismatch(self) -> bool: ...
    @property
    def writable(self) -> bool:
        """False when newer than SUPPORTED_VERSION or when any defect is present."""
        ...
    def resource_rows(self) -> list[tuple[str, dict[str, Any] | None]]:
        """(logicalId, row dict or None if the row is malformed) for a readable `resources`."""
        ...
    def outputs(self) -> dict[str, Any]: ...


def parse_state(body: bytes, *, key_region: str | None = None) -> ParsedRecord: ...
def dump_state(state: StackState, *, stack_name: str, region: str) -> bytes:
    """cdkd's writer: `version: 11`, stackName/region stamped from the key, 2-space indent,
    no trailing newline, unknown fields as read. Raises engine.errors.RecordRefused for a
    record newer than SUPPORTED_VERSION."""
    ...


@dataclass
class ParsedLock:
    raw: bytes
    info: LockInfo | None  # None when unreadable or a JSON null / non-object (no lock)
    error: str | None  # set when the body is not JSON (an unreadable lock)

    def expires_at_ms(self) -> int | None:
        """expiresAt as an int, or None when absent or not a finite number (counts as expired)."""
        ...
    def is_expired(self, now_ms: int) -> bool: ...


def parse_lock(body: bytes) -> ParsedLock: ...
def dump_lock(info: LockInfo) -> bytes: ...
