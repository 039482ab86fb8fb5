r"""Control, format and bidi characters made visible: `RTL-\u202egnp.exe` must read as that,
not as `RTL-exe.png`, on every page and in every log line.

Stack names, logical and physical ids, event messages and anything else from a bucket may
hold characters that are invisible or that reorder the text around them (Trojan Source,
CVE-2021-42574). They are shown as the escape that names them (`\u202e`), in three places:

* `visible(text)`: the escape itself, for one string (the `visible` template filter).
* `VisibleControlsMiddleware`: every HTML response, in its text (between tags) and in its
  `title` attributes, so no template, partial or error page can print one raw. Form values
  and other attributes keep their bytes, so a logical id posted back is the id itself.
  Tabs and line breaks stay in HTML: the page's own layout uses them.
* `EscapeControlsFilter`: every log record (settings.LOGGING), line breaks included, so a
  name cannot forge a log line; a traceback keeps its own line breaks.

This module imports nothing of the app's models: the logging configuration loads it early.
"""

from __future__ import annotations

import logging
import re

# Unicode categories Cc (controls), Cf (format: bidi embeddings, overrides and isolates,
# zero-width characters, the BOM, tags), Zl and Zp (line and paragraph separators), as of
# Unicode 15.1 (tests check this covers the running Python's unicodedata).
_RANGES = (
    (0x0000, 0x001F),
    (0x007F, 0x009F),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
_LAYOUT = "\t\n\r"  # kept in HTML (and in tracebacks: "\n")


def _char_class(ranges, keep: str = "") -> re.Pattern[str]:
    """One character class of `ranges` without the characters of `keep` (a plain class:
    no lookahead, so a clean page costs one fast scan)."""
    parts = []
    for lo, hi in ranges:
        start = lo
        for code in [*sorted(ord(k) for k in keep if lo <= ord(k) <= hi), hi + 1]:
            if start < code:
                end = code - 1
                parts.append(re.escape(chr(start)) + ("" if start == end else "-" + re.escape(chr(end))))
            start = code + 1
    return re.compile("[" + "".join(parts) + "]")


CONTROLS = _char_class(_RANGES)
CONTROLS_BUT_LAYOUT = _char_class(_RANGES, _LAYOUT)
CONTROLS_BUT_NEWLINE = _char_class(_RANGES, "\n")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str, *, keep_layout: bool = False) -> str:
    """`text` with every control, format and separator character written as its escape
    (`\\u202e`); tabs and line breaks kept when `keep_layout`. Linear time."""
    return (CONTROLS_BUT_LAYOUT if keep_layout else CONTROLS).sub(_escape, text)


# --- HTML responses ---------------------------------------------------------------------------

# A tag, comment or doctype. Values the templates print are HTML-escaped, so a `<` in the
# output always starts markup. The text inside <script> and <style> is left alone.
_MARKUP = re.compile(r"<!--.*?-->|<(script|style)\b.*?</\1\s*>|<[^>]*>", re.S | re.I)
_TITLE_ATTR = re.compile(r"""(\stitle\s*=\s*)("[^"]*"|'[^']*')""", re.I)


def _tag(markup: str) -> str:
    if not CONTROLS_BUT_LAYOUT.search(markup) or markup.startswith(("<script", "<style", "<SCRIPT", "<STYLE")):
        return markup
    return _TITLE_ATTR.sub(lambda m: m.group(1) + visible(m.group(2), keep_layout=True), markup)


def visible_html(html: str) -> str:
    """An HTML document with the characters made visible in its text and `title` attributes."""
    if not CONTROLS_BUT_LAYOUT.search(html):
        return html  # the common case: one scan, no copy
    out: list[str] = []
    end = 0
    for match in _MARKUP.finditer(html):
        out.append(visible(html[end : match.start()], keep_layout=True))
        out.append(_tag(match.group()))
        end = match.end()
    out.append(visible(html[end:], keep_layout=True))
    return "".join(out)


class VisibleControlsMiddleware:
    """Applies `visible_html` to every complete HTML response (pages, htmx partials, errors)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if getattr(response, "streaming", False) or "text/html" not in response.get("Content-Type", ""):
            return response
        if response.has_header("Content-Encoding"):  # compressed already: list this below GZipMiddleware
            return response
        charset = response.charset or "utf-8"
        try:
            html = response.content.decode(charset)
        except (UnicodeDecodeError, LookupError):
            return response
        cleaned = visible_html(html)
        if cleaned is not html:
            response.content = cleaned.encode(charset)
            if response.has_header("Content-Length"):
                response["Content-Length"] = str(len(response.content))
        return response


# --- logs -------------------------------------------------------------------------------------


class EscapeControlsFilter(logging.Filter):
    """Rewrites each record's message with every control character escaped (line breaks
    too: one record, one line), and its traceback with all but its own line breaks."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: let the handler report it as logging does
            return True
        record.msg, record.args = visible(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = CONTROLS_BUT_NEWLINE.sub(_escape, record.exc_text)
        if record.stack_info:
            record.stack_info = CONTROLS_BUT_NEWLINE.sub(_escape, record.stack_info)
        return True
