"""Planning a destroy: pure reads, no lock (the `plan` half of the spec in `engine.destroy`)."""

from __future__ import annotations

from dataclasses import dataclass
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
from engine.destroy.consumers import _refuse_consumers, scan_consumers, scan_holders
from engine.destroy.journal import journal_only_rows
from engine.destroy.ordering import destroy_graph
from engine.destroy.protection import Protection, looks_protected
from engine.destroy.retry import Deadlines, duration_text, is_custom_resource
from engine.destroy.seams import _require_providers, _skip_types
from engine.graph import CycleError
from engine.keys import NESTED_SEPARATOR, child_stack_name
from engine.operations import Context, OperationRefused, Plan
from engine.schema import (
    SUPPORTED_VERSION,
    parse_state,
    version_line,
    write_version,
)

# Types whose physical ids AWS never hands out twice (an instance id, a load balancer's ARN
# with its random suffix): seed 004's proof that a journal-only resource is still the one
# the failed deploy created.
NEVER_REUSED_IDS = frozenset({"AWS::EC2::Instance", "AWS::ElasticLoadBalancingV2::LoadBalancer"})


@dataclass(frozen=True)
class PlanOptions:
    """The run-wide choices a plan fixes (params -> plan data; shown to the approver)."""

    skip_final_snapshot: bool
    remove_protection: bool
    protection: Protection | None  # the seam, when the providers offer it
    deadlines: Deadlines

    def protects(self, resource_type: Any) -> bool:
        return self.protection is not None and resource_type in self.protection.types

    def as_data(self) -> dict[str, Any]:
        return {
            "skip_final_snapshot": self.skip_final_snapshot,
            "remove_protection": self.remove_protection,
            "resource_timeout": dict(self.deadlines.timeout),
            "resource_warn_after": dict(self.deadlines.warn_after),
        }


def _flag(ctx: Context, name: str) -> bool:
    value = ctx.params.get(name, False)
    if not isinstance(value, bool):
        raise OperationRefused(f"{name} must be true or false, got {value!r}")
    return value


