"""Deploy from the browser against moto: a plan page's "Request deploy", the approval by
another person, an RQ worker deploying through the engine, the record and the AWS resources
after; the refusal when the record changed after the approval; a blocking plan that cannot
be requested; a stateful replacement only with the explicit consent the approver sees.

Personas on prod (111111111111): olivia is an operator, arthur an approver."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from rq import SimpleWorker

from stacks.models import Account, ApprovalPolicy, AuditEvent, DeployPlan, Membership, Operation, OperationStatus, Role
from tests.deploy.zips import GOLDEN, SAMPLE, with_stateful_replacement, zip_dir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("assembly_storage"),
]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
REGION = "us-east-1"
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"
RECORD = json.loads((SAMPLE / "state.json").read_bytes())


@pytest.fixture
def world(aws, django_user_model):
    aws.make_bucket(A1, BUCKET)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    people = {}
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        user = django_user_model.objects.create_user(name)
        Membership.objects.create(user=user, account=account, role=role)
        people[name] = Client()
        people[name].force_login(user)
    return {"aws": aws, "account": account, **people}


def plan_upload(world, data: bytes) -> DeployPlan:
    url = reverse("account_plan_new", args=[A1])
    upload = SimpleUploadedFile("cdk.out.zip", data, content_type="application/zip")
    response = world["olivia"].post(url, {"assembly_file": upload, "stack": "GoldenCdkStack"})
    assert response.status_code == 302, response.content[:2000]
    return DeployPlan.objects.latest("id")


def request_deploy(world, plan: DeployPlan, **form):
    return world["olivia"].post(reverse("deploy_plan_request", args=[plan.pk]), form)


def work(queue) -> None:
    SimpleWorker([queue], connection=queue.connection).work(burst=True)


def sqs(world):
    return world["aws"].account_session(A1).client("sqs", region_name=REGION, endpoint_url=world["aws"].moto.url)


def test_it_deploys_a_requested_and_approved_plan_through_a_worker(world, queue):
    plan = plan_upload(world, zip_dir(GOLDEN))
    page = world["olivia"].get(reverse("deploy_plan", args=[plan.pk])).content.decode()
    assert 'id="request-deploy"' in page and "stateful_consent" not in page

    response = request_deploy(world, plan, reason="first deploy of the golden stack")
    op = Operation.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("operation", args=[op.pk])
    assert op.kind == "deploy" and op.status == OperationStatus.AWAITING_APPROVAL
    assert op.params["deploy_plan_digest"] == plan.digest and op.params["assembly_digest"] == plan.assembly.digest
    assert op.reason == "first deploy of the golden stack"
    assert op.plan_etag == "" and op.plan["data"]["assemblyDigest"] == plan.assembly.digest
    # the approver sees the plan: every resource's action
    shown = world["arthur"].get(reverse("operation", args=[op.pk])).content.decode()
    assert "Queue4A7E3555" in shown and "TopicBFC7AF6E" in shown
    assert world["olivia"].post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 403

    assert world["arthur"].post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 302
    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    record = json.loads(world["aws"].get(A1, BUCKET, KEY))
    assert sorted(record["resources"]) == sorted(RECORD["resources"])
    assert op.etag_after == world["aws"].etag(A1, BUCKET, KEY)
    queue_url = record["resources"]["Queue4A7E3555"]["physicalId"]
    assert [u.rsplit("/", 1)[1] for u in sqs(world).list_queues()["QueueUrls"]] == [queue_url.rsplit("/", 1)[1]]
    # the physical names cdkd gave the same resources (deterministic, so either tool can take over)
    assert record["resources"]["TopicBFC7AF6E"]["physicalId"] == RECORD["resources"]["TopicBFC7AF6E"]["physicalId"]
    assert record["resources"]["Param165332EC"]["physicalId"] == RECORD["resources"]["Param165332EC"]["physicalId"]
    # each resource's progress, as destroy's page shows it
    items = op.progress["items"]
    assert {lid: item["status"] for lid, item in items.items()} == {lid: "created" for lid in RECORD["resources"]}
    assert op.progress["done"] == op.progress["total"] == 5
    page = world["olivia"].get(reverse("operation", args=[op.pk])).content.decode()
    assert 'id="operation-items"' in page
    actions = list(AuditEvent.objects.filter(operation_id=op.pk).order_by("id").values_list("action", flat=True))
    assert actions == ["operation.requested", "operation.approved", "operation.started", "operation.finished"]


def test_it_refuses_when_the_record_changed_after_the_approval(world, queue):
    plan = plan_upload(world, zip_dir(GOLDEN))
    request_deploy(world, plan)
    op = Operation.objects.get()
    world["aws"].put(A1, BUCKET, KEY, RECORD)  # someone deployed meanwhile
    world["arthur"].post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"})
    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.REFUSED
    assert "plan changed, re-approval required" in op.error
    assert sqs(world).list_queues().get("QueueUrls", []) == []  # no AWS call
    assert json.loads(world["aws"].get(A1, BUCKET, KEY)) == RECORD

    # and a request from the now stale plan page is refused at once
    assert request_deploy(world, plan).status_code == 409
    assert Operation.objects.count() == 1


def test_a_plan_with_blocking_reasons_cannot_be_requested(world, queue):
    record = dict(RECORD, outputs="abc")
    world["aws"].put(A1, BUCKET, KEY, record)
    plan = plan_upload(world, zip_dir(GOLDEN))
    assert plan.blocking_count
    page = world["olivia"].get(reverse("deploy_plan", args=[plan.pk])).content.decode()
    assert 'id="plan-blocking"' in page and 'id="request-deploy"' not in page
    response = request_deploy(world, plan)
    assert response.status_code == 409 and b"blocking reasons" in response.content
    assert not Operation.objects.exists()


def test_a_stateful_replacement_needs_the_consent_the_approver_sees(world, queue):
    world["aws"].put(A1, BUCKET, KEY, RECORD)
    plan = plan_upload(world, zip_dir(GOLDEN, template=with_stateful_replacement))
    page = world["olivia"].get(reverse("deploy_plan", args=[plan.pk])).content.decode()
    assert 'id="request-deploy"' in page and 'name="stateful_consent"' in page
    assert request_deploy(world, plan).status_code == 409
    assert not Operation.objects.exists()

    assert request_deploy(world, plan, stateful_consent="on").status_code == 302
    op = Operation.objects.get()
    assert op.params["stateful_consent"] is True and op.plan["data"]["statefulConsent"] is True
    assert op.plan["data"]["statefulReplacements"] == ["Param165332EC"]
    assert op.plan["changes"][0]["logicalId"] == "Param165332EC"  # stateful ones first
    shown = world["arthur"].get(reverse("operation", args=[op.pk])).content.decode()
    assert "stateful replacement" in shown


def test_the_approval_floor_holds_for_deploy_whatever_the_accounts_policy(world, queue):
    ApprovalPolicy.objects.create(account=world["account"], kind="deploy", approval_required=False, approvers_needed=0)
    plan = plan_upload(world, zip_dir(GOLDEN))
    request_deploy(world, plan)
    op = Operation.objects.get()
    assert op.status == OperationStatus.AWAITING_APPROVAL
    work(queue)
    assert world["aws"].etag(A1, BUCKET, KEY) is None
