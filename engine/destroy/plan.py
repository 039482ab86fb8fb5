"""Planning a destroy: pure reads, no lock (the `plan` half of the spec in `engine.destroy`)."""

from __future__ import annotations

from typing import Any

from engine.backend import StoredObject
from engine.destroy.common import (
    _TRIM_DROPS,
    ACTION_DELETE,
    ACTION_FAIL,
    ACTION_FAIL_SNAPSHOT,
    ACTION_GONE,
    ACTION_NESTED,
    ACTION_RETAIN,
    ACTION_SKIP,
    ACTION_SNAPSHOT,
    MAX_NESTING,
    NESTED_STACK_TYPE,
    _concurrency,
    _cross_digest,
    _digest,
    _physical_id_problem,
    _read,
    _ref,
    _residual_digest,
    _where,
)
from engine.destroy.consumers import _refuse_consumers, scan_consumers
from engine.destroy.seams import _require_providers, _skip_types
from engine.graph import CycleError, build_graph
from engine.keys import NESTED_SEPARATOR, child_stack_name
from engine.operations import Context, OperationRefused, Plan
from engine.schema import (
    SUPPORTED_VERSION,
    parse_state,
    version_line,
    write_version,
)


class Planner:
    """The plan half of `Destroy` (a mixin: `self.seams` is the operation's)."""

    # -- plan -------------------------------------------------------------------------------

    def plan(self, ctx: Context) -> Plan:
        if ctx.region is None:
            raise OperationRefused(
                f"{_where(ctx.stack, None)} is a legacy record: destroy needs a region-scoped record "
                f"(any cdkd deploy migrates it), or drop it with orphan"
            )
        if self.seams.defaults:
            _require_providers()
        key = ctx.layout.state_key(ctx.stack, ctx.region)
        stored = _read(ctx, key)
        if stored is None:
            raise OperationRefused(f"no state record at {key}: nothing to destroy")
        data, changes, warnings = self._plan_stack(ctx, ctx.stack, ctx.region, stored, depth=0)
        concurrency = _concurrency(ctx)
        skip_snapshot = bool(ctx.params.get("skip_final_snapshot"))
        data["concurrency"] = concurrency
        data["skip_final_snapshot"] = skip_snapshot
        tokens = ctx.layout.create_tokens_key(ctx.stack, ctx.region)
        journal = ctx.layout.rollback_journal_key(ctx.stack, ctx.region)
        changes += [
            f"when everything is gone: delete {tokens}, then {key} (If-Match), then {journal} with its "
            f"noncurrent versions, then {ctx.stack}'s entries of {ctx.layout.exports_index_key(ctx.region)}",
            "otherwise: the record stays, trimmed to what still exists (outputs cleared, imports dropped); it "
            + version_line(parse_state(stored.body).version, data["schema_version"]),
            f"record this run in {ctx.layout.events_prefix(ctx.stack, ctx.region)} (cdkd's event history)",
        ]
        parent = ctx.stack.rsplit(NESTED_SEPARATOR, 1)
        if len(parent) == 2 and all(parent):
            warnings.append(f"{ctx.stack} is a nested child: its parent {parent[0]}'s row {parent[1]} is left dangling")
        counts = _action_counts(data)
        summary = (
            f"Destroy {_where(ctx.stack, ctx.region)}: delete {counts['delete']} AWS resource(s)"
            + (f", keep {counts['retain']} (Retain)" if counts["retain"] else "")
            + (f", skip {counts['skip']}" if counts["skip"] else "")
            + (f", {counts['fail']} will fail" if counts["fail"] else "")
            + (f", {counts['nested']} nested stack(s) first" if counts["nested"] else "")
            + f"; up to {concurrency} at a time."
        )
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=stored.etag,
            summary=summary,
            changes=changes,
            warnings=warnings,
            data=data,
        )

    def _plan_stack(
        self, ctx: Context, stack: str, region: str, stored: StoredObject, *, depth: int
    ) -> tuple[dict[str, Any], list[str], list[str]]:
        """Plan one record. Raises OperationRefused (the caller turns a child's into a row failure)."""
        key = ctx.layout.state_key(stack, region)
        parsed = parse_state(stored.body, key_region=region, stack_name=stack)
        where = _where(stack, region)
        if parsed.newer_than_supported:
            raise OperationRefused(
                f"{key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this app knows; "
                f"it is read-only here"
            )
        if parsed.defects:
            first = parsed.defects[0]
            listed = ", ".join(f"{d.path or '(root)'}: {d.code}" for d in parsed.defects[:5])
            raise OperationRefused(
                f"{key} is damaged ({listed}); nothing is destroyed on its strength. {first.message}"
            )
        rows = {lid: row for lid, row in parsed.resource_rows() if row is not None}
        if parsed.region_mismatch and rows:
            raise OperationRefused(
                f"the body of {key} names a region ({parsed.body_region_kind}) other than its key's {region} while it "
                f"still lists resources; deleting in the wrong region would read every not-found as deleted. Correct "
                f"`region` to {region}, destroy where the resources are, or orphan the record"
            )
        outputs = parsed.outputs()
        warnings: list[str] = []
        scan = bool(outputs)
        if scan:
            # A plan may take the pipeline's mirror (no GET per record); `_accept` re-checks the bucket.
            finder = ctx.consumers or (lambda s, r: scan_consumers(ctx, s, r))
            consumers, unreadable = finder(stack, region)
            if consumers:
                raise _refuse_consumers(stack, region, consumers)
            warnings += [f"could not read {u}; skipped by the import check, as cdkd skips it" for u in unreadable]
        graph = build_graph(rows)
        try:
            levels = graph.deletion_levels()
        except CycleError as exc:
            raise OperationRefused(f"{where}: {exc}; cdkd cannot order such a record either") from None
        skip_snapshot = bool(ctx.params.get("skip_final_snapshot"))
        planned: dict[str, dict[str, Any]] = {}
        changes: list[str] = []
        indent = "  " * depth
        for lid in [lid for level in levels for lid in level]:
            row = rows[lid]
            entry = self._plan_row(ctx, stack, region, lid, row, skip_snapshot, depth)
            planned[lid] = entry
            changes.append(indent + _change_line(lid, entry))
            if entry.get("child"):
                changes += entry["child"].pop("_changes")
                warnings += entry["child"].pop("_warnings")
        for orphan in parsed.orphans():
            state = orphan.resource_state()
            warnings.append(
                f"{where}: the rollback-orphan {orphan.logicalId} ({state.resourceType if state else '?'}, physical id "
                f"{state.physicalId if state else '?'}) stays live in AWS and stops being tracked with the record"
            )
        for lid, entry in planned.items():
            if entry["action"] == ACTION_RETAIN:
                warnings.append(f"{where}: {lid} is kept in AWS (DeletionPolicy {entry['deletionPolicy']})")
        journal = ctx.layout.rollback_journal_key(stack, region)
        if _read(ctx, journal) is not None:
            warnings.append(
                f"{journal} exists: resources only a failed deploy's journal records are NOT deleted by this app "
                f"(cdkd destroy deletes them first); the journal is deleted with the record"
            )
        data = {
            "stack": stack,
            "region": region,
            "key": key,
            "etag": stored.etag,
            "levels": levels,
            "order": [lid for level in levels for lid in level],
            "rows": planned,
            "residual": _residual_digest(parsed.data),
            "cross": _cross_digest(parsed.data),
            "scan_imports": scan,
            # What a trimmed snapshot is stamped with: the record's version (it only loses fields).
            "schema_version": write_version({k: v for k, v in parsed.data.items() if k not in _TRIM_DROPS}),
        }
        return data, changes, warnings

    def _plan_row(
        self, ctx: Context, stack: str, region: str, lid: str, row: dict[str, Any], skip_snapshot: bool, depth: int
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "resourceType": row.get("resourceType"),
            "physicalId": row.get("physicalId") if isinstance(row.get("physicalId"), str) else None,
            "provisionedBy": row.get("provisionedBy") if isinstance(row.get("provisionedBy"), str) else None,
            "deletionPolicy": row.get("deletionPolicy") if isinstance(row.get("deletionPolicy"), str) else None,
            "digest": _digest(row),
        }
        policy = entry["deletionPolicy"]
        if policy in ("Retain", "RetainExceptOnCreate"):
            entry["action"] = ACTION_RETAIN
            return entry
        if entry["resourceType"] == NESTED_STACK_TYPE:
            # Exempt from the physical-id check: the child is found by name (seed 004).
            try:
                child = child_stack_name(stack, lid)
            except ValueError as exc:  # a logical id holding `~` or `/` names no child record
                entry.update(action=ACTION_FAIL, reason=f"nested stack row {lid} names no child record: {exc}")
                return entry
            entry.update(self._plan_child(ctx, child, region, depth + 1))
            return entry
        problem = _physical_id_problem(row)
        if problem is None:
            ref = _ref(ctx, region, lid, row)
            try:
                problem = self.seams.precheck(ref)
            except _skip_types() as exc:
                problem = str(getattr(exc, "reason", None) or exc)
        if problem is not None:
            entry["action"] = ACTION_SKIP
            entry["reason"] = problem
            return entry
        if policy == "Snapshot" and not skip_snapshot:
            if self.seams.supports_snapshot(_ref(ctx, region, lid, row)):
                entry["action"] = ACTION_SNAPSHOT
            else:
                entry["action"] = ACTION_FAIL_SNAPSHOT
                entry["reason"] = (
                    f"DeletionPolicy Snapshot: a final snapshot of {entry['resourceType']} cannot be taken here, so "
                    f"the delete is refused as CloudFormation refuses it; delete with skip_final_snapshot to drop "
                    f"the data, or remove the policy"
                )
            return entry
        entry["action"] = ACTION_DELETE
        return entry

    def _plan_child(self, ctx: Context, child: str, region: str, depth: int) -> dict[str, Any]:
        if depth > MAX_NESTING:
            return {"action": ACTION_FAIL, "reason": f"nested stack {child} is nested deeper than {MAX_NESTING}"}
        key = ctx.layout.state_key(child, region)
        stored = _read(ctx, key)
        if stored is None:
            return {"action": ACTION_GONE, "reason": f"the child record {key} is already gone", "childStack": child}
        try:
            data, changes, warnings = self._plan_stack(ctx, child, region, stored, depth=depth)
        except OperationRefused as exc:
            return {"action": ACTION_FAIL, "reason": f"nested stack {child} refused: {exc}", "childStack": child}
        data["_changes"] = changes
        data["_warnings"] = warnings
        return {"action": ACTION_NESTED, "childStack": child, "child": data}


