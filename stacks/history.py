"""The S3 version history of a stack's record, for the history pages.

The views never touch boto3: they call these functions, which open the account's bucket
through the engine and return the engine's plain dataclasses. Failures come out as
`engine.errors.EngineError` subclasses whose message names the bucket, key and the missing
permission; the views show that message.
"""

from __future__ import annotations

from engine.backend import StateBucket, StoredObject, VersionInfo
from stacks.models import Stack
from stacks.records import open_bucket


def _bucket(stack: Stack, actor: str) -> StateBucket:
    return open_bucket(stack.account, actor)


def list_versions(stack: Stack, *, actor: str) -> list[VersionInfo]:
    """Every version and delete marker of the stack's `state.json` key, newest first."""
    return _bucket(stack, actor).versions(stack.key)


def get_version(stack: Stack, version_id: str, *, actor: str) -> StoredObject:
    """The stored bytes of one version of the record. Raises NotFound for a bad version id."""
    return _bucket(stack, actor).get(stack.key, version_id=version_id)
