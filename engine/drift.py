"""cdkd drift: each resource's live state (its provider's `read`) against the baseline the
record holds, `observedProperties` where present, else `properties` (seed 000, v3).

Per resource: IN_SYNC, MODIFIED (each difference's `path`, `expected`, `actual`), DELETED
(AWS says the resource is gone) or NOT_CHECKED with the reason:

- `baselineRefused`: the row carries `observedBaselineRefused` (v10). It is NOT read at all,
  so the live value never enters the report (seed 000, v10).
- `noProviderRead`: no provider of the type can read it back (custom resources, ...).
- `noPhysicalId`, `malformedRow`, `nothingInAws` (AWS::CDK::Metadata): nothing to read.
- `readFailed`: the read failed for another reason than "not found" (the only outcome
  that counts as an error: exit 2).

The comparator's carve-outs (seed 000, v3): a top-level key the reader does not report is
not compared (it cannot say); a top-level key the template never declared whose captured
value is EMPTY (`[]`, `{}`, null) is skipped, since a sibling resource or AWS fills it
after the capture; an undeclared key captured with a real value is compared. Against
`properties` (no baseline), only declared keys are compared.

Masked positions (v11): where the baseline or the record's `properties` hold `***` or a
`{{resolve:...}}` reference, or `noEchoLeaves` names the position, nothing is compared and
neither side is printed: the path alone goes to the resource's `masked` group, which never
changes the status or the exit code. Values under a secret-bearing name (`DbPassword`) are
shown as `***` and credential shapes are masked in every other value (engine.masking).

Reads run on a bounded pool (`concurrency`); `api_calls` counts every AWS API call the
reads made (botocore's before-call event on the clients this module builds).

Pure of Django: the management command, the scheduled checks and the operations in
engine/refresh.py all call `check_stack` / `check_rows`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from engine import aws as engine_aws
from engine.backend import StateBucket
from engine.errors import EngineError, NotFound
from engine.keys import KeyLayout
from engine.masking import MASK, Masker
from engine.providers import deploy_provider_for
from engine.providers.base import Clients, ResourceRef, Skip
from engine.providers.cloudcontrol import NOTHING_IN_AWS
from engine.schema import SUPPORTED_VERSION, parse_state
from engine.secrets import secret_name, secret_property

IN_SYNC = "IN_SYNC"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
NOT_CHECKED = "NOT_CHECKED"
DRIFTED = frozenset({MODIFIED, DELETED})

BASELINE_REFUSED = "baselineRefused"
NO_PROVIDER_READ = "noProviderRead"
NO_PHYSICAL_ID = "noPhysicalId"
MALFORMED_ROW = "malformedRow"
NOTHING = "nothingInAws"
READ_FAILED = "readFailed"
READ_EMPTY = "readReturnedNothing"

DEFAULT_CONCURRENCY = 10
# AWS's answers for "no such resource", across the services the providers read.
NOT_FOUND_CODES = frozenset(
    {
        "NotFound",
        "NotFoundException",
        "ResourceNotFoundException",
        "ResourceNotFound",
        "NoSuchEntity",
        "NoSuchBucket",
        "NoSuchKey",
        "404",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "ParameterNotFound",
    }
)
_SHAPES = Masker(())  # credential shapes only: it never holds a known value


class DriftError(EngineError):
    """The stack cannot be checked at all (no record, a newer schema, a legacy key)."""


# --- paths and masks ----------------------------------------------------------------------


def path_text(path: Iterable[Any]) -> str:
    """`Tags[0].Value`: how a difference names its position."""
    out = ""
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else str(seg))
    return out


def is_mask(value: Any) -> bool:
    """A stored value that stands for a secret: cdkd's `***` or a secret dynamic reference."""
    return isinstance(value, str) and (MASK in value or "{{resolve:" in value)


def value_at(document: Any, path: list[Any]) -> tuple[bool, Any]:
    node = document
    for seg in path:
        in_dict = isinstance(node, dict) and isinstance(seg, str) and seg in node
        if in_dict or (isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)):
            node = node[seg]
        else:
            return False, None
    return True, node


