"""The import (strong reference) scan: who still imports a stack's exports."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from engine.destroy.common import _where
from engine.errors import EngineError, NotFound
from engine.keys import KeyKind
from engine.operations import Context, OperationRefused
from engine.schema import (
    parse_state,
)


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
