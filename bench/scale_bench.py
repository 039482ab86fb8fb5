"""Scale-out benchmark: the same first sync done by 1, 2 and 4 RQ worker processes.

    .venv/bin/python bench/scale_bench.py [--accounts 30] [--stacks 1000] [--latency-ms 25]
                                          [--workers 1,2,4] [--skip-cli]

A moto server (own process) behind the loopback proxy that adds `--latency-ms` to every
request, as in sync_bench.py. `--accounts` accounts (reached by AssumeRole) hold `--stacks`
records each. For each worker count the mirror is emptied, that many `manage.py rqworker
sync` processes are started and registered, one SyncRun of every account is queued (one
job per account), and the wall time until the run is finished is taken. Unless
`--skip-cli`, the same sync is first done by `manage.py cdkd sync` in one process (the
accounts four at a time in threads, the way one worker synced them all before account
jobs), for comparison. All figures come from one run and are printed side by side, with
one worker as the baseline.

Needs PostgreSQL and a Redis server, which several processes share:
BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/cdkd_scale_bench, dropped
and created) and BENCH_REDIS_URL (default redis://127.0.0.1:6379/15, FLUSHED: give it a
Redis database nothing else uses).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.sync_bench import record  # noqa: E402 (after the path is set)

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/cdkd_scale_bench"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"


def account_ids(n: int) -> list[str]:
    return [f"{500000000000 + i:012d}" for i in range(1, n + 1)]


def seed(accounts: list[str], stacks: int, moto_url: str) -> None:
    """Write the records straight to moto (no latency)."""
    import boto3

    sts = boto3.client("sts", region_name="us-east-1", endpoint_url=moto_url)
    jobs = []
    for account in accounts:
        creds = sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/cdkd-admin", RoleSessionName="bench-seed")[
            "Credentials"
        ]
        s3 = boto3.Session(
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
            region_name="us-east-1",
        ).client("s3", endpoint_url=moto_url)
        bucket = f"cdkd-state-{account}"
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        for i in range(stacks):
            region = ("us-east-1", "eu-west-1", "ap-northeast-1")[i % 3]
            stack = f"Service{i:05d}"
            jobs.append((s3, bucket, f"cdkd/{stack}/{region}/state.json", record(stack, region, 3)))
    started = time.monotonic()
    with ThreadPoolExecutor(24) as pool:
        list(pool.map(lambda j: j[0].put_object(Bucket=j[1], Key=j[2], Body=j[3]), jobs))
    print(f"seeded {len(jobs)} records in {time.monotonic() - started:.1f} s", flush=True)


def setup_database(url: str, redis_url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    os.environ.update(
        DATABASE_URL=url,
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="cdkd_site.settings",
        ALLOWED_HOSTS="testserver,localhost",
        CDKD_SYNC_INTERVAL="0",
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def reset_mirror() -> None:
    """An empty mirror and unresolved buckets: every round does the same first sync."""
    from django.db import connection

    from stacks.models import Account, Stack

    with connection.cursor() as cursor:
        cursor.execute(f'TRUNCATE "{Stack._meta.db_table}" CASCADE')
    Account.objects.update(
        resolved_bucket="", bucket_region="", bucket_checked_at=None, last_synced_at=None, last_sync_counts={}
    )
    from stacks.models import EventIndex, Lock

    Lock.objects.all().delete()
    EventIndex.objects.all().delete()


def proc_cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of a live process (with its waited-for children, e.g. RQ work-horses)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


class Meter:
    """CPU seconds spent by the syncing processes, moto and this process (the proxy), and
    how busy the whole machine was (other work included) over one round."""

    def __init__(self, moto_pid: int) -> None:
        self.moto_pid = moto_pid

    def _machine(self) -> tuple[int, int]:
        cpu = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
        return cpu[3] + cpu[4], sum(cpu)

    def start(self, sync: float = 0.0) -> None:
        self.t0 = (sync, proc_cpu(self.moto_pid), time.process_time(), *self._machine())

    def stop(self, sync: float = 0.0) -> dict:
        idle, total = self._machine()
        return {
            "sync_cpu": sync - self.t0[0],
            "moto_cpu": proc_cpu(self.moto_pid) - self.t0[1],
            "proxy_cpu": time.process_time() - self.t0[2],
            "machine_busy": 1 - (idle - self.t0[3]) / max(total - self.t0[4], 1),
        }


def child_env(proxy_url: str) -> dict[str, str]:
    return {**os.environ, "AWS_ENDPOINT_URL": proxy_url}


def run_cli(proxy_url: str, logs: Path, meter: Meter) -> tuple[float, int, dict]:
    """`manage.py cdkd sync --json` in one process: (seconds, records fetched, CPU)."""
    import resource

    def children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    meter.start(children())
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "manage.py", "cdkd", "sync", "--json"],
        cwd=ROOT,
        env=child_env(proxy_url),
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    cpu = meter.stop(children())
    (logs / "cli.log").write_text(out.stderr)
    rows = json.loads(out.stdout)["accounts"]
    errors = [r["errors"] for r in rows if r["errors"]]
    assert not errors, errors[:3]
    return seconds, sum(r["fetched"] for r in rows), cpu


def run_workers(n: int, proxy_url: str, logs: Path, meter: Meter) -> dict:
    """Start `n` sync workers, queue one SyncRun of every account, time it to the end."""
    from rq import Worker

    from cdkd_site.queues import get_queue
    from stacks.models import Account, SyncRun
    from stacks.sync import start_sync_run

    queue = get_queue("sync")
    queue.connection.flushdb()
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "rqworker", "sync"],
            cwd=ROOT,
            env=child_env(proxy_url),
            stdout=subprocess.DEVNULL,
            stderr=(logs / f"workers{n}-{i}.log").open("w"),
        )
        for i in range(n)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(Worker.all(queue=queue)) < n:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"{n} workers did not start; see {logs}")
            time.sleep(0.2)
        meter.start(sum(proc_cpu(p.pid, children=True) for p in procs))
        started = time.monotonic()
        run = start_sync_run(list(Account.objects.values_list("pk", flat=True)), trigger="command")
        while True:
            run = SyncRun.objects.get(pk=run.pk)
            if run.finished:
                break
            time.sleep(0.1)
        seconds = time.monotonic() - started
        time.sleep(0.5)  # the last work-horse is reaped into its worker's CPU figures
        cpu = meter.stop(sum(proc_cpu(p.pid, children=True) for p in procs))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    accounts = run.result["accounts"]
    errors = [a["errors"] for a in accounts if a["errors"]]
    assert run.status == "succeeded" and not errors, (run.status, errors[:3])
    per_worker = sorted(Counter(a["worker"] for a in accounts).values(), reverse=True)
    return {
        "seconds": seconds,
        "fetched": sum(a["fetched"] for a in accounts),
        "accounts_per_worker": per_worker,
        "cpu": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=30)
    parser.add_argument("--stacks", type=int, default=1000, help="records per account")
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--skip-cli", action="store_true", help="leave out the one-process `cdkd sync`")
    args = parser.parse_args()
    counts = [int(c) for c in args.workers.split(",")]

    from tests.support.motoserver import MotoServer
    from tests.support.s3proxy import S3Proxy

    logs = ROOT / "bench" / "out" / "scale"
    logs.mkdir(parents=True, exist_ok=True)
    moto = MotoServer().start()
    proxy = S3Proxy(moto.url, latency=0.0).start()
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    try:
        accounts = account_ids(args.accounts)
        seed(accounts, args.stacks, moto.url)
        proxy.latency = args.latency_ms / 1000  # from here on every request pays it
        setup_database(
            os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB), os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS)
        )
        from stacks.models import Account

        for a in accounts:
            Account.objects.create(account_id=a, role_arn=f"arn:aws:iam::{a}:role/cdkd-admin")
        records = args.accounts * args.stacks
        meter = Meter(moto._proc.pid)
        rows: list[dict] = []
        if not args.skip_cli:
            reset_mirror()
            proxy.reset_counts()
            seconds, fetched, cpu = run_cli(proxy.url, logs, meter)
            rows.append({"label": "cdkd sync, 1 process", "seconds": seconds, "fetched": fetched, "cpu": cpu})
            rows[-1]["gets"] = proxy.snapshot()["GetObject"]
            print(f"cdkd sync (one process): {seconds:.1f} s", flush=True)
        for n in counts:
            reset_mirror()
            proxy.reset_counts()
            result = run_workers(n, proxy.url, logs, meter)
            spread = "+".join(str(c) for c in result["accounts_per_worker"])
            rows.append({"label": f"{n} worker{'s' if n > 1 else ''}", "spread": spread, **result})
            rows[-1]["gets"] = proxy.snapshot()["GetObject"]
            print(f"{n} workers: {result['seconds']:.1f} s", flush=True)
    finally:
        proxy.stop()
        moto.stop()

    base = next((r["seconds"] for r in rows if r["label"] == "1 worker"), None)
    print()
    print(
        f"first sync of {args.accounts} accounts x {args.stacks} records, +{args.latency_ms:g} ms per S3 request, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{'':22} {'wall':>7} {'records/s':>9} {'vs 1 worker':>11}   CPU s: {'sync':>5} {'moto':>5} {'proxy':>5}"
        f"  machine busy  GetObject  accounts per worker"
    )
    for r in rows:
        ratio = f"{base / r['seconds']:.2f}x" if base else "-"
        cpu = r["cpu"]
        print(
            f"{r['label']:22} {r['seconds']:6.1f}s {r['fetched'] / r['seconds']:9.0f} {ratio:>11}"
            f"          {cpu['sync_cpu']:5.1f} {cpu['moto_cpu']:5.1f} {cpu['proxy_cpu']:5.1f}"
            f"  {cpu['machine_busy']:11.0%}  {r['gets']:9}  {r.get('spread', '-')}"
        )
        assert r["fetched"] == records, (r["label"], r["fetched"], records)
    (logs / "scale_bench.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
