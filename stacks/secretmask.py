"""The one place that masks a record for display: every page, export and download of a
record (or of one of its versions) goes through `masked_body`.

Two layers, both before anything reaches a template or a response:

- detectors, on every record, before any scan (engine.secrets and engine.masking):
  a value under a secret-bearing name (`MasterUserPassword`, `DbPassword`, `ApiKey`,
  `TOKEN`: `secret_property` and `secret_name`), credential shapes inside any string
  (`postgres://user:***@host`, PEM keys, AWS key pairs, vendor tokens, `password=...`),
  and for a body that is not JSON the same shapes and `"name": "value"` pairs in its text;
- what a scan found: the scan stores where a secret sits (key, version, JSON path), never
  the value; the value at every flagged path becomes `***`.

`***` and whole `{{resolve:...}}` references are left as they are. A body in which nothing
is masked is returned as the same bytes; a masked JSON body is re-serialised in cdkd's layout
(`JSON.stringify(value, null, 2)`).

The verbatim bytes go only to people with the account's reveal right (`may_reveal`:
account admins, superusers, and members an admin granted `can_reveal`), through the
audited Reveal action (`stacks.views.detail.stack_reveal`).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from engine.masking import MASK, Masker, might_hold_shape
from engine.secrets import (
    ACCESS_KEY_ID,
    SECRET_KEY_LABEL,
    has_access_key_id,
    is_masked,
    is_secret_key_shape,
    secret_name,
    secret_property,
    shape_hits,
    shape_labels,
)
from stacks.models import Membership, Role, SecretFinding, Stack

FLAGGED = MASK
_SHAPES = Masker(())  # credential shapes only: no known value is ever held here

# `"name": "value"` in a body that is not JSON. Possessive runs, a bounded name: one pass.
_PAIR = re.compile(r'"([^"\\\n]{1,256})"\s*+:\s*+"((?:[^"\\\n]|\\.)*+)"')


# --- who may see the stored bytes -------------------------------------------------------------


def may_reveal(user: Any, account: Any) -> bool:
    """The per-account reveal right: superusers, the account's admins, and members an
    admin granted it (`Membership.can_reveal`)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    if user.is_superuser:
        return True
    membership = Membership.objects.filter(user=user, account=account).only("role", "can_reveal").first()
    return membership is not None and (membership.role == Role.ADMIN or membership.can_reveal)


# --- what the scan flagged ---------------------------------------------------------------------


def flagged_paths(stack: Stack, version_id: str | None) -> list[list[Any]]:
    """Paths flagged in the stack's record key: the current version (`None`, or the id the
    mirror holds) or one earlier version."""
    return flagged_paths_of(stack, [version_id])[version_id]


def flagged_paths_of(stack: Stack, version_ids: list[str | None]) -> dict[str | None, list[list[Any]]]:
    """`flagged_paths` of several versions of the record, in one query (a history page)."""
    if not version_ids:
        return {}
    wanted: dict[str | None, list[str | None]] = {}
    for version_id in version_ids:
        wanted[version_id] = [version_id]
        if version_id is None or version_id == stack.version_id:
            wanted[version_id] = [None, stack.version_id or None]
    every = {v for vs in wanted.values() for v in vs}
    query = SecretFinding.objects.filter(account_id=stack.account_id, key=stack.key)
    current = query.filter(version_id__isnull=True) if None in every else query.none()
    named = query.filter(version_id__in=[v for v in every if v])
    found: dict[str | None, list[list[Any]]] = {}
    for version, path in (current | named).values_list("version_id", "path"):
        if isinstance(path, list):
            found.setdefault(version, []).append(path)
    return {v: [p for w in dict.fromkeys(vs) for p in found.get(w, [])] for v, vs in wanted.items()}


