"""Events found by the background work: a lock stale past CDKD_LOCK_STALE_SECONDS (the sync
sees its age), new secret findings (the scan pipeline) and drift (a real drift check of a
stack the engine deployed to moto, changed out of band), against moto with a real
receiver. The secret-finding payloads are checked for every planted secret value."""

from __future__ import annotations

import json

import pytest
from django.core import mail

from cdkd_site.queues import get_queue
from engine.backend import StateBucket
from engine.deploy.run import Deployer, RetryPolicy
from engine.keys import KeyLayout
from engine.operations import Context
from stacks import scans, webhooks
from stacks.drift import run_check
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


DRIFT_TEMPLATE = {
    "Resources": {
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 45}},
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {"DisplayName": "drift"}},
    }
}


@pytest.fixture
def drifting(aws, settings, django_user_model):
    """DriftStack deployed by the engine into moto (a queue and a topic), the account synced,
    a member who subscribed to drift.found by email."""
    settings.CDKD_LOCK_STALE_SECONDS = 0
    settings.CDKD_BASE_URL = "https://cdkd.example.com"
    aws.make_bucket(A1, BUCKET)
    bucket = StateBucket.open(aws.access(A1), actor="alice", bucket=BUCKET, region="us-east-1")
    ctx = Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack="DriftStack",
        region="us-east-1",
        params={},
        operation_id="op-1",
        person="alice",
    )
    result = Deployer(retry=RetryPolicy(scale=0.0)).deploy(ctx, json.loads(json.dumps(DRIFT_TEMPLATE)), account=A1)
    assert result.result == "succeeded"
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    sync_account(account)
    vic = django_user_model.objects.create_user("vic", email="vic@example.com")
    Membership.objects.create(user=vic, account=account, role=Role.VIEWER)
    Subscription.objects.create(user=vic, account=account, events=["drift.found"])
    record = json.loads(aws.get(A1, BUCKET, "cdkd/DriftStack/us-east-1/state.json"))
    session = aws.account_session(A1)
    aws.sqs = session.client("sqs", region_name="us-east-1", endpoint_url=aws.moto.url)
    aws.queue_url = record["resources"]["Queue"]["physicalId"]
    return account


def check(account):
    stored, _report = run_check(account, "DriftStack", "us-east-1", actor="drift-schedule", trigger="schedule")
    return stored


def leaves(value):
    """Every key and scalar of a JSON body as text, except the random event id."""
    if isinstance(value, dict):
        return [k for k in value] + [leaf for k, v in value.items() if k != "id" for leaf in leaves(v)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in leaves(item)]
    return [str(value)]


def visibility(aws, seconds: int) -> None:
    aws.sqs.set_queue_attributes(QueueUrl=aws.queue_url, Attributes={"VisibilityTimeout": str(seconds)})


def test_it_reports_drift_once_with_a_link_and_again_after_it_was_put_right(aws, drifting, receiver, notify_queue):
    add_hook(drifting, receiver, ["drift.found"])
    assert check(drifting).drifted == 0
    assert not NotificationEvent.objects.exists()  # in sync is no news

    visibility(aws, 99)
    first = check(drifting)
    again = check(drifting)  # the scheduled check finds the same drift: not news
    work(notify_queue)

    assert first.drifted == again.drifted == 1
    [event] = NotificationEvent.objects.filter(kind="drift.found")
    assert event.facts == {
        "stack": "DriftStack",
        "region": "us-east-1",
        "drifted": 1,
        "resources": ["Queue"],
        "drift": {"id": first.pk, "checked_at": first.checked_at.isoformat(timespec="seconds")},
        "url": f"https://cdkd.example.com/stacks/{A1}/us-east-1/DriftStack/",
    }
    [got] = receiver.requests
    assert got.headers["X-Cdkd-Event"] == "drift.found"
    assert verify(SECRET.encode(), got.headers["X-Cdkd-Signature"], got.body)
    body = json.loads(got.body)
    assert body["text"] == "Drift found: 1 resource(s) of DriftStack (us-east-1) on prod"
    assert body["data"]["url"] == "https://cdkd.example.com/stacks/111111111111/us-east-1/DriftStack/"
    # No live values or paths; the event id is random hex and may hold "99" by chance.
    assert not [leaf for leaf in leaves(body) if "99" in leaf or "VisibilityTimeout" in leaf]
    [email] = mail.outbox
    assert email.to == ["vic@example.com"] and email.subject == "[cdkd] " + body["text"]
    assert "Open it: https://cdkd.example.com/stacks/111111111111/us-east-1/DriftStack/" in email.body

    # Put right, then the same drift again: news again.
    visibility(aws, 45)
    assert check(drifting).drifted == 0
    visibility(aws, 99)
    check(drifting)
    assert NotificationEvent.objects.filter(kind="drift.found").count() == 2


def test_it_reports_a_changed_drift_as_new_drift(aws, drifting, notify_queue):
    visibility(aws, 99)
    check(drifting)
    visibility(aws, 120)  # the same path with another live value: the same drift
    check(drifting)
    assert NotificationEvent.objects.filter(kind="drift.found").count() == 1

    aws.account_session(A1).client("sns", region_name="us-east-1", endpoint_url=aws.moto.url).delete_topic(
        TopicArn=json.loads(aws.get(A1, BUCKET, "cdkd/DriftStack/us-east-1/state.json"))["resources"]["Topic"][
            "physicalId"
        ]
    )
    grown = check(drifting)

    assert grown.drifted == 2
    events = list(NotificationEvent.objects.filter(kind="drift.found").order_by("id"))
    assert [e.facts["resources"] for e in events] == [["Queue"], ["Queue", "Topic"]]
    assert events[1].facts["drifted"] == 2
