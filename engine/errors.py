"""The errors the engine raises. Each message names what failed and where (account,
bucket, key), in words a platform engineer can act on; none carries a traceback."""

from __future__ import annotations


class EngineError(Exception):
    """Base class: `str(exc)` is the one-line message shown to people."""


class BucketNotFound(EngineError):
    """The state bucket does not exist (or the name resolved to nothing)."""


class AccessDenied(EngineError):
    """AWS said 403 (or AssumeRole was refused): a missing permission, a wrong owner."""


class NotFound(EngineError):
    """The key, or the version of it, does not exist."""


class PreconditionFailed(EngineError):
    """A conditional write or delete lost (HTTP 412): someone else changed the object."""


class UnconfirmedWrite(EngineError):
    """A write's answer was lost and reading the key back failed too: it may have landed."""


class Throttled(EngineError):
    """AWS asked us to slow down and the SDK's retries ran out."""


class RecordRefused(EngineError):
    """The engine will not write on the strength of this record (newer schema, defects)."""
