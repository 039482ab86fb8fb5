"""Run a deploy plan the way cdkd's DeployEngine runs one (deploy-engine.md 1.4-1.9, 3, 4).

`deploy(ctx, template, ...)` -- engine only, no Django: `ctx` is an `engine.operations.Context`
(bucket, key layout, stack, region, log, progress, cancel). Under cdkd's lock (operation
`deploy`, renewed) it re-reads the record, recomputes the plan (`engine.deploy.plan`) and
refuses with "plan changed, re-approval required" when the approved ETag or digest differs,
and refuses a plan with blocking reasons. Then:

* Phase 1, CREATE and UPDATE (in place, replacement, metadata-only), in template dependency
  order: a resource starts once its own dependencies finished (no level barrier), at most
  `concurrency` at once (10), ready resources by most transitive dependents first. Each
  resource's properties are resolved just before its call, against the rows this run has
  already written (so a `Fn::GetAtt` sees the real attributes the create returned). An
  UPDATE whose fully resolved bag equals the stored one makes no call. A replacement creates
  first, then deletes the old resource (kept under `UpdateReplacePolicy: Retain`); an "already
  exists" answer is `NAMED_REPLACEMENT_COLLISION`, the old id coming back is
  `NAMED_REPLACEMENT_IDEMPOTENT_CREATE`.
* Phase 2, DELETE, only when phase 1 fully succeeded: in reverse recorded-dependency order
  (a row waits for every row that depends on it); `Retain`/`RetainExceptOnCreate` keep the
  AWS resource and drop the row.
* The first failure stops new work; in-flight calls finish and are recorded. Cancel does
  the same. Throttling and eventual-consistency errors are retried with backoff (cdkd's
  schedules, 1.7); a per-resource deadline bounds the retries.
* State writes (1.8, 3): a save after every resource (from the first one, `If-None-Match: *`
  when no record existed, `If-Match` on the last ETag after), through `engine.schema`'s
  writer; the final save (`If-Match` too) holds the freshly resolved outputs and their
  export aliases, `exportNames`, this run's `imports`, and the `observedProperties` read back
  for the rows this run created or updated. Untouched rows are carried verbatim (unknown
  fields kept). A 412 under the lock stops the run: someone broke the lock. After success
  the rollback journal is deleted and the exports index updated with exports only.
* Failure (4.1): the pre-rollback save, a journal segment (`engine.deploy.rollback`), and
  unless `no_rollback` the automatic rollback of the completed operations, the post-rollback
  save and the journal settled.
* Events: cdkd's `deployments/` stream with `command: "deploy"`.

The provider lookup, the clients, the clock and the sleep are seams a test may replace.
One resource's work (resolve, call with retries, replace, delete) is `engine.deploy.work`.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from engine.deploy.intrinsics import (
    Context as ResolveContext,
)
from engine.deploy.intrinsics import (
    Resolver,
    bind_parameters,
    evaluate_conditions,
    json_equal,
    partition_for,
    prune_resources,
)
from engine.deploy.plan import StackPlan, StateLocation, compute_plan
from engine.deploy.retry import RetryPolicy, retry_class
from engine.deploy.rows import build_row, now_ms, resolve_outputs, template_dependencies, update_exports_index
from engine.deploy.work import (  # noqa: F401 - RETAIN and NAMED_*: this module's names before the split
    NAMED_REPLACEMENT_COLLISION,
    NAMED_REPLACEMENT_IDEMPOTENT_CREATE,
    RETAIN,
    Op,
    ResourceWork,
)
from engine.errors import EngineError, NotFound, PreconditionFailed
from engine.events import (
    RESOURCE_FAILED,
    RESOURCE_RETAINED,
    RESOURCE_SKIPPED,
    RESOURCE_STARTED,
    RESOURCE_SUCCEEDED,
    RESULT_FAILED,
    RESULT_SUCCEEDED,
    EventRecorder,
)
from engine.operations import Context, OperationRefused
from engine.providers import Clients, deploy_provider_for
from engine.providers.base import (
    DeployTarget,
)
from engine.schema import SUPPORTED_VERSION, StackState, dump_state, parse_state

__all__ = [
    "DEFAULT_CONCURRENCY",
    "PLAN_CHANGED",
    "DeployFailed",
    "DeployResult",
    "Deployer",
    "RetryPolicy",
    "build_row",
    "deploy",
    "resolve_outputs",
    "retry_class",
    "template_dependencies",
    "update_exports_index",
]

DEFAULT_CONCURRENCY = 10
PLAN_CHANGED = "plan changed, re-approval required"
STATEFUL_CONSENT = "a stateful replacement needs explicit consent"  # engine.deploy.plan's wording
STATE_MODIFIED = "State has been modified by another process"


class DeployFailed(EngineError):
    """The deploy stopped on a resource failure; `result` says what was done and rolled back."""

    def __init__(self, message: str, result: DeployResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class DeployResult:
    stack: str
    region: str
    result: str = "succeeded"  # succeeded | failed | partial | cancelled
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    etag_before: str | None = None
    etag_after: str | None = None
    plan_digest: str | None = None
    rollback: dict[str, Any] | None = None
    run_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The `--json` shape of `cdkd deploy` in the admin (issue 10)."""
        return {
            "stack": self.stack,
            "region": self.region,
            "result": self.result,
            "created": self.created,
            "updated": self.updated,
            "replaced": self.replaced,
            "deleted": self.deleted,
            "unchanged": self.unchanged,
            "outputs": self.outputs,
            "errors": self.errors,
        }