class Planner:
    """The plan half of `Destroy` (a mixin: `self.seams` is the operation's)."""

    def _options(self, ctx: Context) -> PlanOptions:
        remove = _flag(ctx, "remove_protection")
        protection = self.seams.protection()
        if remove and protection is None:
            raise OperationRefused(
                "remove protection is not available: the resource providers do not implement reading and turning "
                "off deletion protection yet (engine.providers.PROTECTION_TYPES / read_protection / set_protection)"
            )
        return PlanOptions(
            skip_final_snapshot=_flag(ctx, "skip_final_snapshot"),
            remove_protection=remove,
            protection=protection,
            deadlines=Deadlines.from_params(ctx.params),
        )

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
        concurrency = _concurrency(ctx)
        opts = self._options(ctx)
        data, changes, warnings = self._plan_stack(ctx, ctx.stack, ctx.region, stored, opts, depth=0)
        data["concurrency"] = concurrency
        data["skip_final_snapshot"] = opts.skip_final_snapshot
        data["remove_protection"] = opts.remove_protection
        data["deadlines"] = opts.deadlines.as_data()
        data["retry_delays"] = list(self.retry_delays)
        data["options"] = opts.as_data()
        changes += _option_lines(data, opts, self.retry_delays)
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
            + (f", {counts['journal']} only the rollback journal records first" if counts["journal"] else "")
            + f"; up to {concurrency} at a time"
            + (f"; options: {', '.join(chosen)}" if (chosen := _chosen(opts)) else "")
            + "."
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
        self, ctx: Context, stack: str, region: str, stored: StoredObject, opts: PlanOptions, *, depth: int
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
        graph, dropped = destroy_graph(rows)
        try:
            levels = graph.deletion_levels()
        except CycleError as exc:
            raise OperationRefused(f"{where}: {exc}; cdkd cannot order such a record either") from None
        for first, then in dropped:
            warnings.append(
                f"{where}: the implicit order {first} before {then} (by their types) is left out: the record's own "
                f"references order them the other way"
            )
        planned: dict[str, dict[str, Any]] = {}
        changes: list[str] = []
        indent = "  " * depth
        # Resources only the rollback journal records go first (seed 004), each on its journaled policy.
        journal = ctx.layout.rollback_journal_key(stack, region)
        journal_stored = _read(ctx, journal)
        journal_rows, journal_warnings = journal_only_rows(journal_stored, rows)
        warnings += [f"{where}: {w}" for w in journal_warnings]
        planned_journal: dict[str, dict[str, Any]] = {}
        protected = {
            jkey
            for jkey, jrow in journal_rows.items()
            if jrow["resourceType"] in (opts.protection.types if opts.protection else ())
            or looks_protected(jrow["properties"])
        }
        proofs = self._journal_proofs(ctx, stack, region, journal_rows, protected, opts)
        for jkey, jrow in journal_rows.items():
            entry = self._plan_row(ctx, stack, region, jrow["logicalId"], jrow, opts, depth, journal=True)
            entry["logicalId"] = jrow["logicalId"]
            entry["journal"] = True
            proof, why_not = proofs.get(jkey, (None, None))
            if proof and entry["action"] in (ACTION_DELETE, ACTION_SNAPSHOT):
                entry["removeProtection"] = True
                entry["protectionProof"] = proof
            planned_journal[jkey] = entry
            changes.append(indent + _change_line(jkey, entry))
            if jkey in protected and not entry.get("removeProtection"):
                warnings.append(
                    f"{where}: {jrow['logicalId']} ({entry['resourceType']}) is only in the rollback journal: its "
                    f"protection stays on ({why_not or 'remove protection was not asked for'}); a protected one's "
                    f"delete fails and the journal keeps it for a re-run"
                )
        for lid in [lid for level in levels for lid in level]:
            row = rows[lid]
            entry = self._plan_row(ctx, stack, region, lid, row, opts, depth)
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
            if (
                entry.get("looksProtected")
                and not entry.get("removeProtection")
                and entry["action"] in (ACTION_DELETE, ACTION_SNAPSHOT)
            ):
                warnings.append(
                    f"{where}: {lid} ({entry['resourceType']}) looks protected in state; without remove protection "
                    f"AWS refuses its delete"
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
            "journal": {
                "key": journal,
                "etag": journal_stored.etag if journal_stored is not None else None,
                "rows": planned_journal,
                "order": list(planned_journal),
            },
            # What a trimmed snapshot is stamped with: the record's version (it only loses fields).
            "schema_version": write_version({k: v for k, v in parsed.data.items() if k not in _TRIM_DROPS}),
        }
        return data, changes, warnings

    def _journal_proofs(
        self,
        ctx: Context,
        stack: str,
        region: str,
        journal_rows: dict[str, dict[str, Any]],
        protected: set[str],
        opts: PlanOptions,
    ) -> dict[str, tuple[str | None, str | None]]:
        """Seed 004: with remove protection, a protected resource only the journal records has
        its protection turned off only when it provably is the one the failed deploy made (its
        type's ids are never reused) and no other stack's record holds it now. {key: (proof,
        None) or (None, why not)} for the protected rows; a live-read proof is not attempted,
        so a type whose names can be reused keeps its protection."""
        if not opts.remove_protection or not protected:
            return {}
        out: dict[str, tuple[str | None, str | None]] = {}
        ids: dict[str, str] = {}
        for jkey in protected:
            row = journal_rows[jkey]
            pid = row.get("physicalId")
            if row["resourceType"] not in NEVER_REUSED_IDS or not isinstance(pid, str) or not pid:
                out[jkey] = (None, "nothing proves it is still the resource the failed deploy created: its type's "
                             "names can be taken again")  # fmt: skip
            else:
                ids[jkey] = pid
        if ids:
            finder = ctx.holders or (lambda s, r, p: scan_holders(ctx, s, r, p))
            held, unreadable = finder(stack, region, set(ids.values()))
            for jkey, pid in ids.items():
                if held.get(pid):
                    out[jkey] = (None, f"another stack's record holds {pid} now: {', '.join(sorted(held[pid])[:3])}")
                elif unreadable:
                    out[jkey] = (None, f"records that cannot be read may hold it: {', '.join(unreadable[:3])}")
                else:
                    out[jkey] = ("its type's ids are never reused, and no other stack's record holds it", None)
        return out

    def _plan_row(
        self,
        ctx: Context,
        stack: str,
        region: str,
        lid: str,
        row: dict[str, Any],
        opts: PlanOptions,
        depth: int,
        *,
        journal: bool = False,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "resourceType": row.get("resourceType"),
            "physicalId": row.get("physicalId") if isinstance(row.get("physicalId"), str) else None,
            "provisionedBy": row.get("provisionedBy") if isinstance(row.get("provisionedBy"), str) else None,
            "deletionPolicy": row.get("deletionPolicy") if isinstance(row.get("deletionPolicy"), str) else None,
            "digest": _digest(row),
        }
        policy = entry["deletionPolicy"]
        # RetainExceptOnCreate deletes what a failed CREATE made (seed 004's policy matrix)
        if policy == "Retain" or (policy == "RetainExceptOnCreate" and not journal):
            entry["action"] = ACTION_RETAIN
            return entry
        if looks_protected(row.get("properties")):
            entry["looksProtected"] = True
        if opts.remove_protection and opts.protects(entry["resourceType"]) and not journal:
            entry["removeProtection"] = True
        if is_custom_resource(entry["resourceType"]) or entry["resourceType"] == NESTED_STACK_TYPE:
            entry["noRetry"] = True  # cdkd's disableOuterRetry: their own protocol waits
        if journal and entry["resourceType"] == NESTED_STACK_TYPE:
            entry.update(
                action=ACTION_SKIP,
                reason="a nested stack only the rollback journal records is not destroyed here; roll it back with cdkd",
            )
            return entry
        if entry["resourceType"] == NESTED_STACK_TYPE:
            # Exempt from the physical-id check: the child is found by name (seed 004).
            try:
                child = child_stack_name(stack, lid)
            except ValueError as exc:  # a logical id holding `~` or `/` names no child record
                entry.update(action=ACTION_FAIL, reason=f"nested stack row {lid} names no child record: {exc}")
                return entry
            entry.update(self._plan_child(ctx, child, region, opts, depth + 1))
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
        if policy == "Snapshot" and not opts.skip_final_snapshot:
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

    def _plan_child(self, ctx: Context, child: str, region: str, opts: PlanOptions, depth: int) -> dict[str, Any]:
        if depth > MAX_NESTING:
            return {"action": ACTION_FAIL, "reason": f"nested stack {child} is nested deeper than {MAX_NESTING}"}
        key = ctx.layout.state_key(child, region)
        stored = _read(ctx, key)
        if stored is None:
            return {"action": ACTION_GONE, "reason": f"the child record {key} is already gone", "childStack": child}
        try:
            data, changes, warnings = self._plan_stack(ctx, child, region, stored, opts, depth=depth)
        except OperationRefused as exc:
            return {"action": ACTION_FAIL, "reason": f"nested stack {child} refused: {exc}", "childStack": child}
        data["_changes"] = changes
        data["_warnings"] = warnings
        return {"action": ACTION_NESTED, "childStack": child, "child": data}


