"""`state migrate` (seed 001, "Migration path: cdkd state migrate"): copy a legacy
`cdkd-state-{account}-{region}` bucket to `cdkd-state-{account}`, as cdkd does.

Operation kind `state-migrate`; `ctx.region` is the region in the legacy name (the
operation has no stack: `ctx.stack` is ""). `params["remove_legacy"]` deletes the source
after a verified copy.

What cdkd does, and so this does:
- Copies EVERY current object of the source (state, events, the exports index, bootstrap
  markers...) byte for byte to the same key: no key layout change and no re-stamping,
  because cdkd's migrate copies objects; a legacy v1 record stays a v1 record and cdkd's
  next save of it moves it to the region-scoped key. Noncurrent versions are not copied.
- The destination is created on first run with cdkd bootstrap's hardening (versioning,
  AES-256, every public access blocked, the account-only policy); an existing one is reused.
- Refuses to start while any `lock.json` exists in the source (a deploy would race the copy).
- Re-running is idempotent: a destination key that already holds the same bytes is left.

Where this is stricter than cdkd's CopyObject: each write is `PutObject` with
`If-None-Match: *`, and a destination key that holds DIFFERENT bytes refuses the whole
migration at plan time (nothing is written) and stops it at run time. The plan's ETag is a
digest of both listings, so an approved plan whose buckets changed since is stale.
After the copy every source key is verified in the destination (present, with the ETag our
write returned, or the same bytes) before any source cleanup. `--remove-legacy` then
deletes every version and delete marker of the source and the bucket itself, only when the
source still holds exactly what was copied; otherwise the copy stands and the source stays.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from engine import aws, bucketops
from engine.aws import ResolvedBucket
from engine.backend import ObjectInfo, StateBucket
from engine.errors import BucketNotFound, NotFound, PreconditionFailed
from engine.keys import LOCK_FILE, is_region_shaped
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register

MAX_LISTED = 100  # changes shown in a plan; the counts cover the rest


@dataclass
class Survey:
    """The two buckets as they are now, and what a copy would do."""

    source: StateBucket
    destination: StateBucket
    destination_exists: bool
    objects: list[ObjectInfo]  # the source's current objects
    copy: list[str] = field(default_factory=list)  # keys absent from the destination
    same: list[str] = field(default_factory=list)  # keys the destination already holds, same bytes
    conflicts: list[str] = field(default_factory=list)  # keys the destination holds with other bytes
    destination_etags: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        state = {
            "source": [[o.key, o.etag] for o in self.objects],
            "destination": self.destination_exists,
            "destinationEtags": sorted(self.destination_etags.items()),
        }
        canonical = json.dumps(state, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def bucket_names(account_id: str, region: str) -> tuple[str, str]:
    """(legacy source, new destination)."""
    return f"cdkd-state-{account_id}-{region}", f"cdkd-state-{account_id}"


def _bucket(ctx: Context, name: str, region: str, source: str) -> StateBucket:
    return StateBucket(
        ctx.bucket.access,
        ctx.bucket.session,
        ResolvedBucket(name=name, source=source, region=region),
        ctx.bucket.requests,
    )


def survey(ctx: Context) -> Survey:
    """Read both buckets. Raises OperationRefused for a bad region, a missing source, a lock
    in the source, and destination keys with other bytes."""
    region = ctx.region or ""
    if not is_region_shaped(region):
        raise OperationRefused(f"--region {region!r} is not an AWS region name (e.g. us-east-1)")
    account = ctx.bucket.account_id
    legacy, new = bucket_names(account, region)
    try:
        source_region = aws.bucket_region(ctx.bucket.session, legacy, account)
    except (BucketNotFound, NotFound):
        raise OperationRefused(f"no legacy state bucket {legacy} in account {account}: nothing to migrate") from None
    source = _bucket(ctx, legacy, source_region, "default-legacy")
    exists = bucketops.exists(source, new)
    dest_region = aws.bucket_region(ctx.bucket.session, new, account) if exists else source_region
    destination = _bucket(ctx, new, dest_region, "default")
    objects = list(source.list_objects(prefix=""))
    locks = [o.key for o in objects if o.key.rsplit("/", 1)[-1] == LOCK_FILE]
    if locks:
        shown = ", ".join(locks[:5]) + (f" (and {len(locks) - 5} more)" if len(locks) > 5 else "")
        raise OperationRefused(
            f"{legacy} holds {len(locks)} lock(s): {shown}. A deploy or destroy may be running; wait for it, "
            "or force-unlock a stale lock first"
        )
    found = Survey(source, destination, exists, objects)
    there = {o.key: o for o in destination.list_objects(prefix="")} if exists else {}
    for obj in objects:
        existing = there.get(obj.key)
        if existing is None:
            found.copy.append(obj.key)
            continue
        found.destination_etags[obj.key] = existing.etag
        if existing.etag == obj.etag or _same_bytes(source, destination, obj.key):
            found.same.append(obj.key)
        else:
            found.conflicts.append(obj.key)
    if found.conflicts:
        shown = ", ".join(found.conflicts[:5]) + (
            f" (and {len(found.conflicts) - 5} more)" if len(found.conflicts) > 5 else ""
        )
        raise OperationRefused(
            f"{new} already holds different bytes at {len(found.conflicts)} key(s) of {legacy}: {shown}. "
            "Nothing is overwritten: compare the two and remove (or keep) one of each by hand first"
        )
    return found


def _same_bytes(source: StateBucket, destination: StateBucket, key: str) -> bool:
    # ETags differ for equal bytes under SSE-KMS or a multipart upload: compare the bytes.
    try:
        return source.get(key).body == destination.get(key).body
    except NotFound:
        return False


class StateMigrate:
    kind = "state-migrate"
    label = "State migrate"
    cancellable = False

    def plan(self, ctx: Context) -> Plan:
        found = survey(ctx)
        remove = bool(ctx.params.get("remove_legacy"))
        legacy, new = found.source.name, found.destination.name
        size = {o.key: o.size for o in found.objects}
        changes: list[Any] = []
        if not found.destination_exists:
            changes.append(
                f"create {new} in {found.destination.region}: versioning, AES-256, public access blocked, "
                "account-only policy"
            )
        changes += [f"copy {key} ({size[key]} bytes)" for key in found.copy[:MAX_LISTED]]
        if len(found.copy) > MAX_LISTED:
            changes.append(f"... and {len(found.copy) - MAX_LISTED} more key(s) to copy")
        if found.same:
            changes.append(f"keep {len(found.same)} key(s) {new} already holds with the same bytes")
        warnings = ["Only the current version of each key is copied: the source's earlier versions stay in the source."]
        if remove:
            changes.append(
                f"after the copy is verified: delete every version and delete marker of {legacy}, then {legacy}"
            )
            warnings.append(
                f"--remove-legacy deletes {legacy} with its whole version history: once removed, that history is gone."
            )
        summary = (
            f"Copy {len(found.copy)} object(s) from {legacy} to {new}"
            + (f" ({len(found.same)} already there)" if found.same else "")
            + (f", then remove {legacy}" if remove else f"; {legacy} is kept")
        )
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=found.digest,
            summary=summary,
            changes=changes,
            warnings=warnings,
            data={
                "source": legacy,
                "destination": new,
                "create_destination": not found.destination_exists,
                "remove_legacy": remove,
                "copy_count": len(found.copy),
                "same_count": len(found.same),
                "bytes": sum(size[key] for key in found.copy),
                # the keys themselves, for the request and approval pages (the counts cover the rest)
                "copy_keys": [{"key": key, "size": size[key]} for key in found.copy[:MAX_LISTED]],
                "same_keys": found.same[:MAX_LISTED],
            },
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        found = survey(ctx)
        if found.digest != plan.etag:
            raise StalePlan(f"s3://{found.source.name}", plan.etag, found.digest)
        remove = bool(plan.data.get("remove_legacy"))
        details: dict[str, Any] = {
            "source": found.source.name,
            "destination": found.destination.name,
            "created_destination": False,
            "copied": 0,
            "same": len(found.same),
            "removed_versions": 0,
            "removed_source": False,
        }
        if not found.destination_exists:
            details["created_destination"] = bucketops.create_hardened(found.destination, policy=False)
            ctx.log("info", f"created {found.destination.name} with cdkd bootstrap's hardening")
        try:
            return self._copy(ctx, found, plan, details, remove)
        finally:
            if details["created_destination"]:
                # The account-only policy goes on last, whatever the copy did: S3 honours
                # aws:PrincipalAccount, but local stand-ins (moto) deny every object write
                # under it, and nothing outside the account can reach the new bucket meanwhile
                # (every public access is blocked from its creation).
                bucketops.put_policy(found.destination)

    def _copy(self, ctx: Context, found: Survey, plan: Plan, details: dict[str, Any], remove: bool) -> Outcome:
        written: dict[str, str] = {}
        total = len(found.copy)
        for done, key in enumerate(found.copy):
            ctx.progress(done, total, None)
            body, _etag, content_type = bucketops.get_with_type(found.source, key)
            try:
                stored = found.destination.put(key, body, if_none_match=True, content_type=content_type)
            except PreconditionFailed:
                if _same_bytes(found.source, found.destination, key):
                    found.same.append(key)
                    continue
                details["copied"] = len(written)
                return Outcome(
                    status="failed" if not written else "partial",
                    summary=(
                        f"stopped: someone wrote different bytes at {key} in {found.destination.name} during the "
                        f"copy; {len(written)} object(s) copied, {found.source.name} untouched"
                    ),
                    etag_before=plan.etag,
                    details=details,
                )
            written[key] = stored.etag
        ctx.progress(total, total, None)
        details["copied"] = len(written)
        missing = _verify(found, written)
        if missing:
            return Outcome(
                status="failed",
                summary=(
                    f"copied {len(written)} object(s) but {len(missing)} key(s) do not check out in "
                    f"{found.destination.name} ({', '.join(missing[:5])}); {found.source.name} untouched"
                ),
                etag_before=plan.etag,
                details=details,
            )
        summary = (
            f"Copied {len(written)} object(s) from {found.source.name} to {found.destination.name}"
            + (f" ({len(found.same)} already there)" if found.same else "")
            + "; every key verified"
        )
        if not remove:
            return Outcome("succeeded", summary + f"; {found.source.name} kept", plan.etag, details=details)
        return _remove_source(ctx, found, plan, details, summary)


def _verify(found: Survey, written: dict[str, str]) -> list[str]:
    """Keys of the source not (or not as written) in the destination."""
    there = {o.key: o.etag for o in found.destination.list_objects(prefix="")}
    missing = []
    for obj in found.objects:
        etag = there.get(obj.key)
        if etag is None or (obj.key in written and etag != written[obj.key]):
            missing.append(obj.key)
    return missing


def _remove_source(ctx: Context, found: Survey, plan: Plan, details: dict[str, Any], summary: str) -> Outcome:
    source = found.source
    versions = list(bucketops.all_versions(source))
    current = {(v.key, v.etag) for v in versions if v.is_latest and not v.delete_marker}
    copied = {(o.key, o.etag) for o in found.objects}
    if current != copied:
        return Outcome(
            "partial",
            summary + f"; {source.name} NOT removed: it changed during the copy. Run state migrate again",
            plan.etag,
            details=details,
        )
    result = bucketops.delete_versions(source, versions)
    details["removed_versions"] = result.deleted
    if result.errors:
        return Outcome(
            "partial",
            summary + f"; removing {source.name} failed for {len(result.errors)} version(s): {result.errors[0]}",
            plan.etag,
            details=details,
            warnings=result.errors[:20],
        )
    bucketops.call(source, "DeleteBucket", "delete_bucket")
    details["removed_source"] = True
    ctx.log("info", f"deleted {result.deleted} version(s) of {source.name} and the bucket")
    return Outcome(
        "succeeded", summary + f"; removed {source.name} ({result.deleted} version(s))", plan.etag, details=details
    )


SPEC = register(StateMigrate())
