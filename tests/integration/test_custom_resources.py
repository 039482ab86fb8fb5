"""Custom resources in a destroy (engine/providers/custom.py) through the real destroy runner,
against moto through the proxy.

moto cannot run Lambda code, so every Lambda-token test replaces the provider's `invoke`
seam with a local stand-in for the handler: it does what CDK's handler does (for
`Custom::S3AutoDeleteObjects`, it deletes every object version of the bucket in moto) and
then PUTs its cfn-response JSON to the request's pre-signed ResponseURL with a real HTTP
request, which lands in the moto server's state bucket where the provider polls for it.
Everything else is real: the placeholder write, the pre-signed URL, GetFunction, polling,
cleanup, the runner and its record writes. The SNS test keeps the real `sns.publish` too,
with the stand-in reading the request from an SQS queue subscribed to the topic.
"""

from __future__ import annotations

import io
import json
import threading
import urllib.request
import zipfile
from typing import Any

import pytest
from botocore.stub import Stubber

from engine.backend import StateBucket
from engine.keys import KeyLayout
from engine.operations import Context, Plan, spec_for
from engine.providers import Clients, custom
from engine.providers.base import stoppable

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
STACK = "Site"
STATE = f"cdkd/{STACK}/{REGION}/state.json"
DATA = "site-data-bucket"
FN = "site-autodelete-handler"
FN_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FN}"
TOPIC = "site-cr-topic"
TOPIC_ARN = f"arn:aws:sns:{REGION}:{ACCOUNT}:{TOPIC}"
AUTO_DELETE = "Custom::S3AutoDeleteObjects"
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }  # fmt: skip
)


def res(rtype: str, pid: Any, properties: dict | None = None, deps: list[str] | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"physicalId": pid, "resourceType": rtype, "properties": properties or {}}
    if deps:
        row["dependencies"] = deps
    row["provisionedBy"] = "sdk"
    return row


def record(resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 11,
        "stackName": STACK,
        "region": REGION,
        "resources": resources,
        "outputs": {},
        "lastModified": 1_700_000_000_000,
    }


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)  # versioned, as cdkd bootstrap makes it
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


def context(bucket: StateBucket) -> Context:
    return Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack=STACK,
        region=REGION,
        params={"concurrency": 1},
        operation_id="op-cr-1",
        person="alice",
    )


def run(ctx: Context) -> tuple[Plan, Any]:
    spec = spec_for("destroy")  # the default seams: real providers, default_clients(ctx)
    plan = spec.plan(ctx)
    return plan, spec.execute(ctx, Plan.from_json(plan.as_json()))


def client(aws, service: str) -> Any:
    return aws.account_session(ACCOUNT).client(service, region_name=REGION, endpoint_url=aws.moto.url)


