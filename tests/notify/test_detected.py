"""Events found by the background work: a lock stale past CDKD_LOCK_STALE_SECONDS (the sync
sees its age) and new secret findings (the scan pipeline), against moto with a real
receiver. The secret-finding payloads are checked for every planted secret value."""

from __future__ import annotations

import json

import pytest
from django.core import mail

from cdkd_site.queues import get_queue
from stacks import scans, webhooks
from stacks.models import Account, Membership, NotificationEvent, Role, Subscription, WebhookDelivery
from stacks.sync import sync_account
from tests.notify.conftest import verify, work
from tests.secrets.world import SECRET_VALUES, accounts, people, plant

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
RECORD = {"version": 11, "stackName": "Shop", "region": "us-east-1", "resources": {}, "outputs": {}}
SECRET = "whsec_detected-0123456789abcdef"


def add_hook(account, receiver, events, fmt="json"):
    admin = Membership.objects.filter(account=account, role=Role.ADMIN).first()
    if admin is None:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user(f"admin-{account.account_id}")
        admin = Membership.objects.create(user=user, account=account, role=Role.ADMIN)
    data = {"name": fmt, "url": receiver.url, "secret": SECRET, "events": events, "format": fmt, "active": True}
    return webhooks.save_webhook(admin.user, account, data)


def test_it_reports_a_stale_lock_once_per_lock(aws, settings, receiver, notify_queue):
    settings.CDKD_LOCK_STALE_SECONDS = 3600
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/state.json", RECORD)
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/lock.json", {"owner": "ci@runner:7", "timestamp": 1000, "expiresAt": 2000})
    aws.put(A1, BUCKET, "cdkd/Fresh/us-east-1/lock.json", {"owner": "me@laptop:1", "timestamp": 4102444800000})
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    add_hook(account, receiver, ["lock.stale"])

    sync_account(account)
    sync_account(account)  # seen again: the same lock is not news
    work(notify_queue)

    [event] = NotificationEvent.objects.filter(kind="lock.stale")
    assert event.facts["lock"]["stack"] == "Shop" and event.facts["lock"]["owner"] == "ci@runner:7"
    assert event.facts["lock"]["taken_at"] == "1970-01-01T00:00:01+00:00"
    [got] = receiver.requests
    assert verify(SECRET.encode(), got.headers["X-Cdkd-Signature"], got.body)
    assert json.loads(got.body)["text"].startswith("Stale lock: Shop (us-east-1) on prod held by ci@runner:7")

    # Someone takes the lock anew (a new ETag): that is a new stale lock when it ages.
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/lock.json", {"owner": "ci@runner:8", "timestamp": 5000})
    sync_account(account)
    assert NotificationEvent.objects.filter(kind="lock.stale").count() == 2


def test_it_reports_no_stale_lock_when_the_setting_is_off(aws, settings, notify_queue):
    settings.CDKD_LOCK_STALE_SECONDS = 0
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/lock.json", {"owner": "ci@runner:7", "timestamp": 1000})
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    sync_account(account)
    assert not NotificationEvent.objects.exists()


def test_it_reports_new_secret_findings_without_any_secret_value(aws, settings, receiver, notify_queue):
    settings.CDKD_LOCK_STALE_SECONDS = 0
    plant(aws)
    prod, dev = accounts()
    for account in (prod, dev):
        sync_account(account)
    folks = people(prod, dev)
    for user in folks.values():
        user.email = f"{user.username}@example.com"
        user.save()
        Subscription.objects.create(user=user, account=prod, events=["secrets.found"])
    add_hook(prod, receiver, ["secrets.found"], "json")
    add_hook(prod, receiver, ["secrets.found"], "slack")
    sync = get_queue("sync")

    run = scans.request_scan(folks["olivia"], prod)
    work(sync)
    work(notify_queue)

    run.refresh_from_db()
    assert run.finding_count > 0
    [event] = NotificationEvent.objects.filter(kind="secrets.found")
    assert event.facts["new_findings"] == run.finding_count and event.facts["stacks"] == ["App"]
    assert len(receiver.requests) == 2 and all(r.headers["X-Cdkd-Event"] == "secrets.found" for r in receiver.requests)
    json_body = next(json.loads(r.body) for r in receiver.requests if b'"data"' in r.body)
    assert json_body["data"]["scan"] == {"id": run.pk} and json_body["data"]["url"].endswith(
        f"/secrets/scans/{run.pk}/"
    )
    assert mail.outbox, "subscribers on prod get an email"
    everything = [r.body.decode() for r in receiver.requests]
    everything += [json.dumps(e.facts) for e in NotificationEvent.objects.all()]
    everything += [json.dumps(list(WebhookDelivery.objects.values()), default=str)]
    everything += [m.subject + m.body for m in mail.outbox]
    text = "\n".join(everything)
    for value in SECRET_VALUES:
        assert value not in text, f"a secret value reached a notification: {value[:4]}..."

    # The same findings again are not new: no second event.
    scans.request_scan(folks["olivia"], prod)
    work(sync)
    assert NotificationEvent.objects.filter(kind="secrets.found").count() == 1
