"""Mirror rows for the attention board at any scale, written with bulk_create (what a sync
would have written): each stack gets one problem in turn, so every row kind appears in
proportion. Used by tests/views/test_attention.py (5 and 500 stacks) and
bench/attention_bench.py (10,000 over 30 accounts)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from stacks.models import (
    Account,
    DeploymentEvent,
    DeploymentRun,
    Lock,
    Operation,
    SecretFinding,
    Stack,
    now_ms,
)

# The problems handed out in turn; "ok" stacks have none.
PATTERN = ("ok", "stale-lock", "ok", "dead-lock", "failed-run", "ok", "record", "secrets", "ok", "failed-op")


def account_ids(n: int) -> list[str]:
    return [f"{700000000000 + i:012d}" for i in range(1, n + 1)]


def seed(accounts: int, stacks: int) -> list[Account]:
    made = Account.objects.bulk_create(
        Account(
            account_id=a,
            name=f"acct-{i:02d}",
            resolved_bucket=f"cdkd-state-{a}",
            bucket_source="default",
            bucket_region="us-east-1",
            bucket_status="ok",
        )
        for i, a in enumerate(account_ids(accounts))
    )
    made = list(Account.objects.filter(account_id__in=[a.account_id for a in made]).order_by("account_id"))
    now, now_dt = now_ms(), timezone.now()
    body = json.dumps({"version": 11, "stackName": "s", "region": "us-east-1", "resources": {}}).encode()
    rows, kinds = [], []
    for i in range(stacks):
        account = made[i % len(made)]
        kind = PATTERN[i % len(PATTERN)]
        name = f"Service{i:05d}"
        record_problem = kind == "record"
        rows.append(
            Stack(
                account=account,
                key=f"cdkd/{name}/us-east-1/state.json",
                stack_name=name,
                region="us-east-1",
                etag=f'"e{i}"',
                size=len(body),
                body=body,
                schema_version=5 if record_problem and i % 2 else 11,
                has_defects=record_problem and not i % 2,
                defects=[{"code": "resources-not-object", "path": "resources"}] if record_problem and not i % 2 else [],
                root_name=name,
                record_last_modified=now - 86_400_000,
                s3_last_modified=now_dt - timedelta(days=1),
                synced_at=now_dt,
            )
        )
        kinds.append(kind)
    stacks_made = Stack.objects.bulk_create(rows, batch_size=1000)
    locks, runs, findings, ops = [], [], [], []
    for stack, kind in zip(stacks_made, kinds, strict=True):
        if kind in ("stale-lock", "dead-lock"):
            locks.append(
                Lock(
                    account=stack.account,
                    key=stack.key.replace("state.json", "lock.json"),
                    stack_name=stack.stack_name,
                    region=stack.region,
                    stack=stack,
                    etag='"l"',
                    body=b"{}",
                    owner="ci@runner:1",
                    operation="deploy",
                    timestamp_ms=now - 3 * 3_600_000,
                    expires_at_ms=now + 600_000 if kind == "stale-lock" else now - 600_000,
                    synced_at=now_dt,
                )
            )
        if kind in ("stale-lock", "failed-run"):
            started = datetime.fromtimestamp((now - 3 * 3_600_000) / 1000, tz=UTC)
            runs.append(
                DeploymentRun(
                    account=stack.account,
                    stack_name=stack.stack_name,
                    region=stack.region,
                    run_id=started.strftime("%Y%m%dT%H%M%S") + "000Z-0000abcd",
                    command="deploy" if kind == "stale-lock" else ("destroy" if stack.pk % 2 else "deploy"),
                    run_at=started,
                    started_at=started,
                    result="UNKNOWN" if kind == "stale-lock" else "FAILED",
                    synced_at=now_dt,
                )
            )
        if kind == "secrets":
            findings.append(
                SecretFinding(
                    account=stack.account,
                    stack_name=stack.stack_name,
                    region=stack.region,
                    key=stack.key,
                    key_kind="record",
                    path=["resources", "Fn", "properties", "Environment"],
                    source="shape",
                )
            )
        if kind == "failed-op":
            ops.append(
                Operation(
                    kind="deploy",
                    account=stack.account,
                    stack_name=stack.stack_name,
                    region=stack.region,
                    requester_name="olivia",
                    plan={},
                    plan_digest="sha256:x",
                    status="partial",
                    error="2 of 5 resources failed",
                    finished_at=now_dt - timedelta(hours=2),
                )
            )
    Lock.objects.bulk_create(locks, batch_size=1000)
    made_runs = DeploymentRun.objects.bulk_create(runs, batch_size=1000)
    DeploymentEvent.objects.bulk_create(
        (DeploymentEvent(run=run, seq=0, event_type="RUN_STARTED", timestamp=run.run_at, raw={}) for run in made_runs),
        batch_size=1000,
    )
    SecretFinding.objects.bulk_create(findings, batch_size=1000)
    Operation.objects.bulk_create(ops, batch_size=1000)
    return made
