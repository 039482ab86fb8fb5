"""cdkd's state.json and lock.json: lenient read, exact write.

Representation (the contract stacks.sync, the views and the operations rely on):

* A model stores every value EXACTLY as decoded from JSON. Declared fields are annotated
  `Stored` (= `Any`): the cdkd type of each is in its comment, but a hand-edited or torn
  record may hold anything there, and validation must neither fail nor coerce. That is
  what makes both promises true at once: `parse_state` never raises, and `dump_state` of
  an undamaged parsed record gives back the same JSON value (bytes too, for a record cdkd
  wrote, apart from the version it stamps).
* Unknown keys are kept at every level: at the top level and in locks through
  `extra='allow'`, inside rows, orphan records and entries because those stay plain JSON
  dicts inside the stored containers.
* Key order is kept, and nothing is invented: a model dumps only the keys it was given or
  was assigned, in the order read, new keys appended (a `model_dump(exclude_unset=True)`
  that also keeps order).
* Shape checks live in `state_defects` (blocking, per the seeds' malformed-container
  rules) and typed reads in the accessors of `ParsedRecord`, which repair for display the
  way `cdkd diff` does: an unreadable container reads as empty, an unreadable entry is
  dropped, `exportNames` that is not a list reads as an empty set.

Writers emit what cdkd's `saveState` emits: `{...state, version: 11, stackName, region}`
through `JSON.stringify(x, null, 2)`, with no trailing newline; locks through
`JSON.stringify(lockInfo)` (seeds 000/001, "Lock Acquisition").
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import accumulate
from json.encoder import encode_basestring  # type: ignore[attr-defined]  # JSON.stringify's string quoting
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from engine.errors import RecordRefused

SUPPORTED_VERSION = 11  # the newest schema this app reads AND writes

Stored = Any  # a JSON value exactly as stored; see the module docstring

RETAIN_POLICIES = frozenset({"Retain", "RetainExceptOnCreate"})


@dataclass(frozen=True)
class Defect:
    """A damaged part of a record. `code` is stable (tests and filters use it), `path` says
    where (`resources.MyQueue.properties`), `message` says what is wrong, where, and how a
    cdkd user repairs it."""

    code: str
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "path": self.path, "message": self.message}


# Defect codes (stable strings). Blocking (in ParsedRecord.defects, refused by dump_state):
#   not-json, too-large, too-deep, root-not-object, version-invalid, number-out-of-range,
#   duplicate-key, resources-missing, resources-malformed,
#   resource-row-malformed, resource-properties-malformed, resource-attributes-malformed,
#   outputs-malformed, orphans-malformed, orphan-record-malformed, export-names-malformed
# Non-blocking (in ParsedRecord.warnings, shown but never refused):
#   region-mismatch, export-names-not-list


# --- the order-keeping base model ---------------------------------------------------------


class OrderedModel(BaseModel):
    """Keeps unknown keys and key order, and dumps only the keys it holds.

    `model_dump()` returns the keys read, in the order read (including unknown ones), then
    any declared field or extra assigned later. An unset declared field reads as None but
    is never emitted: use `has()` to tell an absent key from a JSON null.
    """

    model_config = ConfigDict(extra="allow")

    _key_order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_key_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        instance = handler(data)
        if isinstance(data, dict) and isinstance(instance, OrderedModel):
            instance._key_order = list(data.keys())
        return instance

    @model_serializer(mode="wrap")
    def _dump_in_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped = handler(self)
        present = {k: v for k, v in dumped.items() if self.has(k)}
        ordered = {k: present.pop(k) for k in self._key_order if k in present}
        ordered.update(present)
        return ordered

    def has(self, key: str) -> bool:
        """True when the record holds `key` (even as JSON null)."""
        extra = self.__pydantic_extra__ or {}
        return key in extra or (key in type(self).model_fields and key in self.model_fields_set)

    def get(self, key: str, default: Any = None) -> Any:
        """The stored value of `key` (declared or unknown), or `default` when absent."""
        if not self.has(key):
            return default
        extra = self.__pydantic_extra__ or {}
        return extra[key] if key in extra else getattr(self, key)

    def set(self, key: str, value: Any) -> None:
        """Store `key` (declared or unknown); a key already held keeps its position."""
        setattr(self, key, value)
        self.model_fields_set.add(key)

    def discard(self, key: str) -> None:
        """Remove `key` so it is not written (e.g. `skippedOutputs` on a non-deploy save)."""
        extra = self.__pydantic_extra__ or {}
        if key in extra:
            del extra[key]
        if key in type(self).model_fields:
            object.__setattr__(self, key, None)
        self.model_fields_set.discard(key)

    def to_json_value(self) -> dict[str, Any]:
        """The record as a plain JSON object (keys in stored order)."""
        return self.model_dump()


# --- the records --------------------------------------------------------------------------


class ResourceState(OrderedModel):
    """One `resources` row (or an orphan record's `state`): every field of the seeds.

    Built on demand from a row dict (`ResourceState.model_validate(row)`); the stored
    container keeps the plain dict.
    """

    physicalId: Stored = None  # string; may be a `|`-joined composite
    resourceType: Stored = None  # string; a row without one is unreadable
    properties: Stored = None  # object; absent or non-object is a defect
    observedProperties: Stored = None  # object, v3+
    attributes: Stored = None  # object; present and non-object is a defect
    dependencies: Stored = None  # string[]
    metadata: Stored = None  # object
    constructPath: Stored = None  # string, no bump, informational
    deletionPolicy: Stored = None  # 'Delete' | 'Retain' | 'Snapshot' | 'RetainExceptOnCreate', v5+
    updateReplacePolicy: Stored = None  # same enum, v5+
    provisionedBy: Stored = None  # 'sdk' | 'cc-api', v7+ (absent = legacy SDK default, not pinned)
    observedBaselineRefused: Stored = None  # true or absent, v10+
    observedBaselineRefusalReason: Stored = None  # 'unverifiable-parameter' | 'incomplete-resolution'
    noEchoLeaves: Stored = None  # (string | number)[][], v11+
    noEchoAttributeNames: Stored = None  # string[], v11+
    noEchoExactEchoLeaves: Stored = None  # string[][], no bump
    acceptedCreateOnlyDrops: Stored = None  # string[], no bump
    maskedPropertyFingerprints: Stored = None  # Record<prop, 'sha256:…'>, no bump
    maskedPropertyInputFingerprints: Stored = None  # Record<prop, 'inputs-sha256:…+…'>, no bump

    def is_retained(self) -> bool:
        """cdkd's `shouldRetainResource`: only Retain and RetainExceptOnCreate keep it live."""
        return self.deletionPolicy in RETAIN_POLICIES

    def dependency_ids(self) -> list[str]:
        """`dependencies` as logical ids; a damaged list keeps only its strings."""
        deps = self.dependencies
        return [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []


class StateImportEntry(OrderedModel):
    """An `imports` entry (v4+): a strong `Fn::ImportValue` reference, blocks the producer's destroy."""

    sourceStack: Stored = None  # string
    sourceRegion: Stored = None  # string, never redacted
    exportName: Stored = None  # string; newer writers may redact it to a {{resolve:…}} or ***


class StateOutputReadEntry(OrderedModel):
    """An `outputReads` entry (v8+): an informational `Fn::GetStackOutput` reference."""

    sourceStack: Stored = None  # string; may be redacted
    sourceRegion: Stored = None  # string, never redacted
    outputName: Stored = None  # string; may be redacted


class StackOrphanRecord(OrderedModel):
    """An `orphans` entry: a resource a rollback left live under Retain (secret-bearing)."""

    logicalId: Stored = None  # string, unique in the list
    orphanedAt: Stored = None  # epoch ms
    state: Stored = None  # the discarded ResourceState, verbatim

    def resource_state(self) -> ResourceState | None:
        return ResourceState.model_validate(self.state) if isinstance(self.state, dict) else None


class StackState(OrderedModel):
    """Every StackState field of versions 1-11, unknown fields kept, key order kept."""

    version: Stored = None  # 1..11; absent passes the gate
    stackName: Stored = None  # string; the key's name is stamped on write
    region: Stored = None  # string (required from v2); the key decides
    resources: Stored = None  # Record<logicalId, ResourceState>; absent or non-object is a defect
    outputs: Stored = None  # Record<key, any JSON>; absent is healthy, non-object a defect
    imports: Stored = None  # StateImportEntry[], v4+, omitted when empty
    outputReads: Stored = None  # StateOutputReadEntry[], v8+, omitted when empty
    exportNames: Stored = None  # string[], v9+; absent = not known, [] = exports nothing
    skippedOutputs: Stored = None  # Record<outputKey, digest>, no bump
    orphans: Stored = None  # StackOrphanRecord[], no bump; absent = none
    conditionVerdicts: Stored = None  # Record<name, {verdict: boolean, fingerprint: string}>, no bump
    parentStack: Stored = None  # string, v6+, nested children only
    parentLogicalId: Stored = None  # string, v6+
    parentRegion: Stored = None  # string, v6+
    lastModified: Stored = None  # epoch ms

    def resource(self, logical_id: str) -> ResourceState | None:
        """The row of `logical_id` as a model, or None when absent or unreadable."""
        resources = self.resources
        row = resources.get(logical_id) if isinstance(resources, dict) else None
        return ResourceState.model_validate(row) if _row_is_readable(row) else None


class LockInfo(OrderedModel):
    """owner, timestamp, expiresAt, operation (optional); unknown fields kept."""

    owner: Stored = None  # "user@host:pid"
    timestamp: Stored = None  # epoch ms of acquisition
    expiresAt: Stored = None  # epoch ms heartbeat deadline; non-finite counts as expired
    operation: Stored = None  # string, omitted when not given

    @classmethod
    def new(cls, *, owner: str, timestamp: int, expires_at: int, operation: str | None = None) -> LockInfo:
        """A lock as cdkd builds one: `operation` is omitted (not null) when not given."""
        data: dict[str, Any] = {"owner": owner, "timestamp": timestamp, "expiresAt": expires_at}
        if operation is not None:
            data["operation"] = operation
        return cls.model_validate(data)


# --- small value helpers ------------------------------------------------------------------


def describe_region_value_kind(value: Any) -> str:
    """cdkd's `describeRegionValueKind`: the KIND of a JSON value, never the value itself
    ("null", "an array", or an article plus the JavaScript `typeof` name)."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an object"


def _is_object(value: Any) -> bool:
    # cdkd's isReadableBag: typeof x === 'object' && x !== null && !Array.isArray(x)
    return isinstance(value, dict)


def _row_is_readable(row: Any) -> bool:
    return isinstance(row, dict) and isinstance(row.get("resourceType"), str)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """JavaScript's Number.isFinite over a decoded JSON value."""
    if not _is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a double is Infinity in JavaScript
        return False


def _version_verdict(value: Any) -> tuple[str, int | None]:
    """('ok' | 'newer' | 'invalid', the version as int). JS numbers: 3.0 is 3."""
    if not _finite(value):
        return "invalid", None
    if isinstance(value, float):
        if not value.is_integer():
            return "invalid", None
        value = int(value)
    if value < 1:
        return "invalid", None
    return ("newer" if value > SUPPORTED_VERSION else "ok"), value


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


# --- reading state.json -------------------------------------------------------------------


@dataclass
class ParsedRecord:
    """What a stored state.json body is, never raising on bad input.

    `data` is the decoded JSON as stored; `state` is an independent model of it (edit and
    pass it to `dump_state`). The accessors read `data` and repair for display the way
    `cdkd diff` does; the damage they paper over is listed in `defects`.
    """

    raw: bytes
    data: Any  # the decoded JSON value (None if not JSON)
    state_text: str | None = field(default=None, repr=False)  # the JSON text `state` is built from
    defects: list[Defect] = field(default_factory=list)
    version: int | None = None
    key_region: str | None = None
    body_region_kind: str | None = None  # set when the body's region disagrees with the key's
    warnings: list[Defect] = field(default_factory=list)  # shown, never blocking
    _state: StackState | None = field(default=None, init=False, repr=False)
    _state_built: bool = field(default=False, init=False, repr=False)

    @property
    def state(self) -> StackState | None:
        """An independent model of the record (edit it, pass it to `dump_state`); None when
        the body is not a JSON object. Built on first use: pages never need it, and for a
        20 MB record it is a second parse."""
        if not self._state_built:
            self._state_built = True
            if self.state_text is not None:
                self._state = StackState.model_validate(json.loads(self.state_text, parse_constant=_reject_constant))
        return self._state

    @state.setter
    def state(self, value: StackState | None) -> None:
        self._state, self._state_built = value, True

    @property
    def newer_than_supported(self) -> bool:
        return self.version is not None and self.version > SUPPORTED_VERSION

    @property
    def region_mismatch(self) -> bool:
        return self.body_region_kind is not None

    @property
    def writable(self) -> bool:
        """False when newer than SUPPORTED_VERSION or when any defect is present."""
        return not self.newer_than_supported and not self.defects

    def _get(self, key: str) -> tuple[bool, Any]:
        if isinstance(self.data, dict) and key in self.data:
            return True, self.data[key]
        return False, None

    def resource_rows(self) -> list[tuple[str, dict[str, Any] | None]]:
        """(logicalId, row dict or None if the row is malformed) for a readable `resources`.

        Rows are the stored dicts, unrepaired (a torn `properties` stays as stored; use
        `display_row` for the repaired view). An unreadable `resources` gives []."""
        _, resources = self._get("resources")
        if not _is_object(resources):
            return []
        return [(lid, row if _row_is_readable(row) else None) for lid, row in resources.items()]

    def outputs(self) -> dict[str, Any]:
        """The outputs bag; {} when absent or unreadable."""
        _, outputs = self._get("outputs")
        return outputs if _is_object(outputs) else {}

    def export_names(self) -> set[str] | None:
        """Which outputs keys are Export.Name aliases: None = not known (absent: every key is
        importable), a non-list reads as the EMPTY set (fail closed), non-strings dropped."""
        present, names = self._get("exportNames")
        if not present:
            return None
        if not isinstance(names, list):
            return set()
        return {n for n in names if isinstance(n, str)}

    def importable_output_keys(self) -> set[str]:
        """cdkd's `importableOutputKeys`: the outputs an `Fn::ImportValue` may bind to."""
        names = self.export_names()
        keys = set(self.outputs())
        return keys if names is None else keys & names

    def imports(self) -> list[StateImportEntry]:
        """`imports` entries that are objects; [] when absent or not a list."""
        return [StateImportEntry.model_validate(e) for e in self._list("imports") if isinstance(e, dict)]

    def output_reads(self) -> list[StateOutputReadEntry]:
        return [StateOutputReadEntry.model_validate(e) for e in self._list("outputReads") if isinstance(e, dict)]

    def orphans(self) -> list[StackOrphanRecord]:
        """The usable `orphans` records (seed rule: object, unique string logicalId, readable
        state with a non-empty physicalId and readable properties/attributes)."""
        entries = self._list("orphans")
        counts: dict[str, int] = {}
        for e in entries:
            if isinstance(e, dict) and isinstance(e.get("logicalId"), str):
                counts[e["logicalId"]] = counts.get(e["logicalId"], 0) + 1
        return [StackOrphanRecord.model_validate(e) for e in entries if _orphan_is_usable(e, counts)]

    def skipped_outputs(self) -> dict[str, str]:
        """outputKey -> digest; a malformed field or entry reads as absent."""
        _, value = self._get("skippedOutputs")
        return {k: v for k, v in value.items() if isinstance(v, str)} if _is_object(value) else {}

    def condition_verdicts(self) -> dict[str, tuple[bool, str]]:
        """name -> (verdict, fingerprint); any malformed shape reads as no record."""
        _, value = self._get("conditionVerdicts")
        if not _is_object(value):
            return {}
        return {
            name: (v["verdict"], v["fingerprint"])
            for name, v in value.items()
            if isinstance(v, dict) and isinstance(v.get("verdict"), bool) and isinstance(v.get("fingerprint"), str)
        }

    def parent(self) -> tuple[str, str, str | None] | None:
        """(parentStack, parentLogicalId, parentRegion) of a nested child, or None (top level)."""
        _, stack = self._get("parentStack")
        _, logical_id = self._get("parentLogicalId")
        _, region = self._get("parentRegion")
        if not isinstance(stack, str) or not isinstance(logical_id, str):
            return None
        return stack, logical_id, region if isinstance(region, str) else None

    def last_modified_ms(self) -> int | None:
        """`lastModified` as epoch ms, or None when missing, not a finite number, or beyond
        what a bigint holds (a `number-out-of-range` defect)."""
        _, value = self._get("lastModified")
        return int(value) if in_range(value, BIGINT_MAX) else None

    def stack_name(self) -> str | None:
        """The body's `stackName` when a string (the key's name is what counts)."""
        _, value = self._get("stackName")
        return value if isinstance(value, str) else None

    def body_region(self) -> str | None:
        """The body's `region` when a string; for a legacy key it is the record's region."""
        _, value = self._get("region")
        return value if isinstance(value, str) else None

    def _list(self, key: str) -> list[Any]:
        _, value = self._get(key)
        return value if isinstance(value, list) else []


def display_row(row: dict[str, Any]) -> dict[str, Any]:
    """A readable row repaired for display as `cdkd diff` does: an unreadable `properties`
    or `attributes` map reads as {}. A copy; the stored row is untouched."""
    repaired = dict(row)
    if not _is_object(repaired.get("properties")):
        repaired["properties"] = {}
    if "attributes" in repaired and not _is_object(repaired["attributes"]):
        repaired["attributes"] = {}
    return repaired


def _reject_constant(name: str) -> Any:
    # JSON.parse has no NaN / Infinity literals; Python's json.loads would accept them.
    raise ValueError(f"{name} is not valid JSON")


# Bounds on what is decoded at all. cdkd's own records stay far below both; beyond them a
# body is a defect, never a parse that could exhaust memory, time or the stack.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 200  # nested arrays/objects; pydantic, jsonb and the templates all recurse

# The largest values the mirror's integer columns hold (PostgreSQL integer and bigint).
INT_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = tuple(1 if b in b"[{" else -1 for b in range(256))


def nesting_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, without parsing it and
    without recursion: strings are cut out (their brackets do not count), then the brackets
    that are left are summed. Linear in the size of the body."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return 0  # cannot be deeper than the bound: skip the scan
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


@dataclass
class Decoded:
    """A body decoded under the bounds: `value`, or `code` (too-large, too-deep, not-json)
    with `reason` saying why. `duplicates` are the paths of keys that appear more than once
    in one object (JSON.parse and json.loads both keep the last)."""

    value: Any = None
    code: str | None = None
    reason: str | None = None
    duplicates: list[str] = field(default_factory=list)
    text: str = ""


def decode_json(body: bytes, *, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_DEPTH) -> Decoded:
    """Decode an untrusted JSON body as JSON.parse would, bounded in size and depth. Never
    raises: every failure becomes a `code` and a `reason`."""
    if len(body) > max_bytes:
        return Decoded(code="too-large", reason=f"it is {len(body):,} bytes, over the {max_bytes:,} this app reads")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        return Decoded(code="not-json", reason=f"it is not UTF-8 text (invalid byte at offset {exc.start})")
    if text.startswith("\ufeff"):
        return Decoded(
            code="not-json",
            reason="it starts with a UTF-8 byte order mark (EF BB BF), which JSON.parse refuses; remove those 3 bytes",
        )
    depth = nesting_depth(bytes(body))
    if depth > max_depth:
        return Decoded(code="too-deep", reason=f"it nests {depth:,} levels deep, over the {max_depth} this app reads")
    seen_twice: dict[int, list[str]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            counts: dict[str, int] = {}
            for k, _ in items:
                counts[k] = counts.get(k, 0) + 1
            seen_twice[id(obj)] = [k for k, n in counts.items() if n > 1]
        return obj

    try:
        value = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        return Decoded(code="not-json", reason=f"{exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:
        return Decoded(code="too-deep", reason="it nests too deeply to read")
    except Exception as exc:  # noqa: BLE001 - e.g. an integer of more than 4300 digits
        return Decoded(code="not-json", reason=str(exc)[:200] or type(exc).__name__)
    duplicates = _duplicate_paths(value, seen_twice) if seen_twice else []
    return Decoded(value=value, duplicates=duplicates, text=text)


def _duplicate_paths(value: Any, seen_twice: dict[int, list[str]]) -> list[str]:
    """Where the duplicated keys are (`outputs.A`), found without recursion."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack and len(found) < 20:
        path, node = stack.pop()
        if isinstance(node, dict):
            found += [f"{path}.{k}" if path else k for k in seen_twice.get(id(node), [])]
            stack += [(f"{path}.{k}" if path else k, v) for k, v in node.items() if isinstance(v, dict | list)]
        elif isinstance(node, list):
            stack += [(f"{path}[{i}]", v) for i, v in enumerate(node) if isinstance(v, dict | list)]
    return sorted(found)[:20]


def in_range(value: Any, limit: int) -> bool:
    """A JSON number whose whole part fits a column holding -limit..limit."""
    if not _finite(value):
        return False
    return abs(value) <= limit


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


def parse_state(
    body: bytes, *, key_region: str | None = None, stack_name: str | None = None, account: str | None = None
) -> ParsedRecord:
    """Read a stored state.json body. Never raises.

    `key_region` is the region segment of the key (None for a legacy key); it decides the
    record's region. `stack_name` (the key's) and `account` (the app's account id) only
    fill in the repair commands of messages.
    """
    legacy = key_region is None
    decoded = decode_json(body)
    data = decoded.value
    where = _Where(stack_name, key_region, legacy, account)
    if decoded.code is not None:
        return ParsedRecord(
            raw=body,
            data=None,
            key_region=key_region,
            defects=[_unreadable_defect(decoded, where)],
        )
    record = ParsedRecord(raw=body, data=data, key_region=key_region)
    if not isinstance(data, dict):
        record.defects = state_defects(data, stack_name=stack_name, region=key_region, legacy=legacy, account=account)
        return record
    # `state` is an independent copy, built on first use from the text (known to be within
    # the bounds now), so edits to it never change what `data` says was stored.
    record.state_text = decoded.text
    if "version" in data:
        verdict, number = _version_verdict(data["version"])
        record.version = number if verdict != "invalid" else None
    body_region = data.get("region")
    record.defects = state_defects(data, stack_name=stack_name, region=key_region, legacy=legacy, account=account)
    record.defects += _number_defects(data, where) + _duplicate_defects(decoded.duplicates, where)
    if key_region is not None and "region" in data and body_region != key_region:
        record.body_region_kind = describe_region_value_kind(body_region)
        record.warnings.append(
            Defect(
                "region-mismatch",
                "region",
                f"The body's `region` holds {record.body_region_kind} that is not the key's region "
                f"{key_region}; the key decides, so the record is read as {key_region} and the next save "
                f"stamps it. cdkd destroy and rollback refuse such a record while it lists resources: correct "
                f"`region` to {key_region}, or act in the region the resources really are in.",
            )
        )
    if "exportNames" in data and not isinstance(data["exportNames"], list) and _is_object(data.get("outputs", {})):
        record.warnings.append(
            Defect(
                "export-names-not-list",
                "exportNames",
                f"`exportNames` holds {_kind_phrase(data['exportNames'])}, not a list, so it is read as "
                f'"exports nothing" (no output of this stack is importable). Make it the list of Export.Name '
                f"aliases among `outputs`, or let the next `cdkd deploy` rewrite it; {where.show()}.",
            )
        )
    return record


# --- writing: JSON.stringify --------------------------------------------------------------

_MAX_SAFE = 2**53
_MAX_INDEX = 2**32 - 2


def _js_number(value: float) -> str:
    """ECMAScript Number::toString (what JSON.stringify prints); non-finite -> null."""
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr gives the shortest round-trip digits, as JavaScript does.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # type: ignore[operator]
    k = len(digits)
    n = exponent + k  # type: ignore[operator]
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + text


def _js_int(value: int) -> str:
    if -_MAX_SAFE <= value <= _MAX_SAFE:
        return str(value)
    try:  # JSON.parse would have rounded it to a double
        return _js_number(float(value))
    except OverflowError:
        return "null"


def _is_array_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and int(key) <= _MAX_INDEX


def _js_keys(obj: dict[str, Any]) -> list[str]:
    """JavaScript's own-key order: array-index keys ascending, then the rest as inserted."""
    index_keys = [k for k in obj if _is_array_index(k)]
    if not index_keys:
        return list(obj)
    index_keys.sort(key=int)
    return index_keys + [k for k in obj if not _is_array_index(k)]


def js_stringify(value: Any, *, indent: int = 2) -> str:
    """`JSON.stringify(value, null, indent)` (indent 0 = compact) over decoded JSON values."""
    parts: list[str] = []
    colon = ": " if indent else ":"

    def emit(v: Any, depth: int) -> None:
        if v is None:
            parts.append("null")
        elif v is True:
            parts.append("true")
        elif v is False:
            parts.append("false")
        elif isinstance(v, str):
            parts.append(encode_basestring(v))
        elif isinstance(v, int):
            parts.append(_js_int(v))
        elif isinstance(v, float):
            parts.append(_js_number(v))
        elif isinstance(v, BaseModel):
            emit(v.model_dump(), depth)
        elif isinstance(v, dict):
            keys = _js_keys(v)
            if not keys:
                parts.append("{}")
                return
            inner = "\n" + " " * (indent * (depth + 1)) if indent else ""
            parts.append("{")
            for i, k in enumerate(keys):
                if i:
                    parts.append(",")
                parts.append(inner)
                parts.append(encode_basestring(k))
                parts.append(colon)
                emit(v[k], depth + 1)
            parts.append("\n" + " " * (indent * depth) + "}" if indent else "}")
        elif isinstance(v, list | tuple):
            if not v:
                parts.append("[]")
                return
            inner = "\n" + " " * (indent * (depth + 1)) if indent else ""
            parts.append("[")
            for i, item in enumerate(v):
                if i:
                    parts.append(",")
                parts.append(inner)
                emit(item, depth + 1)
            parts.append("\n" + " " * (indent * depth) + "]" if indent else "]")
        else:
            raise TypeError(f"{type(v).__name__} is not a JSON value")

    emit(value, 0)
    return "".join(parts)


def _to_bytes(text: str) -> bytes:
    # A lone surrogate (legal in JSON text) cannot be UTF-8; JSON.stringify writes it as a
    # lowercase \udXXX escape, which is exactly what backslashreplace produces.
    return text.encode("utf-8", errors="backslashreplace")


# The schema version that introduced each field (seed 000, "Schema version history"); a
# field the seeds mark "no bump" is absent. Region-scoped keys (every write here) are v2+.
_TOP_FIELD_VERSIONS = {
    "imports": 4,
    "parentStack": 6,
    "parentLogicalId": 6,
    "parentRegion": 6,
    "outputReads": 8,
    "exportNames": 9,
}
_ROW_FIELD_VERSIONS = {
    "observedProperties": 3,
    "deletionPolicy": 5,
    "updateReplacePolicy": 5,
    "provisionedBy": 7,
    "observedBaselineRefused": 10,
    "noEchoLeaves": 11,
    "noEchoAttributeNames": 11,
}
_REGION_KEY_VERSION = 2


def fields_version(body: dict[str, Any]) -> int:
    """The lowest schema version whose readers know every field `body` holds (rows and
    orphan records' rows included), at least 2: every write goes to a region-scoped key."""
    needed = _REGION_KEY_VERSION
    for name, version in _TOP_FIELD_VERSIONS.items():
        if name in body:
            needed = max(needed, version)
    resources = body.get("resources")
    rows = list(resources.values()) if isinstance(resources, dict) else []
    orphans = body.get("orphans")
    rows += [o.get("state") for o in orphans if isinstance(o, dict)] if isinstance(orphans, list) else []
    for row in rows:
        if isinstance(row, dict):
            for name, version in _ROW_FIELD_VERSIONS.items():
                if name in row:
                    needed = max(needed, version)
    return needed


def write_version(state: StackState | dict[str, Any]) -> int:
    """The `version` `dump_state` stamps: a record without one is new and is written at
    SUPPORTED_VERSION (seeds: new records are v11); a repair keeps the record's version, or
    the lowest newer one its fields need (`fields_version`), so an older cdkd that reads the
    record now still reads it after the repair. A plan states this number."""
    body = state.to_json_value() if isinstance(state, StackState) else state
    if "version" not in body:
        return SUPPORTED_VERSION
    verdict, number = _version_verdict(body["version"])
    if verdict != "ok" or number is None:
        return SUPPORTED_VERSION  # never reached by dump_state: a bad version is a blocking defect
    return max(number, fields_version(body))


def version_line(was: Any, version: int) -> str:
    """The line a plan shows for its save: the version `write_version` stamps, and why."""
    if was is None:
        return f"writes schema version {version} (the record names none: written as a new record)"
    if was == version:
        return f"writes schema version {version} (the record's own)"
    return f"writes schema version {version} (was {was}; the lowest version that knows every field it holds)"


def dump_state(state: StackState, *, stack_name: str, region: str, version: int | None = None) -> bytes:
    """cdkd's writer: `version` as `write_version` decides (11 for a new record, the
    record's own for a repair unless its fields need newer) or as given (a deploy or a
    rollback writes SUPPORTED_VERSION, as cdkd's saveState does), stackName/region stamped from
    the key, 2-space indent, no trailing newline, unknown fields as read. Raises
    engine.errors.RecordRefused for a record newer than SUPPORTED_VERSION, and for a record
    with any blocking defect."""
    body = state.to_json_value()
    if "version" in body:
        verdict, number = _version_verdict(body["version"])
        if verdict == "newer":
            raise RecordRefused(
                f"state.json of {stack_name} ({region}) has schema version {number}, newer than the "
                f"{SUPPORTED_VERSION} this app writes; it is read-only here. Upgrade cdkd Admin before changing it."
            )
    defects = state_defects(body, stack_name=stack_name, region=region)
    if defects:
        listed = "; ".join(f"{d.path or '(root)'}: {d.code}" for d in defects)
        raise RecordRefused(
            f"Refusing to write state.json of {stack_name} ({region}): the record is damaged ({listed}). "
            f"{defects[0].message}"
        )
    # {...state, version, stackName, region}: keys already held keep their position.
    body["version"] = write_version(body) if version is None else version
    body["stackName"] = stack_name
    body["region"] = region
    return _to_bytes(js_stringify(body, indent=2))


# --- lock.json ----------------------------------------------------------------------------


@dataclass
class ParsedLock:
    """A stored lock.json. An object that exists always blocks cdkd's `If-None-Match: *`
    acquire, whatever it holds; `info` is None when it is unreadable or not an object."""

    raw: bytes
    info: LockInfo | None  # None when unreadable or a JSON null / non-object (no lock)
    error: str | None  # set when the body is not JSON (an unreadable lock)
    kind: str = "an object"  # what the JSON value is (describe_region_value_kind)

    @property
    def present_but_empty(self) -> bool:
        """JSON that is not an object (null, [], a number): cdkd reads "no lock", yet the
        object still makes every acquire fail until it is deleted (force-unlock)."""
        return self.info is None and self.error is None

    def _expires(self) -> Any:
        return self.info.get("expiresAt") if self.info is not None else None

    def expires_at_ms(self) -> int | None:
        """expiresAt as an int, or None when absent or not a finite number (counts as expired).
        A fractional deadline rounds UP, so `now_ms >= expires_at_ms()` keeps cdkd's verdict."""
        value = self._expires()
        return math.ceil(value) if _finite(value) else None

    def is_expired(self, now_ms: int) -> bool:
        """cdkd's newer rule: expired when expiresAt is not a finite number or now >= expiresAt."""
        value = self._expires()
        return not _finite(value) or now_ms >= value


def parse_lock(body: bytes) -> ParsedLock:
    """Read a stored lock.json body. Never raises."""
    decoded = decode_json(body)
    if decoded.code is not None:
        what = "is too large to read" if decoded.code == "too-large" else "is not valid JSON"
        return ParsedLock(raw=body, info=None, error=f"lock.json {what} ({decoded.reason})", kind="")
    data = decoded.value
    info = LockInfo.model_validate(data) if isinstance(data, dict) else None
    return ParsedLock(raw=body, info=info, error=None, kind=describe_region_value_kind(data))


_LOCK_KEYS = ("owner", "timestamp", "expiresAt", "operation")


def dump_lock(info: LockInfo) -> bytes:
    """cdkd's lock body: `JSON.stringify(lockInfo)` (compact, no trailing newline) with
    owner, timestamp, expiresAt, then operation when present; unknown keys kept after."""
    held = info.to_json_value()
    body = {k: held.pop(k) for k in _LOCK_KEYS if k in held}
    body.update(held)
    return _to_bytes(js_stringify(body, indent=0))
