"""A realistic cdkd world, seeded into S3 (a local moto server) for the demo and the tests.

Three accounts, each the way a real team's state bucket looks after a year of cdkd:
healthy stacks of every schema version across regions, nested stacks, legacy v1 records,
locks in every state, event history, several S3 versions of one record, exports indexes,
ledgers and journals, a record from a newer cdkd, damaged records, and one very big stack.

Everything is deterministic (seeded RNGs); only timestamps follow the clock, so that a
"live" lock is live whenever the demo runs. Bodies are written exactly as cdkd writes them
(`JSON.stringify(value, null, 2)`: 2-space indent, no trailing newline; JSONL compact with a
trailing newline), so what the app reads here is what it would read from a real bucket.

Demo data, not engine code (DESIGN.md: demo and test data live outside `engine/`):
accounts.py (the accounts and results), formats.py (cdkd's bytes), records.py (one stack
record), kinds.py (stack kinds), runs.py (event history), showcase.py (the named records),
world.py (seeding S3), resources.py (the AWS resources the records describe).
"""

from demo.accounts import (
    DEMO_ACCOUNTS,
    PLATFORM_EU,
    PRODUCTION,
    STAGING,
    DemoAccountSpec,
    DemoWorld,
    StackRef,
    assumed_role_session,
)
from demo.formats import cdkd_json, cdkd_jsonl
from demo.world import LEAK_ACCOUNT, LEAK_REGION, LEAK_STACK, build_demo_world, plan_demo_world, plant_leaked_secrets

__all__ = [
    "DEMO_ACCOUNTS",
    "LEAK_ACCOUNT",
    "LEAK_REGION",
    "LEAK_STACK",
    "PLATFORM_EU",
    "PRODUCTION",
    "STAGING",
    "DemoAccountSpec",
    "DemoWorld",
    "StackRef",
    "assumed_role_session",
    "build_demo_world",
    "cdkd_json",
    "cdkd_jsonl",
    "plan_demo_world",
    "plant_leaked_secrets",
]
