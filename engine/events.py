"""cdkd's deployments/ event store. INTERFACE STUB (read side): implemented by the keys helper."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    command: str
    cdkd_version: str
    started_at: str
    finished_at: str
    result: str  # SUCCEEDED | FAILED | UNKNOWN
    event_count: int


def parse_run_index(body: bytes) -> list[RunSummary]:
    """The runs of an index.json, newest first. Raises ValueError with a readable message."""
    raise NotImplementedError


def parse_event_stream(body: bytes) -> list[dict]:
    """The events of a {runId}.jsonl; blank and torn lines skipped."""
    raise NotImplementedError
