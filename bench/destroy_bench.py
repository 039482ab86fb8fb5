"""Destroy benchmark: prints figures, asserts nothing.

    .venv/bin/python bench/destroy_bench.py [--queues 200] [--latency-ms 25]

Two stacks of `--queues` independent SQS queues each, in a moto server (own process)
behind a loopback proxy adding `--latency-ms` to every request. The engine's destroy runs
one stack with concurrency 1 and the other with concurrency 8, in the same run; the figure
is the wall time of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    args = parser.parse_args()

    from bench.harness import moto_world

    with moto_world() as proxy:
        run(args, proxy)


def seed(args) -> None:
    from bench.harness import account_session, versioned_bucket

    session = account_session(ACCOUNT)
    versioned_bucket(session, BUCKET)
    s3, sqs = session.client("s3"), session.client("sqs")
    for stack in ("Serial", "Parallel"):
        names = [f"{stack.lower()}-q{i:03d}" for i in range(args.queues)]
        with ThreadPoolExecutor(16) as pool:
            urls = list(pool.map(lambda n: sqs.create_queue(QueueName=n)["QueueUrl"], names))
        resources = {
            f"Queue{i:03d}": {
                "physicalId": url,
                "resourceType": "AWS::SQS::Queue",
                "properties": {"QueueName": name},
                "attributes": {},
                "provisionedBy": "sdk",
            }
            for i, (name, url) in enumerate(zip(names, urls, strict=True))
        }
        body = {"version": 11, "stackName": stack, "region": "us-east-1", "resources": resources, "outputs": {}}
        s3.put_object(Bucket=BUCKET, Key=f"cdkd/{stack}/us-east-1/state.json", Body=json.dumps(body, indent=2))


def run(args, proxy) -> None:
    seed(args)
    os.environ["AWS_ENDPOINT_URL"] = proxy.url
    proxy.latency = args.latency_ms / 1000

    from engine.aws import AccountAccess
    from engine.backend import StateBucket
    from engine.keys import KeyLayout
    from engine.operations import Context, spec_for

    access = AccountAccess(account_id=ACCOUNT, role_arn=f"arn:aws:iam::{ACCOUNT}:role/cdkd-admin")
    bucket = StateBucket.open(access, actor="bench")
    spec = spec_for("destroy")
    figures = {}
    for stack, concurrency in (("Serial", 1), ("Parallel", 8)):
        ctx = Context(
            bucket=bucket,
            layout=KeyLayout("cdkd"),
            stack=stack,
            region="us-east-1",
            params={"concurrency": concurrency},
            operation_id=f"bench-{stack}",
            person="bench",
        )
        plan = spec.plan(ctx)
        proxy.reset_counts()
        started = time.monotonic()
        outcome = spec.execute(ctx, plan)
        seconds = time.monotonic() - started
        figures[concurrency] = seconds
        print(
            f"concurrency {concurrency}: {args.queues} queues destroyed in {seconds:.1f} s "
            f"({outcome.status}, counts {outcome.details.get('counts')}, {sum(proxy.snapshot().values())} requests)"
        )
    print(f"+{args.latency_ms:g} ms per request; concurrency 8 is {figures[1] / figures[8]:.1f}x faster than 1")


if __name__ == "__main__":
    main()
