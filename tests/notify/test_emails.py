"""Emails and events from the operation pipeline, end to end: a force-unlock requested,
approved or rejected and run against moto (the real engine spec, a real worker queue), the
notifications fanned out by the notify queue's job, emails caught by Django's locmem
backend. Who gets what: approval requests to that account's approvers only, decisions to
the requester, the rest to those who subscribed; roles as they are when the email goes. A
request cancelled before it ran and an operation whose worker died are told too, and a
person's change of their email subscriptions is in the audit log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from cdkd_site.queues import get_queue
from stacks import notify
from stacks.models import Account, AuditEvent, Membership, NotificationEvent, Operation, Role, Subscription
from stacks.operations import cancel, decide, reap_abandoned, request_operation
from stacks.sync import sync_account
from tests.notify.conftest import work

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1, A2 = "111111111111", "222222222222"
BUCKET = f"cdkd-state-{A1}"
RECORD = {"version": 11, "stackName": "Shop", "region": "us-east-1", "resources": {}, "outputs": {}}
LOCK = {"owner": "ci@old-runner:7", "timestamp": 1000, "expiresAt": 2000, "operation": "deploy"}


@pytest.fixture
def world(aws, django_user_model, notify_queue, settings):
    settings.CDKD_LOCK_STALE_SECONDS = 0  # this file is about operations
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/state.json", RECORD)
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/lock.json", LOCK)
    prod = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    dev = Account.objects.create(account_id=A2, name="dev")
    people = {}
    for name, account, role in (
        ("olivia", prod, Role.OPERATOR),
        ("arthur", prod, Role.APPROVER),
        ("adele", prod, Role.ADMIN),
        ("vic", prod, Role.VIEWER),
        ("dana", dev, Role.APPROVER),
    ):
        people[name] = django_user_model.objects.create_user(name, email=f"{name}@example.com")
        Membership.objects.create(user=people[name], account=account, role=role)
    people["root"] = django_user_model.objects.create_user("root", email="root@example.com", is_superuser=True)
    people["noemail"] = django_user_model.objects.create_user("noemail")
    Membership.objects.create(user=people["noemail"], account=prod, role=Role.APPROVER)
    sync_account(prod)
    default = get_queue("default")
    default.connection.flushdb()
    return {"prod": prod, "dev": dev, "people": people, "default": default, "notify": notify_queue}


def unlock(world) -> Operation:
    return request_operation(world["people"]["olivia"], world["prod"], "force-unlock", "Shop", "us-east-1", {})


def sent() -> list[tuple[str, str]]:
    return sorted((m.to[0], m.subject) for m in mail.outbox)


def test_it_emails_an_approval_request_to_that_accounts_approvers_only(world):
    op = unlock(world)
    assert op.status == "awaiting-approval"

    work(world["notify"])

    subject = "[cdkd] Approval requested: force-unlock of Shop (us-east-1) on prod by olivia"
    # arthur and adele (approver, admin of prod); not olivia (the requester), vic (viewer),
    # dana (approver of dev), root (superuser, not subscribed to prod) or noemail.
    assert sent() == [("adele@example.com", subject), ("arthur@example.com", subject)]
    body = mail.outbox[0].body
    assert f"http://localhost:8000/operations/{op.pk}/" in body
    assert "notification settings" in body


def test_it_emails_the_requester_the_approval_and_subscribers_the_result(world):
    vic = world["people"]["vic"]
    Subscription.objects.create(user=vic, account=world["prod"], events=["operation.finished"])
    op = unlock(world)
    work(world["notify"])
    mail.outbox.clear()

    decide(world["people"]["arthur"], op, approve=True)
    work(world["notify"])
    assert sent() == [("olivia@example.com", "[cdkd] Approved: force-unlock of Shop (us-east-1) on prod")]
    mail.outbox.clear()

    work(world["default"])  # the operation runs
    assert Operation.objects.get(pk=op.pk).status == "succeeded"
    work(world["notify"])
    assert sent() == [("vic@example.com", "[cdkd] Finished: force-unlock of Shop (us-east-1) on prod")]
    kinds = list(NotificationEvent.objects.order_by("id").values_list("kind", flat=True))
    assert kinds == ["approval.requested", "operation.approved", "operation.finished"]
    finished = NotificationEvent.objects.get(kind="operation.finished").facts
    assert finished["operation"] == {
        "id": op.pk,
        "kind": "force-unlock",
        "status": "succeeded",
        "stack": "Shop",
        "region": "us-east-1",
        "requester": "olivia",
        "via": "web",
    }
    assert finished["result"] == "succeeded"


def test_it_emails_the_requester_a_rejection(world):
    op = unlock(world)
    work(world["notify"])
    mail.outbox.clear()

    decide(world["people"]["arthur"], op, approve=False, comment="not now: the deploy is still running")
    work(world["notify"])

    assert sent() == [("olivia@example.com", "[cdkd] Rejected by arthur: force-unlock of Shop (us-east-1) on prod")]
    assert "deploy is still running" not in mail.outbox[0].body  # free text stays on the page


def test_it_respects_a_persons_subscription_and_their_role_when_the_email_goes(world):
    people = world["people"]
    Subscription.objects.create(user=people["adele"], account=world["prod"], events=[])
    Subscription.objects.create(user=people["vic"], account=world["prod"], events=["approval.requested"])
    Subscription.objects.create(user=people["root"], account=world["prod"], events=["approval.requested"])
    unlock(world)
    Membership.objects.filter(user=people["arthur"]).update(role=Role.VIEWER)  # demoted before the job runs

    work(world["notify"])

    # adele opted out, arthur is no longer an approver, vic never was; root subscribed.
    assert [to for to, _ in sent()] == ["root@example.com"]


def test_it_notifies_nobody_when_the_request_is_rolled_back(world):
    with pytest.raises(RuntimeError), transaction.atomic():
        unlock(world)
        raise RuntimeError("the caller's transaction fails after the request")

    assert not NotificationEvent.objects.exists() and world["notify"].count == 0
    work(world["notify"])
    assert mail.outbox == []


def test_it_refuses_an_unknown_kind_or_fact(world):
    with pytest.raises(ValueError, match="unknown event"):
        notify.emit("stack.exploded", world["prod"])
    with pytest.raises(TypeError, match="body=bytes is not a fact"):
        notify.emit("drift.found", world["prod"], body=b"{}")
    with pytest.raises(TypeError, match="error=str"):
        notify.emit("operation.failed", world["prod"], error="AccessDenied for secret x")
    assert not NotificationEvent.objects.exists()


def test_it_tells_subscribers_of_a_request_cancelled_before_it_ran(world):
    people = world["people"]
    Subscription.objects.create(user=people["vic"], account=world["prod"], events=["operation.failed"])
    op = unlock(world)
    work(world["notify"])
    mail.outbox.clear()

    cancel(people["olivia"], op)
    work(world["notify"])

    assert Operation.objects.get(pk=op.pk).status == "cancelled"
    assert sent() == [("vic@example.com", "[cdkd] Cancelled: force-unlock of Shop (us-east-1) on prod")]
    event = NotificationEvent.objects.get(kind="operation.failed")
    assert event.facts["result"] == "cancelled" and event.facts["operation"]["status"] == "cancelled"
    assert f"http://localhost:8000/operations/{op.pk}/" in mail.outbox[0].body


def test_it_tells_subscribers_of_an_operation_its_dead_worker_abandoned(world):
    people = world["people"]
    Subscription.objects.create(user=people["vic"], account=world["prod"], events=["operation.failed"])
    op = unlock(world)
    decide(people["arthur"], op, approve=True)
    work(world["notify"])
    mail.outbox.clear()
    # A worker claimed it and died: running, its last heartbeat long ago (nothing ran it here).
    long_ago = timezone.now() - timedelta(hours=1)
    Operation.objects.filter(pk=op.pk).update(status="running", started_at=long_ago, heartbeat_at=long_ago)

    assert reap_abandoned() == [op.pk]
    assert reap_abandoned() == []  # reaped once, told once
    work(world["notify"])

    assert sent() == [("vic@example.com", "[cdkd] Abandoned: force-unlock of Shop (us-east-1) on prod")]
    [event] = NotificationEvent.objects.filter(kind="operation.failed")
    assert event.facts["result"] == "abandoned" and event.facts["operation"]["status"] == "failed"


def test_it_audits_a_persons_change_of_their_email_subscriptions(world):
    vic = world["people"]["vic"]
    client = Client()
    client.force_login(vic)
    url = reverse("notification_settings")

    assert client.post(url, {f"a{A1}-events": ["lock.stale", "drift.found"]}).status_code == 302
    assert client.post(url, {f"a{A1}-events": ["drift.found", "lock.stale"]}).status_code == 302  # the same again
    assert client.post(url, {f"a{A1}-events": []}).status_code == 302

    rows = list(AuditEvent.objects.filter(action="subscription.changed").order_by("id"))
    assert [(r.actor, r.account_ref, r.result) for r in rows] == [("vic", A1, "ok"), ("vic", A1, "ok")]
    assert rows[0].details == {"person": "vic", "before": None, "after": ["drift.found", "lock.stale"]}
    assert rows[1].details == {"person": "vic", "before": ["drift.found", "lock.stale"], "after": []}
    assert rows[0].client_address == "127.0.0.1" and rows[0].actor_user_id == vic.pk
    assert Subscription.objects.get(user=vic).events == []

    refused = client.post(url, {f"a{A1}-events": ["approval.requested"]})  # vic approves nothing
    assert refused.status_code == 400
    assert AuditEvent.objects.filter(action="subscription.changed").count() == 2
