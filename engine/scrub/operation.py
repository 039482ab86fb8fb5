"""The `scrub` operation kind (engine.operations): plan and execute."""

from __future__ import annotations

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
from engine.scrub.rewrite import Derivation, _render, derive
from engine.scrub.scanner import ScanResult, scan, secret_regions
from engine.secrets import (
    SecretIndex,
    collect,
)

ROTATE = (
    "ROTATE every secret that was found: scrubbing removes the copies from the state bucket, but anyone who "
    "could read it may already hold the values."
)

# --- the operation --------------------------------------------------------------------------------


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
        stored, index, result, index_keys = self._survey(ctx)
        key = stored.key
        derived = derive(index, stored, ctx.stack, ctx.region or "")
        purge = bool(ctx.params.get("purge_history"))
        changes: list[str] = []
        for r in derived.rewrites:
            changes.append(f"{key}: {_render(r['path'])} -> {r['to']} ({r['source']})")
        index_changes = self._index_changes(ctx, index, index_keys, derived.outputs)
        for item in index_changes:
            changes.append(f"{item['key']}: exports {', '.join(item['entries'])} -> the new output value(s)")
        if derived.state is not None and derived.state.has("skippedOutputs") and (derived.rewrites or index_changes):
            changes.append(f"{key}: drop skippedOutputs (every save outside a deploy does)")
        version = write_version(derived.state) if derived.state is not None and derived.rewrites else None
        if version is not None:
            changes.append(f"{key}: {version_line(derived.state.version, version)}")
        # Every key that held a finding of this stack (the scan kept only those), the record
        # itself when rewritten (its old body becomes noncurrent), and each index patched.
        purge_keys = sorted(
            {f.key for f in result.findings}
            | ({key} if derived.rewrites else set())
            | {i["key"] for i in index_changes}
        )
        warnings = list(index.warnings)
        left = self._left(result, derived, key)
        history = [f for f in result.findings if f.versionId is not None]
        if purge:
            for k in purge_keys:
                changes.append(f"{k}: delete every noncurrent version (the current one stays)")
        elif history:
            warnings.append(
                f"{len(history)} finding(s) in {len({(f.key, f.versionId) for f in history})} noncurrent version(s) "
                f"stay readable by version id unless history is purged (purge_history)"
            )
        warnings += [f"left as is: {line}" for line in left]
        if not derived.rewrites and not index_changes and not (purge and purge_keys):
            summary = f"No secret to scrub in the current record of {ctx.stack} ({ctx.region})."
        else:
            summary = (
                f"Scrub {len(derived.rewrites)} secret value(s) from the current record of {ctx.stack} "
                f"({ctx.region}), patch {sum(len(i['entries']) for i in index_changes)} exports index entr(y/ies)"
                + (f" and purge the noncurrent versions of {len(purge_keys)} key(s)" if purge else "")
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
                "purge_history": purge,
                "purge": purge_keys if purge else [],
                "regions": list(index.regions),
                "left": left,
                "sources": sorted({f.source for f in result.findings}),
                "history_findings": len(history),
                "schema_version": version,
            },
        )

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
        warnings: list[str] = []
        details: dict[str, Any] = {"key": key}
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
            derived = derive(index, stored, ctx.stack, ctx.region or "")
            if derived.rewrites != plan.data.get("rewrites"):
                raise OperationRefused(
                    "the rewrite computed now differs from the plan (a secret was added, rotated or removed since); "
                    "compute a new plan"
                )
            etag_after = stored.etag
            if derived.rewrites:
                state = derived.state
                assert state is not None
                state.discard("skippedOutputs")
                state.set("lastModified", int(time.time() * 1000))
                try:
                    body = dump_state(state, stack_name=ctx.stack, region=ctx.region or "")
                except RecordRefused as exc:
                    raise OperationRefused(str(exc)) from None
                try:
                    written = ctx.bucket.put(key, body, if_match=plan.etag)
                except (PreconditionFailed, NotFound):
                    raise StalePlan(key, plan.etag, _etag_now(ctx, key)) from None
                etag_after = written.etag
                ctx.log("info", f"rewrote {len(derived.rewrites)} value(s) in {key}")
            details["rewritten"] = [{"path": r["path"], "to": r["to"], "source": r["source"]} for r in derived.rewrites]
            index_results = self._patch_indexes(ctx, index, derived.outputs)
            details["index"] = index_results
            if any(r["result"] not in ("patched", "unchanged") for r in index_results):
                status = "partial"
                warnings += [
                    f"exports index {r['key']}: {r['result']}"
                    for r in index_results
                    if r["result"] not in ("patched", "unchanged")
                ]
            if plan.data.get("purge_history"):
                # Still under the lock: no cdkd run of this stack writes a journal or a
                # record between our rewrite and the purge of what it replaced.
                purge_keys = list(
                    dict.fromkeys(
                        [*plan.data.get("purge", []), *(r["key"] for r in index_results if r["result"] == "patched")]
                    )
                )
                purge_status, purge_details, purge_warnings = self._purge(ctx, purge_keys)
                details.update(purge_details)
                warnings += purge_warnings
                if purge_status != "succeeded":
                    status = "partial"
            elif plan.data.get("history_findings"):
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
        summary = (
            f"Scrubbed {len(derived.rewrites)} value(s) in {ctx.stack} ({ctx.region})"
            + (", purged history" if plan.data.get("purge_history") else "")
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