def make_function(aws, name: str = FN) -> str:
    iam, lam = client(aws, "iam"), client(aws, "lambda")
    role_arn = iam.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument=TRUST)["Role"]["Arn"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("index.py", "def handler(e, c):\n    return None\n")
    lam.create_function(
        FunctionName=name, Runtime="python3.12", Role=role_arn, Handler="index.handler",
        Code={"ZipFile": buf.getvalue()},
    )  # fmt: skip
    return role_arn


def response_objects(aws) -> dict[str, list[dict[str, Any]]]:
    """Every version and delete marker under custom-resource-responses/, by kind."""
    answer = aws.s3(ACCOUNT).list_object_versions(Bucket=BUCKET, Prefix="custom-resource-responses/")
    return {"versions": answer.get("Versions", []), "markers": answer.get("DeleteMarkers", [])}


def events_of(aws) -> list[dict[str, Any]]:
    prefix = f"cdkd/{STACK}/{REGION}/deployments/"
    index = json.loads(aws.get(ACCOUNT, BUCKET, prefix + "index.json"))
    run_id = index["runs"][0]["runId"] if isinstance(index, dict) else index[0]["runId"]
    lines = aws.get(ACCOUNT, BUCKET, f"{prefix}{run_id}.jsonl").decode().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def put_response(request: dict[str, Any], status: str, reason: str = "", data: dict | None = None) -> int:
    """What cfn-response does: PUT the JSON to the pre-signed URL (empty content type)."""
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason or f"See the details in CloudWatch Log Stream: {request['RequestId']}",
            "PhysicalResourceId": request["PhysicalResourceId"],
            "StackId": request["StackId"],
            "RequestId": request["RequestId"],
            "LogicalResourceId": request["LogicalResourceId"],
            "Data": data or {},
        }
    ).encode()
    put = urllib.request.Request(request["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""})
    with urllib.request.urlopen(put, timeout=10) as answer:  # noqa: S310 - the test's own moto URL
        return answer.status


class Handler:
    """The stand-in for the handler behind a ServiceToken (see the module docstring)."""

    def __init__(self, aws, mode: str = "auto-delete") -> None:
        self.aws = aws
        self.mode = mode  # auto-delete | failed | silent | crash | direct
        self.requests: list[dict[str, Any]] = []
        self.placeholder_seen: list[bytes] = []

    def __call__(self, clients: Any, token: str, request: dict[str, Any]) -> Any:
        self.requests.append(request)
        key = request["ResponseURL"].split(f"/{BUCKET}/", 1)[1].split("?", 1)[0]
        self.placeholder_seen.append(self.aws.get(ACCOUNT, BUCKET, key))
        if self.mode == "crash":
            raise custom.InvokeFailed("the handler crashed (Lambda FunctionError Unhandled)")
        if self.mode == "direct":
            return {"Status": "SUCCESS", "PhysicalResourceId": request["PhysicalResourceId"]}
        if self.mode == "failed":
            put_response(request, "FAILED", reason="bucket is not empty and I refuse")
        elif self.mode == "auto-delete":
            self._empty(request["ResourceProperties"]["BucketName"])
            put_response(request, "SUCCESS", data={"Note": "handler-minted-value"})
        return None  # CDK's node handlers answer through the URL only

    def _empty(self, bucket_name: str) -> None:
        """CDK's auto-delete-objects handler on Delete: only a bucket tagged for it, every
        object version and delete marker."""
        s3 = self.aws.s3(ACCOUNT)
        tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket_name)["TagSet"]}
        if tags.get("aws-cdk:auto-delete-objects") != "true":
            return
        while True:
            page = s3.list_object_versions(Bucket=bucket_name)
            doomed = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            if not doomed:
                return
            s3.delete_objects(Bucket=bucket_name, Delete={"Objects": doomed})


@pytest.fixture
def handler(aws, monkeypatch) -> Handler:
    stand_in = Handler(aws)
    monkeypatch.setattr(custom.PROVIDER, "invoke", stand_in)
    return stand_in


def cr_row(properties: dict[str, Any], pid: str = "site-data-bucket-autodelete", deps: list[str] | None = None):
    return res(AUTO_DELETE, pid, properties, deps)


# --- the CDK shape, end to end ---------------------------------------------------------------


