"""Drift on a moto server: a queue and a topic deployed through the engine, changed and
deleted out of band, then `cdkd drift`, `drift --accept`, `drift --revert` and
`state refresh-observed` through the management command (operations, audit and all), with
the stored record's bytes checked after each write."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from engine.backend import StateBucket
from engine.deploy.run import Deployer, RetryPolicy
from engine.keys import KeyLayout
from engine.operations import Context
from stacks.drift import latest_drifted
from stacks.models import AuditEvent, DriftCheck, Operation

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
REGION = "us-east-1"
STACK = "DriftStack"
STATE = f"cdkd/{STACK}/{REGION}/state.json"
TEMPLATE = {
    "Resources": {
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 45}},
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {"DisplayName": "drift"}},
    }
}


def cdkd(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("cdkd", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc) + err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def drift(*extra: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cdkd("drift", STACK, "--account", ACCOUNT, "--json", *extra)
    return code, json.loads(out)


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["logicalId"]: r for r in report["resources"]}


def stored(aws) -> tuple[bytes, dict[str, Any]]:
    body = aws.get(ACCOUNT, BUCKET, STATE)
    return body, json.loads(body)


def put_record(aws, record: dict[str, Any]) -> None:
    aws.put(ACCOUNT, BUCKET, STATE, json.dumps(record, indent=2).encode())


@pytest.fixture
def world(aws):
    aws.make_bucket(ACCOUNT, BUCKET)
    bucket = StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)
    ctx = Context(
        bucket=bucket, layout=KeyLayout(), stack=STACK, region=REGION, params={}, operation_id="op-1", person="alice"
    )
    result = Deployer(retry=RetryPolicy(scale=0.0)).deploy(ctx, json.loads(json.dumps(TEMPLATE)), account=ACCOUNT)
    assert result.result == "succeeded"
    cdkd("accounts", "add", "--account-id", ACCOUNT, "--role-arn", f"arn:aws:iam::{ACCOUNT}:role/cdkd-admin")
    cdkd("sync", "--account", ACCOUNT)
    session = aws.account_session(ACCOUNT)
    aws.sqs = session.client("sqs", region_name=REGION, endpoint_url=aws.moto.url)
    aws.sns = session.client("sns", region_name=REGION, endpoint_url=aws.moto.url)
    record = stored(aws)[1]
    aws.queue_url = record["resources"]["Queue"]["physicalId"]
    aws.topic_arn = record["resources"]["Topic"]["physicalId"]
    return aws


def test_it_reports_in_sync_after_a_deploy(world):
    world.reset_counts()
    code, report = drift()

    assert code == 0
    assert {r["logicalId"]: r["status"] for r in report["resources"]} == {"Queue": "IN_SYNC", "Topic": "IN_SYNC"}
    assert report["stack"] == STACK and report["region"] == REGION
    assert report["apiCalls"] > 0
    assert world.requests["GetTopicAttributes"] == 1  # the proxy sees the reads (a control for the test below)


def test_it_shows_modified_with_the_path_and_deleted_out_of_band(world):
    world.sqs.set_queue_attributes(QueueUrl=world.queue_url, Attributes={"VisibilityTimeout": "99"})
    world.sns.delete_topic(TopicArn=world.topic_arn)

    code, report = drift()

    assert code == 1
    rows = by_id(report)
    assert rows["Queue"]["status"] == "MODIFIED"
    assert rows["Queue"]["differences"] == [{"path": "VisibilityTimeout", "expected": 45, "actual": 99}]
    assert rows["Topic"]["status"] == "DELETED" and rows["Topic"]["differences"] == []
    # the check is stored as the stack's latest, found by the board's query
    check = DriftCheck.objects.get(latest=True)
    assert check.drifted == 2 and check.resources == report["resources"]
    assert list(latest_drifted()) == [check]


def test_it_accepts_the_live_value_and_is_in_sync_again(world):
    world.sqs.set_queue_attributes(QueueUrl=world.queue_url, Attributes={"VisibilityTimeout": "99"})
    before = stored(world)[0]

    plan_code, plan_out, _ = cdkd("drift", STACK, "--account", ACCOUNT, "--accept")
    assert plan_code == 0 and "VisibilityTimeout: record 99" in plan_out
    assert stored(world)[0] == before  # without --yes nothing is written
    code, out, err = cdkd("drift", STACK, "--account", ACCOUNT, "--accept", "--yes")

    assert code == 0, err
    body, record = stored(world)
    queue = record["resources"]["Queue"]
    assert queue["observedProperties"]["VisibilityTimeout"] == 99
    assert queue["properties"]["VisibilityTimeout"] == 99  # the recorded type (a number) kept
    assert record["version"] == 11 and body.startswith(b'{\n  "version": 11,')
    assert drift()[0] == 0
    op = Operation.objects.get(kind="drift-accept")
    assert op.status == "succeeded"
    assert AuditEvent.objects.filter(operation_id=op.pk, action="operation.finished", result="succeeded").exists()


def test_it_reverts_the_queue_attribute_and_leaves_a_deleted_topic(world):
    world.sqs.set_queue_attributes(QueueUrl=world.queue_url, Attributes={"VisibilityTimeout": "99"})
    world.sns.delete_topic(TopicArn=world.topic_arn)

    code, out, err = cdkd("drift", STACK, "--account", ACCOUNT, "--revert", "--yes")

    assert code == 0, err
    assert "Topic: DELETED in AWS; revert does not re-create it" in out
    live = world.sqs.get_queue_attributes(QueueUrl=world.queue_url, AttributeNames=["VisibilityTimeout"])
    assert live["Attributes"]["VisibilityTimeout"] == "45"
    rows = by_id(drift()[1])
    assert rows["Queue"]["status"] == "IN_SYNC"
    assert rows["Topic"]["status"] == "DELETED"  # revert never re-creates a resource
    assert stored(world)[1]["resources"]["Queue"]["properties"] == {"VisibilityTimeout": 45}


def test_it_refreshes_observed_properties_and_writes_version_11(world):
    record = stored(world)[1]
    for row in record["resources"].values():
        row.pop("observedProperties", None)
    record["version"] = 9
    record["skippedOutputs"] = {"Gone": "sha256:00"}
    record["outputReads"] = [{"sourceStack": "Other", "sourceRegion": REGION, "outputName": "Url"}]
    put_record(world, record)

    dry_code, dry_out, _ = cdkd("state", "refresh-observed", STACK, "--account", ACCOUNT, "--dry-run")
    assert dry_code == 0 and "Dry run: nothing was written." in dry_out
    assert "observedProperties" not in stored(world)[0].decode()
    code, out, err = cdkd("state", "refresh-observed", STACK, "--account", ACCOUNT)

    assert code == 0, err
    body, after = stored(world)
    assert after["version"] == 11
    assert "skippedOutputs" not in after  # dropped by a run that refreshed something
    assert after["outputReads"] == record["outputReads"]  # carried as read
    queue = after["resources"]["Queue"]["observedProperties"]
    assert queue["VisibilityTimeout"] == 45 and queue["QueueName"] == world.queue_url.rsplit("/", 1)[-1]
    assert after["resources"]["Topic"]["observedProperties"]["DisplayName"] == "drift"
    assert json.dumps(after, indent=2, ensure_ascii=False).encode() == body  # cdkd's layout
    assert Operation.objects.get(kind="refresh-observed").status == "succeeded"


def test_it_never_reads_a_baseline_refused_resource(world):
    record = stored(world)[1]
    topic = record["resources"]["Topic"]
    topic.pop("observedProperties", None)
    topic["observedBaselineRefused"] = True
    put_record(world, record)
    world.sns.delete_topic(TopicArn=world.topic_arn)  # a read would say DELETED
    world.reset_counts()

    code, report = drift()

    assert code == 0
    assert by_id(report)["Topic"]["status"] == "NOT_CHECKED"
    assert by_id(report)["Topic"]["reason"] == "baselineRefused"
    assert world.requests["GetTopicAttributes"] == 0 and world.requests["ListTagsForResource"] == 0
    code, out, _ = cdkd("state", "refresh-observed", STACK, "--account", ACCOUNT)
    assert code == 0 and "baselineRefused: Topic" in out
    assert "observedProperties" not in stored(world)[1]["resources"]["Topic"]


def test_it_never_prints_or_stores_a_masked_value(world):
    secret = "hunter2-very-secret"
    world.sqs.tag_queue(QueueUrl=world.queue_url, Tags={"DbPassword": secret, "token": secret})
    record = stored(world)[1]
    queue = record["resources"]["Queue"]
    queue["properties"]["Tags"] = [{"Key": "DbPassword", "Value": "***"}, {"Key": "token", "Value": "***"}]
    queue["noEchoLeaves"] = [["Tags", 0, "Value"]]
    queue["observedProperties"]["Tags"] = [{"Key": "DbPassword", "Value": "***"}, {"Key": "token", "Value": "***"}]
    put_record(world, record)

    code, out, err = cdkd("drift", STACK, "--account", ACCOUNT, "--json")
    text_code, text, _ = cdkd("drift", STACK, "--account", ACCOUNT)

    assert code == 0 and text_code == 0  # masked positions never change the exit code
    assert by_id(json.loads(out))["Queue"]["masked"] == ["Tags[0].Value", "Tags[1].Value"]
    assert secret not in out + err + text
    assert secret not in json.dumps(list(DriftCheck.objects.values_list("resources", flat=True)))
    cdkd("state", "refresh-observed", STACK, "--account", ACCOUNT)
    assert secret.encode() not in stored(world)[0]


def test_it_shows_the_last_check_on_the_resources_tab_with_accept_and_revert(world, client, make_user):
    from django.urls import reverse

    world.sqs.set_queue_attributes(QueueUrl=world.queue_url, Attributes={"VisibilityTimeout": "99"})
    drift()
    client.force_login(make_user("olive", **{f"a{ACCOUNT}": "operator"}))

    page = client.get(reverse("stack_resources", args=[ACCOUNT, REGION, STACK]))

    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-logical-id="Queue" data-status="MODIFIED"' in html
    assert "<code>VisibilityTimeout</code>: <code>45</code> → <code>99</code>" in html
    accept = reverse("operation_new", args=[ACCOUNT, REGION, STACK, "drift-accept"])
    assert f'href="{accept}"' in html and "action-drift-revert" in html
    preview = client.get(accept)
    assert preview.status_code == 200 and "VisibilityTimeout: record 99" in preview.content.decode()
    viewer = make_user("vera", **{f"a{ACCOUNT}": "viewer"})
    client.force_login(viewer)
    html = client.get(reverse("stack_resources", args=[ACCOUNT, REGION, STACK])).content.decode()
    assert f'href="{accept}"' not in html and 'id="action-drift-accept" disabled' in html


def test_it_checks_each_account_on_a_schedule_in_its_own_job(world, settings):
    from cdkd_site.queues import get_queue
    from stacks.drift import drift_account_job, schedule_next_drift, scheduled_drift
    from stacks.models import Account

    queue = get_queue("sync")
    queue.connection.flushdb()
    settings.CDKD_DRIFT_INTERVAL = 0
    assert schedule_next_drift(0) is False  # 0 = off
    settings.CDKD_DRIFT_INTERVAL = 600

    scheduled_drift()

    account = Account.objects.get(account_id=ACCOUNT)
    queued = [queue.fetch_job(i) for i in queue.get_job_ids()]
    assert [(j.func_name, j.args) for j in queued] == [("stacks.drift.drift_account_job", (account.pk,))]
    assert any(i.startswith("cdkd-scheduled-drift") for i in queue.scheduled_job_registry.get_job_ids())
    world.sns.delete_topic(TopicArn=world.topic_arn)
    assert drift_account_job(account.pk) == 1
    check = DriftCheck.objects.get(latest=True)
    assert check.trigger == "schedule" and check.drifted == 1
    queue.connection.flushdb()


# --- a check now, from the Drift panel and the API -----------------------------------------------


def burst(queue) -> None:
    from rq import SimpleWorker

    SimpleWorker([queue], connection=queue.connection).work(burst=True)


def test_it_checks_now_from_the_drift_panel_once_at_a_time(world, client, make_user, sync_queue):
    from django.urls import reverse

    resources = reverse("stack_resources", args=[ACCOUNT, REGION, STACK])
    client.force_login(make_user("olive", **{f"a{ACCOUNT}": "operator"}))
    html = client.get(resources).content.decode()
    assert 'id="drift-never"' in html and '<button type="submit" class="secondary" id="drift-check">' in html
    world.sqs.set_queue_attributes(QueueUrl=world.queue_url, Attributes={"VisibilityTimeout": "99"})

    url = reverse("stack_drift_check", args=[ACCOUNT, REGION, STACK])
    first = client.post(url, follow=True)
    again = client.post(url, follow=True)

    assert "Drift check of DriftStack queued" in first.content.decode()
    assert "already queued or running" in again.content.decode()
    jobs = [sync_queue.fetch_job(job_id) for job_id in sync_queue.get_job_ids()]
    assert [j.func_name for j in jobs] == ["stacks.drift.drift_stack_job"]
    assert 'id="drift-pending"' in again.content.decode()
    assert not DriftCheck.objects.exists()  # nothing is read in the web request
    [audited] = AuditEvent.objects.filter(action="drift.check-requested")
    assert audited.actor == "olive" and audited.stack_name == STACK

    burst(sync_queue)

    check = DriftCheck.objects.get(latest=True)
    assert (check.trigger, check.drifted) == ("web", 1)
    html = client.get(resources).content.decode()
    assert 'data-logical-id="Queue" data-status="MODIFIED"' in html and 'id="drift-pending"' not in html
    assert "(web)" in html
    # the booking is released: the next check can be queued
    assert "Drift check of DriftStack queued" in client.post(url, follow=True).content.decode()


def test_it_lets_only_an_operator_check_now(world, client, make_user, sync_queue):
    from django.urls import reverse

    client.force_login(make_user("vera", **{f"a{ACCOUNT}": "viewer"}))
    html = client.get(reverse("stack_resources", args=[ACCOUNT, REGION, STACK])).content.decode()
    assert 'id="drift-check" disabled title="You need the operator role' in html

    response = client.post(reverse("stack_drift_check", args=[ACCOUNT, REGION, STACK]))

    assert response.status_code == 403 and sync_queue.get_job_ids() == []
    assert not AuditEvent.objects.filter(action="drift.check-requested").exists()


def test_it_checks_now_and_reads_the_result_through_the_api(world, make_user, sync_queue):
    from django.test import Client

    from tests.api.conftest import call, token_for

    secret = token_for(make_user("olive", **{f"a{ACCOUNT}": "operator"}))
    base = f"/api/v1/stacks/{ACCOUNT}/{REGION}/{STACK}"
    assert call("GET", f"{base}/drift", secret).status_code == 404
    world.sns.delete_topic(TopicArn=world.topic_arn)

    queued = call("POST", f"{base}/drift-check", secret, {})
    assert queued.status_code == 202 and json.loads(queued.content) == {"queued": True, "message": "queued"}
    burst(sync_queue)

    got = json.loads(call("GET", f"{base}/drift", secret).content)
    assert got["trigger"] == "web" and got["drifted"] == 1 and got["counts"]["DELETED"] == 1
    assert {r["logicalId"]: r["status"] for r in got["resources"]} == {"Queue": "IN_SYNC", "Topic": "DELETED"}
    assert AuditEvent.objects.get(action="api.drift.check").details["status"] == 202
    read_only = token_for(make_user("rita", **{f"a{ACCOUNT}": "operator"}), read_only=True)
    assert call("POST", f"{base}/drift-check", read_only, {}).status_code == 403
    assert Client().post(f"{base}/drift-check").status_code == 401