def _change_line(lid: str, entry: dict[str, Any]) -> str:
    what = f"{lid} ({entry['resourceType']}" + (
        f", physical id {entry['physicalId']!r})" if entry["physicalId"] else ")"
    )
    action = entry["action"]
    if action == ACTION_DELETE:
        return f"delete {what}"
    if action == ACTION_SNAPSHOT:
        return f"take a final snapshot of {what}, then delete it"
    if action == ACTION_FAIL_SNAPSHOT:
        return f"FAIL {what}: {entry['reason']}"
    if action == ACTION_RETAIN:
        return f"keep {what} in AWS (DeletionPolicy {entry['deletionPolicy']}); its row goes with the record"
    if action == ACTION_SKIP:
        return f"skip {what}: {entry['reason']}; no AWS call, its row stays"
    if action == ACTION_NESTED:
        return f"destroy the nested stack {entry['childStack']} first ({what}):"
    if action == ACTION_GONE:
        return f"{what}: {entry['reason']}; counts as deleted"
    return f"FAIL {what}: {entry['reason']}"


def _action_counts(data: dict[str, Any]) -> dict[str, int]:
    counts = {"delete": 0, "retain": 0, "skip": 0, "fail": 0, "nested": 0}
    for entry in data["rows"].values():
        action = entry["action"]
        if action in (ACTION_DELETE, ACTION_SNAPSHOT, ACTION_GONE):
            counts["delete"] += 1
        elif action == ACTION_RETAIN:
            counts["retain"] += 1
        elif action == ACTION_SKIP:
            counts["skip"] += 1
        elif action in (ACTION_FAIL, ACTION_FAIL_SNAPSHOT):
            counts["fail"] += 1
        elif action == ACTION_NESTED:
            counts["nested"] += 1
            for key, value in _action_counts(entry["child"]).items():
                counts[key] += value
    return counts
