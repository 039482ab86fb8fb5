"""Shared by the snapshot-capable and protection-bearing providers: cdkd's final-snapshot
identifier, a bounded wait, and the error mapping of the protection calls.

Final snapshot identifiers are cdkd's (public destroy page, "Generated snapshot identifiers"):
`<base>-final-<yyyymmdd-hhmmss>` (UTC), `<base>` being the physical id lowercased, every
character outside `a-z0-9-` turned into `-`, runs of `-` collapsed, leading/trailing `-`
dropped, `r` prepended when it does not start with a letter, and for ElastiCache cut to 28
characters (trailing `-` dropped again). Deterministic from the id and the clock, so a reader
can find the snapshot by its `<base>-final-` prefix.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine.providers.base import ProviderError, ResourceRef, describe, error_message, provider_error

ELASTICACHE_BASE_MAX = 28


def snapshot_base(physical_id: str, *, max_length: int | None = None) -> str:
    base = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", physical_id.lower())).strip("-")
    if not base or not base[0].isalpha():
        base = "r" + base
    if max_length is not None:
        base = base[:max_length].rstrip("-")
    return base


def final_snapshot_id(physical_id: str, *, max_length: int | None = None, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"{snapshot_base(physical_id, max_length=max_length)}-final-{stamp}"


def final_prefix(physical_id: str, *, max_length: int | None = None) -> str:
    return f"{snapshot_base(physical_id, max_length=max_length)}-final-"


class Waits:
    """A bounded poll with an injectable sleep, so moto tests never really wait."""

    def __init__(
        self,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wait_timeout: float = 3600.0,
    ) -> None:
        self.sleep = sleep
        self.clock = clock
        self.wait_timeout = wait_timeout

    def wait_for(
        self, ref: ResourceRef, what: str, probe: Callable[[], bool], *, accepted: bool = False, delay: float = 5.0
    ) -> None:
        """Poll `probe` until it answers True; past the timeout, ProviderError naming `what`."""
        deadline = self.clock() + self.wait_timeout
        while not probe():
            if self.clock() >= deadline:
                raise ProviderError(
                    f"{describe(ref)}: still waiting for {what} after {self.wait_timeout:.0f}s; "
                    f"check it, then run the destroy again",
                    accepted=accepted,
                )
            self.sleep(delay)
            delay = min(delay * 1.5, 30.0)


def guarded(ref: ResourceRef, action: str, call: Callable[..., Any], **params: Any) -> Any:
    """An AWS call of a protection read or flip: AWS's refusal as ProviderError naming it."""
    try:
        return call(**params)
    except ClientError as exc:
        raise provider_error(ref, action, exc) from None
    except BotoCoreError as exc:
        raise ProviderError(f"{describe(ref)}: {action} failed: {error_message(exc)}") from None
