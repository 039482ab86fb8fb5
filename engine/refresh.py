"""The three commands that rewrite a record's baseline outside a deploy, as operations:

`refresh-observed` (cdkd's `cdkd state refresh-observed`)
  Reads every resource through its provider and records `observedProperties` (v3), masked
  by position: `***` wherever `noEchoLeaves` names a position or the record's own
  `properties` hold `***`, and the record's `{{resolve:...}}` reference wherever it holds
  one (the read-back there is the resolved secret). A resource carrying
  `observedBaselineRefused` (v10) is not read and keeps no baseline: reported in its own
  tally, as are the types no provider can read. A failed read keeps the resource's old
  baseline and makes the run partial (cdkd exits 2).

`drift-accept` (cdkd's `cdkd drift --accept`)
  Records the live values of each MODIFIED resource: its `observedProperties` become the
  read (masked as above), and each drifted property the template declared takes the live
  value in `properties` too (with the recorded value's scalar type), so the next
  `cdkd diff` of the unchanged template shows the deploy that would set it back. Masked
  positions are left alone (the rebuilt baseline holds `***` there). A DELETED resource is
  not accepted: a deletion is not a value; orphan the row (`state orphan --resource`).

`drift-revert` (cdkd's `cdkd drift --revert`)
  Writes the recorded values back through the provider's `update` (the recorded
  `properties`, or for an undeclared key the baseline's value), sending only what drifted;
  at a masked position it keeps AWS's value rather than sending the mask, and refuses the
  resource when AWS reports nothing there. It then reads the resource again and records
  that as its `observedProperties`. A DELETED resource is not re-created: an update needs a
  resource to update, and a deploy sees its row as unchanged. Orphan the row, then deploy
  to create it again.

Every one: refuses a damaged or newer record before the lock (reference: "refuse before the
lock (rows)"), takes the stack's cdkd lock (`state-refresh-observed`, `drift-accept`,
`drift-revert`), re-reads the record and refuses a stale plan (ETag, and for accept/revert
the drift itself), saves with `If-Match`, stamps `version: 11` (seed 000: a v11 binary
stamps 11 on every file it writes, these commands included; none of them adds
`noEchoLeaves`), refreshes `lastModified`, and drops `skippedOutputs` (seed 000: every
rebuild outside a deploy drops it; refresh-observed only on a run that refreshed at least
one resource, a run that refreshed nothing writes nothing). Every other field is carried as
read, `outputReads` and `conditionVerdicts` included (seed 000 lets these writers carry them).
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from engine.backend import StoredObject
from engine.deploy.intrinsics import partition_for
from engine.drift import (
    DEFAULT_CONCURRENCY,
    DELETED,
    MODIFIED,
    NOT_CHECKED,
    CountingClients,
    ResourceDrift,
    check_rows,
    is_mask,
    noecho_leaves,
    path_text,
    value_at,
)
from engine.errors import NotFound, PreconditionFailed, RecordRefused
from engine.masking import MASK
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register
from engine.providers import deploy_provider_for
from engine.providers.base import DeployTarget, ResourceRef, UpdateNeedsReplacement
from engine.schema import SUPPORTED_VERSION, dump_state, parse_state

WRITTEN_VERSION = SUPPORTED_VERSION


# --- masking a read-back by position ----------------------------------------------------------


def _set_at(document: Any, path: list[Any], value: Any) -> bool:
    node = document
    for seg in path[:-1]:
        found, node = value_at(node, [seg])
        if not found:
            return False
    last = path[-1]
    if isinstance(node, dict) and isinstance(last, str) and last in node:
        node[last] = value
        return True
    if isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node):
        node[last] = value
        return True
    return False


def _mask_positions(properties: Any, path: list[Any], out: list[tuple[list[Any], Any]]) -> None:
    """(path, stored value) of every `***` / `{{resolve:` leaf of the record's properties."""
    if isinstance(properties, dict):
        for key, value in properties.items():
            _mask_positions(value, [*path, key], out)
    elif isinstance(properties, list):
        for i, value in enumerate(properties):
            _mask_positions(value, [*path, i], out)
    elif is_mask(properties):
        out.append((path, properties))


