"""The `destroy` operation kind: the seams, `plan` (engine.destroy.plan) and `execute`
(engine.destroy.run)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.destroy.plan import Planner
from engine.destroy.protection import Protection
from engine.destroy.retry import DELETE_RETRY_DELAYS
from engine.destroy.run import _Run
from engine.destroy.seams import (
    default_clients,
    default_delete,
    default_masker,
    default_precheck,
    default_supports_snapshot,
)
from engine.events import (
    RESULT_FAILED,
    RESULT_SUCCEEDED,
    EventRecorder,
)
from engine.masking import Masker
from engine.operations import Context, OperationRefused, Outcome, Plan


@dataclass
class _Seams:
    delete: Callable[..., Any]
    supports_snapshot: Callable[[Any], bool]
    precheck: Callable[[Any], str | None]
    clients: Callable[[Context], Any]
    defaults: bool
    # remove protection: PROTECTION_TYPES / read_protection / set_protection (engine.destroy.protection)
    protection: Callable[[], Protection | None] = lambda: None


class Destroy(Planner):
    kind = "destroy"
    label = "Destroy"
    cancellable = True

    def __init__(
        self,
        delete: Callable[..., Any] | None = None,
        *,
        supports_snapshot: Callable[[Any], bool] | None = None,
        precheck: Callable[[Any], str | None] | None = None,
        clients: Callable[[Context], Any] | None = None,
        masker: Callable[[Context], Masker] | None = None,
        clock: Callable[[], float] = time.time,
        protection: Any = None,
        retry_delays: tuple[float, ...] = DELETE_RETRY_DELAYS,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        """`delete(clients, ref, snapshot=False)` returns "deleted" | "not-found" (or an object
        with `.status` and optional `.unverified` = [{guard, reason}]), raises a Skip (no AWS
        call was made) or any other exception (the resource failed). The other seams default
        to engine.providers; with an injected `delete` they default to "no snapshot support",
        "addressable" and "no clients".

        `protection`: an object with PROTECTION_TYPES, read_protection(clients, ref) and
        set_protection(clients, ref, enabled) (default: engine.providers', when it has them).
        `retry_delays`: the waits before each retry of a transient failure (cdkd's 5, 10, 20 s);
        `sleep(seconds)` waits them (default: an interruptible wait; with an injected
        `delete` and no `sleep` the waits are skipped: a test double has nothing to wait for)."""
        injected = delete is not None
        self.seams = _Seams(
            delete=delete or default_delete,
            supports_snapshot=supports_snapshot or (default_supports_snapshot if not injected else (lambda ref: False)),
            precheck=precheck or (default_precheck if not injected else (lambda ref: None)),
            clients=clients or (default_clients if not injected else (lambda ctx: None)),
            defaults=not injected,
            protection=(lambda: Protection.of(protection))
            if protection is not None
            else (Protection.from_providers if not injected else (lambda: None)),
        )
        self.retry_delays = tuple(retry_delays)
        self.sleep = sleep if sleep is not None else ((lambda seconds: None) if injected else None)
        # Error messages in events and logs are masked for the account's known secret values,
        # read by the engine itself (never passed in through params, which are stored).
        self.masker_for = masker or (default_masker if not injected else (lambda ctx: Masker(())))
        self.clock = clock

    # -- execute ----------------------------------------------------------------------------

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        if ctx.region is None:
            raise OperationRefused("destroy needs a region-scoped record")
        masker = self.masker_for(ctx)
        recorder = EventRecorder(
            ctx.bucket, ctx.layout, ctx.stack, ctx.region, command="destroy", mask=masker, log=ctx.log
        )
        recorder.start()
        run = _Run(self, ctx, plan, recorder, masker)
        try:
            outcome = run.top()
        except BaseException as exc:
            # A refusal under the lock (stale plan, contention, imports) is still a run (§4.4).
            recorder.finalize(RESULT_FAILED, run.top_counts(), error=exc)
            raise
        counts = outcome.details["counts"]
        if outcome.status == "succeeded":
            recorder.finalize(RESULT_SUCCEEDED, counts)
        else:
            recorder.finalize(RESULT_FAILED, counts, error={"name": "DestroyIncomplete", "message": outcome.summary})
        outcome.details["run_id"] = recorder.run_id
        outcome.warnings += recorder.warnings
        return outcome
