"""The rollback journal and its executor, in cdkd's shapes (deploy-engine.md 4.1-4.4; seed 000
"Rollback journal").

Key `{prefix}/{stack}/{region}/rollback-journal.json`, written under the stack's lock with
no ETag protocol (cdkd's writer does the same; the lock is the exclusion), 2-space JSON:

    {"journalVersion": 1, "stackName", "region", "segments": [
      {"runId"?, "timestamp", "reason", "initialDeploy", "cdkdVersion",
       "operations": [{"logicalId", "changeType", "resourceType", "provisionedBy",
                       "previousState"?, "physicalId", "properties",
                       "oldResourceRetained"? (UPDATE), "previousResourceType"? (UPDATE)}],
       "failedOperations": [{"logicalId", "changeType", "resourceType", "provisionedBy",
                             "previousState"?, "physicalId"?, "attemptedProperties"?}]}]}

`reason` is one of `no-rollback-failure`, `interrupted`, `auto-rollback-started`,
`auto-rollback-clean`; segments run oldest to newest; a segment with no completed and no
failed op is never written; a journal whose `journalVersion` is above 1 is refused.

The executor (4.3), shared by the automatic rollback and `finish_rollback` (cdkd's
`rollback`): sequential; every non-CREATE op newest first, then the CREATE ops so that a
resource goes before the resources it depends on; each op classified against the CURRENT
rows (a CREATE whose row is gone is already done, one whose physical id moved is skipped
with `skip-mismatch`, `Retain` keeps the AWS resource and drops the row; an in-place UPDATE
is reverted by a provider update back to `previousState.properties`; a replacement is
undone by deleting the new resource and restoring the old row, re-creating the old
resource first unless the deploy kept it alive; a DELETE cannot be undone:
`unrecoverable-delete`). The failed op itself is not touched by the automatic rollback.

`finish_rollback` takes cdkd's two `rollback` options: `orphan` (a logical id left in AWS:
a CREATE's row is dropped, an UPDATE keeps its row) and `revert_failed` (each segment's
failed ops first: a failed UPDATE is forced back to `previousState` with its
`attemptedProperties` as the current side, since the write may have landed; a failed CREATE
that recorded a physical id is deleted unless `Retain`; a failed DELETE needs nothing).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError, NotFound, PreconditionFailed
from engine.events import DEFAULT_CDKD_VERSION
from engine.operations import Context, OperationRefused
from engine.providers import Clients, Skip, deploy_provider_for
from engine.providers.base import DeployTarget, ProviderError, ResourceRef
from engine.schema import SUPPORTED_VERSION, StackState, dump_state, js_stringify, parse_state

JOURNAL_VERSION = 1
RETAIN = frozenset({"Retain", "RetainExceptOnCreate"})
NOT_AN_ATTEMPT = frozenset({"AlreadyExists", "NAMED_REPLACEMENT_COLLISION", "NAMED_REPLACEMENT_IDEMPOTENT_CREATE"})
REASONS = frozenset({"no-rollback-failure", "interrupted", "auto-rollback-started", "auto-rollback-clean"})


def _now_ms() -> int:
    return int(time.time() * 1000)


def _change_type(action: str) -> str:
    return {"create": "CREATE", "delete": "DELETE"}.get(action, "UPDATE")


def segment_from_run(run: Any, *, reason: str, initial_deploy: bool) -> dict[str, Any]:
    """The segment of a failed run: its completed operations (in completion order) and the
    operations that failed."""
    assert reason in REASONS
    operations: list[dict[str, Any]] = []
    for op in run.completed:
        change = _change_type(op.action)
        row = op.row if op.row is not None else (op.previous or {})
        entry: dict[str, Any] = {
            "logicalId": op.logical_id,
            "changeType": change,
            "resourceType": op.resource_type,
            "provisionedBy": row.get("provisionedBy") or "sdk",
        }
        if op.previous is not None and change != "CREATE":
            entry["previousState"] = op.previous
        entry["physicalId"] = row.get("physicalId")
        entry["properties"] = row.get("properties") or {}
        if change == "UPDATE":
            entry["oldResourceRetained"] = bool(op.old_retained)
            if op.previous is not None:
                entry["previousResourceType"] = op.previous.get("resourceType")
        operations.append(entry)
    failed: list[dict[str, Any]] = []
    for op in run.failed:
        change = _change_type(op.action)
        entry = {
            "logicalId": op.logical_id,
            "changeType": change,
            "resourceType": op.resource_type,
            "provisionedBy": (op.previous or {}).get("provisionedBy") or "sdk",
        }
        if op.previous is not None:
            entry["previousState"] = op.previous
            entry["physicalId"] = op.previous.get("physicalId")
        # seed 000: a failed op refused because the resource it met belongs to someone else
        # is recorded without attempted properties, so it is never read back as an attempt;
        # any other failed write keeps them (it may have landed)
        code = getattr(op.error, "aws_code", None)
        if code not in NOT_AN_ATTEMPT:
            entry["attemptedProperties"] = op.attempted or {}
        failed.append(entry)
    segment: dict[str, Any] = {}
    run_id = getattr(getattr(run, "recorder", None), "run_id", None)
    if run_id:
        segment["runId"] = run_id
    segment["timestamp"] = _now_ms()
    segment["reason"] = reason
    segment["initialDeploy"] = initial_deploy
    segment["cdkdVersion"] = DEFAULT_CDKD_VERSION
    segment["operations"] = operations
    segment["failedOperations"] = failed
    return segment


# --- the journal object ---------------------------------------------------------------------


def journal_key(ctx: Context, region: str) -> str:
    return ctx.layout.rollback_journal_key(ctx.stack, region)


def read_journal(ctx: Context, region: str) -> dict[str, Any] | None:
    try:
        stored = ctx.bucket.get(journal_key(ctx, region))
    except NotFound:
        return None
    try:
        data = json.loads(stored.body)
    except ValueError:
        raise OperationRefused(f"{journal_key(ctx, region)} is not valid JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise OperationRefused(f"{journal_key(ctx, region)} has no segments list")
    version = data.get("journalVersion")
    if isinstance(version, int) and version > JOURNAL_VERSION:
        raise OperationRefused(
            f"{journal_key(ctx, region)} has journalVersion {version}, newer than this admin reads; upgrade it"
        )
    return data


def write_journal(ctx: Context, region: str, journal: dict[str, Any]) -> bool:
    body = js_stringify(journal, indent=2).encode("utf-8", errors="backslashreplace")
    try:
        ctx.bucket.put(journal_key(ctx, region), body)
        return True
    except EngineError as exc:
        ctx.log("warning", f"the rollback journal could not be written ({exc})")
        return False


def append_segment(ctx: Context, region: str, segment: dict[str, Any]) -> bool:
    if not segment["operations"] and not segment["failedOperations"]:
        return False  # cdkd never writes an empty segment
    try:
        journal = read_journal(ctx, region)
    except OperationRefused as exc:
        ctx.log("warning", f"{exc}; a new journal is written")
        journal = None
    if journal is None:
        journal = {"journalVersion": JOURNAL_VERSION, "stackName": ctx.stack, "region": region, "segments": []}
    journal["segments"].append(segment)
    return write_journal(ctx, region, journal)


def delete_journal(ctx: Context, region: str) -> None:
    """After a successful deploy or a clean rollback: the journal and its noncurrent versions."""
    key = journal_key(ctx, region)
    try:
        ctx.bucket.get(key)
    except NotFound:
        return
    except EngineError:
        pass
    try:
        ctx.bucket.delete(key)
        ctx.bucket.purge_noncurrent([key])
    except EngineError as exc:
        ctx.log("warning", f"the rollback journal {key} could not be removed completely ({exc})")


# --- the executor ---------------------------------------------------------------------------


@dataclass
class RollbackReport:
    reverted: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # "<logicalId>: <code> ..."
    failures: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)  # left in AWS on request (--orphan)

    def as_dict(self) -> dict[str, Any]:
        return {
            "reverted": self.reverted,
            "already": self.already,
            "orphaned": self.orphaned,
            "warnings": self.warnings,
            "failures": self.failures,
        }


def _order(operations: list[dict[str, Any]], rows: dict[str, Any]) -> list[dict[str, Any]]:
    """Non-CREATE ops newest first, then CREATE ops dependents first."""
    others = [op for op in operations if op.get("changeType") != "CREATE"][::-1]
    creates = [op for op in operations if op.get("changeType") == "CREATE"]
    ids = {op.get("logicalId") for op in creates}
    deps = {
        op.get("logicalId"): {
            d
            for d in ((rows.get(op.get("logicalId")) or {}).get("dependencies") or op.get("dependencies") or [])
            if d in ids
        }
        for op in creates
    }
    ordered: list[dict[str, Any]] = []
    remaining = list(creates)
    while remaining:
        # a create goes once nothing left depends on it
        level = [op for op in remaining if not any(op.get("logicalId") in deps[o.get("logicalId")] for o in remaining)]
        if not level:
            level = remaining[::-1]  # a cycle: newest first
        ordered.extend(level[::-1])
        remaining = [op for op in remaining if op not in level]
    return others + ordered


class Executor:
    """Replays journal operations against `rows` (mutated), saving through `save()`."""

    def __init__(
        self,
        *,
        rows: dict[str, Any],
        clients: Any,
        target: DeployTarget,
        save: Any,
        provider_for: Any = deploy_provider_for,
        log: Any = lambda level, message: None,
        event: Any = None,
        orphan: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        self.orphan = frozenset(orphan)
        self.event = event  # (event_type, **fields) -> None: cdkd's ROLLBACK_RESOURCE_* events
        self.rows = rows
        self.clients = clients
        self.target = target
        self.save = save
        self.provider_for = provider_for
        self.log = log

    def _ref(self, lid: str, state: dict[str, Any]) -> ResourceRef:
        return ResourceRef(
            logical_id=lid,
            resource_type=str(state.get("resourceType")),
            physical_id=state.get("physicalId"),
            properties=dict(state.get("properties") or {}),
            attributes=dict(state.get("attributes") or {}),
            region=self.target.region,
            account_id=self.target.account_id,
            provisioned_by=state.get("provisionedBy"),
        )

    def replay(self, operations: list[dict[str, Any]], failed: list[dict[str, Any]] = ()) -> RollbackReport:  # type: ignore[assignment]
        """`failed`: the segment's failed ops to revert first (`--revert-failed`)."""
        report = RollbackReport()
        todo = [(op, True) for op in reversed(list(failed))] + [(op, False) for op in _order(operations, self.rows)]
        for op, was_failed in todo:
            if not isinstance(op, dict):
                continue
            lid = str(op.get("logicalId"))
            fields = {
                "operation": op.get("changeType"),
                "logicalId": lid,
                "resourceType": op.get("resourceType"),
                "provisionedBy": op.get("provisionedBy"),
            }
            try:
                changed = self._failed(op, report) if was_failed else self._one(op, report)
            except (ProviderError, Skip, EngineError) as exc:
                report.failures.append(f"{lid}: {exc}")
                self.log("error", f"rollback of {lid} failed: {exc}")
                if self.event:
                    self.event("ROLLBACK_RESOURCE_FAILED", error=exc, **fields)
                continue
            if changed:
                self.save()
                if self.event:
                    self.event("ROLLBACK_RESOURCE_SUCCEEDED", physicalId=op.get("physicalId"), **fields)
        return report

    def _one(self, op: dict[str, Any], report: RollbackReport) -> bool:
        lid = str(op.get("logicalId"))
        change = op.get("changeType")
        row = self.rows.get(lid)
        if change == "DELETE":
            report.warnings.append(f"{lid}: unrecoverable-delete (a deleted resource cannot be restored)")
            return False
        if lid in self.orphan:
            report.orphaned.append(lid)
            if change == "CREATE" and row is not None:
                del self.rows[lid]  # left in AWS, no longer tracked
                return True
            return False  # an UPDATE keeps its row
        if change == "CREATE":
            if row is None:
                report.already.append(lid)
                return False
            if row.get("physicalId") != op.get("physicalId"):
                report.warnings.append(f"{lid}: skip-mismatch (the record now holds {row.get('physicalId')})")
                return False
            if row.get("deletionPolicy") not in RETAIN:
                provider = self.provider_for(str(row.get("resourceType")), row.get("provisionedBy"))
                provider.delete(self.clients, self._ref(lid, row))
            del self.rows[lid]
            report.reverted.append(lid)
            return True
        previous = op.get("previousState")
        if not isinstance(previous, dict):
            report.warnings.append(f"{lid}: no previous state in the journal; left as it is")
            return False
        if row is None:
            report.warnings.append(f"{lid}: the record no longer holds it; left as it is")
            return False
        replaced = op.get("physicalId") != previous.get("physicalId")
        if not replaced:
            if row.get("properties") == previous.get("properties"):
                report.already.append(lid)
                return False
            provider = self.provider_for(str(row.get("resourceType")), row.get("provisionedBy"))
            provider.update(self.clients, self._ref(lid, row), dict(previous.get("properties") or {}), self.target)
            self.rows[lid] = previous
            report.reverted.append(lid)
            return True
        if row.get("physicalId") == previous.get("physicalId"):
            report.already.append(lid)
            return False
        restored = dict(previous)
        if not op.get("oldResourceRetained"):
            old_type = str(op.get("previousResourceType") or previous.get("resourceType"))
            creator = self.provider_for(old_type, None)
            made = creator.create(self.clients, lid, old_type, dict(previous.get("properties") or {}), self.target)
            restored["physicalId"] = made.physical_id
            if made.attributes is not None:
                restored["attributes"] = made.attributes
            report.warnings.append(f"{lid}: reverse-replacement (the old resource was re-created; its data is gone)")
        new_provider = self.provider_for(str(row.get("resourceType")), row.get("provisionedBy"))
        new_provider.delete(self.clients, self._ref(lid, row))
        self.rows[lid] = restored
        report.reverted.append(lid)
        return True

    def _failed(self, op: dict[str, Any], report: RollbackReport) -> bool:
        """A failed op of the journal (`--revert-failed`): its write may have landed."""
        lid = str(op.get("logicalId"))
        change = op.get("changeType")
        row = self.rows.get(lid)
        if change == "DELETE":
            return False  # the resource is still there, or it is gone: nothing to undo either way
        if lid in self.orphan:
            report.orphaned.append(lid)
            return False
        if change == "CREATE":
            pid = op.get("physicalId")
            if not pid:
                report.already.append(lid)  # nothing was recorded as made
                return False
            state = row if row is not None and row.get("physicalId") == pid else {**op, "properties": {}}
            if state.get("deletionPolicy") not in RETAIN:
                provider = self.provider_for(str(op.get("resourceType")), op.get("provisionedBy"))
                provider.delete(self.clients, self._ref(lid, state))
            if row is not None and row.get("physicalId") == pid:
                del self.rows[lid]
            report.reverted.append(lid)
            return True
        previous = op.get("previousState")
        if not isinstance(previous, dict) or "attemptedProperties" not in op:
            report.warnings.append(f"{lid}: the failed update recorded no previous state or attempt; left as it is")
            return False
        # forced back: the attempted bag is what AWS may hold now, the previous one what it held
        current = dict(previous, properties=dict(op.get("attemptedProperties") or {}))
        provider = self.provider_for(str(previous.get("resourceType")), previous.get("provisionedBy"))
        provider.update(self.clients, self._ref(lid, current), dict(previous.get("properties") or {}), self.target)
        self.rows[lid] = previous
        report.reverted.append(lid)
        return True


