"""The trimmed record's writes: conditional, adopting its own lost answers, from a
background thread so the deletes keep starting while a write is on the wire."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from engine.destroy.common import _now_ms, _read
from engine.errors import EngineError, NotFound, PreconditionFailed, RecordRefused
from engine.operations import Context
from engine.schema import (
    StackState,
    dump_state,
)

if TYPE_CHECKING:
    from engine.destroy.run import _Run


class _RecordWriter:
    """The trimmed record's writes: `If-Match` on the ETag last written (a 412 whose stored
    body is one this writer sent and lost the answer to is adopted); failures are logged and
    left to the final write. After a real conflict (someone else wrote) it writes no more."""

    def __init__(self, run: _Run, ctx: Context, stack: str, region: str, key: str, data: dict[str, Any], etag: str):
        self.run = run
        self.ctx = ctx
        self.stack = stack
        self.region = region
        self.key = key
        self.data = data  # the record as read under the lock; never mutated
        self.etag = etag
        self.conflict: str | None = None
        self.failed = False  # the last write did not land
        self._unconfirmed: list[bytes] = []

    def body(self, remaining: dict[str, Any]) -> bytes:
        snapshot = dict(self.data)  # {...state, resources, outputs: {}, imports/outputReads: undefined}
        snapshot["resources"] = dict(remaining)
        snapshot["outputs"] = {}
        snapshot.pop("imports", None)
        snapshot.pop("outputReads", None)
        snapshot["lastModified"] = max(_now_ms(), int(self.run.destroy.clock() * 1000))
        return dump_state(StackState.model_validate(snapshot), stack_name=self.stack, region=self.region)

    def save(self, remaining: dict[str, Any], *, final: bool = False) -> bool:
        if self.conflict:
            return False
        try:
            body = self.body(remaining)
        except RecordRefused as exc:  # cannot happen for a record the plan accepted; be loud
            self.conflict = str(exc)
            return False
        for _ in range(2):
            try:
                written = self.ctx.bucket.put(self.key, body, if_match=self.etag)
                self.etag = written.etag
                self.failed = False
                self._unconfirmed.clear()
                return True
            except (PreconditionFailed, NotFound):
                current = _read(self.ctx, self.key)
                if current is not None and (current.body == body or current.body in self._unconfirmed):
                    self.etag = current.etag  # our own write, answer lost: adopt it
                    self._unconfirmed.clear()
                    if current.body == body:
                        return True
                    continue
                self.conflict = (
                    f"{self.key} was changed by another writer during the destroy; this run stopped writing it "
                    f"and left it as that writer left it"
                )
                self.ctx.log("warning", self.conflict)
                return False
            except EngineError as exc:
                self._unconfirmed.append(body)
                self.failed = True
                what = "final" if final else "incremental"
                self.ctx.log("warning", f"{what} save of {self.key} failed ({exc}); the final write decides")
                return False
        return False

    def adopt_landed(self) -> bool:
        """True (and the ETag taken) when the stored record is a body an unconfirmed save of
        this writer sent: it landed after all."""
        if not self._unconfirmed:
            return False
        current = _read(self.ctx, self.key)
        if current is None or current.body not in self._unconfirmed:
            return False
        self.etag = current.etag
        self._unconfirmed.clear()
        self.failed = False
        return True


class _BackgroundSaver:
    """Writes the trimmed record from its own thread, always the newest snapshot, so the
    deletes keep starting while a write is on the wire. `drain()` waits for the last one."""

    def __init__(self, writer: _RecordWriter) -> None:
        self.writer = writer
        self._cond = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="destroy-record-writer", daemon=True)
        self._thread.start()

    def submit(self, remaining: dict[str, Any]) -> None:
        with self._cond:
            self._pending = dict(remaining)
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                snapshot, self._pending, self._busy = self._pending, None, True
            try:
                self.writer.save(snapshot)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def drain(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