def test_it_destroys_a_cdk_bucket_with_auto_delete_objects_to_nothing(aws, bucket, handler, monkeypatch):
    role_arn = make_function(aws)
    s3 = aws.s3(ACCOUNT)
    aws.make_bucket(ACCOUNT, DATA)  # versioned: the handler must remove every version
    s3.put_bucket_tagging(Bucket=DATA, Tagging={"TagSet": [{"Key": "aws-cdk:auto-delete-objects", "Value": "true"}]})
    for n in range(3):
        s3.put_object(Bucket=DATA, Key=f"obj-{n}.txt", Body=b"v1")
        s3.put_object(Bucket=DATA, Key=f"obj-{n}.txt", Body=b"v2")
    s3.delete_object(Bucket=DATA, Key="obj-0.txt")  # a delete marker too
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": role_arn}, "Action": "s3:DeleteObject*",
             "Resource": f"arn:aws:s3:::{DATA}/*"}
        ],
    }  # fmt: skip
    s3.put_bucket_policy(Bucket=DATA, Policy=json.dumps(policy))
    resources = {
        "HandlerRole": res("AWS::IAM::Role", f"{FN}-role"),
        "Handler": res("AWS::Lambda::Function", FN, {"Role": role_arn}, deps=["HandlerRole"]),
        "Data": res("AWS::S3::Bucket", DATA, {"BucketName": DATA}),
        "DataPolicy": res("AWS::S3::BucketPolicy", DATA, {"Bucket": DATA, "PolicyDocument": policy}, deps=["Data"]),
        "DataAutoDelete": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA}, deps=["Data", "DataPolicy", "Handler"]),
    }
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record(resources), indent=2))

    plan, outcome = run(context(bucket))

    assert plan.data["rows"]["DataAutoDelete"]["action"] == "delete"
    assert outcome.status == "succeeded", outcome.summary
    assert outcome.details["counts"] == {"deleted": 5, "retained": 0, "skipped": 0, "failed": 0, "unverified": 0}
    assert aws.etag(ACCOUNT, BUCKET, STATE) is None  # 0 resources left: the record is gone
    with pytest.raises(Exception, match="NoSuchBucket|Not Found|404"):
        s3.head_bucket(Bucket=DATA)
    # CloudFormation's Delete request, field by field, sent once.
    [request] = handler.requests
    request_id = request["RequestId"]
    assert request_id.startswith("cdkd-") and len(request_id.split("-")) == 3
    assert f"/{BUCKET}/custom-resource-responses/{request_id}.json?" in request["ResponseURL"]
    assert "X-Amz-Signature=" in request["ResponseURL"] and "X-Amz-Expires=7200" in request["ResponseURL"]
    assert {k: v for k, v in request.items() if k not in ("RequestId", "ResponseURL")} == {
        "RequestType": "Delete",
        "ResourceType": AUTO_DELETE,
        "LogicalResourceId": "DataAutoDelete",
        "PhysicalResourceId": "site-data-bucket-autodelete",
        "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/cdkd-DataAutoDelete/cdkd",
        "ResourceProperties": {"ServiceToken": FN_ARN, "BucketName": DATA},
    }
    assert handler.placeholder_seen == [b""]  # the empty placeholder existed before the invoke
    # The response (with its Data) is not left readable, not even by VersionId.
    left = response_objects(aws)
    assert left["versions"] == [] and [m["Key"] for m in left["markers"]] == [
        f"custom-resource-responses/{request_id}.json"
    ]


def test_it_sends_the_delete_to_an_sns_token_and_reads_the_answer(aws, bucket, monkeypatch):
    """The real sns.publish; the stand-in handler is a thread reading an SQS queue
    subscribed to the topic, which PUTs SUCCESS to the URL in the request it received."""
    sns, sqs = client(aws, "sns"), client(aws, "sqs")
    sns.create_topic(Name=TOPIC)
    queue_url = sqs.create_queue(QueueName="site-cr-handler")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=TOPIC_ARN, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    received: list[dict[str, Any]] = []
    answered = threading.Event()

    def sns_handler() -> None:
        for _ in range(50):
            messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", [])
            if messages:
                request = json.loads(messages[0]["Body"])
                received.append(request)
                put_response(request, "SUCCESS")
                answered.set()
                return

    worker = threading.Thread(target=sns_handler, daemon=True)
    worker.start()
    polls: list[float] = []
    # Between polls the provider waits on the handler's answer instead of a fixed 2 s.
    monkeypatch.setattr(custom.PROVIDER, "sleep", lambda seconds: (polls.append(seconds), answered.wait(20)))
    props = {"ServiceToken": TOPIC_ARN, "Enabled": True, "Count": 3, "Nested": {"Flag": False}, "List": [1, True]}
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Hook": res("Custom::Hook", "hook-1", props)})))

    _, outcome = run(context(bucket))
    worker.join(5)

    assert outcome.status == "succeeded", outcome.summary
    assert aws.etag(ACCOUNT, BUCKET, STATE) is None
    [request] = received
    assert request["RequestType"] == "Delete" and request["ResourceType"] == "Custom::Hook"
    assert request["PhysicalResourceId"] == "hook-1" and request["LogicalResourceId"] == "Hook"
    # CloudFormation's stringified properties, as cdkd sends them (lists left as they are).
    assert request["ResourceProperties"] == {
        "ServiceToken": TOPIC_ARN, "Enabled": "true", "Count": "3", "Nested": {"Flag": "false"}, "List": [1, True],
    }  # fmt: skip
    assert set(polls) <= {2.0}  # SNS: cdkd's fixed 2 s interval, no backoff
    assert response_objects(aws)["versions"] == []


