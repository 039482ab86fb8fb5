"""Destroy: delete a stack's AWS resources from its state record alone (cdkd's `state destroy`).

Registered as operation kind `destroy` (`engine.operations`). The authority is seed 004
(destroy internals) and seeds 000/001 ("State writes during deploy and destroy"); the
reference's §8 describes the older snapshot, §10.9 what changed.

plan(ctx) -- pure reads, no lock. Refuses (`OperationRefused`, one line) when:
  the record is missing or legacy (no region); it has any defect (`parse_state`); its
  version is newer than 11; its body region disagrees with its key while it lists
  resources; another record of the bucket (any stack, any region, under the prefix)
  has an `imports` entry whose sourceStack/sourceRegion name this stack -- checked, as
  cdkd does, when the outputs bag holds anything (unreadable consumer records are skipped,
  as cdkd skips them, but named in the plan's warnings); the dependency graph has a cycle;
  the resource providers cannot be loaded.
  Otherwise `data` holds, per stack (nested children recursively under their row):
  `rows` {logicalId: {action, resourceType, physicalId, provisionedBy, deletionPolicy,
  reason?, digest, child?}}, `order` / `levels` (deletion order), the digests that let a
  re-run accept a trimmed record, and whether the import check applies. Actions:
    delete         provider delete
    snapshot       DeletionPolicy Snapshot and the provider can take the final snapshot
    fail-snapshot  DeletionPolicy Snapshot and it cannot: the resource FAILS, as
                   CloudFormation fails it (seed 004); `skip_final_snapshot` opts out
    retain         Retain / RetainExceptOnCreate: no AWS call; the row stays in every
                   snapshot and is dropped only with the record on full success
    skip           cannot be addressed (no physical id, the redaction mask, a provider's
                   dry `Skip`): no AWS call, the row is KEPT, the reason recorded
    nested         AWS::CloudFormation::Stack: the child `{parent}~{logicalId}` is
                   destroyed first, recursively, under its own lock
    gone           nested row whose child record is already missing: counts as deleted
    fail           nested row whose child record is refused (damaged, newer, imported,
                   ...): the row FAILS; the parent finishes its other deletes (seed 004)

execute(ctx, plan) -- under `ctx.held_lock("destroy")` (each child under its own):
  re-read; the record must be at `plan.etag`, OR be a trimmed subset of the plan: only
  rows removed, each remaining row byte-for-byte as planned (digest), everything else as
  planned except what a destroy snapshot changes (outputs cleared, imports/outputReads
  dropped, lastModified, version). That is exactly what this operation's own incremental
  writes leave behind, so a re-run of the SAME approved operation after a crash (SIGKILL)
  resumes: rows already gone are not deleted again, and nothing outside the approved plan
  is touched. Anything else raises `StalePlan`. The import check runs again under the lock.
  Deletes run in reverse dependency order (`engine.graph`): a resource starts only once
  every resource depending on it is deleted (or retained, or skipped: seed 004 relies on a
  parent's delete removing a skipped child); independent deletes run concurrently
  (`concurrency`, default 8). A row whose dependent FAILED is not attempted: it is reported
  skipped with the reason. "Not found" counts as deleted. After each delete the trimmed
  record is written with `If-Match` on the ETag last written (outputs `{}`, imports and
  outputReads dropped, lastModified refreshed; retained, skipped and failed rows kept); a
  failed incremental write is logged and the final write decides. The writes run on one
  serial writer thread (cdkd chains them the same way), newest snapshot first, so deletes
  keep starting while a write is on the wire; a snapshot may lag the newest deletes (a
  re-run then finds those "not found"), never lead them.
  Full success: `create-tokens.json` (always issued, `If-Match` on the ledger as read or
  "only while absent"; a failure leaves the record and the run partial), then
  `state.json` (`If-Match`), then the rollback journal and its
  noncurrent versions, then this stack's entries of `{prefix}/_index/{region}/exports.json`
  (If-Match, 5 attempts with backoff, soft). Otherwise the trimmed record is written once
  more and stays.
  Cancel (`ctx.cancelled()`, or the lock found lost): no new deletes start, in-flight ones
  finish, the record is persisted, the lock released; status `partial`, reason `cancelled`.
  Every run writes cdkd's event store through `engine.events.EventRecorder` (children's
  events carry the child's stackName), including runs refused under the lock.
  Outcome: status `succeeded` (record gone), `partial` (some left), `failed` (nothing
  deleted and something failed); `details`: `counts` {deleted, retained, skipped, failed,
  unverified} of the top-level stack, `stacks` (per stack incl. children), `left`,
  `already_gone`, `run_id`, `reason`.

The providers (`engine.providers`) are reached through four seams a test may replace:
`Destroy(delete=..., supports_snapshot=..., precheck=..., clients=...)`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from engine.backend import StoredObject
from engine.errors import EngineError, NotFound, PreconditionFailed, RecordRefused
from engine.events import (
    RESOURCE_FAILED,
    RESOURCE_GUARD_INDETERMINATE,
    RESOURCE_RETAINED,
    RESOURCE_SKIPPED,
    RESOURCE_STARTED,
    RESOURCE_SUCCEEDED,
    RESULT_FAILED,
    RESULT_SUCCEEDED,
    EventRecorder,
)
from engine.graph import CycleError, build_graph
from engine.keys import NESTED_SEPARATOR, KeyKind, child_stack_name
from engine.masking import MASK, Masker
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register
from engine.schema import (
    SUPPORTED_VERSION,
    StackState,
    dump_state,
    js_stringify,
    parse_state,
    version_line,
    write_version,
)

NESTED_STACK_TYPE = "AWS::CloudFormation::Stack"
DEFAULT_CONCURRENCY = 8
MAX_NESTING = 10  # a `~` chain deeper than this is refused rather than followed
EXPORTS_ATTEMPTS = 5  # cdkd's export-index store: 5 attempts, 100 ms doubling to a 1 s cap
EXPORTS_BACKOFF_S = 0.1
EXPORTS_BACKOFF_CAP_S = 1.0
NO_PHYSICAL_ID = "state record has no physical id"

# Substrings cdkd's runner reads as "already deleted" in an error message (reference §8.2).
NOT_FOUND_MARKERS = ("does not exist", "not found", "No policy found", "NoSuchEntity", "NotFoundException")
NOT_FOUND_CODES = frozenset(
    {
        "NoSuchEntity",
        "NotFoundException",
        "ResourceNotFoundException",
        "NoSuchBucket",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "ParameterNotFound",
        "NotFound",
    }
)

ACTION_DELETE = "delete"
ACTION_SNAPSHOT = "snapshot"
ACTION_FAIL_SNAPSHOT = "fail-snapshot"
ACTION_RETAIN = "retain"
ACTION_SKIP = "skip"
ACTION_NESTED = "nested"
ACTION_GONE = "gone"
ACTION_FAIL = "fail"
CALL_ACTIONS = frozenset({ACTION_DELETE, ACTION_SNAPSHOT, ACTION_NESTED, ACTION_GONE})

# Row outcomes (also the progress item statuses).
PENDING, DELETING, DELETED, RETAINED, SKIPPED, FAILED = (
    "pending",
    "deleting",
    "deleted",
    "retained",
    "skipped",
    "failed",
)
# A dependent in one of these no longer stands in the way of what it depends on.
RELEASES = frozenset({DELETED, RETAINED, SKIPPED})


# --- the provider seam ----------------------------------------------------------------------


class Skip(Exception):  # noqa: N818 - the providers' name for it
    """Stand-in for `engine.providers.Skip` until that lands: the resource cannot be addressed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProviderError(Exception):
    """Stand-in for `engine.providers.ProviderError`: AWS refused; `aws_code`, `request_id`."""

    def __init__(self, message: str, aws_code: str | None = None, request_id: str | None = None) -> None:
        super().__init__(message)
        self.aws_code = aws_code
        self.request_id = request_id


