"""The `deploy` and `rollback` operation kinds (engine.operations' OperationSpec), so the
Django pipeline requests, approves, runs and audits a deploy like every other operation.

`Deploy.plan(ctx)` reads the assembly (`ctx.params["app"]`, a cdk.out path, or the stored
assembly `ctx.params["assembly_digest"]` through a loader the Django side registers with
`register_assembly_loader`), reads the record and computes cdkd's plan twice: the full one
(annotations, asset manifest: what the plan page shows; its blocking reasons refuse the
request) and the one the executor recomputes under the lock, whose digest the approval binds
to with the record's ETag and the assembly digest. The template travels in `plan.data`, so
the worker needs no assembly unless file assets are to be published.

`Deploy.execute` runs `engine.deploy.run.Deployer` with the approved digest and ETag: under
cdkd's lock it recomputes and refuses "plan changed, re-approval required" on a difference.
Before any of that the worker re-reads the record and refuses, in words, a record whose body
names another region than its key and the plan (its resources may be there, not here), and a
plan whose region is not the operation's or the assembly's pinned one.

`Rollback` is cdkd's `rollback` of a leftover journal (`engine.deploy.rollback`), with
cdkd's `--orphan` and `--revert-failed` as `params["orphan"]` / `params["revert_failed"]`.

The template parameters (`params["parameters"]`) are named in `secret_params`: the Django
side keeps them encrypted at rest, apart from the other parameters, and hands them back in
`ctx.params` to the plan and the run. No Django here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine.deploy.assembly import Assembly, open_assembly
from engine.deploy.plan import StateLocation, compute_plan, plan_stack_artifact
from engine.deploy.rollback import finish_rollback, read_journal
from engine.deploy.run import DEFAULT_CONCURRENCY, PLAN_CHANGED, STATEFUL_CONSENT, Deployer, DeployFailed
from engine.errors import NotFound
from engine.operations import Context, OperationRefused, Outcome, Plan, register
from engine.schema import parse_state

AssemblyLoader = Callable[[str], Assembly]
_loaders: list[AssemblyLoader] = []


def register_assembly_loader(loader: AssemblyLoader) -> None:
    """The Django side's way to read a stored assembly by digest (kept out of the engine)."""
    if loader not in _loaders:
        _loaders.append(loader)


def load_assembly(params: dict[str, Any]) -> Assembly:
    if params.get("app"):
        return open_assembly(params["app"])
    digest = params.get("assembly_digest")
    if not digest or not _loaders:
        raise OperationRefused("a deploy needs an assembly (a cdk.out path or a stored assembly)")
    assembly = _loaders[-1](digest)
    if assembly.digest != digest:
        raise OperationRefused(f"the stored assembly {digest[:12]} no longer matches its digest")
    return assembly


def region_refusal(ctx: Context, plan_region: str | None, pinned: str | None = None) -> str | None:
    """Why a deploy planned for `plan_region` must not run in `ctx.region` against the record
    there, in one line, or None: the operation runs in another region than its plan, the
    assembly pins another region, or the record at the region's key says in its body that it
    (and its resources) belongs to another region."""
    region = ctx.region
    if plan_region != region:
        return f"the plan was computed for region {plan_region}, but the operation runs in {region}; plan again"
    if pinned and pinned != region:
        return f"stack {ctx.stack} is synthesized for region {pinned}, not {region}; plan it for {pinned}"
    key = ctx.layout.state_key(ctx.stack, region or "")
    try:
        stored = ctx.bucket.get(key)
    except NotFound:
        return None
    try:
        data = json.loads(stored.body)
    except ValueError:
        return None  # unreadable: the plan's own checks refuse it by name
    body_region = data.get("region") if isinstance(data, dict) else None
    if isinstance(body_region, str) and body_region and body_region != region:
        return (
            f"{key} is stored under region {region} but its body says region {body_region}: its resources may be "
            f"in {body_region}, and a deploy here would create them again in {region}. Refusing; correct the "
            f"record's region field to match its key, or deploy the stack to {body_region}"
        )
    return None


