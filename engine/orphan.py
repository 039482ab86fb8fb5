"""Orphaning: make cdkd forget a whole record, or some resources of one. AWS is untouched.

Two operation kinds, registered with `engine.operations`:

`orphan` (cdkd's `cdkd state orphan <stack>`; reference §6.1, §10.3, §10.7, E6/E8)
  Deletes, in this order: `create-tokens.json` (always issued, even when absent, because S3
  checks the permission first and a failure must stop before the record is touched;
  `If-Match` on the ledger read under the lock, or "only while absent"), then
  `state.json` with `If-Match` on the plan's ETag (412 -> StalePlan), then the legacy
  `{prefix}/{stack}/state.json` where it belongs to this record (its body's region equals
  the requested one, cdkd's `deleteState` test; with no region the legacy key IS the
  record, which newer cdkd deletes and the snapshot forgot, E8), then the rollback journal
  and its noncurrent versions (its bodies may hold attempted secrets). `deployments/`,
  the exports index and other stacks' imports stay.
  It reads `resources` nowhere, so a damaged record can be orphaned: this is the documented
  way out of one. A record whose `version` is NEWER than 11 is refused: the app never
  writes such a record (DESIGN), and a newer cdkd may keep sibling files that must go
  before `state.json` which this app cannot know about (as `create-tokens.json` once was);
  the newer cdkd's own `cdkd state orphan` is the way out.
  Lock: held for the run (`ctx.held_lock("orphan")`). A live foreign lock refuses unless
  `params["force"]`; forced, the app does not try to acquire it and, as cdkd does, removes
  that lock at the end, conditional on the ETag it saw.

`orphan-resources` (cdkd's `cdkd state orphan <stack> --resource <id>`; §6.2, §10.7)
  Removes `params["resources"]` (logical ids) and rewrites every reference to them
  (`engine.rewrite`). Refuses records newer than 11 and damage in what it would keep
  (surviving rows, the resources container, outputs, orphans); unresolvable references
  refuse unless `params["force"]`. Under the lock: re-read (ETag must equal the plan's),
  recompute (must equal the plan), rotate the create-token ledger (new nonce, the orphaned
  ids' `sent` entries dropped, `If-Match`; a failure stops before the record is saved),
  drop `skippedOutputs`, refresh `lastModified`, save through `dump_state` with `If-Match`.
  Region-scoped records only: a legacy record must be migrated (any cdkd deploy) first.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from engine.backend import StoredObject
from engine.errors import EngineError, NotFound, PreconditionFailed, RecordRefused
from engine.locks import purge_lock_versions, read_lock, same_operation
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register
from engine.rewrite import UnresolvedReferences, rewrite_references
from engine.schema import (
    SUPPORTED_VERSION,
    StackState,
    dump_state,
    js_stringify,
    parse_state,
    version_line,
    write_version,
)

AWS_UNTOUCHED = "The AWS resources are NOT deleted or changed: they stay live, and cdkd stops tracking them."
LEDGER_VERSION = 1


def _read(ctx: Context, key: str) -> StoredObject | None:
    try:
        return ctx.bucket.get(key)
    except NotFound:
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _body_version_newer(body: bytes) -> int | None:
    """The body's `version` when newer than SUPPORTED_VERSION, else None (a body that is
    not JSON has no version to be newer by). Reads nothing else of the record."""
    parsed = parse_state(body)
    return parsed.version if parsed.newer_than_supported else None


def _legacy_region(body: bytes) -> tuple[bool, str | None]:
    """(readable, region) of a legacy body: its `region` when a string, else None."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(data, dict):
        return False, None
    region = data.get("region")
    return True, region if isinstance(region, str) else None


# --- the lock as this operation sees it ------------------------------------------------------


