"""Sync and page benchmark: prints figures, asserts nothing.

    .venv/bin/python bench/sync_bench.py [--stacks 10000] [--latency-ms 25] [--big 2000]

A moto server (own process) behind a loopback proxy that adds `--latency-ms` to every
request (S3's usual first-byte latency, so the figures say what happens against AWS).
`--stacks` records are spread over three accounts reached by AssumeRole. Measured in one
run: a naive sequential list-and-get of the same buckets, the first sync, a no-change
re-sync (wall time and S3 requests by operation), then the stacks page and a
`--big`-resource stack page (server time and SQL query count).

The database is a fresh SQLite file under bench/out/ unless BENCH_DATABASE_URL is set
(e.g. postgres://postgres@127.0.0.1:5432/cdkd_admin_bench, created if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ACCOUNTS = ["111111111111", "222222222222", "333333333333"]


def record(stack: str, region: str, n_resources: int) -> bytes:
    resources = {}
    for i in range(n_resources):
        name = f"{stack}-q{i}"
        resources[f"Queue{i}4A7E3555"] = {
            "physicalId": f"https://sqs.{region}.amazonaws.com/111111111111/{name}",
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": name, "VisibilityTimeout": 45},
            "attributes": {"Arn": f"arn:aws:sqs:{region}:111111111111:{name}", "QueueName": name},
            "dependencies": [f"Queue{i - 1}4A7E3555"] if i else [],
            "provisionedBy": "sdk",
        }
    body = {
        "version": 11,
        "stackName": stack,
        "region": region,
        "resources": resources,
        "outputs": {"QueueArn": f"arn:aws:sqs:{region}:111111111111:{stack}-q0"},
        "exportNames": [],
        "lastModified": 1795955307315,
    }
    return json.dumps(body, indent=2).encode()


def setup_database() -> None:
    url = os.environ.get("BENCH_DATABASE_URL")
    if url:
        if url.startswith("postgres"):
            import psycopg

            name = url.rsplit("/", 1)[1]
            with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                conn.execute(f'CREATE DATABASE "{name}"')
        os.environ["DATABASE_URL"] = url
    else:
        out = ROOT / "bench" / "out"
        out.mkdir(parents=True, exist_ok=True)
        db = out / "bench.sqlite3"
        db.unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cdkd_site.settings")
    os.environ["REDIS_URL"] = "fakeredis://"
    os.environ["ALLOWED_HOSTS"] = "testserver,localhost"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stacks", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--big", type=int, default=2_000, help="resources in the big stack")
    parser.add_argument("--skip-naive", action="store_true", help="leave out the naive loop (quick runs)")
    args = parser.parse_args()

    from tests.support.motoserver import MotoServer
    from tests.support.s3proxy import S3Proxy

    moto = MotoServer().start()
    proxy = S3Proxy(moto.url, latency=0.0).start()
    os.environ.update(
        AWS_ENDPOINT_URL=moto.url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        run(args, moto, proxy)
    finally:
        proxy.stop()
        moto.stop()


def seed(args) -> dict[str, str]:
    """Write the records straight to moto (no latency); returns bucket per account."""
    import boto3

    sts = boto3.client("sts", region_name="us-east-1")
    buckets = {}
    jobs = []
    per_account = [args.stacks // 3 + (1 if i < args.stacks % 3 else 0) for i in range(3)]
    for account, count in zip(ACCOUNTS, per_account, strict=True):
        creds = sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/cdkd-admin", RoleSessionName="bench-seed")[
            "Credentials"
        ]
        session = boto3.Session(
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
            region_name="us-east-1",
        )
        s3 = session.client("s3")
        bucket = f"cdkd-state-{account}"
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        buckets[account] = bucket
        for i in range(count):
            region = ("us-east-1", "eu-west-1", "ap-northeast-1")[i % 3]
            stack = f"Service{i:05d}"
            jobs.append((s3, bucket, f"cdkd/{stack}/{region}/state.json", record(stack, region, 3)))
        if account == ACCOUNTS[0]:
            jobs.append((s3, bucket, "cdkd/BigStack/us-east-1/state.json", record("BigStack", "us-east-1", args.big)))
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda j: j[0].put_object(Bucket=j[1], Key=j[2], Body=j[3]), jobs))
    print(f"seeded {len(jobs)} records in {time.monotonic() - started:.1f} s")
    return buckets


def run(args, moto, proxy) -> None:
    seed(args)
    # From here on every request goes through the latency proxy.
    os.environ["AWS_ENDPOINT_URL"] = proxy.url
    proxy.latency = args.latency_ms / 1000
    setup_database()

    from engine.aws import clear_caches
    from engine.backend import StateBucket
    from stacks.models import Account
    from stacks.sync import sync_accounts

    clear_caches()
    accounts = [
        Account.objects.create(account_id=a, name=f"bench-{a[:3]}", role_arn=f"arn:aws:iam::{a}:role/cdkd-admin")
        for a in ACCOUNTS
    ]
    figures: dict[str, object] = {"stacks": args.stacks + 1, "latency_ms": args.latency_ms}

    # Naive: one account after the other, list then GET every state.json, one at a time.
    proxy.reset_counts()
    started = time.monotonic()
    naive_gets = 0
    for account in [] if args.skip_naive else accounts:
        bucket = StateBucket.open(account.access(), actor="bench-naive")
        for info in bucket.list_objects("cdkd/"):
            if info.key.endswith("/state.json"):
                bucket.get(info.key)
                naive_gets += 1
    figures["naive_seconds"] = round(time.monotonic() - started, 2)
    figures["naive_requests"] = dict(proxy.snapshot())

    clear_caches()
    proxy.reset_counts()
    started = time.monotonic()
    results = sync_accounts(accounts, actor="bench")
    figures["first_sync_seconds"] = round(time.monotonic() - started, 2)
    figures["first_sync_requests"] = dict(proxy.snapshot())
    figures["first_sync_fetched"] = sum(r.fetched for r in results)
    assert not any(r.errors for r in results), [r.errors for r in results]

    accounts = list(Account.objects.filter(pk__in=[a.pk for a in accounts]))  # as the worker loads them
    proxy.reset_counts()
    started = time.monotonic()
    results = sync_accounts(accounts, actor="bench")
    figures["resync_seconds"] = round(time.monotonic() - started, 2)
    figures["resync_requests"] = dict(proxy.snapshot())
    figures["resync_fetched"] = sum(r.fetched for r in results)

    figures.update(page_figures(args))

    print()
    print(f"records: {figures['stacks']} over 3 accounts, +{args.latency_ms:g} ms per S3 request")
    print(f"naive sequential list+get: {figures['naive_seconds']} s  {figures['naive_requests']}")
    print(f"first sync:                {figures['first_sync_seconds']} s  {figures['first_sync_requests']}")
    print(f"no-change re-sync:         {figures['resync_seconds']} s  {figures['resync_requests']}")
    print(
        f"first sync vs naive: {figures['naive_seconds'] / figures['first_sync_seconds']:.1f}x faster "
        f"({naive_gets} naive GETs); "
        f"re-sync / first sync: {figures['resync_seconds'] / figures['first_sync_seconds']:.3f}"
    )
    for line in figures["pages"]:
        print(line)
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sync_bench.json").write_text(json.dumps({k: v for k, v in figures.items()}, indent=2))


def page_figures(args) -> dict:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from stacks.models import Stack

    User.objects.create_superuser("bench", password="bench-password")
    client = Client()
    client.login(username="bench", password="bench-password")
    big = Stack.objects.get(stack_name="BigStack")

    def measure(url: str, label: str, repeat: int = 5) -> str:
        times = []
        queries = 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                response = client.get(url)
                times.append(time.perf_counter() - started)
            assert response.status_code == 200, (url, response.status_code)
            queries = len(ctx.captured_queries)
        return f"{label}: median {statistics.median(times) * 1000:.0f} ms, {queries} SQL queries"

    total = Stack.objects.count()
    lines = [
        measure("/stacks/", f"stacks page (page 1 of {total} stacks)"),
        measure(f"/stacks/?page={total // 50}", "stacks page (a late page)"),
        measure("/stacks/?q=Service0999", "stacks page (search)"),
        measure(f"/stacks/{big.account.account_id}/{big.region_slug}/BigStack/", f"stack page ({args.big} resources)"),
    ]
    return {"pages": lines}


if __name__ == "__main__":
    main()
