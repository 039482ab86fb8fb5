"""Masking secrets out of text that leaves the engine: event messages, logs, audit lines.

Two kinds of masking, applied together by `Masker`:

- known values: exact secret strings the caller knows (resolved secret references, values
  at NoEcho positions, what a scanner flagged). Values shorter than `MIN_SECRET_LENGTH` are
  not masked (as in cdkd, whose masking also leaves names under 4 characters visible):
  masking "a" everywhere would destroy every message while protecting nothing.
- credential shapes: text that looks like a credential whatever its value (AWS access key
  ids, a secret key after its name, PEM private keys, bearer tokens, password=..., URL
  user:password@, common vendor token prefixes).

Contract: `Masker(...)(text)` never raises and returns `text` with every hit replaced by
`***` (cdkd's redaction mask); a non-string comes back unchanged. Longer values are
replaced first, so a secret containing another secret is masked whole. The scrub issue
extends the shapes; keep this module dependency-free.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

MASK = "***"
MIN_SECRET_LENGTH = 4

# (pattern, group to replace or 0 for the whole match, lower-cased literals one of which
# every match holds). A pattern runs only over a text holding one of its literals: most
# texts skip most patterns, and a 1 MB message pays one pass per pattern it can match.
_SHAPES: list[tuple[re.Pattern[str], int, tuple[str, ...]]] = [
    # PEM private keys, whole block. Labels ("RSA", "ENCRYPTED", "OPENSSH") are short: the
    # bound keeps each BEGIN/END try constant-time whatever follows it.
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]{0,64}PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]{0,64}PRIVATE KEY-----|$)", re.S
        ),
        0,
        ("private key",),
    ),
    # AWS access key ids (long-term and temporary).
    (re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), 0, ("akia", "asia", "abia", "acca")),
    # A secret access key / session token named as such.
    (
        re.compile(
            r"(?i)\b(?:aws_?)?(?:secret_?access_?key|session_?token|secretaccesskey|sessiontoken)"
            r"[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{16,})"
        ),
        1,
        ("secret", "session"),
    ),
    # password=..., "password": "...", passwd, pwd, secret, token, api_key
    (
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret)"
            r"[\"']?\s*[:=]\s*[\"']?([^\s\"',;&}]{3,})"
        ),
        1,
        ("passw", "pwd", "secret", "token", "api"),
    ),
    # Authorization: Bearer xxx
    (re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})"), 1, ("bearer",)),
    # scheme://user:password@host. Anchored on the literal "://" (a one-character look-behind
    # stands for the scheme) with possessive runs: the old `[a-z][a-z0-9+.-]*://` retried
    # the scheme from every letter of a long word, quadratic in its length (22 s for a
    # 64 KB event message). Possessive changes no match: neither run can give back a ':'
    # or an '@' that the next token needs.
    (re.compile(r"(?<=[a-z0-9+.-])(://[^\s:/@]++:)([^\s@/]++)(@)", re.I), 2, ("://",)),
    # GitHub, Slack, Stripe-like, Google API keys.
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), 0, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}\b"), 0, ("github_pat_",)),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"), 0, ("xox",)),
    (re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b"), 0, ("k_live_", "k_test_")),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), 0, ("aiza",)),
]

# Every literal above and of engine.secrets' shapes: a text holding none of them cannot
# match any shape, so most strings (ids, ARNs, names) skip every pattern. Substring tests
# of the lower-cased text beat a case-blind alternation by ~8x. Kept a superset of the
# shapes by tests/unit/test_masking_display.py.
TRIGGER_WORDS = tuple(dict.fromkeys([w for _p, _g, words in _SHAPES for w in words] + ["putty-user-key", "npm_"]))


def might_hold_shape(text: str) -> bool:
    """False when no credential shape can occur in `text` (a few linear substring passes)."""
    low = text.lower()
    return any(map(low.__contains__, TRIGGER_WORDS))


def _replace_group(pattern: re.Pattern[str], group: int, text: str) -> str:
    if group == 0:
        return pattern.sub(MASK, text)

    def repl(match: re.Match[str]) -> str:
        start, end = match.span(group)
        whole_start = match.start()
        value = match.group(0)
        return value[: start - whole_start] + MASK + value[end - whole_start :]

    return pattern.sub(repl, text)


class Masker:
    """Masks known secret values and credential shapes. Thread-safe; `add` may be called any time."""

    def __init__(self, secrets: Iterable[Any] = (), *, shapes: bool = True) -> None:
        self._values: set[str] = set()
        self._shapes = shapes
        self._lock = threading.Lock()
        for value in secrets:
            self.add(value)

    def add(self, value: Any) -> None:
        """Remember a secret value (strings of at least MIN_SECRET_LENGTH chars; others ignored)."""
        if isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH and value != MASK:
            with self._lock:
                self._values.add(value)

    def __call__(self, text: Any) -> Any:
        return self.mask(text)

    def mask(self, text: Any) -> Any:
        if not isinstance(text, str) or not text:
            return text
        try:
            with self._lock:
                values = sorted(self._values, key=len, reverse=True)
            for value in values:
                if value in text:
                    text = text.replace(value, MASK)
            if self._shapes:
                low = text.lower()
                for pattern, group, words in _SHAPES:
                    if any(map(low.__contains__, words)):
                        text = _replace_group(pattern, group, text)
            return text
        except Exception:  # noqa: BLE001 - masking must never break the caller; fail closed
            return MASK


def mask_text(text: Any, secrets: Iterable[Any] = ()) -> Any:
    """One-shot: `text` with `secrets` and credential shapes masked."""
    return Masker(secrets)(text)
