"""`manage.py cdkd diff`: cdkd's diff of a synthesized assembly against each stack's record,
read live from the account's bucket through the engine backend. Nothing is written.

Exit codes follow cdkd's: 0 no change (or no --fail), 1 --fail and something changes,
3 a deploy would refuse (after the full preview is printed), 2 an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError

from engine.backend import StateBucket, StoredObject
from engine.deploy.assembly import AssemblyError, StackArtifact, open_assembly
from engine.deploy.intrinsics import ParameterError, parse_overrides
from engine.deploy.plan import StackPlan, StateLocation, compute_plan, plan_stack_artifact
from engine.deploy.render import exit_code, render_json, render_text, walk
from engine.deploy.ssm import ssm_reader
from engine.errors import EngineError, NotFound
from engine.keys import KeyLayout
from engine.schema import ParsedRecord, parse_state
from stacks.models import Account
from stacks.records import open_bucket

NESTED_STACK_TYPE = "AWS::CloudFormation::Stack"


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


@dataclass
class _Live:
    obj: StoredObject
    parsed: ParsedRecord


def _record(bucket: StateBucket, layout: KeyLayout, stack: str, region: str) -> _Live | None:
    """The record as cdkd reads it (the region key, then a legacy key naming no other
    region), with one GET when the region key exists; None for a new stack."""
    for key, legacy in ((layout.state_key(stack, region), False), (layout.legacy_state_key(stack), True)):
        try:
            obj = bucket.get(key)
        except NotFound:
            continue
        parsed = parse_state(obj.body, key_region=None if legacy else region)
        body_region = parsed.data.get("region") if isinstance(parsed.data, dict) else None
        if legacy and isinstance(body_region, str) and body_region != region:
            continue
        return _Live(obj, parsed)
    return None


def _location(bucket: StateBucket, live: _Live | None, layout: KeyLayout, stack: str, region: str) -> StateLocation:
    if live is None:
        return StateLocation(bucket=bucket.name, prefix=layout.prefix, key=layout.state_key(stack, region))
    return StateLocation(
        bucket=bucket.name, prefix=layout.prefix, key=live.obj.key, etag=live.obj.etag, version_id=live.obj.version_id
    )


def run_diff(command: Any, o: dict[str, Any]) -> None:
    from stacks.management.commands.cdkd import cli_actor

    account: Account = command.account(o["account"])
    actor = cli_actor()
    try:
        overrides = parse_overrides(o["parameters"])
        assembly = open_assembly(o["app"])
        selected = assembly.select(o["stacks"] or None, account.account_id)
        declared = {p for s in selected for p in (s.template.get("Parameters") or {})}
        unknown = sorted(set(overrides) - declared)
        if unknown:
            raise ParameterError(f"no selected stack declares a parameter named {', '.join(unknown)}")
    except (AssemblyError, ParameterError) as exc:
        raise CommandError(str(exc), returncode=2) from None
    layout = KeyLayout(account.prefix)
    plans: list[StackPlan] = []
    try:
        bucket = open_bucket(account, actor)
        for stack in selected:
            plans.append(_plan_stack(account, bucket, stack, o, overrides, assembly.digest, layout, actor))
    except (EngineError, ParameterError) as exc:
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


def _plan_stack(
    account: Account,
    bucket: StateBucket,
    stack: StackArtifact,
    o: dict[str, Any],
    overrides: dict[str, str],
    digest: str,
    layout: KeyLayout,
    actor: str,
) -> StackPlan:
    pinned = stack.environment.region
    if pinned and o["stack_region"] and o["stack_region"] != pinned:
        raise CommandError(
            f"stack {stack.stack_name} is synthesized for region {pinned}, not {o['stack_region']}", returncode=2
        )
    region = pinned or o["stack_region"] or account.cli_region or "us-east-1"

    def exports() -> Any:
        try:
            return json.loads(bucket.get(layout.exports_index_key(region)).body)
        except NotFound:
            return None
        except ValueError:
            return None  # an unreadable index resolves no import

    ssm = _lazy(lambda: ssm_reader(account.access(), actor, region))
    live = _record(bucket, layout, stack.stack_name, region)
    declared = stack.template.get("Parameters") or {}
    plan = plan_stack_artifact(
        stack,
        live.parsed if live else None,
        region=region,
        account=account.account_id,
        assembly_digest=digest,
        exports=exports,
        ssm=ssm,
        parameters={k: v for k, v in overrides.items() if k in declared},
        location=_location(bucket, live, layout, stack.stack_name, region),
    )
    if o["recursive"]:
        plan.children = _children(
            account, bucket, stack.stack_name, stack.nested_templates, plan, live, layout, region, digest, exports, ssm
        )
    return plan


def _lazy(make: Any) -> Any:
    """A callback that builds the real reader (an STS/SSM session) on first use only."""
    made: list[Any] = []

    def call(name: str) -> Any:
        if not made:
            made.append(make())
        return made[0](name)

    return call


def _children(account, bucket, parent_name, nested, parent, live, layout, region, digest, exports, ssm):
    """One node per nested stack, depth first: template-present children against their
    records, then children only the record still holds against an empty template."""
    out: list[StackPlan] = []
    rows = dict(live.parsed.resource_rows()) if live else {}
    names = list(nested) + [
        lid
        for lid, row in rows.items()
        if isinstance(row, dict) and row.get("resourceType") == NESTED_STACK_TYPE and lid not in nested
    ]
    for lid in names:
        child_name = f"{parent_name}~{lid}"
        node = nested.get(lid)
        template = node.template if node else {"Resources": {}}
        params = (parent.desired.get(lid) or {}).get("Parameters")
        supplied = {k: v for k, v in params.items() if isinstance(v, str)} if isinstance(params, dict) else {}
        declared = template.get("Parameters") or {}
        child_live = _record(bucket, layout, child_name, region)
        child = compute_plan(
            template,
            child_live.parsed if child_live else None,
            stack_name=child_name,
            region=region,
            account=account.account_id,
            exports=exports,
            ssm=ssm,
            parameters={k: v for k, v in supplied.items() if k in declared},
            location=_location(bucket, child_live, layout, child_name, region),
            assembly_digest=digest,
            top_level=False,
        )
        child.children = _children(
            account,
            bucket,
            child_name,
            node.children if node else {},
            child,
            child_live,
            layout,
            region,
            digest,
            exports,
            ssm,
        )
        out.append(child)
    return out
