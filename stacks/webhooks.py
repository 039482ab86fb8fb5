"""Webhook delivery: the payload (JSON or Slack-compatible text), its signature, the POST
from the worker with RQ's retries and exponential backoff, the delivery log, redeliver.

The signature (README, "Notifications"): header `X-Cdkd-Signature: t=<unix seconds>,
v1=<hex>`, where hex = HMAC-SHA256(secret, f"{t}." + body bytes). Receivers recompute it
over the raw body and refuse an old `t`. Every attempt signs afresh (a new `t`); the
payload id (`X-Cdkd-Delivery`, the body's `id`) stays the same, so a receiver can drop
duplicates.

Webhook URLs are called from the worker, so they reach whatever the worker's network
reaches; only http and https are accepted and redirects are never followed. A job's
arguments are ids only: neither the URL nor the secret ever goes to Redis.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import secrets as secrets_module
import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from stacks import audit
from stacks.access import has_role
from stacks.models import EventKind, NotificationEvent, Role, Webhook, WebhookDelivery, WebhookFormat
from stacks.notify import QUEUE, describe

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Cdkd-Signature"
MAX_URL = 2048
USER_AGENT = "cdkd-admin-webhooks/1"
EVENT_VALUES = frozenset(EventKind.values)


class DeliveryFailed(Exception):
    """An attempt that did not get a 2xx; raised so RQ retries the job."""


# --- configuration -------------------------------------------------------------------------


def check_url(url: str) -> str:
    """The URL, stripped, or ValidationError naming what is wrong with it."""
    url = (url or "").strip()
    if not url:
        raise ValidationError("The webhook URL is empty.")
    if len(url) > MAX_URL:
        raise ValidationError(f"The webhook URL is {len(url)} characters long; at most {MAX_URL} are accepted.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValidationError(f"The webhook URL cannot be read: {exc}.") from None
    if parts.scheme not in ("http", "https"):
        shown = parts.scheme or "no scheme"
        raise ValidationError(f"The webhook URL must start with http:// or https:// (it has {shown}).")
    if not parts.hostname:
        raise ValidationError("The webhook URL names no host.")
    if parts.username or parts.password:
        raise ValidationError("The webhook URL must not hold a user name or password; use the signing secret.")
    del port
    return url


def origin(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def new_secret() -> str:
    return "whsec_" + secrets_module.token_urlsafe(32)


def retry_intervals() -> list[int]:
    """Seconds before each retry: the backoff doubling from CDKD_WEBHOOK_BACKOFF_SECONDS."""
    base = settings.CDKD_WEBHOOK_BACKOFF_SECONDS
    return [base * 2**n for n in range(settings.CDKD_WEBHOOK_RETRIES)]


# --- the payload ----------------------------------------------------------------------------


def payload(notice: NotificationEvent) -> dict:
    """The JSON document a `json` webhook receives: ids, names, kinds, results, links."""
    return {
        "id": notice.payload_id,
        "type": notice.kind,
        "created": notice.created_at.isoformat(timespec="seconds"),
        "account": {"id": notice.account.account_id, "name": notice.account.name},
        "text": describe(notice),
        "data": notice.facts,
    }


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn reads &, < and > as control characters.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(notice: NotificationEvent) -> dict:
    """What a Slack (or Mattermost, Teams-compatible) incoming webhook takes: `text`."""
    text = _slack_escape(describe(notice))
    url = notice.facts.get("url")
    if url:
        text += f" <{_slack_escape(url)}|open>"
    return {"text": text}


def body_for(webhook: Webhook, notice: NotificationEvent) -> bytes:
    document = slack_payload(notice) if webhook.format == WebhookFormat.SLACK else payload(notice)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The X-Cdkd-Signature value."""
    digest = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp}, v1={digest}"