@dataclass(frozen=True)
class ResourceRef:
    """Stand-in for `engine.providers.ResourceRef` (same fields, keyword-constructed)."""

    logical_id: str
    resource_type: str
    physical_id: str | None
    properties: dict[str, Any]
    attributes: dict[str, Any]
    region: str
    account_id: str
    provisioned_by: str | None


def _providers() -> Any:
    """engine.providers, or None while it does not exist yet."""
    try:
        import engine.providers as providers
    except ModuleNotFoundError as exc:
        if exc.name == "engine.providers":
            return None
        raise
    return providers


def _skip_types() -> tuple[type[BaseException], ...]:
    providers = _providers()
    other = getattr(providers, "Skip", None) if providers is not None else None
    return (Skip, other) if isinstance(other, type) and other is not Skip else (Skip,)


def _make_ref(**fields: Any) -> Any:
    providers = _providers()
    cls = getattr(providers, "ResourceRef", None) if providers is not None else None
    return (cls or ResourceRef)(**fields)


def _require_providers() -> Any:
    providers = _providers()
    if providers is None or not hasattr(providers, "delete_resource"):
        raise OperationRefused("the resource providers (engine.providers) are not installed; nothing can be deleted")
    return providers


def default_delete(clients: Any, ref: Any, snapshot: bool = False) -> Any:
    return _require_providers().delete_resource(clients, ref, snapshot=snapshot)


def default_supports_snapshot(ref: Any) -> bool:
    providers = _require_providers()
    try:
        provider = providers.provider_for(ref)
    except Exception:  # noqa: BLE001 - no provider: it cannot snapshot
        return False
    value = getattr(provider, "supports_snapshot", False)
    return bool(value(ref) if callable(value) else value)


def default_precheck(ref: Any) -> str | None:
    """A provider's dry addressability check, when it offers one: a `Skip` is the reason."""
    providers = _require_providers()
    checks: list[Callable[[Any], Any]] = []
    for name in ("check_addressable", "precheck"):
        if callable(getattr(providers, name, None)):
            checks.append(getattr(providers, name))
    if not checks:
        try:
            provider = providers.provider_for(ref)
        except Exception:  # noqa: BLE001 - no SDK provider: Cloud Control takes it
            provider = None
        for name in ("check", "precheck", "addressable"):
            if callable(getattr(provider, name, None)):
                checks.append(getattr(provider, name))
                break
    for check in checks:
        try:
            check(ref)
        except _skip_types() as exc:
            return str(getattr(exc, "reason", None) or exc)
    return None


def default_clients(ctx: Context) -> Any:
    providers = _require_providers()
    return providers.Clients(ctx.bucket.session, state_bucket=ctx.bucket)


# --- small helpers --------------------------------------------------------------------------


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", errors="backslashreplace")).hexdigest()


# Fields a destroy snapshot may change; everything else must stay as planned.
_SNAPSHOT_FIELDS = ("resources", "outputs", "imports", "outputReads", "lastModified", "version", "stackName", "region")


_TRIM_DROPS = ("imports", "outputReads")  # what a destroy snapshot leaves out


def _residual_digest(data: dict[str, Any]) -> str:
    return _digest({k: v for k, v in data.items() if k not in _SNAPSHOT_FIELDS})


def _cross_digest(data: dict[str, Any]) -> str:
    return _digest({k: data.get(k) for k in ("outputs", "imports", "outputReads")})


def _trimmed_cross(data: dict[str, Any]) -> bool:
    """outputs/imports/outputReads as a destroy snapshot leaves them."""
    return data.get("outputs", {}) == {} and "imports" not in data and "outputReads" not in data


def _now_ms() -> int:
    return int(time.time() * 1000)


def _physical_id_problem(row: dict[str, Any]) -> str | None:
    """Seed 004's first skip cause, plus the redaction mask (names nothing in AWS)."""
    physical_id = row.get("physicalId")
    if not isinstance(physical_id, str) or not physical_id.strip():
        return NO_PHYSICAL_ID
    if physical_id == MASK or physical_id.startswith("{{resolve:"):
        return "state record's physical id is redacted (the *** mask or a secret reference) — no delete issued"
    return None


def _read(ctx: Context, key: str) -> StoredObject | None:
    try:
        return ctx.bucket.get(key)
    except NotFound:
        return None


def _where(stack: str, region: str | None) -> str:
    return f"{stack} ({region or 'legacy, no region'})"


# --- the import (strong reference) scan -------------------------------------------------------


def scan_consumers(ctx: Context, stack: str, region: str) -> tuple[list[str], list[str]]:
    """(consumers, unreadable) over every OTHER record under the prefix (cdkd's
    `scanActiveConsumers`): a consumer is an `imports` entry whose sourceStack and
    sourceRegion name `stack`/`region` (the same name in another region is another stack).
    Unreadable records are skipped, as cdkd skips them, and returned so a plan can name them."""
    own = ctx.layout.state_key(stack, region)
    keys: list[tuple[str, str | None, str | None]] = []
    for item in ctx.bucket.list_objects(ctx.layout.list_prefix):
        parsed = ctx.layout.parse(item.key)
        if parsed is None or parsed.kind not in (KeyKind.STATE, KeyKind.LEGACY_STATE) or item.key == own:
            continue
        keys.append((item.key, parsed.stack_name, parsed.region))

    def inspect(entry: tuple[str, str | None, str | None]) -> tuple[list[str], str | None]:
        key, name, key_region = entry
        try:
            stored = ctx.bucket.get(key)
        except NotFound:
            return [], None  # deleted since the listing
        except EngineError as exc:
            return [], f"{key} ({exc})"
        record = parse_state(stored.body, key_region=key_region, stack_name=name)
        data = record.data
        if not isinstance(data, dict):
            return [], f"{key} (not a readable record)"
        imports = data.get("imports")
        if imports is None:
            return [], None
        if not isinstance(imports, list):
            return [], f"{key} (its imports are not a list)"
        found = []
        for entry_ in imports:
            if isinstance(entry_, dict) and entry_.get("sourceStack") == stack and entry_.get("sourceRegion") == region:
                export = entry_.get("exportName")
                found.append(f"{name} ({key_region or 'legacy'}): imports export '{export}'")
        return found, None

    consumers: list[str] = []
    unreadable: list[str] = []
    with ThreadPoolExecutor(max_workers=16) as pool:
        for found, problem in pool.map(inspect, keys):
            consumers += found
            if problem:
                unreadable.append(problem)
    return consumers, unreadable


def _refuse_consumers(stack: str, region: str, consumers: list[str]) -> OperationRefused:
    listed = "; ".join(consumers[:5]) + (f" (and {len(consumers) - 5} more)" if len(consumers) > 5 else "")
    return OperationRefused(
        f"{_where(stack, region)} is still imported by another stack: {listed}. Destroy or update the "
        f"consumers first (there is no override)"
    )


