"""The scrub's value-driven rewrite of one record: each secret the scan finds in a covered
field becomes the reference a deploy resolves again, or `***` (see `engine.scrub`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.backend import StoredObject
from engine.operations import OperationRefused
from engine.schema import (
    SUPPORTED_VERSION,
    StackState,
    parse_state,
)
from engine.scrub.scanner import Hit, _prefilter, _Walker
from engine.secrets import (
    SecretIndex,
)

COVERED_ROW_FIELDS = ("properties", "observedProperties", "attributes")

# --- the scrub: deriving the rewrite ----------------------------------------------------------


def _render(path: Iterable[str | int]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _covered(path: tuple[str | int, ...]) -> bool:
    """True for paths scrub rewrites: rows' and orphan records' properties,
    observedProperties and attributes, and outputs."""
    if len(path) >= 2 and path[0] == "outputs":
        return True
    if len(path) >= 4 and path[0] == "resources" and path[2] in COVERED_ROW_FIELDS:
        return True
    return (
        len(path) >= 5
        and path[0] == "orphans"
        and isinstance(path[1], int)
        and path[2] == "state"
        and path[3] in COVERED_ROW_FIELDS
    )


@dataclass
class Derivation:
    rewrites: list[dict[str, Any]]  # {"path", "to", "source", "whole"}: no values
    left: list[dict[str, Any]]  # hits in the record scrub does not rewrite (keys, other fields)
    state: StackState | None
    outputs: dict[str, Any]
    before: dict[str, Any] = field(default_factory=dict)  # the record as read (for the predicted diff)
    after: dict[str, Any] = field(default_factory=dict)  # the record as it will be written
    template: Any = None  # engine.scrub.template.TemplateRewrite when an assembly drove it


TEMPLATE_LITERAL = (
    "the template holds this value as written (no secret reference there), so cdkd's next deploy writes it "
    "back: change the app"
)


def check_record(stored: StoredObject, stack: str, region: str) -> Any:
    """The parsed record, or OperationRefused for one newer than SUPPORTED_VERSION or damaged."""
    parsed = parse_state(stored.body, key_region=region, stack_name=stack)
    if parsed.newer_than_supported:
        raise OperationRefused(
            f"{stored.key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this app "
            f"writes; it is read-only here and left alone. Scrub it with that cdkd's `cdkd scrub`."
        )
    if parsed.defects or parsed.state is None:
        listed = "; ".join(f"{d.path or '(root)'}: {d.code}" for d in parsed.defects)
        raise OperationRefused(f"{stored.key} is malformed ({listed}); it is refused and left alone")
    return parsed


def _positioned(path: tuple[str | int, ...], positioned: set[tuple[str, ...]]) -> bool:
    if len(path) >= 2 and path[0] == "outputs":
        return ("outputs", str(path[1])) in positioned
    return (
        len(path) >= 4
        and path[0] == "resources"
        and path[2] == "properties"
        and ("resources", str(path[1]), str(path[3])) in positioned
    )


def derive(
    index: SecretIndex,
    stored: StoredObject,
    stack: str,
    region: str,
    *,
    prepare: Callable[[dict[str, Any]], Any] | None = None,
) -> Derivation:
    """What scrub changes in the current record. `prepare(data)` (the template-driven
    rewrite, engine.scrub.template) runs first and changes `data` in place; the value-driven
    rewrite then covers what the template does not position. Refuses (OperationRefused) a
    record that is newer than SUPPORTED_VERSION or damaged, naming it."""
    check_record(stored, stack, region)
    data = json.loads(stored.body.decode("utf-8"))
    before = copy.deepcopy(data)
    rewrites: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    positioned: set[tuple[str, ...]] = set()
    prepared = None
    if prepare is not None:
        prepared = prepare(data)
        rewrites += prepared.rewrites
        left += prepared.left
        positioned = prepared.positioned
    text = json.dumps(data, ensure_ascii=False) if prepared is not None else stored.body.decode("utf-8", "replace")
    gate = _prefilter(index, text)
    hits: list[Hit] = []
    if gate is not None:
        walker = _Walker(gate[0], shapes=gate[1], props=gate[2])
        walker.walk(data)
        hits = walker.hits
    for hit in hits:
        if hit.in_key or hit.redacted_path or not _covered(hit.path):
            why = "a secret in an object key cannot be rewritten" if hit.in_key else "outside what scrub rewrites"
            left.append({"path": list(hit.path), "source": hit.match.source, "why": why})
            continue
        if _positioned(hit.path, positioned):
            left.append({"path": list(hit.path), "source": hit.match.source, "why": TEMPLATE_LITERAL})
            continue
        to = hit.match.replacement(region)
        rewrites.append({"path": list(hit.path), "to": to, "source": hit.match.source, "whole": hit.match.whole})
        _set(data, hit.path, to)
    state = StackState.model_validate(data)
    outputs = data.get("outputs") if isinstance(data.get("outputs"), dict) else {}
    return Derivation(rewrites, left, state, outputs, before=before, after=data, template=prepared)


def _set(document: Any, path: tuple[str | int, ...], value: Any) -> None:
    node = document
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
