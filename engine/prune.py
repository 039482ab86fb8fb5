"""`events prune`: drop old runs from a stack's `deployments/` event store, as cdkd's
`cdkd events prune <stack>` (`DeploymentEventsReader.pruneRuns`, reference §4.5).

Operation kind `events-prune` on (stack, region). Params: `keep` (newest N runs kept, an
integer >= 0) and `older_than_days` (only runs older than that are deleted); with both, a
run goes only when it is beyond the newest N AND older than the cutoff; with neither, the
newest 20 stay (cdkd's default). The cutoff is fixed in the plan (`cutoff_ms`), so the run
does what was approved. A run id whose timestamp cannot be read is never deleted by age.

Runs are the union of the `{runId}.jsonl` streams and the rows of `index.json`, newest
first by run id (cdkd's ids sort by time). Order of work, as cdkd: the index first (its
rows of the pruned runs dropped, every other field and row kept verbatim, `If-Match` on the
ETag read; deleted when no run remains), then each stream (`If-Match` on its listed ETag),
then the noncurrent versions of every key deleted (seed 000: each flush of a stream left a
version); when no run remains, every noncurrent version under the stack's `deployments/`
prefix. An unreadable index (not JSON, no `runs` array, a newer `indexVersion`) is left
untouched. A purge that fails leaves the run `partial` with the grant named, since the
bodies stay readable by version id. No stack lock: cdkd's event store takes none.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from engine import bucketops
from engine.backend import ObjectInfo
from engine.errors import EngineError, NotFound
from engine.events import INDEX_VERSION, MAX_INDEX_RUNS
from engine.keys import EVENT_STREAM_SUFFIX, run_id_timestamp_ms
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register
from engine.schema import js_stringify

DAY_MS = 86_400_000


@dataclass
class Store:
    prefix: str
    index_key: str
    index_etag: str | None
    index: dict[str, Any] | None  # the parsed index when it can be rewritten
    index_problem: str  # why the index is left untouched ("" when readable or absent)
    streams: dict[str, ObjectInfo]  # run id -> its stream
    run_ids: list[str]  # every run, newest first


def read_store(ctx: Context, region: str) -> Store:
    prefix = ctx.layout.events_prefix(ctx.stack, region)
    index_key = ctx.layout.event_index_key(ctx.stack, region)
    streams: dict[str, ObjectInfo] = {}
    for item in ctx.bucket.list_objects(prefix):
        name = item.key[len(prefix) :]
        if "/" not in name and name.endswith(EVENT_STREAM_SUFFIX) and len(name) > len(EVENT_STREAM_SUFFIX):
            streams[name[: -len(EVENT_STREAM_SUFFIX)]] = item
    etag, index, problem = None, None, ""
    try:
        stored = ctx.bucket.get(index_key)
    except NotFound:
        stored = None
    if stored is not None:
        etag = stored.etag
        index, problem = _parse_index(stored.body)
    indexed = [row.get("runId") for row in (index or {}).get("runs", []) if isinstance(row, dict)]
    run_ids = sorted({*streams, *(r for r in indexed if isinstance(r, str) and r)}, reverse=True)
    return Store(prefix, index_key, etag, index, problem, streams, run_ids)


def _parse_index(body: bytes) -> tuple[dict[str, Any] | None, str]:
    try:
        data = json.loads(body.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "the run index is not valid JSON: left untouched"
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        return None, "the run index has no runs array: left untouched"
    version = data.get("indexVersion")
    if isinstance(version, int | float) and not isinstance(version, bool) and version > INDEX_VERSION:
        return None, f"the run index has indexVersion {version} (a newer cdkd): left untouched"
    return data, ""


def _options(params: dict[str, Any]) -> tuple[int | None, float | None]:
    keep, days = params.get("keep"), params.get("older_than_days")
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
        raise OperationRefused(f"keep must be a whole number of runs, 0 or more (got {keep!r})")
    if days is not None and (
        isinstance(days, bool) or not isinstance(days, int | float) or not math.isfinite(days) or days <= 0
    ):
        raise OperationRefused(f"older-than must be a number of days above 0 (got {days!r})")
    return keep, days


def doomed_runs(run_ids: list[str], keep: int | None, cutoff_ms: int | None) -> list[str]:
    """The run ids (newest first in, same order out) the options delete."""
    if keep is None and cutoff_ms is None:
        keep = MAX_INDEX_RUNS
    candidates = run_ids[keep:] if keep is not None else list(run_ids)
    if cutoff_ms is None:
        return candidates
    doomed = []
    for run_id in candidates:
        at = run_id_timestamp_ms(run_id)
        if at is not None and at < cutoff_ms:
            doomed.append(run_id)
    return doomed


class EventsPrune:
    kind = "events-prune"
    label = "Prune events"
    cancellable = False

    def plan(self, ctx: Context) -> Plan:
        if not ctx.region:
            raise OperationRefused("events are kept per region: name the stack's region")
        keep, days = _options(ctx.params)
        cutoff = int(time.time() * 1000 - days * DAY_MS) if days is not None else None
        store = read_store(ctx, ctx.region)
        doomed = doomed_runs(store.run_ids, keep, cutoff)
        kept = [r for r in store.run_ids if r not in set(doomed)]
        changes = [
            f"delete run {run_id}" + ("" if run_id in store.streams else " (index row only)") for run_id in doomed
        ]
        warnings = [store.index_problem] if store.index_problem else []
        if doomed and not kept:
            changes.append(f"delete {store.index_key} and every noncurrent version under {store.prefix}")
        elif doomed and store.index is not None:
            changes.append(f"rewrite {store.index_key} without the deleted runs")
        where = f"{ctx.stack} ({ctx.region})"
        summary = (
            f"Delete {len(doomed)} of {len(store.run_ids)} run(s) of {where}, keep {len(kept)}"
            if doomed
            else f"Nothing to prune: {where} has {len(store.run_ids)} run(s), all kept"
        )
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=store.index_etag,
            summary=summary,
            changes=changes,
            warnings=warnings,
            data={
                "keep": keep,
                "older_than_days": days,
                "cutoff_ms": cutoff,
                "doomed": [
                    {
                        "run_id": r,
                        "key": store.streams[r].key if r in store.streams else None,
                        "etag": store.streams[r].etag if r in store.streams else None,
                    }
                    for r in doomed
                ],
                "kept": kept,
            },
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        if not ctx.region:
            raise OperationRefused("events are kept per region: name the stack's region")
        store = read_store(ctx, ctx.region)
        planned = plan.data.get("doomed") or []
        doomed = doomed_runs(store.run_ids, plan.data.get("keep"), plan.data.get("cutoff_ms"))
        now_doomed = [
            {
                "run_id": r,
                "key": store.streams[r].key if r in store.streams else None,
                "etag": store.streams[r].etag if r in store.streams else None,
            }
            for r in doomed
        ]
        if store.index_etag != plan.etag or now_doomed != planned:
            raise StalePlan(store.index_key, plan.etag, store.index_etag)
        details: dict[str, Any] = {"deleted_runs": doomed, "kept": len(store.run_ids) - len(doomed), "purged": 0}
        where = f"{ctx.stack} ({ctx.region})"
        if not doomed:
            details["index"] = "unchanged"
            return Outcome("succeeded", f"Nothing to prune in {where}", plan.etag, plan.etag, details=details)
        everything = len(doomed) == len(store.run_ids)
        gone = set(doomed)
        etag_after = plan.etag
        if store.index is None:
            details["index"] = "untouched" if store.index_etag else "absent"
        elif everything:
            ctx.bucket.delete(store.index_key, if_match=store.index_etag)
            details["index"], etag_after = "deleted", None
        else:
            index = dict(store.index)
            index["runs"] = [row for row in index["runs"] if not (isinstance(row, dict) and row.get("runId") in gone)]
            index["lastModified"] = int(time.time() * 1000)
            body = js_stringify(index, indent=2).encode("utf-8", errors="backslashreplace")
            etag_after = ctx.bucket.put(store.index_key, body, if_match=store.index_etag).etag
            details["index"] = "rewritten"
        deleted_keys = []
        for entry in now_doomed:
            if entry["key"]:
                try:
                    ctx.bucket.delete(entry["key"], if_match=entry["etag"])
                except NotFound:
                    pass  # gone already: what was asked
                deleted_keys.append(entry["key"])
        ctx.log("info", f"deleted {len(deleted_keys)} event stream(s) of {where}")
        warnings: list[str] = []
        try:
            if everything:
                versions = [v for v in bucketops.all_versions(ctx.bucket, store.prefix) if not v.is_latest]
                result = bucketops.delete_versions(ctx.bucket, versions)
                details["purged"] = result.deleted
                warnings += result.errors[:20]
            else:
                details["purged"] = len(ctx.bucket.purge_noncurrent(deleted_keys))
        except EngineError as exc:
            warnings.append(str(exc))
        summary = f"Deleted {len(doomed)} run(s) of {where} ({details['index']} index), kept {details['kept']}"
        if warnings:
            warnings.append(
                "Earlier versions of the deleted streams stay readable by version id: grant s3:ListBucketVersions and "
                "s3:DeleteObjectVersion on the state bucket, or purge them by hand"
            )
            return Outcome(
                "partial",
                summary + "; purging noncurrent versions failed",
                plan.etag,
                etag_after,
                details=details,
                warnings=warnings,
            )
        summary += f"; purged {details['purged']} noncurrent version(s)"
        return Outcome("succeeded", summary, plan.etag, etag_after, details=details)


SPEC = register(EventsPrune())
