"""How the plans of the whole-bucket operations read on the request and operation pages:
`state-migrate` (the keys to copy, those already there, the remove-legacy choice) and
`events-prune` (the runs deleted and kept). From the stored plan only: no S3 call."""

from __future__ import annotations

from typing import Any

from stacks.models import OperationKind


def _data(plan: dict[str, Any]) -> dict[str, Any]:
    data = plan.get("data") if isinstance(plan, dict) else None
    return data if isinstance(data, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def migrate_table(plan: dict[str, Any]) -> dict[str, Any] | None:
    if plan.get("kind") != OperationKind.STATE_MIGRATE:
        return None
    data = _data(plan)
    copy = [e for e in data.get("copy_keys") or [] if isinstance(e, dict) and isinstance(e.get("key"), str)]
    same = [k for k in data.get("same_keys") or [] if isinstance(k, str)]
    copy_count, same_count = _int(data.get("copy_count")), _int(data.get("same_count"))
    return {
        "source": str(data.get("source") or ""),
        "destination": str(data.get("destination") or ""),
        "create_destination": data.get("create_destination") is True,
        "remove_legacy": data.get("remove_legacy") is True,
        "copy": copy,
        "copy_more": max(copy_count - len(copy), 0),
        "copy_count": copy_count,
        "same": same,
        "same_more": max(same_count - len(same), 0),
        "same_count": same_count,
        "bytes": _int(data.get("bytes")),
    }


def prune_table(plan: dict[str, Any]) -> dict[str, Any] | None:
    if plan.get("kind") != OperationKind.EVENTS_PRUNE:
        return None
    data = _data(plan)
    doomed = [e for e in data.get("doomed") or [] if isinstance(e, dict) and isinstance(e.get("run_id"), str)]
    kept = [r for r in data.get("kept") or [] if isinstance(r, str)]
    return {
        "keep": data.get("keep"),
        "older_than_days": data.get("older_than_days"),
        "deleted": [{"run_id": e["run_id"], "index_only": not e.get("key")} for e in doomed],
        "kept": kept,
    }


def tables(plan: dict[str, Any]) -> dict[str, Any]:
    return {"migrate_table": migrate_table(plan), "prune_table": prune_table(plan)}


def other_changes(kind: Any, changes: list) -> list:
    """The plan's change lines minus those the tables above print (each change once)."""
    prefix = {OperationKind.STATE_MIGRATE: "copy ", OperationKind.EVENTS_PRUNE: "delete run "}.get(kind)
    if prefix is None:
        return changes
    return [c for c in changes if not (c.text.startswith(prefix) and not c.where)]
