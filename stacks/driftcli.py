"""`manage.py cdkd drift` and `manage.py cdkd state refresh-observed`, as cdkd's.

`drift STACK` reads the record and every resource live (engine.drift), prints the report
(`--json`: `{stack, region, resources: [{logicalId, status, differences: [{path, expected,
actual}], reason}], counts, apiCalls}`), stores it as the stack's latest check (the stack
page shows it) and exits 0 in sync, 1 drifted, 2 on an error. `--accept` / `--revert` run
the drift-accept / drift-revert operation (plan printed; `--yes` to do it), audited as
every operation is. `state refresh-observed STACK` runs the refresh-observed operation at
once; `--dry-run` prints its plan and writes nothing. Exits 2 when any read failed.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from engine.drift import render_text
from engine.errors import EngineError


def add_drift_parsers(sub: Any, state_sub: Any) -> None:
    drift = sub.add_parser("drift", help="compare each resource's live state with the record (cdkd drift)")
    drift.add_argument("stack", metavar="STACK")
    drift.add_argument("--account", required=True)
    drift.add_argument("--stack-region")
    drift.add_argument("--concurrency", type=int, default=None, help="reads at once (default CDKD_DRIFT_CONCURRENCY)")
    drift.add_argument("--resource", action="append", default=[], help="with --accept/--revert: only these ids")
    mode = drift.add_mutually_exclusive_group()
    mode.add_argument("--accept", action="store_true", help="record the live values (an operation)")
    mode.add_argument("--revert", action="store_true", help="write the recorded values back (an operation)")
    drift.add_argument("--yes", action="store_true", help="with --accept/--revert: do it")
    drift.add_argument("--json", action="store_true")
    refresh = state_sub.add_parser("refresh-observed", help="re-read every resource into observedProperties")
    refresh.add_argument("stack", metavar="STACK")
    refresh.add_argument("--account", required=True)
    refresh.add_argument("--stack-region")
    refresh.add_argument("--dry-run", action="store_true", help="read and print the plan; write nothing")


def _concurrency(o: dict[str, Any]) -> int | None:
    value = o.get("concurrency")
    if value is not None and not 1 <= value <= 64:
        raise CommandError(f"--concurrency must be between 1 and 64, not {value}", returncode=2)
    return value


def run_drift(command: Any, o: dict[str, Any]) -> None:
    from stacks.drift import run_check
    from stacks.management.commands.cdkd import cli_actor

    account = command.account(o["account"])
    region = command._region(account, o["stack"], o["stack_region"])
    concurrency = _concurrency(o)
    if o["accept"] or o["revert"]:
        params: dict[str, Any] = {"resources": o["resource"]} if o["resource"] else {}
        if concurrency:
            params["concurrency"] = concurrency
        kind = "drift-accept" if o["accept"] else "drift-revert"
        return command._operate(kind, account, o["stack"], region, params, o["yes"], as_json=o["json"])
    if o["resource"]:
        raise CommandError("--resource needs --accept or --revert", returncode=2)
    if region is None:
        raise CommandError(f"{o['stack']}: drift needs a region-scoped record; pass --stack-region", returncode=2)
    check, report = run_check(account, o["stack"], region, actor=cli_actor(), trigger="cli", concurrency=concurrency)
    if report is None:
        raise CommandError(check.error, returncode=2)
    if o["json"]:
        command.emit(report.as_json())
    else:
        command.stdout.write(render_text(report), ending="")
    for warning in report.warnings:
        command.stderr.write(f"warning: {warning}")
    if report.exit_code == 2:
        raise CommandError(f"{len(report.errors)} resource(s) could not be read", returncode=2)
    if report.exit_code == 1:
        raise CommandError(f"{len(report.drifted)} resource(s) drifted", returncode=1)


def run_refresh_observed(command: Any, o: dict[str, Any]) -> None:
    from engine.operations import OperationRefused
    from stacks.audit import cli_actor as audit_actor
    from stacks.operations import compute_plan, run_direct

    account = command.account(o["account"])
    region = command._region(account, o["stack"], o["stack_region"])
    actor = audit_actor()
    try:
        plan = compute_plan(account, "refresh-observed", o["stack"], region, {}, actor)
    except (OperationRefused, EngineError) as exc:
        raise CommandError(str(exc), returncode=2) from None
    command.stdout.write(plan.summary)
    for change in plan.changes:
        command.stdout.write(f"  {change}")
    for warning in plan.warnings:
        command.stdout.write(f"  not refreshed: {warning}")
    if o["dry_run"]:
        command.stdout.write("Dry run: nothing was written.")
        return
    op = run_direct("refresh-observed", account, o["stack"], region, {}, actor=actor, plan=plan)
    for entry in op.log:
        if entry.get("level") in ("warning", "error"):
            command.stderr.write(f"{entry['level']}: {entry['message']}")
    if op.status == "succeeded":
        command.stdout.write((op.result or {}).get("summary", "done"))
        return
    raise CommandError(op.error or (op.result or {}).get("summary") or op.status, returncode=2)