def _changes(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plan's actions for people, stateful replacements first, then replacements."""

    def rank(a: dict[str, Any]) -> int:
        return 0 if a.get("stateful") else 1 if a.get("action") == "replace" else 2

    out = []
    for a in sorted(actions, key=rank):
        if a.get("action") == "unchanged":
            continue
        change = {"action": a["action"], "logicalId": a["logicalId"], "resourceType": a.get("resourceType")}
        if a.get("stateful"):
            change["message"] = "stateful replacement: the old resource and its data are deleted"
        out.append(change)
    return out


class Deploy:
    kind = "deploy"
    label = "Deploy"
    cancellable = True
    # kept encrypted at rest by the Django side (a template parameter may be a password)
    secret_params = ("parameters",)
    # a killed deploy has moved the record since its approval, so queueing it again as it was
    # can only refuse: "Run again" plans anew (a new approval when the plan differs)
    rerun_after_abandon = True

    def rerun_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """A run again is planned from the record as it is now, not from the plan page's ETag."""
        out = dict(params)
        out.pop("deploy_plan_etag", None)
        return out

    def plan(self, ctx: Context) -> Plan:
        p = ctx.params
        if ctx.region is None:
            raise OperationRefused("a deploy needs the stack's region")
        account = str(p.get("account") or "")
        assembly = load_assembly(p)
        artifact = assembly.stack(ctx.stack)
        artifact.check_account(account)
        refusal = region_refusal(ctx, ctx.region, artifact.environment.region)
        if refusal:
            raise OperationRefused(refusal)
        template = artifact.template
        key = ctx.layout.state_key(ctx.stack, ctx.region)
        try:
            stored = ctx.bucket.get(key)
            parsed = parse_state(stored.body, key_region=ctx.region, stack_name=ctx.stack)
            data, etag, version_id = parsed.data, stored.etag, stored.version_id
        except NotFound:
            parsed, data, etag, version_id = None, None, None, None
        if p.get("deploy_plan_etag") is not None and p["deploy_plan_etag"] != (etag or ""):
            raise OperationRefused(
                f"{PLAN_CHANGED}: {key} is at ETag {etag or '(none)'} but the plan page was computed from "
                f"{p['deploy_plan_etag'] or '(no record)'}; plan again"
            )
        exports_key = ctx.layout.exports_index_key(ctx.region)

        def exports() -> Any:
            try:
                return json.loads(ctx.bucket.get(exports_key).body)
            except (NotFound, ValueError):
                return None

        parameters = dict(p.get("parameters") or {})
        full = plan_stack_artifact(
            artifact,
            parsed,
            region=ctx.region,
            account=account,
            assembly_digest=assembly.digest,
            exports=exports,
            parameters=parameters,
            location=StateLocation(
                bucket=ctx.bucket.name, prefix=ctx.layout.prefix, key=key, etag=etag, version_id=version_id
            ),
        )
        consent = bool(p.get("stateful_consent"))
        blocking = [b for b in full.blocking if not (consent and b.endswith(STATEFUL_CONSENT))]
        if blocking:
            raise OperationRefused("the plan has blocking reasons: " + "; ".join(blocking))
        # What the executor recomputes under the lock (engine.deploy.run._Run.execute), same inputs.
        executed = compute_plan(
            template,
            data,
            stack_name=ctx.stack,
            region=ctx.region,
            account=account,
            exports=exports,
            parameters=parameters,
            location=StateLocation(bucket=ctx.bucket.name, prefix=ctx.layout.prefix, key=key, etag=etag),
            assembly_digest=assembly.digest,
            construct_paths=artifact.construct_paths,
        )
        actions = full.plan["actions"]
        counts: dict[str, int] = {}
        for a in actions:
            counts[a["action"]] = counts.get(a["action"], 0) + 1
        stateful = [a["logicalId"] for a in actions if a.get("stateful")]
        summary = (
            f"deploy {ctx.stack} ({ctx.region}): {counts.get('create', 0)} to create, "
            f"{counts.get('update', 0) + counts.get('metadata', 0)} to update, {counts.get('replace', 0)} to replace"
            f"{f' ({len(stateful)} stateful)' if stateful else ''}, {counts.get('delete', 0)} to delete"
        )
        files = {k: v for k, v in ((artifact.asset_manifest or {}).get("files") or {}).items()}
        file_assets = any(
            not str((a.get("source") or {}).get("path", "")).endswith(".template.json") for a in files.values()
        )
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=etag,
            summary=summary,
            changes=_changes(actions),
            warnings=list(full.plan.get("warnings") or []),
            data={
                "account": account,
                "assemblyDigest": assembly.digest,
                "deployPlanDigest": p.get("deploy_plan_digest"),
                "fullDigest": full.plan["digest"],
                "executorDigest": executed.plan["digest"],
                "parameters": sorted(parameters),  # names only: values stay in the request's params
                "statefulReplacements": stateful,
                "statefulConsent": consent,
                "noRollback": bool(p.get("no_rollback")),
                "concurrency": int(p.get("concurrency") or DEFAULT_CONCURRENCY),
                "fileAssets": file_assets,
                "pinnedRegion": artifact.environment.region,
                # a string: a jsonb column reorders keys, and the template's order is the plan's order
                "template": json.dumps(template, ensure_ascii=False),
                "constructPaths": artifact.construct_paths,
            },
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        d = plan.data
        if d.get("statefulReplacements") and not d.get("statefulConsent"):
            raise OperationRefused("the plan has a stateful replacement and was not approved with consent")
        # re-read before anything is published or locked: a region the record disagrees with
        # is refused in words (the ETag check under the lock catches a change after this read)
        refusal = region_refusal(ctx, plan.region, d.get("pinnedRegion"))
        if refusal:
            raise OperationRefused(refusal)
        deployer = Deployer()
        if d.get("fileAssets"):
            from engine.deploy.assets import publish_file_assets
            from engine.providers import Clients

            assembly = load_assembly(ctx.params)
            published = publish_file_assets(
                Clients(ctx.bucket.session),
                assembly,
                assembly.stack(ctx.stack),
                account=d["account"],
                region=ctx.region,
            )
            uploaded = sum(1 for p in published if p.outcome == "uploaded")
            ctx.log("info", f"file assets: {uploaded} uploaded, {len(published) - uploaded} already there")
        items: dict[str, dict[str, Any]] = {
            c["logicalId"]: {"status": "pending", "action": c["action"], "type": c.get("resourceType")}
            for c in plan.changes
            if isinstance(c, dict) and c.get("logicalId")
        }
        sink = ctx.progress

        def progress(done: int, total: int, detail: dict[str, Any] | None = None) -> None:
            # the executor names one resource per call; the page shows every resource (destroy's shape)
            lid = (detail or {}).get("logicalId")
            if lid:
                item = items.setdefault(lid, {})
                item["status"] = (detail or {}).get("outcome") or "done"
            try:
                sink(done, total, {"items": {k: dict(v) for k, v in items.items()}, "phase": "deploying"})
            except Exception:  # noqa: BLE001 - a progress sink never breaks the run
                pass

        ctx.progress = progress
        progress(0, len(items))
        try:
            template = d["template"]
            result = deployer.deploy(
                ctx,
                json.loads(template) if isinstance(template, str) else template,
                account=d["account"],
                parameters=dict(ctx.params.get("parameters") or {}),
                concurrency=int(d.get("concurrency") or DEFAULT_CONCURRENCY),
                no_rollback=bool(d.get("noRollback")),
                approved_digest=d["executorDigest"],
                approved_etag=plan.etag or "",
                assembly_digest=d["assemblyDigest"],
                construct_paths=d.get("constructPaths") or {},
                stateful_consent=bool(d.get("statefulConsent")),
            )
            failed_message = None
        except DeployFailed as exc:
            result, failed_message = exc.result, str(exc)
        for item in items.values():
            if item["status"] == "pending":
                item["status"] = "not-run"
        progress(sum(1 for i in items.values() if i["status"] != "not-run"), len(items))
        status = {"succeeded": "succeeded", "partial": "partial"}.get(result.result, "failed")
        if failed_message:
            status = "failed"
        body = result.as_json()
        if result.result == "partial":
            # what was left unaddressed (cdkd's exit 2): each skipped delete, with its reason
            body["errors"] = list(body["errors"]) + [
                next((w for w in result.warnings if w.startswith(f"{lid}: ")), f"{lid}: skipped")
                for lid in result.skipped
            ]
        summary = failed_message or (
            f"{len(result.created)} created, {len(result.updated)} updated, {len(result.replaced)} replaced, "
            f"{len(result.deleted)} deleted, {len(result.unchanged)} unchanged"
            + (f", {len(result.skipped)} left unaddressed" if result.skipped else "")
        )
        if result.result == "cancelled":
            summary = "the deploy was cancelled; nothing was rolled back (a rollback finishes the journal)"
        return Outcome(
            status=status,
            summary=summary,
            etag_before=result.etag_before,
            etag_after=result.etag_after,
            details={
                "result": body,
                "run_id": result.run_id,
                "counts": {k: len(body[k]) for k in ("created", "updated", "replaced", "deleted", "unchanged")},
                "rollback": result.rollback,
            },
            warnings=list(result.warnings),
        )


def _logical_ids(value: Any) -> list[str]:
    if value in (None, ""):
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise OperationRefused("orphan must be a list of logical ids")
    return list(dict.fromkeys(value))


class Rollback:
    kind = "rollback"
    label = "Roll back"
    cancellable = False

    def plan(self, ctx: Context) -> Plan:
        if ctx.region is None:
            raise OperationRefused("rollback needs the stack's region")
        journal = read_journal(ctx, ctx.region)
        segments = list((journal or {}).get("segments") or [])
        orphan = _logical_ids(ctx.params.get("orphan"))
        revert_failed = bool(ctx.params.get("revert_failed"))
        try:
            etag = ctx.bucket.get(ctx.layout.state_key(ctx.stack, ctx.region)).etag
        except NotFound:
            etag = None
        changes = []
        for seg in reversed(segments):
            ops = [(op, "revert-failed") for op in reversed(list(seg.get("failedOperations") or [])) if revert_failed]
            ops += [(op, "revert") for op in reversed(list(seg.get("operations") or []))]
            for op, action in ops:
                if not isinstance(op, dict):
                    continue
                lid = op.get("logicalId")
                changes.append(
                    {
                        "action": "orphan" if lid in orphan and op.get("changeType") != "DELETE" else action,
                        "logicalId": lid,
                        "resourceType": op.get("resourceType"),
                        "message": f"{op.get('changeType', '')}",
                    }
                )
        journaled = {
            op.get("logicalId")
            for seg in segments
            for op in list(seg.get("failedOperations") or []) + list(seg.get("operations") or [])
            if isinstance(op, dict)
        }
        unknown = [lid for lid in orphan if lid not in journaled]
        if unknown:
            raise OperationRefused(
                f"--orphan names {', '.join(unknown)}, which the rollback journal of {ctx.stack} ({ctx.region}) "
                "does not hold"
            )
        options = (["revert failed ops"] if revert_failed else []) + ([f"orphan {', '.join(orphan)}"] if orphan else [])
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=etag,
            summary=f"roll back {ctx.stack} ({ctx.region}): {len(segments)} journal segment(s), "
            f"{len(changes)} operation(s)" + (f" ({'; '.join(options)})" if options else "")
            if segments
            else f"{ctx.stack} ({ctx.region}) has no rollback journal: nothing to roll back",
            changes=changes,
            data={
                "account": str(ctx.params.get("account") or ""),
                "segments": len(segments),
                "orphan": orphan,
                "revertFailed": revert_failed,
            },
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        d = plan.data
        result = finish_rollback(
            ctx, account=d["account"], orphan=list(d.get("orphan") or []), revert_failed=bool(d.get("revertFailed"))
        )
        report = result.report.as_dict()
        status = "succeeded" if result.exit_code == 0 else "partial"
        summary = (
            "nothing to roll back"
            if result.result == "nothing"
            else f"rollback {result.result}: {result.segments_replayed} segment(s) replayed"
            + ("; state.json deleted" if result.state_deleted else "")
        )
        return Outcome(
            status=status,
            summary=summary,
            etag_before=plan.etag,
            details={"result": result.result, "report": report, "state_deleted": result.state_deleted},
        )


register(Deploy())
register(Rollback())
