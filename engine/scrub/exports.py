"""The exports index entries a scrubbed stack owns, patched to its new output values."""

from __future__ import annotations

import json
import time
from typing import Any

from engine.backend import StateBucket, StoredObject
from engine.keys import EXPORTS_INDEX_DIR, KeyLayout
from engine.scrub.rewrite import _set
from engine.scrub.scanner import _decode_json, _hits_in_value
from engine.secrets import (
    SecretIndex,
)

INDEX_VERSION = 1  # ExportIndexFile.indexVersion this app writes
INDEX_ATTEMPTS = 5  # cdkd's exports-index update: up to 5 attempts on 412

# --- the exports index --------------------------------------------------------------------------


def _index_patch(
    index: SecretIndex, stored: StoredObject, stack: str, region: str, outputs: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """(the patched document or None, entry names changed, why it is left alone)."""
    ok, document = _decode_json(stored.body.decode("utf-8", errors="replace"))
    if not ok or not isinstance(document, dict) or not isinstance(document.get("exports"), dict):
        return None, [], "it is not a readable exports index"
    version = document.get("indexVersion")
    if isinstance(version, int | float) and not isinstance(version, bool) and version > INDEX_VERSION:
        return None, [], f"indexVersion {version} is newer than this app knows"
    cands = index.all()
    changed: list[str] = []
    for name, entry in document["exports"].items():
        if not isinstance(entry, dict) or entry.get("producerStack") != stack:
            continue
        if entry.get("producerRegion") != region:
            continue
        value = entry.get("value")
        hits = _hits_in_value(cands, value)
        if name in outputs:
            target = outputs[name]
            converge = target != value and "{{resolve:" in json.dumps(target)  # cdkd's own repair rule
            if (hits or converge) and target != value:
                entry["value"] = target
                changed.append(name)
        elif hits:
            patched: Any = {"v": value}
            for hit in hits:
                if not hit.in_key and not hit.redacted_path:
                    _set(patched, ("v", *hit.path), hit.match.replacement(region))
            if patched["v"] != value:
                entry["value"] = patched["v"]
                changed.append(name)
    if changed:
        document["lastModified"] = int(time.time() * 1000)
    return (document if changed else None), changed, None


def _index_keys(bucket: StateBucket, layout: KeyLayout) -> list[str]:
    prefix = f"{layout.prefix}/{EXPORTS_INDEX_DIR}/"
    return [o.key for o in bucket.list_objects(prefix) if layout.parse(o.key) is not None]
