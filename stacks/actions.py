"""Which repair operations can run on a stack's record, and why not: the one place the
stack page (buttons, disabled with a one-line reason) and the request view (a 409 for a
direct request) both ask. Also what a computed plan predicts the run would refuse.

The rules follow the engine's own refusals (engine.orphan, engine.destroy, engine.scrub,
engine.restore) so a button is offered only where the run can succeed; the engine still
checks the bucket itself at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.schema import SUPPORTED_VERSION
from stacks.access import has_role
from stacks.models import Account, BucketSource, Lock, LockState, OperationKind, Role, Stack

# Defect paths inside one resource row: orphaning that row (orphan-resources) removes them.
_ROW_PREFIX = "resources."


@dataclass(frozen=True)
class Action:
    kind: str
    label: str
    allowed: bool
    reason: str = ""  # one line; set when not allowed


def _newer(stack: Stack) -> str:
    return (
        f"Written by a newer cdkd (schema version {stack.schema_version}, this app knows {SUPPORTED_VERSION}): "
        f"read-only here; use that cdkd."
    )


def _damage(stack: Stack) -> list[dict[str, Any]]:
    return [d for d in (stack.defects or []) if isinstance(d, dict)]


def _damaged(damaged: list[dict[str, Any]]) -> str:
    first = damaged[0]
    more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
    return (
        f"The record is damaged ({first.get('path') or 'root'}: {first.get('code')}{more}): nothing is destroyed or "
        f"scrubbed on its strength. Repair it, or orphan the record."
    )


def why_not(stack: Stack, kind: str, *, lock: Lock | None = None, lock_known: bool = False) -> str | None:
    """Why `kind` cannot run on this mirrored record, in one line, or None when it can.
    `lock` is the stack's Lock row when the caller has it (`lock_known`), else it is read."""
    damaged = _damage(stack)
    if kind == OperationKind.FORCE_UNLOCK:
        if not lock_known:
            lock = Lock.objects.filter(stack=stack).first()
        return None if lock is not None else "There is no lock to remove."
    if kind == OperationKind.EVENTS_PRUNE:  # the event store, not the record: a newer record is no bar
        return "A legacy key has no region, so it has no event store to prune." if stack.legacy else None
    if stack.read_only:
        return _newer(stack)
    if kind == OperationKind.ROLLBACK:
        if not lock_known:
            lock = Lock.objects.filter(stack=stack).first()
        return _rollback_why_not(stack, damaged, lock)
    if kind == OperationKind.ORPHAN:
        return None  # it reads `resources` nowhere: the documented way out of a damaged record
    if kind == OperationKind.ORPHAN_RESOURCES:
        if stack.legacy:
            return "A legacy record (no region in its key) cannot lose single resources; orphan the whole record."
        outside = [d for d in damaged if not str(d.get("path", "")).startswith(_ROW_PREFIX)]
        if outside:
            where = outside[0].get("path") or "the record itself"
            return f"The record is damaged outside its resource rows ({where}); orphan the whole record instead."
        if not stack.resource_count:
            return "The record lists no resources."
        return None
    if kind == OperationKind.DESTROY:
        if stack.legacy:
            return "A legacy record (no region in its key) cannot be destroyed here; a cdkd deploy migrates it first."
        if damaged:
            return _damaged(damaged)
        return None
    if kind == OperationKind.SCRUB:
        if stack.legacy:
            return "A legacy record (no region in its key) is not scrubbed; a cdkd deploy migrates it first."
        if damaged:
            return _damaged(damaged)
        return None
    if kind == OperationKind.DEPLOY:
        if damaged:
            first = damaged[0]
            return (
                f"The record is damaged ({first.get('path') or 'root'}: {first.get('code')}): a deploy refuses it, "
                "as cdkd's does. Repair or restore it first."
            )
        return None
    if kind in DRIFT_KINDS:
        if stack.legacy:
            return "A legacy record (no region in its key) has no drift baseline here; a cdkd deploy migrates it first."
        if damaged:
            first = damaged[0]
            return (
                f"The record is damaged ({first.get('path') or 'root'}: {first.get('code')}): no baseline is written "
                f"on its strength. Repair it, or orphan the record."
            )
        return None if stack.resource_count else "The record lists no resources."
    return None  # restore: the chosen version is checked when it is planned


def migrate_region(account: Account) -> str:
    """The region `state migrate` names by default: the one in the legacy bucket's name,
    where the sync found it, else the account's."""
    return account.bucket_region or account.cli_region


def migrate_why_not(account: Account, *, lock_keys: list[str] | None = None) -> str | None:
    """Why `state migrate` cannot be requested for this account, from the mirror, or None
    (engine.migrate refuses the same at plan and run time, reading both buckets).
    `lock_keys`: the account's mirrored lock keys when the caller has them."""
    if account.bucket_source == BucketSource.EXPLICIT:
        return (
            f"The account names its state bucket ({account.resolved_bucket or account.bucket}) itself: state migrate "
            f"moves only the legacy default cdkd-state-{account.account_id}-{{region}}."
        )
    if not account.bucket_source:
        return "The account's state bucket has not been resolved yet: sync the account, then try again."
    if account.bucket_source != BucketSource.DEFAULT_LEGACY:
        return None  # the new bucket is in use; a leftover legacy one is the plan's to find
    if lock_keys is None:
        lock_keys = list(Lock.objects.filter(account=account).values_list("key", flat=True)[:6])
    if lock_keys:
        shown = ", ".join(lock_keys[:5])
        return (
            f"{account.resolved_bucket} holds a lock ({shown}): a deploy or destroy may be running. Wait for it, "
            "or force-unlock a stale lock first."
        )
    return None


