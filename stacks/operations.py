"""The operation pipeline: request (with a plan), approve, queue on commit, run, record.

Every bucket-changing action goes through here, from the web (`request_operation`, then
approvals, then an RQ worker calling `run_operation`) or from a management command
(`run_direct`, which runs at once and is audited the same way). The engine does the work
(`engine.operations`); this module owns roles, policy, approvals, statuses and the audit.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import close_old_connections, transaction
from django.db.models import F
from django.utils import timezone

from engine.errors import EngineError
from engine.keys import KeyLayout
from engine.operations import Context, OperationRefused, Plan, StalePlan, spec_for
from stacks import audit, notify
from stacks.access import has_role, role_on
from stacks.actions import forced_override, predicted_refusal
from stacks.consumers import mirror_finder, mirror_holders
from stacks.models import (
    Account,
    Approval,
    ApprovalPolicy,
    Operation,
    OperationStatus,
    Role,
    min_approvers,
)
from stacks.records import open_bucket

logger = logging.getLogger(__name__)

# A running operation whose worker has not written a heartbeat for this long is abandoned
# (the worker was killed); its lock is no longer renewed and expires on its own.
HEARTBEAT_SECONDS = 10


def abandoned_after() -> timedelta:
    return timedelta(seconds=settings.CDKD_OPERATION_ABANDON_SECONDS)


@dataclass(frozen=True)
class EffectivePolicy:
    approval_required: bool
    approvers_needed: int
    validity: timedelta


def policy_for(account: Account, kind: str) -> EffectivePolicy:
    """The account's policy for `kind`, raised to the installation's floor (`min_approvers`)
    whatever its row says: every check (request, decide, the worker's start) reads this."""
    row = ApprovalPolicy.objects.filter(account=account, kind=kind).first()
    if row is None:
        required, needed, validity = True, 1, timedelta(hours=24)
    else:
        required, needed = row.approval_required, max(row.approvers_needed, 1)
        validity = timedelta(hours=row.validity_hours)
    floor = min_approvers(kind)
    if floor:  # the installation's floor wins over a row that asks for less (or for no approval)
        needed = max(needed, floor) if required else floor
        required = True
    return EffectivePolicy(required, needed, validity)


def _actor_name(user) -> str:
    return user.get_username() if getattr(user, "is_authenticated", False) else "anonymous"


def lock_operation_id(op: Operation) -> str:
    """The operation's id in its lock owner (`cdkd-admin:{person}@{host}:{this}`): the row id
    and a token of when the row was made, so "run again" on any host adopts the lock its
    crashed predecessor left (engine.locks.same_operation), while an operation of another
    installation that happens to share the row id never does. "plan" for a plan probe."""
    if op.pk is None:
        return "plan"
    created = op.created_at.isoformat() if op.created_at else ""
    token = hashlib.sha256(f"{op.pk}|{created}|{op.plan_digest}".encode()).hexdigest()[:10]
    return f"op-{op.pk}-{token}"


def split_params(kind: str, params: dict) -> tuple[dict, dict]:
    """(the parameters stored in the clear, those the spec names in `secret_params`, which
    are stored encrypted in `Operation.secret_params`)."""
    secret_names = getattr(spec_for(kind), "secret_params", ())
    plain = {k: v for k, v in params.items() if k not in secret_names}
    return plain, {k: v for k, v in params.items() if k in secret_names}


def all_params(op: Operation) -> dict:
    """What the engine is given: the clear parameters and the decrypted secret ones."""
    return op.all_params


def _context(op: Operation, *, log=None, progress=None, cancel_event=None) -> Context:
    ctx = Context(
        bucket=open_bucket(op.account, f"op-{op.pk or 'plan'}"),
        layout=KeyLayout(op.account.prefix),
        stack=op.stack_name,
        region=op.region,
        params=all_params(op),
        operation_id=lock_operation_id(op),
        person=op.requester_name,
        host=socket.gethostname(),
        lock_ttl_ms=settings.CDKD_LOCK_TTL_SECONDS * 1000,
    )
    if log:
        ctx.log = log
    if progress:
        ctx.progress = progress
    if cancel_event:
        ctx.cancel_event = cancel_event
    return ctx


def compute_plan(account: Account, kind: str, stack_name: str, region: str | None, params: dict, person: str) -> Plan:
    """Ask the engine what the operation would do now. Raises OperationRefused/EngineError."""
    if kind == "rollback":
        # The account a rollback's creates are reverted in is the operation's own, whatever
        # the request carried (the plan records it; the run reads it from the plan).
        params = {**params, "account": account.account_id}
    probe = Operation(
        kind=kind, account=account, stack_name=stack_name, region=region, params=params, requester_name=person
    )
    ctx = _context(probe)
    ctx.consumers = mirror_finder(account)  # destroy's import check: the mirror, not a GET per record
    ctx.holders = mirror_holders(account)  # and its journal-only protection rule
    return spec_for(kind).plan(ctx)


def consented(plan: Plan) -> list[dict] | None:
    """The replacements a plan goes ahead with by explicit consent (a scrub's
    allow_replacement), for the audit; None when it needs none."""
    data = plan.data if isinstance(plan.data, dict) else {}
    found = data.get("replacements") if data.get("allow_replacement") else None
    return found if isinstance(found, list) and found else None


def _enqueue(op: Operation) -> None:
    from cdkd_site.queues import get_queue

    op.status = OperationStatus.QUEUED
    op.queued_at = timezone.now()
    op.save(update_fields=["status", "queued_at"])
    # Keyed by the operation: a second enqueue of the same id replaces nothing that ran.
    get_queue("default").enqueue("stacks.jobs.run_operation", op.pk, job_id=f"operation-{op.pk}")


def request_operation(
    user,
    account: Account,
    kind: str,
    stack_name: str,
    region: str | None,
    params: dict | None = None,
    *,
    client_address: str | None = None,
    reason: str = "",
    rerun_of: Operation | None = None,
    via: str = "web",
) -> Operation:
    """Plan the operation and record the request; queue it at once when the account's policy
    needs no approval. Raises PermissionDenied without the operator role, and the engine's
    OperationRefused/EngineError when no plan can be made, or when the plan predicts the
    run would refuse unless forced and the request is not forced (refused up front).

    `rerun_of`: "Run again" of that operation. When the new plan's digest and ETag equal
    its plan, the approvals it had carry over (they approved this exact plan); otherwise
    the new plan needs approvals of its own. `via`: "web", or "api" for a token's call (the
    run is the worker's either way; only the command line runs as its person)."""
    if not has_role(user, account, Role.OPERATOR):
        raise PermissionDenied(f"You need the operator role on {account} to request this")
    params = params or {}
    reason = (reason or "")[:500]
    plan = compute_plan(account, kind, stack_name, region, params, _actor_name(user))
    problem = predicted_refusal(plan.as_json())
    if problem:
        raise OperationRefused(f"{problem} Tick Force to override it, or wait until the lock is gone.")
    policy = policy_for(account, kind)
    same_plan = rerun_of is not None and rerun_of.plan_digest == plan.digest and rerun_of.plan_etag == (plan.etag or "")
    details: dict[str, Any] = {"reason": reason}
    if via != "web":
        details["via"] = via
    override = forced_override(plan.as_json(), params)
    if override:
        details["force"] = override
    consent = consented(plan)
    if consent:
        details["allow_replacement"] = consent
    if isinstance(plan.data.get("options"), dict):  # a destroy's run-wide choices, for the audit
        details["options"] = plan.data["options"]
    elif kind in ("state-migrate", "events-prune"):  # what the whole-bucket run deletes, for the audit
        details["options"] = {k: plan.data[k] for k in ("remove_legacy", "keep", "older_than_days") if k in plan.data}
    if rerun_of is not None:
        details["rerun_of"] = rerun_of.pk
        details["same_plan"] = same_plan
    plain, secret = split_params(kind, params)
    with transaction.atomic():
        op = Operation.objects.create(
            kind=kind,
            account=account,
            stack_name=stack_name,
            region=region,
            requested_by=user,
            requester_name=_actor_name(user),
            params=plain,
            secret_params=secret,
            reason=reason,
            rerun_of=rerun_of,
            via=via,
            plan=plan.as_json(),
            plan_digest=plan.digest,
            plan_etag=plan.etag or "",
            status=OperationStatus.AWAITING_APPROVAL if policy.approval_required else OperationStatus.APPROVED,
        )
        audit.record(
            "operation.requested",
            actor=op.requester_name,
            actor_user=user,
            operation=op,
            etag_before=op.plan_etag,
            client_address=client_address,
            details=details,
        )
        if same_plan and policy.approval_required:
            _carry_approvals(rerun_of, op)
            if len(valid_approvals(op)) >= policy.approvers_needed:
                op.status = OperationStatus.APPROVED
                op.save(update_fields=["status"])
        if op.status == OperationStatus.AWAITING_APPROVAL:
            notify.emit("approval.requested", account, operation=op)
        if op.status == OperationStatus.APPROVED:
            _enqueue(op)
    return op


def _carry_approvals(source: Operation, op: Operation) -> None:
    """Copy the approvals of `source` for this same plan to `op`, keeping when each was
    given (so an approval still expires on its own clock). Only approvals that still count
    for `source`'s plan are copied; `valid_approvals(op)` then drops the new requester's own."""
    for a in valid_approvals(source):
        copy = Approval.objects.create(
            operation=op,
            approver=a.approver,
            approved=True,
            plan_digest=a.plan_digest,
            plan_etag=a.plan_etag,
            comment=f"carried over from #{source.pk} (same plan)" + (f": {a.comment}" if a.comment else ""),
        )
        Approval.objects.filter(pk=copy.pk).update(created_at=a.created_at)


def run_again(user, op: Operation, *, client_address: str | None = None) -> Operation:
    """A partial or failed operation, requested again with the same parameters and reason:
    a new plan of what is there now; new approvals only when that plan differs."""
    if not has_role(user, op.account, Role.OPERATOR):
        raise PermissionDenied(f"You need the operator role on {op.account} to run this again")
    if op.status not in (OperationStatus.PARTIAL, OperationStatus.FAILED) or (
        op.result.get("abandoned") and not replans_after_abandon(op)
    ):
        raise OperationRefused(
            f"Operation #{op.pk} is {op.get_status_display().lower()}: only a partial or failed one runs again"
        )
    reason = op.reason or ""
    reason = (f"Run again of #{op.pk}" + (f": {reason}" if reason else ""))[:500]
    spec = spec_for(op.kind)
    params = all_params(op)
    if hasattr(spec, "rerun_params"):
        params = spec.rerun_params(params)
    return request_operation(
        user,
        op.account,
        op.kind,
        op.stack_name,
        op.region,
        params,
        client_address=client_address,
        reason=reason,
        rerun_of=op,
    )


def replans_after_abandon(op: Operation) -> bool:
    """An abandoned operation of a kind whose killed run moved the record (a deploy): queued
    again as it was it could only refuse, so "Run again" plans it anew instead."""
    return bool(op.result.get("abandoned")) and bool(getattr(spec_for(op.kind), "rerun_after_abandon", False))


def valid_approvals(op: Operation, *, at=None) -> list[Approval]:
    """Approvals that still count: for this plan digest and ETag, not expired, not by the
    requester, from people who are approvers on the account now."""
    policy = policy_for(op.account, op.kind)
    at = at or timezone.now()
    approvals = []
    for a in op.approvals.select_related("approver").filter(approved=True, plan_digest=op.plan_digest):
        if a.plan_etag != op.plan_etag or a.created_at + policy.validity < at:
            continue
        if a.approver_id == op.requested_by_id or not has_role(a.approver, op.account, Role.APPROVER):
            continue
        approvals.append(a)
    return approvals


def decide(user, op: Operation, *, approve: bool, comment: str = "", client_address: str | None = None) -> Operation:
    """Record an approval or a rejection. Queues the operation once enough approvers agree."""
    if not has_role(user, op.account, Role.APPROVER):
        raise PermissionDenied(f"You need the approver role on {op.account} to decide on this")
    if op.requested_by_id == getattr(user, "pk", None):
        raise PermissionDenied("You cannot approve or reject your own request")
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=op.pk)
        if op.status != OperationStatus.AWAITING_APPROVAL:
            raise OperationRefused(f"Operation #{op.pk} is {op.get_status_display().lower()}, not awaiting approval")
        if op.approvals.filter(approver=user, plan_digest=op.plan_digest).exists():
            raise OperationRefused("You have already decided on this plan")
        Approval.objects.create(
            operation=op,
            approver=user,
            approved=approve,
            plan_digest=op.plan_digest,
            plan_etag=op.plan_etag,
            comment=comment,
        )
        audit.record(
            "operation.approved" if approve else "operation.rejected",
            actor=_actor_name(user),
            actor_user=user,
            operation=op,
            etag_before=op.plan_etag,
            client_address=client_address,
            result="approved" if approve else "rejected",
        )
        if not approve:
            _finish(
                op,
                OperationStatus.REFUSED,
                error=f"Rejected by {_actor_name(user)}" + (f": {comment}" if comment else ""),
            )
            notify.emit("operation.rejected", op.account, operation=op, decided_by=_actor_name(user))
            return op
        if len(valid_approvals(op)) >= policy_for(op.account, op.kind).approvers_needed:
            op.status = OperationStatus.APPROVED
            op.save(update_fields=["status"])
            notify.emit("operation.approved", op.account, operation=op, decided_by=_actor_name(user))
            _enqueue(op)
    return op