# --- the run --------------------------------------------------------------------------------


class Deployer:
    def __init__(
        self,
        *,
        provider_for: Callable[[str, str | None], Any] = deploy_provider_for,
        clients: Any = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        events: bool = True,
    ) -> None:
        self.provider_for = provider_for
        self.clients = clients
        self.retry = retry or RetryPolicy()
        self.sleep = sleep
        self.events = events

    def deploy(
        self,
        ctx: Context,
        template: dict[str, Any],
        *,
        account: str,
        parameters: dict[str, str] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        no_rollback: bool = False,
        approved_digest: str | None = None,
        approved_etag: str | None = None,
        assembly_digest: str | None = None,
        construct_paths: dict[str, str] | None = None,
        stateful_consent: bool = False,
    ) -> DeployResult:
        """`stateful_consent`: the approval explicitly accepted the plan's stateful
        replacements (cdkd's --force-stateful-recreation); every other blocking reason stays."""
        if ctx.region is None:
            raise OperationRefused("a deploy needs the stack's region")
        clients = self.clients or Clients(ctx.bucket.session)
        recorder = (
            EventRecorder(ctx.bucket, ctx.layout, ctx.stack, ctx.region, command="deploy", log=ctx.log)
            if self.events
            else None
        )
        if recorder is not None:
            recorder.start()
        run = _Run(self, ctx, clients, recorder, account, max(1, int(concurrency)))
        try:
            with ctx.held_lock("deploy") as lock:
                run.lock = lock
                result = run.execute(
                    template,
                    parameters=parameters,
                    no_rollback=no_rollback,
                    approved_digest=approved_digest,
                    approved_etag=approved_etag,
                    assembly_digest=assembly_digest,
                    construct_paths=construct_paths,
                    stateful_consent=stateful_consent,
                )
        except BaseException as exc:
            if recorder is not None:
                recorder.finalize(RESULT_FAILED, run.counts(), error=exc)
                if isinstance(exc, DeployFailed):
                    exc.result.run_id = recorder.run_id
            raise
        if recorder is not None:
            recorder.finalize(RESULT_SUCCEEDED if result.result == "succeeded" else RESULT_FAILED, run.counts())
            result.run_id = recorder.run_id
        return result


