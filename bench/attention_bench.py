"""The attention board at scale: 10,000 stacks over 30 accounts (one problem in turn on
six of every ten stacks, tests/support/attention_seed.py), the page as a superuser sees it.

    .venv/bin/python bench/attention_bench.py [--accounts 30] [--stacks 10000] [--repeat 3]

Prints, from the same run, the board (`/attention/`, the JSON export and `stacks.attention.build`)
beside a baseline that asks the naive way: per stack, its lock, its newest runs, its
findings and its newest operation (four queries a stack). Server time is the median of
`--repeat` runs; SQL queries are counted with a connection execute wrapper. Uses
BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/cdkd_attention_bench,
dropped and created).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/cdkd_attention_bench"


def setup(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cdkd_site.settings")
    os.environ.setdefault("DEBUG", "True")
    os.environ.setdefault("CDKD_SYNC_INTERVAL", "0")
    os.environ.setdefault("REDIS_URL", "fakeredis://")
    os.environ["ALLOWED_HOSTS"] = "testserver,localhost"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def measure(fn, repeat: int) -> tuple[float, int, object]:
    from django.db import connection

    times, count, result = [], [0], None

    def counter(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    for _ in range(repeat):
        count[0] = 0
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - started)
    return statistics.median(times), count[0], result


def naive(user) -> int:
    """The baseline: what a page asking per stack would do."""
    from stacks.access import stacks_for
    from stacks.models import DeploymentRun, Lock, Operation, SecretFinding

    problems = 0
    for stack in stacks_for(user).select_related("account"):
        lock = Lock.objects.filter(stack=stack).first()
        run = (
            DeploymentRun.objects.filter(account=stack.account, stack_name=stack.stack_name, region=stack.region)
            .order_by("-run_id")
            .first()
        )
        found = SecretFinding.objects.filter(
            account=stack.account, stack_name=stack.stack_name, region=stack.region or ""
        ).count()
        op = (
            Operation.objects.filter(account=stack.account, stack_name=stack.stack_name, region=stack.region)
            .order_by("-created_at")
            .first()
        )
        bad_op = op is not None and op.status in ("failed", "partial")
        bad_run = run is not None and run.result == "FAILED"
        problems += bool(lock or found or bad_op or bad_run or stack.has_defects or (stack.schema_version or 0) < 7)
    return problems


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=30)
    parser.add_argument("--stacks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    setup(os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))

    from django.contrib.auth.models import User
    from django.test import Client

    from stacks import attention
    from stacks.attentionrows import Context
    from tests.support import attention_seed

    started = time.perf_counter()
    attention_seed.seed(args.accounts, args.stacks)
    print(f"seeded {args.stacks} stacks over {args.accounts} accounts in {time.perf_counter() - started:.1f} s")
    root = User.objects.create_user("root", password="pw", is_superuser=True)
    client = Client()
    client.force_login(root)

    def page():
        response = client.get("/attention/")
        assert response.status_code == 200, response.status_code
        return response

    def export():
        response = client.get("/attention/", {"format": "json"})
        assert response.status_code == 200
        return response

    def build():
        return attention.build(Context.for_user(root))

    results = [
        ("/attention/ (first page)", *measure(page, args.repeat)),
        ("/attention/?format=json (all rows)", *measure(export, args.repeat)),
        ("stacks.attention.build", *measure(build, args.repeat)),
        ("baseline: 4 queries per stack", *measure(lambda: naive(root), 1)),
    ]
    rows = results[2][3].total
    print(f"{rows} rows on the board")
    print(f"{'what':40} {'server time':>12} {'SQL queries':>12}")
    for label, seconds, queries, _result in results:
        print(f"{label:40} {seconds * 1000:>9.0f} ms {queries:>12}")
    print(f"baseline found {results[3][3]} stacks with a problem (it knows fewer kinds)")


if __name__ == "__main__":
    main()
