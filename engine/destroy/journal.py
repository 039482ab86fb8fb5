"""Resources only the rollback journal records (seed 004, "Rolling back a CREATE that failed
mid-flight"; reference §10.9): a failed CREATE whose provider proved it made the resource
(the journal's failed op carries a physical id) while no state row holds that physical id.
cdkd's destroy deletes them FIRST, on the journaled policy, before the journal is removed.

The journal's format is `engine.deploy.rollback`'s. A journal-only row is keyed
`journal:<logicalId>` (or `journal:<logicalId>#2`, ... when failed attempts of one id made
several resources), so it never collides with a state row. Its policy is the op's
`deletionPolicy`; absent, CloudFormation's default (Snapshot for an RDS instance or cluster,
Delete otherwise). An id a later segment superseded (`supersededLogicalIds`) or that
`cdkd import` adopted (`importedResources`) is not this stack's to delete.
"""

from __future__ import annotations

import json
from typing import Any

from engine.backend import StoredObject

JOURNAL_PREFIX = "journal:"
SNAPSHOT_BY_DEFAULT = frozenset({"AWS::RDS::DBInstance", "AWS::RDS::DBCluster"})


def _ids(value: Any) -> set[str]:
    if isinstance(value, list):
        out: set[str] = set()
        for item in value:
            if isinstance(item, str):
                out.add(item)
            elif isinstance(item, dict) and isinstance(item.get("logicalId"), str):
                out.add(item["logicalId"])
        return out
    return set()


def journal_only_rows(stored: StoredObject | None, state_rows: dict[str, Any]) -> tuple[dict[str, dict], list[str]]:
    """({key: row} in journal order, warnings). `row` is shaped like a state row
    (resourceType, physicalId, properties, provisionedBy, deletionPolicy) plus `logicalId`.
    An unreadable journal yields no rows and a warning: nothing is deleted on its strength."""
    if stored is None:
        return {}, []
    try:
        data = json.loads(stored.body)
    except (ValueError, RecursionError):
        return {}, ["the rollback journal is not valid JSON: resources only it records are not deleted"]
    segments = data.get("segments") if isinstance(data, dict) else None
    if not isinstance(segments, list):
        return {}, ["the rollback journal has no segments list: resources only it records are not deleted"]
    version = data.get("journalVersion")
    if isinstance(version, int | float) and not isinstance(version, bool) and version > 1:
        return {}, [f"the rollback journal has journalVersion {version} (a newer cdkd): its resources are not read"]
    held = {
        row.get("physicalId")
        for row in state_rows.values()
        if isinstance(row, dict) and isinstance(row.get("physicalId"), str)
    }
    rows: dict[str, dict] = {}
    seen: set[tuple[str, str]] = set()
    for index, segment in enumerate(segments):
        if not isinstance(segment, dict):
            continue
        later = segments[index + 1 :]
        not_ours = _ids(segment.get("importedResources"))
        for newer in later:
            if isinstance(newer, dict):
                not_ours |= _ids(newer.get("supersededLogicalIds")) | _ids(newer.get("importedResources"))
        failed = segment.get("failedOperations")
        for op in failed if isinstance(failed, list) else []:
            if not isinstance(op, dict) or op.get("changeType") != "CREATE":
                continue
            lid, pid, rtype = op.get("logicalId"), op.get("physicalId"), op.get("resourceType")
            if not (isinstance(lid, str) and lid and isinstance(pid, str) and pid.strip() and isinstance(rtype, str)):
                continue  # a CREATE that proved nothing made no resource cdkd knows of
            if pid in held or lid in not_ours or (lid, pid) in seen:
                continue
            seen.add((lid, pid))
            policy = op.get("deletionPolicy")
            if not isinstance(policy, str):
                policy = "Snapshot" if rtype in SNAPSHOT_BY_DEFAULT else "Delete"
            properties = op.get("attemptedProperties")
            key = JOURNAL_PREFIX + lid
            n = 2
            while key in rows:
                key, n = f"{JOURNAL_PREFIX}{lid}#{n}", n + 1
            rows[key] = {
                "logicalId": lid,
                "resourceType": rtype,
                "physicalId": pid,
                "properties": properties if isinstance(properties, dict) else {},
                "provisionedBy": op.get("provisionedBy") if isinstance(op.get("provisionedBy"), str) else None,
                "deletionPolicy": policy,
            }
    return rows, []