class _Run(ResourceWork):
    """One deploy under the lock: the record, the plan check, the scheduler, the saves and the
    endings; each resource's own work is `ResourceWork` (engine.deploy.work)."""

    def __init__(
        self, deployer: Deployer, ctx: Context, clients: Any, recorder: EventRecorder | None, account: str, limit: int
    ) -> None:
        self.d = deployer
        self.ctx = ctx
        self.clients = clients
        self.recorder = recorder
        self.account = account
        self.limit = limit
        self.region: str = ctx.region or ""
        self.key = ctx.layout.state_key(ctx.stack, self.region)
        self.target = DeployTarget(ctx.stack, self.region, account, partition_for(self.region))
        self.lock: Any = None
        self.ops: dict[str, Op] = {}
        self.completed: list[Op] = []  # in completion order, for the journal
        self.failed: list[Op] = []
        self.save_lock = threading.Lock()
        self.rows_lock = threading.Lock()
        self.result = DeployResult(ctx.stack, self.region)

    # -- the record ----------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        r = self.result
        return {
            "created": len(r.created),
            "updated": len(r.updated) + len(r.replaced),
            "deleted": len(r.deleted),
            "skipped": len(r.skipped),
        }

    def _load(self) -> tuple[dict[str, Any] | None, str | None]:
        try:
            stored = self.ctx.bucket.get(self.key)
        except NotFound:
            return None, None
        parsed = parse_state(stored.body, key_region=self.region, stack_name=self.ctx.stack)
        if parsed.newer_than_supported:
            raise OperationRefused(
                f"{self.key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this admin "
                "writes; refusing to deploy over it"
            )
        if parsed.defects:
            raise OperationRefused(
                f"{self.key} is malformed ({', '.join(d.code for d in parsed.defects)}); refusing to deploy over it"
            )
        return parsed.data, stored.etag

    def _body(self, *, final: bool) -> bytes:
        record = dict(self.base) if self.base is not None else {"version": SUPPORTED_VERSION}
        if self.base is None:
            record["region"] = self.region
            record["stackName"] = self.ctx.stack
        with self.rows_lock:
            record["resources"] = dict(self.rows)
        if final:
            record["outputs"] = self.outputs
            imports = list(self.rctx.imports)
            if imports:
                record["imports"] = imports
            else:
                record.pop("imports", None)
            record.pop("outputReads", None)  # this run's reads only, and it resolves none
            record["exportNames"] = list(self.export_names)
            record.pop("skippedOutputs", None)
        else:
            record.setdefault("outputs", {})
            union = list(record.get("imports") or [])
            for entry in self.rctx.imports:
                if entry not in union:
                    union.append(entry)
            if union:
                record["imports"] = union
        record["lastModified"] = now_ms()
        return dump_state(
            StackState.model_validate(record), stack_name=self.ctx.stack, region=self.region, version=SUPPORTED_VERSION
        )

    def save(self, *, final: bool = False, what: str = "incremental") -> bool:
        """One serialized write: `If-None-Match: *` when no record exists yet, else `If-Match`
        the last ETag. A 412 means the lock was violated: the run stops writing and fails."""
        with self.save_lock:
            if self.conflict:
                return False
            body = self._body(final=final)
            try:
                if self.etag is None:
                    written = self.ctx.bucket.put(self.key, body, if_none_match=True)
                else:
                    written = self.ctx.bucket.put(self.key, body, if_match=self.etag)
            except PreconditionFailed:
                self.conflict = f"{self.key}: {STATE_MODIFIED} (the {what} save was refused); the run stopped"
                self.ctx.log("error", self.conflict)
                return False
            except EngineError as exc:
                self.ctx.log("warning", f"{what} save of {self.key} failed ({exc}); the next save decides")
                return False
            self.etag = written.etag
            return True

    # -- the plan ------------------------------------------------------------------------

    def execute(self, template: dict[str, Any], **kw: Any) -> DeployResult:
        ctx = self.ctx
        data, etag = self._load()
        self.base = copy.deepcopy(data) if isinstance(data, dict) else None
        self.etag = etag
        self.result.etag_before = etag
        self.conflict: str | None = None
        exports_key = ctx.layout.exports_index_key(self.region)

        def exports_loader() -> dict[str, Any] | None:
            try:
                return json.loads(ctx.bucket.get(exports_key).body)
            except (NotFound, ValueError):
                return None

        plan = compute_plan(
            template,
            data,
            stack_name=ctx.stack,
            region=self.region,
            account=self.account,
            exports=exports_loader,
            parameters=kw["parameters"],
            location=StateLocation(bucket=ctx.bucket.name, prefix=ctx.layout.prefix, key=self.key, etag=etag),
            assembly_digest=kw["assembly_digest"],
            construct_paths=kw["construct_paths"],
        )
        self.result.plan_digest = plan.plan["digest"]
        if kw["approved_etag"] is not None and kw["approved_etag"] != (etag or ""):
            raise OperationRefused(f"{PLAN_CHANGED}: the record's ETag is {etag or '(none)'}")
        if kw["approved_digest"] is not None and kw["approved_digest"] != plan.plan["digest"]:
            raise OperationRefused(f"{PLAN_CHANGED}: the plan's digest is now {plan.plan['digest']}")
        blocking = [b for b in plan.blocking if not (kw["stateful_consent"] and b.endswith(STATEFUL_CONSENT))]
        if blocking:
            raise OperationRefused("the plan has blocking reasons: " + "; ".join(blocking))

        # the resolution context of the run: bound parameters, conditions, rows as they move
        self.template = template
        self.rows: dict[str, dict[str, Any]] = dict((data or {}).get("resources") or {})
        bound = bind_parameters(template, kw["parameters"], None)
        self.rctx = ResolveContext(
            template=template,
            stack_name=ctx.stack,
            region=self.region,
            account=self.account,
            resources=self.rows,
            parameters=bound,
            exports=exports_loader,
        )
        evaluate_conditions(self.rctx)
        self.rctx.export_entries()  # loaded once, before worker threads copy the context
        self.rctx.imports.extend(i for i in plan.plan.get("imports") or [] if i not in self.rctx.imports)
        self.resources = prune_resources(template, self.rctx)
        self._build_ops(plan)
        self.outputs: dict[str, Any] = dict((data or {}).get("outputs") or {})
        self.export_names: list[str] = list((data or {}).get("exportNames") or [])

        self._check_providers()
        if not self.ops:
            return self._no_change(plan)
        self.ctx.log("info", f"deploying {ctx.stack} ({self.region}): {len(self.ops)} change(s)")
        phase1 = {lid: op for lid, op in self.ops.items() if op.action != "delete"}
        phase2 = {lid: op for lid, op in self.ops.items() if op.action == "delete"}
        self._execute(phase1)
        if not self.failed and not self.conflict and not ctx.cancelled():
            self._execute(phase2)
        if self.conflict:
            self.result.result = "failed"
            self.result.errors.append(self.conflict)
            raise DeployFailed(self.conflict, self.result)
        if self.failed or ctx.cancelled():
            return self._fail(kw["no_rollback"])
        return self._succeed()

    def _check_providers(self) -> None:
        """Refuse before any AWS call what no provider here can create or update, and any
        property a provider would not write (cdkd would route it to Cloud Control; this engine
        never drops one silently)."""
        problems: list[str] = []
        for lid, op in self.ops.items():
            if op.action in ("delete", "metadata"):
                continue
            provisioned_by = (op.previous or {}).get("provisionedBy") if op.action == "update" else None
            provider = self.d.provider_for(op.resource_type, provisioned_by)
            if provider is None or not hasattr(provider, "create"):
                problems.append(f"{lid} ({op.resource_type}): this engine cannot create or update the type yet")
                continue
            handled = getattr(provider, "handled", None)
            if handled:
                extra = sorted(set(self.resources[lid].get("Properties") or {}) - set(handled))
                if extra:
                    problems.append(f"{lid} ({op.resource_type}): properties {', '.join(extra)} are not handled")
        if problems:
            raise OperationRefused("the deploy cannot run: " + "; ".join(problems))

    def _build_ops(self, plan: StackPlan) -> None:
        ids = set(self.resources)
        for action in plan.plan["actions"]:
            lid = action["logicalId"]
            op = Op(lid, action["action"], action["resourceType"])
            if op.action == "delete":
                row = self.rows.get(lid) or {}
                op.previous = row
            else:
                op.depends_on = set(template_dependencies(self.resources[lid], ids))
                if lid in self.rows:
                    op.previous = self.rows[lid]
            self.ops[lid] = op
        for lid, op in self.ops.items():
            if op.action == "delete":
                # a row waits for every row (being deleted) that depends on it
                op.depends_on = {
                    other
                    for other, o in self.ops.items()
                    if o.action == "delete" and lid in ((o.previous or {}).get("dependencies") or [])
                }
            else:
                op.depends_on &= {o for o, x in self.ops.items() if x.action != "delete"}

    # -- the executor --------------------------------------------------------------------

    def _execute(self, ops: dict[str, Op]) -> None:
        if not ops:
            return
        dependents: dict[str, set[str]] = {lid: set() for lid in ops}
        for lid, op in ops.items():
            for dep in op.depends_on:
                dependents[dep].add(lid)

        def weight(lid: str) -> int:
            seen: set[str] = set()
            stack = list(dependents[lid])
            while stack:
                n = stack.pop()
                if n not in seen:
                    seen.add(n)
                    stack.extend(dependents[n])
            return len(seen)

        weights = {lid: weight(lid) for lid in ops}
        running: dict[Future[Any], Op] = {}
        with ThreadPoolExecutor(max_workers=self.limit, thread_name_prefix="deploy") as pool:
            while True:
                stopping = bool(self.failed) or bool(self.conflict) or self.ctx.cancelled() or self._lock_lost()
                if not stopping:
                    ready = [
                        op
                        for op in ops.values()
                        if op.status == "pending" and all(ops[d].status == "done" for d in op.depends_on)
                    ]
                    ready.sort(key=lambda o: (-weights[o.logical_id], o.logical_id))
                    for op in ready[: self.limit - len(running)]:
                        op.status = "running"
                        op.started = time.monotonic()
                        self._event(RESOURCE_STARTED, op)
                        running[pool.submit(self._work, op)] = op
                if not running:
                    break
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    op = running.pop(future)
                    exc = future.exception()
                    if exc is not None:
                        op.status = "failed"
                        op.error = exc
                        self.failed.append(op)
                        self.result.errors.append(f"{op.logical_id}: {exc}")
                        self._event(RESOURCE_FAILED, op, error=exc, durationMs=op.duration_ms())
                        self.ctx.log("error", f"{op.logical_id} ({op.resource_type}) failed: {exc}")
                        continue
                    op.status = "done"
                    self._settle(op)
        for op in ops.values():
            if op.status == "pending":
                op.status = "skipped"

    def _lock_lost(self) -> bool:
        if self.lock is not None and getattr(self.lock, "lost", False):
            self.conflict = self.conflict or f"the lock on {self.ctx.stack} was lost; the run stopped"
            return True
        return False

    def _settle(self, op: Op) -> None:
        """Record a finished op in the working map, count it and save."""
        with self.rows_lock:
            if op.row is None:
                self.rows.pop(op.logical_id, None)
            else:
                self.rows[op.logical_id] = op.row
        outcome = op.outcome
        r = self.result
        {
            "created": r.created,
            "updated": r.updated,
            "replaced": r.replaced,
            "deleted": r.deleted,
            "retained": r.deleted,
            "unchanged": r.unchanged,
            "metadata": r.updated,
            "skipped": r.skipped,
        }[outcome].append(op.logical_id)
        if outcome == "skipped":
            self._event(RESOURCE_SKIPPED, op, reason=op.skip_reason)
        elif outcome == "retained":
            self._event(RESOURCE_RETAINED, op)
        else:
            self._event(RESOURCE_SUCCEEDED, op, durationMs=op.duration_ms())
        if outcome not in ("unchanged",):
            self.completed.append(op)
            self.save(what=f"{op.logical_id}")
        self.ctx.progress(
            sum(1 for o in self.ops.values() if o.status in ("done", "failed")),
            len(self.ops),
            {"logicalId": op.logical_id, "outcome": outcome},
        )

    def _event(self, event_type: str, op: Op, **fields: Any) -> None:
        if self.recorder is None:
            return
        row = op.row or op.previous or {}
        self.recorder.record(
            event_type,
            operation="DELETE" if op.action == "delete" else "CREATE" if op.action == "create" else "UPDATE",
            logicalId=op.logical_id,
            resourceType=op.resource_type,
            physicalId=row.get("physicalId") if event_type != RESOURCE_STARTED else None,
            provisionedBy=row.get("provisionedBy") or "sdk",
            **fields,
        )

    # -- endings -------------------------------------------------------------------------

    def _final_outputs(self) -> None:
        with self.rows_lock:
            snapshot = dict(self.rows)
        local = replace(self.rctx, resources=snapshot, warnings=[])
        local.conditions = self.rctx.conditions
        outputs, names = resolve_outputs(self.template, Resolver(local), self.result.warnings.append)
        self.rctx.imports = local.imports
        self.outputs = outputs
        self.export_names = names
        self.result.outputs = outputs

    def _drain_observed(self) -> None:
        """observedProperties for the rows this run created or updated (3.4), read with the
        run's concurrency: a failed read leaves the field absent, which is always safe."""
        todo = [op for op in self.completed if op.row is not None and op.outcome in ("created", "updated", "replaced")]

        def read(op: Op) -> tuple[Op, Any]:
            row = op.row or {}
            provider = self.d.provider_for(str(row.get("resourceType")), row.get("provisionedBy"))
            reader = getattr(provider, "read", None)
            if reader is None:
                return op, None
            try:
                return op, reader(self.clients, self._ref(op.logical_id, row))
            except Exception as exc:  # a read-back never fails a deploy
                self.ctx.log("warning", f"{op.logical_id}: observed state not read ({exc})")
                return op, None

        with ThreadPoolExecutor(max_workers=self.limit, thread_name_prefix="observe") as pool:
            answers = list(pool.map(read, todo))
        for op, observed in answers:
            if isinstance(observed, dict):
                row = dict(op.row or {})
                row.pop("observedProperties", None)
                row["observedProperties"] = observed
                with self.rows_lock:
                    self.rows[op.logical_id] = row

    def _succeed(self) -> DeployResult:
        self._final_outputs()
        self._drain_observed()
        if not self.save(final=True, what="final"):
            self.result.result = "failed"
            message = self.conflict or f"the final save of {self.key} failed"
            self.result.errors.append(message)
            raise DeployFailed(message, self.result)
        self._after_success()
        self.result.result = "partial" if self.result.skipped else "succeeded"
        return self.result

    def _no_change(self, plan: StackPlan) -> DeployResult:
        self.result.unchanged = sorted(self.rows)
        before = dict(self.outputs)
        self._final_outputs()
        # cdkd saves a no-change deploy only when the outputs moved (1.4 step 15)
        if not json_equal(self.outputs, before) and self.base is not None:
            self.save(final=True, what="no-change")
        else:
            self.result.etag_after = self.etag
        self._after_success()
        return self.result

    def _after_success(self) -> None:
        self.result.etag_after = self.etag
        from engine.deploy.rollback import delete_journal

        delete_journal(self.ctx, self.region)
        warning = update_exports_index(
            self.ctx, self.ctx.stack, self.region, {n: self.outputs[n] for n in self.export_names}
        )
        if warning:
            self.result.warnings.append(warning)

    def _fail(self, no_rollback: bool) -> DeployResult:
        from engine.deploy import rollback

        cancelled = self.ctx.cancelled() and not self.failed
        initial = self.base is None
        self.save(what="pre-rollback")
        reason = "interrupted" if cancelled else "no-rollback-failure" if no_rollback else "auto-rollback-started"
        segment = rollback.segment_from_run(self, reason=reason, initial_deploy=initial)
        journal_written = rollback.append_segment(self.ctx, self.region, segment)
        self.result.result = "cancelled" if cancelled else "failed"
        if cancelled or no_rollback:
            message = "the deploy was cancelled" if cancelled else f"the deploy failed: {self.result.errors[0]}"
            if not cancelled:
                raise DeployFailed(message, self.result)
            self.result.etag_after = self.etag
            return self.result
        report = rollback.roll_back_run(self, segment, journal_written=journal_written)
        self.result.rollback = report
        self.result.etag_after = self.etag
        raise DeployFailed(f"the deploy failed and was rolled back: {self.result.errors[0]}", self.result)


def deploy(ctx: Context, template: dict[str, Any], **kw: Any) -> DeployResult:
    """`Deployer().deploy(ctx, template, **kw)`."""
    return Deployer().deploy(ctx, template, **kw)
