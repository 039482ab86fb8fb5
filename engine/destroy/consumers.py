"""The import (strong reference) scan: who still imports a stack's exports."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.destroy.common import _where
from engine.errors import EngineError, NotFound
from engine.keys import KeyKind
from engine.operations import Context, OperationRefused
from engine.schema import (
    parse_state,
)


def _other_records(ctx: Context, stack: str, region: str) -> list[tuple[str, str | None, str | None]]:
    """(key, stack name, key region) of every state record under the prefix but this one."""
    own = ctx.layout.state_key(stack, region)
    keys: list[tuple[str, str | None, str | None]] = []
    for item in ctx.bucket.list_objects(ctx.layout.list_prefix):
        parsed = ctx.layout.parse(item.key)
        if parsed is None or parsed.kind not in (KeyKind.STATE, KeyKind.LEGACY_STATE) or item.key == own:
            continue
        keys.append((item.key, parsed.stack_name, parsed.region))
    return keys


def _read_other(ctx: Context, entry: tuple[str, str | None, str | None]) -> tuple[Any, str | None]:
    """(the parsed record, None); (None, None) when it was deleted since the listing; or
    (None, why it cannot be read)."""
    key, name, key_region = entry
    try:
        stored = ctx.bucket.get(key)
    except NotFound:
        return None, None
    except EngineError as exc:
        return None, f"{key} ({exc})"
    return parse_state(stored.body, key_region=key_region, stack_name=name), None


def scan_holders(
    ctx: Context, stack: str, region: str, physical_ids: set[str]
) -> tuple[dict[str, list[str]], list[str]]:
    """({physical id: [keys of the other records that hold it]}, unreadable) over every OTHER
    record under the prefix: whether a resource only this stack's rollback journal records
    has since been adopted by another stack (a later `cdkd import`), seed 004's condition for
    turning its protection off."""
    if not physical_ids:
        return {}, []

    def inspect(entry: tuple[str, str | None, str | None]) -> tuple[list[tuple[str, str]], str | None]:
        key = entry[0]
        record, problem = _read_other(ctx, entry)
        if record is None:
            return [], problem
        if not isinstance(record.data, dict) or not isinstance(record.data.get("resources"), dict):
            return [], f"{key} (not a readable record)"
        found = []
        for _lid, row in record.resource_rows():
            pid = row.get("physicalId") if isinstance(row, dict) else None
            if isinstance(pid, str) and pid in physical_ids:
                found.append((pid, key))
        return found, None

    held: dict[str, list[str]] = {}
    unreadable: list[str] = []
    with ThreadPoolExecutor(max_workers=16) as pool:
        for found, problem in pool.map(inspect, _other_records(ctx, stack, region)):
            for pid, key in found:
                held.setdefault(pid, []).append(key)
            if problem:
                unreadable.append(problem)
    return held, unreadable


def scan_consumers(ctx: Context, stack: str, region: str) -> tuple[list[str], list[str]]:
    """(consumers, unreadable) over every OTHER record under the prefix (cdkd's
    `scanActiveConsumers`): a consumer is an `imports` entry whose sourceStack and
    sourceRegion name `stack`/`region` (the same name in another region is another stack).
    Unreadable records are skipped, as cdkd skips them, and returned so a plan can name them."""
    keys = _other_records(ctx, stack, region)

    def inspect(entry: tuple[str, str | None, str | None]) -> tuple[list[str], str | None]:
        key, name, key_region = entry
        record, problem = _read_other(ctx, entry)
        if record is None:
            return [], problem
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