# --- the exports index -----------------------------------------------------------------------


def remove_stack_exports(
    ctx: Context, stack: str, region: str, *, sleep: Callable[[float], None] = time.sleep
) -> str | None:
    """Remove the entries `stack`/`region` produced from `{prefix}/_index/{region}/exports.json`
    (cdkd's `exportIndexStore.removeStack`: producerStack AND producerRegion match).

    Conditional on the ETag read, retried on a 412 up to 5 attempts with 100 ms doubling
    backoff (1 s cap). A missing index and a no-op are not written. Never raises: returns a
    warning for people, or None. The index is a derived cache (E12), so failing is soft.
    """
    key = ctx.layout.exports_index_key(region)
    delay = EXPORTS_BACKOFF_S
    for _attempt in range(EXPORTS_ATTEMPTS):
        try:
            stored = ctx.bucket.get(key)
        except NotFound:
            return None
        except EngineError as exc:
            return f"could not read the exports index {key}: {exc}"
        try:
            data = json.loads(stored.body)
        except (ValueError, RecursionError):
            return f"the exports index {key} is not valid JSON; left as it is (cdkd rebuilds it)"
        if not isinstance(data, dict) or not isinstance(data.get("exports"), dict):
            return f"the exports index {key} has no exports map; left as it is (cdkd rebuilds it)"
        version = data.get("indexVersion")
        if isinstance(version, int | float) and not isinstance(version, bool) and version > 1:
            return f"the exports index {key} has indexVersion {version} (a newer cdkd); left as it is"
        exports = data["exports"]
        doomed = [
            name
            for name, entry in exports.items()
            if isinstance(entry, dict) and entry.get("producerStack") == stack and entry.get("producerRegion") == region
        ]
        if not doomed:
            return None
        updated = dict(data)
        updated["exports"] = {name: entry for name, entry in exports.items() if name not in doomed}
        updated["lastModified"] = _now_ms()
        body = js_stringify(updated, indent=2).encode("utf-8", errors="backslashreplace")
        try:
            ctx.bucket.put(key, body, if_match=stored.etag)
            ctx.log("info", f"removed {len(doomed)} export(s) of {stack} from {key}")
            return None
        except PreconditionFailed:
            sleep(delay)
            delay = min(delay * 2, EXPORTS_BACKOFF_CAP_S)
        except EngineError as exc:
            return f"could not update the exports index {key}: {exc}"
    return f"gave up updating the exports index {key} after {EXPORTS_ATTEMPTS} attempts (others kept writing it)"


# --- planning -------------------------------------------------------------------------------


class _ChildRefused(Exception):
    """A nested child cannot be destroyed; its parent row fails with this message."""


@dataclass
class _Seams:
    delete: Callable[..., Any]
    supports_snapshot: Callable[[Any], bool]
    precheck: Callable[[Any], str | None]
    clients: Callable[[Context], Any]
    defaults: bool


