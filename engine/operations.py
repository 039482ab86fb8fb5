"""The shape every bucket-changing operation has, so the Django pipeline (stacks/operations.py)
can request, approve, run and audit any of them the same way.

An operation kind is a module-level `OperationSpec` registered in `SPECS`:

- `plan(ctx) -> Plan`: read what is there now and say exactly what `execute` will do. Pure
  reads; no lock. The plan names the ETag it was computed from (`plan.etag`), which the
  approval binds to.
- `execute(ctx, plan) -> Outcome`: do it. It takes the stack's cdkd lock itself where the
  operation needs one (`ctx.held_lock(...)`), re-reads the record and raises `StalePlan`
  when its ETag is no longer `plan.etag`, writes only with `If-Match`/`If-None-Match`, and
  reports progress and log lines through the context. Expected refusals raise
  `OperationRefused` (or a subclass) with a one-line message; AWS failures raise
  `EngineError`s. It never touches Django.

A second `execute` of the same operation id must be safe: the lock owner string carries the
operation id, so a re-run adopts the lock its crashed predecessor left behind.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.backend import StateBucket
from engine.errors import EngineError
from engine.keys import KeyLayout


class OperationRefused(EngineError):
    """The operation will not run, for a reason a person can act on (one line)."""


class StalePlan(OperationRefused):
    """The record changed after the plan was computed and approved."""

    def __init__(self, key: str, planned: str | None, found: str | None) -> None:
        super().__init__(
            f"plan is stale: {key} is at ETag {found or '(deleted)'} but the plan was computed from "
            f"{planned or '(no record)'}; compute a new plan and have it approved again"
        )


@dataclass
class Plan:
    """What will be done. `data` is JSON-serialisable; the digest covers everything here."""

    kind: str
    stack: str
    region: str | None
    etag: str | None  # the ETag the plan was computed from (record, or lock for force-unlock)
    summary: str
    changes: list[Any] = field(default_factory=list)  # one entry per change, for people
    warnings: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # what execute needs beyond the above

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "stack": self.stack,
            "region": self.region,
            "etag": self.etag,
            "summary": self.summary,
            "changes": self.changes,
            "warnings": self.warnings,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Plan:
        return cls(
            **{k: value.get(k) for k in ("kind", "stack", "region", "etag", "summary")},
            changes=value.get("changes") or [],
            warnings=value.get("warnings") or [],
            data=value.get("data") or {},
        )

    @property
    def digest(self) -> str:
        canonical = json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class Outcome:
    status: str  # "succeeded" | "partial" | "failed"
    summary: str
    etag_before: str | None = None
    etag_after: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


LogFn = Callable[[str, str], None]  # (level, message); level in info/warning/error
ProgressFn = Callable[[int, int, dict[str, Any] | None], None]  # (done, total, detail)


@dataclass
class Context:
    """Everything an operation may use. Built by the pipeline (or a test) per run."""

    bucket: StateBucket
    layout: KeyLayout
    stack: str
    region: str | None  # None: a legacy record with no region
    params: dict[str, Any]
    operation_id: str  # unique per Operation; part of the lock owner string
    person: str  # who asked (username, or the OS user for the CLI)
    host: str = "cdkd-admin"
    lock_ttl_ms: int = 30 * 60 * 1000  # cdkd's TTL; tests shorten it
    log: LogFn = lambda level, message: None  # noqa: E731
    progress: ProgressFn = lambda done, total, detail=None: None  # noqa: E731
    cancel_event: threading.Event = field(default_factory=threading.Event)
    # Who imports (stack, region): (consumers, unreadable). Set by the pipeline so a PLAN
    # reads its mirror instead of every record of the bucket; execute always reads the bucket.
    consumers: Callable[[str, str], tuple[list[str], list[str]]] | None = None
    # Which other records hold these physical ids (stack, region, ids) -> (held, unreadable):
    # the same, for destroy's journal-only protection rule (engine.destroy.scan_holders).
    holders: Callable[[str, str, set[str]], tuple[dict[str, list[str]], list[str]]] | None = None

    @property
    def lock_owner(self) -> str:
        return f"cdkd-admin:{self.person}@{self.host}:{self.operation_id}"

    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @contextmanager
    def held_lock(self, operation: str) -> Iterator[Any]:
        """Hold the stack's cdkd lock (renewed in the background) for the block."""
        from engine import locks

        lock = locks.StackLock(
            self.bucket,
            self.layout.lock_key(self.stack, self.region),
            owner=self.lock_owner,
            operation=operation,
            ttl_ms=self.lock_ttl_ms,
            on_warning=lambda message: self.log("warning", message),
        )
        lock.acquire()
        lock.start_renewal()
        try:
            yield lock
        finally:
            lock.release()


class OperationSpec(Protocol):
    kind: str
    label: str
    cancellable: bool

    def plan(self, ctx: Context) -> Plan: ...

    def execute(self, ctx: Context, plan: Plan) -> Outcome: ...


SPECS: dict[str, OperationSpec] = {}


def register(spec: OperationSpec) -> OperationSpec:
    SPECS[spec.kind] = spec
    return spec


def spec_for(kind: str) -> OperationSpec:
    _load()
    try:
        return SPECS[kind]
    except KeyError:
        raise OperationRefused(f"unknown operation kind {kind!r}") from None


def _load() -> None:
    """Import the modules that register specs (kept lazy so importing this is cheap)."""
    import importlib

    for module in (
        "engine.forceunlock",
        "engine.orphan",
        "engine.restore",
        "engine.destroy",
        "engine.scrub",
        "engine.deploy.operation",
        "engine.refresh",
        "engine.migrate",
        "engine.prune",
    ):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
