"""Deploy-plan benchmark: prints figures, asserts nothing.

    .venv/bin/python bench/plan_bench.py [--resources 500] [--latency-ms 0] [--repeat 3]

A moto server (own process) behind the loopback proxy holds one stack's record of
`--resources` resources (half SQS queues, half SSM parameters whose value reads a queue's
Arn) and the region's exports index. Each case plans a synthesized assembly against that
record through `stacks.deployplan.plan_assembly` (what `cdkd diff` and the browser run),
then masks the plan document as the browser stores it and renders the plan page's
template from it. Printed side by side, in one run:

* no change: the template the record was deployed from;
* all change: every queue's VisibilityTimeout edited and one queue in ten renamed
  (a replacement that propagates to its parameter);
* with an import: the no-change template plus one `Fn::ImportValue`.

Per case: wall time (best of `--repeat`: GET, plan and masking), the record's GET plus
the plan, the masking, the page's rows and template (compiled beforehand), and the
S3 requests by API (the record is one GetObject; the exports index is a second one only
when an ImportValue needs it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
STACK = "BenchStack"


def template(n: int, *, change: bool = False, imports: bool = False) -> dict:
    resources: dict = {}
    for i in range(n // 2):
        name = f"bench-q{i:04d}" + ("-renamed" if change and i % 10 == 0 else "")
        resources[f"Queue{i:04d}"] = {
            "Type": "AWS::SQS::Queue",
            "Properties": {"QueueName": name, "VisibilityTimeout": 60 if change else 30},
            "Metadata": {"aws:cdk:path": f"{STACK}/Queue{i:04d}/Resource"},
        }
        resources[f"Param{i:04d}"] = {
            "Type": "AWS::SSM::Parameter",
            "Properties": {"Type": "String", "Value": {"Fn::GetAtt": [f"Queue{i:04d}", "Arn"]}},
            "Metadata": {"aws:cdk:path": f"{STACK}/Param{i:04d}/Resource"},
        }
    if imports:
        resources["Param0000"]["Properties"]["Description"] = {"Fn::ImportValue": "Shared-VpcId"}
    return {"Resources": resources}


def record(n: int) -> dict:
    resources: dict = {}
    for i in range(n // 2):
        name = f"bench-q{i:04d}"
        arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        resources[f"Queue{i:04d}"] = {
            "physicalId": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}",
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": name, "VisibilityTimeout": 30},
            "attributes": {"Arn": arn, "QueueName": name},
            "dependencies": [],
            "provisionedBy": "sdk",
        }
        resources[f"Param{i:04d}"] = {
            "physicalId": f"CFN-Param{i:04d}",
            "resourceType": "AWS::SSM::Parameter",
            "properties": {"Type": "String", "Value": arn},
            "attributes": {},
            "dependencies": [f"Queue{i:04d}"],
            "provisionedBy": "sdk",
        }
    return {"version": 11, "stackName": STACK, "region": REGION, "resources": resources, "outputs": {}}


def assembly(doc: dict):
    from engine.deploy.assembly import read_assembly

    manifest = {
        "version": "55.0.0",
        "artifacts": {
            STACK: {
                "type": "aws:cloudformation:stack",
                "environment": f"aws://{ACCOUNT}/{REGION}",
                "properties": {"templateFile": f"{STACK}.template.json"},
            }
        },
    }
    files = {"manifest.json": json.dumps(manifest).encode(), f"{STACK}.template.json": json.dumps(doc).encode()}
    return read_assembly(files)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resources", type=int, default=500)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cdkd_site.settings")
    os.environ.setdefault("DEBUG", "True")
    os.environ["REDIS_URL"] = "fakeredis://"
    os.environ.setdefault("DATABASE_URL", "sqlite:///:memory:")
    import django

    django.setup()

    from tests.support.motoserver import MotoServer
    from tests.support.s3proxy import S3Proxy

    moto = MotoServer().start()
    proxy = S3Proxy(moto.url, latency=0.0).start()
    os.environ.update(
        AWS_ENDPOINT_URL=moto.url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
    )
    try:
        run(args, proxy)
    finally:
        proxy.stop()
        moto.stop()


def seed(n: int) -> int:
    import boto3

    sts = boto3.client("sts", region_name=REGION)
    creds = sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/cdkd-admin", RoleSessionName="bench")["Credentials"]
    s3 = boto3.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name=REGION,
    ).client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    body = json.dumps(record(n), indent=2).encode()
    s3.put_object(Bucket=BUCKET, Key=f"cdkd/{STACK}/{REGION}/state.json", Body=body)
    exports = {
        "indexVersion": 1,
        "region": REGION,
        "exports": {"Shared-VpcId": {"value": "vpc-123", "producerStack": "Net", "producerRegion": REGION}},
    }
    s3.put_object(Bucket=BUCKET, Key=f"cdkd/_index/{REGION}/exports.json", Body=json.dumps(exports).encode())
    return len(body)


def run(args, proxy) -> None:
    size = seed(args.resources)
    os.environ["AWS_ENDPOINT_URL"] = proxy.url
    proxy.latency = args.latency_ms / 1000

    from stacks.deployplan import mask_plan_document, plan_assembly
    from stacks.models import Account
    from stacks.records import open_bucket

    account = Account(
        account_id=ACCOUNT,
        role_arn=f"arn:aws:iam::{ACCOUNT}:role/cdkd-admin",
        resolved_bucket=BUCKET,
        bucket_region=REGION,
        prefix="cdkd",
    )
    bucket = open_bucket(account, "bench")
    # warm-up: the registry schemas load once per process (cfn-lint's package), timed apart
    started = time.perf_counter()
    plan_assembly(account, assembly(template(args.resources, change=True)), None, actor="bench", bucket=bucket)
    first = time.perf_counter() - started

    cases = [
        ("no change", template(args.resources)),
        ("all change", template(args.resources, change=True)),
        ("with an import", template(args.resources, imports=True)),
    ]
    print(f"{args.resources} resources, record {size} bytes, +{args.latency_ms:g} ms per S3 request")
    header = f"{'case':<16}{'changes':>9}{'replace':>9}{'wall ms':>10}{'GET+plan':>10}{'mask ms':>10}{'page ms':>10}"
    print(header + "  S3 requests")
    for label, doc in cases:
        asm = assembly(doc)
        best = None
        for _ in range(args.repeat):
            proxy.reset_counts()
            t0 = time.perf_counter()
            (plan,) = plan_assembly(account, asm, None, actor="bench", bucket=bucket)
            t1 = time.perf_counter()
            mask_plan_document(plan.json_node(with_plan=True))
            t2 = time.perf_counter()
            counts = dict(sorted(proxy.snapshot().items()))
            if best is None or t2 - t0 < best[0]:
                best = (t2 - t0, t1 - t0, t2 - t1, plan, counts)
        wall, plan_s, mask_s, plan, counts = best
        page_s = render_page(account, plan, mask_plan_document(plan.json_node(with_plan=True)))
        replaced = sum(1 for a in plan.plan["actions"] if a["action"] == "replace")
        print(
            f"{label:<16}{len(plan.node['changes']):>9}{replaced:>9}{wall * 1000:>10.0f}{plan_s * 1000:>10.0f}"
            f"{mask_s * 1000:>10.0f}{page_s * 1000:>10.0f}  {counts}"
        )
    print(f"(the first plan in the process, loading the registry schemas: {first * 1000:.0f} ms)")


def render_page(account, plan, document) -> float:
    """Seconds to build the plan page's rows and render its template (no database)."""
    from django.template.loader import render_to_string

    from stacks.models import Assembly, DeployPlan
    from stacks.views.plan_present import plan_nodes

    row = DeployPlan(pk=1, account=account, stack_name=plan.stack, region=plan.region, digest=plan.plan["digest"])
    row.assembly = Assembly(digest=plan.plan["assemblyDigest"])
    row.document, row.state_key, row.state_etag = document, plan.plan["stateKey"], plan.plan["stateEtag"] or ""
    render_to_string("stacks/plan.html", {"plan": row, "nodes": [], "doc": {}})  # the template compiled once
    started = time.perf_counter()
    nodes = plan_nodes(document)
    context = {"plan": row, "top": nodes[0], "nodes": nodes, "doc": document["plan"], "parameters": {}}
    context["blocking"] = list(dict.fromkeys(r for n in nodes for r in n.blocking))
    html = render_to_string("stacks/plan.html", context)
    assert len(html) > 1000
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