class Destroy:
    kind = "destroy"
    label = "Destroy"
    cancellable = True

    def __init__(
        self,
        delete: Callable[..., Any] | None = None,
        *,
        supports_snapshot: Callable[[Any], bool] | None = None,
        precheck: Callable[[Any], str | None] | None = None,
        clients: Callable[[Context], Any] | None = None,
        masker: Callable[[Context], Masker] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`delete(clients, ref, snapshot=False)` returns "deleted" | "not-found" (or an object
        with `.status` and optional `.unverified` = [{guard, reason}]), raises a Skip (no AWS
        call was made) or any other exception (the resource failed). The other seams default
        to engine.providers; with an injected `delete` they default to "no snapshot support",
        "addressable" and "no clients"."""
        injected = delete is not None
        self.seams = _Seams(
            delete=delete or default_delete,
            supports_snapshot=supports_snapshot or (default_supports_snapshot if not injected else (lambda ref: False)),
            precheck=precheck or (default_precheck if not injected else (lambda ref: None)),
            clients=clients or (default_clients if not injected else (lambda ctx: None)),
            defaults=not injected,
        )
        # Error messages in events and logs are masked for the account's known secret values,
        # read by the engine itself (never passed in through params, which are stored).
        self.masker_for = masker or (default_masker if not injected else (lambda ctx: Masker(())))
        self.clock = clock

    # -- plan -------------------------------------------------------------------------------

    def plan(self, ctx: Context) -> Plan:
        if ctx.region is None:
            raise OperationRefused(
                f"{_where(ctx.stack, None)} is a legacy record: destroy needs a region-scoped record "
                f"(any cdkd deploy migrates it), or drop it with orphan"
            )
        if self.seams.defaults:
            _require_providers()
        key = ctx.layout.state_key(ctx.stack, ctx.region)
        stored = _read(ctx, key)
        if stored is None:
            raise OperationRefused(f"no state record at {key}: nothing to destroy")
        data, changes, warnings = self._plan_stack(ctx, ctx.stack, ctx.region, stored, depth=0)
        concurrency = _concurrency(ctx)
        skip_snapshot = bool(ctx.params.get("skip_final_snapshot"))
        data["concurrency"] = concurrency
        data["skip_final_snapshot"] = skip_snapshot
        tokens = ctx.layout.create_tokens_key(ctx.stack, ctx.region)
        journal = ctx.layout.rollback_journal_key(ctx.stack, ctx.region)
        changes += [
            f"when everything is gone: delete {tokens}, then {key} (If-Match), then {journal} with its "
            f"noncurrent versions, then {ctx.stack}'s entries of {ctx.layout.exports_index_key(ctx.region)}",
            "otherwise: the record stays, trimmed to what still exists (outputs cleared, imports dropped); it "
            + version_line(parse_state(stored.body).version, data["schema_version"]),
            f"record this run in {ctx.layout.events_prefix(ctx.stack, ctx.region)} (cdkd's event history)",
        ]
        parent = ctx.stack.rsplit(NESTED_SEPARATOR, 1)
        if len(parent) == 2 and all(parent):
            warnings.append(f"{ctx.stack} is a nested child: its parent {parent[0]}'s row {parent[1]} is left dangling")
        counts = _action_counts(data)
        summary = (
            f"Destroy {_where(ctx.stack, ctx.region)}: delete {counts['delete']} AWS resource(s)"
            + (f", keep {counts['retain']} (Retain)" if counts["retain"] else "")
            + (f", skip {counts['skip']}" if counts["skip"] else "")
            + (f", {counts['fail']} will fail" if counts["fail"] else "")
            + (f", {counts['nested']} nested stack(s) first" if counts["nested"] else "")
            + f"; up to {concurrency} at a time."
        )
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=stored.etag,
            summary=summary,
            changes=changes,
            warnings=warnings,
            data=data,
        )

    def _plan_stack(
        self, ctx: Context, stack: str, region: str, stored: StoredObject, *, depth: int
    ) -> tuple[dict[str, Any], list[str], list[str]]:
        """Plan one record. Raises OperationRefused (the caller turns a child's into a row failure)."""
        key = ctx.layout.state_key(stack, region)
        parsed = parse_state(stored.body, key_region=region, stack_name=stack)
        where = _where(stack, region)
        if parsed.newer_than_supported:
            raise OperationRefused(
                f"{key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this app knows; "
                f"it is read-only here"
            )
        if parsed.defects:
            first = parsed.defects[0]
            listed = ", ".join(f"{d.path or '(root)'}: {d.code}" for d in parsed.defects[:5])
            raise OperationRefused(
                f"{key} is damaged ({listed}); nothing is destroyed on its strength. {first.message}"
            )
        rows = {lid: row for lid, row in parsed.resource_rows() if row is not None}
        if parsed.region_mismatch and rows:
            raise OperationRefused(
                f"the body of {key} names a region ({parsed.body_region_kind}) other than its key's {region} while it "
                f"still lists resources; deleting in the wrong region would read every not-found as deleted. Correct "
                f"`region` to {region}, destroy where the resources are, or orphan the record"
            )
        outputs = parsed.outputs()
        warnings: list[str] = []
        scan = bool(outputs)
        if scan:
            # A plan may take the pipeline's mirror (no GET per record); `_accept` re-checks the bucket.
            finder = ctx.consumers or (lambda s, r: scan_consumers(ctx, s, r))
            consumers, unreadable = finder(stack, region)
            if consumers:
                raise _refuse_consumers(stack, region, consumers)
            warnings += [f"could not read {u}; skipped by the import check, as cdkd skips it" for u in unreadable]
        graph = build_graph(rows)
        try:
            levels = graph.deletion_levels()
        except CycleError as exc:
            raise OperationRefused(f"{where}: {exc}; cdkd cannot order such a record either") from None
        skip_snapshot = bool(ctx.params.get("skip_final_snapshot"))
        planned: dict[str, dict[str, Any]] = {}
        changes: list[str] = []
        indent = "  " * depth
        for lid in [lid for level in levels for lid in level]:
            row = rows[lid]
            entry = self._plan_row(ctx, stack, region, lid, row, skip_snapshot, depth)
            planned[lid] = entry
            changes.append(indent + _change_line(lid, entry))
            if entry.get("child"):
                changes += entry["child"].pop("_changes")
                warnings += entry["child"].pop("_warnings")
        for orphan in parsed.orphans():
            state = orphan.resource_state()
            warnings.append(
                f"{where}: the rollback-orphan {orphan.logicalId} ({state.resourceType if state else '?'}, physical id "
                f"{state.physicalId if state else '?'}) stays live in AWS and stops being tracked with the record"
            )
        for lid, entry in planned.items():
            if entry["action"] == ACTION_RETAIN:
                warnings.append(f"{where}: {lid} is kept in AWS (DeletionPolicy {entry['deletionPolicy']})")
        journal = ctx.layout.rollback_journal_key(stack, region)
        if _read(ctx, journal) is not None:
            warnings.append(
                f"{journal} exists: resources only a failed deploy's journal records are NOT deleted by this app "
                f"(cdkd destroy deletes them first); the journal is deleted with the record"
            )
        data = {
            "stack": stack,
            "region": region,
            "key": key,
            "etag": stored.etag,
            "levels": levels,
            "order": [lid for level in levels for lid in level],
            "rows": planned,
            "residual": _residual_digest(parsed.data),
            "cross": _cross_digest(parsed.data),
            "scan_imports": scan,
            # What a trimmed snapshot is stamped with: the record's version (it only loses fields).
            "schema_version": write_version({k: v for k, v in parsed.data.items() if k not in _TRIM_DROPS}),
        }
        return data, changes, warnings

    def _plan_row(
        self, ctx: Context, stack: str, region: str, lid: str, row: dict[str, Any], skip_snapshot: bool, depth: int
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "resourceType": row.get("resourceType"),
            "physicalId": row.get("physicalId") if isinstance(row.get("physicalId"), str) else None,
            "provisionedBy": row.get("provisionedBy") if isinstance(row.get("provisionedBy"), str) else None,
            "deletionPolicy": row.get("deletionPolicy") if isinstance(row.get("deletionPolicy"), str) else None,
            "digest": _digest(row),
        }
        policy = entry["deletionPolicy"]
        if policy in ("Retain", "RetainExceptOnCreate"):
            entry["action"] = ACTION_RETAIN
            return entry
        if entry["resourceType"] == NESTED_STACK_TYPE:
            # Exempt from the physical-id check: the child is found by name (seed 004).
            try:
                child = child_stack_name(stack, lid)
            except ValueError as exc:  # a logical id holding `~` or `/` names no child record
                entry.update(action=ACTION_FAIL, reason=f"nested stack row {lid} names no child record: {exc}")
                return entry
            entry.update(self._plan_child(ctx, child, region, depth + 1))
            return entry
        problem = _physical_id_problem(row)
        if problem is None:
            ref = _ref(ctx, region, lid, row)
            try:
                problem = self.seams.precheck(ref)
            except _skip_types() as exc:
                problem = str(getattr(exc, "reason", None) or exc)
        if problem is not None:
            entry["action"] = ACTION_SKIP
            entry["reason"] = problem
            return entry
        if policy == "Snapshot" and not skip_snapshot:
            if self.seams.supports_snapshot(_ref(ctx, region, lid, row)):
                entry["action"] = ACTION_SNAPSHOT
            else:
                entry["action"] = ACTION_FAIL_SNAPSHOT
                entry["reason"] = (
                    f"DeletionPolicy Snapshot: a final snapshot of {entry['resourceType']} cannot be taken here, so "
                    f"the delete is refused as CloudFormation refuses it; delete with skip_final_snapshot to drop "
                    f"the data, or remove the policy"
                )
            return entry
        entry["action"] = ACTION_DELETE
        return entry

    def _plan_child(self, ctx: Context, child: str, region: str, depth: int) -> dict[str, Any]:
        if depth > MAX_NESTING:
            return {"action": ACTION_FAIL, "reason": f"nested stack {child} is nested deeper than {MAX_NESTING}"}
        key = ctx.layout.state_key(child, region)
        stored = _read(ctx, key)
        if stored is None:
            return {"action": ACTION_GONE, "reason": f"the child record {key} is already gone", "childStack": child}
        try:
            data, changes, warnings = self._plan_stack(ctx, child, region, stored, depth=depth)
        except OperationRefused as exc:
            return {"action": ACTION_FAIL, "reason": f"nested stack {child} refused: {exc}", "childStack": child}
        data["_changes"] = changes
        data["_warnings"] = warnings
        return {"action": ACTION_NESTED, "childStack": child, "child": data}

    # -- execute ----------------------------------------------------------------------------

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        if ctx.region is None:
            raise OperationRefused("destroy needs a region-scoped record")
        masker = self.masker_for(ctx)
        recorder = EventRecorder(
            ctx.bucket, ctx.layout, ctx.stack, ctx.region, command="destroy", mask=masker, log=ctx.log
        )
        recorder.start()
        run = _Run(self, ctx, plan, recorder, masker)
        try:
            outcome = run.top()
        except BaseException as exc:
            # A refusal under the lock (stale plan, contention, imports) is still a run (§4.4).
            recorder.finalize(RESULT_FAILED, run.top_counts(), error=exc)
            raise
        counts = outcome.details["counts"]
        if outcome.status == "succeeded":
            recorder.finalize(RESULT_SUCCEEDED, counts)
        else:
            recorder.finalize(RESULT_FAILED, counts, error={"name": "DestroyIncomplete", "message": outcome.summary})
        outcome.details["run_id"] = recorder.run_id
        outcome.warnings += recorder.warnings
        return outcome


def _ref(ctx: Context, region: str, lid: str, row: dict[str, Any]) -> Any:
    properties = row.get("properties")
    attributes = row.get("attributes")
    return _make_ref(
        logical_id=lid,
        resource_type=row.get("resourceType"),
        physical_id=row.get("physicalId") if isinstance(row.get("physicalId"), str) else None,
        properties=properties if isinstance(properties, dict) else {},
        attributes=attributes if isinstance(attributes, dict) else {},
        region=region,
        account_id=ctx.bucket.account_id,
        provisioned_by=row.get("provisionedBy") if isinstance(row.get("provisionedBy"), str) else None,
    )


def _concurrency(ctx: Context) -> int:
    value = ctx.params.get("concurrency", DEFAULT_CONCURRENCY)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 64:
        raise OperationRefused(f"concurrency must be a whole number from 1 to 64, got {value!r}")
    return value


def _change_line(lid: str, entry: dict[str, Any]) -> str:
    what = f"{lid} ({entry['resourceType']}" + (
        f", physical id {entry['physicalId']!r})" if entry["physicalId"] else ")"
    )
    action = entry["action"]
    if action == ACTION_DELETE:
        return f"delete {what}"
    if action == ACTION_SNAPSHOT:
        return f"take a final snapshot of {what}, then delete it"
    if action == ACTION_FAIL_SNAPSHOT:
        return f"FAIL {what}: {entry['reason']}"
    if action == ACTION_RETAIN:
        return f"keep {what} in AWS (DeletionPolicy {entry['deletionPolicy']}); its row goes with the record"
    if action == ACTION_SKIP:
        return f"skip {what}: {entry['reason']}; no AWS call, its row stays"
    if action == ACTION_NESTED:
        return f"destroy the nested stack {entry['childStack']} first ({what}):"
    if action == ACTION_GONE:
        return f"{what}: {entry['reason']}; counts as deleted"
    return f"FAIL {what}: {entry['reason']}"


def _action_counts(data: dict[str, Any]) -> dict[str, int]:
    counts = {"delete": 0, "retain": 0, "skip": 0, "fail": 0, "nested": 0}
    for entry in data["rows"].values():
        action = entry["action"]
        if action in (ACTION_DELETE, ACTION_SNAPSHOT, ACTION_GONE):
            counts["delete"] += 1
        elif action == ACTION_RETAIN:
            counts["retain"] += 1
        elif action == ACTION_SKIP:
            counts["skip"] += 1
        elif action in (ACTION_FAIL, ACTION_FAIL_SNAPSHOT):
            counts["fail"] += 1
        elif action == ACTION_NESTED:
            counts["nested"] += 1
            for key, value in _action_counts(entry["child"]).items():
                counts[key] += value
    return counts


# --- running -----------------------------------------------------------------------------------


@dataclass
class _StackResult:
    stack: str
    counts: dict[str, int] = field(
        default_factory=lambda: {"deleted": 0, "retained": 0, "skipped": 0, "failed": 0, "unverified": 0}
    )
    status: str = "partial"
    left: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    cancelled: bool = False
    record_deleted: bool = False
    etag_after: str | None = None
    warnings: list[str] = field(default_factory=list)
    first_error: str | None = None


class _Progress:
    """The operation page's live items (`{"items": {...}, "phase": ...}`), shared by nested runs."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.items: dict[str, dict[str, Any]] = {}
        self.phase = "deleting"
        self.lock = threading.Lock()

    def set(self, key: str, status: str, resource_type: Any, message: str | None = None, emit: bool = True) -> None:
        with self.lock:
            item: dict[str, Any] = {"status": status, "type": resource_type}
            if message:
                item["message"] = message
            self.items[key] = item
        if emit:
            self.emit()

    def emit(self, phase: str | None = None) -> None:
        with self.lock:
            if phase:
                self.phase = phase
            done = sum(1 for item in self.items.values() if item["status"] not in (PENDING, DELETING))
            detail = {"items": {k: dict(v) for k, v in self.items.items()}, "phase": self.phase}
            total = len(self.items)
            try:
                self.ctx.progress(done, total, detail)
            except Exception:  # noqa: BLE001 - a progress sink never breaks the run
                pass


class _RecordWriter:
    """The trimmed record's writes: `If-Match` on the ETag last written (a 412 whose stored
    body is one this writer sent and lost the answer to is adopted); failures are logged and
    left to the final write. After a real conflict (someone else wrote) it writes no more."""

    def __init__(self, run: _Run, ctx: Context, stack: str, region: str, key: str, data: dict[str, Any], etag: str):
        self.run = run
        self.ctx = ctx
        self.stack = stack
        self.region = region
        self.key = key
        self.data = data  # the record as read under the lock; never mutated
        self.etag = etag
        self.conflict: str | None = None
        self.failed = False  # the last write did not land
        self._unconfirmed: list[bytes] = []

    def body(self, remaining: dict[str, Any]) -> bytes:
        snapshot = dict(self.data)  # {...state, resources, outputs: {}, imports/outputReads: undefined}
        snapshot["resources"] = dict(remaining)
        snapshot["outputs"] = {}
        snapshot.pop("imports", None)
        snapshot.pop("outputReads", None)
        snapshot["lastModified"] = max(_now_ms(), int(self.run.destroy.clock() * 1000))
        return dump_state(StackState.model_validate(snapshot), stack_name=self.stack, region=self.region)

    def save(self, remaining: dict[str, Any], *, final: bool = False) -> bool:
        if self.conflict:
            return False
        try:
            body = self.body(remaining)
        except RecordRefused as exc:  # cannot happen for a record the plan accepted; be loud
            self.conflict = str(exc)
            return False
        for _ in range(2):
            try:
                written = self.ctx.bucket.put(self.key, body, if_match=self.etag)
                self.etag = written.etag
                self.failed = False
                self._unconfirmed.clear()
                return True
            except (PreconditionFailed, NotFound):
                current = _read(self.ctx, self.key)
                if current is not None and (current.body == body or current.body in self._unconfirmed):
                    self.etag = current.etag  # our own write, answer lost: adopt it
                    self._unconfirmed.clear()
                    if current.body == body:
                        return True
                    continue
                self.conflict = (
                    f"{self.key} was changed by another writer during the destroy; this run stopped writing it "
                    f"and left it as that writer left it"
                )
                self.ctx.log("warning", self.conflict)
                return False
            except EngineError as exc:
                self._unconfirmed.append(body)
                self.failed = True
                what = "final" if final else "incremental"
                self.ctx.log("warning", f"{what} save of {self.key} failed ({exc}); the final write decides")
                return False
        return False

    def adopt_landed(self) -> bool:
        """True (and the ETag taken) when the stored record is a body an unconfirmed save of
        this writer sent: it landed after all."""
        if not self._unconfirmed:
            return False
        current = _read(self.ctx, self.key)
        if current is None or current.body not in self._unconfirmed:
            return False
        self.etag = current.etag
        self._unconfirmed.clear()
        self.failed = False
        return True


def default_masker(ctx: Context) -> Masker:
    """A masker loaded with the account's Secrets Manager and SSM SecureString values (read
    into memory only); without the permissions to read them, credential shapes only."""
    from engine.secrets import collect

    index = collect(ctx.bucket.session, ctx.bucket.account_id, {r for r in (ctx.region, ctx.bucket.region) if r})
    for warning in index.warnings:
        ctx.log("info", f"error messages are masked for credential shapes only here: {warning}")
    return index.masker()


class _BackgroundSaver:
    """Writes the trimmed record from its own thread, always the newest snapshot, so the
    deletes keep starting while a write is on the wire. `drain()` waits for the last one."""

    def __init__(self, writer: _RecordWriter) -> None:
        self.writer = writer
        self._cond = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="destroy-record-writer", daemon=True)
        self._thread.start()

    def submit(self, remaining: dict[str, Any]) -> None:
        with self._cond:
            self._pending = dict(remaining)
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                snapshot, self._pending, self._busy = self._pending, None, True
            try:
                self.writer.save(snapshot)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def drain(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()


class _Run:
    """One execution: the top-level stack and, recursively, its nested children."""

    def __init__(self, destroy: Destroy, ctx: Context, plan: Plan, recorder: EventRecorder, masker: Masker) -> None:
        self.destroy = destroy
        self.ctx = ctx
        self.plan = plan
        self.recorder = recorder
        self.masker = masker
        self.progress = _Progress(ctx)
        self.results: dict[str, _StackResult] = {}
        self.concurrency = plan.data.get("concurrency") or _concurrency(ctx)
        self._clients: Any = None
        self._clients_lock = threading.Lock()
        self.locks: list[Any] = []

    # -- shared -----------------------------------------------------------------------------

    def clients(self) -> Any:
        with self._clients_lock:
            if self._clients is None:
                self._clients = self.destroy.seams.clients(self.ctx)
            return self._clients

    def stopping(self) -> bool:
        return self.ctx.cancelled() or any(getattr(lock, "lost", False) for lock in self.locks)

    def top_counts(self) -> dict[str, int]:
        result = self.results.get(self.ctx.stack)
        return dict(result.counts) if result else {}

    @contextmanager
    def _lock(self, ctx: Context) -> Iterator[Any]:
        with ctx.held_lock("destroy") as lock:
            self.locks.append(lock)
            try:
                yield lock
            finally:
                self.locks.remove(lock)

    # -- the top-level stack ------------------------------------------------------------------

    def top(self) -> Outcome:
        ctx, data = self.ctx, self.plan.data
        result = _StackResult(ctx.stack)
        self.results[ctx.stack] = result
        self._pending_items(data, prefix="")
        with self._lock(ctx):
            stored = _read(ctx, data["key"])
            if stored is None:
                return self._already_gone(result)
            parsed = self._accept(ctx, data, stored)
            self._destroy_stack(ctx, data, stored, parsed, result, prefix="")
        return self._outcome(result)

    def _already_gone(self, result: _StackResult) -> Outcome:
        """The record is gone (an earlier attempt of this operation finished its deletes, or
        someone orphaned it): nothing is deleted in AWS; the siblings are cleaned up."""
        ctx = self.ctx
        result.status = "succeeded"
        result.record_deleted = True
        result.warnings.append(f"{self.plan.data['key']} is already gone: no AWS resource was deleted by this run")
        self._cleanup_after_record(ctx, ctx.stack, ctx.region or "", result)
        self.progress.emit("done")
        return self._outcome(result)

    def _accept(self, ctx: Context, data: dict[str, Any], stored: StoredObject) -> Any:
        """The record as re-read under the lock, if the plan still speaks for it; else StalePlan
        (or OperationRefused for an import that appeared)."""
        stack, region = data["stack"], data["region"]
        parsed = parse_state(stored.body, key_region=region, stack_name=stack)
        if stored.etag != data["etag"]:
            if not _is_trimmed_subset(parsed, data):
                raise StalePlan(data["key"], data["etag"], stored.etag)
            ctx.log(
                "info",
                f"{data['key']} changed since the plan only by rows removed (an earlier attempt of this destroy): "
                f"continuing with the {len(parsed.resource_rows())} row(s) left",
            )
        elif parsed.defects or parsed.newer_than_supported:  # pragma: no cover - same bytes as planned
            raise StalePlan(data["key"], data["etag"], stored.etag)
        if parsed.region_mismatch and parsed.resource_rows():
            raise OperationRefused(f"the body region of {data['key']} disagrees with its key; refusing")
        if data.get("scan_imports") or parsed.outputs():
            consumers, _ = scan_consumers(ctx, stack, region)
            if consumers:
                raise _refuse_consumers(stack, region, consumers)
        return parsed

    # -- one stack ----------------------------------------------------------------------------

    def _pending_items(self, data: dict[str, Any], prefix: str) -> None:
        for lid in data["order"]:
            entry = data["rows"][lid]
            self.progress.set(prefix + lid, PENDING, entry["resourceType"], emit=False)
            if entry.get("child"):
                self._pending_items(entry["child"], prefix=f"{prefix}{lid}/")
        if not prefix:
            self.progress.emit()

    def _event(self, event_type: str, stack: str, lid: str, row: dict[str, Any], **fields: Any) -> None:
        self.recorder.resource(
            event_type,
            stack_name=stack,
            logical_id=lid,
            resource_type=row.get("resourceType"),
            provisioned_by=row.get("provisionedBy"),
            **fields,
        )

    def _destroy_stack(
        self, ctx: Context, data: dict[str, Any], stored: StoredObject, parsed: Any, result: _StackResult, prefix: str
    ) -> None:
        stack, region = data["stack"], data["region"]
        planned: dict[str, dict[str, Any]] = data["rows"]
        rows: dict[str, dict[str, Any]] = {lid: row for lid, row in parsed.resource_rows() if row is not None}
        remaining = dict(parsed.data["resources"])  # what the record still lists, in stored order
        writer = _RecordWriter(self, ctx, stack, region, data["key"], parsed.data, stored.etag)
        saver = _BackgroundSaver(writer)
        status: dict[str, str] = dict.fromkeys(rows, PENDING)
        for lid in planned:
            if lid not in rows:
                result.already_gone.append(lid)
                self.progress.set(prefix + lid, DELETED, planned[lid]["resourceType"], "deleted by an earlier attempt")
        graph = build_graph(rows)
        order = graph.deletion_order()  # no cycle: the rows are a subset of a planned, acyclic record
        dependents = graph.dependents
        # First the rows that make no AWS call, in deletion order.
        for lid in order:
            entry, row = planned[lid], rows[lid]
            action = entry["action"]
            if action == ACTION_RETAIN:
                status[lid] = RETAINED
                result.counts["retained"] += 1
                self._event(RESOURCE_RETAINED, stack, lid, row)
                self.progress.set(prefix + lid, RETAINED, entry["resourceType"], "kept in AWS (DeletionPolicy)")
            elif action == ACTION_SKIP:
                status[lid] = SKIPPED
                result.counts["skipped"] += 1
                self._event(
                    RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=entry["reason"]
                )
                self.progress.set(prefix + lid, SKIPPED, entry["resourceType"], self.masker(entry["reason"]))
            elif action in (ACTION_FAIL, ACTION_FAIL_SNAPSHOT):
                status[lid] = FAILED
                self._event(RESOURCE_STARTED, stack, lid, row)
                self._fail(result, stack, lid, row, entry, RefusedDelete(entry["reason"]), 0, prefix)
        # Then the deletes, as their dependents go.
        inflight: dict[Future[Any], tuple[str, float]] = {}
        try:
            with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix=f"destroy-{stack}") as pool:
                while True:
                    if not self.stopping():
                        for lid in order:
                            if len(inflight) >= self.concurrency:
                                break
                            if status[lid] != PENDING or planned[lid]["action"] not in CALL_ACTIONS:
                                continue
                            if all(status[d] in RELEASES for d in dependents[lid]):
                                status[lid] = DELETING
                                row = rows[lid]
                                self._event(RESOURCE_STARTED, stack, lid, row)
                                self.progress.set(prefix + lid, DELETING, row.get("resourceType"))
                                future = pool.submit(self._work, ctx, stack, region, lid, row, planned[lid], prefix)
                                inflight[future] = (lid, time.monotonic())
                    if not inflight:
                        break
                    done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                    deleted_now = False
                    for future in done:
                        lid, started = inflight.pop(future)
                        duration = int((time.monotonic() - started) * 1000)
                        status[lid] = self._settle(
                            future, ctx, stack, lid, rows[lid], planned[lid], result, duration, prefix
                        )
                        if status[lid] == DELETED:
                            remaining.pop(lid, None)
                            deleted_now = True
                    if deleted_now:
                        # Written from its own thread (newest snapshot wins): the record never
                        # lists less than what is gone, and concurrent deletes are not held up
                        # behind one serial write each.
                        saver.submit(remaining)
        finally:
            saver.drain()
        # What never started: cancelled, or held back by a dependent that is still there.
        stopped = self.stopping()
        for lid in order:
            if status[lid] != PENDING:
                continue
            row = rows[lid]
            if stopped:
                self.progress.set(prefix + lid, PENDING, row.get("resourceType"), "not started (cancelled)")
                continue
            blockers = [d for d in dependents[lid] if status[d] not in RELEASES]
            reason = (
                f"not deleted: {', '.join(blockers)} depend(s) on it and {'is' if len(blockers) == 1 else 'are'} "
                f"still there"
            )
            status[lid] = SKIPPED
            result.counts["skipped"] += 1
            self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
            self.progress.set(prefix + lid, SKIPPED, row.get("resourceType"), reason)
        result.cancelled = stopped and any(s == PENDING for s in status.values())
        everything_gone = all(s in (DELETED, RETAINED) for s in status.values())
        if everything_gone and not result.cancelled:
            self.progress.emit("cleanup")
            self._finish_success(ctx, stack, region, data["key"], writer, remaining, result)
        else:
            writer.save(remaining, final=True)
            if writer.conflict:
                result.warnings.append(writer.conflict)
            result.etag_after = writer.etag if not writer.conflict else None
        result.left = [lid for lid in remaining if not result.record_deleted]
        failed, deleted = result.counts["failed"], result.counts["deleted"]
        if result.record_deleted:
            result.status = "succeeded"
        elif result.cancelled:
            result.status = "partial"
        elif failed and not deleted:
            result.status = "failed"
        else:
            result.status = "partial"
        if prefix == "":
            self.progress.emit("done")

    def _work(
        self, ctx: Context, stack: str, region: str, lid: str, row: dict[str, Any], entry: dict[str, Any], prefix: str
    ) -> Any:
        """In a pool thread: the one AWS-facing step of a row. Returns what `_settle` reads."""
        action = entry["action"]
        if action in (ACTION_NESTED, ACTION_GONE):
            return self._destroy_child(ctx, region, lid, entry, prefix)
        ref = _ref(ctx, region, lid, row)
        return self.destroy.seams.delete(self.clients(), ref, snapshot=action == ACTION_SNAPSHOT)

    def _settle(
        self,
        future: Future[Any],
        ctx: Context,
        stack: str,
        lid: str,
        row: dict[str, Any],
        entry: dict[str, Any],
        result: _StackResult,
        duration: int,
        prefix: str,
    ) -> str:
        """Account for a finished row (coordinator thread): events, counts, progress; its status."""
        rtype = row.get("resourceType")
        exc = future.exception()
        if exc is not None and not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit, a simulated kill: stop here, write nothing more
        if exc is None:
            value = future.result()
            if isinstance(value, _ChildResult):
                return self._settle_child(value, stack, lid, row, entry, result, duration, prefix)
            status_value = getattr(value, "status", value)
            for guard in getattr(value, "unverified", None) or []:
                result.counts["unverified"] += 1
                self._event(
                    RESOURCE_GUARD_INDETERMINATE,
                    stack,
                    lid,
                    row,
                    guard=guard.get("guard") if isinstance(guard, dict) else str(guard),
                    reason=guard.get("reason") if isinstance(guard, dict) else None,
                )
            note = "already gone" if status_value == "not-found" else None
            return self._deleted(result, stack, lid, row, duration, prefix, note)
        if isinstance(exc, _skip_types()):
            reason = str(getattr(exc, "reason", None) or exc) or "unspecified reason"
            result.counts["skipped"] += 1
            self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
            self.progress.set(prefix + lid, SKIPPED, rtype, self.masker(reason))
            return SKIPPED
        if entry["action"] != ACTION_SNAPSHOT and _reads_as_not_found(exc):
            return self._deleted(result, stack, lid, row, duration, prefix, "already gone")
        self._fail(result, stack, lid, row, entry, exc, duration, prefix)
        return FAILED

    def _deleted(
        self,
        result: _StackResult,
        stack: str,
        lid: str,
        row: dict[str, Any],
        duration: int,
        prefix: str,
        note: str | None,
    ) -> str:
        result.counts["deleted"] += 1
        self._event(RESOURCE_SUCCEEDED, stack, lid, row, physical_id=row.get("physicalId"), duration_ms=duration)
        self.progress.set(prefix + lid, DELETED, row.get("resourceType"), note)
        return DELETED

    def _fail(
        self,
        result: _StackResult,
        stack: str,
        lid: str,
        row: dict[str, Any],
        entry: dict[str, Any],
        exc: BaseException,
        duration: int,
        prefix: str,
    ) -> None:
        result.counts["failed"] += 1
        message = self.masker(str(exc)) or type(exc).__name__
        result.first_error = result.first_error or f"{lid}: {message}"
        self._event(RESOURCE_FAILED, stack, lid, row, duration_ms=duration, error=exc)
        self.progress.set(prefix + lid, FAILED, row.get("resourceType"), message)
        self.ctx.log("error", f"{stack}: {lid} ({row.get('resourceType')}) was not deleted: {message}")

    # -- nested children -------------------------------------------------------------------------

    def _destroy_child(self, ctx: Context, region: str, lid: str, entry: dict[str, Any], prefix: str) -> _ChildResult:
        child = entry["childStack"]  # set by the plan for every nested / gone row
        key = ctx.layout.state_key(child, region)
        child_ctx = replace(ctx, stack=child)
        result = _StackResult(child)
        self.results[child] = result
        data = entry.get("child")
        try:
            with self._lock(child_ctx):
                stored = _read(child_ctx, key)
                if stored is None:
                    result.status = "succeeded"
                    result.record_deleted = True
                    return _ChildResult(child, result, gone=True)
                if data is None:  # planned as gone, but a record appeared since
                    raise _ChildRefused(f"nested stack {child} has a record again since the plan")
                parsed = self._accept(child_ctx, data, stored)
                self._destroy_stack(child_ctx, data, stored, parsed, result, prefix=f"{prefix}{lid}/")
        except (OperationRefused, EngineError, _ChildRefused) as exc:
            return _ChildResult(child, result, refused=str(exc))
        return _ChildResult(child, result)

    def _settle_child(
        self,
        value: _ChildResult,
        stack: str,
        lid: str,
        row: dict[str, Any],
        entry: dict[str, Any],
        result: _StackResult,
        duration: int,
        prefix: str,
    ) -> str:
        """cdkd's NestedStackProvider mapping (§8.5): child errors -> the row FAILS; child
        skipped or interrupted -> the row is SKIPPED (record kept); child gone -> deleted."""
        child = value.result
        if value.refused:
            self._fail(result, stack, lid, row, entry, RefusedDelete(value.refused), duration, prefix)
            return FAILED
        if value.gone or child.status == "succeeded":
            note = f"nested stack {value.stack} " + ("was already gone" if value.gone else "destroyed")
            return self._deleted(result, stack, lid, row, duration, prefix, note)
        if child.counts["failed"]:
            error = RefusedDelete(
                f"nested stack {value.stack}: {child.counts['failed']} resource(s) failed"
                + (f" (first: {child.first_error})" if child.first_error else "")
                + f"; repair and re-run (its record is {self.ctx.layout.state_key(value.stack, self.ctx.region or '')})"
            )
            self._fail(result, stack, lid, row, entry, error, duration, prefix)
            return FAILED
        why = "was interrupted" if child.cancelled else f"skipped {child.counts['skipped']} resource(s)"
        reason = f"nested stack {value.stack} {why}, so it was not destroyed as a whole; its record is kept"
        result.counts["skipped"] += 1
        self._event(RESOURCE_SKIPPED, stack, lid, row, physical_id=row.get("physicalId"), reason=reason)
        self.progress.set(prefix + lid, SKIPPED, row.get("resourceType"), reason)
        return SKIPPED

    # -- the end of a stack ------------------------------------------------------------------------

    def _finish_success(
        self,
        ctx: Context,
        stack: str,
        region: str,
        key: str,
        writer: _RecordWriter,
        remaining: dict[str, Any],
        result: _StackResult,
    ) -> None:
        """create-tokens.json, then state.json (If-Match), then the journal, then the exports index."""
        if writer.conflict:
            result.warnings.append(writer.conflict)
            return
        tokens = ctx.layout.create_tokens_key(stack, region)
        try:
            # If-Match on the ledger as read now (or "only while absent"): issued even when
            # absent, since S3 checks the permission first.
            ctx.bucket.delete_current(tokens)
        except EngineError as exc:
            message = f"could not delete {tokens} ({exc}); the record is left in place (cdkd does the same)"
            result.warnings.append(message)
            ctx.log("error", message)
            if writer.failed:  # the last incremental save did not land: the final write decides
                writer.save(remaining, final=True)
            result.etag_after = writer.etag
            return
        try:
            try:
                ctx.bucket.delete(key, if_match=writer.etag)
            except PreconditionFailed:
                # An earlier save whose outcome nobody could confirm may have landed: then the
                # record is still ours, at that save's ETag.
                if not writer.adopt_landed():
                    raise
                ctx.bucket.delete(key, if_match=writer.etag)
        except (PreconditionFailed, NotFound):
            message = f"{key} changed since this run last wrote it; it is left as the other writer left it"
            result.warnings.append(message)
            ctx.log("warning", message)
            return
        except EngineError as exc:
            message = f"could not delete {key}: {exc}"
            result.warnings.append(message)
            ctx.log("error", message)
            return
        result.record_deleted = True
        result.etag_after = None
        ctx.log("info", f"deleted {tokens} and {key}")
        self._cleanup_after_record(ctx, stack, region, result)

    def _cleanup_after_record(self, ctx: Context, stack: str, region: str, result: _StackResult) -> None:
        """The journal (with its noncurrent versions: they may hold attempted secrets) and the
        exports index entries. Both soft: the record is already gone."""
        journal = ctx.layout.rollback_journal_key(stack, region)
        try:
            versions = ctx.bucket.versions(journal)
            if any(v.is_latest and not v.delete_marker for v in versions):
                ctx.bucket.delete(journal)
            purged = ctx.bucket.purge_noncurrent([journal]) if versions else []
            if versions:
                ctx.log("info", f"deleted {journal} and purged {len(purged)} noncurrent version(s)")
        except EngineError as exc:
            result.warnings.append(
                f"the rollback journal {journal} was not fully removed ({exc}); its earlier versions may hold "
                f"attempted properties. Grant s3:ListBucketVersions and s3:DeleteObjectVersion, or purge by hand"
            )
        warning = remove_stack_exports(ctx, stack, region)
        if warning:
            result.warnings.append(warning)
            ctx.log("warning", warning)

    def _outcome(self, result: _StackResult) -> Outcome:
        counts = dict(result.counts)
        stacks = {
            name: {**r.counts, "status": r.status, "left": r.left, "cancelled": r.cancelled}
            for name, r in self.results.items()
        }
        where = _where(self.ctx.stack, self.ctx.region)
        parts = f"{counts['deleted']} deleted" + (f", {counts['retained']} retained" if counts["retained"] else "")
        parts += f", {counts['failed']} failed"
        parts += f", {counts['skipped']} skipped" if counts["skipped"] else ""
        parts += f", {counts['unverified']} unverified" if counts["unverified"] else ""
        if result.status == "succeeded":
            summary = f"Stack {where} destroyed ({parts})."
        elif result.cancelled:
            summary = f"Destroy of {where} cancelled ({parts}); {len(result.left)} row(s) left. Re-run to finish."
        else:
            summary = f"Stack {where} partially destroyed ({parts}); {len(result.left)} row(s) left in the record."
        details: dict[str, Any] = {
            "counts": counts,
            "stacks": stacks,
            "left": result.left,
            "already_gone": result.already_gone,
        }
        if result.cancelled:
            details["reason"] = "cancelled"
        warnings = [w for r in self.results.values() for w in r.warnings]
        return Outcome(
            status=result.status,
            summary=summary,
            etag_before=self.plan.etag,
            etag_after=None if result.record_deleted else result.etag_after,
            details=details,
            warnings=warnings,
        )


@dataclass
class _ChildResult:
    stack: str
    result: _StackResult
    gone: bool = False
    refused: str | None = None


class RefusedDelete(Exception):  # noqa: N818 - it is the error recorded for the row
    """A row that fails without an AWS error (snapshot refusal, nested child refusal)."""


def _reads_as_not_found(exc: BaseException) -> bool:
    """cdkd's runner treats these as already deleted (reference §8.2 step 7)."""
    code = getattr(exc, "aws_code", None) or getattr(exc, "code", None)
    if isinstance(code, str) and code in NOT_FOUND_CODES:
        return True
    message = str(exc)
    return any(marker in message for marker in NOT_FOUND_MARKERS)


def _is_trimmed_subset(parsed: Any, data: dict[str, Any]) -> bool:
    """True when the record differs from the planned one only as this destroy's own
    snapshots change it: rows removed (each remaining row unchanged), outputs cleared,
    imports/outputReads dropped, lastModified/version/stackName/region restamped."""
    if parsed.defects or parsed.newer_than_supported or not isinstance(parsed.data, dict):
        return False
    planned = data["rows"]
    for lid, row in parsed.resource_rows():
        if row is None or lid not in planned or _digest(row) != planned[lid]["digest"]:
            return False
    if _residual_digest(parsed.data) != data["residual"]:
        return False
    return _cross_digest(parsed.data) == data["cross"] or _trimmed_cross(parsed.data)


register(Destroy())