def masked_readback(live: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The read-back as a baseline may hold it: never a value the record keeps masked."""
    out = copy.deepcopy(live)
    properties = row.get("properties") if isinstance(row.get("properties"), dict) else {}
    positions: list[tuple[list[Any], Any]] = []
    _mask_positions(properties, [], positions)
    for path, stored in positions:
        _set_at(out, path, MASK if MASK in stored else stored)
    for leaf in noecho_leaves(row):
        _set_at(out, leaf, MASK)
    return out


def _like(new: Any, old: Any) -> Any:
    """`new` with the recorded scalar type of `old` (45 stays 45, "45" stays "45")."""
    if isinstance(old, str) and isinstance(new, bool):
        return "true" if new else "false"
    if isinstance(old, str) and isinstance(new, int | float):
        return str(int(new)) if float(new).is_integer() else str(new)
    if isinstance(old, int | float) and not isinstance(old, bool) and isinstance(new, str):
        try:
            return int(new)
        except ValueError:
            return new
    return new


def _unmask(desired: Any, live: Any, path: list[Any]) -> Any:
    """`desired` with every masked leaf replaced by AWS's value there; KeyError when AWS
    reports nothing at a masked position (the resource is refused)."""
    if isinstance(desired, dict):
        return {k: _unmask(v, live, [*path, k]) for k, v in desired.items()}
    if isinstance(desired, list):
        return [_unmask(v, live, [*path, i]) for i, v in enumerate(desired)]
    if is_mask(desired):
        found, value = value_at(live, path)
        if not found or value is None:
            raise KeyError(path_text(path))
        return value
    return desired


# --- shared plumbing ----------------------------------------------------------------------


def _key(ctx: Context) -> str:
    if not ctx.region:
        raise OperationRefused(
            f"{ctx.stack}: a legacy record (no region in its key) must be migrated by a cdkd deploy first"
        )
    return ctx.layout.state_key(ctx.stack, ctx.region)


def _read(ctx: Context) -> tuple[StoredObject, Any]:
    """The record and its parse; refuses what no writer may touch (before any lock)."""
    key = _key(ctx)
    try:
        stored = ctx.bucket.get(key)
    except NotFound:
        raise OperationRefused(f"no state record for {ctx.stack} in {ctx.region} ({key})") from None
    parsed = parse_state(stored.body, key_region=ctx.region, stack_name=ctx.stack)
    if parsed.newer_than_supported:
        raise OperationRefused(
            f"{key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this app writes; it is "
            "read-only here"
        )
    if parsed.defects:
        listed = "; ".join(f"{d.path or '(root)'}: {d.code}" for d in parsed.defects)
        raise OperationRefused(f"{key} is damaged ({listed}); nothing is written on its strength. Repair it first")
    return stored, parsed


def _reread(ctx: Context, plan: Plan) -> tuple[StoredObject, Any]:
    try:
        stored, parsed = _read(ctx)
    except OperationRefused:
        found = _etag_now(ctx)
        if found != plan.etag:
            raise StalePlan(_key(ctx), plan.etag, found) from None
        raise
    if stored.etag != plan.etag:
        raise StalePlan(stored.key, plan.etag, stored.etag)
    return stored, parsed


def _etag_now(ctx: Context) -> str | None:
    try:
        return ctx.bucket.get(_key(ctx)).etag
    except NotFound:
        return None


def _wanted(ctx: Context, parsed: Any) -> list[tuple[str, dict[str, Any] | None]]:
    rows = parsed.resource_rows()
    only = ctx.params.get("resources")
    if not only:
        return rows
    if not isinstance(only, list) or not all(isinstance(i, str) for i in only):
        raise OperationRefused("resources must be a list of logical ids")
    known = {lid for lid, _ in rows}
    missing = [lid for lid in only if lid not in known]
    if missing:
        raise OperationRefused(f"not in {ctx.stack} ({ctx.region}): {', '.join(missing)}")
    return [(lid, row) for lid, row in rows if lid in set(only)]


def _check(ctx: Context, rows: list[tuple[str, dict[str, Any] | None]]) -> tuple[list[ResourceDrift], Any]:
    clients = CountingClients(ctx.bucket.session)
    concurrency = int(ctx.params.get("concurrency") or DEFAULT_CONCURRENCY)
    results = check_rows(
        clients, rows, region=ctx.region or "", account_id=ctx.bucket.account_id, concurrency=concurrency
    )
    return results, clients


def _save(ctx: Context, parsed: Any, stored: StoredObject, rows: dict[str, dict[str, Any]]) -> StoredObject:
    """Write the record with `rows` replaced, under the lock the caller holds, If-Match."""
    state = parsed.state
    resources = state.get("resources")
    for lid, row in rows.items():
        resources[lid] = row
    state.set("resources", resources)
    state.discard("skippedOutputs")
    state.set("lastModified", int(time.time() * 1000))
    try:
        body = dump_state(state, stack_name=ctx.stack, region=ctx.region or "", version=WRITTEN_VERSION)
    except RecordRefused as exc:
        raise OperationRefused(str(exc)) from None
    try:
        return ctx.bucket.put(stored.key, body, if_match=stored.etag)
    except (PreconditionFailed, NotFound):
        raise StalePlan(stored.key, stored.etag, _etag_now(ctx)) from None


def _with_baseline(row: dict[str, Any], observed: dict[str, Any]) -> dict[str, Any]:
    """The row with `observedProperties` replaced (kept in place when it was there)."""
    out = dict(row)
    out["observedProperties"] = observed
    return out


def _tallies(results: list[ResourceDrift]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in results:
        if r.status == NOT_CHECKED or r.status == DELETED:
            out.setdefault(r.reason or r.status, []).append(r.logical_id)
    return out


def _drift_lines(results: list[ResourceDrift], verb: str) -> list[str]:
    lines = []
    for r in results:
        for d in r.differences:
            expected = json.dumps(d["expected"], ensure_ascii=False)
            actual = json.dumps(d["actual"], ensure_ascii=False)
            if verb == "accept":
                lines.append(f"{r.logical_id}: {d['path']}: record {actual} (the record says {expected})")
            else:
                lines.append(f"{r.logical_id}: {d['path']}: set back to {expected} (AWS has {actual})")
    return lines


def _fingerprint(results: list[ResourceDrift]) -> dict[str, Any]:
    """What the approver saw (masked): the run refuses when the drift is no longer this."""
    return {r.logical_id: {"status": r.status, "differences": r.differences} for r in results if r.status == MODIFIED}


# --- refresh-observed ---------------------------------------------------------------------


class RefreshObserved:
    kind = "refresh-observed"
    label = "Refresh observed"
    cancellable = False

    def plan(self, ctx: Context) -> Plan:
        stored, parsed = _read(ctx)
        results, clients = _check(ctx, _wanted(ctx, parsed))
        readable = [r for r in results if r.live is not None]
        tallies = _tallies(results)
        changes = [
            f"{r.logical_id}: record observedProperties from a fresh read"
            + (f" ({len(r.drifted_keys)} top-level key(s) differ from the record)" if r.drifted_keys else "")
            for r in readable
        ]
        warnings = [f"{reason}: {', '.join(ids)}" for reason, ids in tallies.items()]
        if readable:
            changes.append("drop skippedOutputs (every save outside a deploy does)")
            changes.append(f"writes schema version {WRITTEN_VERSION} (as cdkd does on every write)")
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=stored.etag,
            summary=(
                f"Refresh the observed baseline of {len(readable)} of {len(results)} resource(s) of {ctx.stack} "
                f"({ctx.region}); AWS is only read"
            ),
            changes=changes,
            warnings=warnings,
            data={"refresh": [r.logical_id for r in readable], "tallies": tallies, "api_calls": clients.calls},
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        with ctx.held_lock("state-refresh-observed"):
            stored, parsed = _reread(ctx, plan)
            rows = dict(_wanted(ctx, parsed))
            results, clients = _check(ctx, list(rows.items()))
            updated = {
                r.logical_id: _with_baseline(
                    rows[r.logical_id] or {}, masked_readback(r.live, rows[r.logical_id] or {})
                )
                for r in results
                if r.live is not None
            }
            failed = [r.logical_id for r in results if r.error or r.status == DELETED]
            tallies = _tallies(results)
            written = _save(ctx, parsed, stored, updated) if updated else None
        for lid in updated:
            ctx.log("info", f"{lid}: observedProperties refreshed")
        status = "partial" if failed else "succeeded"
        summary = f"Refreshed observedProperties of {len(updated)} resource(s) of {ctx.stack} ({ctx.region})"
        if not updated:
            summary += "; nothing was refreshed, so the record was kept as it was"
        return Outcome(
            status=status,
            summary=summary,
            etag_before=plan.etag,
            etag_after=written.etag if written else plan.etag,
            details={"refreshed": list(updated), "failed": failed, "tallies": tallies, "api_calls": clients.calls},
            warnings=[f"{lid}: not refreshed (the read failed or the resource is gone)" for lid in failed],
        )


# --- accept and revert ---------------------------------------------------------------------


class _DriftWriter:
    kind = ""
    label = ""
    cancellable = False
    verb = ""

    def plan(self, ctx: Context) -> Plan:
        stored, parsed = _read(ctx)
        results, clients = _check(ctx, _wanted(ctx, parsed))
        modified = [r for r in results if r.status == MODIFIED]
        warnings = self._warnings(results)
        if not modified:
            raise OperationRefused(
                f"nothing to {self.verb}: no resource of {ctx.stack} ({ctx.region}) is MODIFIED"
                + (f" ({'; '.join(warnings)})" if warnings else "")
            )
        changes = _drift_lines(modified, self.verb)
        changes += self._more_changes(modified)
        changes.append("drop skippedOutputs (every save outside a deploy does)")
        changes.append(f"writes schema version {WRITTEN_VERSION} (as cdkd does on every write)")
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=stored.etag,
            summary=self._summary(ctx, modified),
            changes=changes,
            warnings=warnings,
            data={"drift": _fingerprint(results), "api_calls": clients.calls},
        )

    def _warnings(self, results: list[ResourceDrift]) -> list[str]:
        out = []
        for r in results:
            if r.status == DELETED:
                out.append(f"{r.logical_id}: DELETED in AWS; {self.deleted_advice}")
            elif r.error:
                out.append(f"{r.logical_id}: not checked ({r.detail}); left as it is")
            elif r.reason == "baselineRefused":
                out.append(f"{r.logical_id}: baselineRefused, so it is not read and not {self.verb}ed")
            if r.masked:
                out.append(f"{r.logical_id}: masked position(s) left alone: {', '.join(r.masked)}")
        return out

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        with ctx.held_lock(f"drift-{self.verb}"):
            stored, parsed = _reread(ctx, plan)
            planned = plan.data.get("drift") or {}
            rows = {lid: row for lid, row in _wanted(ctx, parsed) if lid in planned}
            results, clients = _check(ctx, list(rows.items()))
            if _fingerprint(results) != planned:
                raise OperationRefused(
                    f"the drift of {ctx.stack} ({ctx.region}) changed since the plan was computed; compute a new "
                    "plan and have it approved again"
                )
            updated, failed = self._apply(ctx, rows, results, clients)
            written = _save(ctx, parsed, stored, updated) if updated else None
        return Outcome(
            status="succeeded" if not failed else ("partial" if updated else "failed"),
            summary=f"{self.label}: {len(updated)} resource(s) of {ctx.stack} ({ctx.region})"
            + (f"; {len(failed)} failed" if failed else ""),
            etag_before=plan.etag,
            etag_after=written.etag if written else plan.etag,
            details={"done": list(updated), "failed": failed, "api_calls": clients.calls},
            warnings=list(failed.values()),
        )

    def _apply(self, ctx, rows, results, clients) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        raise NotImplementedError

    def _summary(self, ctx: Context, modified: list[ResourceDrift]) -> str:
        raise NotImplementedError

    def _more_changes(self, modified: list[ResourceDrift]) -> list[str]:
        return []


class DriftAccept(_DriftWriter):
    kind = "drift-accept"
    label = "Accept drift"
    verb = "accept"
    deleted_advice = "a deletion is not accepted; orphan the row (state orphan --resource) to stop tracking it"

    def _summary(self, ctx: Context, modified: list[ResourceDrift]) -> str:
        return (
            f"Record the live values of {len(modified)} drifted resource(s) of {ctx.stack} ({ctx.region}) as their "
            "baseline (observedProperties) and, for declared properties, in properties. AWS is only read; the next "
            "deploy of the unchanged template sets declared properties back"
        )

    def _apply(self, ctx, rows, results, clients):
        updated: dict[str, dict[str, Any]] = {}
        for r in results:
            if r.status != MODIFIED or r.live is None:
                continue
            row = dict(rows[r.logical_id] or {})
            observed = masked_readback(r.live, row)
            properties = dict(row.get("properties") or {})
            for key in r.drifted_keys:
                if key in properties and key in observed:
                    properties[key] = _like(observed[key], properties[key])
            row["properties"] = properties
            updated[r.logical_id] = _with_baseline(row, observed)
            ctx.log("info", f"{r.logical_id}: accepted {', '.join(r.drifted_keys)}")
        return updated, {}


class DriftRevert(_DriftWriter):
    kind = "drift-revert"
    label = "Revert drift"
    verb = "revert"
    deleted_advice = (
        "revert does not re-create it (an update needs a resource, and a deploy sees the row as unchanged): orphan "
        "the row, then deploy to create it again"
    )

    def _summary(self, ctx: Context, modified: list[ResourceDrift]) -> str:
        return (
            f"Write the recorded values of {len(modified)} drifted resource(s) of {ctx.stack} ({ctx.region}) back to "
            "AWS through each provider's update, then record a fresh read as their baseline"
        )

    def _more_changes(self, modified: list[ResourceDrift]) -> list[str]:
        return [f"{r.logical_id}: update in AWS, then re-read for observedProperties" for r in modified]

    def _apply(self, ctx, rows, results, clients):
        updated: dict[str, dict[str, Any]] = {}
        failed: dict[str, str] = {}
        target = DeployTarget(ctx.stack, ctx.region or "", ctx.bucket.account_id, partition_for(ctx.region or ""))
        for r in results:
            if r.status != MODIFIED or r.live is None:
                continue
            row = dict(rows[r.logical_id] or {})
            try:
                updated[r.logical_id] = self._revert(ctx, clients, r, row, target)
            except Exception as exc:  # one resource's failure; the others still go
                failed[r.logical_id] = f"{r.logical_id}: not reverted: {exc}"
                ctx.log("error", failed[r.logical_id])
        return updated, failed

    def _revert(self, ctx, clients, r: ResourceDrift, row: dict[str, Any], target: DeployTarget) -> dict[str, Any]:
        live = r.live or {}
        provider = deploy_provider_for(r.resource_type, row.get("provisionedBy"))
        if provider is None or not hasattr(provider, "update"):
            raise OperationRefused(f"no provider can update {r.resource_type}")
        properties = dict(row.get("properties") or {})
        observed = row.get("observedProperties") if isinstance(row.get("observedProperties"), dict) else {}
        desired, old = dict(properties), dict(properties)
        for key in r.drifted_keys:
            want = properties[key] if key in properties else observed.get(key)
            try:
                desired[key] = _unmask(want, live.get(key), [])
            except KeyError as exc:
                where = f"{key}.{exc.args[0]}" if exc.args[0] else key
                raise OperationRefused(
                    f"AWS reports nothing at the masked position {where}, so the value to keep there is unknown"
                ) from None
            old[key] = live.get(key)
        ref = ResourceRef(
            logical_id=r.logical_id,
            resource_type=r.resource_type,
            physical_id=row.get("physicalId"),
            properties=old,
            attributes=dict(row.get("attributes") or {}) if isinstance(row.get("attributes"), dict) else {},
            region=ctx.region or "",
            account_id=ctx.bucket.account_id,
            provisioned_by=row.get("provisionedBy"),
        )
        try:
            provider.update(clients, ref, desired, target)
        except UpdateNeedsReplacement as exc:
            raise OperationRefused(f"the change needs a replacement ({exc}); deploy the stack instead") from None
        ctx.log("info", f"{r.logical_id}: wrote {', '.join(r.drifted_keys)} back")
        fresh = provider.read(clients, ResourceRef(**{**ref.__dict__, "properties": properties}))
        if isinstance(fresh, dict):
            return _with_baseline(row, masked_readback(fresh, row))
        return row


register(RefreshObserved())
register(DriftAccept())
register(DriftRevert())
