"""Mask what the secret scan flagged before a record is shown on a page.

The scan stores where a secret sits (key, version, JSON path), never the value. Pages that
render a record (or one of its versions) replace the value at every flagged path with
`***`, so a secret the scrub has not removed yet is not shown to everyone who can read the
stack. The download of the stored bytes stays verbatim: it is the record, on purpose.
"""

from __future__ import annotations

import json
from typing import Any

from stacks.models import SecretFinding, Stack

FLAGGED = "***"


def flagged_paths(stack: Stack, version_id: str | None) -> list[list[Any]]:
    """Paths flagged in the stack's record key: the current version (`None`, or the id the
    mirror holds) or one earlier version."""
    versions: list[str | None] = [version_id]
    if version_id is None or version_id == stack.version_id:
        versions = [None, stack.version_id or None]
    query = SecretFinding.objects.filter(account_id=stack.account_id, key=stack.key)
    current = query.filter(version_id__isnull=True) if None in versions else query.none()
    named = query.filter(version_id__in=[v for v in versions if v])
    return [path for path in (current | named).values_list("path", flat=True) if isinstance(path, list)]


def _mask(document: Any, path: list[Any]) -> None:
    node = document
    for step in path[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return  # the record changed since the scan: nothing at that path any more
    last = path[-1] if path else None
    if (
        isinstance(node, dict)
        and isinstance(last, str)
        and last in node
        or isinstance(node, list)
        and isinstance(last, int)
        and -len(node) <= last < len(node)
    ):
        node[last] = FLAGGED


def masked_body(stack: Stack, body: bytes, version_id: str | None = None) -> bytes:
    """`body` with every flagged value replaced, or `body` itself when nothing is flagged
    (or it is not JSON: the scan found nothing addressable in it then)."""
    paths = [p for p in flagged_paths(stack, version_id) if p and FLAGGED not in p]
    if not paths:
        return body
    try:
        document = json.loads(body)
    except ValueError:
        return body
    for path in paths:
        _mask(document, path)
    return json.dumps(document, indent=2, ensure_ascii=False).encode()
