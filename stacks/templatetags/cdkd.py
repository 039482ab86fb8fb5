"""Presentation filters for cdkd records: JSON shown as JSON, composite ids by segment,
epoch milliseconds as dates. No decisions are made here; the views decide what to show."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from stacks.visible import visible as _visible

register = template.Library()


@register.filter(is_safe=True)
def visible(value: Any) -> str:
    """Control and bidi characters as their escapes (`RTL-\\u202egnp.exe`). Every HTML
    response gets this from `stacks.visible.VisibleControlsMiddleware`; the filter is for
    a value the middleware leaves alone (an attribute other than `title`)."""
    return _visible(str(value))


@register.filter
def pretty_json(value: Any) -> str:
    """A JSON value, indented (2 spaces) with key order kept, non-ASCII kept readable."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def inline_json(value: Any) -> str:
    """A scalar string as itself, anything else (numbers, lists, objects, null) as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


@register.filter
def masked_json(value: Any) -> str:
    """`inline_json` of a copy with the record detectors applied (secret-bearing names,
    credential shapes): operation parameters, for example a deploy's template parameters."""
    from stacks.secretmask import MASK, mask_document

    try:
        copy = json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return MASK
    masked, _changed = mask_document(copy)
    return inline_json(masked)


@register.filter
def is_string(value: Any) -> bool:
    return isinstance(value, str)


@register.filter
def segments(physical_id: Any) -> list[str]:
    """A composite physical id (`db|table`) split into its segments; one segment otherwise."""
    if not isinstance(physical_id, str) or not physical_id:
        return []
    return physical_id.split("|")


@register.filter
def from_ms(value: Any) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime; None for anything not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:  # an int too large for a float (a damaged record's 10**400) overflows isfinite
        if not math.isfinite(value):
            return None
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


_BACKTICKED = re.compile(r"`([^`\n]{1,2000})`")


@register.filter(needs_autoescape=True)
def code_spans(value: Any, autoescape: bool = True) -> str:
    """A message with its `backticked` parts as <code>, each command with a copy button, so
    advice can be pasted without the quotes around it. Everything is escaped first."""
    text = conditional_escape(str(value)) if autoescape else str(value)

    def span(match: re.Match[str]) -> str:
        inner = match.group(1)
        copy = ""
        if inner.startswith(("python manage.py ", "cdkd ")) and "&lt;" not in inner:  # not a <placeholder>
            copy = f' <button type="button" class="copy" data-copy value="{inner}" title="Copy">copy</button>'
        return f"<code>{inner}</code>{copy}"

    return mark_safe(_BACKTICKED.sub(span, text))  # noqa: S308 - built from escaped text only
