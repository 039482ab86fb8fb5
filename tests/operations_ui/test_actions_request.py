"""Requests take a reason; a plan that predicts a refusal offers its override as an explicit
choice (or is refused up front); the approver sees both; the audit keeps both; validation
messages are in words.

FAKE ENGINE: `locked_plan` stands in for `compute_plan` with an orphan plan computed under
carol's live lock, as engine.orphan words and shapes it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from engine.operations import Plan
from stacks import operations
from stacks.forms import OperationParamsForm, PolicyForm, worded_errors
from stacks.models import AuditEvent, Operation
from tests.operations_ui.conftest import ETAG, login

pytestmark = pytest.mark.django_db

LOCK = {"key": "cdkd/web/us-east-1/lock.json", "etag": '"lock-1"', "owner": "carol@build-host:4242"}


def orphan_plan(params: dict) -> Plan:
    forced = bool(params.get("force"))
    warning = (
        "Forced past carol's lock: the lock is not acquired, and is removed after the record."
        if forced
        else "the lock held by carol@build-host:4242 is live: the run refuses unless forced."
    )
    return Plan(
        kind="orphan",
        stack="web",
        region="us-east-1",
        etag=ETAG,
        summary="Forget the cdkd state record of web",
        changes=["delete cdkd/web/us-east-1/state.json"] + (["remove the lock (forced)"] if forced else []),
        warnings=[warning],
        data={"foreign_lock": LOCK, "force": forced},
    )


@pytest.fixture
def locked_plan(monkeypatch):
    calls = []

    def compute_plan(account, kind, stack_name, region, params, person):
        calls.append(dict(params))
        return orphan_plan(params)

    monkeypatch.setattr(operations, "compute_plan", compute_plan)
    return calls


def new_url(stack, kind: str = "orphan") -> str:
    return reverse("operation_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name, kind])


def test_it_offers_force_as_an_explicit_choice_when_the_plan_predicts_a_refusal(client, olivia, web, locked_plan):
    page = login(client, olivia).get(new_url(web)).content.decode()
    assert 'id="predicted-refusal"' in page
    assert "The stack is locked by carol@build-host:4242: the run refuses unless forced." in page
    confirm = page[page.index('id="confirm"') :]
    assert '<input type="checkbox" name="force" value="on" id="id_force">' in confirm  # not pre-ticked
    assert 'name="force_offered" value="on"' in confirm and 'name="reason"' in confirm


def test_it_refuses_the_unforced_request_up_front(client, olivia, web, locked_plan):
    response = login(client, olivia).post(new_url(web), {"force_offered": "on", "reason": "retire"})
    assert response.status_code == 409
    assert b"the run refuses unless forced. Tick Force to override it" in response.content
    assert not Operation.objects.exists()


def test_it_records_the_reason_and_the_forced_override_and_shows_both_to_the_approver(
    client, olivia, arthur, web, locked_plan
):
    login(client, olivia)
    response = client.post(new_url(web), {"force_offered": "on", "force": "on", "reason": "OPS-1234: stack retired"})
    op = Operation.objects.get()
    assert response.status_code == 302 and op.params == {"force": True}
    assert op.reason == "OPS-1234: stack retired" and op.plan["data"]["force"] is True
    event = AuditEvent.objects.get(action="operation.requested", operation=op)
    assert event.details == {
        "reason": "OPS-1234: stack retired",
        "force": "Forced past the live lock held by carol@build-host:4242 (it is removed after).",
    }
    page = login(client, arthur).get(reverse("operation", args=[op.pk])).content.decode()
    assert '<td id="operation-reason">OPS-1234: stack retired</td>' in page
    assert 'id="forced-override"' in page and "Forced past the live lock held by carol@build-host:4242" in page
    decide = page[page.index('id="decide"') :]
    assert "<strong>Requested because:</strong> OPS-1234: stack retired" in decide
    assert "You approve the override too." in decide
    inbox = client.get(reverse("operations") + "?tab=inbox").content.decode()
    assert "OPS-1234: stack retired" in inbox


def test_it_runs_with_the_force_the_approver_saw(olivia, web, locked_plan):
    op = operations.request_operation(olivia, web.account, "orphan", "web", "us-east-1", {"force": True}, reason="x")
    assert op.params["force"] is True and op.plan["data"]["force"] is True  # execute reads both


def test_it_keeps_a_reason_to_one_bounded_line(olivia, web):
    form = OperationParamsForm({"reason": "OPS-1\nrm\x07 -rf  "}, kind="orphan")
    assert form.is_valid() and form.cleaned_data["reason"] == "OPS-1 rm -rf"
    long = OperationParamsForm({"reason": "x" * 501}, kind="orphan")
    assert not long.is_valid()
    assert worded_errors(long) == ["Reason must be at most 500 characters (it has 501)."]


def test_it_words_policy_errors_without_field_names(client, ada, web):
    form = PolicyForm({"kind": "destroy", "approvers_needed": 99, "validity_hours": "soon"})
    assert not form.is_valid()
    assert form.worded_errors == [
        "Destroy policy: Approvers needed must be at most 20.",
        "Destroy policy: Hours an approval holds must be a whole number.",
    ]
    url = reverse("account_policy", args=[web.account.account_id])
    page = login(client, ada).post(url, {"kind": "destroy", "approvers_needed": 0, "validity_hours": 8})
    text = page.content.decode()
    assert "Destroy policy: Approvers needed must be at least 1." in text
    assert "approvers_needed:" not in text and "Ensure this value" not in text


def test_it_words_the_operations_filter_errors(client, olivia, web):
    page = login(client, olivia).get(reverse("operations") + "?status=nope&page=0").content.decode()
    assert "Status: that is not one of the choices." in page and "Page must be at least 1." in page
    assert "status:" not in page
