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
    NO_VALUE,
    Resolver,
    bind_parameters,
    evaluate_conditions,
    json_equal,
    partition_for,
    prune_resources,
)
from engine.deploy.intrinsics import (
    Context as ResolveContext,
)
from engine.deploy.plan import METADATA_TYPE, StackPlan, StateLocation, compute_plan
from engine.deploy.retry import RetryPolicy, retry_class
from engine.deploy.rows import build_row, now_ms, resolve_outputs, template_dependencies, update_exports_index
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
from engine.providers import Clients, Skip, deploy_provider_for
from engine.providers.base import (
    ALREADY_EXISTS_CODE,
    DeployTarget,
    ProviderError,
    ResourceRef,
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
RETAIN = frozenset({"Retain", "RetainExceptOnCreate"})
PLAN_CHANGED = "plan changed, re-approval required"
STATEFUL_CONSENT = "a stateful replacement needs explicit consent"  # engine.deploy.plan's wording
NAMED_REPLACEMENT_COLLISION = "NAMED_REPLACEMENT_COLLISION"
NAMED_REPLACEMENT_IDEMPOTENT_CREATE = "NAMED_REPLACEMENT_IDEMPOTENT_CREATE"
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


@dataclass
class Op:
    """One unit of work: a plan action on one logical id."""

    logical_id: str
    action: str  # create | update | replace | metadata | delete
    resource_type: str
    depends_on: set[str] = field(default_factory=set)
    # filled when it ran
    status: str = "pending"  # pending | running | done | failed | skipped
    previous: dict[str, Any] | None = None  # the row before (UPDATE/DELETE)
    row: dict[str, Any] | None = None  # the row after (None: removed)
    attempted: dict[str, Any] | None = None
    error: BaseException | None = None
    outcome: str = ""  # created | updated | unchanged | replaced | deleted | retained | skipped | metadata
    old_retained: bool = False
    skip_reason: str | None = None
    started: float = 0.0

    def duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000) if self.started else 0


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