def _change_line(lid: str, entry: dict[str, Any]) -> str:
    what = f"{lid} ({entry['resourceType']}" + (
        f", physical id {entry['physicalId']!r})" if entry["physicalId"] else ")"
    )
    if entry.get("journal"):
        what = f"{what} (only in the rollback journal: a failed create made it)"
    action = entry["action"]
    off = "turn its protection off, then " if entry.get("removeProtection") else ""
    if action == ACTION_DELETE:
        return f"{off}delete {what}"
    if action == ACTION_SNAPSHOT:
        return f"{off}take a final snapshot of {what}, then delete it"
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


def _chosen(opts: PlanOptions) -> list[str]:
    return [
        name
        for name, on in (
            ("skip final snapshot", opts.skip_final_snapshot),
            ("remove protection", opts.remove_protection),
        )
        if on
    ]


def _walk_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every planned row of the record and its nested children (journal rows included)."""
    rows = list((data.get("journal") or {}).get("rows", {}).values()) + list(data["rows"].values())
    for entry in list(data["rows"].values()):
        if entry.get("child"):
            rows += _walk_rows(entry["child"])
    return rows


def _option_lines(data: dict[str, Any], opts: PlanOptions, delays: tuple[float, ...]) -> list[str]:
    """What the run-wide options do to this plan, for the approver."""
    rows = _walk_rows(data)
    lines: list[str] = []
    if opts.remove_protection:
        flipped = [e for e in rows if e.get("removeProtection")]
        looking = sum(1 for e in flipped if e.get("looksProtected"))
        lines.append(
            f"option remove protection: turn deletion protection off on {len(flipped)} resource(s) of the "
            f"protection-bearing types right before each delete ({looking} look protected in state); each guard is "
            f"read first and turned on again when its delete fails"
        )
    if opts.skip_final_snapshot:
        dropped = [e for e in rows if e.get("deletionPolicy") == "Snapshot" and e["action"] == ACTION_DELETE]
        lines.append(
            f"option skip final snapshot: {len(dropped)} resource(s) with DeletionPolicy Snapshot are deleted "
            f"without a final snapshot: their data is gone"
        )
    warn, timeout = opts.deadlines.for_type("")
    special = sorted(k for k in {**opts.deadlines.timeout, **opts.deadlines.warn_after} if k != "default")
    waits = ", ".join(duration_text(d) for d in delays) or "none"
    lines.append(
        f"each delete: up to {len(delays)} retries of a transient error (waits {waits}); warned after "
        f"{duration_text(warn)}, failed after {duration_text(timeout)} (resource timeout)"
        + (f"; own deadlines for {', '.join(special)}" if special else "")
    )
    return lines


def _action_counts(data: dict[str, Any]) -> dict[str, int]:
    counts = {"delete": 0, "retain": 0, "skip": 0, "fail": 0, "nested": 0, "journal": 0}
    journal_rows = (data.get("journal") or {}).get("rows", {})
    counts["journal"] = len(journal_rows)
    for entry in [*journal_rows.values(), *data["rows"].values()]:
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
