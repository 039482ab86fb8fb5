"""CSV and JSON downloads of a filtered list (audit, events, secret findings)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import JsonResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header


class _Echo:
    """A file-like sink for csv.writer that hands each row back instead of storing it."""

    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def _csv_lines(rows: Iterable[dict[str, Any]], fields: list[str]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(fields)
    for row in rows:
        yield writer.writerow([_cell(row.get(field)) for field in fields])


def csv_download(rows: Iterable[dict[str, Any]], fields: list[str], filename: str) -> StreamingHttpResponse:
    """Streamed, so a large export never sits in memory; nested values as compact JSON."""
    response = StreamingHttpResponse(_csv_lines(rows, fields), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, f"{filename}.csv")
    return response


def json_download(value: Any, filename: str) -> JsonResponse:
    response = JsonResponse(value, safe=False, json_dumps_params={"ensure_ascii": False})
    response["Content-Disposition"] = content_disposition_header(True, f"{filename}.json")
    return response