# --- every skip rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "reason"),
    [
        ({}, custom.NO_PROPERTIES),
        ({"BucketName": DATA}, custom.NO_SERVICE_TOKEN),
        ({"ServiceToken": "***", "BucketName": DATA}, custom.MASKED_TOKEN),
        ({"ServiceToken": "{{resolve:secretsmanager:handler-arn:SecretString:arn}}"}, custom.RESOLVE_TOKEN),
        ({"ServiceToken": FN_ARN, "Config": {"Password": "***"}}, custom.MASKED_PROPERTIES),
        ({"ServiceToken": FN_ARN, "Tokens": ["a", "***"]}, custom.MASKED_PROPERTIES),
    ],
    ids=["no-properties", "no-service-token", "masked-token", "resolve-token", "masked-property", "masked-in-list"],
)
def test_it_skips_a_record_it_cannot_send_and_sends_nothing(aws, bucket, handler, properties, reason):
    make_function(aws)
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Cr": cr_row(properties)})))
    aws.reset_counts()

    plan, outcome = run(context(bucket))

    # The confirmation page's plan already says so, with cdkd's reason.
    assert plan.data["rows"]["Cr"]["action"] == "skip" and plan.data["rows"]["Cr"]["reason"] == reason
    assert handler.requests == []  # no Delete request sent
    assert response_objects(aws)["versions"] == [] and response_objects(aws)["markers"] == []  # no placeholder
    assert outcome.status == "partial" and outcome.details["counts"]["skipped"] == 1
    assert list(json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]) == ["Cr"]  # the record is kept
    skipped = [e for e in events_of(aws) if e["eventType"] == "RESOURCE_SKIPPED"]
    assert [(e["logicalId"], e["reason"]) for e in skipped] == [("Cr", reason)]


def test_it_skips_when_the_backing_lambda_is_gone_without_invoking_anything(aws, bucket, handler):
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Cr": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA})})))

    plan, outcome = run(context(bucket))

    assert plan.data["rows"]["Cr"]["action"] == "delete"  # only GetFunction at run time can tell
    assert handler.requests == []
    assert response_objects(aws) == {"versions": [], "markers": []}  # no placeholder either
    assert outcome.status == "partial" and outcome.details["counts"]["skipped"] == 1
    assert list(json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]) == ["Cr"]
    skipped = [e["reason"] for e in events_of(aws) if e["eventType"] == "RESOURCE_SKIPPED"]
    assert skipped == ["backing Lambda function is gone — Delete handler not invoked"]


def test_it_keeps_a_resource_whose_handler_answered_failed(aws, bucket, handler):
    handler.mode = "failed"
    make_function(aws)
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Cr": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA})})))

    _, outcome = run(context(bucket))

    assert len(handler.requests) == 1  # the Delete was sent
    assert outcome.status == "partial" and outcome.details["counts"]["skipped"] == 1
    assert list(json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]) == ["Cr"]
    skipped = [e["reason"] for e in events_of(aws) if e["eventType"] == "RESOURCE_SKIPPED"]
    assert skipped == ["Delete handler reported FAILED — resource unproven"]
    assert response_objects(aws)["versions"] == []  # the FAILED response is purged too


