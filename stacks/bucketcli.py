"""`manage.py cdkd state migrate`, `cdkd events prune` and `cdkd posture`: whole-bucket
commands. Migrate and prune are audited operations (`run_direct`), planned and printed
first; posture checks the bucket now and prints the checks.

Exit codes follow cdkd's: 0 done (or nothing to do), 1 failed or refused, 2 partly done or
a usage error.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from engine.operations import OperationRefused, Plan

# --- parsers ------------------------------------------------------------------------------


def add_migrate_parser(state_sub: Any) -> None:
    migrate = state_sub.add_parser(
        "migrate", help="copy the legacy cdkd-state-{account}-{region} bucket to cdkd-state-{account}"
    )
    migrate.add_argument("--account", required=True)
    migrate.add_argument("--region", required=True, help="the region in the legacy bucket's name")
    mode = migrate.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="print what would be copied; change nothing")
    mode.add_argument("--yes", action="store_true", help="copy (an audited operation)")
    migrate.add_argument("--remove-legacy", action="store_true", help="delete the legacy bucket after a verified copy")
    migrate.add_argument("--json", action="store_true")


def add_prune_arguments(events: Any) -> None:
    """`events prune STACK ...` rides on the `events STACK` parser: STACK there is "prune"."""
    events.add_argument("prune_stack", nargs="?", metavar="STACK", help="with `prune`: the stack whose runs to prune")
    events.add_argument("--keep", type=int, help="prune: keep the newest N runs")
    events.add_argument("--older-than", type=float, metavar="DAYS", help="prune: delete only runs older than this")
    events.add_argument("--yes", action="store_true", help="prune: do it (without: print the plan only)")


def add_posture_parser(sub: Any) -> None:
    posture = sub.add_parser("posture", help="check each state bucket's settings now (read-only)")
    posture.add_argument("--account", help="account id or label (default: every account)")
    posture.add_argument("--json", action="store_true")


# --- commands -----------------------------------------------------------------------------


def _plan(kind: str, account, stack: str, region: str | None, params: dict) -> Plan:
    from stacks.audit import cli_actor
    from stacks.operations import compute_plan

    try:
        return compute_plan(account, kind, stack, region, params, cli_actor())
    except OperationRefused as exc:
        raise CommandError(str(exc)) from None


def _print_plan(command: Any, plan: Plan) -> None:
    command.stdout.write(f"Plan ({plan.digest}): {plan.summary}")
    for change in plan.changes:
        command.stdout.write(f"  {change}")
    for warning in plan.warnings:
        command.stdout.write(f"  warning: {warning}")


def _run(command: Any, kind: str, account, stack: str, region: str | None, params: dict, plan: Plan):
    from stacks.audit import cli_actor
    from stacks.operations import run_direct

    op = run_direct(kind, account, stack, region, params, actor=cli_actor(), plan=plan)
    for entry in op.log:
        if entry.get("level") in ("warning", "error"):
            command.stderr.write(f"{entry['level']}: {entry['message']}")
    return op


def _finish(op) -> None:
    if op.status == "succeeded":
        return
    if op.status == "partial":
        raise CommandError(op.error or op.result.get("summary") or "partly done", returncode=2)
    raise CommandError(op.error or f"operation #{op.pk} {op.status}")


def run_state_migrate(command: Any, o: dict[str, Any]) -> None:
    account = command.account(o["account"])
    params = {"remove_legacy": bool(o["remove_legacy"])}
    plan = _plan("state-migrate", account, "", o["region"], params)
    out: dict[str, Any] = {
        "source": plan.data["source"],
        "destination": plan.data["destination"],
        "region": o["region"],
        "dryRun": bool(o["dry_run"]),
        "createDestination": plan.data["create_destination"],
        "removeLegacy": params["remove_legacy"],
        "toCopy": plan.data["copy_count"],
        "alreadyThere": plan.data["same_count"],
        "bytes": plan.data["bytes"],
        "digest": plan.digest,
    }
    if not o["json"]:
        _print_plan(command, plan)
    if o["dry_run"]:
        if o["json"]:
            command.emit(out)
        else:
            command.stdout.write("Dry run: nothing changed. Pass --yes to copy.")
        return
    op = _run(command, "state-migrate", account, "", o["region"], params, plan)
    details = (op.result or {}).get("details") or {}
    if o["json"]:
        out.update(
            operation=op.pk,
            status=op.status,
            summary=(op.result or {}).get("summary") or op.error,
            copied=details.get("copied"),
            removedVersions=details.get("removed_versions"),
            removedSource=details.get("removed_source"),
        )
        command.emit(out)
    else:
        command.stdout.write(f"{op.status} (operation #{op.pk}): {(op.result or {}).get('summary') or op.error}")
    _finish(op)


def run_events_prune(command: Any, o: dict[str, Any]) -> None:
    if o.get("run"):
        raise CommandError("--run cannot be combined with `events prune`", returncode=2)
    stack = o["prune_stack"]
    account = command.account(o["account"])
    region = o["stack_region"] or _events_region(account, stack)
    params = {"keep": o["keep"], "older_than_days": o["older_than"]}
    plan = _plan("events-prune", account, stack, region, params)
    if not o["json"]:
        _print_plan(command, plan)
    doomed = plan.data.get("doomed") or []
    if not doomed or not o["yes"]:
        if o["json"]:
            command.emit({"stackName": stack, "region": region, "plan": plan.as_json(), "digest": plan.digest})
        elif doomed:
            command.stdout.write("Nothing changed: pass --yes to prune.")
        return
    op = _run(command, "events-prune", account, stack, region, params, plan)
    details = (op.result or {}).get("details") or {}
    if o["json"]:
        command.emit(
            {
                "stackName": stack,
                "region": region,
                "operation": op.pk,
                "status": op.status,
                "summary": (op.result or {}).get("summary") or op.error,
                "deletedRuns": details.get("deleted_runs", []),
                "kept": details.get("kept"),
                "purgedVersions": details.get("purged"),
            }
        )
    else:
        command.stdout.write(f"{op.status} (operation #{op.pk}): {(op.result or {}).get('summary') or op.error}")
    _finish(op)


def _events_region(account, stack: str) -> str:
    from engine.keys import KeyLayout
    from stacks.eventread import EventsError, resolve_region
    from stacks.management.commands.cdkd import cli_actor
    from stacks.records import open_bucket

    try:
        return resolve_region(open_bucket(account, cli_actor()), KeyLayout(account.prefix), stack, None)
    except EventsError as exc:
        raise CommandError(f"{exc.code}: {exc}") from None


def events(command: Any, o: dict[str, Any]) -> bool:
    """Handle `events prune ...` (True), or check that plain `events STACK` got no prune
    options (False: the caller prints the events)."""
    if o["stack"] == "prune" and o.get("prune_stack"):
        run_events_prune(command, o)
        return True
    if o.get("prune_stack"):
        raise CommandError(
            f"unexpected argument {o['prune_stack']!r} (did you mean `events prune STACK`?)", returncode=2
        )
    if o.get("keep") is not None or o.get("older_than") is not None or o.get("yes"):
        raise CommandError("--keep, --older-than and --yes belong to `events prune STACK`", returncode=2)
    return False


def run_posture(command: Any, o: dict[str, Any]) -> None:
    from stacks.posture import check_account

    rows = []
    for account in command.accounts(o["account"]):
        posture = check_account(account, actor="cli-posture")
        rows.append(
            {
                "account": account.account_id,
                "bucket": posture.bucket,
                "checkedAt": posture.checked_at.isoformat(),
                "error": posture.error or None,
                "checks": posture.results,
            }
        )
    if o["json"]:
        command.emit(rows)
    else:
        for row in rows:
            command.stdout.write(f"{row['account']}  {row['bucket'] or '-'}")
            if row["error"]:
                command.stderr.write(f"    error: {row['error']}")
            for check in row["checks"]:
                command.stdout.write(f"    {check['status']:8} {check['label']}: {check['found']}")
                if check["status"] != "ok" and check.get("change"):
                    command.stdout.write(f"             change: {check['change']}")
    problems = sum(1 for r in rows for c in r["checks"] if c["status"] == "problem")
    if problems:
        raise CommandError(f"{problems} posture problem(s)", returncode=1)
