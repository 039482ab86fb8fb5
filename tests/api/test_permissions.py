"""The pages' permission matrix (tests/operations_ui/test_permissions.py), applied to the API.

`RULES` classifies every operation of the served schema (so a route added later without a
rule fails `test_it_classifies_every_route`). For each persona of account A (outsider:
admin of account B only; viewer; operator; approver; admin; superuser) a rule gives the
expected status with a read-and-write token; a read-only token gets 403 on every mutating
route and changes nothing. FAKE ENGINE: `compute_plan` (planning reads S3) is replaced.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from stacks.models import AuditEvent, Operation, OperationStatus
from tests.api.conftest import RUN_ID, STACK_NAME, A, build_world, call, token_for

pytestmark = pytest.mark.django_db

PERSONAS = ["outsider", "viewer", "operator", "approver", "admin", "superuser"]


def every(status: int) -> dict[str, int]:
    return dict.fromkeys(PERSONAS, status)


def on_a(outsider: int, viewer: int, operator: int, approver: int, admin: int) -> dict[str, int]:
    return {
        "outsider": outsider,
        "viewer": viewer,
        "operator": operator,
        "approver": approver,
        "admin": admin,
        "superuser": admin,
    }


READ_A = on_a(404, 200, 200, 200, 200)
STACK = f"/api/v1/stacks/{A}/us-east-1/{STACK_NAME}"


@dataclass
class Rule:
    path: Callable[[dict], str]
    expect: dict[str, int]
    body: Callable[[dict], Any] | None = None
    lists_a: bool = False  # across accounts: must not show account A to outsiders

    @property
    def mutating(self) -> bool:
        return self.body is not None


def op(key: str, suffix: str = "") -> Callable[[dict], str]:
    return lambda w: f"/api/v1/operations/{w[key].pk}{suffix}"


def orphan_request(w: dict) -> dict:
    return {"account_id": A, "region_slug": "us-east-1", "stack_name": STACK_NAME, "kind": "orphan", "reason": "t-1"}


# (method, schema path) -> rule
RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/api/v1/accounts"): Rule(lambda w: "/api/v1/accounts", every(200), lists_a=True),
    ("GET", "/api/v1/accounts/{account_id}"): Rule(lambda w: f"/api/v1/accounts/{A}", READ_A),
    ("GET", "/api/v1/stacks"): Rule(lambda w: "/api/v1/stacks", every(200), lists_a=True),
    ("GET", "/api/v1/stacks/{account_id}/{region_slug}/{stack_name}"): Rule(lambda w: STACK, READ_A),
    ("GET", "/api/v1/resources"): Rule(lambda w: "/api/v1/resources?q=zebra", every(200), lists_a=True),
    ("GET", "/api/v1/operations"): Rule(lambda w: "/api/v1/operations?tab=all", every(200), lists_a=True),
    ("GET", "/api/v1/operations/{op_id}"): Rule(op("awaiting"), READ_A),
    ("POST", "/api/v1/operations"): Rule(lambda w: "/api/v1/operations", on_a(404, 403, 201, 201, 201), orphan_request),
    # The operator requested it: they cannot decide on it; approvers and admins can.
    ("POST", "/api/v1/operations/{op_id}/approve"): Rule(
        op("awaiting", "/approve"), on_a(404, 403, 403, 200, 200), lambda w: {"comment": "ok"}
    ),
    ("POST", "/api/v1/operations/{op_id}/reject"): Rule(
        op("awaiting", "/reject"), on_a(404, 403, 403, 200, 200), lambda w: {"comment": "no"}
    ),
    ("POST", "/api/v1/operations/{op_id}/cancel"): Rule(
        op("awaiting", "/cancel"), on_a(404, 403, 200, 200, 200), lambda w: {}
    ),
    # A JSON body carries no zip: an operator is told to upload one.
    ("POST", "/api/v1/accounts/{account_id}/deploy-plans"): Rule(
        lambda w: f"/api/v1/accounts/{A}/deploy-plans", on_a(404, 403, 400, 400, 400), lambda w: {}
    ),
    ("GET", "/api/v1/deploy-plans/{plan_id}"): Rule(lambda w: f"/api/v1/deploy-plans/{w['deploy_plan'].pk}", READ_A),
    ("POST", "/api/v1/deploy-plans/{plan_id}/request"): Rule(
        lambda w: f"/api/v1/deploy-plans/{w['deploy_plan'].pk}/request",
        on_a(404, 403, 201, 201, 201),
        lambda w: {"reason": "t-2"},
    ),
    ("POST", "/api/v1/accounts/{account_id}/state-migrate"): Rule(
        lambda w: f"/api/v1/accounts/{A}/state-migrate", on_a(404, 403, 201, 201, 201), lambda w: {}
    ),
    ("GET", "/api/v1/stacks/{account_id}/{region_slug}/{stack_name}/drift"): Rule(lambda w: f"{STACK}/drift", READ_A),
    ("POST", "/api/v1/stacks/{account_id}/{region_slug}/{stack_name}/drift-check"): Rule(
        lambda w: f"{STACK}/drift-check", on_a(404, 403, 202, 202, 202), lambda w: {}
    ),
    ("GET", "/api/v1/attention"): Rule(lambda w: "/api/v1/attention", every(200), lists_a=True),
    ("GET", "/api/v1/audit"): Rule(lambda w: "/api/v1/audit", every(200), lists_a=True),
    ("GET", "/api/v1/events"): Rule(lambda w: "/api/v1/events", every(200), lists_a=True),
    ("GET", "/api/v1/events/{account_id}/{region}/{stack_name}/{run_id}"): Rule(
        lambda w: f"/api/v1/events/{A}/us-east-1/{STACK_NAME}/{RUN_ID}", READ_A
    ),
}


def test_it_classifies_every_route(db):
    schema = json.loads(Client().get("/api/schema/").content)
    served = {(m.upper(), p) for p, item in schema["paths"].items() for m in item}
    assert served == set(RULES), f"classify these routes in RULES: {sorted(served - set(RULES))}"


CASES = [(key, persona) for key in RULES for persona in PERSONAS]


@pytest.mark.parametrize(("key", "persona"), CASES, ids=[f"{k[0]} {k[1]}-{p}" for k, p in CASES])
def test_it_lets_each_persona_call(key, persona, planned):
    world = build_world()
    rule = RULES[key]
    secret = token_for(world["people"][persona])
    before = AuditEvent.objects.filter(action__startswith="api.").count()

    response = call(key[0], rule.path(world), secret, rule.body(world) if rule.body else None)

    assert response.status_code == rule.expect[persona], (key, persona, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    if response.status_code >= 400:
        assert json.loads(response.content)["message"]
    if rule.lists_a and persona == "outsider":
        assert STACK_NAME.encode() not in response.content, f"{key} shows account A to an outsider"
    if rule.mutating:
        # Every mutating call, allowed or refused, is audited with the token's id.
        event = AuditEvent.objects.filter(action__startswith="api.").order_by("-id").first()
        assert AuditEvent.objects.filter(action__startswith="api.").count() == before + 1
        assert event.details["token"] == world["people"][persona].api_tokens.get().pk
        assert event.details["status"] == response.status_code
        assert event.result == ("ok" if response.status_code < 400 else "refused")


MUTATING = [key for key, rule in RULES.items() if rule.mutating]


@pytest.mark.parametrize("key", MUTATING, ids=[f"{k[0]} {k[1]}" for k in MUTATING])
def test_it_refuses_every_mutation_to_a_read_only_token(key, planned):
    world = build_world()
    rule = RULES[key]
    admin = world["people"]["superuser"]
    secret = token_for(admin, read_only=True)
    operations_before = list(Operation.objects.order_by("pk").values_list("pk", "status"))

    response = call(key[0], rule.path(world), secret, rule.body(world))

    assert response.status_code == 403
    assert "read-only" in json.loads(response.content)["message"]
    assert list(Operation.objects.order_by("pk").values_list("pk", "status")) == operations_before
    event = AuditEvent.objects.order_by("-id").first()
    assert event.action.startswith("api.") and event.result == "refused"
    assert event.details["token"] == admin.api_tokens.get().pk


def test_it_lets_a_read_only_token_read(world):
    secret = token_for(world["people"]["viewer"], read_only=True)
    assert call("GET", STACK, secret).status_code == 200
    assert call("GET", "/api/v1/operations?tab=all", secret).status_code == 200


def test_it_records_who_requested_through_the_api(world, planned):
    operator = world["people"]["operator"]
    secret = token_for(operator)

    response = call("POST", "/api/v1/operations", secret, orphan_request(world))

    assert response.status_code == 201
    body = json.loads(response.content)
    op = Operation.objects.get(pk=body["id"])
    assert op.requested_by == operator and op.status == OperationStatus.AWAITING_APPROVAL
    assert op.reason == "t-1"
    assert body["plan"]["summary"] == f"orphan {STACK_NAME}" and body["plan_digest"] == op.plan_digest
    # The pipeline's own audit entry, then the API call's with the token.
    requested = AuditEvent.objects.get(action="operation.requested", operation=op)
    assert requested.actor == "olivia"
    api = AuditEvent.objects.get(action="api.operation.request")
    assert api.operation == op and api.account_ref == A
    assert api.details["token"] == operator.api_tokens.get().pk
    assert secret not in json.dumps(api.details) and secret[len("cdkd_") :] not in json.dumps(api.details)


def test_it_refuses_a_kind_the_record_cannot_take(world, planned):
    secret = token_for(world["people"]["admin"])
    body = {**orphan_request(world), "kind": "orphan-resources", "params": {"resources": ["NoSuchThing"]}}

    response = call("POST", "/api/v1/operations", secret, body)

    assert response.status_code == 400
    assert "Resources to orphan" in json.loads(response.content)["message"]
    assert not Operation.objects.filter(kind="orphan-resources").exists()


def test_it_asks_a_destroy_for_the_typed_name(world, planned):
    secret = token_for(world["people"]["admin"])
    body = {**orphan_request(world), "kind": "destroy", "params": {"confirm_name": "wrong"}}

    response = call("POST", "/api/v1/operations", secret, body)

    assert response.status_code == 400
    assert STACK_NAME in json.loads(response.content)["message"]
    assert not Operation.objects.filter(kind="destroy").exists()


def test_it_shows_the_attention_board_of_the_callers_accounts(world):
    viewer = call("GET", "/api/v1/attention?kind=secrets", token_for(world["people"]["viewer"]))
    outsider = call("GET", "/api/v1/attention", token_for(world["people"]["outsider"]))

    assert viewer.status_code == 200 and outsider.status_code == 200
    rows = json.loads(viewer.content)["items"]
    assert [(r["kind"], r["account_id"], r["stack_name"]) for r in rows] == [("secrets", A, STACK_NAME)]
    assert json.loads(viewer.content)["counts"]["by_kind"]["secrets"] == 1
    assert A not in json.loads(outsider.content)["counts"]["by_account"]
