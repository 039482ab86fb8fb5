"""The S3 version history of a stack's record, for the history pages.

The views never touch boto3: they call these functions, which open the account's bucket
through the engine and return the engine's plain dataclasses. Failures come out as
`engine.errors.EngineError` subclasses whose message names the bucket, key and the missing
permission; the views show that message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from engine.backend import StateBucket, StoredObject, VersionInfo
from engine.errors import EngineError
from engine.schema import parse_state
from stacks.models import AuditEvent, DeploymentRun, Operation, Stack
from stacks.records import open_bucket
from stacks.secretmask import flagged_paths_of, mask_bytes


def _bucket(stack: Stack, actor: str) -> StateBucket:
    return open_bucket(stack.account, actor)


def list_versions(stack: Stack, *, actor: str) -> list[VersionInfo]:
    """Every version and delete marker of the stack's `state.json` key, newest first."""
    return _bucket(stack, actor).versions(stack.key)


def get_version(stack: Stack, version_id: str, *, actor: str) -> StoredObject:
    """The stored bytes of one version of the record. Raises NotFound for a bad version id."""
    return _bucket(stack, actor).get(stack.key, version_id=version_id)


# --- what the history page says about each version ----------------------------------------------

# A run's writes land between its start and its end; S3's clock and the writer's differ a little.
_SLACK = timedelta(seconds=10)


@dataclass
class Writer:
    """Who wrote a version: an admin operation (by the ETag it recorded), an audited action
    (same), or a cdkd run whose time span holds the write (the event store has no ETags)."""

    kind: str  # "operation", "audit" or "run"
    label: str
    operation_id: int | None = None
    run: DeploymentRun | None = None
    by_time: bool = False  # matched by time, not by ETag


@dataclass
class VersionRow:
    """One version as the history page shows it: S3's listing, and what its (masked) body
    says: cdkd's `lastModified`, the resource count. `error`: the body could not be read."""

    info: VersionInfo
    record_last_modified: int | None = None
    resource_count: int | None = None
    schema_version: int | None = None
    error: str = ""
    writer: Writer | None = None

    def __getattr__(self, name: str):  # version_id, last_modified, size, is_latest, ...
        return getattr(self.info, name)


def _etag_variants(etags: list[str]) -> list[str]:
    bare = {e.strip('"') for e in etags if e}
    return sorted(bare | {f'"{e}"' for e in bare})


def describe_versions(stack: Stack, versions: list[VersionInfo], *, actor: str) -> list[VersionRow]:
    """Read each listed version's body (masked before parsing) and find who wrote it.
    Costs one GET per version given (the caller passes a page) and four queries."""
    rows = [VersionRow(v) for v in versions]
    readable = [r for r in rows if not r.info.delete_marker]
    # Sequential: boto3 clients are not made concurrently from one session; a page is small.
    bodies = [_read(stack, r.info.version_id, actor) for r in readable]
    flagged = flagged_paths_of(stack, [r.info.version_id for r in readable])  # one query for the page
    for row, (body, error) in zip(readable, bodies, strict=True):
        if error:
            row.error = error
            continue
        key_region = None if stack.legacy else stack.region
        parsed = parse_state(mask_bytes(body, flagged[row.info.version_id]), key_region=key_region)
        data = parsed.data if isinstance(parsed.data, dict) else {}
        lm = data.get("lastModified")
        row.record_last_modified = lm if isinstance(lm, int) and not isinstance(lm, bool) else None
        row.schema_version = parsed.version
        row.resource_count = len(parsed.resource_rows())
    _find_writers(stack, readable)
    return rows


def _read(stack: Stack, version_id: str, actor: str) -> tuple[bytes, str]:
    try:
        return get_version(stack, version_id, actor=actor).body, ""
    except EngineError as exc:
        return b"", str(exc)


def _find_writers(stack: Stack, rows: list[VersionRow]) -> None:
    if not rows:
        return
    region = stack.region or ""
    variants = _etag_variants([r.info.etag or "" for r in rows])
    ops = {
        op.etag_after.strip('"'): op
        for op in Operation.objects.filter(
            account=stack.account_id, stack_name=stack.stack_name, etag_after__in=variants
        ).order_by("pk")
    }
    audits = {
        ev.etag_after.strip('"'): ev
        for ev in AuditEvent.objects.filter(
            account=stack.account_id, stack_name=stack.stack_name, etag_after__in=variants
        ).order_by("pk")
    }
    times = [r.info.last_modified for r in rows if r.info.last_modified]
    runs: list[DeploymentRun] = []
    if times and region:
        runs = list(
            DeploymentRun.objects.filter(
                account=stack.account_id,
                stack_name=stack.stack_name,
                region=region,
                started_at__isnull=False,
                started_at__lte=max(times) + _SLACK,
                started_at__gte=min(times) - timedelta(days=1),
            )
            .select_related("operation")
            .order_by("-started_at")
        )
    for row in rows:
        etag = (row.info.etag or "").strip('"')
        if etag and etag in ops:
            op = ops[etag]
            row.writer = Writer("operation", f"{op.get_kind_display()} #{op.pk} by {op.requester_name}", op.pk)
        elif etag and etag in audits:
            ev = audits[etag]
            row.writer = Writer("audit", f"{ev.action} by {ev.actor}", ev.operation_id)
        elif row.info.last_modified:
            at = row.info.last_modified
            for run in runs:
                end = run.finished_at or run.started_at
                if run.started_at - _SLACK <= at <= end + _SLACK:
                    label = f"cdkd {run.command or 'run'} {run.run_id}"
                    row.writer = Writer("run", label, run.operation_id, run, by_time=True)
                    break