def cancel(user, op: Operation, *, client_address: str | None = None) -> Operation:
    """Cancel before it runs (requester, approvers, admins), or ask a running operation that
    supports it to stop starting new work."""
    is_requester = op.requested_by_id == getattr(user, "pk", None)
    if not (is_requester and has_role(user, op.account, Role.OPERATOR)) and not has_role(
        user, op.account, Role.APPROVER
    ):
        raise PermissionDenied("Only the requester or an approver of this account can cancel it")
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=op.pk)
        if op.finished:
            raise OperationRefused(f"Operation #{op.pk} has already ended ({op.get_status_display().lower()})")
        if op.status == OperationStatus.RUNNING:
            if not spec_for(op.kind).cancellable:
                raise OperationRefused(f"A running {op.get_kind_display().lower()} cannot be cancelled")
            op.cancel_requested = True
            op.save(update_fields=["cancel_requested"])
            audit.record(
                "operation.cancel-requested",
                actor=_actor_name(user),
                actor_user=user,
                operation=op,
                client_address=client_address,
            )
            return op
        _finish(op, OperationStatus.CANCELLED, error=f"Cancelled by {_actor_name(user)}")
        audit.record(
            "operation.cancelled",
            actor=_actor_name(user),
            actor_user=user,
            operation=op,
            client_address=client_address,
            result="cancelled",
        )
        notify.emit("operation.failed", op.account, operation=op, result=OperationStatus.CANCELLED)
    return op