class _Run:
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

    # -- one resource --------------------------------------------------------------------

    def _resolve(self, lid: str) -> dict[str, Any]:
        with self.rows_lock:
            snapshot = dict(self.rows)
        local = replace(self.rctx, resources=snapshot, imports=[], warnings=[])
        local.conditions = self.rctx.conditions
        resolver = Resolver(local)
        raw = self.resources[lid].get("Properties") or {}
        out: dict[str, Any] = {}
        for key, value in raw.items():
            resolved = resolver.resolve(value)
            if resolved is not NO_VALUE:
                out[key] = resolved
        with self.rows_lock:
            for entry in local.imports:
                if entry not in self.rctx.imports:
                    self.rctx.imports.append(entry)
        for w in local.warnings:
            self.ctx.log("warning", f"{lid}: {w}")
        return out

    def _ref(self, lid: str, row: dict[str, Any], properties: dict[str, Any] | None = None) -> ResourceRef:
        return ResourceRef(
            logical_id=lid,
            resource_type=str(row.get("resourceType")),
            physical_id=row.get("physicalId"),
            properties=properties if properties is not None else dict(row.get("properties") or {}),
            attributes=dict(row.get("attributes") or {}),
            region=self.region,
            account_id=self.account,
            provisioned_by=row.get("provisionedBy"),
        )

    def _provider(self, rtype: str, provisioned_by: str | None, lid: str) -> Any:
        provider = self.d.provider_for(rtype, provisioned_by)
        if provider is None or not hasattr(provider, "create"):
            raise ProviderError(f"{lid} ({rtype}): no provider can deploy this type")
        return provider

    def _call(self, op: Op, fn: Callable[[], Any], *, delete: bool = False) -> Any:
        """`fn()` with cdkd's retries for throttling and eventual consistency, bounded by the
        per-resource deadline."""
        policy = self.d.retry
        deadline = time.monotonic() + policy.resource_timeout
        attempt = 0
        while True:
            try:
                return fn()
            except ProviderError as exc:
                kind = retry_class(exc)
                if kind is None:
                    raise
                if delete:
                    limit, delay = policy.delete_retries, policy.delete_initial * (2**attempt)
                    cap = policy.delete_initial * 8
                elif kind == "iam":
                    limit, delay, cap = policy.iam_retries, policy.iam_initial * (2**attempt), policy.iam_cap
                else:
                    limit, delay, cap = policy.retries, policy.initial * (2**attempt), policy.cap
                if attempt >= limit or time.monotonic() >= deadline:
                    raise
                attempt += 1
                self.ctx.log("info", f"{op.logical_id}: retrying after {exc.aws_code or 'a transient error'}")
                self.d.sleep(min(delay, cap) * policy.scale)

    def _work(self, op: Op) -> None:
        lid = op.logical_id
        if op.action == "delete":
            return self._delete(op)
        template_resource = self.resources[lid]
        rtype = template_resource["Type"]
        if rtype == METADATA_TYPE:
            op.outcome = "unchanged"
            return None
        properties = self._resolve(lid)
        op.attempted = properties
        deps = template_dependencies(template_resource, set(self.resources), sub_variables=False)
        previous = op.previous
        if op.action == "create":
            provider = self._provider(rtype, None, lid)
            made = self._call(op, lambda: provider.create(self.clients, lid, rtype, properties, self.target))
            op.row = build_row(
                physical_id=made.physical_id,
                resource_type=rtype,
                properties=properties,
                attributes=made.attributes,
                dependencies=deps,
                template_resource=template_resource,
                provisioned_by=self._route(provider),
            )
            op.outcome = "created"
            return None
        assert previous is not None
        if op.action == "metadata" or (
            op.action == "update" and json_equal(properties, previous.get("properties") or {})
        ):
            row = dict(previous)
            for attribute, key in (
                ("DeletionPolicy", "deletionPolicy"),
                ("UpdateReplacePolicy", "updateReplacePolicy"),
            ):
                value = template_resource.get(attribute)
                if isinstance(value, str):
                    row[key] = value
                else:
                    row.pop(key, None)
            changed = row != previous
            op.row = row
            op.outcome = "metadata" if changed else "unchanged"
            return None
        if op.action == "update":
            provider = self._provider(rtype, previous.get("provisionedBy"), lid)
            ref = self._ref(lid, previous)
            updated = self._call(op, lambda: provider.update(self.clients, ref, properties, self.target))
            attributes = updated.attributes if updated.attributes is not None else previous.get("attributes")
            op.row = build_row(
                physical_id=updated.physical_id,
                resource_type=rtype,
                properties=properties,
                attributes=attributes,
                dependencies=deps,
                template_resource=template_resource,
                provisioned_by=self._route(provider),
            )
            op.outcome = "updated"
            return None
        return self._replace(op, rtype, properties, deps, template_resource, previous)

    def _route(self, provider: Any) -> str:
        return "cc-api" if getattr(provider, "types", None) == () else "sdk"

    def _replace(
        self,
        op: Op,
        rtype: str,
        properties: dict[str, Any],
        deps: list[str],
        template_resource: dict[str, Any],
        previous: dict[str, Any],
    ) -> None:
        lid = op.logical_id
        provider = self._provider(rtype, None, lid)
        try:
            made = self._call(op, lambda: provider.create(self.clients, lid, rtype, properties, self.target))
        except ProviderError as exc:
            if exc.aws_code == ALREADY_EXISTS_CODE or "already exists" in str(exc).lower():
                raise ProviderError(
                    f"{NAMED_REPLACEMENT_COLLISION}: {lid} ({rtype}) must be replaced, but the new resource's name is "
                    f"still held by the old one ({previous.get('physicalId')}); rename the resource, or give it a new "
                    f"logical id",
                    aws_code=NAMED_REPLACEMENT_COLLISION,
                ) from exc
            raise
        if made.physical_id == previous.get("physicalId"):
            raise ProviderError(
                f"{NAMED_REPLACEMENT_IDEMPOTENT_CREATE}: {lid} ({rtype}) must be replaced, but creating the new "
                f"resource returned the old one ({made.physical_id}); deleting the old one would delete the new one",
                aws_code=NAMED_REPLACEMENT_IDEMPOTENT_CREATE,
            )
        op.row = build_row(
            physical_id=made.physical_id,
            resource_type=rtype,
            properties=properties,
            attributes=made.attributes,
            dependencies=deps,
            template_resource=template_resource,
            provisioned_by=self._route(provider),
        )
        op.outcome = "replaced"
        policy = template_resource.get("UpdateReplacePolicy", previous.get("updateReplacePolicy"))
        if policy in RETAIN:
            op.old_retained = True
            return None
        old_provider = self.d.provider_for(str(previous.get("resourceType")), previous.get("provisionedBy"))
        try:
            old_ref = self._ref(lid, previous)
            self._call(op, lambda: old_provider.delete(self.clients, old_ref), delete=True)
        except (ProviderError, Skip) as exc:
            op.old_retained = True
            self.result.skipped.append(lid)  # cdkd counts an old resource left behind as partial (exit 2)
            self.result.warnings.append(
                f"{lid}: the replaced resource {previous.get('physicalId')} could not be deleted ({exc}); "
                "it is no longer tracked: delete it by hand"
            )
        return None

    def _delete(self, op: Op) -> None:
        row = op.previous or {}
        lid = op.logical_id
        policy = row.get("deletionPolicy")
        if policy is None:
            policy = (self.template.get("Resources") or {}).get(lid, {}).get("DeletionPolicy")
        if policy in RETAIN:
            op.row = None
            op.outcome = "retained"
            return None
        provider = self.d.provider_for(str(row.get("resourceType")), row.get("provisionedBy"))
        ref = self._ref(lid, row)
        try:
            self._call(op, lambda: provider.delete(self.clients, ref), delete=True)
        except Skip as exc:
            op.row = row  # kept, so the next deploy retries
            op.outcome = "skipped"
            op.skip_reason = str(exc)
            self.result.warnings.append(f"{lid}: delete skipped ({exc})")
            return None
        op.row = None
        op.outcome = "deleted"
        return None

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
