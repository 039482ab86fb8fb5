"""The `scrub` operation kind (engine.operations): plan and execute."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from engine.backend import StoredObject
from engine.errors import EngineError, NotFound, PreconditionFailed, RecordRefused
from engine.keys import EXPORTS_INDEX_DIR
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register
from engine.schema import (
    dump_state,
    js_stringify,
    version_line,
    write_version,
)
from engine.scrub.exports import INDEX_ATTEMPTS, _index_keys, _index_patch
from engine.scrub.history import object_lock_enabled, purge_noncurrent, replication_destinations
from engine.scrub.predict import replacements
from engine.scrub.rewrite import Derivation, _render
from engine.scrub.scanner import ScanResult, scan, secret_regions
from engine.scrub.tree import Deriver, StackScrub, load_artifact
from engine.secrets import (
    SecretIndex,
    collect,
)

ROTATE = (
    "ROTATE every secret that was found: scrubbing removes the copies from the state bucket, but anyone who "
    "could read it may already hold the values."
)

KEEP, PURGE_REWRITTEN, PURGE_ALL = "keep", "purge-rewritten", "purge-all"

# --- the operation --------------------------------------------------------------------------------


def history_mode(params: dict[str, Any]) -> str:
    """cdkd purges the history of each state.json it rewrites (the default here); keep
    history opts out; purge history extends it to every key that held a finding."""
    keep, purge = bool(params.get("keep_history")), bool(params.get("purge_history"))
    if keep and purge:
        raise OperationRefused("keep history and purge history contradict each other: choose one")
    return KEEP if keep else PURGE_ALL if purge else PURGE_REWRITTEN


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _rewrite_line(key: str, r: dict[str, Any]) -> str:
    return f"{key}: {_render(r['path'])} -> {_show(r['to'])} ({r['source']})"


def diff_lines(stacks: list[StackScrub], basis: str) -> list[str]:
    """One line per rewritten property (or output): what cdkd's next diff reports for it."""
    lines: list[str] = []
    for s in stacks:
        seen: set[tuple[str, ...]] = set()
        for p in s.predicted:
            if "property" in p:
                ident: tuple[str, ...] = ("p", p["logicalId"], p["property"])
                where = f"{p['logicalId']}.{p['property']}"
            elif "output" in p:
                ident, where = ("o", p["output"]), f"output {p['output']}"
            else:
                ident, where = ("x", _render(p["path"])), _render(p["path"])
            if ident in seen:
                continue
            seen.add(ident)
            lines.append(f"{s.key}: cdkd's next diff: {where}: {p['diff']} (predicted against {basis})")
    return lines


def _index_for(ctx: Context, regions: list[str]) -> SecretIndex:
    return collect(ctx.bucket.session, ctx.bucket.account_id, regions)


