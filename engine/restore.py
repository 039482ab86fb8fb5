"""Restore an earlier S3 version of a stack's `state.json` as its new current version.

Operation kind `restore` (`params["version_id"]`), registered with `engine.operations`.

Contract:
- Region-scoped records only (`ctx.region` is required): a legacy key has no version
  history this app writes to, and a save always goes to the region key.
- `plan` reads the current record (its ETag is `plan.etag`; None when the key is deleted,
  so a record orphaned by mistake can be brought back) and the chosen version. The plan
  is a list of human lines: resources added / removed / changed, outputs changed, other
  top-level fields changed, and what the write stamps.
- Refused: a delete-marker or unknown version, the version that is already current, a
  chosen body that is not writable (not JSON, damaged: restoring it would write the
  damage back; newer than 11: never written), and a current record newer than 11 (the
  app never overwrites what a newer cdkd wrote).
- The write goes through `dump_state`: `version` stays the chosen version's (a repair
  keeps the record's version, DESIGN; the plan names it), `stackName` and `region` are
  stamped from the key, every other field is kept except `skippedOutputs`, which every
  save outside a deploy drops (seed 000: the outputs it refers to may differ now).
- `execute` holds the stack's lock, re-reads the record (ETag must still be `plan.etag`),
  and writes with `If-Match` (or `If-None-Match: *` when there was no record). The version
  it replaces stays in the key's history.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from engine.backend import StoredObject
from engine.errors import NotFound, PreconditionFailed, RecordRefused
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register
from engine.schema import SUPPORTED_VERSION, ParsedRecord, dump_state, parse_state, version_line


def _read(ctx: Context, key: str) -> StoredObject | None:
    try:
        return ctx.bucket.get(key)
    except NotFound:
        return None


def _compact(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


_QUOTABLE = frozenset({"version", "lastModified", "stackName", "region"})


def diff_records(current: Any, chosen: Any) -> list[str]:
    """Human lines saying what replacing `current` with `chosen` changes (both decoded JSON;
    `current` may be None for no record, or anything a damaged record holds). Pure."""
    cur = current if isinstance(current, dict) else {}
    new = chosen if isinstance(chosen, dict) else {}
    lines: list[str] = []
    if current is None:
        lines.append("there is no current record: the chosen version becomes the record")
    elif not isinstance(current, dict):
        lines.append("the current record is not a JSON object; it is replaced whole")
    cur_res = cur.get("resources") if isinstance(cur.get("resources"), dict) else {}
    new_res = new.get("resources") if isinstance(new.get("resources"), dict) else {}
    for lid in new_res:
        if lid not in cur_res:
            row = new_res[lid]
            rtype = row.get("resourceType") if isinstance(row, dict) else None
            lines.append(f"resource {lid} comes back ({rtype})")
    for lid in cur_res:
        if lid not in new_res:
            lines.append(f"resource {lid} leaves the record (its AWS resource is untouched)")
    for lid in new_res:
        if lid in cur_res and cur_res[lid] != new_res[lid]:
            old_row, new_row = cur_res[lid], new_res[lid]
            if isinstance(old_row, dict) and isinstance(new_row, dict):
                fields = [f for f in dict.fromkeys([*old_row, *new_row]) if old_row.get(f) != new_row.get(f)]
                detail = ", ".join(fields)
                if old_row.get("physicalId") != new_row.get("physicalId"):
                    detail += f" (physical id {old_row.get('physicalId')!r} -> {new_row.get('physicalId')!r})"
                lines.append(f"resource {lid} changes: {detail}")
            else:
                lines.append(f"resource {lid} changes")
    # Values are named, never quoted: the plan is stored and shown, and an output or an
    # unknown field may hold a secret. The few header fields below are safe to quote.
    cur_out = cur.get("outputs") if isinstance(cur.get("outputs"), dict) else {}
    new_out = new.get("outputs") if isinstance(new.get("outputs"), dict) else {}
    for name in dict.fromkeys([*cur_out, *new_out]):
        if name not in new_out:
            lines.append(f"output {name} is removed")
        elif name not in cur_out:
            lines.append(f"output {name} comes back")
        elif cur_out[name] != new_out[name]:
            lines.append(f"output {name} changes")
    for key in dict.fromkeys([*cur, *new]):
        if key in ("resources", "outputs"):
            continue
        quote = key in _QUOTABLE
        if key not in new:
            lines.append(f"{key} is removed")
        elif key not in cur:
            lines.append(f"{key} comes back: {_compact(new[key])}" if quote else f"{key} comes back")
        elif cur[key] != new[key]:
            lines.append(f"{key}: {_compact(cur[key])} -> {_compact(new[key])}" if quote else f"{key} changes")
    return lines


class Restore:
    kind = "restore"
    label = "Restore version"
    cancellable = False

    def _key(self, ctx: Context) -> str:
        if ctx.region is None:
            raise OperationRefused("restore needs a region: it applies to the region-scoped state.json only")
        return ctx.layout.state_key(ctx.stack, ctx.region)

    def _version_id(self, ctx: Context) -> str:
        version_id = ctx.params.get("version_id")
        if not isinstance(version_id, str) or not version_id:
            raise OperationRefused("name the version to restore (version_id)")
        return version_id

    def _body(self, ctx: Context, key: str, version_id: str) -> tuple[ParsedRecord, bytes]:
        """The chosen version parsed, and the exact bytes the restore writes; refusals raised."""
        versions = {v.version_id: v for v in ctx.bucket.versions(key)}
        info = versions.get(version_id)
        if info is None:
            raise OperationRefused(f"{key} has no version {version_id}")
        if info.delete_marker:
            raise OperationRefused(f"version {version_id} of {key} is a delete marker: there is nothing to restore")
        if info.is_latest:
            raise OperationRefused(f"version {version_id} is already the current version of {key}")
        chosen = ctx.bucket.get(key, version_id=version_id)
        parsed = parse_state(chosen.body, key_region=ctx.region, stack_name=ctx.stack)
        if parsed.newer_than_supported:
            raise OperationRefused(
                f"version {version_id} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} "
                f"this app writes; it cannot be restored here"
            )
        if parsed.defects or parsed.state is None:
            listed = "; ".join(f"{d.path or '(root)'}: {d.code}" for d in parsed.defects)
            raise OperationRefused(
                f"version {version_id} is damaged ({listed}); restoring it would write that damage back"
            )
        state = parsed.state
        state.discard("skippedOutputs")
        try:
            body = dump_state(state, stack_name=ctx.stack, region=ctx.region or "")
        except RecordRefused as exc:
            raise OperationRefused(str(exc)) from None
        return parsed, body

    def plan(self, ctx: Context) -> Plan:
        key = self._key(ctx)
        version_id = self._version_id(ctx)
        current = _read(ctx, key)
        current_data: Any = None
        if current is not None:
            parsed_current = parse_state(current.body, key_region=ctx.region, stack_name=ctx.stack)
            if parsed_current.newer_than_supported:
                raise OperationRefused(
                    f"{key} has schema version {parsed_current.version}, newer than the {SUPPORTED_VERSION} this "
                    f"app writes; it is never overwritten here"
                )
            current_data = parsed_current.data if parsed_current.data is not None else "(not JSON)"
        chosen, body = self._body(ctx, key, version_id)
        written = json.loads(body)
        changes = diff_records(current_data, written) or ["no difference in content"]
        version = written["version"]
        notes = [version_line(chosen.version, version).replace("the record", "the chosen version")]
        if chosen.stack_name() != ctx.stack or chosen.body_region() != ctx.region:
            notes.append(f"stackName and region are stamped from the key ({ctx.stack}, {ctx.region})")
        if chosen.state is not None and isinstance(chosen.data, dict) and "skippedOutputs" in chosen.data:
            notes.append("skippedOutputs is dropped (every save outside a deploy does)")
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=current.etag if current is not None else None,
            summary=(
                f"Make version {version_id} of {key} the current record again. The version it replaces stays in "
                f"the history. AWS resources are not touched."
            ),
            changes=changes + notes,
            warnings=[],
            data={
                "version_id": version_id,
                "body_sha256": hashlib.sha256(body).hexdigest(),
                "schema_version": version,
            },
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        key = self._key(ctx)
        version_id = self._version_id(ctx)
        with ctx.held_lock("restore"):
            current = _read(ctx, key)
            found = current.etag if current is not None else None
            if found != plan.etag:
                raise StalePlan(key, plan.etag, found)
            _, body = self._body(ctx, key, version_id)
            if hashlib.sha256(body).hexdigest() != plan.data.get("body_sha256"):
                raise OperationRefused("the body to restore differs from the plan's; compute a new plan")
            try:
                if plan.etag is None:
                    written = ctx.bucket.put(key, body, if_none_match=True)
                else:
                    written = ctx.bucket.put(key, body, if_match=plan.etag)
            except (PreconditionFailed, NotFound):
                latest = _read(ctx, key)
                raise StalePlan(key, plan.etag, latest.etag if latest is not None else None) from None
            ctx.log("info", f"restored version {version_id} of {key} as version {written.version_id}")
        return Outcome(
            status="succeeded",
            summary=f"Restored version {version_id} of {key}; the replaced version stays in the history.",
            etag_before=plan.etag,
            etag_after=written.etag,
            details={"restored_from": version_id, "new_version_id": written.version_id},
        )


register(Restore())