def noecho_leaves(row: dict[str, Any]) -> list[list[Any]]:
    leaves = row.get("noEchoLeaves")
    if not isinstance(leaves, list):
        return []
    return [leaf for leaf in leaves if isinstance(leaf, list) and leaf]


def _secret_segment(path: list[Any], resource_type: str) -> bool:
    return any(isinstance(s, str) and (secret_name(s) or secret_property(s, resource_type)) for s in path)


def mask_value(value: Any) -> Any:
    """Credential shapes masked in every string of a JSON value."""
    if isinstance(value, str):
        return _SHAPES(value)
    if isinstance(value, dict):
        return {k: mask_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_value(v) for v in value]
    return value


# --- the comparator -------------------------------------------------------------------------


def _scalar(value: Any) -> Any:
    """A scalar as AWS's string-typed APIs see it: 45 == "45", True == "true"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return value


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {} or value == ""


def _as_json(value: Any, other: Any) -> Any:
    """A JSON-encoded string compared with a structure is compared as that structure."""
    if isinstance(value, str) and isinstance(other, dict | list):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, dict | list) else value
    return value


def _unordered(items: list[Any]) -> list[Any] | None:
    """Tag lists compare as sets keyed by `Key`; None for any other list."""
    if items and all(isinstance(i, dict) and isinstance(i.get("Key"), str) for i in items):
        return sorted(items, key=lambda i: i["Key"])
    return None


@dataclass
class Comparison:
    differences: list[dict[str, Any]] = field(default_factory=list)
    masked: list[str] = field(default_factory=list)
    drifted_keys: list[str] = field(default_factory=list)  # top-level keys with a difference


class _Comparator:
    def __init__(self, baseline: dict, properties: dict, leaves: list[list[Any]], resource_type: str) -> None:
        self.baseline = baseline
        self.properties = properties
        self.leaves = leaves
        self.resource_type = resource_type
        self.out = Comparison()

    def masked_at(self, path: list[Any], expected: Any) -> bool:
        if is_mask(expected):
            return True
        found, recorded = value_at(self.properties, path)
        if found and is_mask(recorded):
            return True
        return any(path[: len(leaf)] == leaf for leaf in self.leaves)

    def add(self, path: list[Any], expected: Any, actual: Any) -> None:
        if _secret_segment(path, self.resource_type):
            expected, actual = MASK, MASK  # a difference all the same, never its values
        self.out.differences.append(
            {"path": path_text(path), "expected": mask_value(expected), "actual": mask_value(actual)}
        )
        if path and path[0] not in self.out.drifted_keys:
            self.out.drifted_keys.append(path[0])

    def diff(self, expected: Any, actual: Any, path: list[Any]) -> None:
        if self.masked_at(path, expected):
            self.out.masked.append(path_text(path))
            return
        expected, actual = _as_json(expected, actual), _as_json(actual, expected)
        if isinstance(expected, dict) and isinstance(actual, dict):
            for key in list(expected) + [k for k in actual if k not in expected]:
                if key not in actual:
                    if not _empty(expected[key]):
                        self.add([*path, key], expected[key], None)
                elif key not in expected:
                    if not self.masked_at([*path, key], None) and not _empty(actual[key]):
                        self.add([*path, key], None, actual[key])
                else:
                    self.diff(expected[key], actual[key], [*path, key])
            return
        if isinstance(expected, list) and isinstance(actual, list):
            expected = _unordered(expected) or expected
            actual = _unordered(actual) or actual
            if len(expected) != len(actual):
                if any(self.masked_at([*path, i], v) for i, v in enumerate(expected)):
                    self.out.masked.append(path_text(path))  # a list holding a mask: never shown
                else:
                    self.add(path, expected, actual)
                return
            for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
                self.diff(e, a, [*path, i])
            return
        if isinstance(expected, dict | list) or isinstance(actual, dict | list):
            if not (_empty(expected) and _empty(actual)):
                self.add(path, expected, actual)
            return
        if _scalar(expected) != _scalar(actual):
            self.add(path, expected, actual)


def compare(
    live: dict[str, Any],
    row: dict[str, Any],
    *,
    resource_type: str = "",
) -> Comparison:
    """The differences between `live` (a provider read) and the row's baseline."""
    properties = row.get("properties") if isinstance(row.get("properties"), dict) else {}
    observed = row.get("observedProperties")
    has_baseline = isinstance(observed, dict)
    baseline = observed if has_baseline else properties
    comparator = _Comparator(baseline, properties, noecho_leaves(row), resource_type)
    for key, expected in baseline.items():
        if key not in live:
            continue  # the reader does not report it: nothing to say either way
        if has_baseline and key not in properties and _empty(expected):
            continue  # seed 000's carve-out: filled after the capture by a sibling or AWS
        comparator.diff(expected, live[key], [key])
    return comparator.out