class Scrub:
    kind = "scrub"
    label = "Scrub secrets"
    cancellable = False

    def _key(self, ctx: Context) -> str:
        if ctx.region is None:
            raise OperationRefused(
                "scrub needs a region-scoped record; a legacy record must be migrated by a cdkd deploy first"
            )
        return ctx.layout.state_key(ctx.stack, ctx.region)

    def _survey(self, ctx: Context) -> tuple[StoredObject, SecretIndex, ScanResult, list[str]]:
        """The current record, the secrets, a scan of every key of the stack with history
        and the exports index keys."""
        key = self._key(ctx)
        try:
            stored = ctx.bucket.get(key)
        except NotFound:
            raise OperationRefused(f"no state record at {key}: nothing to scrub") from None
        index_keys = _index_keys(ctx.bucket, ctx.layout)
        regions = secret_regions(
            ctx.bucket,
            [ctx.region, *(ctx.layout.parse(k).region for k in index_keys)],  # type: ignore[union-attr]
        )
        index = _index_for(ctx, regions)
        result = scan(ctx.bucket, ctx.layout, stacks=[ctx.stack], region=ctx.region, index=index, history=True)
        return stored, index, result, index_keys

    def plan(self, ctx: Context) -> Plan:
        mode = history_mode(ctx.params)
        stored, index, result, index_keys = self._survey(ctx)
        assembly, artifact = load_artifact(ctx)
        deriver = Deriver(ctx, index, artifact)
        top = deriver.tree(stored)
        derived = top.derived
        key = stored.key
        stacks = top.flat()
        changes: list[str] = []
        for s in stacks:
            changes += [
                f"{s.key}: {_render(r['path'])} -> {_show(r['to'])} ({r['source']})" for r in s.derived.rewrites
            ]
        index_changes = self._index_changes(ctx, index, index_keys, derived.outputs)
        for item in index_changes:
            changes.append(f"{item['key']}: exports {', '.join(item['entries'])} -> the new output value(s)")
        versions: dict[str, int | None] = {}
        for s in stacks:
            state = s.derived.state
            if state is None or not s.derived.rewrites:
                versions[s.stack] = None
                continue
            if state.has("skippedOutputs"):
                changes.append(f"{s.key}: drop skippedOutputs (every save outside a deploy does)")
            versions[s.stack] = write_version(state)
            changes.append(f"{s.key}: {version_line(state.version, versions[s.stack])}")
        if derived.state is not None and derived.state.has("skippedOutputs") and index_changes and not derived.rewrites:
            changes.append(f"{key}: drop skippedOutputs (every save outside a deploy does)")
        changes += diff_lines(stacks, deriver.basis)
        consent = self._consent(ctx, stacks, deriver.basis)
        if consent:
            changes.append(consent["line"])
        rewritten = [s.key for s in stacks if s.derived.rewrites]
        patched = [i["key"] for i in index_changes]
        if mode == KEEP:
            purge_keys: list[str] = []
        elif mode == PURGE_ALL:
            purge_keys = sorted({f.key for f in result.findings} | set(rewritten) | set(patched))
        else:
            purge_keys = sorted(set(rewritten) | set(patched))
        warnings = list(index.warnings) + (list(deriver.values.warnings) if deriver.values else [])
        left = self._left(result, derived, key) + [
            f"{s.key}: {_render(item['path'])} ({item['source']}; {item['why']})"
            for s in stacks[1:]
            for item in s.derived.left
        ]
        history = [f for f in result.findings if f.versionId is not None and f.key not in purge_keys]
        for k in purge_keys:
            changes.append(f"{k}: delete every noncurrent version (the current one stays)")
        if mode == KEEP and rewritten:
            warnings.append(
                f"history is kept: the pre-scrub body of {', '.join(rewritten)} stays readable by version id "
                "(cdkd's scrub purges it)"
            )
        if history:
            warnings.append(
                f"{len(history)} finding(s) in {len({(f.key, f.versionId) for f in history})} noncurrent version(s) "
                f"stay readable by version id unless history is purged (purge_history)"
            )
        warnings += [f"left as is: {line}" for line in left]
        count = sum(len(s.derived.rewrites) for s in stacks)
        if not count and not index_changes and not purge_keys:
            summary = f"No secret to scrub in the current record of {ctx.stack} ({ctx.region})."
        else:
            summary = (
                f"Scrub {count} secret value(s) from the current record of {ctx.stack} ({ctx.region})"
                + (f" and {len(stacks) - 1} nested child record(s)" if len(stacks) > 1 else "")
                + (" as the app's template says" if artifact else "")
                + f", patch {sum(len(i['entries']) for i in index_changes)} exports index entr(y/ies)"
                + (f" and purge the noncurrent versions of {len(purge_keys)} key(s)" if purge_keys else "")
                + (", keeping history" if mode == KEEP else "")
                + f". {ROTATE}"
            )
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=stored.etag,
            summary=summary,
            changes=changes,
            warnings=warnings,
            data={
                "key": key,
                "rewrites": derived.rewrites,
                "index": index_changes,
                "history": mode,
                "purge_history": mode == PURGE_ALL,
                "keep_history": mode == KEEP,
                "purge": purge_keys,
                "regions": list(index.regions),
                "left": left,
                "sources": sorted({f.source for f in result.findings}),
                "history_findings": len(history),
                "schema_version": versions.get(ctx.stack),
                "assembly": assembly.digest if assembly else None,
                "prediction_basis": deriver.basis,
                "predicted": top.predicted,
                "replacements": consent["replacements"] if consent else [],
                "allow_replacement": bool(ctx.params.get("allow_replacement")),
                "no_echo_leaves": derived.template.no_echo_leaves if derived.template is not None else {},
                "children": [
                    {
                        "stack": s.stack,
                        "key": s.key,
                        "etag": s.stored.etag,
                        "depth": s.depth,
                        "rewrites": s.derived.rewrites,
                        "predicted": s.predicted,
                        "schema_version": versions.get(s.stack),
                    }
                    for s in stacks[1:]
                ],
            },
        )

    def _consent(self, ctx: Context, stacks: list[StackScrub], basis: str) -> dict[str, Any] | None:
        """The replacements cdkd's next diff would make; refuses them unless allowed."""
        found = [{"stack": s.stack, **r} for s in stacks for r in replacements(s.predicted)]
        if not found:
            return None
        named = "; ".join(
            f"{r['stack']}: {r['logicalId']} ({r['resourceType']}: {', '.join(r['properties'])})" for r in found
        )
        if not ctx.params.get("allow_replacement"):
            raise OperationRefused(
                f"after this rewrite cdkd's next diff would REPLACE {len(found)} resource(s), predicted against "
                f"{basis}: {named}. Scrub with the app's assembly (its own references read as no change), or allow the "
                f"replacement explicitly (--allow-replacement; the web form's Allow replacement tick)"
            )
        return {
            "replacements": found,
            "line": f"consented (allow replacement): cdkd's next diff replaces {named}",
        }

    def _index_changes(
        self, ctx: Context, index: SecretIndex, index_keys: list[str], outputs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        changes = []
        for k in index_keys:
            try:
                stored = ctx.bucket.get(k)
            except NotFound:
                continue
            _, names, _ = _index_patch(index, stored, ctx.stack, ctx.region or "", outputs)
            if names:
                changes.append({"key": k, "entries": names})
        return changes

    def _left(self, result: ScanResult, derived: Derivation, key: str) -> list[str]:
        """Lines for findings in CURRENT objects that scrub does not rewrite."""
        lines = [f"{key}: {_render(item['path'])} ({item['source']}; {item['why']})" for item in derived.left]
        for f in result.findings:
            if f.versionId is not None or f.key == key:
                continue
            kind = "exports index" if f"/{EXPORTS_INDEX_DIR}/" in f.key else "current object"
            if kind == "exports index":
                continue  # patched from the outputs (owned entries) or reported by the index step
            lines.append(f"{f.key}: {_render(f.path)} ({f.source}; the current version is not rewritten by scrub)")
        return lines

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        key = self._key(ctx)
        mode = plan.data.get("history") or (PURGE_ALL if plan.data.get("purge_history") else PURGE_REWRITTEN)
        warnings: list[str] = []
        details: dict[str, Any] = {"key": key, "history": mode}
        status = "succeeded"
        with ctx.held_lock("scrub"):
            try:
                stored = ctx.bucket.get(key)
            except NotFound:
                raise StalePlan(key, plan.etag, None) from None
            if stored.etag != plan.etag:
                raise StalePlan(key, plan.etag, stored.etag)
            # The secrets are read again: nothing secret was kept in the plan.
            index = _index_for(ctx, list(plan.data.get("regions") or secret_regions(ctx.bucket, [ctx.region])))
            assembly, artifact = load_artifact(ctx)
            if (assembly.digest if assembly else None) != plan.data.get("assembly"):
                raise OperationRefused("the assembly is not the one the plan was computed from; compute a new plan")
            deriver = Deriver(ctx, index, artifact)
            top = deriver.tree(stored)
            derived = top.derived
            planned_children = {c["stack"]: c for c in plan.data.get("children") or []}
            if (
                derived.rewrites != plan.data.get("rewrites")
                or any(
                    planned_children.get(s.stack, {}).get("rewrites") != s.derived.rewrites
                    or planned_children.get(s.stack, {}).get("etag") != s.stored.etag
                    for s in top.flat()[1:]
                )
                or len(top.flat()) - 1 != len(planned_children)
            ):
                raise OperationRefused(
                    "the rewrite computed now differs from the plan (a secret was added, rotated or removed since, "
                    "or a nested record changed); compute a new plan"
                )
            consent = self._consent(ctx, top.flat(), deriver.basis)
            if consent:
                details["allow_replacement"] = True
                details["replacements"] = consent["replacements"]
            etag_after = stored.etag
            written: list[str] = []
            if derived.rewrites:
                etag_after = self._write(ctx, key, plan.etag, derived, ctx.stack)
                written.append(key)
            details["rewritten"] = [{"path": r["path"], "to": r["to"], "source": r["source"]} for r in derived.rewrites]
            children = []
            for child in top.flat()[1:]:
                row = self._write_child(ctx, child)
                children.append(row)
                if row["result"] == "scrubbed":
                    written.append(child.key)
                elif row["result"] != "unchanged":
                    status = "partial"
                    warnings.append(f"nested record {child.key}: {row['result']}")
            if children:
                details["children"] = children
            index_results = self._patch_indexes(ctx, index, derived.outputs)
            details["index"] = index_results
            if any(r["result"] not in ("patched", "unchanged") for r in index_results):
                status = "partial"
                warnings += [
                    f"exports index {r['key']}: {r['result']}"
                    for r in index_results
                    if r["result"] not in ("patched", "unchanged")
                ]
            patched = [r["key"] for r in index_results if r["result"] == "patched"]
            if mode == KEEP:
                purge_keys: list[str] = []
                if written:
                    warnings.append(
                        f"history kept: the pre-scrub body of {', '.join(written)} stays readable by version id"
                    )
            elif mode == PURGE_ALL:
                purge_keys = list(dict.fromkeys([*plan.data.get("purge", []), *written, *patched]))
            else:
                purge_keys = list(dict.fromkeys([*written, *patched]))
            if purge_keys:
                # Still under the lock: no cdkd run of this stack writes a journal or a
                # record between our rewrite and the purge of what it replaced.
                purge_status, purge_details, purge_warnings = self._purge(ctx, purge_keys)
                details.update(purge_details)
                warnings += purge_warnings
                if purge_status != "succeeded":
                    status = "partial"
            if plan.data.get("history_findings"):
                warnings.append(
                    f"{plan.data['history_findings']} finding(s) in noncurrent versions were not purged (purge "
                    f"history was not asked for): they stay readable by version id"
                )
        left = list(plan.data.get("left") or [])
        if left:
            status = "partial"
            details["left"] = left
            warnings.append(f"{len(left)} finding(s) in current objects were left as they are; see details")
        sources = plan.data.get("sources") or []
        details["sources"] = sources
        details["rotate"] = ROTATE if sources else ""
        if sources:
            warnings.append(f"{ROTATE} Found: {'; '.join(sources)}")
        count = sum(len(s.derived.rewrites) for s in top.flat())
        summary = (
            f"Scrubbed {count} value(s) in {ctx.stack} ({ctx.region})"
            + (f" and {len(top.flat()) - 1} nested child record(s)" if len(top.flat()) > 1 else "")
            + (", purged history" if purge_keys else "")
            + (" (partly: see warnings)" if status == "partial" else "")
            + (f". {ROTATE}" if sources else ".")
        )
        return Outcome(
            status=status,
            summary=summary,
            etag_before=plan.etag,
            etag_after=etag_after,
            details=details,
            warnings=warnings,
        )

    def _write(self, ctx: Context, key: str, etag: str | None, derived: Derivation, stack: str) -> str | None:
        state = derived.state
        assert state is not None
        state.discard("skippedOutputs")
        state.set("lastModified", int(time.time() * 1000))
        try:
            body = dump_state(state, stack_name=stack, region=ctx.region or "")
        except RecordRefused as exc:
            raise OperationRefused(str(exc)) from None
        try:
            written = ctx.bucket.put(key, body, if_match=etag)
        except (PreconditionFailed, NotFound):
            raise StalePlan(key, etag, _etag_now(ctx, key)) from None
        ctx.log("info", f"rewrote {len(derived.rewrites)} value(s) in {key}")
        return written.etag

    def _write_child(self, ctx: Context, child: StackScrub) -> dict[str, Any]:
        """One nested record, under its own cdkd lock; a child that moved is reported, never
        counted as scrubbed."""
        row: dict[str, Any] = {"stack": child.stack, "key": child.key, "rewritten": len(child.derived.rewrites)}
        if not child.derived.rewrites:
            return {**row, "result": "unchanged"}
        child_ctx = dataclasses.replace(ctx, stack=child.stack)
        try:
            with child_ctx.held_lock("scrub"):
                self._write(child_ctx, child.key, child.stored.etag, child.derived, child.stack)
        except OperationRefused as exc:
            return {**row, "result": f"not scrubbed: {exc}"}
        except EngineError as exc:  # its lock is held by another run
            return {**row, "result": f"not scrubbed: {exc}"}
        return {**row, "result": "scrubbed"}

    def _patch_indexes(self, ctx: Context, index: SecretIndex, outputs: dict[str, Any]) -> list[dict[str, Any]]:
        """Patch every exports index entry the stack owns; If-Match, up to 5 attempts."""
        results = []
        for k in _index_keys(ctx.bucket, ctx.layout):
            result = "unchanged"
            names: list[str] = []
            for attempt in range(INDEX_ATTEMPTS):
                try:
                    stored = ctx.bucket.get(k)
                except NotFound:
                    break
                document, names, why = _index_patch(index, stored, ctx.stack, ctx.region or "", outputs)
                if why is not None:
                    result = f"left alone: {why}"
                    break
                if document is None:
                    break
                try:
                    ctx.bucket.put(k, js_stringify(document, indent=2).encode("utf-8"), if_match=stored.etag)
                    result = "patched"
                    ctx.log("info", f"patched {len(names)} entr(y/ies) of {k}")
                    break
                except PreconditionFailed:
                    time.sleep(min(0.1 * 2**attempt, 1.0))  # another writer: read again and redo
                    result = f"not patched: it kept changing ({INDEX_ATTEMPTS} attempts)"
                except EngineError as exc:
                    result = index.mask(f"not patched: {exc}")
                    break
            if result != "unchanged" or names:
                results.append({"key": k, "entries": names, "result": result})
        return results

    def _purge(self, ctx: Context, keys: list[str]) -> tuple[str, dict[str, Any], list[str]]:
        bucket = ctx.bucket
        if not keys:
            return "succeeded", {"purge": []}, []
        locked = object_lock_enabled(bucket)
        if locked:
            line = (
                f"s3://{bucket.name} has Object Lock enabled: its object versions cannot be purged by this app "
                f"(retention decides when S3 lets them go), so nothing was purged. Not purgeable: {', '.join(keys)}"
            )
            ctx.log("warning", line)
            return "partial", {"purge": [{"key": k, "result": "not purgeable (Object Lock)"} for k in keys]}, [line]
        report = purge_noncurrent(bucket, keys)
        rows = []
        for k in keys:
            if k in report.failures:
                rows.append({"key": k, "result": f"failed: {report.failures[k]}", "deleted": report.deleted.get(k, 0)})
            else:
                rows.append({"key": k, "result": "purged", "deleted": report.deleted.get(k, 0)})
        ctx.log("info", f"purged {sum(report.deleted.values())} noncurrent version(s) of {len(keys)} key(s)")
        warnings = []
        status = "succeeded"
        warning = report.warning(bucket.name)
        if warning:
            warnings.append(warning)
            status = "partial"
        details: dict[str, Any] = {"purge": rows}
        if report.body_purged:
            destinations, note = replication_destinations(bucket, keys)
            details["replication"] = destinations
            if note:
                details["replication_note"] = note
            if destinations:
                warnings.append(
                    f"S3 replication is enabled on s3://{bucket.name} and covers the key(s) just purged. S3 NEVER "
                    f"replicates a version-id delete, so the purge removed those versions from THIS bucket only: the "
                    f"copies in the destination bucket(s) survive and stay readable there via GetObject with a "
                    f"VersionId. Remove them there yourself, or narrow the replication rule. "
                    f"Destination(s): {', '.join(destinations)}"
                )
                status = "partial"
        return status, details, warnings


def _etag_now(ctx: Context, key: str) -> str | None:
    try:
        return ctx.bucket.get(key).etag
    except NotFound:
        return None


register(Scrub())
