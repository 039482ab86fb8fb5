"""`manage.py cdkd deploy` and `cdkd rollback` against a moto server: the golden CDK app
(queue, queue policy, topic, SQS subscription, SSM parameter) deployed as a new stack, over
the record cdkd 0.284.40 wrote, a failure left for `rollback`, and a blocking plan refused.
Exit codes and the `--json` shape as the issue gives them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from stacks.models import AuditEvent, Operation

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
REGION = "us-east-1"
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "cdkd-0.284.40"
APP = str(SAMPLE / "assembly")
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"
JOURNAL = "cdkd/GoldenCdkStack/us-east-1/rollback-journal.json"
LOCK = "cdkd/GoldenCdkStack/us-east-1/lock.json"
JSON_KEYS = ["stack", "region", "result", "created", "updated", "replaced", "deleted", "unchanged", "outputs", "errors"]


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("cdkd", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc)
    return 0, out.getvalue(), err.getvalue()


@pytest.fixture
def world(aws):
    aws.make_bucket(A1, BUCKET)
    run("accounts", "add", "--account-id", A1, "--role-arn", f"arn:aws:iam::{A1}:role/cdkd-admin", "--name", "prod")
    return aws


def sqs(aws):
    return aws.account_session(A1).client("sqs", region_name=REGION, endpoint_url=aws.moto.url)


def test_it_deploys_a_new_stack_and_prints_the_json(world):
    code, out, err = run("deploy", "GoldenCdkStack", "--account", A1, "--app", APP, "--yes", "--json")
    assert code == 0, err
    body = json.loads(out)
    assert list(body) == JSON_KEYS
    assert body["stack"] == "GoldenCdkStack" and body["region"] == REGION and body["result"] == "succeeded"
    record = json.loads(world.get(A1, BUCKET, KEY))
    assert sorted(body["created"]) == sorted(record["resources"]) and len(record["resources"]) == 5
    assert body["errors"] == [] and body["updated"] == body["deleted"] == []
    queue = record["resources"]["Queue4A7E3555"]
    path = lambda url: url.split("/", 3)[3]  # noqa: E731  (the engine reaches moto through the proxy's port)
    assert [path(u) for u in sqs(world).list_queues()["QueueUrls"]] == [path(queue["physicalId"])]
    assert record["version"] == 11 and record["region"] == REGION
    assert world.etag(A1, BUCKET, LOCK) is None  # the lock was released
    op = Operation.objects.get()
    assert (op.kind, op.via, op.status) == ("deploy", "cli", "succeeded")
    assert op.etag_after == world.etag(A1, BUCKET, KEY)
    actions = list(AuditEvent.objects.filter(operation_id=op.pk).order_by("id").values_list("action", flat=True))
    assert actions == ["operation.requested", "operation.started", "operation.finished"]

    # run again: nothing to do, nothing written
    etag = world.etag(A1, BUCKET, KEY)
    code, out, _ = run("deploy", "GoldenCdkStack", "--account", A1, "--app", APP, "--yes", "--json")
    assert code == 0 and json.loads(out)["created"] == [] and world.etag(A1, BUCKET, KEY) == etag


def test_it_deploys_over_the_record_cdkd_wrote_with_no_change(world):
    world.put(A1, BUCKET, KEY, (SAMPLE / "state.json").read_bytes())
    world.put(A1, BUCKET, "cdkd/_index/us-east-1/exports.json", (SAMPLE / "exports.json").read_bytes())
    etag = world.etag(A1, BUCKET, KEY)
    code, out, err = run("deploy", "GoldenCdkStack", "--account", "prod", "--app", APP, "--yes", "--json")
    assert code == 0, err
    body = json.loads(out)
    assert body["created"] == body["updated"] == body["deleted"] == [] and len(body["unchanged"]) == 5
    assert world.etag(A1, BUCKET, KEY) == etag


def test_it_prints_the_plan_and_changes_nothing_without_yes(world):
    code, out, _ = run("deploy", "GoldenCdkStack", "--account", A1, "--app", APP)
    assert code == 0 and "create Queue4A7E3555 (AWS::SQS::Queue)" in out and "pass --yes" in out
    assert world.etag(A1, BUCKET, KEY) is None and not Operation.objects.exists()


def test_it_refuses_a_blocking_plan_with_exit_1(world):
    record = json.loads((SAMPLE / "state.json").read_bytes())
    record["outputs"] = "abc"
    world.put(A1, BUCKET, KEY, record)
    code, out, message = run("deploy", "GoldenCdkStack", "--account", A1, "--app", APP, "--yes", "--json")
    assert code == 1 and "blocking reasons" in message
    body = json.loads(out)
    assert body["result"] == "refused" and "outputs bag is unreadable" in body["errors"][0]
    assert not Operation.objects.exists()


def test_a_failed_deploy_with_no_rollback_exits_1_and_rollback_finishes_the_journal(world):
    # the parameter's name is taken by one this stack does not record: the create fails, never adopts;
    # with --concurrency 1 it runs after the topic and the queue (more dependents first)
    ssm = world.account_session(A1).client("ssm", region_name=REGION, endpoint_url=world.moto.url)
    ssm.put_parameter(Name="/GoldenCdkStack-Param165332EC", Value="someone else's", Type="String")
    code, out, message = run(
        "deploy",
        "GoldenCdkStack",
        "--account",
        A1,
        "--app",
        APP,
        "--no-rollback",
        "--concurrency",
        "1",
        "--yes",
        "--json",
    )
    assert code == 1, message
    body = json.loads(out)
    assert body["result"] == "failed" and any("Param165332EC" in e for e in body["errors"]), body
    journal = json.loads(world.get(A1, BUCKET, JOURNAL))
    assert journal["segments"][-1]["reason"] == "no-rollback-failure"
    left = json.loads(world.get(A1, BUCKET, KEY))["resources"]
    assert "Param165332EC" not in left and left  # what was created before the failure stays recorded

    code, out, err = run("rollback", "GoldenCdkStack", "--account", A1, "--stack-region", REGION, "--yes", "--json")
    assert code == 0, err
    rolled = json.loads(out)
    assert rolled["result"] == "clean" and sorted(rolled["reverted"]) == sorted(left)
    assert world.etag(A1, BUCKET, JOURNAL) is None
    assert world.etag(A1, BUCKET, KEY) is None and rolled["stateDeleted"]  # the stack's first deploy: all gone
    assert sqs(world).list_queues().get("QueueUrls", []) == []
    sns = world.account_session(A1).client("sns", region_name=REGION, endpoint_url=world.moto.url)
    assert sns.list_topics()["Topics"] == []
    assert ssm.get_parameter(Name="/GoldenCdkStack-Param165332EC")["Parameter"]["Value"] == "someone else's"
    kinds = list(Operation.objects.order_by("id").values_list("kind", "status"))
    assert kinds == [("deploy", "failed"), ("rollback", "succeeded")]

    code, out, _ = run("rollback", "GoldenCdkStack", "--account", A1, "--stack-region", REGION, "--yes", "--json")
    assert code == 0 and json.loads(out)["result"] == "nothing"