def foreign_lock(ctx: Context) -> dict[str, Any] | None:
    """The stack's lock when someone else holds it live, as plan data; None otherwise.

    Live = not expired by `expiresAt` (newer cdkd rule), or unreadable (cannot tell; it
    blocks every acquire all the same, and cdkd's `warnOnLiveForeignLock` treats an
    unreadable expiry as live). Our own lock (this operation's, `same_operation`) is not foreign; an expired
    one is not either: `held_lock` takes it over with a warning.
    """
    view = read_lock(ctx.bucket, ctx.layout.lock_key(ctx.stack, ctx.region))
    if view is None or same_operation(view.owner, ctx.lock_owner):
        return None
    now = _now_ms()
    if view.state(now) == "expired":
        return None
    return {
        "key": view.key,
        "etag": view.etag,
        "owner": view.owner,
        "operation": view.operation,
        "expiresAt": view.expires_at_ms,
        "description": view.describe(now),
    }


def _describe_lock(lock: dict[str, Any]) -> str:
    return f"the lock {lock['key']} is {lock['description']}"


# --- orphan a whole record ----------------------------------------------------------------


class OrphanRecord:
    kind = "orphan"
    label = "Orphan record"
    cancellable = False

    def _targets(self, ctx: Context) -> tuple[list[dict[str, Any]], list[str]]:
        """The state objects to delete ({key, etag, legacy}) and notes about what is left."""
        targets: list[dict[str, Any]] = []
        notes: list[str] = []
        legacy_key = ctx.layout.legacy_state_key(ctx.stack)
        if ctx.region is not None:
            key = ctx.layout.state_key(ctx.stack, ctx.region)
            current = _read(ctx, key)
            if current is not None:
                targets.append({"key": key, "etag": current.etag, "legacy": False, "body": current.body})
        legacy = _read(ctx, legacy_key)
        if legacy is not None:
            readable, body_region = _legacy_region(legacy.body)
            if ctx.region is None or (readable and body_region == ctx.region):
                targets.append({"key": legacy_key, "etag": legacy.etag, "legacy": True, "body": legacy.body})
            elif not readable or body_region is None:
                notes.append(
                    f"{legacy_key} (a legacy record naming no region) is a separate record and stays; "
                    f"orphan it without a region"
                )
            else:
                notes.append(f"{legacy_key} belongs to region {body_region} and stays")
        return targets, notes

    def plan(self, ctx: Context) -> Plan:
        targets, notes = self._targets(ctx)
        where = f"{ctx.stack} ({ctx.region or 'legacy, no region'})"
        if not targets:
            raise OperationRefused(f"no state record for {where}: nothing to orphan")
        for target in targets:
            newer = _body_version_newer(target["body"])
            if newer is not None:
                raise OperationRefused(
                    f"{target['key']} has schema version {newer}, newer than the {SUPPORTED_VERSION} this app "
                    f"knows; it is read-only here (a newer cdkd may keep files that must go first). Use that "
                    f"cdkd's `cdkd state orphan`, or upgrade cdkd Admin."
                )
        changes: list[str] = []
        keys: list[str] = []
        if ctx.region is not None:
            tokens = ctx.layout.create_tokens_key(ctx.stack, ctx.region)
            keys.append(tokens)
            changes.append(f"delete {tokens} (the create-token ledger; issued even when absent, first)")
        for target in targets:
            keys.append(target["key"])
            label = "the legacy record" if target["legacy"] else "the record"
            changes.append(f"delete {target['key']} ({label}; only if its ETag is still {target['etag']})")
        journal_versions = 0
        if ctx.region is not None:
            journal = ctx.layout.rollback_journal_key(ctx.stack, ctx.region)
            journal_versions = len(ctx.bucket.versions(journal))
            keys.append(journal)
            changes.append(
                f"delete {journal} (the rollback journal) and purge its noncurrent versions "
                f"({journal_versions} version(s) stored)"
            )
        warnings = list(notes)
        lock = foreign_lock(ctx)
        if lock is not None:
            if ctx.params.get("force"):
                warnings.append(
                    f"Forced past {_describe_lock(lock)}: the lock is not acquired, and is removed after the "
                    f"record (only if its ETag is still {lock['etag']})."
                )
                changes.append(f"remove the lock {lock['key']} (forced)")
            else:
                warnings.append(f"{_describe_lock(lock)}: the run refuses unless forced.")
        if ctx.region is not None:
            changes.append(f"keep {ctx.layout.events_prefix(ctx.stack, ctx.region)} (event history stays)")
        summary = (
            f"Forget the cdkd state record of {where}: delete its state.json, create-token ledger and rollback "
            f"journal. Event history stays. {AWS_UNTOUCHED}"
        )
        primary = targets[0]
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=primary["etag"],
            summary=summary,
            changes=changes,
            warnings=warnings,
            data={
                "keys": keys,
                "targets": [{"key": t["key"], "etag": t["etag"], "legacy": t["legacy"]} for t in targets],
                "foreign_lock": lock,
                "force": bool(ctx.params.get("force")),
            },
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        lock = foreign_lock(ctx)
        if lock is not None:
            if not ctx.params.get("force"):
                raise OperationRefused(
                    f"{ctx.stack} ({ctx.region or 'legacy'}) is locked: {_describe_lock(lock)}; wait for it, "
                    f"force-unlock it, or orphan with force"
                )
            planned = plan.data.get("foreign_lock") or {}
            if planned.get("etag") != lock["etag"]:
                # Force overrides the lock the approver saw, not one that appeared since.
                raise StalePlan(lock["key"], planned.get("etag"), lock["etag"])
            outcome = self._delete_all(ctx, plan)
            try:
                ctx.bucket.delete(lock["key"], if_match=lock["etag"])
                ctx.log("info", f"removed the lock {lock['key']} held by {lock['owner']!r}")
            except PreconditionFailed:
                outcome.warnings.append(f"the lock {lock['key']} changed meanwhile and was left in place")
                outcome.status = "partial"
                return outcome
            except EngineError as exc:
                outcome.warnings.append(f"could not remove the lock {lock['key']}: {exc}")
                outcome.status = "partial"
                return outcome
            _, failure = purge_lock_versions(ctx.bucket, lock["key"])  # as force-unlock does; soft
            if failure:
                outcome.warnings.append(failure)
            return outcome
        with ctx.held_lock("orphan"):
            return self._delete_all(ctx, plan)

    def _delete_all(self, ctx: Context, plan: Plan) -> Outcome:
        targets = plan.data["targets"]
        for target in targets:  # nothing is deleted unless every record is as planned
            current = _read(ctx, target["key"])
            found = current.etag if current is not None else None
            if found != target["etag"]:
                raise StalePlan(target["key"], target["etag"], found)
        total = len(plan.data["keys"])
        done = 0
        if ctx.region is not None:
            tokens = ctx.layout.create_tokens_key(ctx.stack, ctx.region)
            # Conditional on the ledger read now (or on its absence); a failure (e.g.
            # AccessDenied) propagates here: the record has not been touched.
            try:
                ctx.bucket.delete_current(tokens)
            except PreconditionFailed:
                raise OperationRefused(
                    f"{tokens} was written by someone else between reading and deleting it; nothing was deleted. "
                    f"Compute a new plan"
                ) from None
            done += 1
            ctx.progress(done, total, {"deleted": tokens})
            ctx.log("info", f"deleted {tokens}")
        for target in targets:
            try:
                ctx.bucket.delete(target["key"], if_match=target["etag"])  # our lost answer is read back
            except (PreconditionFailed, NotFound):
                raise StalePlan(target["key"], target["etag"], _etag_now(ctx, target["key"])) from None
            done += 1
            ctx.progress(done, total, {"deleted": target["key"]})
            ctx.log("info", f"deleted {target['key']}")
        warnings: list[str] = []
        status = "succeeded"
        if ctx.region is not None:
            journal = ctx.layout.rollback_journal_key(ctx.stack, ctx.region)
            try:
                versions = ctx.bucket.versions(journal)
                if any(v.is_latest and not v.delete_marker for v in versions):
                    ctx.bucket.delete(journal)  # the writer holds the lock; no condition is needed
                purged = ctx.bucket.purge_noncurrent([journal])
                ctx.log("info", f"deleted {journal} and purged {len(purged)} noncurrent version(s)")
            except EngineError as exc:
                # The record is already gone: report, do not pretend it failed as a whole.
                warnings.append(f"the rollback journal {journal} was not fully removed: {exc}")
                status = "partial"
            done += 1
            ctx.progress(done, total, {"deleted": journal})
        return Outcome(
            status=status,
            summary=f"Orphaned the record of {ctx.stack} ({ctx.region or 'legacy'}). {AWS_UNTOUCHED}",
            etag_before=plan.etag,
            etag_after=None,
            details={"deleted": plan.data["keys"]},
            warnings=warnings,
        )