def _finish(
    op: Operation,
    status: str,
    *,
    error: str = "",
    result: dict | None = None,
    etag_before: str | None = None,
    etag_after: str | None = None,
) -> None:
    op.status = status
    op.error = error
    op.finished_at = timezone.now()
    if result is not None:
        op.result = result
    if etag_before is not None:
        op.etag_before = etag_before
    if etag_after is not None:
        op.etag_after = etag_after
    op.save(update_fields=["status", "error", "finished_at", "result", "etag_before", "etag_after"])


# --- running -----------------------------------------------------------------------------


class _Recorder:
    """Collects log lines and progress from the engine (any thread) and writes them to the
    Operation row from the heartbeat thread, so the page can poll without slowing the work."""

    def __init__(self, op_id: int) -> None:
        self.op_id = op_id
        self.lock = threading.Lock()
        self.pending_log: list[dict] = []
        self.progress: dict[str, Any] | None = None
        self.cancel_event = threading.Event()
        self.stop_event = threading.Event()

    def log(self, level: str, message: str) -> None:
        entry = {"at": timezone.now().isoformat(timespec="seconds"), "level": level, "message": message}
        with self.lock:
            self.pending_log.append(entry)
        getattr(logger, "warning" if level == "warning" else "error" if level == "error" else "info")(
            "operation %s: %s", self.op_id, message
        )

    def set_progress(self, done: int, total: int, detail: dict | None = None) -> None:
        with self.lock:
            current = dict(self.progress or {})
            current.update(done=done, total=total)
            if detail:
                items = dict(current.get("items") or {})
                items.update(detail.get("items") or {})
                current["items"] = items
                if "phase" in detail:
                    current["phase"] = detail["phase"]
            self.progress = current

    def flush(self) -> None:
        with self.lock:
            log, self.pending_log = self.pending_log, []
            progress = self.progress
        op = Operation.objects.filter(pk=self.op_id).only("log", "cancel_requested").first()
        if op is None:
            return
        fields: dict[str, Any] = {"heartbeat_at": timezone.now()}
        if log:
            fields["log"] = (op.log or []) + log
        if progress is not None:
            fields["progress"] = progress
        Operation.objects.filter(pk=self.op_id).update(**fields)
        if op.cancel_requested:
            self.cancel_event.set()

    def run_heartbeat(self) -> None:
        try:
            while not self.stop_event.wait(min(HEARTBEAT_SECONDS, 1.0)):
                try:
                    self.flush()
                except Exception:  # the database blinked: the next beat tries again
                    logger.exception("heartbeat of operation %s failed", self.op_id)
        finally:
            close_old_connections()


