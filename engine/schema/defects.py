"""The malformed-container rules (`state_defects`) and the other blocking defects of a
state.json body, each with a message naming what is wrong, where, and the commands that
repair it."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from engine.schema.decode import (
    BIGINT_MAX,
    INT_MAX,
    Decoded,
    _is_number,
    _is_object,
    _row_is_readable,
    describe_region_value_kind,
    in_range,
)
from engine.schema.models import Defect, StackState
from engine.schema.versions import SUPPORTED_VERSION, _version_verdict

# --- messages -----------------------------------------------------------------------------

_INERT_REGION = re.compile(r"[a-z0-9][a-z0-9-]*")
_ACCOUNT_ID = re.compile(r"\d{12}")


def _quoted(text: str | None, hole: str) -> str:
    """`text` shell-quoted for a pasteable command, or the hole when there is none or it
    holds characters a terminal would not paste as typed (control characters)."""
    if not text or len(text) > 1024 or not text.isprintable():
        return hole
    return shlex.quote(text)


@dataclass(frozen=True)
class _Where:
    """What a message can name: the stack, region and (in the app) account, shell-quoted
    so each command pastes as it is; holes where they are not known. With an account the
    commands are this app's (`python manage.py cdkd ... --account ID`), else cdkd's."""

    stack: str | None
    region: str | None
    legacy: bool
    account: str | None = None

    @property
    def stack_arg(self) -> str:
        return _quoted(self.stack, "'<stack>'")

    @property
    def _app(self) -> bool:
        return bool(self.account and _ACCOUNT_ID.fullmatch(self.account))

    @property
    def region_flag(self) -> str:
        account = f" --account {self.account}" if self._app else ""
        if self.legacy:
            return account  # a legacy record is selected by leaving --stack-region out
        if self.region and _INERT_REGION.fullmatch(self.region):
            return f"{account} --stack-region {self.region}"
        return f"{account} --stack-region {_quoted(self.region, chr(39) + '<region>' + chr(39))}"

    @property
    def cdkd(self) -> str:
        return "python manage.py cdkd" if self._app else "cdkd"

    def show(self) -> str:
        if self.legacy and not self._app:
            return "read the legacy object <prefix>/<stack>/state.json from the state bucket directly"
        return f"inspect the stored record with `{self.cdkd} state show {self.stack_arg}{self.region_flag} --json`"

    def _then_yes(self) -> str:
        return " (it prints the plan; add --yes to run it)" if self._app else ""

    def ways_out(self, *, resource: str | None = None) -> str:
        text = (
            f"To repair it, {self.show()}, fix the JSON by hand and upload it as a new version of "
            f"state.json (the only way that keeps the resources under cdkd's management); or drop the whole "
            f"record, leaving every live AWS resource standing, with `{self.cdkd} state orphan {self.stack_arg}"
            f"{self.region_flag}`{self._then_yes()}, which reads `resources` nowhere, so this damage does not stop it"
        )
        if resource is not None and not self.legacy:
            rid = _quoted(resource, "'<logicalId>'")
            text += (
                f"; or drop just this resource (its AWS resource stays live) with `{self.cdkd} state orphan "
                f"{self.stack_arg}{self.region_flag} --resource {rid}`"
            )
        return text + "."


# `cdkd state orphan <stack>` (whole record) is not in this list: it is the way out.
_BLOCKS = (
    "cdkd deploy, destroy, import, rollback, scrub and `cdkd orphan <constructPath>` refuse this record, and so do "
    "this app's destroy and scrub"
)


def _kind_phrase(value: Any) -> str:
    return describe_region_value_kind(value)


# --- the malformed-container rules --------------------------------------------------------


def state_defects(
    data: Any,
    *,
    stack_name: str | None = None,
    region: str | None = None,
    legacy: bool = False,
    account: str | None = None,
) -> list[Defect]:
    """Every blocking defect of a decoded state body, per the seeds' malformed-container
    rules (reference §10.2). `data` is the decoded JSON (or a StackState); never raises."""
    if isinstance(data, StackState):
        data = data.to_json_value()
    where = _Where(stack_name, region, legacy, account)
    if not isinstance(data, dict):
        return [
            Defect(
                "root-not-object",
                "",
                f"state.json holds {_kind_phrase(data)}, not a JSON object, so nothing in it can be read; "
                f"{_BLOCKS}. {where.ways_out()}",
            )
        ]
    defects: list[Defect] = []
    if "version" in data:
        verdict, _ = _version_verdict(data["version"])
        if verdict == "invalid":
            defects.append(
                Defect(
                    "version-invalid",
                    "version",
                    f"`version` holds {_kind_phrase(data['version'])} ({_short(data['version'])}), not a schema "
                    f"version: cdkd reads whole numbers 1 to {SUPPORTED_VERSION} (or a record without one). "
                    f"Set it to the schema the record was written with ({SUPPORTED_VERSION} for current cdkd) "
                    f"and upload the record as a new version; {where.show()}.",
                )
            )
    defects += _resources_defects(data, where)
    if "outputs" in data and not _is_object(data["outputs"]):
        defects.append(
            Defect(
                "outputs-malformed",
                "outputs",
                f"`outputs` holds {_kind_phrase(data['outputs'])}, not an object of output name to value; read "
                f"as it is it would invent one output (and one export) per character or element, or hide the "
                f"exports other stacks import. {_BLOCKS}. {where.ways_out()}",
            )
        )
    defects += _orphans_defects(data, where)
    names = data.get("exportNames")
    if isinstance(names, list) and names and not any(isinstance(n, str) for n in names):
        defects.append(
            Defect(
                "export-names-malformed",
                "exportNames",
                f"`exportNames` is a non-empty list with no string in it, so it names no export; it is read as "
                f'"exports nothing". Make it the list of `outputs` keys that are Export.Name aliases ([] when '
                f"the stack exports nothing), or let the next `cdkd deploy` rewrite it; {where.show()}.",
            )
        )
    return defects


def _resources_defects(data: dict[str, Any], where: _Where) -> list[Defect]:
    if "resources" not in data:
        return [
            Defect(
                "resources-missing",
                "resources",
                f"The record has no `resources` map; a stack always has one, even an empty {{}}, so an absent "
                f"one cannot be told from lost data. {_BLOCKS}: read as empty, a destroy would delete state.json "
                f"and leave every resource live. {where.ways_out()}",
            )
        ]
    resources = data["resources"]
    if not _is_object(resources):
        return [
            Defect(
                "resources-malformed",
                "resources",
                f"`resources` holds {_kind_phrase(resources)}, not an object of logical id to resource; read as "
                f"it is it counts as an empty stack (or one fake resource per character). {_BLOCKS}: a destroy "
                f"would delete state.json and leave every resource live. {where.ways_out()}",
            )
        ]
    defects: list[Defect] = []
    for logical_id, row in resources.items():
        path = f"resources.{logical_id}"
        if not isinstance(row, dict):
            defects.append(
                Defect(
                    "resource-row-malformed",
                    path,
                    f"The resource record `{path}` holds {_kind_phrase(row)}, not an object, so nothing says "
                    f"which AWS resource it names. {_BLOCKS}. {where.ways_out(resource=logical_id)}",
                )
            )
            continue
        if not isinstance(row.get("resourceType"), str):
            kind = "absent" if "resourceType" not in row else f"{_kind_phrase(row['resourceType'])}, not a string"
            defects.append(
                Defect(
                    "resource-row-malformed",
                    f"{path}.resourceType",
                    f"`{path}.resourceType` is {kind}, so no command can route the resource record `{path}`. Set "
                    f'it to the CloudFormation type (e.g. "AWS::S3::Bucket"). {_BLOCKS}. '
                    f"{where.ways_out(resource=logical_id)}",
                )
            )
            continue  # dropped rows are reported once, before the properties check
        if _is_object(row.get("properties")) and ("attributes" not in row or _is_object(row["attributes"])):
            continue  # healthy: no repair advice to word (20,000 rows must stay cheap)
        tail = f"{_BLOCKS}. {where.ways_out(resource=logical_id)}"
        defects += _row_map_defects(row, path, "resource-properties-malformed", "resource-attributes-malformed", tail)
    return defects


def _row_map_defects(
    row: dict[str, Any], path: str, properties_code: str, attributes_code: str, tail: str
) -> list[Defect]:
    """The `properties` / `attributes` rules of one readable row; `tail` says how to repair."""
    defects: list[Defect] = []
    if "properties" not in row:
        defects.append(
            Defect(
                properties_code,
                f"{path}.properties",
                f"`{path}.properties` is absent; every cdkd writer records an object there (an empty {{}} when "
                f"the resource declares none). Against a missing map every declared property would read as "
                f"changed and create-only ones as a REPLACEMENT. {tail}",
            )
        )
    elif not _is_object(row["properties"]):
        defects.append(
            Defect(
                properties_code,
                f"{path}.properties",
                f"`{path}.properties` holds {_kind_phrase(row['properties'])}, not an object; against it every "
                f"declared property would read as changed and create-only ones as a REPLACEMENT. {tail}",
            )
        )
    if "attributes" in row and not _is_object(row["attributes"]):
        defects.append(
            Defect(
                attributes_code,
                f"{path}.attributes",
                f"`{path}.attributes` (the Fn::GetAtt cache) holds {_kind_phrase(row['attributes'])}, not an "
                f"object; remove it or make it an object. {tail}",
            )
        )
    return defects


_ORPHAN_KEEP = (
    "Repair the row rather than deleting the record: no command removes a single orphans row, and the record is "
    "the only evidence that an earlier failed deploy left its resource live in AWS"
)


def _orphans_defects(data: dict[str, Any], where: _Where) -> list[Defect]:
    if "orphans" not in data:
        return []
    orphans = data["orphans"]
    if not isinstance(orphans, list):
        return [
            Defect(
                "orphans-malformed",
                "orphans",
                f"`orphans` holds {_kind_phrase(orphans)}, not a list of the resources a failed deploy left live "
                f"under Retain; read as it is it hides them (or invents one per character). {_BLOCKS}. "
                f"{where.ways_out()}",
            )
        ]
    defects: list[Defect] = []
    counts: dict[str, int] = {}
    for entry in orphans:
        if isinstance(entry, dict) and isinstance(entry.get("logicalId"), str):
            counts[entry["logicalId"]] = counts.get(entry["logicalId"], 0) + 1
    hint = f"{_ORPHAN_KEEP}; {where.show()}. {_BLOCKS}."
    for index, entry in enumerate(orphans):
        path = f"orphans[{index}]"
        if not isinstance(entry, dict):
            defects.append(
                Defect(
                    "orphan-record-malformed",
                    path,
                    f"`{path}` holds {_kind_phrase(entry)}, not an orphan record. {hint}",
                )
            )
            continue
        logical_id = entry.get("logicalId")
        if not isinstance(logical_id, str):
            defects.append(
                Defect(
                    "orphan-record-malformed",
                    f"{path}.logicalId",
                    f"`{path}.logicalId` is {'absent' if 'logicalId' not in entry else _kind_phrase(logical_id)}, "
                    f"not the logical id string of the orphaned resource. {hint}",
                )
            )
        elif counts[logical_id] > 1:
            defects.append(
                Defect(
                    "orphan-record-malformed",
                    f"{path}.logicalId",
                    f'`{path}` shares logicalId "{logical_id}" with another orphans record; cdkd never writes '
                    f"two, so nothing says which resource the stack should re-adopt. Keep ONE record for that id "
                    f"(the other resource is then no longer tracked by cdkd); {where.show()}. {_BLOCKS}.",
                )
            )
        state = entry.get("state")
        if not _row_is_readable(state):
            what = (
                _kind_phrase(state) if not isinstance(state, dict) else "a resource record with no string resourceType"
            )
            defects.append(
                Defect(
                    "orphan-record-malformed",
                    f"{path}.state",
                    f"`{path}.state` holds {what}, not a readable resource record. {hint}",
                )
            )
            continue
        physical_id = state.get("physicalId")
        if not isinstance(physical_id, str) or not physical_id:
            defects.append(
                Defect(
                    "orphan-record-malformed",
                    f"{path}.state.physicalId",
                    f"`{path}.state.physicalId` is not a non-empty string, so nothing says which live AWS resource "
                    f"a deploy would re-adopt. {hint}",
                )
            )
        # An orphan row is never removed by a command: point at the hand repair only.
        defects += _row_map_defects(state, f"{path}.state", "orphan-record-malformed", "orphan-record-malformed", hint)
    return defects


def _orphan_is_usable(entry: Any, counts: dict[str, int]) -> bool:
    if not isinstance(entry, dict):
        return False
    logical_id = entry.get("logicalId")
    state = entry.get("state")
    if not isinstance(logical_id, str) or counts.get(logical_id, 0) != 1 or not _row_is_readable(state):
        return False
    physical_id = state.get("physicalId")
    if not isinstance(physical_id, str) or not physical_id:
        return False
    if not _is_object(state.get("properties")):
        return False
    return "attributes" not in state or _is_object(state["attributes"])


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


# --- defects found while decoding ---------------------------------------------------------


def _unreadable_defect(decoded: Decoded, where: _Where) -> Defect:
    if decoded.code == "too-large":
        return Defect(
            "too-large",
            "",
            f"state.json is too large to read here ({decoded.reason}), so nothing in it is shown; {_BLOCKS}. "
            f"Download it with `aws s3 cp` to inspect it, and restore an earlier version if it was not meant "
            f"to be this large. {where.ways_out()}",
        )
    if decoded.code == "too-deep":
        return Defect(
            "too-deep",
            "",
            f"state.json nests arrays or objects too deeply to read safely ({decoded.reason}); no cdkd writer "
            f"produces such a record, so it was damaged or hand-edited. {_BLOCKS}. Restore an earlier version "
            f"of the object if one is good. {where.ways_out()}",
        )
    return Defect(
        "not-json",
        "",
        f"state.json is not valid JSON ({decoded.reason}), so nothing in it can be read; {_BLOCKS}. "
        f"Restore an earlier version of the object if one is good. {where.ways_out()}",
    )


def _number_defects(data: dict[str, Any], where: _Where) -> list[Defect]:
    """Numbers the record's readers store as integers (schema version, lastModified) that
    no integer column holds: cdkd never writes them, so the record was damaged."""
    defects: list[Defect] = []
    version = data.get("version")
    if "version" in data and _version_verdict(version)[0] == "newer" and not in_range(version, INT_MAX):
        defects.append(
            Defect(
                "number-out-of-range",
                "version",
                f"`version` is {_short(version)}, far beyond any schema version ({SUPPORTED_VERSION} for current "
                f'cdkd, and no schema has come near {INT_MAX}); cdkd refuses it as "written by a newer cdkd". '
                f"Set it to the schema the record was written with and upload the record as a new version; "
                f"{where.show()}.",
            )
        )
    last = data.get("lastModified")
    if _is_number(last) and not in_range(last, BIGINT_MAX):
        defects.append(
            Defect(
                "number-out-of-range",
                "lastModified",
                f"`lastModified` is {_short(last)}, not a time in epoch milliseconds (it is beyond the year "
                f"292 million); it is shown as not recorded. Set it to the time of the last deploy in epoch "
                f"milliseconds, or let the next `cdkd deploy` rewrite it; {where.show()}.",
            )
        )
    return defects


def _duplicate_defects(paths: list[str], where: _Where) -> list[Defect]:
    return [
        Defect(
            "duplicate-key",
            path,
            f"`{path}` appears more than once in the same object. cdkd (JSON.parse) and this app read only the "
            f"last one, so the earlier values are invisible and the next write drops them; no cdkd writer "
            f"produces this, so the record was hand-edited. Keep one `{path.rpartition('.')[2]}` and upload the "
            f"record as a new version; {where.show()}.",
        )
        for path in paths
    ]
