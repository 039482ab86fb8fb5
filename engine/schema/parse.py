"""Reading a stored state.json body (`parse_state`, never raising) into a `ParsedRecord`,
whose accessors repair for display the way `cdkd diff` does."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.schema.decode import (
    BIGINT_MAX,
    _is_object,
    _reject_constant,
    _row_is_readable,
    decode_json,
    describe_region_value_kind,
    in_range,
)
from engine.schema.defects import (
    _duplicate_defects,
    _kind_phrase,
    _number_defects,
    _orphan_is_usable,
    _unreadable_defect,
    _Where,
    state_defects,
)
from engine.schema.models import Defect, StackOrphanRecord, StackState, StateImportEntry, StateOutputReadEntry
from engine.schema.versions import SUPPORTED_VERSION, _version_verdict


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