def _recheck_roles(op: Operation) -> str | None:
    """Why the operation may no longer run, or None. Roles can change after approval."""
    if op.via == "cli":
        return None
    if op.requested_by is None or not has_role(op.requested_by, op.account, Role.OPERATOR):
        return f"{op.requester_name} no longer holds the operator role on {op.account}"
    policy = policy_for(op.account, op.kind)
    if policy.approval_required and len(valid_approvals(op)) < policy.approvers_needed:
        return "the approvals no longer hold (expired, revoked roles, or a changed plan)"
    return None


def run_operation(op_id: int) -> Operation | None:
    """The RQ job. Safe to run twice: only the call that moves it from queued to running
    does anything."""
    claimed = Operation.objects.filter(pk=op_id, status=OperationStatus.QUEUED).update(
        status=OperationStatus.RUNNING,
        started_at=timezone.now(),
        heartbeat_at=timezone.now(),
        attempts=F("attempts") + 1,
    )
    op = Operation.objects.select_related("account", "requested_by").filter(pk=op_id).first()
    if not claimed or op is None:
        return op
    problem = _recheck_roles(op)
    if problem:
        _finish(op, OperationStatus.REFUSED, error=f"Refused at start: {problem}")
        audit.record("operation.refused", actor="worker", operation=op, result="refused", error=op.error)
        notify.emit("operation.failed", op.account, operation=op, result=op.status)
        return op
    return _execute(op)


