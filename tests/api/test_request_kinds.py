"""Every kind a stack's pages request can be requested through the API, with its options as
cdkd names them, and `state migrate` from its account; the same refusals as the pages.
FAKE ENGINE: `compute_plan` is replaced (planning reads S3); the pipeline is the real one."""

from __future__ import annotations

import json
import typing

import pytest

from stacks.api.schemas import WebKind
from stacks.forms import WEB_KINDS
from stacks.models import AuditEvent, BucketSource, Operation, OperationStatus, Stack
from tests.api.conftest import STACK_NAME, A, call, token_for

pytestmark = pytest.mark.django_db


def request(secret: str, kind: str, params: dict | None = None, **extra):
    body = {"account_id": A, "region_slug": "us-east-1", "stack_name": STACK_NAME, "kind": kind, **extra}
    if params is not None:
        body["params"] = params
    return call("POST", "/api/v1/operations", secret, body)


def test_it_offers_the_kinds_the_pages_offer():
    assert set(typing.get_args(WebKind)) == set(WEB_KINDS)


@pytest.mark.parametrize(
    ("kind", "params", "stored"),
    [
        (
            "destroy",
            {"confirm_name": STACK_NAME, "skip_final_snapshot": True, "remove_protection": True, "concurrency": 4},
            {"concurrency": 4, "skip_final_snapshot": True, "remove_protection": True},
        ),
        ("events-prune", {"keep": 5}, {"keep": 5, "older_than_days": None}),
        ("events-prune", {"older_than_days": 30}, {"keep": None, "older_than_days": 30}),
        ("refresh-observed", {}, {}),
        ("drift-accept", {}, {}),
        ("drift-revert", {}, {}),
    ],
)
def test_it_requests_each_kind_with_its_options(world, planned, kind, params, stored):
    response = request(token_for(world["people"]["operator"]), kind, params)

    assert response.status_code == 201, response.content
    op = Operation.objects.get(pk=json.loads(response.content)["id"])
    assert op.kind == kind and op.params == stored and op.via == "api"
    assert op.status == OperationStatus.AWAITING_APPROVAL or op.status == OperationStatus.QUEUED
    assert AuditEvent.objects.filter(action="api.operation.request", operation=op, result="ok").exists()


def test_it_requests_a_rollback_of_a_leftover_journal(world, planned):
    Stack.objects.filter(stack_name=STACK_NAME).update(journal_key=f"cdkd/{STACK_NAME}/us-east-1/rollback-journal.json")
    secret = token_for(world["people"]["operator"])

    response = request(secret, "rollback", {"revert_failed": True, "orphan": ["Queue", "Topic", "Queue"]})

    assert response.status_code == 201, response.content
    op = Operation.objects.get(pk=json.loads(response.content)["id"])
    assert op.kind == "rollback" and op.params == {"revert_failed": True, "orphan": ["Queue", "Topic"]}


def test_it_refuses_a_rollback_with_no_journal_as_the_page_does(world, planned):
    Stack.objects.filter(stack_name=STACK_NAME).update(journal_key="")

    response = request(token_for(world["people"]["operator"]), "rollback")

    assert response.status_code == 409 and "no rollback journal" in json.loads(response.content)["message"]
    assert not Operation.objects.filter(kind="rollback").exists()


def test_it_refuses_a_destroy_without_the_typed_name(world, planned):
    response = request(token_for(world["people"]["operator"]), "destroy", {"skip_final_snapshot": True})
    assert response.status_code == 400 and STACK_NAME in json.loads(response.content)["message"]
    assert not Operation.objects.filter(kind="destroy").exists()


def test_it_refuses_an_out_of_range_option(world, planned):
    response = request(token_for(world["people"]["operator"]), "events-prune", {"keep": -1})
    assert response.status_code == 422 and "params.keep" in json.loads(response.content)["message"]


# --- state migrate -------------------------------------------------------------------------


def migrate(secret: str, body: dict | None = None, account: str = A):
    return call("POST", f"/api/v1/accounts/{account}/state-migrate", secret, body or {})


@pytest.fixture
def legacy(world):
    prod = world["prod"]
    prod.bucket_source, prod.bucket_region = BucketSource.DEFAULT_LEGACY, "eu-west-1"
    prod.save()
    return prod


def test_it_requests_state_migrate_for_the_legacy_buckets_region(world, legacy, planned):
    response = migrate(token_for(world["people"]["operator"]), {"reason": "CHG-9"})

    assert response.status_code == 201, response.content
    op = Operation.objects.get(pk=json.loads(response.content)["id"])
    assert (op.kind, op.stack_name, op.region) == ("state-migrate", "", "eu-west-1")
    assert op.params == {"remove_legacy": False}
    assert op.reason == "CHG-9"
    assert AuditEvent.objects.filter(action="api.state-migrate.request", operation=op, result="ok").exists()


def test_it_needs_both_ticks_to_remove_the_legacy_bucket(world, legacy, planned):
    secret = token_for(world["people"]["operator"])
    once = migrate(secret, {"remove_legacy": True})
    assert once.status_code == 400 and "confirm_remove" in json.loads(once.content)["message"]
    twice = migrate(secret, {"remove_legacy": True, "confirm_remove": True})
    assert twice.status_code == 201 and json.loads(twice.content)["params"] == {"remove_legacy": True}


@pytest.mark.parametrize(("who", "status"), [("viewer", 403), ("outsider", 404)])
def test_it_lets_only_an_operator_request_state_migrate(world, legacy, planned, who, status):
    response = migrate(token_for(world["people"][who]))
    assert response.status_code == status
    assert not Operation.objects.filter(kind="state-migrate").exists()


def test_it_refuses_state_migrate_where_the_page_does(world, planned):
    world["prod"].bucket_source = BucketSource.EXPLICIT
    world["prod"].save()
    response = migrate(token_for(world["people"]["operator"]))
    assert response.status_code == 409 and "names its state bucket" in json.loads(response.content)["message"]


def test_it_refuses_a_region_that_is_not_one(world, legacy, planned):
    response = migrate(token_for(world["people"]["operator"]), {"region": "moon-base"})
    assert response.status_code == 400 and "not an AWS region name" in json.loads(response.content)["message"]
