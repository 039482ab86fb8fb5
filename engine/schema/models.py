"""The order-keeping pydantic models of state.json and lock.json (`StackState`,
`ResourceState`, `LockInfo`, ...) and `Defect`, what a damaged part of a record is.
See the package docstring for the representation they keep."""

from __future__ import annotations

from dataclasses import dataclass
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

from engine.schema.decode import _row_is_readable

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
