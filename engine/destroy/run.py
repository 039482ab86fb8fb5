"""Running a destroy: the `execute` half, under the stack's lock (each child under its own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from engine.backend import StoredObject
from engine.destroy.common import (
    ACTION_FAIL,
    ACTION_FAIL_SNAPSHOT,
    ACTION_GONE,
    ACTION_NESTED,
    ACTION_RETAIN,
    ACTION_SKIP,
    ACTION_SNAPSHOT,
    CALL_ACTIONS,
    DELETED,
    DELETING,
    FAILED,
    PENDING,
    RELEASES,
    RETAINED,
    SKIPPED,
    RefusedDelete,
    _ChildRefused,
    _concurrency,
    _is_trimmed_subset,
    _read,
    _reads_as_not_found,
    _ref,
    _where,
)
from engine.destroy.consumers import _refuse_consumers, scan_consumers
from engine.destroy.exports import remove_stack_exports
from engine.destroy.seams import _skip_types
from engine.destroy.writer import _BackgroundSaver, _RecordWriter
from engine.errors import EngineError, NotFound, PreconditionFailed
from engine.events import (
    RESOURCE_FAILED,
    RESOURCE_GUARD_INDETERMINATE,
    RESOURCE_RETAINED,
    RESOURCE_SKIPPED,
    RESOURCE_STARTED,
    RESOURCE_SUCCEEDED,
    EventRecorder,
)
from engine.graph import build_graph
from engine.masking import Masker
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan
from engine.schema import (
    parse_state,
)

if TYPE_CHECKING:
    from engine.destroy.operation import Destroy


# --- running -----------------------------------------------------------------------------------


@dataclass
class _StackResult:
    stack: str
    counts: dict[str, int] = field(
        default_factory=lambda: {"deleted": 0, "retained": 0, "skipped": 0, "failed": 0, "unverified": 0}
    )
    status: str = "partial"
    left: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    cancelled: bool = False
    record_deleted: bool = False
    etag_after: str | None = None
    warnings: list[str] = field(default_factory=list)
    first_error: str | None = None


class _Progress:
    """The operation page's live items (`{"items": {...}, "phase": ...}`), shared by nested runs."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.items: dict[str, dict[str, Any]] = {}
        self.phase = "deleting"
        self.lock = threading.Lock()

    def set(self, key: str, status: str, resource_type: Any, message: str | None = None, emit: bool = True) -> None:
        with self.lock:
            item: dict[str, Any] = {"status": status, "type": resource_type}
            if message:
                item["message"] = message
            self.items[key] = item
        if emit:
            self.emit()

    def emit(self, phase: str | None = None) -> None:
        with self.lock:
            if phase:
                self.phase = phase
            done = sum(1 for item in self.items.values() if item["status"] not in (PENDING, DELETING))
            detail = {"items": {k: dict(v) for k, v in self.items.items()}, "phase": self.phase}
            total = len(self.items)
            try:
                self.ctx.progress(done, total, detail)
            except Exception:  # noqa: BLE001 - a progress sink never breaks the run
                pass


