"""Webhook delivery against a real HTTP receiver on loopback, with the notify queue on the
test Redis and RQ's SimpleWorker: the signature checked with the README's scheme, retries
with RQ's Retry and backoff, the delivery log, redeliver, the Slack variant, URL rules."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from rq.job import Job

from stacks import notify, webhooks
from stacks.models import Account, AuditEvent, Membership, NotificationEvent, Role, Webhook, WebhookDelivery
from tests.notify.conftest import verify, work

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SECRET = "whsec_test-secret-0123456789"


@pytest.fixture
def account():
    return Account.objects.create(account_id="111111111111", name="prod")


@pytest.fixture
def admin(django_user_model, account):
    user = django_user_model.objects.create_user("ada")
    Membership.objects.create(user=user, account=account, role=Role.ADMIN)
    return user


def hook(admin, account, url, **over) -> Webhook:
    data = {"name": "ops", "url": url, "secret": SECRET, "events": ["secrets.found", "lock.stale"], "format": "json"}
    data["active"] = True
    data.update(over)
    return webhooks.save_webhook(admin, account, data)


def emit(account, **facts) -> NotificationEvent:
    with transaction.atomic():
        return notify.emit("secrets.found", account, new_findings=2, findings=5, stacks=["App"], **facts)


def test_it_posts_a_signed_json_payload_that_the_documented_check_verifies(receiver, notify_queue, admin, account):
    hook(admin, account, receiver.url)
    event = emit(account)
    assert notify_queue.count == 1  # the fan-out, queued on commit with the event id only
    assert notify_queue.jobs[0].args == (event.pk,)

    work(notify_queue)

    [got] = receiver.requests
    assert got.path == "/hook" and got.headers["Content-Type"] == "application/json"
    assert verify(SECRET.encode(), got.headers["X-Cdkd-Signature"], got.body)
    assert not verify(b"another secret", got.headers["X-Cdkd-Signature"], got.body)
    assert not verify(SECRET.encode(), got.headers["X-Cdkd-Signature"], got.body + b" ")
    body = json.loads(got.body)
    assert body["id"] == event.payload_id == got.headers["X-Cdkd-Delivery"]
    assert body["type"] == "secrets.found" == got.headers["X-Cdkd-Event"]
    assert body["account"] == {"id": "111111111111", "name": "prod"}
    assert body["data"] == {"new_findings": 2, "findings": 5, "stacks": ["App"]}
    [row] = WebhookDelivery.objects.all()
    assert (row.attempt, row.status_code, row.succeeded, row.error, row.payload_id) == (
        1,
        200,
        True,
        "",
        event.payload_id,
    )
    # The log keeps no body: there is no column that could hold one.
    assert {f.name for f in WebhookDelivery._meta.fields} >= {"attempt", "status_code", "error", "duration_ms"}
    assert not {"body", "payload", "response"} & {f.name for f in WebhookDelivery._meta.fields}


def test_it_retries_until_a_receiver_that_fails_twice_answers(receiver, notify_queue, admin, account):
    receiver.fail_first = 2
    hook(admin, account, receiver.url)
    event = emit(account)

    work(notify_queue)

    assert len(receiver.requests) == 3
    assert [r.headers["X-Cdkd-Attempt"] for r in receiver.requests] == ["1", "2", "3"]
    assert {r.headers["X-Cdkd-Delivery"] for r in receiver.requests} == {event.payload_id}
    assert all(verify(SECRET.encode(), r.headers["X-Cdkd-Signature"], r.body) for r in receiver.requests)
    rows = list(WebhookDelivery.objects.order_by("id").values_list("attempt", "status_code", "succeeded", "error"))
    assert rows == [(1, 500, False, "HTTP 500"), (2, 500, False, "HTTP 500"), (3, 200, True, "")]
    assert len(set(WebhookDelivery.objects.values_list("job_id", flat=True))) == 1


def test_it_gives_up_after_its_retries_and_logs_every_attempt(settings, receiver, notify_queue, admin, account):
    settings.CDKD_WEBHOOK_RETRIES = 2
    receiver.fail_first = 99
    hook(admin, account, receiver.url)
    emit(account)

    work(notify_queue)

    assert len(receiver.requests) == 3
    assert list(WebhookDelivery.objects.order_by("id").values_list("attempt", "succeeded")) == [
        (1, False),
        (2, False),
        (3, False),
    ]
    job_id = WebhookDelivery.objects.first().job_id
    assert job_id in notify_queue.failed_job_registry.get_job_ids()


def test_it_backs_off_exponentially_between_attempts(settings, receiver, notify_queue, admin, account):
    settings.CDKD_WEBHOOK_BACKOFF_SECONDS = 10
    settings.CDKD_WEBHOOK_RETRIES = 3
    receiver.fail_first = 99
    hook(admin, account, receiver.url)
    emit(account)

    work(notify_queue)  # the first attempt fails; the retry waits in the scheduler

    assert len(receiver.requests) == 1
    job_id = WebhookDelivery.objects.get().job_id
    job = Job.fetch(job_id, connection=notify_queue.connection)
    assert job.retry_intervals == [10, 20, 40] and job.retries_left == 2
    assert job_id in notify_queue.scheduled_job_registry.get_job_ids()


def test_it_redelivers_a_logged_delivery_and_audits_it(django_user_model, receiver, notify_queue, admin, account):
    hook(admin, account, receiver.url)
    event = emit(account)
    work(notify_queue)
    first = WebhookDelivery.objects.get()
    approver = django_user_model.objects.create_user("arthur")
    Membership.objects.create(user=approver, account=account, role=Role.APPROVER)

    with pytest.raises(PermissionDenied):
        webhooks.redeliver(approver, first)
    webhooks.redeliver(admin, first)
    work(notify_queue)

    assert [json.loads(b)["id"] for b in receiver.bodies] == [event.payload_id, event.payload_id]
    again = WebhookDelivery.objects.exclude(pk=first.pk).get()
    assert (again.redelivery, again.requested_by, again.attempt, again.succeeded) == (True, "ada", 1, True)
    assert again.job_id != first.job_id
    audit = AuditEvent.objects.get(action="webhook.redelivered")
    assert audit.actor == "ada" and audit.details["payload"] == event.payload_id


def test_it_sends_slack_compatible_text(receiver, notify_queue, admin, account):
    hook(admin, account, receiver.url, format="slack", events=["drift.found"])
    with transaction.atomic():
        notify.emit("drift.found", account, stack="<Api&Co>", region="eu-west-1", drifted=3)
    work(notify_queue)

    [got] = receiver.requests
    body = json.loads(got.body)
    assert list(body) == ["text"]
    assert body["text"] == "Drift found: 3 resource(s) of &lt;Api&amp;Co&gt; (eu-west-1) on prod"
    assert verify(SECRET.encode(), got.headers["X-Cdkd-Signature"], got.body)


def test_it_sends_only_the_events_a_webhook_takes_and_nothing_when_inactive(receiver, notify_queue, admin, account):
    hook(admin, account, receiver.url, events=["lock.stale"])
    emit(account)
    work(notify_queue)
    assert receiver.requests == []

    Webhook.objects.update(events=["secrets.found"], active=False)
    emit(account)
    work(notify_queue)
    assert receiver.requests == [] and not WebhookDelivery.objects.exists()


def test_it_refuses_urls_that_are_not_http_or_https(admin, account):
    for url in ("ftp://example.com/x", "file:///etc/passwd", "javascript:alert(1)", "example.com/hook", "http://"):
        with pytest.raises(ValidationError):
            webhooks.check_url(url)
    with pytest.raises(ValidationError, match="user name or password"):
        webhooks.check_url("https://user:pw@example.com/hook")
    with pytest.raises(ValidationError):
        hook(admin, account, "gopher://127.0.0.1:6379/_FLUSHALL")
    assert not Webhook.objects.exists() and not AuditEvent.objects.filter(action="webhook.created").exists()
    assert webhooks.check_url(" https://hooks.example.com/T1/B2/xyz ") == "https://hooks.example.com/T1/B2/xyz"


def test_it_does_not_follow_a_redirect(receiver, notify_queue, settings, admin, account):
    settings.CDKD_WEBHOOK_RETRIES = 0
    receiver.status, receiver.location = 302, "http://169.254.169.254/latest/meta-data/"
    hook(admin, account, receiver.url)
    emit(account)
    work(notify_queue)

    assert len(receiver.requests) == 1
    row = WebhookDelivery.objects.get()
    assert (row.status_code, row.succeeded, row.error) == (302, False, "HTTP 302")


def test_it_records_an_unreachable_receiver_without_the_url(settings, notify_queue, admin, account):
    settings.CDKD_WEBHOOK_RETRIES = 0
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hook(admin, account, f"http://127.0.0.1:{port}/private/token-abc")
    emit(account)
    work(notify_queue)

    row = WebhookDelivery.objects.get()
    assert row.status_code is None and not row.succeeded and "refused" in row.error.lower()
    assert "token-abc" not in row.error


def test_it_keeps_the_url_and_secret_out_of_redis_audit_and_the_database_text(receiver, notify_queue, admin, account):
    receiver.url += "/T0/B0/chat-token-xyz"
    webhook = hook(admin, account, receiver.url)
    event = emit(account)
    notify.fan_out(event.pk)  # queues the delivery job without running it

    redis = notify_queue.connection
    dumped = b"".join(redis.dump(k) or b"" for k in redis.keys("*"))
    assert SECRET.encode() not in dumped and b"chat-token-xyz" not in dumped
    delivery_jobs = [j for j in notify_queue.jobs if j.func_name == "stacks.webhooks.deliver"]
    assert [j.args for j in delivery_jobs] == [(webhook.pk, event.pk, False, "")]
    created = AuditEvent.objects.get(action="webhook.created")
    assert created.details["url"] == receiver.url.split("/hook")[0]
    assert SECRET not in json.dumps(created.details) and "chat-token" not in json.dumps(created.details)
    with connection.cursor() as cursor:
        cursor.execute("SELECT url, secret FROM stacks_webhook")
        url_cell, secret_cell = (bytes(c) for c in cursor.fetchone())
    assert b"chat-token" not in url_cell and SECRET.encode() not in secret_cell


def test_it_changes_a_webhook_keeping_what_is_left_empty(receiver, admin, account):
    webhook = hook(admin, account, receiver.url)
    webhooks.save_webhook(
        admin,
        account,
        {"name": "renamed", "url": "", "secret": "", "events": ["lock.stale"], "active": False},
        webhook=webhook,
    )
    webhook = Webhook.objects.get()
    assert (webhook.name, webhook.url, webhook.secret, webhook.events, webhook.active) == (
        "renamed",
        receiver.url,
        SECRET,
        ["lock.stale"],
        False,
    )
    changed = AuditEvent.objects.get(action="webhook.changed")
    assert changed.details["url_changed"] is False and changed.details["secret_changed"] is False
