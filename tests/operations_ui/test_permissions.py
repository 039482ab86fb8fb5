"""Who may read and who may act, for every URL of the project.

`RULES` classifies every named URL pattern (walked from the root resolver, so a URL added
later without a rule fails `test_it_classifies_every_url`). For each persona of account A
(outsider: admin of account B only; viewer; operator; approver; admin; and a superuser) a
rule gives the expected status of a GET and of a POST (None: the method is not allowed,
405). The Django admin and RQ's dashboard are staff-only and checked on their own.

FAKE ENGINE: `compute_plan` is replaced (the confirmation page would read S3), and so are
the S3 reads of the history pages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from engine.backend import StoredObject, VersionInfo
from stacks import history, operations
from stacks.api.tokens import create_token
from stacks.models import (
    Assembly,
    DeploymentRun,
    DeployPlan,
    GroupRoleRule,
    Membership,
    NotificationEvent,
    OperationStatus,
    Role,
    ScanRun,
    SecretFinding,
    SyncRun,
    Webhook,
    WebhookDelivery,
)
from tests.operations_ui.conftest import A, fake_plan, make_operation, member
from tests.views.conftest import make_account, make_stack, make_user, record, resource_row

pytestmark = pytest.mark.django_db

PERSONAS = ["outsider", "viewer", "operator", "approver", "admin", "superuser"]
STAFF_ONLY = ("admin/",)
# The JSON API authorises by token, not session: tests/api/test_permissions.py holds its matrix.
OWN_MATRIX = ("api/",)
STACK_NAME = "zebra-stack-a"  # a name no page shows unless it shows account A's stack


def every(status: int) -> dict[str, int]:
    return dict.fromkeys(PERSONAS, status)


def on_a(outsider: int, viewer: int, operator: int, approver: int, admin: int) -> dict[str, int]:
    """Expectations on account A's objects; a superuser acts as admin everywhere."""
    return {
        "outsider": outsider,
        "viewer": viewer,
        "operator": operator,
        "approver": approver,
        "admin": admin,
        "superuser": admin,
    }


READ_A = on_a(404, 200, 200, 200, 200)
OPERATOR_PAGE = on_a(404, 403, 200, 200, 200)
ADMIN_PAGE = on_a(404, 403, 403, 403, 200)
ADMIN_ACTION = on_a(404, 403, 403, 403, 302)


@dataclass
class World:
    people: dict[str, Any]
    values: dict[str, Any]


@dataclass
class Rule:
    kwargs: Callable[[World], dict[str, Any]] = lambda w: {}
    get: dict[str, int] | None = None  # None: GET answers 405
    post: dict[str, int] | None = None  # None: POST answers 405
    query: str = ""
    data: Callable[[World], dict[str, Any]] = lambda w: {}
    lists_a: bool = False  # a page across accounts: must not show account A to outsiders


def stack_kwargs(w: World) -> dict[str, Any]:
    return {"account_id": A, "region_slug": "us-east-1", "stack_name": STACK_NAME}


def op_kwargs(key: str) -> Callable[[World], dict[str, Any]]:
    return lambda w: {"op_id": w.values[key].pk}


def member_kwargs(w: World) -> dict[str, Any]:
    return {"account_id": A, "membership_id": w.values["nina"].pk}


def webhook_kwargs(w: World) -> dict[str, Any]:
    return {"account_id": A, "webhook_id": w.values["webhook"].pk}


