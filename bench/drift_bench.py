"""Drift benchmark: prints figures, asserts nothing.

    .venv/bin/python bench/drift_bench.py [--queues 200] [--latency-ms 25]

One stack of `--queues` SQS queues in a moto server (own process) behind a loopback proxy
adding `--latency-ms` to every request; every queue has an observedProperties baseline and
every tenth one has its VisibilityTimeout changed out of band. engine.drift checks the
stack at concurrency 1 and at concurrency 10, in the same run: wall time, the API calls the
check counted itself, the requests the proxy saw, and the drift found.
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
STACK = "DriftBench"


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
    names = [f"drift-q{i:03d}" for i in range(args.queues)]

    def make(name: str) -> str:
        return sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "45"})["QueueUrl"]

    with ThreadPoolExecutor(16) as pool:
        urls = list(pool.map(make, names))
    resources = {}
    for i, (name, url) in enumerate(zip(names, urls, strict=True)):
        observed = {
            "QueueName": name,
            "VisibilityTimeout": 45,
            "DelaySeconds": 0,
            "ReceiveMessageWaitTimeSeconds": 0,
            "Tags": [],
        }
        resources[f"Queue{i:03d}"] = {
            "physicalId": url,
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": name, "VisibilityTimeout": 45},
            "observedProperties": observed,
            "attributes": {},
            "provisionedBy": "sdk",
        }
        if i % 10 == 0:  # drift out of band
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "99"})
    body = {"version": 11, "stackName": STACK, "region": "us-east-1", "resources": resources, "outputs": {}}
    s3.put_object(Bucket=BUCKET, Key=f"cdkd/{STACK}/us-east-1/state.json", Body=json.dumps(body, indent=2))


def run(args, proxy) -> None:
    seed(args)
    os.environ["AWS_ENDPOINT_URL"] = proxy.url
    proxy.latency = args.latency_ms / 1000

    from engine.aws import AccountAccess
    from engine.backend import StateBucket
    from engine.drift import check_stack
    from engine.keys import KeyLayout

    access = AccountAccess(account_id=ACCOUNT, role_arn=f"arn:aws:iam::{ACCOUNT}:role/cdkd-admin")
    bucket = StateBucket.open(access, actor="bench")
    figures = {}
    for concurrency in (1, 10):
        proxy.reset_counts()
        started = time.monotonic()
        report = check_stack(bucket, KeyLayout("cdkd"), STACK, "us-east-1", concurrency=concurrency)
        seconds = time.monotonic() - started
        figures[concurrency] = seconds
        print(
            f"concurrency {concurrency:>2}: {len(report.resources)} queues checked in {seconds:.1f} s, "
            f"{report.api_calls} API calls ({report.api_calls / len(report.resources):.1f} per resource), "
            f"{sum(proxy.snapshot().values())} requests through the proxy (the record's GET included); "
            f"found {report.counts()}"
        )
    print(f"+{args.latency_ms:g} ms per request; concurrency 10 is {figures[1] / figures[10]:.1f}x faster than 1")


if __name__ == "__main__":
    main()
