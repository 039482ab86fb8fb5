"""`manage.py cdkd diff`: cdkd's diff of a synthesized assembly against each stack's record,
read live from the account's bucket through the engine backend. Nothing is written.

The reads and the plan are `stacks.deployplan.plan_assembly`, which the browser's "Plan a
deploy" calls too. Exit codes follow cdkd's: 0 no change (or no --fail), 1 --fail and
something changes, 3 a deploy would refuse (after the full preview is printed), 2 an error.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from engine.deploy.assembly import open_assembly
from engine.deploy.intrinsics import ParameterError, parse_overrides
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
