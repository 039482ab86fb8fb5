"""Deploy from a script, against moto: plan an uploaded `cdk.out` zip through the API, read
the plan, request it, have another person approve it through the API, and an RQ worker
deploys it through the engine; the same plan row and the same refusals as the pages.

Personas on prod (111111111111): olivia is an operator, arthur an approver, vera a viewer;
otto holds a role on dev only. Each calls with a personal token (tests/api/conftest.py).
"""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rq import SimpleWorker

from stacks.models import Account, AuditEvent, DeployPlan, Operation, OperationStatus, Role
from tests.api.conftest import call, token_for
from tests.deploy.zips import GOLDEN, GOLDEN_CHANGED, SAMPLE, with_second_stack, zip_dir
from tests.operations_ui.conftest import member

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("assembly_storage"),
]

A1 = "111111111111"
B1 = "222222222222"
BUCKET = f"cdkd-state-{A1}"
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"
RECORD = json.loads((SAMPLE / "state.json").read_bytes())
PLANS = f"/api/v1/accounts/{A1}/deploy-plans"


@pytest.fixture
def world(aws):
    aws.make_bucket(A1, BUCKET)
    prod = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    dev = Account.objects.create(account_id=B1, name="dev")
    people = {
        "olivia": member("olivia", prod, Role.OPERATOR),
        "arthur": member("arthur", prod, Role.APPROVER),
        "vera": member("vera", prod, Role.VIEWER),
        "otto": member("otto", dev, Role.ADMIN),
    }
    return {"aws": aws, "prod": prod, "tokens": {name: token_for(user) for name, user in people.items()}}


def plan_call(secret: str, data: bytes | None = None, **fields):
    """multipart/form-data, as `curl -F assembly_file=@cdk.out.zip -F stack=...` sends it."""
    form = dict(fields)
    if data is not None:
        form["assembly_file"] = SimpleUploadedFile("cdk.out.zip", data, content_type="application/zip")
    return Client(raise_request_exception=False).post(PLANS, form, HTTP_AUTHORIZATION=f"Bearer {secret}")


def body(response) -> dict:
    return json.loads(response.content)


def work(queue) -> None:
    SimpleWorker([queue], connection=queue.connection).work(burst=True)


def test_it_plans_requests_approves_and_deploys_from_a_script(world, queue):
    tokens = world["tokens"]
    response = plan_call(tokens["olivia"], zip_dir(GOLDEN), stack="GoldenCdkStack")

    assert response.status_code == 201, response.content
    got = body(response)
    plan = DeployPlan.objects.get()
    assert got["id"] == plan.pk and got["digest"] == plan.digest == got["document"]["plan"]["digest"]
    assert got["state_key"] == KEY and got["state_etag"] == "" and got["has_changes"] is True
    assert got["assembly_digest"] == plan.assembly.digest and got["created_by"] == "olivia"
    assert got["blocking"] == [] and got["requestable"] is True and got["needs_consent"] is False
    added = {c["logicalId"] for c in got["document"]["changes"] if c["changeType"] == "CREATE"}
    assert added == set(RECORD["resources"])
    # anyone with a role on the account reads it; an outsider learns nothing
    assert body(call("GET", f"/api/v1/deploy-plans/{plan.pk}", tokens["vera"])) == got
    assert call("GET", f"/api/v1/deploy-plans/{plan.pk}", tokens["otto"]).status_code == 404

    requested = call("POST", f"/api/v1/deploy-plans/{plan.pk}/request", tokens["olivia"], {"reason": "CHG-7\nfirst"})
    assert requested.status_code == 201, requested.content
    op = Operation.objects.get()
    assert body(requested)["id"] == op.pk and op.kind == "deploy" and op.reason == "CHG-7 first"
    assert op.status == OperationStatus.AWAITING_APPROVAL and op.params["deploy_plan_digest"] == plan.digest
    assert op.via == "api" and body(requested)["via"] == "api"
    assert AuditEvent.objects.get(action="operation.requested", operation=op).details["via"] == "api"
    page = Client()
    page.force_login(op.requested_by)
    assert '<span class="badge info">API token</span>' in page.get(f"/operations/{op.pk}/").content.decode()
    assert call("POST", f"/api/v1/operations/{op.pk}/approve", tokens["olivia"], {}).status_code == 403
    approved = call("POST", f"/api/v1/operations/{op.pk}/approve", tokens["arthur"], {"comment": "ok"})
    assert approved.status_code == 200 and body(approved)["status"] == OperationStatus.QUEUED

    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    record = json.loads(world["aws"].get(A1, BUCKET, KEY))
    assert sorted(record["resources"]) == sorted(RECORD["resources"])
    assert op.etag_after == world["aws"].etag(A1, BUCKET, KEY)
    audited = AuditEvent.objects.filter(action__startswith="api.deploy.").order_by("id")
    assert [(a.action, a.actor, a.result) for a in audited] == [
        ("api.deploy.plan", "olivia", "ok"),
        ("api.deploy.request", "olivia", "ok"),
    ]
    assert all(a.details["token"] and a.account_id == world["prod"].pk for a in audited)
    assert {(a.stack_name, a.region) for a in audited} == {("GoldenCdkStack", "us-east-1")}


