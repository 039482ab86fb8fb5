"""Personas and helpers for the operations, audit and settings pages.

Account A (`prod`, 111111111111) has one person per role: vera (viewer), olivia (operator),
arthur and april (approvers), ada (admin); otto has a role on account B (`dev`) only, so
he is an outsider to everything on A. root is a superuser.

FAKE ENGINE: these tests never reach S3. `planned` replaces `stacks.operations.compute_plan`
(which the confirmation page and `request_operation` both call) with a plan built from its
arguments; the lead's pipeline tests cover the real engine specs end to end.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from engine.operations import Plan
from stacks.models import Account, Membership, Operation, OperationStatus, Role, Stack
from tests.views.conftest import _fast_passwords, make_account, make_stack, make_user, record, resource_row

__all__ = ["_fast_passwords"]  # the autouse fixture applies here too

A = "111111111111"
B = "222222222222"
ETAG = '"etag-1"'


def fake_plan(kind: str, stack: str, region: str | None, params: dict | None = None, *, etag: str = ETAG) -> Plan:
    """What a spec's `plan()` might return; orphan-resources gets a rewrite table."""
    params = params or {}
    changes: list[Any] = [f"delete {stack}/{region or ''}/state.json (If-Match {etag})"]
    data: dict[str, Any] = {"params": params}
    if kind == "orphan-resources":
        # The shape engine.orphan gives: sentences in `changes`, the rewrite table in `data`.
        rewrite = {"kind": "Ref", "logicalId": "Fn", "path": "Properties.Q", "before": {"Ref": "Queue"}}
        rewrite["after"] = "q-orders"
        changes = [f"remove {lid} from the record; its AWS resource stays" for lid in params.get("resources", [])]
        changes.append('Fn.Properties.Q: {"Ref": "Queue"} -> "q-orders"')
        data.update(rewrites=[rewrite], unresolved=[])
    return Plan(
        kind=kind,
        stack=stack,
        region=region,
        etag=etag,
        summary=f"{kind} {stack}",
        changes=changes,
        warnings=["a fake plan (tests)"],
        data=data,
    )


def make_operation(
    account: Account,
    requester: User | None,
    *,
    kind: str = "orphan",
    stack_name: str = "web",
    region: str | None = "us-east-1",
    status: str = OperationStatus.AWAITING_APPROVAL,
    **fields,
) -> Operation:
    plan = fake_plan(kind, stack_name, region, fields.get("params"))
    return Operation.objects.create(
        kind=kind,
        account=account,
        stack_name=stack_name,
        region=region,
        requested_by=requester,
        requester_name=requester.get_username() if requester else "cli:root",
        via="web" if requester else "cli",
        plan=plan.as_json(),
        plan_digest=plan.digest,
        plan_etag=plan.etag or "",
        status=status,
        **fields,
    )


def member(username: str, account: Account, role: str) -> User:
    user = make_user(username)
    Membership.objects.create(user=user, account=account, role=role)
    return user


@pytest.fixture
def prod(db) -> Account:
    return make_account(A, "prod")


@pytest.fixture
def dev(db) -> Account:
    return make_account(B, "dev")


@pytest.fixture
def vera(prod) -> User:
    return member("vera", prod, Role.VIEWER)


@pytest.fixture
def olivia(prod) -> User:
    return member("olivia", prod, Role.OPERATOR)


@pytest.fixture
def arthur(prod) -> User:
    return member("arthur", prod, Role.APPROVER)


@pytest.fixture
def april(prod) -> User:
    return member("april", prod, Role.APPROVER)


@pytest.fixture
def ada(prod) -> User:
    return member("ada", prod, Role.ADMIN)


@pytest.fixture
def otto(dev) -> User:
    return member("otto", dev, Role.ADMIN)


@pytest.fixture
def root(db) -> User:
    return make_user("root", is_superuser=True, is_staff=True)


@pytest.fixture
def web(prod) -> Stack:
    data = record(
        "web",
        resources={
            "Queue": resource_row("AWS::SQS::Queue", "q-orders"),
            "Fn": resource_row("AWS::Lambda::Function", "fn-web", properties={"Q": {"Ref": "Queue"}}),
        },
    )
    return make_stack(prod, "web", data=data)


@pytest.fixture
def planned(monkeypatch):
    """FAKE ENGINE: `compute_plan` returns `fake_plan(...)`; the calls are recorded."""
    from stacks import operations

    calls: list[tuple] = []

    def compute_plan(account, kind, stack_name, region, params, person):
        calls.append((account.account_id, kind, stack_name, region, params, person))
        return fake_plan(kind, stack_name, region, params)

    monkeypatch.setattr(operations, "compute_plan", compute_plan)
    return calls


def login(client, user: User):
    client.force_login(user)
    return client
