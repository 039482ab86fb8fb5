"""Force-unlock: remove a stack's cdkd lock, only if it is still the one the person saw.

Plan: read the lock; the plan's ETag is the LOCK's ETag (what the approval binds to) and
its changes show holder, operation, acquired time, deadline and whether it is live,
expired or unreadable. No lock -> refused ("nothing to unlock").

Execute: `locks.force_unlock` with `If-Match` on that ETag (a changed lock raises
`LockChanged` showing the new holder; a lock that vanished is reported as already gone).
An unreadable lock is removed only with the second confirmation
`params["confirm_unreadable"] is True`, and then without the condition. The key's
noncurrent versions are purged afterwards (failures become warnings). `state.json` is
never touched. No stack lock is taken: the lock itself is the object being removed.
"""

from __future__ import annotations

import time

from engine import locks
from engine.operations import Context, OperationRefused, Outcome, Plan, register


class ForceUnlockSpec:
    kind = "force-unlock"
    label = "Force-unlock"
    cancellable = False

    def plan(self, ctx: Context) -> Plan:
        """What is there now. Raises OperationRefused when there is no lock."""
        key = ctx.layout.lock_key(ctx.stack, ctx.region)
        view = locks.read_lock(ctx.bucket, key)
        where = _where(ctx)
        if view is None:
            raise OperationRefused(f"no lock on {where}: nothing to unlock")
        now = int(time.time() * 1000)
        state = view.state(now)
        warnings: list[str] = []
        if state == "unreadable":
            changes = [
                f"lock: {view.problem()}",
                "holder: unknown (the lock cannot be read)",
                f"status: unreadable (ETag {view.etag})",
            ]
            warnings.append(
                "The lock cannot be read, so its holder cannot be shown. Removing it needs a second "
                "confirmation and deletes it without the ETag condition."
            )
            summary = f"Delete the unreadable lock on {where}"
        else:
            deadline = (
                "not a finite number (counts as expired)"
                if view.expires_at_ms is None
                else f"{locks.format_ms(view.expires_at_ms)} ({view.expiry_phrase(now)})"
            )
            changes = [
                f"holder: {view.holder()}",
                f"operation: {locks.display_safe(view.operation) or '(none given)'}",
                f"acquired: {locks.format_ms(view.timestamp_ms)}",
                f"deadline: {deadline}",
                f"status: {state}",
            ]
            if state == "live":
                warnings.append(
                    f"The lock is live: {view.holder()} may still be running. Removing it lets another "
                    f"process write to this stack at the same time."
                )
            summary = f"Delete the {state} lock on {where} held by {view.holder()}"
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=view.etag,
            summary=summary,
            changes=changes,
            warnings=warnings,
            data={"lock_key": key, "unreadable": state == "unreadable", "holder": view.holder()},
        )

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        """Delete the lock the plan showed; see the module docstring."""
        key = plan.data.get("lock_key") or ctx.layout.lock_key(ctx.stack, ctx.region)
        unreadable = bool(plan.data.get("unreadable"))
        confirmed = ctx.params.get("confirm_unreadable") is True
        if unreadable and not confirmed:
            raise OperationRefused(
                f"the lock on {_where(ctx)} cannot be read; deleting it needs a second confirmation "
                f"(confirm_unreadable) because it is removed without the ETag condition"
            )
        ctx.progress(0, 1, None)
        result = locks.force_unlock(ctx.bucket, key, expected_etag=plan.etag, unconditional=unreadable and confirmed)
        for warning in result.warnings:
            ctx.log("warning", warning)
        if result.already_gone:
            summary = f"No lock on {_where(ctx)} any more (already gone): nothing deleted"
        else:
            holder = "an unreadable lock" if unreadable else f"the lock held by {plan.data.get('holder')}"
            summary = f"Removed {holder} on {_where(ctx)}"
            if result.purged:
                summary += f"; purged {result.purged} noncurrent version(s) of {key}"
        ctx.log("info", summary)
        ctx.progress(1, 1, None)
        return Outcome(
            status="succeeded",
            summary=summary,
            etag_before=plan.etag,
            etag_after=None,
            details={
                "lock_key": key,
                "deleted": result.deleted,
                "already_gone": result.already_gone,
                "unconditional": result.unconditional,
                "purged_versions": result.purged,
            },
            warnings=list(result.warnings),
        )


def _where(ctx: Context) -> str:
    return f"{ctx.stack} ({ctx.region or 'legacy, no region'})"


SPEC = register(ForceUnlockSpec())
