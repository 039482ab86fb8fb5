"""Notifications: `emit(event, account, **facts)` where things happen, then email and
webhooks from the worker.

`emit` is called by the code that does the thing (the operation pipeline, the scan, the
sync), never from a signal: it writes a NotificationEvent in the caller's transaction and
queues its fan-out job when that transaction commits (`transaction.on_commit`), so a
rolled-back request notifies nobody and the job always finds its row. The job's only
argument is the event's id.

The facts are a closed list of safe kinds (ids, names, kinds, results, counts, links; see
`clean_facts`): an Operation, a Lock or a ScanRun passed in is reduced to those, so no
payload or email can carry a secret value, an error text or a record body.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from stacks import audit
from stacks.access import has_role
from stacks.models import (
    Account,
    DriftCheck,
    EventKind,
    Lock,
    Membership,
    NotificationEvent,
    Operation,
    Role,
    ScanRun,
    Subscription,
)

logger = logging.getLogger(__name__)

QUEUE = "notify"
KINDS = frozenset(EventKind.values)

# Who may hear of each kind by email (a webhook hears of everything it subscribes to).
APPROVERS, REQUESTER, MEMBERS = "approvers", "requester", "members"
AUDIENCE = {
    EventKind.APPROVAL_REQUESTED: APPROVERS,
    EventKind.OPERATION_APPROVED: REQUESTER,
    EventKind.OPERATION_REJECTED: REQUESTER,
    EventKind.OPERATION_FINISHED: MEMBERS,
    EventKind.OPERATION_FAILED: MEMBERS,
    EventKind.DRIFT_FOUND: MEMBERS,
    EventKind.LOCK_STALE: MEMBERS,
    EventKind.SECRETS_FOUND: MEMBERS,
}
# A person with no Subscription row for an account hears of what waits for them.
DEFAULT_EMAIL_EVENTS = (
    EventKind.APPROVAL_REQUESTED,
    EventKind.OPERATION_APPROVED,
    EventKind.OPERATION_REJECTED,
)

MAX_TEXT = 1024
MAX_LIST = 50

# The facts an event may carry: name -> kind of value. Anything else is a programming error.
_SCALAR_FACTS = {
    "stack": str,
    "region": str,
    "decided_by": str,
    "result": str,
    "approvals": int,
    "approvals_needed": int,
    "new_findings": int,
    "findings": int,
    "drifted": int,
    "age_seconds": int,
}
_LIST_FACTS = {"stacks": str, "resources": str}


def absolute(path: str) -> str:
    return settings.CDKD_BASE_URL + path


def _operation_facts(op: Operation) -> dict[str, Any]:
    return {
        "operation": {
            "id": op.pk,
            "kind": op.kind,
            "status": op.status,
            "stack": op.stack_name[:MAX_TEXT],
            "region": op.region,
            "requester": op.requester_name,
            "via": op.via,
        },
        "url": absolute(reverse("operation", args=[op.pk])),
    }


def _lock_facts(lock: Lock, now_ms: int) -> dict[str, Any]:
    taken = lock_taken_ms(lock)
    return {
        "lock": {
            "stack": lock.stack_name[:MAX_TEXT],
            "region": lock.region,
            "owner": lock.owner[:MAX_TEXT],
            "operation": lock.operation,
            "readable": lock.readable,
            "taken_at": _iso_ms(taken),
            "age_seconds": max(0, (now_ms - taken) // 1000) if taken is not None else None,
        },
        "url": absolute(reverse("stacks") + f"?account={lock.account.account_id}"),
    }


def _scan_facts(run: ScanRun) -> dict[str, Any]:
    return {"scan": {"id": run.pk}, "url": absolute(reverse("scan_status", args=[run.pk]))}


def _drift_facts(check: DriftCheck) -> dict[str, Any]:
    # A drift check is only ever of a region-scoped record, so the region is the URL's slug.
    stack_url = reverse("stack", args=[check.account.account_id, check.region, check.stack_name])
    when = check.checked_at.isoformat(timespec="seconds")
    return {"drift": {"id": check.pk, "checked_at": when}, "url": absolute(stack_url)}


def clean_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """The JSON facts of an event. Raises TypeError for a fact this module does not know:
    a new fact is added here, on purpose, never passed through."""
    out: dict[str, Any] = {}
    now_ms = int(timezone.now().timestamp() * 1000)
    for name, value in facts.items():
        if value is None:
            continue
        if name == "operation" and isinstance(value, Operation):
            out.update(_operation_facts(value))
        elif name == "lock" and isinstance(value, Lock):
            out.update(_lock_facts(value, now_ms))
        elif name == "scan" and isinstance(value, ScanRun):
            out.update(_scan_facts(value))
        elif name == "drift" and isinstance(value, DriftCheck):
            out.update(_drift_facts(value))
        elif name in _SCALAR_FACTS and isinstance(value, _SCALAR_FACTS[name]) and not isinstance(value, bool):
            out[name] = value[:MAX_TEXT] if isinstance(value, str) else value
        elif name in _LIST_FACTS and isinstance(value, list | tuple):
            out[name] = [str(v)[:MAX_TEXT] for v in list(value)[:MAX_LIST]]
            if len(value) > MAX_LIST:
                out[name + "_more"] = len(value) - MAX_LIST
        else:
            raise TypeError(f"notify.emit: {name}={type(value).__name__} is not a fact an event may carry")
    return out


def emit(event: str, account: Account, *, dedupe: str | None = None, **facts: Any) -> NotificationEvent | None:
    """Record that `event` happened on `account` and fan it out once the caller's
    transaction commits. `dedupe`: a key that makes the event happen once (None when it
    already did). Never raises for a channel's trouble: that is the job's."""
    if event not in KINDS:
        raise ValueError(f"notify.emit: unknown event {event!r} (one of {', '.join(sorted(KINDS))})")
    cleaned = clean_facts(facts)
    try:
        with transaction.atomic():  # a savepoint: a duplicate leaves the caller's transaction usable
            notice = NotificationEvent.objects.create(kind=event, account=account, facts=cleaned, dedupe_key=dedupe)
    except IntegrityError:
        if dedupe and NotificationEvent.objects.filter(dedupe_key=dedupe).exists():
            return None
        raise
    transaction.on_commit(lambda: _enqueue_fan_out(notice.pk))
    return notice


def _enqueue_fan_out(event_id: int) -> None:
    from cdkd_site.queues import get_queue

    try:
        get_queue(QUEUE).enqueue("stacks.notify.fan_out", event_id, job_id=f"notify-{event_id}")
    except Exception:  # Redis is down: the thing itself happened; the notice is lost, say so
        logger.exception("notification %s could not be queued", event_id)


# --- the worker's side ---------------------------------------------------------------------


def fan_out(event_id: int) -> dict[str, int]:
    """The RQ job: email the people who should hear of the event, and queue one delivery
    job per active webhook of the account that subscribes to its kind."""
    from stacks import webhooks

    notice = NotificationEvent.objects.select_related("account").filter(pk=event_id).first()
    if notice is None:
        return {"emails": 0, "webhooks": 0}
    sent = send_emails(notice)
    hooks = webhooks.queue_deliveries(notice)
    return {"emails": sent, "webhooks": hooks}


def subscribed_events(user, account: Account) -> list[str]:
    row = Subscription.objects.filter(user=user, account=account).only("events").first()
    return list(row.events) if row is not None else list(DEFAULT_EMAIL_EVENTS)


def save_subscriptions(user, chosen: list[tuple[Account, list[str]]], *, client_address: str | None = None) -> int:
    """Store a person's email choices per account, in one transaction; each account whose
    choice changed gets a `subscription.changed` audit entry (before and after). Returns how
    many changed."""
    changed = 0
    with transaction.atomic():
        for account, events in chosen:
            after = [k for k in EventKind.values if k in set(events)]
            row = Subscription.objects.select_for_update().filter(user=user, account=account).first()
            before = list(row.events) if row is not None else None
            if before is not None and sorted(before) == sorted(after):
                continue
            Subscription.objects.update_or_create(user=user, account=account, defaults={"events": after})
            audit.record(
                "subscription.changed",
                actor=user.get_username(),
                actor_user=user,
                account=account,
                result="ok",
                client_address=client_address,
                # None: the person had the defaults until now.
                details={"person": user.get_username(), "before": before, "after": after},
            )
            changed += 1
    return changed


def recipients(notice: NotificationEvent) -> list:
    """The people to email, re-checked now: in the event's audience on its account (roles as
    they are at send time), subscribed to its kind there, and with an address."""
    from django.contrib.auth import get_user_model

    account = notice.account
    audience = AUDIENCE[notice.kind]
    User = get_user_model()
    requester_id = None
    op_id = (notice.facts.get("operation") or {}).get("id")
    if op_id is not None:
        requester_id = Operation.objects.filter(pk=op_id).values_list("requested_by_id", flat=True).first()
    if audience == REQUESTER:
        candidates = User.objects.filter(pk=requester_id) if requester_id else User.objects.none()
    else:
        # Members of the account, and superusers who subscribed to it explicitly.
        ids = set(Membership.objects.filter(account=account).values_list("user_id", flat=True))
        ids |= set(Subscription.objects.filter(account=account).values_list("user_id", flat=True))
        candidates = User.objects.filter(pk__in=ids)
    minimum = Role.APPROVER if audience == APPROVERS else Role.VIEWER
    out = []
    for user in candidates.filter(is_active=True).exclude(email="").order_by("pk"):
        if audience == APPROVERS and user.pk == requester_id:
            continue  # nobody approves their own request
        if not has_role(user, account, minimum):
            continue
        if notice.kind not in subscribed_events(user, account):
            continue
        out.append(user)
    return out


def describe(notice: NotificationEvent) -> str:
    """One line saying what happened (the email's subject, the Slack text's first line)."""
    f = notice.facts
    op = f.get("operation") or {}
    where = f"{op.get('stack', f.get('stack', ''))} ({op.get('region') or f.get('region') or 'legacy'})"
    account = notice.account.label
    kind = op.get("kind", "")
    match notice.kind:
        case EventKind.APPROVAL_REQUESTED:
            return f"Approval requested: {kind} of {where} on {account} by {op.get('requester', '')}"
        case EventKind.OPERATION_APPROVED:
            return f"Approved: {kind} of {where} on {account}"
        case EventKind.OPERATION_REJECTED:
            return f"Rejected by {f.get('decided_by', '')}: {kind} of {where} on {account}"
        case EventKind.OPERATION_FINISHED:
            return f"Finished: {kind} of {where} on {account}"
        case EventKind.OPERATION_FAILED:
            return f"{str(f.get('result', 'failed')).capitalize()}: {kind} of {where} on {account}"
        case EventKind.DRIFT_FOUND:
            return f"Drift found: {f.get('drifted', 0)} resource(s) of {where} on {account}"
        case EventKind.LOCK_STALE:
            lock = f.get("lock") or {}
            age = lock.get("age_seconds")
            held = f" for {age // 60} minutes" if isinstance(age, int) else ""
            return (
                f"Stale lock: {lock.get('stack', '')} ({lock.get('region') or 'legacy'}) on {account} "
                f"held by {lock.get('owner') or 'unknown'}{held}"
            )
        case EventKind.SECRETS_FOUND:
            return f"{f.get('new_findings', 0)} new secret finding(s) on {account}"
    return f"{notice.kind} on {account}"


def _email(notice: NotificationEvent, user) -> EmailMessage:
    summary = describe(notice)
    lines = [summary, ""]
    for name in ("stacks", "resources"):
        if notice.facts.get(name):
            lines.append(f"{name.capitalize()}: {', '.join(notice.facts[name])}")
    if notice.facts.get("url"):
        lines += ["Open it: " + notice.facts["url"], ""]
    lines += [
        f"Account {notice.account.label} ({notice.account.account_id}); event {notice.payload_id}.",
        "You get this because of your notification settings: " + absolute(reverse("notification_settings")),
    ]
    return EmailMessage(subject=f"[cdkd] {summary}"[:200], body="\n".join(lines), to=[user.email])


def send_emails(notice: NotificationEvent) -> int:
    people = recipients(notice)
    if not people:
        return 0
    messages = [_email(notice, user) for user in people]
    try:
        with get_connection() as connection:
            return connection.send_messages(messages) or 0
    except Exception:  # the mail server's trouble; webhooks still go out
        logger.exception("emails of notification %s could not be sent", notice.payload_id)
        return 0


# --- where a sync finds stale locks ---------------------------------------------------------


def lock_taken_ms(lock: Lock) -> int | None:
    if lock.timestamp_ms is not None:
        return lock.timestamp_ms
    return int(lock.s3_last_modified.timestamp() * 1000) if lock.s3_last_modified else None


def _iso_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return None


def stale_locks(account: Account, now=None) -> int:
    """Emit lock.stale once per lock (key and ETag) older than CDKD_LOCK_STALE_SECONDS. Called
    by the sync after it mirrored the locks; never raises (the sync's result stands)."""
    limit = settings.CDKD_LOCK_STALE_SECONDS
    if limit <= 0:
        return 0
    try:
        now = now or timezone.now()
        cutoff = now - timedelta(seconds=limit)
        old = []
        for lock in Lock.objects.filter(account=account).select_related("account").defer("body"):
            taken = lock_taken_ms(lock)
            if taken is not None and taken <= int(cutoff.timestamp() * 1000):
                # Hashed: a key may be long; the ETag makes a new lock on the same key a new event.
                ident = hashlib.sha256(f"{account.pk}|{lock.key}|{lock.etag}".encode()).hexdigest()[:40]
                old.append((f"lock.stale:{ident}", lock))
        told = set(
            NotificationEvent.objects.filter(dedupe_key__in=[key for key, _ in old]).values_list(
                "dedupe_key", flat=True
            )
        )
        count = 0
        for key, lock in old:
            if key not in told and emit(EventKind.LOCK_STALE, account, dedupe=key, lock=lock) is not None:
                count += 1
        return count
    except Exception:
        logger.exception("stale-lock notifications of account %s failed", account.account_id)
        return 0