def _mask_path(document: Any, path: list[Any]) -> bool:
    node = document
    for step in path[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return False  # the record changed since the scan: nothing at that path any more
    last = path[-1] if path else None
    if (
        isinstance(node, dict)
        and isinstance(last, str)
        and last in node
        or isinstance(node, list)
        and isinstance(last, int)
        and -len(node) <= last < len(node)
    ) and node[last] != FLAGGED:
        node[last] = FLAGGED
        return True
    return False


# --- the detectors -----------------------------------------------------------------------------


def mask_string(text: str, *, secret: bool = False) -> str:
    """One string leaf for display: `***` when it sits under a secret-bearing name or is
    a credential as a whole; else with each credential shape inside it masked."""
    if not text or text == MASK or ("{{resolve:" in text and is_masked(text)):
        return text
    if secret:
        return MASK
    if not might_hold_shape(text):
        return text  # most leaves: ids, ARNs, names
    masked = _SHAPES(text)
    if shape_hits(text):
        labels, _whole = shape_labels(text)
        # The scan's shapes that the text masks cannot cut out (a key pair, a PuTTY or npm
        # key, a shape left after masking): the whole string goes.
        if SECRET_KEY_LABEL in labels or (labels and shape_labels(masked)[0]):
            return MASK
    return masked


@functools.lru_cache(maxsize=8192)
def _named(key: str, rtype: str | None) -> bool:
    """The scan's secret-carrying names and the display's wider `secret_name`; cached:
    the same few hundred names repeat in every row of a record."""
    return secret_property(key, rtype) or secret_name(key)


def mask_document(document: Any, *, pairs: bool = True, names: bool = True) -> tuple[Any, bool]:
    """`document` (decoded JSON, changed in place) with every detector applied; and
    whether anything changed. `pairs=False` skips the access-key-pair rule (the body
    holds no access key id); `names=False` the secret-bearing names (a document whose keys
    are not property names, such as a plan). Iterative: a record nested as deep as the
    JSON decoder allows never reaches Python's recursion limit here."""
    if isinstance(document, str):
        masked = mask_string(document)
        return masked, masked != document
    changed = False
    # (container, resource type, under a secret-bearing name, is the record's root)
    todo: list[tuple[Any, str | None, bool, bool]] = [(document, None, False, True)]
    while todo:
        node, rtype, secret, is_root = todo.pop()
        if isinstance(node, dict):
            declared = node.get("resourceType")
            if isinstance(declared, str):
                rtype = declared
            pair = pairs and any(isinstance(v, str) and has_access_key_id(v) for v in node.values())
            items: Any = node.items()
        else:
            pair, items = False, enumerate(node)
        for key, child in items:
            named = secret or (names and isinstance(key, str) and _named(key, rtype))
            if isinstance(child, str):
                # `pair`: the secret half of an access key pair beside its key id
                new = MASK if pair and not named and is_secret_key_shape(child) else mask_string(child, secret=named)
                if new != child:
                    node[key] = new
                    changed = True
            elif isinstance(child, dict | list):
                if is_root and key == "resources" and isinstance(child, dict):
                    # Logical ids name resources, not values ("DbPasswordRotation" is a
                    # queue): each row is walked as a row, under no name.
                    todo.extend((row, rtype, False, False) for row in child.values() if isinstance(row, dict | list))
                    continue
                todo.append((child, rtype, named, False))
            elif named and isinstance(child, int | float) and not isinstance(child, bool):
                node[key] = MASK
                changed = True
    return document, changed


def mask_text(text: str) -> str:
    """A body that is not JSON (damaged, or a torn write): credential shapes, and the
    value of every `"name": "value"` pair whose name holds a secret."""

    def pair(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if value and value != MASK and secret_name(name) and not is_masked(value):
            return f'"{name}": "{MASK}"'
        return match.group(0)

    return _SHAPES(_PAIR.sub(pair, text))


def mask_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """An operation's plan as its pages show it: credential shapes masked in every string
    (summary, changes, warnings, data), and both values of a reference rewrite whose path
    ends in a secret-bearing name. The stored plan (and its digest) stay as they are."""
    try:
        copy = json.loads(json.dumps(plan, default=str))
    except (TypeError, ValueError, RecursionError):
        return {"summary": MASK}
    data = copy.get("data") if isinstance(copy, dict) else None
    rewrites = data.get("rewrites") if isinstance(data, dict) else None
    for entry in rewrites if isinstance(rewrites, list) else []:
        path = entry.get("path") if isinstance(entry, dict) else None
        last = str(path).rsplit(".", 1)[-1] if isinstance(path, str) else path[-1] if path else None
        if isinstance(path, list | str) and isinstance(last, str) and _named(last, None):
            entry.update({k: MASK for k in ("before", "after") if k in entry})
    masked, _changed = mask_document(copy, names=False)
    return masked


# --- the body a page or a download gets ---------------------------------------------------------


def mask_bytes(body: bytes, paths: list[list[Any]] = ()) -> bytes:  # type: ignore[assignment]
    """`body` with the detectors and the flagged `paths` applied; the same bytes when
    nothing is masked. Never raises: whatever cannot be masked is not shown."""
    try:
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            return _mask_raw(body)
        changed = False
        for path in paths:
            if path and FLAGGED not in path:
                changed = _mask_path(document, path) or changed
        pairs = ACCESS_KEY_ID.search(body.decode("utf-8", "replace")) is not None
        document, detected = mask_document(document, pairs=pairs)
        if not (changed or detected):
            return body
        # JSON.stringify(value, null, 2)'s layout, at C speed (js_stringify is pure Python).
        try:
            return json.dumps(document, indent=2, ensure_ascii=False).encode()
        except UnicodeEncodeError:  # a lone surrogate ("\ud800"): keep it an escape, valid UTF-8
            return json.dumps(document, indent=2).encode()
    except Exception:  # noqa: BLE001 - fail closed: a page shows `***`, never the record unmasked
        return json.dumps(MASK).encode()


def _mask_raw(body: bytes) -> bytes:
    text = body.decode("utf-8", errors="surrogateescape")
    masked = mask_text(text)
    return body if masked == text else masked.encode("utf-8", errors="surrogateescape")


def masked_body(stack: Stack, body: bytes, version_id: str | None = None) -> bytes:
    """What every page, export and download shows of `body` (the stack's current record,
    or its version `version_id`): detectors, then what the scan flagged, masked."""
    return mask_bytes(bytes(body), flagged_paths(stack, version_id))
