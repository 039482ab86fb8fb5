"""Destroy's import check from the mirror: which records import a stack's exports.

cdkd refuses to destroy a stack another record still imports from (`scanActiveConsumers`,
an `imports` entry whose sourceStack/sourceRegion name it). The engine's check reads every
`state.json` of the bucket, which is right under the lock but costs one GET per record on a
confirmation page. The preview asks here instead: the sync keeps each record's `imports`
on its Stack row (`mirror_imports`), so the page makes no GET for the check, however many
records the bucket holds. The run still checks the bucket under the lock (engine.destroy).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from engine import schema
from stacks.models import Account, Resource, Stack

# Why a record's imports cannot be read, worded as engine.destroy.scan_consumers words it.
UNREADABLE = "not a readable record"
NOT_A_LIST = "its imports are not a list"


def mirror_imports(record: schema.ParsedRecord) -> list[dict[str, Any]] | str:
    """What the Stack row keeps: the object entries of `imports` (sourceStack, sourceRegion,
    exportName), [] when absent, or the reason they cannot be read."""
    data = record.data
    if not isinstance(data, dict):
        return UNREADABLE
    imports = data.get("imports")
    if imports is None:
        return []
    if not isinstance(imports, list):
        return NOT_A_LIST
    keep = ("sourceStack", "sourceRegion", "exportName")
    return [{k: e.get(k) for k in keep if k in e} for e in imports if isinstance(e, dict)]


def consumers_from_mirror(account: Account, stack: str, region: str) -> tuple[list[str], list[str]]:
    """(consumers, unreadable) as `engine.destroy.scan_consumers` returns them, from the
    Stack rows of `account`: every other record (any stack, any region, legacy too)."""
    consumers: list[str] = []
    unreadable: list[str] = []
    rows = Stack.objects.filter(account=account).order_by("key")
    for row in rows.values("pk", "key", "stack_name", "region", "legacy", "imports").iterator(chunk_size=2000):
        if not row["legacy"] and row["stack_name"] == stack and row["region"] == region:
            continue  # the record being destroyed
        imports = row["imports"]
        if imports is None:  # mirrored before the column existed: the database's copy of the body
            imports = mirror_imports(schema.parse_state(bytes(Stack.objects.get(pk=row["pk"]).body or b"")))
        if isinstance(imports, str):
            unreadable.append(f"{row['key']} ({imports})")
            continue
        key_region = None if row["legacy"] else row["region"]
        for entry in imports if isinstance(imports, list) else []:
            if isinstance(entry, dict) and entry.get("sourceStack") == stack and entry.get("sourceRegion") == region:
                consumers.append(
                    f"{row['stack_name']} ({key_region or 'legacy'}): imports export '{entry.get('exportName')}'"
                )
    return consumers, unreadable


def mirror_finder(account: Account):
    """The `Context.consumers` hook for plans computed from the web and the CLI."""
    return partial(consumers_from_mirror, account)


def holders_from_mirror(
    account: Account, stack: str, region: str, physical_ids: set[str]
) -> tuple[dict[str, list[str]], list[str]]:
    """({physical id: [other records' keys]}, unreadable) as `engine.destroy.scan_holders`
    returns them, from the mirrored resources (indexed by physical id): one query, not a GET
    per record. The run checks the bucket again under the lock."""
    held: dict[str, list[str]] = {}
    rows = Resource.objects.filter(stack__account=account, physical_id__in=sorted(physical_ids))
    for pid, key, name, key_region, legacy in rows.values_list(
        "physical_id", "stack__key", "stack__stack_name", "stack__region", "stack__legacy"
    ):
        if not legacy and name == stack and key_region == region:
            continue  # the record being destroyed
        held.setdefault(pid, []).append(key)
    unreadable = [
        f"{key} ({UNREADABLE})"
        for key in Stack.objects.filter(account=account, imports=UNREADABLE).values_list("key", flat=True)[:5]
    ]
    return held, unreadable


def mirror_holders(account: Account):
    """The `Context.holders` hook for plans computed from the web and the CLI."""
    return partial(holders_from_mirror, account)
