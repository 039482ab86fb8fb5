"""cdkd's event store for the demo: one run's JSONL events and the stack's index.json."""

from __future__ import annotations

import random
from typing import Any

from demo.accounts import (
    CDKD_VERSION,
)
from demo.formats import iso, run_id

# --------------------------------------------------------------------------------------
# Event history
# --------------------------------------------------------------------------------------


class RunRecorder:
    """One cdkd run's events and its index summary, timed from `start_ms`."""

    def __init__(
        self, stack: str, region: str, command: str, start_ms: int, rng: random.Random, version: str = CDKD_VERSION
    ):
        self.stack, self.region, self.command = stack, region, command
        self.rng = rng
        self.clock = start_ms
        self.start_ms = start_ms
        self.run_id = run_id(start_ms, rng)
        self.version = version
        self.counts = {"created": 0, "updated": 0, "deleted": 0}
        self.failed = 0
        self.skipped = 0
        self.events: list[dict[str, Any]] = [
            {
                "timestamp": iso(start_ms),
                "eventType": "RUN_STARTED",
                "stackName": stack,
                "command": command,
                "region": region,
                "cdkdVersion": version,
            }
        ]
        self.finished_ms: int | None = None

    def _tick(self, lo: int = 15, hi: int = 400) -> int:
        self.clock += self.rng.randint(lo, hi)
        return self.clock

    def resource(
        self,
        operation: str,
        lid: str,
        rtype: str,
        physical: str | None = None,
        *,
        provisioned_by: str | None = "sdk",
        outcome: str = "ok",
        reason: str = "",
        error: dict[str, str] | None = None,
        stack: str | None = None,
    ) -> None:
        base: dict[str, Any] = {
            "stackName": stack or self.stack,
            "operation": operation,
            "logicalId": lid,
            "resourceType": rtype,
        }
        if provisioned_by:
            base["provisionedBy"] = provisioned_by
        started = self._tick()
        self.events.append({"timestamp": iso(started), "eventType": "RESOURCE_STARTED", **base})
        done = self._tick(200, 9000)
        event: dict[str, Any] = {"timestamp": iso(done), **base}
        if outcome == "ok":
            event["eventType"] = "RESOURCE_SUCCEEDED"
            if physical:
                event["physicalId"] = physical
            event["durationMs"] = done - started
            self.counts[{"CREATE": "created", "UPDATE": "updated", "DELETE": "deleted"}[operation]] += 1
        elif outcome == "retain":
            event["eventType"] = "RESOURCE_RETAINED"
            if physical:
                event["physicalId"] = physical
        elif outcome == "skip":
            event["eventType"] = "RESOURCE_SKIPPED"
            if physical:
                event["physicalId"] = physical
            event["reason"] = reason
            self.skipped += 1
        else:
            event["eventType"] = "RESOURCE_FAILED"
            event["durationMs"] = done - started
            event["error"] = error or {"name": "Error", "message": "failed"}
            self.failed += 1
        # Keep the event's own key order close to cdkd's: timestamp, eventType, then the rest.
        self.events.append({"timestamp": event.pop("timestamp"), "eventType": event.pop("eventType"), **event})

    def finish(self, error: dict[str, str] | None = None) -> int:
        end = self._tick(50, 300)
        self.finished_ms = end
        result = "FAILED" if (self.failed or self.skipped or error) else "SUCCEEDED"
        counts: dict[str, int] = dict(self.counts)
        if self.failed:
            counts["failed"] = self.failed
        if self.skipped:
            counts["skipped"] = self.skipped
        event: dict[str, Any] = {
            "timestamp": iso(end),
            "eventType": "RUN_FINISHED",
            "stackName": self.stack,
            "result": result,
        }
        if self.command == "deploy":
            event["durationMs"] = end - self.start_ms
        event["counts"] = counts
        if result == "FAILED" and (error or self.failed):
            event["error"] = error or next(e["error"] for e in self.events if e["eventType"] == "RESOURCE_FAILED")
        self.events.append(event)
        return end

    def summary(self) -> dict[str, Any]:
        assert self.finished_ms is not None
        return {
            "runId": self.run_id,
            "command": self.command,
            "cdkdVersion": self.version,
            "startedAt": iso(self.start_ms),
            "finishedAt": iso(self.finished_ms),
            "result": self.events[-1]["result"],
            "eventCount": len(self.events),
        }


def run_index(stack: str, region: str, runs: list[RunRecorder]) -> dict[str, Any]:
    """index.json: newest first, at most 20."""
    ordered = sorted((r for r in runs if r.finished_ms is not None), key=lambda r: r.run_id, reverse=True)[:20]
    return {
        "indexVersion": 1,
        "stackName": stack,
        "region": region,
        "runs": [r.summary() for r in ordered],
        "lastModified": max(r.finished_ms or 0 for r in ordered) + 40,
    }


# --------------------------------------------------------------------------------------
