"""No secret value in any API response (the pages' own masking, stacks.secretmask and the
run page's masked_event), and every error a JSON message with a 4xx, never a traceback."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from stacks.models import DeploymentEvent, DeploymentRun
from tests.api.conftest import STACK_NAME, A, call, make_operation, token_for
from tests.views.conftest import make_lock, make_stack, record, resource_row

pytestmark = pytest.mark.django_db

DSN_PASSWORD = "Zq9-dsn-pass-7781"
DSN = f"postgres://app:{DSN_PASSWORD}@db.internal:5432/app"


@pytest.fixture
def leaky(world):
    """A record whose physical id holds a connection string with its password."""
    rows = {"Db": resource_row("AWS::RDS::DBInstance", DSN, properties={"MasterUserPassword": "hunter2-pw-0042"})}
    return make_stack(world["prod"], "leaky", data=record("leaky", resources=rows))


def test_it_masks_a_stack_and_its_resources(world, leaky):
    secret = token_for(world["people"]["superuser"])
    make_lock(leaky)

    detail = call("GET", f"/api/v1/stacks/{A}/us-east-1/leaky", secret)
    search = call("GET", "/api/v1/resources?q=db.internal", secret)

    assert detail.status_code == 200 and search.status_code == 200
    for response in (detail, search):
        assert DSN_PASSWORD.encode() not in response.content
        assert b"hunter2-pw-0042" not in response.content
    row = json.loads(detail.content)["resources"][0]
    assert row["physical_id"].startswith("postgres://app:") and "***" in row["physical_id"]
    assert json.loads(detail.content)["lock"]["state"] == "live"
    assert json.loads(search.content)["items"][0]["stack_name"] == "leaky"


def test_it_masks_an_operations_plan_and_log(world):
    op = make_operation(
        world["prod"], world["people"]["operator"], stack_name=STACK_NAME, log=[{"level": "info", "message": DSN}]
    )
    op.plan = {**op.plan, "warnings": [f"could not reach {DSN}"]}
    op.save(update_fields=["plan", "log"])

    response = call("GET", f"/api/v1/operations/{op.pk}", token_for(world["people"]["viewer"]))

    assert response.status_code == 200
    assert DSN_PASSWORD.encode() not in response.content
    assert "***" in json.loads(response.content)["plan"]["warnings"][0]


def test_it_masks_a_runs_events(world):
    run = DeploymentRun.objects.get(account=world["prod"])
    raw = {"type": "RESOURCE_FAILED", "reason": f"connect {DSN} refused", "error": {"message": f"at {DSN}"}}
    DeploymentEvent.objects.create(run=run, seq=0, event_type="RESOURCE_FAILED", raw=raw)

    response = call(
        "GET", f"/api/v1/events/{A}/us-east-1/{STACK_NAME}/{run.run_id}", token_for(world["people"]["viewer"])
    )

    assert response.status_code == 200
    assert DSN_PASSWORD.encode() not in response.content
    assert json.loads(response.content)["events"][0]["type"] == "RESOURCE_FAILED"


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/api/v1/no/such/route", None, 404),
        ("DELETE", "/api/v1/stacks", None, 405),
        ("GET", "/api/v1/stacks?lock=sideways", None, 422),
        ("GET", "/api/v1/stacks?page=-3", None, 422),
        ("GET", "/api/v1/stacks?q=" + "x" * 201, None, 422),
        ("GET", "/api/v1/audit?since=2024-02-01T00:00:00Z&until=2024-01-01T00:00:00Z", None, 422),
        ("GET", "/api/v1/accounts/not-an-id", None, 422),
        ("GET", "/api/v1/operations/99999999", None, 404),
        ("GET", "/api/v1/stacks/999999999999/us-east-1/x", None, 404),
        ("GET", "/api/v1/audit?action=%00", None, 422),
        ("GET", "/api/v1/resources?q=a%00b", None, 422),
        ("GET", f"/api/v1/stacks/{A}/us-east-1/a%00b", None, 422),
        ("POST", "/api/v1/operations/1/approve", '{"comment": "nul \\u0000 here"}', 422),
        ("POST", "/api/v1/operations/1/reject", '{"comment": "half \\ud800 pair"}', 422),
        ("POST", "/api/v1/operations", "not json", 400),
        ("POST", "/api/v1/operations", {"kind": "explode"}, 422),
        (
            "POST",
            "/api/v1/operations",
            {"account_id": A, "region_slug": "us-east-1", "stack_name": "nope", "kind": "orphan"},
            404,
        ),
    ],
)
def test_it_answers_bad_input_with_a_json_message(world, method, path, body, status):
    secret = token_for(world["people"]["superuser"])
    client = Client(raise_request_exception=False)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    data = body if isinstance(body, str) else json.dumps(body) if body is not None else ""

    response = client.generic(method, path, data, content_type="application/json", **headers)

    assert response.status_code == status, response.content
    message = json.loads(response.content)["message"]
    assert message and "Traceback" not in message


def test_it_serves_an_openapi_3_schema_without_a_token(db):
    response = Client().get("/api/schema/")

    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    assert schema["components"]["securitySchemes"]["TokenAuth"]["scheme"] == "bearer"
    assert "/api/v1/operations/{op_id}/approve" in schema["paths"]
