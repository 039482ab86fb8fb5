"""`manage.py cdkd diff`: cdkd's diff of a synthesized assembly against each stack's record,
read live from the account's bucket through the engine backend. Nothing is written.

The reads and the plan are `stacks.deployplan.plan_assembly`, which the browser's "Plan a
deploy" calls too. Exit codes follow cdkd's: 0 no change (or no --fail), 1 --fail and
something changes, 3 a deploy would refuse (after the full preview is printed), 2 an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from engine.deploy.assembly import Assembly, open_assembly
from engine.deploy.intrinsics import ParameterError, parse_overrides
from engine.deploy.operation import register_assembly_loader
from engine.deploy.render import exit_code, render_json, render_text, walk
from engine.errors import EngineError
from stacks.deployplan import plan_assembly
from stacks.models import Account


def add_diff_parser(sub: Any) -> None:
    diff = sub.add_parser("diff", help="cdkd's diff of a synthesized cdk.out against the state (read-only)")
    diff.add_argument("stacks", nargs="*", metavar="STACK", help="stacks (default: every stack of the assembly)")
    diff.add_argument("--account", required=True)
    diff.add_argument("--app", required=True, help="a synthesized cdk.out directory or a zip of one")
    diff.add_argument("--stack-region", help="region of stacks whose environment pins none")
    diff.add_argument("--recursive", action="store_true", help="descend into nested stacks")
    diff.add_argument("--parameters", nargs="+", action="extend", default=[], metavar="K=V")
    diff.add_argument("--fail", action="store_true", help="exit 1 when something changes")
    diff.add_argument("--json", action="store_true")


def run_diff(command: Any, o: dict[str, Any]) -> None:
    from stacks.management.commands.cdkd import cli_actor

    account: Account = command.account(o["account"])
    try:
        overrides = parse_overrides(o["parameters"])
        assembly = open_assembly(o["app"])
        plans = plan_assembly(
            account,
            assembly,
            o["stacks"],
            actor=cli_actor(),
            stack_region=o["stack_region"],
            overrides=overrides,
            recursive=o["recursive"],
        )
    except (EngineError, ParameterError) as exc:  # AssemblyError is an EngineError
        raise CommandError(str(exc), returncode=2) from None
    command.stdout.write(render_json(plans) if o["json"] else render_text(plans), ending="")
    code = exit_code(plans, fail=o["fail"])
    if code == 3:
        count = len({r for p in walk(plans) for r in p.blocking})
        raise CommandError(
            f"the deploy would refuse to start: {count} blocking condition(s) reported above", returncode=3
        )
    if code:
        raise CommandError("changes found (--fail)", returncode=code)


# --- deploy and rollback ----------------------------------------------------------------------

RESULT_KEYS = ("created", "updated", "replaced", "deleted", "unchanged")


def stored_assembly(digest: str) -> Assembly:
    """The engine's loader of a stored assembly (web requests bind a plan to its digest)."""
    from stacks.deployplan import load_stored
    from stacks.models import Assembly as StoredAssembly

    row = StoredAssembly.objects.filter(digest=digest).first()
    if row is None:
        raise EngineError(f"no stored assembly {digest[:12]}")
    return load_stored(row)


register_assembly_loader(stored_assembly)


def add_deploy_parsers(sub: Any) -> None:
    deploy = sub.add_parser("deploy", help="deploy a synthesized cdk.out stack through the engine, as cdkd would")
    deploy.add_argument("stack", metavar="STACK")
    deploy.add_argument("--account", required=True)
    deploy.add_argument("--app", required=True, help="a synthesized cdk.out directory or a zip of one")
    deploy.add_argument("--stack-region", help="region of a stack whose environment pins none")
    deploy.add_argument("--parameters", nargs="+", action="extend", default=[], metavar="K=V")
    deploy.add_argument("--no-rollback", action="store_true", help="leave a failed deploy's journal for `rollback`")
    deploy.add_argument("--concurrency", type=int, default=10, help="resources at once (default 10)")
    deploy.add_argument("--yes", action="store_true")
    deploy.add_argument("--json", action="store_true")
    rollback = sub.add_parser("rollback", help="finish a leftover rollback journal (cdkd's rollback)")
    rollback.add_argument("stack", metavar="STACK")
    rollback.add_argument("--account", required=True)
    rollback.add_argument("--stack-region", required=True)
    rollback.add_argument(
        "--orphan",
        action="append",
        default=[],
        metavar="LOGICAL_ID",
        help="leave this resource in AWS, untracked (repeatable): a created one's row is dropped",
    )
    rollback.add_argument(
        "--revert-failed",
        action="store_true",
        help="also revert the ops that failed mid-deploy (their write may have landed)",
    )
    rollback.add_argument("--yes", action="store_true")
    rollback.add_argument("--json", action="store_true")


def _refused(command: Any, o: dict[str, Any], region: str | None, message: str, code: int = 1) -> None:
    if o["json"]:
        command.emit(
            {"stack": o["stack"], "region": region, "result": "refused", **{k: [] for k in RESULT_KEYS}}
            | {"outputs": {}, "errors": [message]}
        )
    raise CommandError(message, returncode=code)


