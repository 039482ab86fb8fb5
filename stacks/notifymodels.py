"""Notifications: what happened (NotificationEvent), who hears of it by email (Subscription)
and which endpoints are called (Webhook), with each delivery attempt (WebhookDelivery).

Imported by `stacks.models`, so they are the `stacks` app's models. An event holds only
safe facts (ids, names, kinds, results, links: `stacks.notify.clean_facts`), never a secret
value or a record body; a delivery row never holds the payload it sent.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from stacks.crypto import EncryptedTextField


class EventKind(models.TextChoices):
    APPROVAL_REQUESTED = "approval.requested", "Approval requested"
    OPERATION_APPROVED = "operation.approved", "Operation approved"
    OPERATION_REJECTED = "operation.rejected", "Operation rejected"
    OPERATION_FINISHED = "operation.finished", "Operation finished"
    OPERATION_FAILED = "operation.failed", "Operation failed"
    DRIFT_FOUND = "drift.found", "Drift found"
    LOCK_STALE = "lock.stale", "Stale lock"
    SECRETS_FOUND = "secrets.found", "New secret findings"


class NotificationEvent(models.Model):
    """One thing that happened on an account, as every channel tells it. `uid` is the payload
    id a receiver sees (the same on a redelivery); `dedupe_key` makes an event that a
    periodic check finds again (a stale lock at every sync) happen once."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    kind = models.CharField(max_length=32, choices=EventKind.choices)
    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="notification_events")
    facts = models.JSONField(default=dict, blank=True)
    dedupe_key = models.CharField(max_length=255, null=True, blank=True, unique=True)  # noqa: DJ001 (None = no dedupe)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["account", "-created_at"], name="notice_account_time")]

    def __str__(self) -> str:
        return f"{self.kind} on {self.account_id} ({self.uid})"

    @property
    def payload_id(self) -> str:
        return f"evt_{self.uid.hex}"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (signed)"
    SLACK = "slack", "Slack-compatible text"


class Webhook(models.Model):
    """An endpoint that the worker POSTs an account's events to. The URL is encrypted at rest
    and shown shortened (a Slack or chat URL is itself a credential); the signing secret is
    encrypted and never shown after it is made."""

    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100)
    url = EncryptedTextField(help_text="http(s) URL, encrypted at rest")
    url_origin = models.CharField(max_length=300, help_text="scheme://host[:port] of the URL, for pages and audit")
    secret = EncryptedTextField(help_text="HMAC-SHA256 signing secret, encrypted at rest")
    events = models.JSONField(default=list, blank=True)
    format = models.CharField(max_length=8, choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["account", "name", "id"]

    def __str__(self) -> str:
        return f"webhook {self.name} of {self.account_id} ({self.url_origin})"

    @property
    def url_display(self) -> str:
        return f"{self.url_origin}/…"


class WebhookDelivery(models.Model):
    """One attempt to POST one event to one webhook. Never the body: the event's id says
    which payload it was, rebuilt from the event on a redelivery."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(NotificationEvent, on_delete=models.CASCADE, related_name="deliveries")
    payload_id = models.CharField(max_length=40)
    job_id = models.CharField(max_length=128, help_text="The RQ job; its attempts share it")
    attempt = models.PositiveSmallIntegerField(default=1)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    succeeded = models.BooleanField(default=False)
    error = models.CharField(max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    redelivery = models.BooleanField(default=False)
    requested_by = models.CharField(max_length=255, blank=True, help_text="Who asked for the redelivery")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["webhook", "-created_at"], name="delivery_webhook_time")]

    def __str__(self) -> str:
        return f"delivery {self.payload_id} #{self.attempt} -> {self.status_code or self.error}"


class Subscription(models.Model):
    """Which events of an account a person hears of by email. Without a row the person gets
    `stacks.notify.DEFAULT_EMAIL_EVENTS`; each event still goes only to its audience (an
    approval request to the account's approvers, a decision to the requester)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="subscriptions")
    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="subscriptions")
    events = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "account"], name="one_subscription_per_account")]

    def __str__(self) -> str:
        return f"{self.user} on {self.account_id}: {', '.join(self.events) or 'nothing'}"