def _execute(op: Operation) -> Operation:
    audit.record(
        "operation.started",
        actor=op.requester_name if op.via == "cli" else "worker",
        operation=op,
        etag_before=op.plan_etag,
    )
    recorder = _Recorder(op.pk)
    beat = threading.Thread(target=recorder.run_heartbeat, name=f"op-{op.pk}-heartbeat", daemon=True)
    beat.start()
    status, error, result = OperationStatus.FAILED, "", {}
    etag_before, etag_after = op.plan_etag, ""
    try:
        spec = spec_for(op.kind)
        ctx = _context(op, log=recorder.log, progress=recorder.set_progress, cancel_event=recorder.cancel_event)
        outcome = spec.execute(ctx, Plan.from_json(op.plan))
        status = {"succeeded": OperationStatus.SUCCEEDED, "partial": OperationStatus.PARTIAL}.get(
            outcome.status, OperationStatus.FAILED
        )
        result = {"summary": outcome.summary, "details": outcome.details, "warnings": outcome.warnings}
        etag_before, etag_after = outcome.etag_before or etag_before, outcome.etag_after or ""
        for warning in outcome.warnings:
            recorder.log("warning", warning)
        if status == OperationStatus.FAILED:
            error = outcome.summary
    except StalePlan as exc:
        status, error = OperationStatus.REFUSED, str(exc)
    except OperationRefused as exc:
        status, error = OperationStatus.REFUSED, str(exc)
    except EngineError as exc:
        status, error = OperationStatus.FAILED, str(exc)
    except Exception as exc:  # a bug: record it on the row, never leave it "running"
        logger.exception("operation %s crashed", op.pk)
        status, error = OperationStatus.FAILED, f"Internal error ({type(exc).__name__}); see the worker log"
    finally:
        recorder.stop_event.set()
        beat.join(timeout=5)
        recorder.flush()
    op.refresh_from_db(fields=["log", "progress"])
    _finish(op, status, error=error, result=result, etag_before=etag_before, etag_after=etag_after)
    audit.record(
        "operation.finished",
        actor=op.requester_name if op.via == "cli" else "worker",
        operation=op,
        etag_before=etag_before,
        etag_after=etag_after,
        result=status,
        error=error,
    )
    if op.kind == "state-migrate":
        op.account.bucket_checked_at = None  # the state moved buckets: the re-sync resolves it again
    ended = "operation.finished" if status == OperationStatus.SUCCEEDED else "operation.failed"
    notify.emit(ended, op.account, operation=op, result=status)
    _resync(op)
    if op.kind == "scrub":
        _rescan(op)
    return op


