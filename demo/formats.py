"""cdkd's byte formats (JSON, JSONL, ISO times, run ids) and the seeded-RNG name helpers."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

# --------------------------------------------------------------------------------------
# cdkd's formatting
# --------------------------------------------------------------------------------------


def cdkd_json(value: Any) -> bytes:
    """`JSON.stringify(value, null, 2)`: 2-space indent, no trailing newline, UTF-8 as is."""
    return json.dumps(value, indent=2, ensure_ascii=False).encode()


def cdkd_jsonl(events: Iterable[Mapping[str, Any]]) -> bytes:
    """One compact `JSON.stringify(event)` per line, with a trailing newline."""
    return "".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n" for e in events).encode()


def iso(ms: int) -> str:
    """`new Date(ms).toISOString()`."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def run_id(ms: int, rng: random.Random) -> str:
    """cdkd's run id: compact ISO timestamp, `-`, the first 8 chars of a UUID."""
    compact = iso(ms).replace("-", "").replace(":", "").replace(".", "")
    return f"{compact}-{_uuid(rng)[:8]}"


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _suffix(
    rng: random.Random, n: int = 12, alphabet: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _hash8(*parts: str) -> str:
    return hashlib.md5("/".join(parts).encode()).hexdigest()[:8].upper()


def _sha256(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()
