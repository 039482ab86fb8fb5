"""The audit log: append an event (hash-chained per account), verify a chain."""

from __future__ import annotations

import getpass
import hashlib
from dataclasses import dataclass

from django.db import transaction

from stacks.models import Account, AuditEvent, Operation


def cli_actor() -> str:
    """The actor name for a management command: the OS user at the server's shell."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # containers without a passwd entry
        return "cli:unknown"


def record(
    action: str,
    *,
    actor: str,
    actor_user=None,
    account: Account | None = None,
    operation: Operation | None = None,
    operation_kind: str = "",
    stack_name: str = "",
    region: str | None = "",
    plan_digest: str = "",
    etag_before: str | None = "",
    etag_after: str | None = "",
    result: str = "",
    error: str = "",
    client_address: str | None = None,
    details: dict | None = None,
) -> AuditEvent:
    """Append one event. The account row is locked while the chain head is read and the
    event written, so two writers never chain onto the same predecessor."""
    if operation is not None:
        account = account or operation.account
        stack_name = stack_name or operation.stack_name
        region = region or operation.region or ""
        plan_digest = plan_digest or operation.plan_digest
        operation_kind = operation_kind or operation.kind
    with transaction.atomic():
        account_ref = ""
        if account is not None:
            Account.objects.select_for_update().filter(pk=account.pk).first()
            account_ref = account.account_id
        last = AuditEvent.objects.filter(account_ref=account_ref).order_by("-id").values_list("hash", flat=True).first()
        event = AuditEvent(
            actor=actor[:255],
            actor_user=actor_user if getattr(actor_user, "is_authenticated", False) else None,
            action=action,
            account=account,
            account_ref=account_ref,
            stack_name=stack_name or "",
            region=region or "",
            operation=operation,
            operation_kind=(operation_kind or "")[:32],
            plan_digest=plan_digest or "",
            etag_before=etag_before or "",
            etag_after=etag_after or "",
            result=result,
            error=error,
            client_address=client_address or None,
            details=details or {},
            prev_hash=last or "",
        )
        event.hash = hashlib.sha256(event.canonical().encode()).hexdigest()
        event.save()
    return event


@dataclass
class ChainProblem:
    account: str
    event_id: int
    message: str


def verify(account_ref: str | None = None) -> tuple[int, list[ChainProblem]]:
    """Recompute every chain (or one account's). Returns (events checked, problems)."""
    refs = (
        [account_ref]
        if account_ref is not None
        else list(AuditEvent.objects.order_by().values_list("account_ref", flat=True).distinct())
    )
    checked, problems = 0, []
    for ref in refs:
        prev = ""
        for event in AuditEvent.objects.filter(account_ref=ref).order_by("id").iterator():
            checked += 1
            if event.prev_hash != prev:
                problems.append(ChainProblem(ref, event.pk, "links to a previous event that is not the one before it"))
            if hashlib.sha256(event.canonical().encode()).hexdigest() != event.hash:
                problems.append(ChainProblem(ref, event.pk, "its content does not match its hash (edited)"))
            prev = event.hash
    return checked, problems


def client_ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR") or None
