"""The exports index: remove a destroyed stack's entries from `_index/{region}/exports.json`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from engine.destroy.common import EXPORTS_ATTEMPTS, EXPORTS_BACKOFF_CAP_S, EXPORTS_BACKOFF_S, _now_ms
from engine.errors import EngineError, NotFound, PreconditionFailed
from engine.operations import Context
from engine.schema import (
    js_stringify,
)


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