def _warnings(command: Any, op: Any) -> None:
    for entry in op.log:
        if entry.get("level") in ("warning", "error"):
            command.stderr.write(f"{entry['level']}: {entry['message']}")


def run_deploy(command: Any, o: dict[str, Any]) -> None:
    """`cdkd deploy`: the same spec, lock and audit events as the web path, run here at once.
    Exit 0 success, 1 failure (or refusal), 2 partial."""
    from stacks.audit import cli_actor
    from stacks.operations import compute_plan, run_direct

    account: Account = command.account(o["account"])
    if o["concurrency"] < 1:
        raise CommandError("--concurrency must be at least 1")
    region = o["stack_region"]
    try:
        overrides = parse_overrides(o["parameters"])
        assembly = open_assembly(o["app"])
        artifact = assembly.stack(o["stack"])
        pinned = artifact.environment.region
        if pinned and region and region != pinned:
            raise ParameterError(f"stack {artifact.stack_name} is synthesized for region {pinned}, not {region}")
        region = pinned or region or account.cli_region or "us-east-1"
        params = {
            "account": account.account_id,
            "app": str(Path(o["app"]).resolve()),
            "parameters": overrides,
            "no_rollback": o["no_rollback"],
            "concurrency": o["concurrency"],
        }
        actor = cli_actor()
        plan = compute_plan(account, "deploy", artifact.stack_name, region, params, actor)
    except (EngineError, ParameterError) as exc:  # OperationRefused, AssemblyError are EngineErrors
        return _refused(command, o, region, str(exc))
    if not o["yes"]:
        command.stdout.write(f"Plan ({plan.digest}): {plan.summary}")
        for change in plan.changes:
            command.stdout.write(f"  {change['action']} {change['logicalId']} ({change.get('resourceType')})")
        command.stdout.write("Nothing changed: pass --yes to deploy.")
        return
    op = run_direct("deploy", account, artifact.stack_name, region, params, actor=actor, plan=plan)
    _warnings(command, op)
    body = ((op.result or {}).get("details") or {}).get("result")
    if not isinstance(body, dict):
        body = {"stack": artifact.stack_name, "region": region, "result": op.status, **{k: [] for k in RESULT_KEYS}}
        body |= {"outputs": {}, "errors": [op.error] if op.error else []}
    if o["json"]:
        command.emit(body)
    elif op.status in ("succeeded", "partial"):
        command.stdout.write(
            f"{'Done' if op.status == 'succeeded' else 'Partly done'} (operation #{op.pk}): "
            f"{op.result.get('summary', '')}"
        )
    if op.status == "succeeded":
        return
    if op.status == "partial":
        raise CommandError(op.error or op.result.get("summary") or "partly done", returncode=2)
    raise CommandError(op.error or f"operation #{op.pk} {op.status}", returncode=1)


def run_rollback(command: Any, o: dict[str, Any]) -> None:
    """`cdkd rollback`: exit 0 clean (or nothing to do), 2 partial, 1 error."""
    from stacks.audit import cli_actor
    from stacks.operations import compute_plan, run_direct

    account: Account = command.account(o["account"])
    region = o["stack_region"]
    params: dict[str, Any] = {"account": account.account_id}
    if o["orphan"]:
        params["orphan"] = list(dict.fromkeys(o["orphan"]))
    if o["revert_failed"]:
        params["revert_failed"] = True
    actor = cli_actor()
    try:
        plan = compute_plan(account, "rollback", o["stack"], region, params, actor)
    except EngineError as exc:  # OperationRefused: a journal newer than 1, an --orphan it does not hold
        if o["json"]:
            command.emit({"stack": o["stack"], "region": region, "result": "refused", "errors": [str(exc)]})
        raise CommandError(str(exc), returncode=1) from None
    if not o["yes"]:
        command.stdout.write(f"Plan ({plan.digest}): {plan.summary}")
        for change in plan.changes:
            command.stdout.write(f"  {change['action']} {change['logicalId']} ({change.get('message')})")
        command.stdout.write("Nothing changed: pass --yes to roll back.")
        return
    op = run_direct("rollback", account, o["stack"], region, params, actor=actor, plan=plan)
    _warnings(command, op)
    details = (op.result or {}).get("details") or {}
    if o["json"]:
        report = details.get("report") or {}
        command.emit(
            {
                "stack": o["stack"],
                "region": region,
                "result": details.get("result") or op.status,
                "reverted": report.get("reverted", []),
                "already": report.get("already", []),
                "orphaned": report.get("orphaned", []),
                "warnings": report.get("warnings", []),
                "failures": report.get("failures", []),
                "stateDeleted": bool(details.get("state_deleted")),
                "errors": [op.error] if op.error else [],
            }
        )
    else:
        command.stdout.write(f"{op.result.get('summary', '') or op.error} (operation #{op.pk})")
    if op.status == "succeeded":
        return
    if op.status == "partial":
        raise CommandError(op.error or op.result.get("summary") or "partly rolled back", returncode=2)
    raise CommandError(op.error or f"operation #{op.pk} {op.status}", returncode=1)
