"""Running a destroy: the `execute` half, under the stack's lock (each child under its own)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
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
    _digest,
    _is_trimmed_subset,
    _read,
    _reads_as_not_found,
    _ref,
    _where,
)
from engine.destroy.consumers import _refuse_consumers, scan_consumers
from engine.destroy.exports import remove_stack_exports
from engine.destroy.journal import journal_only_rows
from engine.destroy.ordering import destroy_graph
from engine.destroy.retry import Deadlines, ResourceTimeout, duration_text
from engine.destroy.seams import _skip_types
from engine.destroy.work import RowTask, delete_row, spawn
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
    unverified: list[str] = field(default_factory=list)  # "<lid> (<guard>: <reason>)"


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
        self.deadlines = Deadlines.from_data(plan.data.get("deadlines"))
        delays = plan.data.get("retry_delays")
        self.retry_delays = tuple(delays) if isinstance(delays, list) else destroy.retry_delays
        self.protection = destroy.seams.protection() if plan.data.get("remove_protection") else None

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
        for key, entry in ((data.get("journal") or {}).get("rows") or {}).items():
            self.progress.set(prefix + key, PENDING, entry["resourceType"], emit=False)
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
        state_rows: dict[str, dict[str, Any]] = {lid: row for lid, row in parsed.resource_rows() if row is not None}
        remaining = dict(parsed.data["resources"])  # what the record still lists, in stored order
        writer = _RecordWriter(self, ctx, stack, region, data["key"], parsed.data, stored.etag)
        saver = _BackgroundSaver(writer)
        for lid in data["rows"]:
            if lid not in state_rows:
                result.already_gone.append(lid)
                self.progress.set(
                    prefix + lid, DELETED, data["rows"][lid]["resourceType"], "deleted by an earlier attempt"
                )
        # Resources only the rollback journal records go first; then the record's rows.
        journal_planned = self._journal_rows(ctx, data, prefix)
        planned: dict[str, dict[str, Any]] = {**journal_planned, **data["rows"]}
        rows: dict[str, dict[str, Any]] = {k: e["row"] for k, e in journal_planned.items()} | state_rows
        status: dict[str, str] = dict.fromkeys(rows, PENDING)
        graph, _ = destroy_graph(state_rows)  # the plan's order; no cycle in a subset of a planned record
        order = list(journal_planned) + graph.deletion_order()
        dependents: dict[str, list[str]] = {k: [] for k in journal_planned} | graph.dependents
        journal_keys = list(journal_planned)
        # First the rows that make no AWS call, in deletion order.
        for key in order:
            entry, row = planned[key], rows[key]
            lid = entry.get("logicalId") or key
            action = entry["action"]
            if action == ACTION_RETAIN:
                status[key] = RETAINED
                result.counts["retained"] += 1
                self._event(RESOURCE_RETAINED, stack, lid, row)
                self.progress.set(prefix + key, RETAINED, entry["resourceType"], "kept in AWS (DeletionPolicy)")
            elif action == ACTION_SKIP:
                status[key] = SKIPPED
                result.counts["skipped"] += 1
                self._event(
                    RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=entry["reason"]
                )
                self.progress.set(prefix + key, SKIPPED, entry["resourceType"], self.masker(entry["reason"]))
            elif action in (ACTION_FAIL, ACTION_FAIL_SNAPSHOT):
                status[key] = FAILED
                self._event(RESOURCE_STARTED, stack, lid, row)
                self._fail(result, stack, lid, row, entry, RefusedDelete(entry["reason"]), 0, prefix + key)
        # Then the deletes, as their dependents go (and every journal row before any record row).
        inflight: dict[Future[Any], RowTask] = {}
        try:
            while True:
                if not self.stopping():
                    journal_done = all(status[k] not in (PENDING, DELETING) for k in journal_keys)
                    for key in order:
                        if len(inflight) >= self.concurrency:
                            break
                        if status[key] != PENDING or planned[key]["action"] not in CALL_ACTIONS:
                            continue
                        if key not in journal_planned and not journal_done:
                            break
                        if all(status[d] in RELEASES for d in dependents[key]):
                            status[key] = DELETING
                            task = self._start(ctx, stack, region, key, rows[key], planned[key], prefix)
                            inflight[task.future] = task
                if not inflight:
                    break
                done, _ = wait(list(inflight), timeout=self._next_deadline(inflight), return_when=FIRST_COMPLETED)
                deleted_now = False
                for future in done:
                    task = inflight.pop(future)
                    status[task.key] = self._settle(future, ctx, stack, task, result, prefix)
                    if status[task.key] == DELETED and task.key in remaining:
                        remaining.pop(task.key, None)
                        deleted_now = True
                for future, task in list(inflight.items()):
                    if self._past_deadline(stack, task, result, prefix):
                        inflight.pop(future)
                        status[task.key] = FAILED
                if deleted_now:
                    # Written from its own thread (newest snapshot wins): the record never
                    # lists less than what is gone, and concurrent deletes are not held up
                    # behind one serial write each.
                    saver.submit(remaining)
        finally:
            saver.drain()
        # What never started: cancelled, or held back by a dependent that is still there.
        stopped = self.stopping()
        for key in order:
            if status[key] != PENDING:
                continue
            row = rows[key]
            if stopped:
                self.progress.set(prefix + key, PENDING, row.get("resourceType"), "not started (cancelled)")
                continue
            blockers = [d for d in dependents[key] if status[d] not in RELEASES]
            reason = (
                f"not deleted: {', '.join(blockers)} depend(s) on it and {'is' if len(blockers) == 1 else 'are'} "
                f"still there"
            )
            status[key] = SKIPPED
            result.counts["skipped"] += 1
            lid = planned[key].get("logicalId") or key
            self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
            self.progress.set(prefix + key, SKIPPED, row.get("resourceType"), reason)
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
            kept = [k for k in journal_keys if status[k] not in (DELETED, RETAINED)]
            if kept:
                result.warnings.append(
                    f"{data['journal']['key']} is kept: {len(kept)} resource(s) only it records are still there "
                    f"({', '.join(planned[k]['logicalId'] for k in kept)}); a re-run deletes them"
                )
        result.left = [lid for lid in remaining if not result.record_deleted]
        if result.unverified:
            result.warnings.append(
                f"{stack}: {len(result.unverified)} unverified: a safety check could not reach a verdict for "
                + "; ".join(result.unverified)
            )
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

    def _journal_rows(self, ctx: Context, data: dict[str, Any], prefix: str) -> dict[str, dict[str, Any]]:
        """The planned journal-only rows still to delete, each with its `row`. The journal must
        be as planned (this destroy never writes it); gone, there is nothing left of it to delete."""
        journal = data.get("journal") or {}
        planned = journal.get("rows") or {}
        if not planned:
            return {}
        current = _read(ctx, journal["key"])
        if current is None:
            for key, entry in planned.items():
                self.progress.set(prefix + key, DELETED, entry["resourceType"], "its journal is gone")
            ctx.log("info", f"{journal['key']} is gone since the plan: its resources are not deleted by this run")
            return {}
        if current.etag != journal.get("etag"):
            raise StalePlan(journal["key"], journal.get("etag"), current.etag)
        rows, _ = journal_only_rows(current, {})
        by_id = {(r["logicalId"], r["physicalId"]): r for r in rows.values()}
        out: dict[str, dict[str, Any]] = {}
        for key, entry in planned.items():
            row = by_id.get((entry.get("logicalId"), entry.get("physicalId")))
            if row is None or _digest(row) != entry["digest"]:
                raise StalePlan(journal["key"], journal.get("etag"), current.etag)
            out[key] = {**entry, "row": row}
        return out

    def _start(
        self, ctx: Context, stack: str, region: str, key: str, row: dict[str, Any], entry: dict[str, Any], prefix: str
    ) -> RowTask:
        lid = entry.get("logicalId") or key
        warn, timeout = self.deadlines.for_type(row.get("resourceType"))
        now = time.monotonic()
        nested = entry["action"] in (ACTION_NESTED, ACTION_GONE)  # its own rows have deadlines
        task = RowTask(
            key=key,
            lid=lid,
            row=row,
            entry=entry,
            started=now,
            warn_at=math.inf if nested else now + warn,
            deadline=math.inf if nested else now + timeout,
            timeout=timeout,
        )
        self._event(RESOURCE_STARTED, stack, lid, row)
        self.progress.set(prefix + key, DELETING, row.get("resourceType"))
        task.future = spawn(f"destroy-{stack}-{lid}"[:60], self._work, ctx, region, task, prefix)
        return task

    def _next_deadline(self, inflight: dict[Future[Any], RowTask]) -> float | None:
        now = time.monotonic()
        moments = [t.deadline for t in inflight.values()] + [t.warn_at for t in inflight.values() if not t.warned]
        soonest = min(moments, default=math.inf)
        return None if soonest == math.inf else max(0.0, soonest - now)

    def _past_deadline(self, stack: str, task: RowTask, result: _StackResult, prefix: str) -> bool:
        """Warn once past warn-after; past the timeout, FAIL the row and stop waiting for it."""
        now = time.monotonic()
        rtype = task.row.get("resourceType")
        if not task.warned and now >= task.warn_at:
            task.warned = True
            message = f"still deleting after {duration_text(now - task.started)}"
            self.ctx.log(
                "warning",
                f"{stack}: {task.lid} ({rtype}) is {message} (resource timeout {duration_text(task.timeout)})",
            )
            self.progress.set(prefix + task.key, DELETING, rtype, message)
        if now < task.deadline:
            return False
        task.abort.set()  # no retry after this, and no guard is put back (seed 004)
        error = ResourceTimeout(
            f"{task.lid} ({rtype}) did not finish deleting within {duration_text(task.timeout)} (resource timeout); "
            f"the delete may still complete in AWS, and its record is kept: re-run the destroy to reconcile"
        )
        self._fail(
            result, stack, task.lid, task.row, task.entry, error, int((now - task.started) * 1000), prefix + task.key
        )
        return True

    def _work(self, ctx: Context, region: str, task: RowTask, prefix: str) -> Any:
        """In the row's thread: the one AWS-facing step of a row. Returns what `_settle` reads."""
        action = task.entry["action"]
        if action in (ACTION_NESTED, ACTION_GONE):
            return self._destroy_child(ctx, region, task.lid, task.entry, prefix)
        ref = _ref(ctx, region, task.lid, task.row)
        return delete_row(self, task, ref, action == ACTION_SNAPSHOT, ctx, region)

    def _settle(
        self, future: Future[Any], ctx: Context, stack: str, task: RowTask, result: _StackResult, prefix: str
    ) -> str:
        """Account for a finished row (coordinator thread): events, counts, progress; its status."""
        lid, row, entry, key = task.lid, task.row, task.entry, prefix + task.key
        duration = int((time.monotonic() - task.started) * 1000)
        rtype = row.get("resourceType")
        exc = future.exception()
        if exc is not None and not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit, a simulated kill: stop here, write nothing more
        guards: list[Any] = []
        if task.guard is not None and task.guard.indeterminate:
            guards.append({"guard": "protection-read", "reason": task.guard.indeterminate})
        if exc is None:
            value = future.result()
            if isinstance(value, _ChildResult):
                return self._settle_child(value, stack, lid, row, entry, result, duration, key)
            guards += list(getattr(value, "unverified", None) or [])
        self._unverified(result, stack, lid, row, guards)
        if exc is None:
            status_value = getattr(value, "status", value)
            note = "already gone" if status_value == "not-found" else None
            return self._deleted(result, stack, lid, row, duration, key, note)
        if isinstance(exc, _skip_types()):
            reason = str(getattr(exc, "reason", None) or exc) or "unspecified reason"
            result.counts["skipped"] += 1
            self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
            self.progress.set(key, SKIPPED, rtype, self.masker(reason))
            return SKIPPED
        if entry["action"] != ACTION_SNAPSHOT and _reads_as_not_found(exc):
            return self._deleted(result, stack, lid, row, duration, key, "already gone")
        self._fail(result, stack, lid, row, entry, exc, duration, key)
        return FAILED

    def _unverified(self, result: _StackResult, stack: str, lid: str, row: dict[str, Any], guards: list[Any]) -> None:
        """Guards that ran and reached no verdict: counted and recorded, nothing else moves."""
        for guard in guards:
            name = guard.get("guard") if isinstance(guard, dict) else str(guard)
            reason = guard.get("reason") if isinstance(guard, dict) else None
            result.counts["unverified"] += 1
            result.unverified.append(f"{lid} ({name}{': ' + self.masker(str(reason)) if reason else ''})")
            self._event(RESOURCE_GUARD_INDETERMINATE, stack, lid, row, guard=name, reason=reason)

    def _deleted(
        self,
        result: _StackResult,
        stack: str,
        lid: str,
        row: dict[str, Any],
        duration: int,
        key: str,
        note: str | None,
    ) -> str:
        result.counts["deleted"] += 1
        self._event(RESOURCE_SUCCEEDED, stack, lid, row, physical_id=row.get("physicalId"), duration_ms=duration)
        self.progress.set(key, DELETED, row.get("resourceType"), note)
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
        key: str,
    ) -> None:
        result.counts["failed"] += 1
        message = self.masker(str(exc)) or type(exc).__name__
        result.first_error = result.first_error or f"{lid}: {message}"
        self._event(RESOURCE_FAILED, stack, lid, row, duration_ms=duration, error=exc)
        self.progress.set(key, FAILED, row.get("resourceType"), message)
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
        key: str,
    ) -> str:
        """cdkd's NestedStackProvider mapping (§8.5): child errors -> the row FAILS; child
        skipped or interrupted -> the row is SKIPPED (record kept); child gone -> deleted."""
        child = value.result
        # guards the child could not verify stay visible on the parent's summary line
        result.counts["unverified"] += child.counts["unverified"]
        result.unverified += [f"{value.stack}: {u}" for u in child.unverified]
        if value.refused:
            self._fail(result, stack, lid, row, entry, RefusedDelete(value.refused), duration, key)
            return FAILED
        if value.gone or child.status == "succeeded":
            note = f"nested stack {value.stack} " + ("was already gone" if value.gone else "destroyed")
            return self._deleted(result, stack, lid, row, duration, key, note)
        if child.counts["failed"]:
            error = RefusedDelete(
                f"nested stack {value.stack}: {child.counts['failed']} resource(s) failed"
                + (f" (first: {child.first_error})" if child.first_error else "")
                + f"; repair and re-run (its record is {self.ctx.layout.state_key(value.stack, self.ctx.region or '')})"
            )
            self._fail(result, stack, lid, row, entry, error, duration, key)
            return FAILED
        why = "was interrupted" if child.cancelled else f"skipped {child.counts['skipped']} resource(s)"
        reason = f"nested stack {value.stack} {why}, so it was not destroyed as a whole; its record is kept"
        result.counts["skipped"] += 1
        self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
        self.progress.set(key, SKIPPED, row.get("resourceType"), reason)
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
