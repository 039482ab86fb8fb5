"""One resource of a deploy run (engine.deploy.run): its properties resolved against the
rows the run has written so far, the provider's create, update or delete under cdkd's
retries and per-resource deadline, a replacement (create first, then delete the old one
unless `UpdateReplacePolicy` keeps it) and a delete that honours `DeletionPolicy`.

`ResourceWork` is a mixin of the run (`engine.deploy.run._Run`): it reads the run's
context, rows and resolution context, and writes only to the `Op` it is given (plus the
run's warnings and skipped list); the run's scheduler settles and saves each finished op.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from engine.deploy.intrinsics import NO_VALUE, Resolver, json_equal
from engine.deploy.plan import METADATA_TYPE
from engine.deploy.retry import retry_class
from engine.deploy.rows import build_row, template_dependencies
from engine.providers import Skip
from engine.providers.base import ALREADY_EXISTS_CODE, DeployTarget, ProviderError, ResourceRef

if TYPE_CHECKING:
    from engine.deploy.intrinsics import Context as ResolveContext
    from engine.deploy.run import Deployer, DeployResult
    from engine.operations import Context

RETAIN = frozenset({"Retain", "RetainExceptOnCreate"})
NAMED_REPLACEMENT_COLLISION = "NAMED_REPLACEMENT_COLLISION"
NAMED_REPLACEMENT_IDEMPOTENT_CREATE = "NAMED_REPLACEMENT_IDEMPOTENT_CREATE"


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


class ResourceWork:
    """The per-resource half of `_Run`; the attributes below are the run's, set by it."""

    d: Deployer
    ctx: Context
    clients: Any
    account: str
    region: str
    target: DeployTarget
    template: dict[str, Any]
    resources: dict[str, dict[str, Any]]
    rows: dict[str, dict[str, Any]]
    rows_lock: threading.Lock
    rctx: ResolveContext
    result: DeployResult

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
