"""Deploy benchmark: prints figures, asserts nothing.

    .venv/bin/python bench/deploy_bench.py [--queues 50] [--topics 50] [--latency-ms 20]

A synthesized stack of `--queues` SQS queues and `--topics` SNS topics with no dependencies,
deployed as a new stack through the `deploy` operation spec (engine.deploy.operation: the
plan, then the executor under cdkd's lock) to a moto server (own process) behind a loopback
proxy adding `--latency-ms` to every request: once with concurrency 10 (us-east-1) and once
with concurrency 1 (us-west-2), in the same run. The figures are the wall time of each
execute, their ratio and the requests each made (AWS APIs and S3 state writes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
GOLDEN = ROOT / "tests" / "fixtures" / "deploy" / "cdkd-0.284.40" / "assembly"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=50)
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()

    from bench.harness import moto_world

    with moto_world() as proxy:
        work = Path(tempfile.mkdtemp(prefix="deploy-bench-"))
        try:
            run(args, proxy, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def app(args, work: Path, region: str) -> str:
    """The golden app with only the bench's queues and topics, synthesized for `region` (the
    engine refuses to deploy an assembly into a region it was not synthesized for)."""
    out = work / region / "cdk.out"
    shutil.copytree(GOLDEN, out)
    manifest = out / "manifest.json"
    manifest.write_text(manifest.read_text().replace(f"aws://{ACCOUNT}/us-east-1", f"aws://{ACCOUNT}/{region}"))
    resources = {f"Queue{i:03d}": {"Type": "AWS::SQS::Queue"} for i in range(args.queues)}
    resources |= {f"Topic{i:03d}": {"Type": "AWS::SNS::Topic"} for i in range(args.topics)}
    (out / "GoldenCdkStack.template.json").write_text(json.dumps({"Resources": resources}))
    return str(out)


def seed() -> None:
    from bench.harness import account_session, versioned_bucket

    versioned_bucket(account_session(ACCOUNT), BUCKET)


def run(args, proxy, work: Path) -> None:
    seed()
    os.environ["AWS_ENDPOINT_URL"] = proxy.url
    proxy.latency = args.latency_ms / 1000

    from engine.aws import AccountAccess
    from engine.backend import StateBucket
    from engine.keys import KeyLayout
    from engine.operations import Context, spec_for

    access = AccountAccess(account_id=ACCOUNT, role_arn=f"arn:aws:iam::{ACCOUNT}:role/cdkd-admin")
    bucket = StateBucket.open(access, actor="bench")
    spec = spec_for("deploy")
    total = args.queues + args.topics
    figures = {}
    for region, concurrency in (("us-east-1", 10), ("us-west-2", 1)):
        ctx = Context(
            bucket=bucket,
            layout=KeyLayout("cdkd"),
            stack="GoldenCdkStack",
            region=region,
            params={"account": ACCOUNT, "app": app(args, work, region), "concurrency": concurrency},
            operation_id=f"bench-{concurrency}",
            person="bench",
        )
        plan = spec.plan(ctx)
        proxy.reset_counts()
        started = time.monotonic()
        outcome = spec.execute(ctx, plan)
        seconds = time.monotonic() - started
        figures[concurrency] = seconds
        counts = proxy.snapshot()
        print(
            f"concurrency {concurrency:2d}: {total} resources deployed in {seconds:.1f} s ({outcome.status}, "
            f"counts {outcome.details.get('counts')}, {sum(counts.values())} requests: "
            + ", ".join(
                f"{k.replace('Unknown', 'SQS (JSON)')} {v}"
                for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:6]
            )
            + ")"
        )
    print(f"+{args.latency_ms:g} ms per request; concurrency 10 is {figures[1] / figures[10]:.1f}x faster than 1")


if __name__ == "__main__":
    main()
