"""Seeding the demo world: collect every object per account, then write them to S3."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from demo.accounts import (
    BIG_STACK_RESOURCES,
    DAY_MS,
    DEMO_ACCOUNTS,
    SEED,
    AccountSummary,
    DemoAccountSpec,
    DemoWorld,
    StackRef,
)
from demo.formats import cdkd_json
from demo.kinds import DOMAINS, build_analytics, build_api, build_data, build_db, build_events
from demo.records import StackBuilder, _AccountPlan, _Put
from demo.resources import DESTROYABLE_KINDS, LiveStack, create_resources
from demo.showcase import Showcase

# Seeding
# --------------------------------------------------------------------------------------


class _World(Showcase):
    """Collects every object for every account, then the caller writes them."""

    def __init__(self, now_ms: int, big_resources: int) -> None:
        self.now = now_ms
        self.big_resources = big_resources
        self.plans: dict[str, _AccountPlan] = {s.account_id: _AccountPlan(s) for s in DEMO_ACCOUNTS}
        self.interesting: dict[str, StackRef] = {}
        self.versions_seen: dict[int, StackRef] = {}
        self.exports: dict[tuple[str, str], dict[str, Any]] = {}  # (account, region) -> exports
        self.live: list[LiveStack] = []  # healthy stacks whose AWS resources the demo creates
        self.destroyable: list[StackRef] = []  # live stacks of a destroyable kind, not locked
        self.last_saved: tuple[dict[str, Any], _Put] | None = None

    def note(self, name: str, spec: DemoAccountSpec, stack: str, region: str | None, key: str, note: str = "") -> None:
        self.interesting[name] = StackRef(spec.account_id, stack, region, key, note)

    def ago(self, rng: random.Random, lo_days: float, hi_days: float) -> int:
        return self.now - int(rng.uniform(lo_days, hi_days) * DAY_MS)

    def save(self, b: StackBuilder, last_modified: int | None = None, note: str = "") -> str:
        plan = self.plans[b.account]
        record = b.state(last_modified or self.ago(b.rng, 0.5, 200))
        key = plan.put_state(record, b.stack, b.region)
        self.last_saved = (record, plan.puts[-1])
        ref = StackRef(b.account, b.stack, b.region, key, note)
        self.versions_seen.setdefault(b.version, ref)
        # The region's exports index: Export.Name aliases only (what a v9+ rebuild publishes).
        if b.export_names:
            idx = self.exports.setdefault((b.account, b.region), {})
            for name in b.export_names:
                idx[name] = {"value": b.outputs[name], "producerStack": b.stack, "producerRegion": b.region}
        return key

    # -- healthy stacks ------------------------------------------------------------------

    def healthy(self, spec: DemoAccountSpec) -> int:
        rng = random.Random(f"{SEED}:{spec.account_id}:layout")
        mix = [11] * 12 + [10, 10, 9, 9, 8, 8, 7, 6, 5, 4, 3, 2]
        forced = list(range(2, 12))  # every version 2..11 at least once per account
        count = 0

        def version() -> int:
            return forced.pop(0) if forced else rng.choice(mix)

        for domain in DOMAINS[spec.account_id]:
            home = rng.choice(spec.regions[:2])
            regions = [home]
            if rng.random() < 0.3:
                regions.append(rng.choice([r for r in spec.regions if r != home]))
            for region in regions:
                data = events = None
                kinds = ["Data", "Api"]
                if rng.random() < 0.7:
                    kinds.insert(1, "Events")
                if rng.random() < 0.35:
                    kinds.append("Analytics")
                if rng.random() < 0.25:
                    kinds.append("Db")
                for kind in kinds:
                    stack = f"{spec.env}-{domain}{kind}"
                    if (stack, region) == ("Prod-OrdersApi", "us-east-1"):
                        continue  # the history record, written below with four versions
                    v = version()
                    b = StackBuilder(spec, stack, region, version=v)
                    if kind == "Data":
                        build_data(b, domain)
                        data = b
                    elif kind == "Events":
                        build_events(b, domain)
                        events = b
                    elif kind == "Api":
                        build_api(b, domain, data if v >= 4 else None, events if v >= 8 else None)
                    elif kind == "Analytics":
                        build_analytics(b, domain)
                    else:
                        build_db(b, domain)
                    # A producer an importer binds to must publish its export names.
                    self.save(b)
                    assert self.last_saved is not None
                    record, put = self.last_saved
                    self.live.append(LiveStack(b, record, kind, put))
                    count += 1
        return count

    def build(self) -> None:
        for spec in DEMO_ACCOUNTS:
            self.plans[spec.account_id].summary = AccountSummary(spec.account_id, spec.name, spec.bucket, spec.prefix)
            self.plans[spec.account_id].summary.healthy_stacks = self.healthy(spec)
        self.production()
        self.staging()
        self.platform()
        self.exports_indexes()
        for name, ref in self.versions_seen.items():
            self.interesting.setdefault(f"version_{name}", ref)
        locked = {(ref.account_id, ref.stack) for name, ref in self.interesting.items() if "lock" in name}
        # A destroy refuses a stack another record imports from (an Api stack binds to its
        # Data stack's table export): those are shown refused, not offered as clean destroys.
        imported = {
            (live.builder.account, entry.get("sourceStack"), entry.get("sourceRegion"))
            for live in self.live
            for entry in live.record.get("imports") or []
            if isinstance(entry, dict)
        }
        self.destroyable = [
            StackRef(live.builder.account, live.builder.stack, live.builder.region, live.put.key, live.kind)
            for live in self.live
            if live.kind in DESTROYABLE_KINDS
            and (live.builder.account, live.builder.stack) not in locked
            and (live.builder.account, live.builder.stack, live.builder.region) not in imported
        ]
        for plan in self.plans.values():
            summary = plan.summary
            assert summary is not None
            all_puts = plan.puts + [p for seq in plan.sequences for p in seq]
            summary.objects = len(all_puts)
            state_keys = {p.key for p in all_puts if p.key.endswith("/state.json")}
            summary.state_records = len(state_keys)
            for k in state_keys:
                parts = k[len(plan.spec.prefix) + 1 :].split("/")
                if len(parts) == 3:
                    summary.regions.add(parts[1])


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------

SessionSource = Mapping[str, boto3.Session] | Callable[[str], boto3.Session]


def _s3(session: boto3.Session, region: str):
    config = Config(
        max_pool_connections=32,
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": "path"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return session.client("s3", region_name=region, config=config)


def _create_bucket(s3, spec: DemoAccountSpec) -> None:
    params: dict[str, Any] = {"Bucket": spec.bucket}
    if spec.bucket_region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": spec.bucket_region}
    try:
        s3.create_bucket(**params)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
            raise
    # cdkd bootstrap creates state buckets versioned; the history page depends on it.
    s3.put_bucket_versioning(Bucket=spec.bucket, VersioningConfiguration={"Status": "Enabled"})


def plan_demo_world(
    now_ms: int, *, big_stack_resources: int = BIG_STACK_RESOURCES
) -> dict[str, list[tuple[str, bytes]]]:
    """Every object the world holds, per account, in write order, without touching S3
    (a key written several times appears once per S3 version)."""
    world = _World(now_ms, big_stack_resources)
    world.build()
    return {
        account_id: [(p.key, p.body) for p in plan.puts] + [(p.key, p.body) for seq in plan.sequences for p in seq]
        for account_id, plan in world.plans.items()
    }


def build_demo_world(
    sessions: SessionSource,
    *,
    now_ms: int | None = None,
    big_stack_resources: int = BIG_STACK_RESOURCES,
    workers: int = 16,
    resources: bool = True,
) -> DemoWorld:
    """Create the three demo buckets and fill them. `sessions` gives a boto3 Session per
    account id (a mapping, or a callable such as `assumed_role_session`). The endpoint comes
    from `AWS_ENDPOINT_URL`, as everywhere else in the engine. `resources=False` skips
    creating the AWS resources the records describe (a few seconds; tests of the bytes only)."""
    started = time.monotonic()
    world = _World(now_ms if now_ms is not None else int(time.time() * 1000), big_stack_resources)
    world.build()

    get_session = sessions if callable(sessions) else sessions.__getitem__
    # The AWS resources first: a subscription's ARN is AWS's to choose, and the record holds it.
    created = create_resources(get_session, world.live) if resources else 0
    for live in world.live:
        live.put.body = cdkd_json(live.record)
    clients = {}
    for spec in DEMO_ACCOUNTS:
        s3 = _s3(get_session(spec.account_id), spec.bucket_region)
        _create_bucket(s3, spec)
        clients[spec.account_id] = s3

    def write(account_id: str, puts: list[_Put]) -> None:
        s3 = clients[account_id]
        bucket = world.plans[account_id].spec.bucket
        for p in puts:
            s3.put_object(
                Bucket=bucket, Key=p.key, Body=p.body, ContentType=p.content_type, ExpectedBucketOwner=account_id
            )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = []
        for account_id, plan in world.plans.items():
            # Big bodies first so they do not finish last on their own.
            for p in sorted(plan.puts, key=lambda p: -len(p.body)):
                futures.append(pool.submit(write, account_id, [p]))
            for seq in plan.sequences:
                futures.append(pool.submit(write, account_id, seq))
        for f in futures:
            f.result()

    summaries = [p.summary for p in world.plans.values() if p.summary is not None]
    return DemoWorld(
        accounts=summaries,
        interesting=world.interesting,
        seconds=time.monotonic() - started,
        resources=created,
        destroyable=world.destroyable,
    )


# --------------------------------------------------------------------------------------
# A stack that leaked secrets, for the scan and scrub pages
# --------------------------------------------------------------------------------------

LEAK_ACCOUNT = "111111111111"
LEAK_STACK = "Prod-PaymentsLegacy"
LEAK_REGION = "us-east-1"


def plant_leaked_secrets(session: boto3.Session) -> StackRef:
    """In the Production account: a Secrets Manager secret and an SSM SecureString, and a
    record whose history holds them in plaintext (an older version's resolved property, the
    current version's output and attribute), as records written before cdkd masked them do.
    Kept apart from `build_demo_world` so its fixed counts stay as they are."""
    spec = next(s for s in DEMO_ACCOUNTS if s.account_id == LEAK_ACCOUNT)
    password, api_key = "Paym3nts-Db-Passw0rd-2024", "pk_live_51DemoKeyForTheScrubPage9xQ"
    sm = session.client("secretsmanager", region_name=LEAK_REGION)
    secret_arn = sm.create_secret(
        Name="prod/payments/db", SecretString=json.dumps({"username": "payments", "password": password})
    )["ARN"]
    session.client("ssm", region_name=LEAK_REGION).put_parameter(
        Name="/prod/payments/api-key", Value=api_key, Type="SecureString"
    )
    db = {
        "physicalId": "payments-legacy-db",
        "resourceType": "AWS::RDS::DBInstance",
        "properties": {
            "DBInstanceIdentifier": "payments-legacy-db",
            "MasterUsername": "payments",
            "MasterUserPassword": f"{{{{resolve:secretsmanager:{secret_arn}:SecretString:password::}}}}",
        },
        "attributes": {"Endpoint.Address": "payments-legacy-db.demo.us-east-1.rds.amazonaws.com"},
        "provisionedBy": "sdk",
        "deletionPolicy": "Snapshot",
    }
    older = {"version": 8, "stackName": LEAK_STACK, "region": LEAK_REGION, "lastModified": 1760000000000}
    older["resources"] = {"Db": {**db, "properties": {**db["properties"], "MasterUserPassword": password}}}
    older["outputs"] = {}
    current = {"version": 11, "stackName": LEAK_STACK, "region": LEAK_REGION, "lastModified": 1790000000000}
    current["resources"] = {"Db": {**db, "attributes": {**db["attributes"], "ApiKey": api_key}}}
    current["outputs"] = {"DbUrl": f"postgres://payments:{password}@payments-legacy-db:5432/payments"}
    current["exportNames"] = []
    s3 = _s3(session, spec.bucket_region)
    key = f"{spec.prefix}/{LEAK_STACK}/{LEAK_REGION}/state.json"
    for body in (older, current):  # one after the other: two versions, the plaintext one first
        s3.put_object(Bucket=spec.bucket, Key=key, Body=cdkd_json(body), ContentType="application/json")
    return StackRef(spec.account_id, LEAK_STACK, LEAK_REGION, key, "secrets in plaintext, current and history")