def test_it_plans_a_change_against_the_live_record(world):
    world["aws"].put(A1, BUCKET, KEY, (SAMPLE / "state.json").read_bytes())

    response = plan_call(world["tokens"]["olivia"], zip_dir(GOLDEN_CHANGED, prefix="cdk.out/"))

    got = body(response)
    assert response.status_code == 201 and got["state_etag"] == world["aws"].etag(A1, BUCKET, KEY)
    replaced = {a["logicalId"] for a in got["document"]["plan"]["actions"] if a.get("action") == "replace"}
    assert "TopicBFC7AF6E" in replaced


def test_it_names_the_stacks_when_the_assembly_holds_several(world):
    first = plan_call(world["tokens"]["olivia"], with_second_stack(GOLDEN, A1))

    assert first.status_code == 400 and not DeployPlan.objects.exists()
    message = body(first)["message"]
    assert "holds 2 stacks (GoldenCdkStack, Other)" in message
    digest = message.rsplit("assembly ", 1)[1].rstrip(".")
    second = plan_call(world["tokens"]["olivia"], assembly=digest, stack="Other")
    assert second.status_code == 201 and body(second)["state_key"] == "cdkd/Other/us-east-1/state.json"


def test_it_takes_parameter_overrides_and_masks_a_secret_named_one(world):
    def with_parameters(doc):
        doc["Parameters"].update(DbPassword={"Type": "String", "NoEcho": True}, Env={"Type": "String"})

    assembly = zip_dir(GOLDEN, template=with_parameters)
    response = plan_call(world["tokens"]["olivia"], assembly, parameters=["DbPassword=hunter2", "Env=prod"])

    assert response.status_code == 201, response.content
    assert DeployPlan.objects.get().parameters == {"DbPassword": "hunter2", "Env": "prod"}
    assert body(response)["parameters"] == {"DbPassword": "***", "Env": "prod"}
    assert b"hunter2" not in response.content


@pytest.mark.parametrize(
    ("who", "status"),
    [("vera", 403), ("otto", 404)],
)
def test_it_lets_only_an_operator_plan(world, who, status):
    response = plan_call(world["tokens"][who], zip_dir(GOLDEN))
    assert response.status_code == status and "message" in body(response)
    assert not DeployPlan.objects.exists()
    assert AuditEvent.objects.get(action="api.deploy.plan").result == "refused"


def test_it_refuses_a_read_only_token_before_reading_the_upload(world):
    olivia = world["tokens"]["olivia"]
    read_only = token_for(member("olivia2", world["prod"], Role.OPERATOR), read_only=True)
    response = plan_call(read_only, zip_dir(GOLDEN))
    assert response.status_code == 403 and "read-only" in body(response)["message"]
    assert not DeployPlan.objects.exists()
    assert plan_call(olivia, zip_dir(GOLDEN)).status_code == 201


@pytest.mark.parametrize(
    ("data", "fields", "status", "words"),
    [
        (b"not a zip at all", {}, 400, "zip"),
        (None, {}, 400, "Upload a zip"),
        (None, {"assembly": "a" * 64}, 404, "No stored assembly"),
        (None, {"region": "Mars"}, 422, "region"),
    ],
)
def test_it_refuses_bad_input_with_a_message_and_stores_nothing(world, data, fields, status, words):
    response = plan_call(world["tokens"]["olivia"], data, **fields)
    assert response.status_code == status, response.content
    assert words.lower() in body(response)["message"].lower()
    assert not DeployPlan.objects.exists()


def test_it_refuses_an_upload_over_the_limit(world, settings):
    settings.CDKD_ASSEMBLY_MAX_BYTES = 100
    response = plan_call(world["tokens"]["olivia"], zip_dir(GOLDEN))
    assert response.status_code == 413 and "over the limit" in body(response)["message"]


def test_it_refuses_a_record_newer_than_it_knows(world):
    from tests.views.conftest import make_stack

    make_stack(world["prod"], "GoldenCdkStack", data=dict(RECORD, version=12), read_only=True)
    response = plan_call(world["tokens"]["olivia"], zip_dir(GOLDEN))
    assert response.status_code == 409 and not DeployPlan.objects.exists()


def test_it_refuses_to_request_a_plan_that_blocks(world):
    world["aws"].put(A1, BUCKET, KEY, dict(RECORD, outputs="abc"))
    plan = body(plan_call(world["tokens"]["olivia"], zip_dir(GOLDEN)))
    assert plan["blocking"] and plan["requestable"] is False

    response = call("POST", f"/api/v1/deploy-plans/{plan['id']}/request", world["tokens"]["olivia"], {})

    assert response.status_code == 409 and "blocking" in body(response)["message"]
    assert not Operation.objects.exists()
    # a viewer may read the plan but not request it
    viewer = call("POST", f"/api/v1/deploy-plans/{plan['id']}/request", world["tokens"]["vera"], {})
    assert viewer.status_code == 403
