"""Turn a parsed state record into what the stack page shows.

The decisions live here (how provisionedBy reads when absent, which outputs are exports,
where a dependency link points), so the templates only lay them out.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils.translation import ngettext

from engine.keys import DEFAULT_PREFIX
from engine.schema import ParsedRecord
from stacks import actions
from stacks.lockcard import humanize_ms
from stacks.models import Lock, LockState, OperationKind, Stack

RESOURCES_PER_PAGE = 200
# A record with more rows than this loads each row's properties when it is opened.
INLINE_DETAILS_UP_TO = 50

_SECTIONS = ("properties", "observedProperties", "attributes")
_SAFE_ANCHOR = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


def anchor(logical_id: str) -> str:
    """An HTML id for a resource row (logical ids of damaged records can hold anything)."""
    if _SAFE_ANCHOR.match(logical_id):
        return f"res-{logical_id}"
    return "res-" + hashlib.sha1(logical_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def provisioned_by_label(row: dict[str, Any]) -> str:
    value = row.get("provisionedBy")
    if value is None:
        return "(sdk, legacy default)"
    return value if isinstance(value, str) else repr(value)


def _leaf_path(leaf: Any) -> str:
    if not isinstance(leaf, list):
        return str(leaf)
    out = ""
    for part in leaf:
        out += (
            f"[{part}]" if isinstance(part, int) and not isinstance(part, bool) else (f".{part}" if out else str(part))
        )
    return out


@dataclass
class Dependency:
    logical_id: str
    href: str | None  # None when the record holds no such row


@dataclass
class ResourceRow:
    logical_id: str
    anchor: str
    row: dict[str, Any] | None  # None: the row itself is malformed
    raw: Any
    resource_type: str = ""
    physical_id: str = ""
    physical_non_string: Any = None
    provisioned_by: str = ""
    deletion_policy: str = ""
    update_replace_policy: str = ""
    dependencies: list[Dependency] = field(default_factory=list)
    masked_leaves: list[str] = field(default_factory=list)
    masked_attributes: list[str] = field(default_factory=list)
    baseline_refused: bool = False
    baseline_refusal_reason: str = ""

    @property
    def malformed(self) -> bool:
        return self.row is None

    @property
    def is_composite(self) -> bool:
        return "|" in self.physical_id

    def section(self, name: str) -> Any:
        return self.row.get(name) if self.row is not None else None

    @property
    def properties(self) -> Any:
        return self.section("properties")

    @property
    def observed_properties(self) -> Any:
        return self.section("observedProperties")

    @property
    def attributes(self) -> Any:
        return self.section("attributes")

    @property
    def other_fields(self) -> dict[str, Any]:
        """Every field of the row not shown in a section of its own, unknown ones included."""
        if self.row is None:
            return {}
        return {k: v for k, v in self.row.items() if k not in _SECTIONS}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def resource_row(logical_id: str, row: dict[str, Any] | None, raw: Any, page_of: dict[str, int]) -> ResourceRow:
    view = ResourceRow(logical_id=logical_id, anchor=anchor(logical_id), row=row, raw=raw)
    if row is None:
        return view
    view.resource_type = _str(row.get("resourceType"))
    physical = row.get("physicalId")
    view.physical_id = _str(physical)
    if physical is not None and not isinstance(physical, str):
        view.physical_non_string = physical
    view.provisioned_by = provisioned_by_label(row)
    view.deletion_policy = _str(row.get("deletionPolicy"))
    view.update_replace_policy = _str(row.get("updateReplacePolicy"))
    deps = row.get("dependencies")
    for dep in deps if isinstance(deps, list) else []:
        dep = str(dep)
        href = f"?page={page_of[dep]}#{anchor(dep)}" if dep in page_of else None
        view.dependencies.append(Dependency(dep, href))
    leaves = row.get("noEchoLeaves")
    view.masked_leaves = [_leaf_path(leaf) for leaf in leaves] if isinstance(leaves, list) else []
    names = row.get("noEchoAttributeNames")
    view.masked_attributes = [str(n) for n in names] if isinstance(names, list) else []
    view.baseline_refused = row.get("observedBaselineRefused") is True
    view.baseline_refusal_reason = _str(row.get("observedBaselineRefusalReason"))
    return view


def raw_resources(parsed: ParsedRecord) -> dict[str, Any]:
    raw = parsed.data.get("resources") if isinstance(parsed.data, dict) else None
    return raw if isinstance(raw, dict) else {}


def resource_rows(parsed: ParsedRecord, query: str = "") -> tuple[list[tuple[str, dict | None]], dict[str, int]]:
    """The record's rows, filtered by `query` (logical id, type or physical id, case-blind),
    and the page (of the unfiltered list) each logical id sits on, for dependency links."""
    rows = parsed.resource_rows()
    page_of = {lid: i // RESOURCES_PER_PAGE + 1 for i, (lid, _row) in enumerate(rows)}
    if query:
        needle = query.casefold()

        def matches(lid: str, row: dict | None) -> bool:
            fields = [lid]
            if row is not None:
                fields += [_str(row.get("resourceType")), _str(row.get("physicalId"))]
            return any(needle in f.casefold() for f in fields)

        rows = [(lid, row) for lid, row in rows if matches(lid, row)]
    return rows, page_of


@dataclass
class OutputRow:
    key: str
    value: Any
    is_string: bool
    export: bool


def output_rows(parsed: ParsedRecord) -> list[OutputRow]:
    exports = parsed.export_names()
    return [
        OutputRow(key, value, isinstance(value, str), exports is not None and key in exports)
        for key, value in parsed.outputs().items()
    ]


@dataclass
class RecordWarning:
    message: str
    code: str = ""
    path: str = ""
    blocking: bool = True


def record_warnings(stack: Stack, parsed: ParsedRecord) -> list[RecordWarning]:
    warnings = [RecordWarning(d.message, d.code, d.path) for d in parsed.defects]
    # Damage that blocks nothing (e.g. a non-list exportNames reads as "exports nothing").
    warnings += [RecordWarning(w.message, w.code, w.path, blocking=False) for w in parsed.warnings]
    if parsed.newer_than_supported:
        warnings.append(
            RecordWarning(
                f"Written by a newer cdkd (version {parsed.version}): read-only here. "
                "Upgrade cdkd Admin before changing this stack from it.",
                "newer-version",
            )
        )
    if parsed.region_mismatch:
        warnings.append(
            RecordWarning(
                f"The record's body names a different region ({parsed.body_region_kind}) from its key "
                f"({stack.region or 'none'}). cdkd goes by the key; the next cdkd write stamps the key's region.",
                "region-mismatch",
            )
        )
    if stack.legacy:
        warnings.append(
            RecordWarning(
                "Legacy key (schema v1 layout, no region in the key). The next cdkd write (e.g. cdkd deploy) "
                "migrates it to the region-scoped key.",
                "legacy-key",
                blocking=False,
            )
        )
    return warnings


@dataclass
class LockView:
    lock: Lock
    state: str
    label: str
    deadline_known: bool


def lock_view(lock: Lock | None, at_ms: int) -> LockView | None:
    if lock is None:
        return None
    state = lock.state(at_ms)
    return LockView(lock, state, LockState(state).label, lock.expires_at_ms is not None)


def count_label(n: int, singular: str, plural: str) -> str:
    return f"{n} {ngettext(singular, plural, n)}"


@dataclass
class JournalNotice:
    """A leftover rollback journal, as the Overview tab tells it: when it was written, the
    command that settles it, and why that cannot run now ("" when it can)."""

    key: str
    size: int | None
    modified: datetime | None
    age: str
    command: str  # this app's, recorded as an Operation
    cdkd_command: str  # the cdkd CLI's
    why_not: str
    url: str = ""  # the rollback request page (plan, approval per policy, the worker)


def _arg(value: str, hole: str) -> str:
    """`value` quoted to paste into a shell, or the hole when it would not paste as typed."""
    return shlex.quote(value) if value and value.isprintable() else hole


def _rollback_why_not(stack: Stack, lock: LockView | None) -> str:
    """Why `rollback` would refuse now: the rule the request page follows (`actions.why_not`)."""
    if stack.read_only:
        return (
            f"Written by a newer cdkd (schema version {stack.schema_version}): this app does not roll it back; "
            f"use that cdkd."
        )
    return actions.why_not(stack, OperationKind.ROLLBACK, lock=lock.lock if lock else None, lock_known=True) or ""


def journal_notice(stack: Stack, lock: LockView | None, at_ms: int) -> JournalNotice | None:
    """The notice for the stack's leftover rollback journal (from the mirror), or None."""
    if not stack.journal_key:
        return None
    modified = stack.journal_modified
    age = humanize_ms(at_ms - int(modified.timestamp() * 1000)) + " ago" if modified else "at an unknown time"
    name, region = _arg(stack.stack_name, "<stack>"), _arg(stack.region or "", "<region>")
    prefix = stack.account.prefix
    prefix_flag = "" if prefix == DEFAULT_PREFIX else f" --state-prefix {_arg(prefix, '<prefix>')}"
    account = stack.account.account_id
    return JournalNotice(
        key=stack.journal_key,
        size=stack.journal_size,
        modified=modified,
        age=age,
        command=f"python manage.py cdkd rollback {name} --account {account} --stack-region {region} --yes",
        cdkd_command=f"cdkd rollback {name} --stack-region {region}{prefix_flag}",
        why_not=_rollback_why_not(stack, lock),
        url=reverse("operation_new", args=[account, stack.region_slug, stack.stack_name, OperationKind.ROLLBACK]),
    )