def roll_back_run(run: Any, segment: dict[str, Any], *, journal_written: bool) -> dict[str, Any]:
    """The automatic rollback of a failed deploy (4.1 step 4-6): replay the segment's
    completed ops, the post-rollback save, then settle the journal: a clean rollback pops its
    segment (pushing a failed-only `auto-rollback-clean` one when ops failed); the journal is
    deleted when nothing is left in it."""
    ctx = run.ctx
    recorder = getattr(run, "recorder", None)
    event = recorder.record if recorder is not None else None
    executor = Executor(
        rows=run.rows,
        clients=run.clients,
        target=run.target,
        save=lambda: run.save(what="rollback"),
        provider_for=run.d.provider_for,
        log=ctx.log,
        event=event,
    )
    if event:
        event("ROLLBACK_STARTED")
    report = executor.replay(segment["operations"])
    if event:
        event("ROLLBACK_FINISHED")
    saved = run.save(what="post-rollback")
    if journal_written and not report.failures and saved:
        journal = read_journal(ctx, run.region) or {"segments": []}
        segments = [s for s in journal["segments"] if s != segment]
        if segment["failedOperations"]:
            clean = dict(segment)
            clean["timestamp"] = _now_ms()
            clean["reason"] = "auto-rollback-clean"
            clean["operations"] = []
            segments.append(clean)
        if segments:
            journal["segments"] = segments
            write_journal(ctx, run.region, journal)
        else:
            delete_journal(ctx, run.region)
    return report.as_dict()


