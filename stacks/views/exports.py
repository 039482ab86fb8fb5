"""CSV and JSON downloads of a filtered list (audit, events, secret findings)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import JsonResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header

from stacks.visible import visible


class _Echo:
    """A file-like sink for csv.writer that hands each row back instead of storing it."""

    def write(self, value: str) -> str:
        return value


# OWASP "CSV Injection": a spreadsheet runs a cell that starts with one of these as a
# formula (or, after tab/CR, still may). A leading single quote makes it plain text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(text: str) -> str:
    """`text` as a cell no spreadsheet evaluates: prefixed with `'` when it could start a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, bool | int | float):
        return value  # a number is not a formula, and -5 must stay -5
    return neutralise(str(value))


def _csv_lines(rows: Iterable[dict[str, Any]], fields: list[str]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow([neutralise(f) for f in fields])
    for row in rows:
        yield writer.writerow([_cell(row.get(field)) for field in fields])


def csv_download(rows: Iterable[dict[str, Any]], fields: list[str], filename: str) -> StreamingHttpResponse:
    """Streamed, so a large export never sits in memory; nested values as compact JSON;
    every text cell neutralised against formula injection (`neutralise`)."""
    response = StreamingHttpResponse(_csv_lines(rows, fields), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, f"{visible(filename)}.csv")
    return response


def json_download(value: Any, filename: str) -> JsonResponse:
    response = JsonResponse(value, safe=False, json_dumps_params={"ensure_ascii": False})
    # A stack name may hold a bidi override: the saved file's name must not read reversed.
    response["Content-Disposition"] = content_disposition_header(True, f"{visible(filename)}.json")
    return response