RULES: dict[str, Rule] = {
    "home": Rule(get=every(302), post=every(302)),
    "login": Rule(get=every(200), post=every(200)),  # a failed login re-shows the form
    "logout": Rule(post=every(302)),
    "stacks": Rule(get=every(200), lists_a=True),
    "stacks_tree": Rule(get=every(200), lists_a=True),
    "accounts": Rule(get=every(200)),
    # Refreshing the mirror reads S3 and changes no bucket: every role may ask for it.
    "sync": Rule(post=on_a(404, 302, 302, 302, 302), data=lambda w: {"account": A}),
    "sync_status": Rule(lambda w: {"run_id": w.values["sync_run"].pk}, get=READ_A),
    "stack": Rule(stack_kwargs, get=READ_A),
    "stack_resources": Rule(stack_kwargs, get=READ_A),
    "stack_outputs": Rule(stack_kwargs, get=READ_A),
    "stack_events": Rule(stack_kwargs, get=READ_A),
    "stack_json": Rule(stack_kwargs, get=READ_A),
    "stack_download": Rule(stack_kwargs, get=READ_A),
    # The verbatim bytes: the reveal right (admins by role; a viewer only when granted).
    "stack_reveal": Rule(stack_kwargs, post=on_a(404, 403, 403, 403, 200)),
    "stack_history": Rule(stack_kwargs, get=READ_A),
    "stack_diff": Rule(stack_kwargs, get=READ_A, query="?a=v1&b=current"),
    "stack_version": Rule(lambda w: {**stack_kwargs(w), "version_id": "v1"}, get=READ_A),
    # Any version as a file, masked like the pages (verbatim bytes only through Reveal).
    "stack_version_download": Rule(stack_kwargs, get=READ_A, query="?version_id=v1"),
    # Exports read the mirror: like the stacks they come from.
    "account_exports": Rule(lambda w: {"account_id": A}, get=READ_A),
    "exports": Rule(get=every(200), lists_a=True),
    # Planning reads the bucket and changes nothing, but takes an operator; an empty POST is
    # a form error (400) for those who may plan. A plan reads like its stack.
    "stack_plan_new": Rule(stack_kwargs, get=OPERATOR_PAGE, post=on_a(404, 403, 400, 400, 400)),
    "account_plan_new": Rule(lambda w: {"account_id": A}, get=OPERATOR_PAGE, post=on_a(404, 403, 400, 400, 400)),
    "deploy_plan": Rule(lambda w: {"plan_id": w.values["plan"].pk}, get=READ_A),
    "deploy_plan_json": Rule(lambda w: {"plan_id": w.values["plan"].pk}, get=READ_A),
    "deploy_plan_request": Rule(lambda w: {"plan_id": w.values["plan"].pk}, post=on_a(404, 403, 302, 302, 302)),
    "stack_resource": Rule(lambda w: {**stack_kwargs(w), "logical_id": "Queue"}, get=READ_A),
    # A drift check reads every resource with the account's role: an operator queues it.
    "stack_drift_check": Rule(stack_kwargs, post=on_a(404, 403, 302, 302, 302)),
    "operation_new": Rule(
        lambda w: {**stack_kwargs(w), "kind": "orphan"}, get=OPERATOR_PAGE, post=on_a(404, 403, 302, 302, 302)
    ),
    # An account's operation (no stack): operators request it, as every other kind.
    "state_migrate_new": Rule(
        lambda w: {"account_id": A},
        get=OPERATOR_PAGE,
        post=on_a(404, 403, 302, 302, 302),
        data=lambda w: {"region": "us-east-1"},
    ),
    "operations": Rule(get=every(200), query="?tab=all", lists_a=True),
    "operation": Rule(op_kwargs("awaiting"), get=READ_A),
    # The operator requested it: they cannot approve it, approvers and admins can.
    "operation_decide": Rule(
        op_kwargs("awaiting"), post=on_a(404, 403, 403, 302, 302), data=lambda w: {"decision": "approve"}
    ),
    "operation_cancel": Rule(
        op_kwargs("awaiting"), post=on_a(404, 403, 302, 302, 302), data=lambda w: {"confirm": "yes"}
    ),
    "operation_retry": Rule(op_kwargs("abandoned"), post=on_a(404, 403, 403, 302, 302)),
    "audit": Rule(get=every(200), lists_a=True),
    "attention": Rule(get=every(200)),  # rows only from the accounts a person sees (tests/views/test_attention.py)
    # Findings say where a secret is, never its value: every role reads them; scanning reads
    # the secrets' values (in the worker), so it takes an operator.
    "secrets": Rule(get=every(200), lists_a=True),
    "scan": Rule(post=on_a(404, 403, 302, 302, 302), data=lambda w: {"account": A}),
    "scan_status": Rule(lambda w: {"run_id": w.values["scan_run"].pk}, get=READ_A),
    "events": Rule(get=every(200), lists_a=True),
    "event_run": Rule(
        lambda w: {"account_id": A, "region": "us-east-1", "stack_name": STACK_NAME, "run_id": w.values["run"].run_id},
        get=READ_A,
    ),
    "account_settings": Rule(lambda w: {"account_id": A}, get=ADMIN_PAGE),
    "account_policy": Rule(
        lambda w: {"account_id": A},
        post=ADMIN_ACTION,
        data=lambda w: {"kind": "orphan", "approval_required": "on", "approvers_needed": 2, "validity_hours": 8},
    ),
    "account_member_add": Rule(
        lambda w: {"account_id": A}, post=ADMIN_ACTION, data=lambda w: {"username": "newton", "role": "viewer"}
    ),
    "account_member_change": Rule(member_kwargs, post=ADMIN_ACTION, data=lambda w: {"role": "operator"}),
    "account_member_remove": Rule(member_kwargs, post=ADMIN_ACTION),
    "account_member_reveal": Rule(member_kwargs, post=ADMIN_ACTION, data=lambda w: {"can_reveal": "on"}),
    # A person's own API tokens: everyone has the page; an empty form is a 400. The schema
    # says what exists, not what is there: public.
    "api_tokens": Rule(get=every(200), post=every(400)),
    "api_token_revoke": Rule(lambda w: {"token_id": w.values["token"].pk}, post={**every(404), "admin": 302}),
    "api_schema": Rule(get=every(200)),
    # Open to all on purpose (no session involved): tests/metrics/ checks what they answer
    # with services up or down, and the metrics guard (closed here: no token, no networks).
    "healthz": Rule(get=every(503)),  # no RQ worker runs beside this matrix
    "metrics": Rule(get=every(404)),
    # Webhooks: the account's admins only; a person's own email settings: everyone.
    "webhooks": Rule(lambda w: {"account_id": A}, get=ADMIN_PAGE),
    "webhook_new": Rule(
        lambda w: {"account_id": A},
        get=ADMIN_PAGE,
        post=ADMIN_ACTION,
        data=lambda w: {"name": "n", "url": "https://example.com/h", "secret": "s" * 20, "events": ["lock.stale"]},
    ),
    "webhook": Rule(webhook_kwargs, get=ADMIN_PAGE),
    "webhook_edit": Rule(
        webhook_kwargs, get=ADMIN_PAGE, post=ADMIN_ACTION, data=lambda w: {"name": "m", "events": ["lock.stale"]}
    ),
    "webhook_delete": Rule(webhook_kwargs, post=ADMIN_ACTION),
    "webhook_redeliver": Rule(
        lambda w: {**webhook_kwargs(w), "delivery_id": w.values["delivery"].pk}, post=ADMIN_ACTION
    ),
    "notification_settings": Rule(get=every(200), post=every(302)),
    # Group rules for this account: its admins (pattern rules need a superuser, tests/sso).
    "account_rule_add": Rule(
        lambda w: {"account_id": A}, post=ADMIN_ACTION, data=lambda w: {"group": "readers", "role": "viewer"}
    ),
    "account_rule_remove": Rule(lambda w: {"account_id": A, "rule_id": w.values["rule"].pk}, post=ADMIN_ACTION),
    # Single sign-on is off unless configured (tests/sso runs it against a real provider).
    "oidc_authentication_init": Rule(get=every(404)),
    "oidc_authentication_callback": Rule(get=every(404)),
}


