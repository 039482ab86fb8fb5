"""Reads and writes of one state bucket. INTERFACE STUB: implemented by the AWS helper."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    etag: str  # with its double quotes, as S3 returns it
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class StoredObject:
    key: str
    body: bytes
    etag: str
    version_id: str | None
    last_modified: datetime | None


@dataclass(frozen=True)
class VersionInfo:
    key: str
    version_id: str
    last_modified: datetime
    size: int
    is_latest: bool
    delete_marker: bool
    etag: str | None


class StateBucket:
    """One account's state bucket. Every call passes ExpectedBucketOwner; errors come out as
    engine.errors types naming the bucket and key. `requests` counts S3 calls by operation."""

    name: str
    region: str
    account_id: str

    @classmethod
    def open(cls, access, *, actor: str) -> StateBucket:
        raise NotImplementedError

    def list_objects(self, prefix: str | None = None) -> Iterator[ObjectInfo]:
        raise NotImplementedError

    def get(self, key: str, *, version_id: str | None = None) -> StoredObject:
        raise NotImplementedError

    def put(
        self, key: str, body: bytes, *, if_match: str | None = None, if_none_match: bool = False,
        content_type: str = "application/json",
    ) -> StoredObject:
        raise NotImplementedError

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        raise NotImplementedError

    def versions(self, key: str) -> list[VersionInfo]:
        raise NotImplementedError