def test_it_keeps_a_resource_whose_handler_crashed(aws, bucket, handler):
    handler.mode = "crash"
    make_function(aws)
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Cr": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA})})))

    _, outcome = run(context(bucket))

    assert outcome.details["counts"]["skipped"] == 1
    skipped = [e["reason"] for e in events_of(aws) if e["eventType"] == "RESOURCE_SKIPPED"]
    assert skipped == ["Delete request to the handler did not complete — resource unproven"]
    assert response_objects(aws)["versions"] == []


def test_it_gives_up_after_the_timeout_setting_on_cdkds_backoff_and_keeps_the_row(aws, bucket, handler, monkeypatch,
                                                                                   settings):  # fmt: skip
    """A fake clock: each sleep advances it, so the poll schedule is checked without waiting."""
    handler.mode = "silent"  # never answers
    settings.CDKD_CUSTOM_RESOURCE_TIMEOUT_SECONDS = 10
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(custom.PROVIDER, "sleep", sleep)
    monkeypatch.setattr(custom.PROVIDER, "clock", lambda: now[0])
    make_function(aws)
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Cr": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA})})))

    _, outcome = run(context(bucket))

    assert slept == [2.0, 3.0, 4.5, 6.75]  # from 2 s, x1.5 (cap 30 s), until 10 s have passed
    assert outcome.details["counts"]["skipped"] == 1
    skipped = [e["reason"] for e in events_of(aws) if e["eventType"] == "RESOURCE_SKIPPED"]
    assert skipped == ["Delete request to the handler did not complete — resource unproven"]
    left = response_objects(aws)
    assert left["versions"] == [] and len(left["markers"]) == 1  # the empty placeholder is cleaned


def test_it_accepts_an_answer_in_the_lambdas_own_payload_without_polling(aws, bucket, handler, monkeypatch):
    handler.mode = "direct"
    monkeypatch.setattr(custom.PROVIDER, "sleep", lambda seconds: pytest.fail("polled for a direct answer"))
    make_function(aws)
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Cr": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA})})))

    _, outcome = run(context(bucket))

    assert outcome.status == "succeeded" and aws.etag(ACCOUNT, BUCKET, STATE) is None
    assert response_objects(aws)["versions"] == []


def test_it_purges_every_earlier_version_of_the_response_including_a_late_overwrite(aws, bucket, handler, monkeypatch):
    """A handler that PUTs twice (a retry, a late second answer) leaves two versions with
    Data in them; both go, and no other key under the prefix is touched."""
    other = "custom-resource-responses/cdkd-1-other.json"  # another run's live placeholder
    aws.put(ACCOUNT, BUCKET, other, b"")
    make_function(aws)

    def twice(clients: Any, token: str, request: dict[str, Any]) -> None:
        handler.requests.append(request)
        put_response(request, "SUCCESS", data={"Secret": "first"})
        put_response(request, "SUCCESS", data={"Secret": "second"})

    monkeypatch.setattr(custom.PROVIDER, "invoke", twice)
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record({"Cr": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA})})))

    _, outcome = run(context(bucket))

    assert outcome.status == "succeeded"
    key = f"custom-resource-responses/{handler.requests[0]['RequestId']}.json"
    left = response_objects(aws)
    assert [v["Key"] for v in left["versions"]] == [other]  # the other run's placeholder stays
    assert [m["Key"] for m in left["markers"]] == [key]  # ours: placeholder + 2 answers purged


