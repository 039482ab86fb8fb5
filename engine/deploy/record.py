"""A state record repaired for the diff preview exactly as seed 002 ("Malformed state
records") says: an unreadable container reads as empty and is named, an unreadable entry is
dropped and named, and a `exportNames` that is not a list reads as an empty export set.

cdkd diff never writes, so it repairs rather than refuses; the repairs that cdkd deploy
would refuse over are returned in `blocking` (the second and third of seed 002's five exit-3
conditions, raised only for the top-level stack).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.deploy.assembly import json_depth
from engine.deploy.assembly import kind_phrase as _kind
from engine.schema import SUPPORTED_VERSION

MAX_RECORD_DEPTH = 200  # far below Python's recursion limit, far above any real record

RESOURCES_MAP = "(resources map)"
ORPHANS_CONTAINER = "(orphans container)"


@dataclass(frozen=True)
class Repair:
    code: str  # stable: resources-missing, resources-not-object, resource-entry-dropped, ...
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass
class RepairedRecord:
    present: bool
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    outputs_readable: bool = True
    orphans: list[dict[str, Any]] = field(default_factory=list)
    export_names: set[str] | None = None  # None: not known (pre-v9 record)
    skipped_outputs: dict[str, str] = field(default_factory=dict)
    version: Any = None
    repairs: list[Repair] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # names of dropped rows and containers
    blocking: list[str] = field(default_factory=list)  # cdkd deploy refuses the record over these

    @property
    def newer_than_supported(self) -> bool:
        return isinstance(self.version, int) and not isinstance(self.version, bool) and self.version > SUPPORTED_VERSION


def _names(ids: list[str], limit: int) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def repair_record(data: Any, *, stack: str, region: str) -> RepairedRecord:
    """`data` is the decoded record (None for a stack with no record)."""
    if data is None:
        return RepairedRecord(present=False)
    show = f"cdkd state show '{stack}' --stack-region '{region}' --json"
    rec = RepairedRecord(present=True)
    if json_depth(data) > MAX_RECORD_DEPTH:
        rec.repairs.append(Repair("record-too-deep", f"the state record nests deeper than {MAX_RECORD_DEPTH} levels"))
        rec.dropped.append(RESOURCES_MAP)
        rec.blocking.append(f"{stack}: the state record nests too deeply to read; cdkd deploy cannot use it")
        return rec
    if not isinstance(data, dict):
        rec.repairs.append(Repair("record-not-object", f"the state record is {_kind(data)}, not an object; see {show}"))
        rec.dropped.append(RESOURCES_MAP)
        rec.blocking.append(f"{stack}: the state record is not a JSON object; cdkd deploy refuses it")
        return rec
    rec.version = data.get("version")

    # resources: a map of rows
    if "resources" not in data:
        rec.repairs.append(Repair("resources-missing", f"the record has no resources map; read as empty (see {show})"))
    else:
        resources = data["resources"]
        if not isinstance(resources, dict):
            rec.repairs.append(
                Repair(
                    "resources-not-object",
                    f"resources is {_kind(resources)}, not an object; read as empty for this preview. cdkd deploy "
                    f"and cdkd destroy refuse this record (see {show})",
                )
            )
            rec.dropped.append(RESOURCES_MAP)
            rec.blocking.append(f"{stack}: the resources map is unreadable; cdkd deploy refuses the record")
        else:
            dropped: list[str] = []
            emptied: list[str] = []
            torn_attrs: list[str] = []
            for lid, row in resources.items():
                if not isinstance(row, dict) or not isinstance(row.get("resourceType"), str) or not row["resourceType"]:
                    dropped.append(lid)
                    continue
                row = dict(row)
                if "properties" in row and not isinstance(row["properties"], dict):
                    emptied.append(lid)
                    row["properties"] = {}
                if "attributes" in row and not isinstance(row["attributes"], dict):
                    torn_attrs.append(lid)
                    row["attributes"] = {}
                rec.resources[lid] = row
            if dropped:
                rec.repairs.append(
                    Repair(
                        "resource-entry-dropped",
                        f"resources entries that are not resource records were dropped: {_names(dropped, 10)} "
                        f"(see {show})",
                    )
                )
                rec.dropped.extend(dropped)
                rec.blocking.append(
                    f"{stack}: resources entries {_names(dropped, 10)} are not resource records; "
                    "cdkd deploy refuses the record"
                )
            if emptied:
                rec.repairs.append(
                    Repair(
                        "properties-repaired",
                        f"the properties map of {_names(emptied, 5)} is not an object and was read as empty: the rows "
                        f"for them are wrong, do not act on this preview; cdkd deploy refuses the record (see {show})",
                    )
                )
                rec.blocking.append(
                    f"{stack}: the properties map of {_names(emptied, 5)} is unreadable; cdkd deploy refuses the record"
                )
            if torn_attrs:
                rec.repairs.append(
                    Repair(
                        "attributes-repaired",
                        f"the attributes map of {_names(torn_attrs, 5)} is not an object and was read as empty "
                        f"(see {show})",
                    )
                )

    # outputs: absent reads as empty silently
    if "outputs" in data:
        outputs = data["outputs"]
        if isinstance(outputs, dict):
            rec.outputs = dict(outputs)
        else:
            rec.outputs_readable = False
            rec.repairs.append(
                Repair(
                    "outputs-not-object",
                    f"outputs is {_kind(outputs)}, not an object; the Outputs section is omitted. cdkd deploy and "
                    f"cdkd destroy refuse this record (see {show})",
                )
            )
            rec.blocking.append(f"{stack}: the outputs bag is unreadable; cdkd deploy refuses the record")

    # orphans: a list; absent reads as empty silently
    if "orphans" in data:
        orphans = data["orphans"]
        if not isinstance(orphans, list):
            rec.repairs.append(
                Repair(
                    "orphans-not-list",
                    f"orphans is {_kind(orphans)}, not a list; no rollback orphan is adopted in this preview. "
                    f"cdkd deploy, destroy, rollback, import and scrub refuse this record (see {show})",
                )
            )
            rec.dropped.append(ORPHANS_CONTAINER)
            rec.blocking.append(f"{stack}: the orphans field is not a list; cdkd deploy refuses the record")
        else:
            unreadable: list[str] = []
            kept_torn: list[str] = []
            for i, entry in enumerate(orphans):
                if not isinstance(entry, dict) or not isinstance(entry.get("resourceType"), str):
                    name = entry.get("logicalId") if isinstance(entry, dict) else None
                    unreadable.append(name if isinstance(name, str) else f"orphans[{i}]")
                    continue
                if ("properties" in entry and not isinstance(entry["properties"], dict)) or (
                    "attributes" in entry and not isinstance(entry["attributes"], dict)
                ):
                    name = entry.get("logicalId")
                    kept_torn.append(name if isinstance(name, str) else f"orphans[{i}]")
                rec.orphans.append(entry)
            if unreadable:
                rec.repairs.append(
                    Repair(
                        "orphan-record-dropped",
                        f"rollback-orphan records that are not resource records were dropped: "
                        f"{_names(unreadable, 10)} (see {show})",
                    )
                )
                rec.dropped.extend(unreadable)
                rec.blocking.append(
                    f"{stack}: rollback-orphan records {_names(unreadable, 10)} are unreadable; "
                    "cdkd deploy refuses the record"
                )
            if kept_torn:
                rec.repairs.append(
                    Repair(
                        "orphan-row-malformed",
                        f"rollback-orphan rows {_names(kept_torn, 5)} hold a properties or attributes value that is "
                        f"not an object; cdkd deploy refuses the record (see {show})",
                    )
                )
                rec.blocking.append(
                    f"{stack}: rollback-orphan rows {_names(kept_torn, 5)} are malformed; "
                    "cdkd deploy refuses the record"
                )

    # exportNames: a list; not a list reads as the EMPTY export set (fail closed)
    if "exportNames" in data:
        names = data["exportNames"]
        if isinstance(names, list):
            rec.export_names = {n for n in names if isinstance(n, str)}
        else:
            rec.export_names = set()
            if rec.outputs_readable:
                rec.repairs.append(
                    Repair(
                        "export-names-not-list",
                        f"exportNames of stack {stack} in {region} is {_kind(names)}, not a list; no stored output "
                        "is treated as an export",
                    )
                )
    skipped = data.get("skippedOutputs")
    if isinstance(skipped, dict):
        rec.skipped_outputs = {k: v for k, v in skipped.items() if isinstance(v, str)}
    return rec
