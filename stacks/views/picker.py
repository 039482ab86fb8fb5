"""The orphan-resources picker: which resources of a record cdkd should forget.

A compact table (logical id, type, physical id) a page at a time, a server-side filter
(`match`, GET: the site's CSP allows no inline script) and "select all N matches", so a
record of 2,000 resources is as quick to pick from as one of 5. The form posts nothing: it
is a GET back to the same page, which plans once `resources` is named.

`expand()` turns "select all matches" into the `resources` list before the params form reads
the query string; `picker_context()` is what the template's picker partial shows. Errors are
shown only once something was submitted (a bound, empty form would otherwise greet the
person with "Pick at least one resource").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.http import QueryDict

PER_PAGE = 100
MAX_MATCH = 200  # characters of the filter


@dataclass(frozen=True)
class PickRow:
    logical_id: str
    resource_type: str
    physical_id: str


def pick_rows(resource_rows: list[tuple[str, Any]]) -> list[PickRow]:
    """(logical id, row) pairs of the parsed record -> rows; a malformed row shows blanks."""
    out = []
    for lid, row in resource_rows:
        rtype = row.get("resourceType") if isinstance(row, dict) else None
        phys = row.get("physicalId") if isinstance(row, dict) else None
        out.append(PickRow(lid, rtype if isinstance(rtype, str) else "", phys if isinstance(phys, str) else ""))
    return out


def _match(params: QueryDict) -> str:
    return (params.get("match") or "").strip()[:MAX_MATCH]


def matching(rows: list[PickRow], match: str) -> list[PickRow]:
    if not match:
        return rows
    needle = match.casefold()
    return [
        r
        for r in rows
        if needle in r.logical_id.casefold()
        or needle in r.resource_type.casefold()
        or needle in r.physical_id.casefold()
    ]


def expand(params: QueryDict, rows: list[PickRow]) -> QueryDict:
    """The query string with "select all matches" replaced by the matching logical ids."""
    if params.get("select") != "all-matches":
        return params
    expanded = params.copy()
    expanded.setlist("resources", [r.logical_id for r in matching(rows, _match(params))])
    expanded.pop("select")
    return expanded


def is_picking(params: QueryDict) -> bool:
    """Still picking: nothing named yet, or the filter/pages of the picker were used."""
    return "resources" not in params or params.get("pick") == "filter"


def picker_context(params: QueryDict, rows: list[PickRow]) -> dict[str, Any]:
    submitted = params.get("submitted") == "1"
    match = _match(params)
    found = matching(rows, match)
    page = Paginator(found, PER_PAGE).get_page(params.get("page"))
    chosen = set(params.getlist("resources"))
    return {
        "picker_page": page,
        "picker_match": match,
        "picker_total": len(rows),
        "picker_found": len(found),
        "picker_chosen": chosen,
        "picker_submitted": submitted,
        "picker_match_too_long": len((params.get("match") or "").strip()) > MAX_MATCH,
    }