def _rollback_why_not(stack: Stack, damaged: list[dict[str, Any]], lock: Lock | None) -> str | None:
    """engine.deploy.rollback's refusals, from the mirror: it replays the journal beside the
    record under the stack's lock, so it needs a journal, a readable record and the lock."""
    if stack.legacy:
        return "A legacy record (no region in its key) has no rollback journal this app can replay."
    if stack.journal_key is None:
        return "The stack's rollback journal has not been listed yet: sync the account, then try again."
    if not stack.journal_key:
        return "There is no rollback journal to replay: the last sync found none beside the record."
    if damaged:
        first = damaged[0]
        return (
            f"The record is damaged ({first.get('path') or 'root'}: {first.get('code')}): a rollback refuses to "
            f"replay over it. Repair the record first."
        )
    state = lock.state() if lock is not None else LockState.NONE
    if state == LockState.UNREADABLE:
        return "lock.json cannot be read, so a rollback cannot take the lock: force-unlock first."
    if state == LockState.LIVE:
        return (
            f"The stack is locked by {lock.owner or 'an unnamed holder'}: a rollback waits for the lock. "
            f"If the lock card says likely abandoned, force-unlock first."
        )
    return None


# Drift's operations (engine.refresh): offered from the stack page's drift panel.
DRIFT_KINDS = (OperationKind.REFRESH_OBSERVED, OperationKind.DRIFT_ACCEPT, OperationKind.DRIFT_REVERT)


STACK_PAGE_KINDS = (
    OperationKind.FORCE_UNLOCK,
    OperationKind.ORPHAN,
    OperationKind.ORPHAN_RESOURCES,
    OperationKind.DESTROY,
    OperationKind.SCRUB,
)


class StackActions(dict):
    """The stack page's repair buttons, keyed by kind with `-` as `_` (for templates), and
    `others`: actions with their own button elsewhere on the page (Plan a deploy) whose
    reasons share the one list."""

    def __init__(self) -> None:
        super().__init__()
        self.others: list[Action] = []

    @property
    def buttons(self) -> list[Action]:
        return list(self.values())

    @property
    def unavailable(self) -> list[tuple[str, list[Action]]]:
        """(reason, the actions it disables): one line per reason, not one per button.
        Force-unlock without a lock has no button to explain."""
        groups: dict[str, list[Action]] = {}
        for action in [*self.values(), *self.others]:
            if not action.allowed and action.kind != OperationKind.FORCE_UNLOCK:
                groups.setdefault(action.reason, []).append(action)
        return list(groups.items())


def stack_actions(user, stack: Stack, *, lock: Lock | None = None, lock_known: bool = True) -> StackActions:
    """Every repair button of the stack page: allowed, or not with its one-line reason."""
    operator = has_role(user, stack.account, Role.OPERATOR)
    out = StackActions()
    for kind in STACK_PAGE_KINDS:
        label = OperationKind(kind).label
        reason = why_not(stack, kind, lock=lock, lock_known=lock_known)
        if not operator:
            reason = f"You need the operator role on {stack.account} to request this."
        out[kind.replace("-", "_")] = Action(kind, label, reason is None, reason or "")
    if operator:
        reason = why_not(stack, OperationKind.DEPLOY, lock=lock, lock_known=lock_known)
        out.others.append(Action(OperationKind.DEPLOY, "Plan a deploy", reason is None, reason or ""))
    return out


def predicted_refusal(plan: dict[str, Any]) -> str | None:
    """What the run of this plan would refuse unless forced, in one line, or None.
    Today: an orphan planned under another holder's live lock, not forced."""
    data = plan.get("data") if isinstance(plan, dict) else None
    if not isinstance(data, dict):
        return None
    if plan.get("kind") == OperationKind.ORPHAN and data.get("foreign_lock") and not data.get("force"):
        holder = data["foreign_lock"].get("owner") if isinstance(data["foreign_lock"], dict) else None
        return f"The stack is locked by {holder or 'another holder'}: the run refuses unless forced."
    return None


def forced_override(plan: dict[str, Any], params: dict[str, Any] | None = None) -> str | None:
    """What a forced request overrides, in one line (shown to the approver, audited), or None."""
    data = plan.get("data") if isinstance(plan, dict) else None
    data = data if isinstance(data, dict) else {}
    if not (data.get("force") or (params or {}).get("force")):
        return None
    lock = data.get("foreign_lock")
    if isinstance(lock, dict):
        return f"Forced past the live lock held by {lock.get('owner') or 'another holder'} (it is removed after)."
    if plan.get("kind") == OperationKind.ORPHAN_RESOURCES:
        return "Forced: references that cannot be resolved are kept as they are."
    return "Forced."