class _Run:
    """One execution: the top-level stack and, recursively, its nested children."""

    def __init__(self, destroy: Destroy, ctx: Context, plan: Plan, recorder: EventRecorder, masker: Masker) -> None:
        self.destroy = destroy
        self.ctx = ctx
        self.plan = plan
        self.recorder = recorder
        self.masker = masker
        self.progress = _Progress(ctx)
        self.results: dict[str, _StackResult] = {}
        self.concurrency = plan.data.get("concurrency") or _concurrency(ctx)
        self._clients: Any = None
        self._clients_lock = threading.Lock()
        self.locks: list[Any] = []

    # -- shared -----------------------------------------------------------------------------

    def clients(self) -> Any:
        with self._clients_lock:
            if self._clients is None:
                self._clients = self.destroy.seams.clients(self.ctx)
            return self._clients

    def stopping(self) -> bool:
        return self.ctx.cancelled() or any(getattr(lock, "lost", False) for lock in self.locks)

    def top_counts(self) -> dict[str, int]:
        result = self.results.get(self.ctx.stack)
        return dict(result.counts) if result else {}

    @contextmanager
    def _lock(self, ctx: Context) -> Iterator[Any]:
        with ctx.held_lock("destroy") as lock:
            self.locks.append(lock)
            try:
                yield lock
            finally:
                self.locks.remove(lock)

    # -- the top-level stack ------------------------------------------------------------------

    def top(self) -> Outcome:
        ctx, data = self.ctx, self.plan.data
        result = _StackResult(ctx.stack)
        self.results[ctx.stack] = result
        self._pending_items(data, prefix="")
        with self._lock(ctx):
            stored = _read(ctx, data["key"])
            if stored is None:
                return self._already_gone(result)
            parsed = self._accept(ctx, data, stored)
            self._destroy_stack(ctx, data, stored, parsed, result, prefix="")
        return self._outcome(result)

    def _already_gone(self, result: _StackResult) -> Outcome:
        """The record is gone (an earlier attempt of this operation finished its deletes, or
        someone orphaned it): nothing is deleted in AWS; the siblings are cleaned up."""
        ctx = self.ctx
        result.status = "succeeded"
        result.record_deleted = True
        result.warnings.append(f"{self.plan.data['key']} is already gone: no AWS resource was deleted by this run")
        self._cleanup_after_record(ctx, ctx.stack, ctx.region or "", result)
        self.progress.emit("done")
        return self._outcome(result)

    def _accept(self, ctx: Context, data: dict[str, Any], stored: StoredObject) -> Any:
        """The record as re-read under the lock, if the plan still speaks for it; else StalePlan
        (or OperationRefused for an import that appeared)."""
        stack, region = data["stack"], data["region"]
        parsed = parse_state(stored.body, key_region=region, stack_name=stack)
        if stored.etag != data["etag"]:
            if not _is_trimmed_subset(parsed, data):
                raise StalePlan(data["key"], data["etag"], stored.etag)
            ctx.log(
                "info",
                f"{data['key']} changed since the plan only by rows removed (an earlier attempt of this destroy): "
                f"continuing with the {len(parsed.resource_rows())} row(s) left",
            )
        elif parsed.defects or parsed.newer_than_supported:  # pragma: no cover - same bytes as planned
            raise StalePlan(data["key"], data["etag"], stored.etag)
        if parsed.region_mismatch and parsed.resource_rows():
            raise OperationRefused(f"the body region of {data['key']} disagrees with its key; refusing")
        if data.get("scan_imports") or parsed.outputs():
            consumers, _ = scan_consumers(ctx, stack, region)
            if consumers:
                raise _refuse_consumers(stack, region, consumers)
        return parsed

    # -- one stack ----------------------------------------------------------------------------

    def _pending_items(self, data: dict[str, Any], prefix: str) -> None:
        for lid in data["order"]:
            entry = data["rows"][lid]
            self.progress.set(prefix + lid, PENDING, entry["resourceType"], emit=False)
            if entry.get("child"):
                self._pending_items(entry["child"], prefix=f"{prefix}{lid}/")
        if not prefix:
            self.progress.emit()

    def _event(self, event_type: str, stack: str, lid: str, row: dict[str, Any], **fields: Any) -> None:
        self.recorder.resource(
            event_type,
            stack_name=stack,
            logical_id=lid,
            resource_type=row.get("resourceType"),
            provisioned_by=row.get("provisionedBy"),
            **fields,
        )

    def _destroy_stack(
        self, ctx: Context, data: dict[str, Any], stored: StoredObject, parsed: Any, result: _StackResult, prefix: str
    ) -> None:
        stack, region = data["stack"], data["region"]
        planned: dict[str, dict[str, Any]] = data["rows"]
        rows: dict[str, dict[str, Any]] = {lid: row for lid, row in parsed.resource_rows() if row is not None}
        remaining = dict(parsed.data["resources"])  # what the record still lists, in stored order
        writer = _RecordWriter(self, ctx, stack, region, data["key"], parsed.data, stored.etag)
        saver = _BackgroundSaver(writer)
        status: dict[str, str] = dict.fromkeys(rows, PENDING)
        for lid in planned:
            if lid not in rows:
                result.already_gone.append(lid)
                self.progress.set(prefix + lid, DELETED, planned[lid]["resourceType"], "deleted by an earlier attempt")
        graph = build_graph(rows)
        order = graph.deletion_order()  # no cycle: the rows are a subset of a planned, acyclic record
        dependents = graph.dependents
        # First the rows that make no AWS call, in deletion order.
        for lid in order:
            entry, row = planned[lid], rows[lid]
            action = entry["action"]
            if action == ACTION_RETAIN:
                status[lid] = RETAINED
                result.counts["retained"] += 1
                self._event(RESOURCE_RETAINED, stack, lid, row)
                self.progress.set(prefix + lid, RETAINED, entry["resourceType"], "kept in AWS (DeletionPolicy)")
            elif action == ACTION_SKIP:
                status[lid] = SKIPPED
                result.counts["skipped"] += 1
                self._event(
                    RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=entry["reason"]
                )
                self.progress.set(prefix + lid, SKIPPED, entry["resourceType"], self.masker(entry["reason"]))
            elif action in (ACTION_FAIL, ACTION_FAIL_SNAPSHOT):
                status[lid] = FAILED
                self._event(RESOURCE_STARTED, stack, lid, row)
                self._fail(result, stack, lid, row, entry, RefusedDelete(entry["reason"]), 0, prefix)
        # Then the deletes, as their dependents go.
        inflight: dict[Future[Any], tuple[str, float]] = {}
        try:
            with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix=f"destroy-{stack}") as pool:
                while True:
                    if not self.stopping():
                        for lid in order:
                            if len(inflight) >= self.concurrency:
                                break
                            if status[lid] != PENDING or planned[lid]["action"] not in CALL_ACTIONS:
                                continue
                            if all(status[d] in RELEASES for d in dependents[lid]):
                                status[lid] = DELETING
                                row = rows[lid]
                                self._event(RESOURCE_STARTED, stack, lid, row)
                                self.progress.set(prefix + lid, DELETING, row.get("resourceType"))
                                future = pool.submit(self._work, ctx, stack, region, lid, row, planned[lid], prefix)
                                inflight[future] = (lid, time.monotonic())
                    if not inflight:
                        break
                    done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                    deleted_now = False
                    for future in done:
                        lid, started = inflight.pop(future)
                        duration = int((time.monotonic() - started) * 1000)
                        status[lid] = self._settle(
                            future, ctx, stack, lid, rows[lid], planned[lid], result, duration, prefix
                        )
                        if status[lid] == DELETED:
                            remaining.pop(lid, None)
                            deleted_now = True
                    if deleted_now:
                        # Written from its own thread (newest snapshot wins): the record never
                        # lists less than what is gone, and concurrent deletes are not held up
                        # behind one serial write each.
                        saver.submit(remaining)
        finally:
            saver.drain()
        # What never started: cancelled, or held back by a dependent that is still there.
        stopped = self.stopping()
        for lid in order:
            if status[lid] != PENDING:
                continue
            row = rows[lid]
            if stopped:
                self.progress.set(prefix + lid, PENDING, row.get("resourceType"), "not started (cancelled)")
                continue
            blockers = [d for d in dependents[lid] if status[d] not in RELEASES]
            reason = (
                f"not deleted: {', '.join(blockers)} depend(s) on it and {'is' if len(blockers) == 1 else 'are'} "
                f"still there"
            )
            status[lid] = SKIPPED
            result.counts["skipped"] += 1
            self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
            self.progress.set(prefix + lid, SKIPPED, row.get("resourceType"), reason)
        result.cancelled = stopped and any(s == PENDING for s in status.values())
        everything_gone = all(s in (DELETED, RETAINED) for s in status.values())
        if everything_gone and not result.cancelled:
            self.progress.emit("cleanup")
            self._finish_success(ctx, stack, region, data["key"], writer, remaining, result)
        else:
            writer.save(remaining, final=True)
            if writer.conflict:
                result.warnings.append(writer.conflict)
            result.etag_after = writer.etag if not writer.conflict else None
        result.left = [lid for lid in remaining if not result.record_deleted]
        failed, deleted = result.counts["failed"], result.counts["deleted"]
        if result.record_deleted:
            result.status = "succeeded"
        elif result.cancelled:
            result.status = "partial"
        elif failed and not deleted:
            result.status = "failed"
        else:
            result.status = "partial"
        if prefix == "":
            self.progress.emit("done")

    def _work(
        self, ctx: Context, stack: str, region: str, lid: str, row: dict[str, Any], entry: dict[str, Any], prefix: str
    ) -> Any:
        """In a pool thread: the one AWS-facing step of a row. Returns what `_settle` reads."""
        action = entry["action"]
        if action in (ACTION_NESTED, ACTION_GONE):
            return self._destroy_child(ctx, region, lid, entry, prefix)
        ref = _ref(ctx, region, lid, row)
        return self.destroy.seams.delete(self.clients(), ref, snapshot=action == ACTION_SNAPSHOT)

    def _settle(
        self,
        future: Future[Any],
        ctx: Context,
        stack: str,
        lid: str,
        row: dict[str, Any],
        entry: dict[str, Any],
        result: _StackResult,
        duration: int,
        prefix: str,
    ) -> str:
        """Account for a finished row (coordinator thread): events, counts, progress; its status."""
        rtype = row.get("resourceType")
        exc = future.exception()
        if exc is not None and not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit, a simulated kill: stop here, write nothing more
        if exc is None:
            value = future.result()
            if isinstance(value, _ChildResult):
                return self._settle_child(value, stack, lid, row, entry, result, duration, prefix)
            status_value = getattr(value, "status", value)
            for guard in getattr(value, "unverified", None) or []:
                result.counts["unverified"] += 1
                self._event(
                    RESOURCE_GUARD_INDETERMINATE,
                    stack,
                    lid,
                    row,
                    guard=guard.get("guard") if isinstance(guard, dict) else str(guard),
                    reason=guard.get("reason") if isinstance(guard, dict) else None,
                )
            note = "already gone" if status_value == "not-found" else None
            return self._deleted(result, stack, lid, row, duration, prefix, note)
        if isinstance(exc, _skip_types()):
            reason = str(getattr(exc, "reason", None) or exc) or "unspecified reason"
            result.counts["skipped"] += 1
            self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
            self.progress.set(prefix + lid, SKIPPED, rtype, self.masker(reason))
            return SKIPPED
        if entry["action"] != ACTION_SNAPSHOT and _reads_as_not_found(exc):
            return self._deleted(result, stack, lid, row, duration, prefix, "already gone")
        self._fail(result, stack, lid, row, entry, exc, duration, prefix)
        return FAILED

    def _deleted(
        self,
        result: _StackResult,
        stack: str,
        lid: str,
        row: dict[str, Any],
        duration: int,
        prefix: str,
        note: str | None,
    ) -> str:
        result.counts["deleted"] += 1
        self._event(RESOURCE_SUCCEEDED, stack, lid, row, physical_id=row.get("physicalId"), duration_ms=duration)
        self.progress.set(prefix + lid, DELETED, row.get("resourceType"), note)
        return DELETED

    def _fail(
        self,
        result: _StackResult,
        stack: str,
        lid: str,
        row: dict[str, Any],
        entry: dict[str, Any],
        exc: BaseException,
        duration: int,
        prefix: str,
    ) -> None:
        result.counts["failed"] += 1
        message = self.masker(str(exc)) or type(exc).__name__
        result.first_error = result.first_error or f"{lid}: {message}"
        self._event(RESOURCE_FAILED, stack, lid, row, duration_ms=duration, error=exc)
        self.progress.set(prefix + lid, FAILED, row.get("resourceType"), message)
        self.ctx.log("error", f"{stack}: {lid} ({row.get('resourceType')}) was not deleted: {message}")

    # -- nested children -------------------------------------------------------------------------

    def _destroy_child(self, ctx: Context, region: str, lid: str, entry: dict[str, Any], prefix: str) -> _ChildResult:
        child = entry["childStack"]  # set by the plan for every nested / gone row
        key = ctx.layout.state_key(child, region)
        child_ctx = replace(ctx, stack=child)
        result = _StackResult(child)
        self.results[child] = result
        data = entry.get("child")
        try:
            with self._lock(child_ctx):
                stored = _read(child_ctx, key)
                if stored is None:
                    result.status = "succeeded"
                    result.record_deleted = True
                    return _ChildResult(child, result, gone=True)
                if data is None:  # planned as gone, but a record appeared since
                    raise _ChildRefused(f"nested stack {child} has a record again since the plan")
                parsed = self._accept(child_ctx, data, stored)
                self._destroy_stack(child_ctx, data, stored, parsed, result, prefix=f"{prefix}{lid}/")
        except (OperationRefused, EngineError, _ChildRefused) as exc:
            return _ChildResult(child, result, refused=str(exc))
        return _ChildResult(child, result)

    def _settle_child(
        self,
        value: _ChildResult,
        stack: str,
        lid: str,
        row: dict[str, Any],
        entry: dict[str, Any],
        result: _StackResult,
        duration: int,
        prefix: str,
    ) -> str:
        """cdkd's NestedStackProvider mapping (§8.5): child errors -> the row FAILS; child
        skipped or interrupted -> the row is SKIPPED (record kept); child gone -> deleted."""
        child = value.result
        if value.refused:
            self._fail(result, stack, lid, row, entry, RefusedDelete(value.refused), duration, prefix)
            return FAILED
        if value.gone or child.status == "succeeded":
            note = f"nested stack {value.stack} " + ("was already gone" if value.gone else "destroyed")
            return self._deleted(result, stack, lid, row, duration, prefix, note)
        if child.counts["failed"]:
            error = RefusedDelete(
                f"nested stack {value.stack}: {child.counts['failed']} resource(s) failed"
                + (f" (first: {child.first_error})" if child.first_error else "")
                + f"; repair and re-run (its record is {self.ctx.layout.state_key(value.stack, self.ctx.region or '')})"
            )
            self._fail(result, stack, lid, row, entry, error, duration, prefix)
            return FAILED
        why = "was interrupted" if child.cancelled else f"skipped {child.counts['skipped']} resource(s)"
        reason = f"nested stack {value.stack} {why}, so it was not destroyed as a whole; its record is kept"
        result.counts["skipped"] += 1
        self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
        self.progress.set(prefix + lid, SKIPPED, row.get("resourceType"), reason)
        return SKIPPED

    # -- the end of a stack ------------------------------------------------------------------------

    def _finish_success(
        self,
        ctx: Context,
        stack: str,
        region: str,
        key: str,
        writer: _RecordWriter,
        remaining: dict[str, Any],
        result: _StackResult,
    ) -> None:
        """create-tokens.json, then state.json (If-Match), then the journal, then the exports index."""
        if writer.conflict:
            result.warnings.append(writer.conflict)
            return
        tokens = ctx.layout.create_tokens_key(stack, region)
        try:
            # If-Match on the ledger as read now (or "only while absent"): issued even when
            # absent, since S3 checks the permission first.
            ctx.bucket.delete_current(tokens)
        except EngineError as exc:
            message = f"could not delete {tokens} ({exc}); the record is left in place (cdkd does the same)"
            result.warnings.append(message)
            ctx.log("error", message)
            if writer.failed:  # the last incremental save did not land: the final write decides
                writer.save(remaining, final=True)
            result.etag_after = writer.etag
            return
        try:
            try:
                ctx.bucket.delete(key, if_match=writer.etag)
            except PreconditionFailed:
                # An earlier save whose outcome nobody could confirm may have landed: then the
                # record is still ours, at that save's ETag.
                if not writer.adopt_landed():
                    raise
                ctx.bucket.delete(key, if_match=writer.etag)
        except (PreconditionFailed, NotFound):
            message = f"{key} changed since this run last wrote it; it is left as the other writer left it"
            result.warnings.append(message)
            ctx.log("warning", message)
            return
        except EngineError as exc:
            message = f"could not delete {key}: {exc}"
            result.warnings.append(message)
            ctx.log("error", message)
            return
        result.record_deleted = True
        result.etag_after = None
        ctx.log("info", f"deleted {tokens} and {key}")
        self._cleanup_after_record(ctx, stack, region, result)

    def _cleanup_after_record(self, ctx: Context, stack: str, region: str, result: _StackResult) -> None:
        """The journal (with its noncurrent versions: they may hold attempted secrets) and the
        exports index entries. Both soft: the record is already gone."""
        journal = ctx.layout.rollback_journal_key(stack, region)
        try:
            versions = ctx.bucket.versions(journal)
            if any(v.is_latest and not v.delete_marker for v in versions):
                ctx.bucket.delete(journal)
            purged = ctx.bucket.purge_noncurrent([journal]) if versions else []
            if versions:
                ctx.log("info", f"deleted {journal} and purged {len(purged)} noncurrent version(s)")
        except EngineError as exc:
            result.warnings.append(
                f"the rollback journal {journal} was not fully removed ({exc}); its earlier versions may hold "
                f"attempted properties. Grant s3:ListBucketVersions and s3:DeleteObjectVersion, or purge by hand"
            )
        warning = remove_stack_exports(ctx, stack, region)
        if warning:
            result.warnings.append(warning)
            ctx.log("warning", warning)

    def _outcome(self, result: _StackResult) -> Outcome:
        counts = dict(result.counts)
        stacks = {
            name: {**r.counts, "status": r.status, "left": r.left, "cancelled": r.cancelled}
            for name, r in self.results.items()
        }
        where = _where(self.ctx.stack, self.ctx.region)
        parts = f"{counts['deleted']} deleted" + (f", {counts['retained']} retained" if counts["retained"] else "")
        parts += f", {counts['failed']} failed"
        parts += f", {counts['skipped']} skipped" if counts["skipped"] else ""
        parts += f", {counts['unverified']} unverified" if counts["unverified"] else ""
        if result.status == "succeeded":
            summary = f"Stack {where} destroyed ({parts})."
        elif result.cancelled:
            summary = f"Destroy of {where} cancelled ({parts}); {len(result.left)} row(s) left. Re-run to finish."
        else:
            summary = f"Stack {where} partially destroyed ({parts}); {len(result.left)} row(s) left in the record."
        details: dict[str, Any] = {
            "counts": counts,
            "stacks": stacks,
            "left": result.left,
            "already_gone": result.already_gone,
        }
        if result.cancelled:
            details["reason"] = "cancelled"
        warnings = [w for r in self.results.values() for w in r.warnings]
        return Outcome(
            status=result.status,
            summary=summary,
            etag_before=self.plan.etag,
            etag_after=None if result.record_deleted else result.etag_after,
            details=details,
            warnings=warnings,
        )


@dataclass
class _ChildResult:
    stack: str
    result: _StackResult
    gone: bool = False
    refused: str | None = None