# --- reading ---------------------------------------------------------------------------------


_CURRENT = threading.local()  # the CountingClients of the drift read running on this thread


def _before_call(**_kw: Any) -> None:
    sink = getattr(_CURRENT, "sink", None)
    if sink is not None:
        sink.count()


def _after_call(parsed: Any = None, **_kw: Any) -> None:
    sink = getattr(_CURRENT, "sink", None)
    code = parsed.get("Error", {}).get("Code") if isinstance(parsed, dict) else None
    if sink is not None and code:
        sink.errors().append(str(code))


class CountingClients(Clients):
    """Clients that count the API calls of drift reads and note, per thread, the error codes
    AWS answered (a provider's `read` answers None for "gone" and for "failed" alike: the
    codes tell). The boto3 clients are the engine's shared ones (engine.aws.client); their
    handlers report only to the CountingClients whose read runs on the calling thread."""

    def __init__(self, session: Any, state_bucket: Any = None) -> None:
        super().__init__(session, state_bucket)
        self.calls = 0
        self._count_lock = threading.Lock()
        self._local = threading.local()

    def __call__(self, service: str, region: str) -> Any:
        client = super().__call__(service, region)
        # Registered once per shared client (botocore ignores a second unique_id).
        client.meta.events.register("before-call.*.*", _before_call, unique_id="cdkd-drift-count")
        client.meta.events.register("after-call.*.*", _after_call, unique_id="cdkd-drift-errors")
        return client

    def count(self) -> None:
        with self._count_lock:
            self.calls += 1

    def errors(self) -> list[str]:
        if not hasattr(self._local, "codes"):
            self._local.codes = []
        return self._local.codes

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Count and note the calls this thread makes inside the block."""
        self._local.codes = []
        previous = getattr(_CURRENT, "sink", None)
        _CURRENT.sink = self
        try:
            yield
        finally:
            _CURRENT.sink = previous


@dataclass
class ResourceDrift:
    logical_id: str
    resource_type: str
    status: str
    differences: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    detail: str = ""
    masked: list[str] = field(default_factory=list)
    error: bool = False
    # Never in `as_json`: the writers in engine/refresh.py need them, no output does.
    live: dict[str, Any] | None = field(default=None, repr=False)
    drifted_keys: list[str] = field(default_factory=list, repr=False)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "logicalId": self.logical_id,
            "resourceType": self.resource_type,
            "status": self.status,
            "differences": self.differences,
            "reason": self.reason,
        }
        if self.detail:
            out["detail"] = self.detail
        if self.masked:
            out["masked"] = self.masked
        return out


@dataclass
class DriftReport:
    stack: str
    region: str
    resources: list[ResourceDrift]
    api_calls: int = 0
    etag: str | None = None
    duration_ms: int = 0
    concurrency: int = DEFAULT_CONCURRENCY
    warnings: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> list[ResourceDrift]:
        return [r for r in self.resources if r.status in DRIFTED]

    @property
    def errors(self) -> list[ResourceDrift]:
        return [r for r in self.resources if r.error]

    def counts(self) -> dict[str, int]:
        counts = {IN_SYNC: 0, MODIFIED: 0, DELETED: 0, NOT_CHECKED: 0}
        for r in self.resources:
            counts[r.status] = counts.get(r.status, 0) + 1
        return counts

    @property
    def exit_code(self) -> int:
        """cdkd's: 2 when a read failed, 1 when something drifted, 0 in sync. Masked
        positions and NOT_CHECKED for a stated reason never count."""
        if self.errors:
            return 2
        return 1 if self.drifted else 0

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "region": self.region,
            "resources": [r.as_json() for r in self.resources],
            "counts": self.counts(),
            "apiCalls": self.api_calls,
        }


ProviderFor = Callable[[str, str | None], Any]


def _not_checked(lid: str, rtype: str, reason: str, detail: str, *, error: bool = False) -> ResourceDrift:
    return ResourceDrift(lid, rtype, NOT_CHECKED, reason=reason, detail=detail, error=error)


def check_row(
    clients: CountingClients,
    logical_id: str,
    row: dict[str, Any] | None,
    *,
    region: str,
    account_id: str,
    provider_for: ProviderFor = deploy_provider_for,
) -> ResourceDrift:
    """One resource's drift (one provider read, or none with the reason)."""
    if row is None:
        return _not_checked(logical_id, "", MALFORMED_ROW, "the state row cannot be read")
    rtype = str(row.get("resourceType") or "")
    if row.get("observedBaselineRefused") is True:
        return _not_checked(
            logical_id,
            rtype,
            BASELINE_REFUSED,
            "cdkd import declined to capture a baseline for it (observedBaselineRefused): it is not read back; "
            "deploy a change to the resource to clear it",
        )
    if rtype in NOTHING_IN_AWS:
        return _not_checked(logical_id, rtype, NOTHING, "a template marker with no AWS resource behind it")
    pid = row.get("physicalId")
    if not isinstance(pid, str) or not pid.strip() or is_mask(pid):
        return _not_checked(logical_id, rtype, NO_PHYSICAL_ID, "the row has no usable physical id")
    provider = provider_for(rtype, row.get("provisionedBy"))
    reader = getattr(provider, "read", None)
    if reader is None:
        return _not_checked(logical_id, rtype, NO_PROVIDER_READ, f"no provider can read {rtype} back")
    ref = ResourceRef(
        logical_id=logical_id,
        resource_type=rtype,
        physical_id=pid,
        properties=dict(row.get("properties") or {}) if isinstance(row.get("properties"), dict) else {},
        attributes=dict(row.get("attributes") or {}) if isinstance(row.get("attributes"), dict) else {},
        region=region,
        account_id=account_id,
        provisioned_by=row.get("provisionedBy"),
    )
    try:
        with clients.reading():
            live = reader(clients, ref)
    except Skip as exc:
        return _not_checked(logical_id, rtype, NO_PHYSICAL_ID, str(exc))
    except Exception as exc:  # a provider bug or an AWS failure: this resource only
        return _not_checked(
            logical_id, rtype, READ_FAILED, f"the read failed: {engine_aws.bounded(str(exc))}", error=True
        )
    codes = list(clients.errors())
    if not isinstance(live, dict):
        gone = NOT_FOUND_CODES | frozenset(getattr(provider, "not_found_codes", ()))
        if any(code in gone for code in codes):
            return ResourceDrift(logical_id, rtype, DELETED, detail=f"AWS answered {codes[-1]}: the resource is gone")
        if codes:
            return _not_checked(logical_id, rtype, READ_FAILED, f"the read failed ({codes[-1]})", error=True)
        return _not_checked(logical_id, rtype, READ_EMPTY, "the provider's read returned nothing to compare")
    result = compare(live, row, resource_type=rtype)
    status = MODIFIED if result.differences else IN_SYNC
    return ResourceDrift(
        logical_id,
        rtype,
        status,
        differences=result.differences,
        masked=result.masked,
        live=live,
        drifted_keys=result.drifted_keys,
    )