def verify_signature(secret: str, header: str, body: bytes, *, tolerance: int = 300, now: float | None = None) -> bool:
    """The receiver's check, as the README documents it (for a receiver written in Python)."""
    try:
        parts = dict(item.strip().split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    expected = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    fresh = abs((now if now is not None else time.time()) - timestamp) <= tolerance
    return fresh and hmac.compare_digest(expected, parts.get("v1", ""))


# --- sending --------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # a 3xx is the answer: following it could leave http(s) or the host


_opener = urllib.request.build_opener(_NoRedirect)


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
    """POST once. (status code or None, error text or ""). The response body is read (at
    most 64 KiB) and dropped: it is not ours to keep. Error texts never hold the URL."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with _opener.open(request, timeout=settings.CDKD_WEBHOOK_TIMEOUT_SECONDS) as response:
            response.read(65536)
            return response.status, ""
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code, f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
        return None, f"{type(reason).__name__}: {text}"[:300]
    except TimeoutError:
        return None, "timed out"
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc.strerror or 'the connection failed'}"[:300]
    except (http.client.HTTPException, ValueError) as exc:
        return None, f"{type(exc).__name__}: the answer was not HTTP"


def deliver(webhook_id: int, event_id: int, redelivery: bool = False, requested_by: str = "") -> int | None:
    """The RQ job: one attempt of one event to one webhook, logged. Raises DeliveryFailed on
    anything but a 2xx, so RQ retries it (the Retry the job was queued with)."""
    from rq import get_current_job

    webhook = Webhook.objects.filter(pk=webhook_id).first()
    notice = NotificationEvent.objects.select_related("account").filter(pk=event_id).first()
    if webhook is None or notice is None or notice.account_id != webhook.account_id:
        return None  # deleted since it was queued
    if not webhook.active:
        return None
    job = get_current_job()
    job_id = job.id if job else f"inline-{uuid.uuid4().hex[:12]}"
    attempt = WebhookDelivery.objects.filter(webhook=webhook, job_id=job_id).count() + 1
    body = body_for(webhook, notice)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Cdkd-Event": notice.kind,
        "X-Cdkd-Delivery": notice.payload_id,
        "X-Cdkd-Attempt": str(attempt),
        SIGNATURE_HEADER: sign(webhook.secret, body, int(time.time())),
    }
    started = time.monotonic()
    status, error = post(webhook.url, body, headers)
    duration = int((time.monotonic() - started) * 1000)
    ok = status is not None and 200 <= status < 300
    WebhookDelivery.objects.create(
        webhook=webhook,
        event=notice,
        payload_id=notice.payload_id,
        job_id=job_id,
        attempt=attempt,
        status_code=status,
        succeeded=ok,
        error="" if ok else (error or f"HTTP {status}"),
        duration_ms=duration,
        redelivery=redelivery,
        requested_by=requested_by[:255],
    )
    if not ok:
        raise DeliveryFailed(f"webhook {webhook.pk}, {notice.payload_id}, attempt {attempt}: {error or status}")
    return status


def _enqueue(webhook: Webhook, notice: NotificationEvent, *, redelivery: bool = False, requested_by: str = "") -> str:
    from rq import Retry

    from cdkd_site.queues import get_queue

    job_id = f"webhook-{webhook.pk}-{notice.pk}-{uuid.uuid4().hex[:8]}"
    intervals = retry_intervals()
    retry = Retry(max=len(intervals), interval=intervals) if intervals else None
    get_queue(QUEUE).enqueue(
        "stacks.webhooks.deliver",
        webhook.pk,
        notice.pk,
        redelivery,
        requested_by,
        job_id=job_id,
        retry=retry,
    )
    return job_id


def queue_deliveries(notice: NotificationEvent) -> int:
    """One delivery job per active webhook of the event's account that takes its kind."""
    count = 0
    for webhook in Webhook.objects.filter(account_id=notice.account_id, active=True).order_by("pk"):
        if notice.kind in (webhook.events or []):
            _enqueue(webhook, notice)
            count += 1
    return count


def redeliver(user, delivery: WebhookDelivery, *, client_address: str | None = None) -> None:
    """Send a logged delivery's event again (a new job with its own retries), audited.
    Account admins only; an inactive webhook is activated first."""
    webhook = delivery.webhook
    if not has_role(user, webhook.account, Role.ADMIN):
        raise PermissionDenied(f"Only an admin of {webhook.account} can redeliver its webhooks' events")
    if not webhook.active:
        raise ValidationError(f"Webhook {webhook.name} is inactive: activate it before redelivering.")
    with transaction.atomic():
        audit.record(
            "webhook.redelivered",
            actor=user.get_username(),
            actor_user=user,
            account=webhook.account,
            result="queued",
            client_address=client_address,
            details={"webhook": webhook.pk, "name": webhook.name, "payload": delivery.payload_id},
        )
        notice, name = delivery.event, user.get_username()
        transaction.on_commit(lambda: _enqueue(webhook, notice, redelivery=True, requested_by=name))


# --- configuration changes (account admins, audited) ----------------------------------------


def _require_admin(user, account) -> None:
    if not has_role(user, account, Role.ADMIN):
        raise PermissionDenied(f"Only an admin of {account} can change its webhooks")


def _summary(webhook: Webhook) -> dict:
    # Never the URL's path or query (a chat URL is a credential) and never the secret.
    return {
        "webhook": webhook.pk,
        "name": webhook.name,
        "url": webhook.url_origin,
        "events": list(webhook.events),
        "format": webhook.format,
        "active": webhook.active,
    }


def save_webhook(user, account, data: dict, *, webhook: Webhook | None = None, client_address=None) -> Webhook:
    """Create (webhook None) or change a webhook from a form's cleaned data: name, url (empty
    on a change: keep), secret (empty: generate on create, keep on change), events, format,
    active. Audited as webhook.created / webhook.changed."""
    _require_admin(user, account)
    creating = webhook is None
    webhook = webhook or Webhook(account=account, created_by=user)
    if webhook.account_id != account.pk:
        raise PermissionDenied("That webhook belongs to another account")
    url = (data.get("url") or "").strip()
    if url or creating:
        webhook.url = check_url(url)
        webhook.url_origin = origin(webhook.url)
    if data.get("secret") or creating:
        webhook.secret = data.get("secret") or new_secret()
    webhook.name = data["name"]
    webhook.events = [k for k in data.get("events") or [] if k in EVENT_VALUES]
    webhook.format = data.get("format") or WebhookFormat.JSON
    webhook.active = bool(data.get("active"))
    with transaction.atomic():
        webhook.save()
        details = _summary(webhook)
        if not creating:
            details["url_changed"] = bool(url)
            details["secret_changed"] = bool(data.get("secret"))
        audit.record(
            "webhook.created" if creating else "webhook.changed",
            actor=user.get_username(),
            actor_user=user,
            account=account,
            result="ok",
            client_address=client_address,
            details=details,
        )
    return webhook


def delete_webhook(user, webhook: Webhook, *, client_address=None) -> None:
    _require_admin(user, webhook.account)
    with transaction.atomic():
        audit.record(
            "webhook.deleted",
            actor=user.get_username(),
            actor_user=user,
            account=webhook.account,
            result="ok",
            client_address=client_address,
            details=_summary(webhook),
        )
        webhook.delete()
