"""Live reads of one stack's record and lock straight from its bucket (not the mirror),
for `cdkd state show` and anything else that must see what S3 holds right now."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine import schema
from engine.backend import StateBucket, StoredObject, VersionInfo
from engine.errors import EngineError, NotFound
from engine.keys import KeyKind, KeyLayout
from stacks.models import Account


class StackNotFound(EngineError):
    """No record of that stack (in that region) in the account's bucket."""


@dataclass
class LiveRecord:
    account: Account
    stack_name: str
    region: str | None
    key: str
    legacy: bool
    obj: StoredObject
    parsed: schema.ParsedRecord
    lock_key: str
    lock: StoredObject | None
    children: list[LiveRecord] = field(default_factory=list)

    def lock_json(self) -> Any:
        """The lock as `cdkd state show --json` prints it: the object, or null."""
        if self.lock is None:
            return None
        decoded = schema.decode_json(self.lock.body)  # bounded: a lock nested 10,000 deep is unreadable
        if decoded.code is not None:
            return {"unreadable": True, "raw": self.lock.body.decode("utf-8", "replace")}
        return decoded.value if isinstance(decoded.value, dict) else None

    def state_json(self) -> Any:
        """The stored record verbatim: its JSON value, or its text when it is not JSON."""
        if self.parsed.data is not None or self.obj.body.strip() == b"null":
            return self.parsed.data
        return self.obj.body.decode("utf-8", "replace")

    def as_json(self, *, nested: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state_json(), "lock": self.lock_json()}
        if nested:
            out["children"] = [child.as_json(nested=True) for child in self.children]
        return out


def open_bucket(account: Account, actor: str) -> StateBucket:
    """The account's bucket, reusing the name and region the last sync resolved."""
    if account.resolved_bucket and account.bucket_region:
        return StateBucket.open(
            account.access(), actor=actor, bucket=account.resolved_bucket, region=account.bucket_region
        )
    return StateBucket.open(account.access(), actor=actor)


RECORD_KINDS = frozenset({KeyKind.STATE, KeyKind.LEGACY_STATE})
LOCK_KINDS = frozenset({KeyKind.LOCK, KeyKind.LEGACY_LOCK})


def stack_regions(
    bucket: StateBucket, layout: KeyLayout, stack_name: str, kinds: frozenset[KeyKind] = RECORD_KINDS
) -> list[str | None]:
    """Regions holding a key of `kinds` for the stack (None for the legacy layout), sorted,
    legacy last. By default: where the stack has a record."""
    regions: set[str | None] = set()
    for info in bucket.list_objects(layout.stack_prefix(stack_name)):
        parsed = layout.parse(info.key)
        if parsed is not None and parsed.stack_name == stack_name and parsed.kind in kinds:
            regions.add(parsed.region)
    return sorted(regions, key=lambda r: (r is None, r or ""))


def _get_or_none(bucket: StateBucket, key: str) -> StoredObject | None:
    try:
        return bucket.get(key)
    except NotFound:
        return None


def read_record(
    account: Account, stack_name: str, region: str | None, *, actor: str, nested: bool = False
) -> LiveRecord:
    """The stack's record in `region` as cdkd reads it: the region-scoped key first, then the
    legacy key when its body names no region or the same one. `region=None` means "the only
    region the stack has"; several regions raise, naming them."""
    if not stack_name or "/" in stack_name:
        raise StackNotFound(f"{stack_name!r} is not a stack name cdkd can store (empty, or contains '/')")
    bucket = open_bucket(account, actor)
    layout = KeyLayout(account.prefix)
    where = f"in account {account.account_id} (bucket {bucket.name}, prefix {layout.prefix})"
    if region is None:
        regions = stack_regions(bucket, layout, stack_name)
        if not regions:
            raise StackNotFound(f"No stack {stack_name!r} {where}")
        if len(regions) > 1:
            named = ", ".join(r or "legacy" for r in regions)
            raise StackNotFound(
                f"Stack {stack_name!r} exists in several regions ({named}) {where}: pass --stack-region"
            )
        region = regions[0]
    return _read(bucket, layout, account, stack_name, region, where, nested)


def _read(bucket, layout, account, stack_name, region, where, nested) -> LiveRecord:
    obj = _get_or_none(bucket, layout.state_key(stack_name, region)) if region else None
    legacy = False
    if obj is None:
        candidate = _get_or_none(bucket, layout.legacy_state_key(stack_name))
        if candidate is not None:
            body_region = schema.parse_state(candidate.body).data
            body_region = body_region.get("region") if isinstance(body_region, dict) else None
            if region is None or not isinstance(body_region, str) or body_region == region:
                obj, legacy = candidate, True
                region = body_region if isinstance(body_region, str) else region
    if obj is None:
        raise StackNotFound(f"No stack {stack_name!r} in region {region or '(legacy)'} {where}")
    key = obj.key
    parsed = schema.parse_state(obj.body, key_region=None if legacy else region)
    lock_key = layout.lock_key(stack_name, None if legacy else region)
    record = LiveRecord(
        account=account,
        stack_name=stack_name,
        region=region,
        key=key,
        legacy=legacy,
        obj=obj,
        parsed=parsed,
        lock_key=lock_key,
        lock=_get_or_none(bucket, lock_key),
    )
    if nested and region:
        for logical_id, row in parsed.resource_rows():
            if isinstance(row, dict) and row.get("resourceType") == "AWS::CloudFormation::Stack":
                child = f"{stack_name}~{logical_id}"
                try:
                    record.children.append(_read(bucket, layout, account, child, region, where, True))
                except StackNotFound:
                    continue  # a parent row whose child record is gone: nothing to show
    return record


def record_versions(account: Account, key: str, *, actor: str) -> list[VersionInfo]:
    return open_bucket(account, actor).versions(key)
