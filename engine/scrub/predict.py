"""What cdkd's next diff reports for each value a scrub rewrites, computed with the plan
engine (engine.deploy.plan: cdkd's classification, replacement.py's hand rules and
cfn-lint's create-only properties) run against the record as the scrub will write it.

With the app's template (an assembly) the diff is the real one. Without it, the template
is taken to be the record as it was last deployed: every row's properties as the record
holds them now (literals), every output as stored. A rewrite there reads as a change
wherever the app's template holds the value literally, so the prediction errs toward a
change, never toward "no change" (scrub with the assembly to know exactly).

Each rewritten path gets one verdict: `no change` (the diff does not compare it, or it
compares equal), `update`, or `replacement` (the diff sets requiresReplacement).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.deploy.plan import METADATA_TYPE, compute_plan

NO_CHANGE, UPDATE, REPLACEMENT = "no change", "update", "replacement"
TEMPLATE_FROM_RECORD = "the template as the record was last deployed (each value as the record holds it now)"


def template_from_record(data: dict[str, Any]) -> dict[str, Any]:
    """The template a record was deployed from, as far as the record can say: its rows'
    properties and policies as literals, its outputs as literal values."""
    resources: dict[str, Any] = {}
    rows = data.get("resources") if isinstance(data.get("resources"), dict) else {}
    for lid, row in rows.items():
        if not isinstance(row, dict) or not isinstance(row.get("resourceType"), str):
            continue
        res: dict[str, Any] = {"Type": row["resourceType"]}
        if isinstance(row.get("properties"), dict):
            res["Properties"] = row["properties"]
        for attribute, stored in (("DeletionPolicy", "deletionPolicy"), ("UpdateReplacePolicy", "updateReplacePolicy")):
            if row.get(stored) is not None:
                res[attribute] = row[stored]
        resources[lid] = res
    outputs = data.get("outputs") if isinstance(data.get("outputs"), dict) else {}
    return {"Resources": resources, "Outputs": {k: {"Value": v} for k, v in outputs.items()}}


def _no_ssm(name: str) -> str | None:
    raise LookupError("no SSM reads for a record's own values")  # kept as written, as cdkd keeps a secret


def predict(
    rewrites: list[dict[str, Any]],
    after: dict[str, Any],
    *,
    before: dict[str, Any],
    stack: str,
    region: str,
    account: str,
    template: dict[str, Any] | None = None,
    parameters: dict[str, str] | None = None,
    ssm: Callable[[str], str | None] | None = None,
    exports: Any = None,
) -> list[dict[str, Any]]:
    """One entry per rewrite: {"path", "logicalId"?, "property"?, "diff", "resourceType"?}."""
    if not rewrites:
        return []
    real = template is not None
    plan = compute_plan(
        template if real else template_from_record(before),
        after,
        stack_name=stack,
        region=region,
        account=account,
        parameters=parameters if real else None,
        ssm=ssm if real else _no_ssm,
        exports=exports,
        top_level=False,
    )
    changes = {c["logicalId"]: c for c in plan.node["changes"]}
    outputs = {row.get("name"): row for row in plan.node["outputChanges"]}
    rows = after.get("resources") if isinstance(after.get("resources"), dict) else {}
    out: list[dict[str, Any]] = []
    for r in rewrites:
        path = r["path"]
        entry: dict[str, Any] = {"path": list(path), "diff": NO_CHANGE}
        if len(path) >= 4 and path[0] == "resources" and path[2] == "properties":
            lid, key = str(path[1]), str(path[3])
            row = rows.get(lid) if isinstance(rows.get(lid), dict) else {}
            entry.update(logicalId=lid, property=key, resourceType=row.get("resourceType"))
            change = changes.get(lid)
            if change is not None and change.get("resourceType") != METADATA_TYPE:
                for pc in change.get("propertyChanges") or []:
                    if pc.get("path") == key:
                        entry["diff"] = REPLACEMENT if pc.get("requiresReplacement") else UPDATE
        elif len(path) >= 2 and path[0] == "outputs":
            entry["output"] = str(path[1])
            if str(path[1]) in outputs and outputs[str(path[1])].get("changeType") != "REMOVE":
                entry["diff"] = UPDATE
        out.append(entry)
    return out


def replacements(predicted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The resources cdkd's next diff replaces because of the rewrite, one entry each."""
    seen: dict[str, dict[str, Any]] = {}
    for p in predicted:
        if p["diff"] == REPLACEMENT:
            item = seen.setdefault(
                p["logicalId"], {"logicalId": p["logicalId"], "resourceType": p.get("resourceType"), "properties": []}
            )
            if p["property"] not in item["properties"]:
                item["properties"].append(p["property"])
    return list(seen.values())