def _resync(op: Operation) -> None:
    from stacks.sync import sync_account

    try:
        sync_account(op.account, actor=f"op-{op.pk}")
    except Exception:  # the operation's result stands; the next sync catches up
        logger.exception("re-sync after operation %s failed", op.pk)


def _rescan(op: Operation) -> None:
    """After a scrub, scan the stack again so its findings show what is left."""
    from stacks.scans import queue_stack_rescan

    try:
        queue_stack_rescan(op.account, op.stack_name, op.region)
    except Exception:  # the scrub's result stands; a scan from the page catches up
        logger.exception("re-scan after operation %s could not be queued", op.pk)


def run_direct(
    kind: str,
    account: Account,
    stack_name: str,
    region: str | None,
    params: dict,
    *,
    actor: str,
    plan: Plan | None = None,
) -> Operation:
    """A management command's operation: recorded like a web one, run at once in this
    process (the person at the server's shell is trusted as an admin)."""
    plan = plan or compute_plan(account, kind, stack_name, region, params, actor)
    plain, secret = split_params(kind, params)
    with transaction.atomic():
        op = Operation.objects.create(
            kind=kind,
            account=account,
            stack_name=stack_name,
            region=region,
            requester_name=actor,
            via="cli",
            params=plain,
            secret_params=secret,
            plan=plan.as_json(),
            plan_digest=plan.digest,
            plan_etag=plan.etag or "",
            status=OperationStatus.RUNNING,
            started_at=timezone.now(),
            heartbeat_at=timezone.now(),
            attempts=1,
        )
        consent = consented(plan)
        options = plan.data.get("options")
        details: dict[str, Any] = {}
        if consent:
            details["allow_replacement"] = consent
        if isinstance(options, dict):
            details["options"] = options
        audit.record(
            "operation.requested", actor=actor, operation=op, etag_before=op.plan_etag, details=details or None
        )
    return _execute(op)