def _etag_now(ctx: Context, key: str) -> str | None:
    current = _read(ctx, key)
    return current.etag if current is not None else None


# --- orphan resources -----------------------------------------------------------------------


def _scoped_defects(parsed: Any, orphaned: set[str]) -> list[str]:
    """Blocking defects outside the rows being orphaned (seed 000: only what would be KEPT)."""
    kept = []
    for defect in parsed.defects:
        path = defect.path
        if any(path == f"resources.{lid}" or path.startswith(f"resources.{lid}.") for lid in orphaned):
            continue
        kept.append(f"{path or '(root)'}: {defect.code}")
    return kept


class OrphanResources:
    kind = "orphan-resources"
    label = "Orphan resources"
    cancellable = False

    def _key(self, ctx: Context) -> str:
        if ctx.region is None:
            raise OperationRefused(
                "orphaning single resources needs a region-scoped record; a legacy record must be migrated by a "
                "cdkd deploy first, or orphaned as a whole"
            )
        return ctx.layout.state_key(ctx.stack, ctx.region)

    def _ids(self, ctx: Context) -> list[str]:
        ids = ctx.params.get("resources") or []
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
            raise OperationRefused("name at least one resource (logical id) to orphan")
        return list(dict.fromkeys(ids))

    def _compute(self, ctx: Context, stored: StoredObject, ids: list[str]) -> tuple[Any, Any]:
        """(parsed record, RewriteResult); refusals as OperationRefused."""
        parsed = parse_state(stored.body, key_region=ctx.region, stack_name=ctx.stack)
        if parsed.newer_than_supported:
            raise OperationRefused(
                f"{stored.key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this app "
                f"writes; it is read-only here"
            )
        if not isinstance(parsed.data, dict) or not isinstance(parsed.data.get("resources"), dict):
            listed = "; ".join(f"{d.path or '(root)'}: {d.code}" for d in parsed.defects)
            raise OperationRefused(f"{stored.key} cannot be read ({listed}); orphan the whole record instead")
        missing = [i for i in ids if i not in parsed.data["resources"]]
        if missing:
            raise OperationRefused(f"not in {ctx.stack} ({ctx.region}): {', '.join(missing)}")
        damaged = _scoped_defects(parsed, set(ids))
        if damaged:
            raise OperationRefused(
                f"{stored.key} is damaged in parts this would keep ({'; '.join(damaged)}); repair it by hand, "
                f"orphan the whole record, or orphan the damaged resources too"
            )
        try:
            result = rewrite_references(parsed.data, ids, force=bool(ctx.params.get("force")))
        except UnresolvedReferences as exc:
            raise OperationRefused(str(exc)) from None
        return parsed, result

    def _ledger(self, ctx: Context) -> tuple[StoredObject | None, dict[str, Any] | None]:
        """The create-token ledger and its decoded body; refuses one it must not overwrite."""
        key = ctx.layout.create_tokens_key(ctx.stack, ctx.region or "")
        stored = _read(ctx, key)
        if stored is None:
            return None, None
        try:
            doc = json.loads(stored.body)
        except (ValueError, RecursionError):
            doc = None
        version = doc.get("ledgerVersion") if isinstance(doc, dict) else None
        if isinstance(version, int | float) and not isinstance(version, bool) and version > LEDGER_VERSION:
            raise OperationRefused(
                f"{key} has ledgerVersion {version}, newer than this app knows; it is never overwritten"
            )
        if (
            not isinstance(doc, dict)
            or version != LEDGER_VERSION
            or not isinstance(doc.get("nonce"), str)
            or not doc["nonce"]
            or ("sent" in doc and not isinstance(doc["sent"], dict))
        ):
            raise OperationRefused(
                f"{key} (the create-token ledger) is unreadable, so its nonce cannot be rotated; cdkd never "
                f"overwrites such a ledger. Repair or delete it by hand first"
            )
        return stored, doc

    def plan(self, ctx: Context) -> Plan:
        key = self._key(ctx)
        ids = self._ids(ctx)
        stored = _read(ctx, key)
        if stored is None:
            raise OperationRefused(f"no state record at {key}")
        parsed, result = self._compute(ctx, stored, ids)
        ledger, doc = self._ledger(ctx)
        resources = parsed.data["resources"]
        changes = [
            f"remove {lid} ({_row_label(resources[lid])}) from the record; its AWS resource stays" for lid in ids
        ]
        changes += result.lines()
        warnings = [
            f"kept as written (unresolvable): {u['logicalId']}.{u['path']}: {u['reference']} ({u['reason']})"
            for u in result.unresolved
        ]
        if ledger is not None:
            dropped = [lid for lid in ids if lid in (doc or {}).get("sent", {})]
            changes.append(
                f"rotate the create-token nonce in {ledger.key}"
                + (f" and drop the sent entries of {', '.join(dropped)}" if dropped else "")
            )
        if "skippedOutputs" in parsed.data:
            changes.append("drop skippedOutputs (every save outside a deploy does)")
        version = write_version(result.state)
        changes.append(version_line(parsed.version, version))
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=stored.etag,
            summary=(
                f"Remove {len(ids)} resource(s) from the state record of {ctx.stack} ({ctx.region}) and rewrite "
                f"{len(result.rewrites)} reference(s) to them. {AWS_UNTOUCHED}"
            ),
            changes=changes,
            warnings=warnings,
            data={
                "resources": ids,
                "rewrites": result.rewrites,
                "unresolved": result.unresolved,
                "force": bool(ctx.params.get("force")),
                "ledger_etag": ledger.etag if ledger is not None else None,
                "schema_version": version,
            },
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        key = self._key(ctx)
        ids = self._ids(ctx)
        with ctx.held_lock("orphan"):
            stored = _read(ctx, key)
            found = stored.etag if stored is not None else None
            if stored is None or found != plan.etag:
                raise StalePlan(key, plan.etag, found)
            _, result = self._compute(ctx, stored, ids)
            if result.rewrites != plan.data.get("rewrites") or result.unresolved != plan.data.get("unresolved"):
                raise OperationRefused("the rewrite computed now differs from the plan; compute a new plan")
            ledger, doc = self._ledger(ctx)
            if ledger is not None and doc is not None:
                sent = doc.get("sent")
                doc["nonce"] = secrets.token_hex(16)  # 32 hex characters, like cdkd's
                if isinstance(sent, dict):
                    doc["sent"] = {k: v for k, v in sent.items() if k not in ids}
                # A failure stops here, before the record is saved (seed 000: ledger first).
                ctx.bucket.put(ledger.key, js_stringify(doc, indent=2).encode(), if_match=ledger.etag)
                ctx.log("info", f"rotated the create-token nonce in {ledger.key}")
            state = StackState.model_validate(result.state)
            state.discard("skippedOutputs")
            state.set("lastModified", _now_ms())
            try:
                body = dump_state(state, stack_name=ctx.stack, region=ctx.region or "")
            except RecordRefused as exc:
                raise OperationRefused(str(exc)) from None
            try:
                written = ctx.bucket.put(key, body, if_match=plan.etag)
            except (PreconditionFailed, NotFound):
                raise StalePlan(key, plan.etag, _etag_now(ctx, key)) from None
            ctx.log("info", f"saved {key} without {', '.join(ids)}")
        return Outcome(
            status="succeeded",
            summary=f"Orphaned {', '.join(ids)} from {ctx.stack} ({ctx.region}). {AWS_UNTOUCHED}",
            etag_before=plan.etag,
            etag_after=written.etag,
            details={"removed": ids, "rewrites": len(result.rewrites), "unresolved": result.unresolved},
        )


def _row_label(row: Any) -> str:
    if not isinstance(row, dict):
        return "unreadable record"
    return f"{row.get('resourceType')}, physical id {row.get('physicalId')!r}"


register(OrphanRecord())
register(OrphanResources())
