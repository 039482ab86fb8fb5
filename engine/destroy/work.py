"""One row's delete, in its own thread: the protection flip, the retries of a transient
failure, and the deadline the coordinator watches (engine.destroy.retry, .protection).

Each delete runs on a daemon thread of its own rather than in a pool: a delete that passes
its resource timeout is abandoned (its row FAILS, the run goes on), and an abandoned call
must neither hold a pool slot nor keep the worker process from ending.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.destroy.common import ACTION_SNAPSHOT, _reads_as_not_found
from engine.destroy.consumers import scan_holders
from engine.destroy.protection import GuardState, compensate, disable
from engine.destroy.retry import retry_class
from engine.destroy.seams import _skip_types
from engine.providers.base import stoppable

if TYPE_CHECKING:
    from engine.destroy.run import _Run


@dataclass
class RowTask:
    """A row in flight. `key` is its status key (a logical id, or `journal:<id>`)."""

    key: str
    lid: str
    row: dict[str, Any]
    entry: dict[str, Any]
    started: float
    warn_at: float
    deadline: float
    timeout: float
    abort: threading.Event = field(default_factory=threading.Event)  # set when abandoned
    warned: bool = False
    attempts: int = 0
    guard: GuardState | None = None
    future: Any = None


def spawn(name: str, fn: Any, *args: Any) -> Future[Any]:
    """`fn(*args)` on a daemon thread; its result (or any exception, BaseException too) in a Future."""
    future: Future[Any] = Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - the coordinator re-raises a kill
            future.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def pause(run: _Run, seconds: float, abort: threading.Event) -> None:
    """Wait before a retry: the injected `sleep`, or a wait that a timeout or cancel cuts short."""
    sleep = run.destroy.sleep
    if sleep is not None:
        sleep(seconds)
        return
    end = time.monotonic() + seconds
    while not abort.is_set() and not run.stopping():
        left = end - time.monotonic()
        if left <= 0:
            return
        abort.wait(min(left, 1.0))


def still_unheld(run: _Run, ctx: Any, region: str, task: RowTask, ref: Any) -> bool:
    """A journal-only row's protection proof, again under the lock: no other stack's record
    may have adopted the resource since the plan (seed 004). The bucket is read, never a mirror."""
    held, unreadable = scan_holders(ctx, ctx.stack, region, {ref.physical_id})
    if not held and not unreadable:
        return True
    why = f"held by {', '.join(held[ref.physical_id][:3])}" if held else f"{', '.join(unreadable[:3])} cannot be read"
    run.ctx.log(
        "warning",
        f"{task.lid} ({ref.resource_type}) is only in the rollback journal and another record may hold it now "
        f"({why}): its protection stays on",
    )
    return False


def delete_row(run: _Run, task: RowTask, ref: Any, snapshot: bool, ctx: Any = None, region: str = "") -> Any:
    """The provider delete of one row, with the guard off around it and cdkd's retries."""
    seams = run.destroy.seams
    clients = run.clients()
    protection = run.protection
    log = run.ctx.log
    lift = task.entry.get("removeProtection") and protection is not None
    if lift and task.entry.get("journal"):
        lift = still_unheld(run, ctx or run.ctx, region, task, ref)
    if lift:
        task.guard = disable(protection, clients, ref, log)
    delays = () if task.entry.get("noRetry") else run.retry_delays
    while True:
        task.attempts += 1
        try:
            with stoppable(lambda: task.abort.is_set() or run.stopping()):
                return seams.delete(clients, ref, snapshot=snapshot)
        except Exception as exc:
            gone = task.entry["action"] != ACTION_SNAPSHOT and _reads_as_not_found(exc)
            retryable = not gone and not isinstance(exc, _skip_types()) and retry_class(exc) is not None
            if retryable and task.attempts <= len(delays) and not task.abort.is_set() and not run.stopping():
                delay = delays[task.attempts - 1]
                log(
                    "info",
                    f"{task.lid} ({ref.resource_type}): {run.masker(str(exc))}; retrying in {delay:g}s "
                    f"(attempt {task.attempts + 1} of {len(delays) + 1})",
                )
                pause(run, delay, task.abort)
                if not task.abort.is_set() and not run.stopping():
                    continue
            # The delete ENDED in failure: put back a guard this run turned off, unless the
            # resource timeout fired (the guard stays off), the delete was accepted by AWS, or
            # it is gone after all.
            if task.guard is not None and not gone and not task.abort.is_set() and not getattr(exc, "accepted", False):
                compensate(protection, clients, ref, task.guard, log, run.masker)
            raise
