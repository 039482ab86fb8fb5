"""Rolling back a leftover journal from the web (issues 10 and 13): the stack page's journal
notice and the attention board's journal row link to the rollback request page, which plans,
asks for approval per the account's policy and queues the worker, as a destroy does; and say
why not, in one line, where the rollback cannot run.

The end-to-end tests build the journal with the real deploy engine on moto (a deploy whose one
create fails, run with no rollback: tests/deploy/test_rollback.py), then let an in-process RQ
worker run the approved operation with the real rollback engine: the resources the failed
deploy created are gone, and so are the journal and the record. The other tests use the FAKE
ENGINE of tests/operations_ui/conftest.py (`planned`), since they test the pages and the
pipeline's rules, not the rollback.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from rq import SimpleWorker

from engine.deploy.run import DeployFailed
from stacks import actions, operations
from stacks.forms import OperationParamsForm
from stacks.models import (
    Account,
    ApprovalPolicy,
    AuditEvent,
    Membership,
    Operation,
    OperationStatus,
    Role,
    Stack,
)
from stacks.sync import sync_account
from tests.deploy.test_rollback import failing_provider, live
from tests.deploy.test_run import ACCOUNT, BUCKET, JOURNAL, REGION, STACK, STATE, context, deployer, golden_template
from tests.operations_ui.conftest import login
from tests.views.conftest import make_lock

JOURNAL_KEY = "cdkd/web/us-east-1/rollback-journal.json"


def new_url(stack: Stack) -> str:
    return reverse("operation_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name, "rollback"])


def stack_url(stack: Stack) -> str:
    return reverse("stack", args=[stack.account.account_id, stack.region_slug, stack.stack_name])


def notice(client, stack: Stack) -> str:
    return client.get(stack_url(stack)).content.decode().split('id="journal-notice"')[1].split("</div>")[0]


def journal_row(client, stack: Stack) -> dict[str, Any]:
    response = client.get(reverse("attention"), {"format": "json"})
    body = b"".join(response.streaming_content) if response.streaming else response.content
    rows = [r for r in json.loads(body)["rows"] if r["stack"] == stack.stack_name and r["kind"] == "journal"]
    assert len(rows) == 1
    return rows[0]


def with_journal(stack: Stack) -> Stack:
    from django.utils import timezone

    stack.journal_key, stack.journal_etag, stack.journal_size = JOURNAL_KEY, '"j-1"', 900
    stack.journal_modified = timezone.now()
    stack.save()
    return stack


# --- end to end, on moto -----------------------------------------------------------------------


@pytest.fixture
def failed_deploy(aws):
    """GoldenCdkStack's first deploy, failed on one create and not rolled back: the record
    holds what it created, the journal beside it says how to undo that."""
    from engine.backend import StateBucket

    aws.make_bucket(ACCOUNT, BUCKET)
    bucket = StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)
    with pytest.raises(DeployFailed):
        deployer(provider_for=failing_provider).deploy(
            context(bucket), golden_template(), account=ACCOUNT, concurrency=1, no_rollback=True
        )
    assert aws.etag(ACCOUNT, BUCKET, JOURNAL) is not None and live(aws) != ([], [])
    return json.loads(aws.get(ACCOUNT, BUCKET, STATE))


@pytest.fixture
def people(db, django_user_model) -> dict[str, Any]:
    role_arn = f"arn:aws:iam::{ACCOUNT}:role/cdkd-admin"
    account = Account.objects.create(account_id=ACCOUNT, name="prod", role_arn=role_arn)
    out: dict[str, Any] = {"account": account}
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER), ("april", Role.APPROVER)):
        user = out[name] = Client()
        out[f"{name}_user"] = django_user_model.objects.create_user(name)
        Membership.objects.create(user=out[f"{name}_user"], account=account, role=role)
        user.force_login(out[f"{name}_user"])
    return out


def work(queue) -> None:
    SimpleWorker([queue], connection=queue.connection).work(burst=True)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_rolls_back_a_journal_requested_from_the_stack_page_and_approved(aws, queue, failed_deploy, people):
    olivia, arthur = people["olivia"], people["arthur"]
    sync_account(people["account"])
    stack = Stack.objects.get(stack_name=STACK)
    assert stack.journal_key == JOURNAL

    # The notice links to the request page; the page shows the engine's plan of the journal.
    text = notice(olivia, stack)
    assert f'id="journal-rollback" href="{new_url(stack)}"' in text and 'id="journal-why-not"' not in text
    preview = olivia.get(new_url(stack))
    assert preview.status_code == 200, preview.content[:2000]
    plan = preview.context["plan"]
    assert plan["kind"] == "rollback" and plan["data"]["segments"] == 1
    assert plan["data"]["account"] == ACCOUNT  # the operation's own account
    reverted = {c["logicalId"] for c in plan["changes"] if c["action"] == "revert"}
    assert reverted == set(failed_deploy["resources"])
    assert 'id="rollback-warning"' in preview.content.decode()

    response = olivia.post(new_url(stack), {"plan_digest": preview.context["digest"], "reason": "OPS-7: failed deploy"})
    assert response.status_code == 302
    op = Operation.objects.get()
    assert (op.kind, op.status, op.params) == ("rollback", OperationStatus.AWAITING_APPROVAL, {})
    work(queue)  # nothing runs before the approval
    assert live(aws) != ([], []) and aws.etag(ACCOUNT, BUCKET, JOURNAL) is not None

    assert arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 302
    work(queue)

    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    assert op.result["details"]["result"] == "clean" and op.result["details"]["state_deleted"] is True
    assert sorted(op.result["details"]["report"]["reverted"]) == sorted(failed_deploy["resources"])
    assert live(aws) == ([], [])  # what the failed deploy created is gone
    assert aws.etag(ACCOUNT, BUCKET, JOURNAL) is None and aws.etag(ACCOUNT, BUCKET, STATE) is None
    assert not Stack.objects.filter(stack_name=STACK).exists()  # the re-sync after the run
    actions_seen = list(AuditEvent.objects.filter(operation=op).order_by("id").values_list("action", flat=True))
    assert actions_seen == ["operation.requested", "operation.approved", "operation.started", "operation.finished"]


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_runs_a_rollback_at_once_where_the_policy_needs_no_approval(aws, queue, failed_deploy, people):
    ApprovalPolicy.objects.create(account=people["account"], kind="rollback", approval_required=False)
    sync_account(people["account"])
    stack = Stack.objects.get(stack_name=STACK)
    olivia = people["olivia"]
    digest = olivia.get(new_url(stack), {"revert_failed": "on"}).context["digest"]

    response = olivia.post(new_url(stack), {"plan_digest": digest, "revert_failed": "on"})
    assert response.status_code == 302
    op = Operation.objects.get()
    assert op.status == OperationStatus.QUEUED and op.params == {"revert_failed": True}
    assert op.plan["data"]["revertFailed"] is True and "revert failed ops" in op.plan["summary"]
    work(queue)

    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    assert live(aws) == ([], []) and aws.etag(ACCOUNT, BUCKET, JOURNAL) is None


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_waits_for_as_many_approvers_as_the_policy_names(aws, queue, failed_deploy, people):
    ApprovalPolicy.objects.create(
        account=people["account"], kind="rollback", approval_required=True, approvers_needed=2
    )
    sync_account(people["account"])
    stack = Stack.objects.get(stack_name=STACK)
    row = journal_row(people["olivia"], stack)
    assert row["nextStep"]["allowed"] is True and row["nextStep"]["url"] == new_url(stack)
    assert row["nextStep"]["approval"] == "needs 2 approvals"
    op = operations.request_operation(people["olivia_user"], people["account"], "rollback", STACK, REGION, {})

    operations.decide(people["arthur_user"], op, approve=True)
    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL
    work(queue)
    assert aws.etag(ACCOUNT, BUCKET, JOURNAL) is not None  # one approval of two: nothing ran

    operations.decide(people["april_user"], op, approve=True)
    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    assert aws.etag(ACCOUNT, BUCKET, JOURNAL) is None


# --- why not ------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda s: setattr(s, "journal_key", ""), "There is no rollback journal to replay"),
        (lambda s: setattr(s, "journal_key", None), "has not been listed yet: sync the account"),
        (lambda s: (setattr(s, "read_only", True), setattr(s, "schema_version", 12)), "Written by a newer cdkd"),
        (lambda s: setattr(s, "defects", [{"path": "resources", "code": "not-object"}]), "The record is damaged"),
        (lambda s: make_lock(s, owner="ci@runner-17:4242"), "The stack is locked by ci@runner-17:4242"),
        (lambda s: make_lock(s, readable=False), "lock.json cannot be read"),
    ],
    ids=["no-journal", "not-listed", "newer-record", "damaged", "live-lock", "unreadable-lock"],
)
def test_it_says_why_a_rollback_cannot_run_and_refuses_the_request(client, olivia, web, planned, setup, reason):
    stack = with_journal(web)
    setup(stack)
    stack.save()
    stack = Stack.objects.get(pk=stack.pk)

    assert reason in (actions.why_not(stack, "rollback") or "")
    login(client, olivia)
    for response in (client.get(new_url(stack)), client.post(new_url(stack), {"reason": "x"})):
        assert response.status_code == 409 and reason in response.content.decode()
    assert planned == [] and not Operation.objects.exists()  # refused before any plan
    if stack.journal_key:
        text = notice(client, stack)
        assert 'id="journal-why-not"' in text and 'id="journal-rollback"' not in text
        step = journal_row(client, stack)["nextStep"]
        assert step["allowed"] is False and reason in step["reason"]


@pytest.mark.django_db
def test_an_expired_lock_does_not_stand_in_the_way(client, olivia, web, planned):
    stack = with_journal(web)
    make_lock(stack, expires_in_ms=-1000)  # cdkd takes an expired lock over
    assert actions.why_not(stack, "rollback") is None
    assert journal_row(login(client, olivia), stack)["nextStep"]["allowed"] is True


# --- permissions, parameters --------------------------------------------------------------------


@pytest.mark.django_db
def test_only_an_operator_of_the_account_may_request_a_rollback(client, vera, olivia, otto, web, planned):
    stack = with_journal(web)
    login(client, vera)
    text = notice(client, stack)
    assert 'id="journal-rollback-role"' in text and "You need the operator role" in text
    assert 'id="journal-rollback"' not in text
    step = journal_row(client, stack)["nextStep"]
    assert step["allowed"] is False and "You need the operator role" in step["reason"]
    assert client.get(new_url(stack)).status_code == 403
    assert client.post(new_url(stack), {}).status_code == 403
    with pytest.raises(PermissionDenied):
        operations.request_operation(vera, stack.account, "rollback", "web", "us-east-1", {})
    login(client, otto)  # no role on this account at all: the stack is not there for him
    assert client.get(new_url(stack)).status_code == 404
    assert planned == [] and not Operation.objects.exists()

    login(client, olivia)
    assert client.post(new_url(stack), {"reason": "x"}).status_code == 302
    op = Operation.objects.get()
    with pytest.raises(PermissionDenied, match="approver role"):  # an operator requests, never approves
        operations.decide(olivia, op, approve=True)


@pytest.mark.django_db
def test_it_passes_cdkds_options_and_always_the_operations_own_account(client, olivia, web, planned):
    stack = with_journal(web)
    login(client, olivia)
    query = {"revert_failed": "on", "orphan": "Queue, Fn Queue", "account": "999999999999"}
    assert client.get(new_url(stack), query).status_code == 200
    assert planned[-1][1:5] == ("rollback", "web", "us-east-1", {"revert_failed": True, "orphan": ["Queue", "Fn"]})

    assert client.post(new_url(stack), query).status_code == 302
    assert Operation.objects.get().params == {"revert_failed": True, "orphan": ["Queue", "Fn"]}
    bad = OperationParamsForm({"orphan": "Queue \x07bell"}, kind="rollback")
    assert not bad.is_valid() and "logical ids" in " ".join(bad.errors["orphan"])


@pytest.mark.django_db
def test_the_real_plan_is_given_the_operations_account(olivia, web, monkeypatch):
    """compute_plan itself (not the fake): whatever the request carried, the plan's account
    is the operation's, so a rollback never reverts into another account."""
    seen: list[dict] = []

    class Spec:
        def plan(self, ctx):
            seen.append(dict(ctx.params))
            raise operations.OperationRefused("stop here")

    monkeypatch.setattr(operations, "spec_for", lambda kind: Spec())
    monkeypatch.setattr(operations, "open_bucket", lambda account, actor: None)
    with pytest.raises(operations.OperationRefused):
        operations.compute_plan(web.account, "rollback", "web", "us-east-1", {"account": "999999999999"}, "olivia")
    assert seen == [{"account": web.account.account_id}]
