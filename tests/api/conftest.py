"""The API's world: account A (`prod`) with one person per role and account B (`dev`),
as in tests/operations_ui; each person calls with a personal token made the way the token
page makes one (`stacks.api.tokens.create_token`), so the secret is only ever hashed.

FAKE ENGINE: `compute_plan` is replaced where a test requests an operation (planning
would read S3); the pipeline (roles, policy, four-eyes, approvals, audit) is the real one.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from stacks import operations
from stacks.api.tokens import create_token
from stacks.models import Assembly, DeploymentRun, DeployPlan, DriftCheck, OperationStatus, Role, SecretFinding
from tests.operations_ui.conftest import A, fake_plan, make_operation, member
from tests.views.conftest import _fast_passwords, make_account, make_stack, make_user, record, resource_row

__all__ = ["_fast_passwords"]

STACK_NAME = "zebra-stack-a"  # a name no response shows unless it shows account A's stack
RUN_ID = "20240319T080000000Z-1a2b3c4d"


def token_for(user, *, read_only: bool = False, days: int = 30) -> str:
    _token, secret = create_token(
        user, f"{user.get_username()}-script", expires_at=timezone.now() + timedelta(days=days), read_only=read_only
    )
    return secret


def call(method: str, path: str, secret: str | None, body: Any = None, client: Client | None = None):
    client = client or Client(raise_request_exception=False)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}
    data = json.dumps(body) if body is not None else ""
    return client.generic(method, path, data, content_type="application/json", **headers)


def build_world() -> dict[str, Any]:
    prod = make_account(A, "prod")
    dev = make_account("222222222222", "dev")
    people = {
        "outsider": member("otto", dev, Role.ADMIN),
        "viewer": member("vera", prod, Role.VIEWER),
        "operator": member("olivia", prod, Role.OPERATOR),
        "approver": member("arthur", prod, Role.APPROVER),
        "admin": member("ada", prod, Role.ADMIN),
        "superuser": make_user("root", is_superuser=True, is_staff=True),
    }
    data = record(STACK_NAME, resources={"Queue": resource_row("AWS::SQS::Queue", "q-zebra")})
    make_stack(prod, STACK_NAME, data=data)
    make_stack(dev, "dev-stack")
    SecretFinding.objects.create(
        account=prod,
        stack_name=STACK_NAME,
        region="us-east-1",
        key=f"cdkd/{STACK_NAME}/us-east-1/state.json",
        key_kind="record",
        path=["outputs", "Password"],
        source="Secrets Manager secret prod/db, key password",
    )
    awaiting = make_operation(prod, people["operator"], stack_name=STACK_NAME)
    DeploymentRun.objects.create(account=prod, stack_name=STACK_NAME, region="us-east-1", run_id=RUN_ID)
    plan = DeployPlan.objects.create(
        account=prod,
        stack_name=STACK_NAME,
        region="us-east-1",
        assembly=Assembly.objects.create(digest="a" * 64, stack_names=[STACK_NAME]),
        document={"stack": STACK_NAME, "region": "us-east-1", "changes": [], "plan": {"blocking": []}},
        digest="d" * 64,
        state_key=f"cdkd/{STACK_NAME}/us-east-1/state.json",
        state_etag='"e-1"',
        created_by=people["operator"],
    )
    DriftCheck.objects.create(
        account=prod,
        stack_name=STACK_NAME,
        region="us-east-1",
        checked_at=timezone.now(),
        drifted=1,
        counts={"MODIFIED": 1},
        resources=[{"logicalId": "Queue", "status": "MODIFIED", "differences": []}],
    )
    return {"prod": prod, "dev": dev, "people": people, "awaiting": awaiting, "deploy_plan": plan}


@pytest.fixture
def world(db):
    return build_world()


@pytest.fixture
def planned(monkeypatch):
    """FAKE ENGINE: plans come from `fake_plan`, never from S3."""
    monkeypatch.setattr(
        operations,
        "compute_plan",
        lambda account, kind, stack, region, params, person: fake_plan(kind, stack, region, params),
    )


__all__ += ["A", "OperationStatus", "call", "make_operation", "token_for"]