def check_rows(
    clients: CountingClients,
    rows: list[tuple[str, dict[str, Any] | None]],
    *,
    region: str,
    account_id: str,
    concurrency: int = DEFAULT_CONCURRENCY,
    provider_for: ProviderFor = deploy_provider_for,
) -> list[ResourceDrift]:
    """Every row's drift, `concurrency` reads at a time, in the rows' order."""

    def one(item: tuple[str, dict[str, Any] | None]) -> ResourceDrift:
        return check_row(clients, item[0], item[1], region=region, account_id=account_id, provider_for=provider_for)

    workers = max(1, min(int(concurrency), len(rows) or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="drift") as pool:
        return list(pool.map(one, rows))


@dataclass
class LoadedRecord:
    key: str
    etag: str
    parsed: Any  # engine.schema.ParsedRecord


def load_record(bucket: StateBucket, layout: KeyLayout, stack: str, region: str | None) -> LoadedRecord:
    """The stack's region-scoped record, parsed; DriftError when there is none to check."""
    if not region:
        raise DriftError(
            f"{stack}: drift needs a region-scoped record (--stack-region); a legacy record must be migrated by a "
            "cdkd deploy first"
        )
    key = layout.state_key(stack, region)
    try:
        stored = bucket.get(key)
    except NotFound:
        raise DriftError(f"no state record for {stack} in {region} ({key})") from None
    parsed = parse_state(stored.body, key_region=region, stack_name=stack)
    if parsed.newer_than_supported:
        raise DriftError(
            f"{key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this app knows; upgrade "
            "cdkd Admin to check it"
        )
    if not isinstance(parsed.data, dict) or not isinstance(parsed.data.get("resources"), dict):
        raise DriftError(f"{key} has no readable resources map; see `cdkd state show {stack}`")
    return LoadedRecord(key, stored.etag, parsed)


def check_stack(
    bucket: StateBucket,
    layout: KeyLayout,
    stack: str,
    region: str | None,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    only: Iterable[str] | None = None,
    provider_for: ProviderFor = deploy_provider_for,
    clients: CountingClients | None = None,
) -> DriftReport:
    """`cdkd drift STACK`: read the record, read every resource (or `only` these), compare."""
    started = time.monotonic()
    record = load_record(bucket, layout, stack, region)
    rows = record.parsed.resource_rows()
    if only is not None:
        wanted = set(only)
        rows = [(lid, row) for lid, row in rows if lid in wanted]
    clients = clients or CountingClients(bucket.session)
    results = check_rows(
        clients,
        rows,
        region=region or "",
        account_id=bucket.account_id,
        concurrency=concurrency,
        provider_for=provider_for,
    )
    report = DriftReport(
        stack=stack,
        region=region or "",
        resources=results,
        api_calls=clients.calls,
        etag=record.etag,
        duration_ms=int((time.monotonic() - started) * 1000),
        concurrency=concurrency,
    )
    if record.parsed.defects:
        report.warnings.append(
            f"{record.key} is damaged ({', '.join(d.code for d in record.parsed.defects)}): accept, revert and "
            "refresh-observed refuse it"
        )
    return report


def render_text(report: DriftReport) -> str:
    """The human report: one line per resource, its differences below it, masked paths
    named without either side."""
    lines = [f"Stack {report.stack} ({report.region})"]
    for r in report.resources:
        head = f"  {r.status:<11} {r.logical_id} ({r.resource_type or '?'})"
        if r.reason:
            head += f": {r.reason}" + (f" ({r.detail})" if r.detail else "")
        elif r.status == DELETED and r.detail:
            head += f": {r.detail}"
        lines.append(head)
        for d in r.differences:
            expected = json.dumps(d["expected"], ensure_ascii=False)
            actual = json.dumps(d["actual"], ensure_ascii=False)
            lines.append(f"      {d['path']}: expected {expected}, actual {actual}")
        if r.masked:
            lines.append(f"      masked (not compared, not shown): {', '.join(r.masked)}")
    c = report.counts()
    lines.append(
        f"{c[IN_SYNC]} in sync, {c[MODIFIED]} modified, {c[DELETED]} deleted, {c[NOT_CHECKED]} not checked; "
        f"{report.api_calls} API calls"
    )
    return "\n".join(lines) + "\n"