def test_it_invokes_lambda_request_response_with_the_log_tail_as_cdkd_does():
    """botocore's Stubber stands in for Lambda (moto cannot run the function): this checks
    the call the provider makes and how it reads the answer."""
    import boto3

    lam = boto3.client("lambda", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    request = {"RequestType": "Delete", "RequestId": "cdkd-1-abc"}

    class One:
        def __call__(self, service: str, region: str) -> Any:
            assert (service, region) == ("lambda", "eu-west-1")  # the token's region
            return lam

    token = f"arn:aws:lambda:eu-west-1:{ACCOUNT}:function:{FN}"
    expected = {
        "FunctionName": token,
        "InvocationType": "RequestResponse",
        "LogType": "Tail",
        "Payload": json.dumps(request).encode(),
    }
    with Stubber(lam) as stub:
        stub.add_response("invoke", {"StatusCode": 200, "Payload": io.BytesIO(b'{"Status": "SUCCESS"}')}, expected)
        assert custom.default_invoke(One(), token, request) == {"Status": "SUCCESS"}  # type: ignore[arg-type]
        stub.add_response("invoke", {"StatusCode": 200, "Payload": io.BytesIO(b"null")}, expected)
        assert custom.default_invoke(One(), token, request) is None  # the async shape
        stub.add_response(
            "invoke",
            {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": io.BytesIO(b'{"errorMessage": "pw=hunter2"}')},
            expected,
        )
        with pytest.raises(custom.InvokeFailed) as crashed:
            custom.default_invoke(One(), token, request)  # type: ignore[arg-type]
        assert "hunter2" not in str(crashed.value)  # the handler's error payload is not repeated


def test_it_fails_rather_than_sends_when_no_state_bucket_was_given(aws, handler):
    from engine.providers import ProviderError, ResourceRef

    ref = ResourceRef("Cr", AUTO_DELETE, "pid", {"ServiceToken": FN_ARN}, region=REGION, account_id=ACCOUNT)
    with pytest.raises(ProviderError, match="no state bucket"):
        custom.PROVIDER.delete(Clients(aws.account_session(ACCOUNT)), ref)
    assert handler.requests == []


# --- a cancel stops the wait ---------------------------------------------------------------


def test_it_stops_waiting_for_the_answer_when_the_run_is_cancelled(aws, bucket, handler, monkeypatch):
    """A fake clock: the cancel comes during the second poll interval of an hour's timeout;
    the wait ends at the next poll, the row is kept as unproven and the rest never starts."""
    handler.mode = "silent"  # never answers
    ctx = context(bucket)
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds
        if len(slept) == 2:
            ctx.cancel_event.set()  # someone pressed Cancel

    monkeypatch.setattr(custom.PROVIDER, "sleep", sleep)
    monkeypatch.setattr(custom.PROVIDER, "clock", lambda: now[0])
    make_function(aws)
    queue = res("AWS::SQS::Queue", f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/never-reached")
    rows = {"Cr": cr_row({"ServiceToken": FN_ARN, "BucketName": DATA}, deps=["Queue"]), "Queue": queue}
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record(rows)))

    _, outcome = run(ctx)

    assert slept == [2.0, 3.0] and len(handler.requests) == 1  # not 3600 s of polling
    assert outcome.status == "partial" and outcome.details["reason"] == "cancelled"
    assert sorted(json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]) == ["Cr", "Queue"]
    skipped = [e["reason"] for e in events_of(aws) if e["eventType"] == "RESOURCE_SKIPPED"]
    assert skipped == [custom.STOPPED_WAITING]
    assert response_objects(aws)["versions"] == []  # the placeholder is cleaned all the same


def test_its_real_wait_is_cut_into_slices_a_stop_ends(monkeypatch):
    """Without an injected clock the 30 s interval is waited a second at a time, and the
    wait ends at the first slice after a stop (time.sleep replaced to count the slices)."""
    slices: list[float] = []
    monkeypatch.setattr(custom.time, "sleep", slices.append)
    provider = custom.CustomResourceProvider()

    with stoppable(lambda: len(slices) >= 3):
        provider._pause(30.0)

    assert slices == [1.0, 1.0, 1.0]