def retry(user, op: Operation, *, client_address: str | None = None) -> Operation:
    """Run an operation again after its worker died (status failed, abandoned). The plan and
    approvals stay; the run refuses if the record changed meanwhile (stale plan)."""
    if not has_role(user, op.account, Role.APPROVER):
        raise PermissionDenied("Only an approver of this account can run it again")
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=op.pk)
        if op.status != OperationStatus.FAILED or not op.result.get("abandoned"):
            raise OperationRefused("Only an operation whose worker stopped can be run again")
        audit.record(
            "operation.retried", actor=_actor_name(user), actor_user=user, operation=op, client_address=client_address
        )
        _enqueue(op)
    return op


def reap_abandoned(now=None) -> list[int]:
    """Mark running operations whose worker stopped writing heartbeats as failed."""
    now = now or timezone.now()
    reaped = []
    for op in Operation.objects.filter(status=OperationStatus.RUNNING, heartbeat_at__lt=now - abandoned_after()):
        updated = Operation.objects.filter(pk=op.pk, status=OperationStatus.RUNNING).update(
            status=OperationStatus.FAILED,
            finished_at=now,
            error="The worker running this operation stopped (abandoned). Its lock is no longer renewed and "
            "expires on its own; an approver can run it again.",
            result={"abandoned": True},
        )
        if updated:
            reaped.append(op.pk)
            audit.record("operation.abandoned", actor="worker", operation=op, result="failed", error="worker stopped")
            notify.emit("operation.failed", op.account, operation=Operation.objects.get(pk=op.pk), result="abandoned")
    return reaped


def expire_stale_requests(now=None) -> int:
    """Requests whose approvals can no longer complete in time are expired."""
    now = now or timezone.now()
    count = 0
    for op in Operation.objects.filter(status=OperationStatus.AWAITING_APPROVAL).select_related("account"):
        if op.created_at + policy_for(op.account, op.kind).validity >= now:
            continue
        if Operation.objects.filter(pk=op.pk, status=OperationStatus.AWAITING_APPROVAL).update(
            status=OperationStatus.EXPIRED, finished_at=now, error="No approval in time"
        ):
            audit.record("operation.expired", actor="worker", operation=op, result="expired")
            count += 1
    return count


def visible_operations(user):
    from stacks.access import accounts_for

    return Operation.objects.filter(account__in=accounts_for(user))


def can(user, op: Operation, action: str) -> bool:
    """What the operation page may offer; the actions re-check on their own."""
    role = role_on(user, op.account)
    if role is None:
        return False
    rank = Role.rank(role)
    mine = op.requested_by_id == getattr(user, "pk", None)
    if action == "decide":
        return op.status == OperationStatus.AWAITING_APPROVAL and rank >= Role.rank(Role.APPROVER) and not mine
    if action == "cancel":
        return not op.finished and ((mine and rank >= Role.rank(Role.OPERATOR)) or rank >= Role.rank(Role.APPROVER))
    if action == "retry":
        return (
            op.status == OperationStatus.FAILED
            and bool(op.result.get("abandoned"))
            and not replans_after_abandon(op)
            and rank >= Role.rank(Role.APPROVER)
        )
    if action == "run_again":
        return (
            op.status in (OperationStatus.PARTIAL, OperationStatus.FAILED)
            and (not op.result.get("abandoned") or replans_after_abandon(op))
            and rank >= Role.rank(Role.OPERATOR)
        )
    return False
