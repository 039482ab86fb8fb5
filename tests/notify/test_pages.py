"""The notification pages through Django's test client: an account's webhooks for its admins
only (403 for other roles, 404 for outsiders), every change audited, the generated secret
shown once, the delivery log and redeliver; a person's email subscriptions."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from stacks import notify
from stacks.models import (
    Account,
    AuditEvent,
    Membership,
    NotificationEvent,
    Role,
    Subscription,
    Webhook,
    WebhookDelivery,
)
from tests.notify.conftest import work

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1, A2 = "111111111111", "222222222222"
HOOK_URL = "https://hooks.example.com/services/T0/B0/very-secret-path"


@pytest.fixture
def world(django_user_model):
    prod = Account.objects.create(account_id=A1, name="prod")
    dev = Account.objects.create(account_id=A2, name="dev")
    people = {}
    for name, account, role in (
        ("adele", prod, Role.ADMIN),
        ("arthur", prod, Role.APPROVER),
        ("vic", prod, Role.VIEWER),
        ("otto", dev, Role.ADMIN),
    ):
        people[name] = django_user_model.objects.create_user(name, email=f"{name}@example.com")
        Membership.objects.create(user=people[name], account=account, role=role)
    hook = Webhook.objects.create(
        account=prod,
        name="chat",
        url=HOOK_URL,
        url_origin="https://hooks.example.com",
        secret="s" * 20,
        events=["lock.stale"],
    )
    return {"prod": prod, "dev": dev, "people": people, "hook": hook}


def as_(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def pages(hook, delivery_id: int = 0) -> list[tuple[str, str]]:
    a, w = hook.account.account_id, hook.pk
    out = [
        ("get", reverse("webhooks", args=[a])),
        ("get", reverse("webhook_new", args=[a])),
        ("get", reverse("webhook", args=[a, w])),
        ("get", reverse("webhook_edit", args=[a, w])),
        ("post", reverse("webhook_new", args=[a])),
        ("post", reverse("webhook_edit", args=[a, w])),
        ("post", reverse("webhook_delete", args=[a, w])),
    ]
    if delivery_id:
        out.append(("post", reverse("webhook_redeliver", args=[a, w, delivery_id])))
    return out


def delivery(hook) -> WebhookDelivery:
    event = NotificationEvent.objects.create(kind="lock.stale", account=hook.account, facts={"stack": "Shop"})
    return WebhookDelivery.objects.create(
        webhook=hook, event=event, payload_id=event.payload_id, job_id="j1", status_code=500, error="HTTP 500"
    )


def test_it_lets_only_the_accounts_admins_at_its_webhooks(world):
    hook = world["hook"]
    d = delivery(hook)
    form = {"name": "x", "url": "https://example.com/h", "events": ["lock.stale"], "format": "json"}
    for name, expected in (("arthur", 403), ("vic", 403), ("otto", 404)):
        client = as_(world["people"][name])
        for method, url in pages(hook, d.pk):
            response = getattr(client, method)(url, form) if method == "post" else client.get(url)
            assert response.status_code == expected, (name, method, url, response.status_code)
    assert Webhook.objects.count() == 1 and WebhookDelivery.objects.count() == 1
    assert not AuditEvent.objects.filter(action__startswith="webhook.").exists()
    anonymous = Client().get(reverse("webhooks", args=[A1]))
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]


def test_it_lists_a_webhook_without_its_url_path_or_secret(world):
    page = as_(world["people"]["adele"]).get(reverse("webhooks", args=[A1])).content.decode()
    assert "https://hooks.example.com/…" in page and "chat" in page
    assert "very-secret-path" not in page and "s" * 20 not in page
    edit = as_(world["people"]["adele"]).get(reverse("webhook_edit", args=[A1, world["hook"].pk])).content.decode()
    assert "very-secret-path" not in edit and "s" * 20 not in edit


def test_it_adds_a_webhook_shows_the_made_secret_once_and_audits(world):
    client = as_(world["people"]["adele"])
    form = {"name": "receiver", "url": "http://127.0.0.1:9/in", "events": ["secrets.found"], "format": "slack"}
    form["active"] = "on"
    response = client.post(reverse("webhook_new", args=[A1]), form)

    assert response.status_code == 201
    hook = Webhook.objects.get(name="receiver")
    assert hook.secret.startswith("whsec_") and hook.secret in response.content.decode()
    assert (hook.events, hook.format, hook.active, hook.created_by) == (
        ["secrets.found"],
        "slack",
        True,
        world["people"]["adele"],
    )
    again = client.get(reverse("webhook", args=[A1, hook.pk])).content.decode()
    assert hook.secret not in again
    audit = AuditEvent.objects.get(action="webhook.created")
    assert audit.actor == "adele" and audit.account_ref == A1
    assert audit.details == {
        "webhook": hook.pk,
        "name": "receiver",
        "url": "http://127.0.0.1:9",
        "events": ["secrets.found"],
        "format": "slack",
        "active": True,
    }


def test_it_refuses_a_bad_url_with_a_message_and_saves_nothing(world):
    client = as_(world["people"]["adele"])
    for url in ("file:///etc/passwd", "ftp://example.com/x", ""):
        form = {"name": "bad", "url": url, "events": ["lock.stale"], "format": "json"}
        response = client.post(reverse("webhook_new", args=[A1]), form)
        assert response.status_code == 400
        assert "http" in response.content.decode() or "required" in response.content.decode()
    assert not Webhook.objects.filter(name="bad").exists()
    assert not AuditEvent.objects.filter(action="webhook.created").exists()


def test_it_edits_and_deletes_a_webhook_with_audit(world):
    client = as_(world["people"]["adele"])
    hook = world["hook"]
    form = {"name": "chat2", "url": "", "secret": "", "events": ["lock.stale", "drift.found"], "format": "json"}
    assert client.post(reverse("webhook_edit", args=[A1, hook.pk]), form).status_code == 302
    hook.refresh_from_db()
    assert (hook.name, hook.url, hook.secret, hook.active) == ("chat2", HOOK_URL, "s" * 20, False)

    assert client.post(reverse("webhook_delete", args=[A1, hook.pk])).status_code == 302
    assert not Webhook.objects.exists()
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["webhook.changed", "webhook.deleted"]
    # Another account's admin cannot reach it through their own account's URL either.
    other = Webhook.objects.create(account=world["prod"], name="x", url=HOOK_URL, url_origin="h", secret="t" * 20)
    response = as_(world["people"]["otto"]).get(reverse("webhook", args=[A2, other.pk]))
    assert response.status_code == 404


def test_it_shows_the_delivery_log_and_redelivers(world, notify_queue):
    hook = world["hook"]
    d = delivery(hook)
    client = as_(world["people"]["adele"])
    page = client.get(reverse("webhook", args=[A1, hook.pk])).content.decode()
    assert d.payload_id in page and "HTTP 500" in page and "Redeliver" in page

    response = client.post(reverse("webhook_redeliver", args=[A1, hook.pk, d.pk]))

    assert response.status_code == 302
    [job] = notify_queue.jobs
    assert job.func_name == "stacks.webhooks.deliver" and job.args == (hook.pk, d.event_id, True, "adele")
    assert AuditEvent.objects.filter(action="webhook.redelivered", actor="adele").count() == 1
    hook.active = False
    hook.save()
    assert client.post(reverse("webhook_redeliver", args=[A1, hook.pk, d.pk])).status_code == 409
    work(notify_queue)  # the queued one now finds the webhook inactive: it sends nothing
    assert WebhookDelivery.objects.count() == 1


def test_it_saves_a_persons_email_subscriptions(world):
    vic = world["people"]["vic"]
    client = as_(vic)
    page = client.get(reverse("notification_settings")).content.decode()
    assert f'id="subscription-{A1}"' in page and f'id="subscription-{A2}"' not in page
    assert 'value="lock.stale"' in page and 'value="approval.requested"' not in page  # vic approves nothing

    response = client.post(reverse("notification_settings"), {f"a{A1}-events": ["lock.stale", "operation.failed"]})
    assert response.status_code == 302
    assert sorted(Subscription.objects.get(user=vic).events) == ["lock.stale", "operation.failed"]
    assert notify.subscribed_events(vic, world["prod"]) != list(notify.DEFAULT_EMAIL_EVENTS)

    refused = client.post(reverse("notification_settings"), {f"a{A1}-events": ["approval.requested"]})
    assert refused.status_code == 400
    assert sorted(Subscription.objects.get(user=vic).events) == ["lock.stale", "operation.failed"]


def test_it_offers_approval_requests_to_approvers(world):
    page = as_(world["people"]["arthur"]).get(reverse("notification_settings")).content.decode()
    assert 'value="approval.requested"' in page and "checked" in page
