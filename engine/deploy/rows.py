"""What a deploy writes (deploy-engine.md 1.5, 1.9, 3.1): a row's recorded dependencies and
fields in cdkd's order, the outputs and export aliases of the final save, and the exports
index entries of this stack."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from engine.deploy.intrinsics import NO_VALUE, ResolveError, Resolver
from engine.errors import EngineError, NotFound, PreconditionFailed
from engine.operations import Context
from engine.schema import js_stringify

EXPORTS_ATTEMPTS = 5
_SUB_RE = re.compile(r"\$\{([^}]*)\}")


def now_ms() -> int:
    return int(time.time() * 1000)


# --- template helpers -----------------------------------------------------------------------


def template_dependencies(resource: dict[str, Any], resource_ids: set[str], *, sub_variables: bool = True) -> list[str]:
    """cdkd's TemplateParser.extractDependencies (1.5), in first-seen order: DependsOn, then
    Ref / Fn::GetAtt (array form) / Fn::Sub placeholders in Properties and Metadata; only
    names of template resources (parameters and pseudo parameters are not dependencies).

    `sub_variables=False` leaves out what only an `Fn::Sub` variable map reads: the record
    cdkd 0.284.40 wrote holds no `dependencies` for a parameter whose value is
    `Fn::Sub [body, {TopicArn: {Ref: Topic}}]` (the sample's Param165332EC), so the recorded
    list is computed that way, while the execution order still waits for those reads."""
    seen: list[str] = []

    def add(name: Any) -> None:
        if isinstance(name, str) and name in resource_ids and name not in seen:
            seen.append(name)

    depends = resource.get("DependsOn")
    for name in [depends] if isinstance(depends, str) else depends if isinstance(depends, list) else []:
        add(name)

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if len(value) == 1:
                key, arg = next(iter(value.items()))
                if key == "Ref" and isinstance(arg, str):
                    if not arg.startswith("AWS::"):
                        add(arg)
                    return
                if key == "Fn::GetAtt" and isinstance(arg, list) and arg:
                    add(arg[0])
                    return
                if key == "Fn::Sub":
                    body, variables = arg, {}
                    if isinstance(arg, list) and len(arg) == 2 and isinstance(arg[1], dict):
                        body, variables = arg
                    if isinstance(body, str):
                        for m in _SUB_RE.finditer(body):
                            name = m.group(1)
                            if name.startswith("!") or name.startswith("AWS::") or name in variables:
                                continue
                            add(name.split(".", 1)[0])
                    if sub_variables and isinstance(variables, dict):
                        for v in variables.values():
                            walk(v)
                    return
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(resource.get("Properties") or {})
    walk(resource.get("Metadata") or {})
    return seen


def build_row(
    *,
    physical_id: str,
    resource_type: str,
    properties: dict[str, Any],
    attributes: dict[str, Any] | None,
    dependencies: list[str],
    template_resource: dict[str, Any],
    provisioned_by: str,
) -> dict[str, Any]:
    """A row in cdkd's field order (3.1): physicalId, resourceType, properties, attributes,
    dependencies, deletionPolicy, updateReplacePolicy, provisionedBy."""
    row: dict[str, Any] = {"physicalId": physical_id, "resourceType": resource_type, "properties": properties}
    if attributes is not None:
        row["attributes"] = attributes
    if dependencies:
        row["dependencies"] = dependencies
    for attribute, key in (("DeletionPolicy", "deletionPolicy"), ("UpdateReplacePolicy", "updateReplacePolicy")):
        if isinstance(template_resource.get(attribute), str):
            row[key] = template_resource[attribute]
    row["provisionedBy"] = provisioned_by
    return row


def resolve_outputs(
    template: dict[str, Any], resolver: Resolver, warn: Callable[[str], None]
) -> tuple[dict[str, Any], list[str]]:
    """cdkd's two-pass resolveOutputs (1.9): each output's value, then each export name as an
    alias in the same map (skipped when it names another output). Returns (outputs, exportNames)."""
    ctx = resolver.ctx
    values: dict[str, Any] = {}
    exported: list[tuple[str, Any]] = []
    for key, output in (template.get("Outputs") or {}).items():
        if not isinstance(output, dict):
            continue
        cond = output.get("Condition")
        if isinstance(cond, str) and not ctx.conditions.get(cond, False):
            continue
        try:
            value = resolver.resolve(output.get("Value"))
        except ResolveError as exc:
            warn(f"output {key} could not be resolved ({exc}); it is not recorded")
            continue
        if value is NO_VALUE:
            continue
        values[key] = value
        export = output.get("Export")
        if isinstance(export, dict) and "Name" in export:
            exported.append((key, export["Name"]))
    names: list[str] = []
    for key, raw_name in exported:
        try:
            name = resolver.resolve(raw_name)
        except ResolveError as exc:
            warn(f"the export name of output {key} could not be resolved ({exc}); it is not exported")
            continue
        if not isinstance(name, str):
            continue
        if name != key and name in values:
            warn(f"export name {name} of output {key} collides with another output's name; it is not exported")
            continue
        values[name] = values[key]
        names.append(name)
    return values, names


def update_exports_index(ctx: Context, stack: str, region: str, exports: dict[str, Any]) -> str | None:
    """cdkd's exportIndexStore.updateForStack with exports only (1.9): drop this stack's
    entries, add one per export, write with If-Match (If-None-Match for a new index) only when
    the map changed; a 412 retries (5 attempts). Best effort: returns a warning or None."""
    key = ctx.layout.exports_index_key(region)
    delay = 0.1
    for _ in range(EXPORTS_ATTEMPTS):
        try:
            stored = ctx.bucket.get(key)
            data = json.loads(stored.body)
            etag: str | None = stored.etag
        except NotFound:
            data, etag = {"indexVersion": 1, "region": region, "exports": {}}, None
        except (EngineError, ValueError) as exc:
            return f"the exports index {key} could not be read ({exc}); left as it is"
        if not isinstance(data, dict) or not isinstance(data.get("exports"), dict):
            return f"the exports index {key} has no exports map; left as it is"
        if isinstance(data.get("indexVersion"), int) and data["indexVersion"] > 1:
            return f"the exports index {key} has indexVersion {data['indexVersion']} (a newer cdkd); left as it is"
        current = data["exports"]
        updated = {
            n: e
            for n, e in current.items()
            if not (isinstance(e, dict) and e.get("producerStack") == stack and e.get("producerRegion") == region)
        }
        for name, value in exports.items():
            updated[name] = {"value": value, "producerStack": stack, "producerRegion": region}
        if updated == current:
            return None
        if etag is None and not exports:
            return None
        body = dict(data)
        body["exports"] = updated
        body["lastModified"] = now_ms()
        raw = js_stringify(body, indent=2).encode("utf-8", errors="backslashreplace")
        try:
            if etag is None:
                ctx.bucket.put(key, raw, if_none_match=True)
            else:
                ctx.bucket.put(key, raw, if_match=etag)
            return None
        except PreconditionFailed:
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        except EngineError as exc:
            return f"could not update the exports index {key}: {exc}"
    return f"gave up updating the exports index {key} after {EXPORTS_ATTEMPTS} attempts"
