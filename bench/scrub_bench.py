"""Secret-scan benchmark: prints figures, asserts nothing.

    .venv/bin/python bench/scrub_bench.py [--stacks 5000] [--versions 3] [--secrets 40] [--latency-ms 0]
                                          [--concurrency 16]

A moto server (own process) behind the loopback proxy (`--latency-ms` per request). One
account holds `--secrets` Secrets Manager secrets (half JSON with username/password) and
SSM SecureString parameters; `--stacks` records of ~20 resources each, every record
written `--versions` times, one record in 50 holding a secret somewhere. Measured: the
whole-account scan with history (object versions per second, records per second, S3
requests by operation) and the same scan of current versions only.
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
REGION = "us-east-1"


def record(stack: str, version: int, secret: str | None) -> bytes:
    resources = {}
    for i in range(20):
        name = f"{stack}-q{i}"
        resources[f"Queue{i}4A7E3555"] = {
            "physicalId": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}",
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": name, "VisibilityTimeout": 45 + version},
            "attributes": {"Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}", "QueueName": name},
            "dependencies": [f"Queue{i - 1}4A7E3555"] if i else [],
        }
    outputs = {"QueueArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{stack}-q0"}
    if secret:
        outputs["Conn"] = f"postgres://app:{secret}@db:5432/app"
    body = {"version": 11, "stackName": stack, "region": REGION, "resources": resources, "outputs": outputs}
    return json.dumps(body, indent=2).encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stacks", type=int, default=5000)
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--secrets", type=int, default=40)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    from engine import aws as engine_aws
    from engine.backend import StateBucket
    from engine.keys import KeyLayout
    from engine.scrub import scan
    from tests.support.fixtures import AwsHelper
    from tests.support.motoserver import MotoServer
    from tests.support.s3proxy import S3Proxy

    moto = MotoServer().start()
    proxy = S3Proxy(moto.url).start()
    for name, value in {
        "AWS_ENDPOINT_URL": proxy.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }.items():
        os.environ[name] = value
    helper = AwsHelper(moto, proxy)
    try:
        session = helper.account_session(ACCOUNT)
        sm = session.client("secretsmanager", region_name=REGION, endpoint_url=moto.url)
        ssm = session.client("ssm", region_name=REGION, endpoint_url=moto.url)
        values = []
        for i in range(args.secrets):
            value = f"bench-secret-{i:04d}-Zq9"
            values.append(value)
            if i % 3 == 0:
                ssm.put_parameter(Name=f"/bench/p{i}", Value=value, Type="SecureString")
            elif i % 3 == 1:
                sm.create_secret(Name=f"bench/s{i}", SecretString=json.dumps({"username": f"u{i}", "password": value}))
            else:
                sm.create_secret(Name=f"bench/s{i}", SecretString=value)
        helper.make_bucket(ACCOUNT, BUCKET)
        s3 = helper.s3(ACCOUNT)
        started = time.monotonic()

        def seed(i: int) -> None:
            stack = f"Stack{i:05d}"
            for v in range(args.versions):
                secret = values[i % len(values)] if i % 50 == 0 and v == 0 else None
                s3.put_object(Bucket=BUCKET, Key=f"cdkd/{stack}/{REGION}/state.json", Body=record(stack, v, secret))

        with ThreadPoolExecutor(32) as pool:
            list(pool.map(seed, range(args.stacks)))
        print(f"seeded {args.stacks} records x {args.versions} versions in {time.monotonic() - started:.1f} s")

        proxy.latency = args.latency_ms / 1000
        figures = {}
        for history in (True, False):
            engine_aws.clear_caches()
            proxy.reset_counts()
            bucket = StateBucket.open(helper.access(ACCOUNT), actor="bench", bucket=BUCKET, region=REGION)
            t0 = time.monotonic()
            result = scan(bucket, KeyLayout(), history=history, concurrency=args.concurrency)
            seconds = time.monotonic() - t0
            label = "with history" if history else "current only"
            figures[label] = {
                "seconds": round(seconds, 2),
                "object_versions": result.objects_scanned,
                "versions_per_second": round(result.objects_scanned / seconds, 1),
                "records_per_second": round(result.keys / seconds, 1),
                "match_seconds": round(result.match_seconds, 2),
                "findings": len(result.findings),
                "secrets_searched": result.secrets,
                "requests": dict(proxy.snapshot()),
            }
            print(f"scan {label}: {json.dumps(figures[label])}")
        out = ROOT / "bench" / "out"
        out.mkdir(parents=True, exist_ok=True)
        (out / "scrub_bench.json").write_text(json.dumps({"args": vars(args), "figures": figures}, indent=2))
    finally:
        proxy.stop()
        moto.stop()


if __name__ == "__main__":
    main()