def url_patterns(patterns=None, prefix: str = "") -> list[tuple[str, str | None]]:
    """(route, name) of every URL pattern, includes followed, staff-only apps left out."""
    found = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if not route.startswith(STAFF_ONLY + OWN_MATRIX):
                found += url_patterns(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            found.append((route, pattern.name))
    return found


def build_world() -> World:
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
    make_user("newton")
    make_stack(prod, STACK_NAME, data=record(STACK_NAME, resources={"Queue": resource_row("AWS::SQS::Queue")}))
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
    values = {
        "sync_run": SyncRun.objects.create(account=prod, account_ids=[prod.pk], requested_by=people["viewer"]),
        "scan_run": ScanRun.objects.create(account=prod, account_ids=[prod.pk], requested_by=people["operator"]),
        "awaiting": make_operation(prod, people["operator"], stack_name=STACK_NAME),
        "abandoned": make_operation(
            prod, people["operator"], stack_name=STACK_NAME, status=OperationStatus.FAILED, result={"abandoned": True}
        ),
        "nina": Membership.objects.get(user=member("nina", prod, Role.VIEWER)),
        # ada's token: only ada (and no superuser) may revoke it.
        "token": create_token(people["admin"], "ci", expires_at=None, read_only=True)[0],
        "rule": GroupRoleRule.objects.create(group="leads", account=prod, role=Role.APPROVER),
        "run": DeploymentRun.objects.create(
            account=prod, stack_name=STACK_NAME, region="us-east-1", run_id="20240319T080000000Z-1a2b3c4d"
        ),
        "plan": DeployPlan.objects.create(
            account=prod,
            stack_name=STACK_NAME,
            region="us-east-1",
            assembly=Assembly.objects.create(digest="0" * 64, stack_names=[STACK_NAME]),
            document={"stack": STACK_NAME, "region": "us-east-1", "changes": [], "plan": {"digest": "d" * 64}},
            digest="d" * 64,
            state_key=f"cdkd/{STACK_NAME}/us-east-1/state.json",
        ),
    }
    values["webhook"] = Webhook.objects.create(
        account=prod, name="hook", url="https://example.com/h", url_origin="https://example.com", secret="s" * 20
    )
    event = NotificationEvent.objects.create(kind="lock.stale", account=prod)
    values["delivery"] = WebhookDelivery.objects.create(
        webhook=values["webhook"], event=event, payload_id=event.payload_id, job_id="j"
    )
    return World(people, values)


@pytest.fixture
def no_s3(monkeypatch):
    """FAKE ENGINE: plans and the history's S3 reads come from here."""
    monkeypatch.setattr(
        operations,
        "compute_plan",
        lambda account, kind, stack, region, params, person: fake_plan(kind, stack, region, params),
    )
    key = f"cdkd/{STACK_NAME}/us-east-1/state.json"
    body = json.dumps(record(STACK_NAME)).encode()
    versions = [VersionInfo(key, "v1", datetime(2024, 3, 19, tzinfo=UTC), len(body), True, False, '"v1"')]
    with (
        mock.patch.object(history, "list_versions", autospec=True, return_value=versions),
        mock.patch.object(
            history, "get_version", autospec=True, return_value=StoredObject(key, body, '"v1"', "v1", None)
        ),
    ):
        yield


def test_it_classifies_every_url():
    named = [name for _route, name in url_patterns()]
    assert None not in named, "every URL pattern needs a name"
    unclassified = set(named) - set(RULES)
    assert not unclassified, f"classify these URLs in RULES (who may read, who may act): {sorted(unclassified)}"
    assert not set(RULES) - set(named), "RULES names URLs that no longer exist"


CASES = [(name, persona) for name in RULES for persona in PERSONAS]


@pytest.mark.parametrize(("name", "persona"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_it_lets_each_persona_read(name, persona, no_s3):
    world = build_world()
    rule = RULES[name]
    client = Client()
    client.force_login(world.people[persona])
    response = client.get(reverse(name, kwargs=rule.kwargs(world)) + rule.query)
    expected = rule.get[persona] if rule.get is not None else 405
    assert response.status_code == expected, f"GET {name} as {persona}"
    if rule.lists_a and persona == "outsider":
        assert STACK_NAME.encode() not in response.content, f"{name} shows account A to an outsider"


@pytest.mark.parametrize(("name", "persona"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_it_lets_each_persona_act(name, persona, no_s3):
    world = build_world()
    rule = RULES[name]
    client = Client()
    client.force_login(world.people[persona])
    response = client.post(reverse(name, kwargs=rule.kwargs(world)), rule.data(world))
    expected = rule.post[persona] if rule.post is not None else 405
    assert response.status_code == expected, f"POST {name} as {persona}"


POSTS = [name for name, rule in RULES.items() if rule.post is not None]


@pytest.mark.parametrize("name", POSTS)
def test_it_needs_a_csrf_token_on_every_post(name, no_s3):
    world = build_world()
    rule = RULES[name]
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.people["superuser"])
    response = client.post(reverse(name, kwargs=rule.kwargs(world)), rule.data(world))
    assert response.status_code == 403, name
    assert b"CSRF" in response.content


def test_it_lets_no_approver_approve_their_own_request(client, no_s3):
    world = build_world()
    own = make_operation(world.values["awaiting"].account, world.people["approver"], stack_name=STACK_NAME)
    client.force_login(world.people["approver"])
    response = client.post(reverse("operation_decide", args=[own.pk]), {"decision": "approve"})
    assert response.status_code == 403
    own.refresh_from_db()
    assert own.status == OperationStatus.AWAITING_APPROVAL


@pytest.mark.parametrize("persona", [p for p in PERSONAS if p != "superuser"])
def test_it_keeps_the_staff_only_apps_from_everyone_else(client, persona):
    world = build_world()
    client.force_login(world.people[persona])
    for path in ("/admin/", "/admin/stacks/auditevent/"):
        response = client.get(path)
        assert response.status_code == 302 and "/admin/login/" in response.url, (persona, path)
    before = Membership.objects.count()
    response = client.post("/admin/stacks/membership/add/", {"role": "admin"})
    assert response.status_code == 302 and "/admin/login/" in response.url
    assert Membership.objects.count() == before


def test_it_opens_the_staff_only_apps_to_staff(client):
    world = build_world()
    client.force_login(world.people["superuser"])
    assert client.get("/admin/stacks/auditevent/").status_code == 200


JUNK_QUERY = (
    "?page=-3&q=%00%27%22%3Cscript%3E&account=999999999999&region=..%2F&lock=weird&defects=maybe&version=abc"
    "&nesting=sideways&since=yesterday&until=2024-13-45&a=%2F..%2F&b=&format=xml&tab=%3F%3F&kind=nope"
    "&status=nope&result=nope&command=nope&event_type=nope&person=%00&stack=%00&current=nope&source=nope"
    "&key_kind=nope&view=nope&purge_history=maybe&concurrency=-1"
)


# /healthz answers 503 by design while no worker runs (its meaning, not a server error).
@pytest.mark.parametrize("name", [name for name, rule in RULES.items() if rule.get is not None and name != "healthz"])
def test_it_answers_junk_query_strings_without_a_server_error(name, no_s3):
    world = build_world()
    client = Client(raise_request_exception=False)
    client.force_login(world.people["superuser"])

    response = client.get(reverse(name, kwargs=RULES[name].kwargs(world)) + JUNK_QUERY)

    assert response.status_code < 500, f"GET {name} with junk: {response.status_code}"
    assert b"Traceback" not in response.content


@pytest.mark.parametrize("name", POSTS)
def test_it_answers_junk_posts_without_a_server_error(name, no_s3):
    world = build_world()
    client = Client(raise_request_exception=False)
    client.force_login(world.people["superuser"])
    junk = {
        "decision": "maybe",
        "comment": "\x00" * 3,
        "role": "god",
        "username": "",
        "kind": "nope",
        "approvers_needed": "-1",
        "validity_hours": "x",
        "account": "999",
        "confirm_name": "\x00",
        "concurrency": "0",
        "resources": ["", "\x00"],
        "version_id": "../..",
        "purge_history": "maybe",
    }

    response = client.post(reverse(name, kwargs=RULES[name].kwargs(world)), junk)

    assert response.status_code < 500, f"POST {name} with junk: {response.status_code}"
