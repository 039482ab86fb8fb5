"""`manage.py cdkd state destroy` against moto with the real providers, and a destroy whose
worker is SIGKILLed half-way."""

from __future__ import annotations

import io
import json
import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone
from rq import SimpleWorker

from engine import events
from stacks.models import Account, ApprovalPolicy, AuditEvent
from stacks.operations import reap_abandoned, request_operation, retry
from stacks.sync import sync_account
from tests.support.workers import kill_tree, wait_for, worker_process

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
KEY = "cdkd/App/us-east-1/state.json"
ROLE_DOC = json.dumps(
    {"Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
)


def queue_rows(aws, names: list[str]) -> dict:
    sqs = aws.account_session(A1).client("sqs", region_name="us-east-1", endpoint_url=aws.moto.url)
    rows = {}
    for name in names:
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        rows[f"Q{name}"] = {
            "physicalId": url,
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": name},
            "attributes": {},
            "provisionedBy": "sdk",
        }
    return rows


def existing_queues(aws) -> set[str]:
    sqs = aws.account_session(A1).client("sqs", region_name="us-east-1", endpoint_url=aws.moto.url)
    return {url.rsplit("/", 1)[1] for url in sqs.list_queues().get("QueueUrls", [])}


def record(resources: dict, **extra) -> dict:
    return {"version": 11, "stackName": "App", "region": "us-east-1", "resources": resources, "outputs": {}, **extra}


@pytest.fixture
def account(aws):
    aws.make_bucket(A1, BUCKET)
    return Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")


def destroy(*args: str) -> dict:
    out = io.StringIO()
    call_command(
        "cdkd",
        "state",
        "destroy",
        "App",
        "--account",
        A1,
        "--stack-region",
        "us-east-1",
        *args,
        stdout=out,
        stderr=io.StringIO(),
    )
    return json.loads(out.getvalue())


def test_it_destroys_a_function_before_its_role_and_records_the_run(aws, account):
    session = aws.account_session(A1)
    iam = session.client("iam", endpoint_url=aws.moto.url)
    role_arn = iam.create_role(RoleName="app-fn-role", AssumeRolePolicyDocument=ROLE_DOC)["Role"]["Arn"]
    lam = session.client("lambda", region_name="us-east-1", endpoint_url=aws.moto.url)
    lam.create_function(
        FunctionName="app-fn",
        Runtime="python3.12",
        Role=role_arn,
        Handler="h.h",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )
    resources = queue_rows(aws, ["jobs"]) | {
        "Role": {"physicalId": "app-fn-role", "resourceType": "AWS::IAM::Role", "properties": {}},
        "Fn": {
            "physicalId": "app-fn",
            "resourceType": "AWS::Lambda::Function",
            "properties": {"Role": {"Fn::GetAtt": ["Role", "Arn"]}},
        },
    }
    aws.put(A1, BUCKET, KEY, record(resources))
    order = []
    aws.proxy.add_hook(lambda api, method, path, headers: order.append((api, method, path)) and None)

    result = destroy("--yes", "--json")

    assert result["status"] == "succeeded" and result["counts"]["deleted"] == 3
    assert aws.etag(A1, BUCKET, KEY) is None
    assert not existing_queues(aws)
    function_deleted = order.index(("DeleteObject", "DELETE", "/2015-03-31/functions/app-fn"))  # Lambda's REST path
    role_deleted = next(i for i, (api, _m, _p) in enumerate(order) if api == "DeleteRole")
    assert function_deleted < role_deleted  # the role outlives the function that uses it
    assert lam.list_functions()["Functions"] == [] and iam.list_roles()["Roles"] == []
    runs = events.parse_run_index(aws.get(A1, BUCKET, "cdkd/App/us-east-1/deployments/index.json"))
    assert [(r.run_id, r.command, r.result) for r in runs] == [(result["runId"], "destroy", "SUCCEEDED")]
    stream = events.parse_event_stream(aws.get(A1, BUCKET, f"cdkd/App/us-east-1/deployments/{result['runId']}.jsonl"))
    assert [e["eventType"] for e in stream][0] == "RUN_STARTED" and stream[-1]["counts"]["deleted"] == 3
    assert AuditEvent.objects.filter(action="operation.finished", result="succeeded").exists()


def test_it_exits_2_on_a_partial_destroy_and_finishes_on_the_rerun(aws, account):
    aws.make_bucket(A1, "app-data")
    aws.put(A1, "app-data", "object.txt", b"still here")
    resources = queue_rows(aws, ["a", "b"]) | {
        "Data": {"physicalId": "app-data", "resourceType": "AWS::S3::Bucket", "properties": {}}
    }
    aws.put(A1, BUCKET, KEY, record(resources, x_unknown=1))

    with pytest.raises(CommandError) as err:
        destroy("--yes")
    assert err.value.returncode == 2
    left = json.loads(aws.get(A1, BUCKET, KEY))
    assert list(left["resources"]) == ["Data"] and left["x_unknown"] == 1 and left["outputs"] == {}

    aws.s3(A1).delete_object(Bucket="app-data", Key="object.txt")
    for version in aws.s3(A1).list_object_versions(Bucket="app-data").get("Versions", []):
        aws.s3(A1).delete_object(Bucket="app-data", Key="object.txt", VersionId=version["VersionId"])
    for marker in aws.s3(A1).list_object_versions(Bucket="app-data").get("DeleteMarkers", []):
        aws.s3(A1).delete_object(Bucket="app-data", Key="object.txt", VersionId=marker["VersionId"])

    assert destroy("--yes", "--json")["status"] == "succeeded"
    assert aws.etag(A1, BUCKET, KEY) is None


def test_it_refuses_a_damaged_record_in_one_line(aws, account):
    aws.put(A1, BUCKET, KEY, {"version": 11, "stackName": "App", "region": "us-east-1", "resources": []})

    with pytest.raises(CommandError) as err:
        destroy("--yes")

    assert err.value.returncode == 1 and "\n" not in str(err.value) and "resources" in str(err.value)
    assert aws.etag(A1, BUCKET, KEY) is not None


@override_settings(CDKD_MIN_APPROVERS_DESTROY=0)  # this installation lets a policy run destroy unapproved
def test_it_survives_a_killed_worker_mid_destroy(aws, account, shared_queue, django_user_model):
    queue = shared_queue
    names = [f"q{i}" for i in range(6)]
    aws.put(A1, BUCKET, KEY, record(queue_rows(aws, names)))
    sync_account(account)
    ApprovalPolicy.objects.create(account=account, kind="destroy", approval_required=False)
    root = django_user_model.objects.create_superuser("root")
    op = request_operation(root, account, "destroy", "App", "us-east-1", {"concurrency": 1})

    aws.proxy.latency = 0.4
    with worker_process(aws.endpoint, CDKD_MIN_APPROVERS_DESTROY="0") as worker:
        wait_for(lambda: len(existing_queues(aws)) <= 3, timeout=60, what="half of the queues to be deleted")
        kill_tree(worker.pid)
        worker.wait(timeout=10)
    aws.proxy.latency = 0.0

    # No row lost: every queue that still exists is still in the record.
    alive = existing_queues(aws)
    rows = {row["properties"]["QueueName"] for row in json.loads(aws.get(A1, BUCKET, KEY))["resources"].values()}
    assert alive <= rows and 0 < len(alive) < len(names) and len(rows - alive) <= 1

    assert reap_abandoned(now=timezone.now() + timedelta(seconds=settings.CDKD_OPERATION_ABANDON_SECONDS + 1)) == [
        op.pk
    ]
    deletes = []
    lock = threading.Lock()

    def count(api, method, path, headers):
        if headers.get("x-amz-target") == "AmazonSQS.DeleteQueue":
            with lock:
                deletes.append(path)

    aws.proxy.add_hook(count)
    retry(root, op)
    SimpleWorker([queue], connection=queue.connection).work(burst=True)

    op.refresh_from_db()
    assert op.status == "succeeded", op.error
    assert existing_queues(aws) == set()
    assert len(deletes) == len(alive)  # nothing already deleted was deleted again
    assert aws.etag(A1, BUCKET, KEY) is None


def test_it_exits_2_when_the_run_only_failed_as_cdkd_does(aws, account):
    aws.make_bucket(A1, "full-bucket")
    aws.put(A1, "full-bucket", "object.txt", b"still here")  # a non-empty bucket's delete fails
    resources = {"Data": {"physicalId": "full-bucket", "resourceType": "AWS::S3::Bucket", "properties": {}}}
    aws.put(A1, BUCKET, KEY, record(resources))

    with pytest.raises(CommandError) as err:
        destroy("--yes")

    assert err.value.returncode == 2  # errors remain: exit 2, not 1, even with nothing deleted
    assert list(json.loads(aws.get(A1, BUCKET, KEY))["resources"]) == ["Data"]


def test_it_records_the_options_in_the_params_the_plan_and_the_audit(aws, account):
    aws.put(A1, BUCKET, KEY, record(queue_rows(aws, ["opts"])))

    planned = destroy("--skip-final-snapshot", "--resource-timeout", "45m", "--resource-timeout",
                      "AWS::RDS::DBInstance=2h", "--resource-warn-after", "90s", "--json")  # fmt: skip
    options = planned["plan"]["data"]["options"]
    assert options == {
        "skip_final_snapshot": True,
        "remove_protection": False,
        "resource_timeout": {"default": 2700.0, "AWS::RDS::DBInstance": 7200.0},
        "resource_warn_after": {"default": 90.0},
    }
    assert aws.etag(A1, BUCKET, KEY) is not None  # a plan writes nothing

    result = destroy("--skip-final-snapshot", "--resource-timeout", "45m", "--yes", "--json")

    assert result["status"] == "succeeded" and aws.etag(A1, BUCKET, KEY) is None
    from stacks.models import Operation

    op = Operation.objects.get(pk=result["operation"])
    assert op.params == {"concurrency": 8, "skip_final_snapshot": True, "resource_timeout": {"default": 2700.0}}
    requested = AuditEvent.objects.get(action="operation.requested", operation=op)
    assert requested.details["options"]["skip_final_snapshot"] is True
    assert requested.details["options"]["resource_timeout"] == {"default": 2700.0}


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--resource-timeout", "soon"], "--resource-timeout soon: 'soon' is not a duration"),
        (["--resource-timeout", "Bucket=5m"], "'Bucket' is not a resource type"),
    ],
)
def test_it_refuses_bad_destroy_flags_in_one_line_writing_nothing(aws, account, args, match):
    aws.put(A1, BUCKET, KEY, record(queue_rows(aws, ["flags"])))
    before = aws.etag(A1, BUCKET, KEY)

    with pytest.raises(CommandError, match=match) as err:
        destroy(*args, "--yes")

    assert err.value.returncode == 1 and "\n" not in str(err.value)
    assert aws.etag(A1, BUCKET, KEY) == before and existing_queues(aws) == {"flags"}