# --- cdkd rollback --------------------------------------------------------------------------


@dataclass
class RollbackResult:
    stack: str
    region: str
    result: str  # clean | partial | nothing
    segments_replayed: int = 0
    report: RollbackReport = field(default_factory=RollbackReport)
    state_deleted: bool = False

    @property
    def exit_code(self) -> int:
        return 0 if self.result in ("clean", "nothing") else 2


def finish_rollback(
    ctx: Context,
    *,
    account: str,
    clients: Any = None,
    provider_for: Any = deploy_provider_for,
    orphan: tuple[str, ...] | list[str] = (),
    revert_failed: bool = False,
) -> RollbackResult:
    """cdkd's `rollback` (4.4): under the lock (operation `rollback`), replay the journal's
    segments newest first (with `revert_failed`, each segment's failed ops first), saving
    state after every op (`If-Match`); pop each segment that replayed cleanly; delete
    state.json when the oldest segment was the stack's first deploy and no rows remain;
    delete the journal when it is empty. `orphan`: logical ids left in AWS."""
    if ctx.region is None:
        raise OperationRefused("rollback needs the stack's region")
    region = ctx.region
    from engine.deploy.intrinsics import partition_for

    target = DeployTarget(ctx.stack, region, account, partition_for(region))
    clients = clients or Clients(ctx.bucket.session)
    result = RollbackResult(ctx.stack, region, "nothing")
    with ctx.held_lock("rollback"):
        journal = read_journal(ctx, region)
        if journal is None or not journal["segments"]:
            return result
        key = ctx.layout.state_key(ctx.stack, region)
        try:
            stored = ctx.bucket.get(key)
            parsed = parse_state(stored.body, key_region=region, stack_name=ctx.stack)
            if not parsed.writable:
                raise OperationRefused(f"{key} is malformed or newer than this admin writes; refusing to roll back")
            record, etag = dict(parsed.data), stored.etag
        except NotFound:
            record, etag = None, None
        rows: dict[str, Any] = dict((record or {}).get("resources") or {})
        holder = {"etag": etag}

        def save() -> None:
            if record is None:
                return
            body = dict(record)
            body["resources"] = dict(rows)
            body.pop("skippedOutputs", None)
            body["lastModified"] = _now_ms()
            raw = dump_state(
                StackState.model_validate(body), stack_name=ctx.stack, region=region, version=SUPPORTED_VERSION
            )
            try:
                holder["etag"] = ctx.bucket.put(key, raw, if_match=holder["etag"]).etag
            except PreconditionFailed:
                holder["etag"] = ctx.bucket.get(key).etag  # one retry with a fresh ETag, as cdkd does
                holder["etag"] = ctx.bucket.put(key, raw, if_match=holder["etag"]).etag

        executor = Executor(
            rows=rows,
            clients=clients,
            target=target,
            save=save,
            provider_for=provider_for,
            log=ctx.log,
            orphan=set(orphan),
        )
        segments = list(journal["segments"])
        oldest = segments[0]
        clean_all = True
        while segments:
            segment = segments[-1]
            failed = list(segment.get("failedOperations") or []) if revert_failed else []
            report = executor.replay(list(segment.get("operations") or []), failed)
            result.segments_replayed += 1
            result.report.reverted += report.reverted
            result.report.already += report.already
            result.report.orphaned += report.orphaned
            result.report.warnings += report.warnings
            result.report.failures += report.failures
            if report.failures:
                clean_all = False
                break
            segments.pop()
            journal["segments"] = segments
            if segments:
                write_journal(ctx, region, journal)
        if clean_all:
            if record is not None and not rows and isinstance(oldest, dict) and oldest.get("initialDeploy"):
                ctx.bucket.delete(key, if_match=holder["etag"])
                result.state_deleted = True
            delete_journal(ctx, region)
            result.result = "clean"
        else:
            write_journal(ctx, region, journal)
            result.result = "partial"
    return result
