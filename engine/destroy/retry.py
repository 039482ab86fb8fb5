"""Per-resource retries and deadlines of a destroy (reference §8.2 step 7; deploy-engine.md 1.7).

Retries: a delete that fails with a transient error (throttling, a 5xx code, DependencyViolation
and cdkd's other transient messages, IAM propagation) is tried again up to 3 times, after 5 s,
10 s and 20 s: cdkd's DELETE schedule. An error that reads as "not found" is never retried
(the runner counts it as deleted), nor a Skip, nor a nested stack or custom resource row
(cdkd's `disableOuterRetry`: their own protocol waits).

Deadlines: a delete still running after `warn_after` is reported once (a log line and the
item's message); one still running after `timeout` FAILS (`ResourceTimeout`), its record
kept, and the run no longer waits for it. cdkd's defaults are 5 and 30 minutes; custom
resources get a 1 hour floor. Both can be set per resource type.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from engine.deploy.retry import IAM_PROPAGATION_MESSAGES, THROTTLE_CODES, TRANSIENT_MESSAGES
from engine.operations import OperationRefused

DELETE_RETRY_DELAYS: tuple[float, ...] = (5.0, 10.0, 20.0)
DEFAULT_WARN_AFTER_S = 5 * 60.0
DEFAULT_TIMEOUT_S = 30 * 60.0
CUSTOM_RESOURCE_FLOOR_S = 60 * 60.0
MAX_DURATION_S = 7 * 24 * 3600.0
SERVER_ERROR_CODES = frozenset({"InternalServerError", "ServiceException", "ServerException", "RequestTimeout"})
TRANSIENT_DELETE_MESSAGES = (*TRANSIENT_MESSAGES, "has dependent object", "is currently in use", "resource is in use")


def is_custom_resource(resource_type: Any) -> bool:
    return isinstance(resource_type, str) and (
        resource_type.startswith("Custom::") or resource_type == "AWS::CloudFormation::CustomResource"
    )


def retry_class(exc: BaseException) -> str | None:
    """ "iam", "transient" or None, for any exception carrying `aws_code` and a message (the
    providers' ProviderError and the runner's stand-in alike)."""
    if not isinstance(exc, Exception):
        return None
    message = str(exc)
    code = getattr(exc, "aws_code", None) or getattr(exc, "code", None) or ""
    if any(m in message for m in IAM_PROPAGATION_MESSAGES):
        return "iam"
    if not isinstance(code, str):
        code = ""
    if code in THROTTLE_CODES or code in SERVER_ERROR_CODES or code == "DependencyViolation":
        return "transient"
    if any(m in message for m in TRANSIENT_DELETE_MESSAGES):
        return "transient"
    return None


class ResourceTimeout(Exception):  # noqa: N818 - cdkd's ResourceTimeoutError
    """The delete did not finish within the resource timeout; it may still complete in AWS."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str, *, what: str) -> float:
    """`90`, `90s`, `30m`, `1h`, `500ms` -> seconds. Raises ValueError naming `what`."""
    match = _DURATION.match(text or "")
    if not match:
        raise ValueError(f"{what}: {text!r} is not a duration (use e.g. 90s, 30m or 1h)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    _check_seconds(seconds, what)
    return seconds


def _check_seconds(seconds: Any, what: str) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise ValueError(f"{what} must be a number of seconds, got {seconds!r}")
    if seconds <= 0 or seconds > MAX_DURATION_S:
        raise ValueError(f"{what} must be more than 0 and at most 7 days, got {seconds!r} s")
    return float(seconds)


_TYPE_NAME = re.compile(r"^(?:[A-Za-z0-9]+::[A-Za-z0-9]+::[A-Za-z0-9]+|Custom::[A-Za-z0-9_@.-]+)$")


def parse_deadline_flags(values: list[str], *, flag: str) -> dict[str, float]:
    """cdkd's `--resource-timeout DURATION` / `TYPE=DURATION` (repeatable) -> {"default"|TYPE: s}."""
    result: dict[str, float] = {}
    for value in values:
        key, sep, duration = value.partition("=")
        if not sep:
            key, duration = "default", value
        elif not _TYPE_NAME.match(key.strip()):
            raise ValueError(f"{flag}: {key!r} is not a resource type (e.g. AWS::RDS::DBInstance=1h)")
        result[key.strip()] = parse_duration(duration, what=f"{flag} {value}")
    return result


def _setting(params: dict[str, Any], name: str, default: float) -> dict[str, float]:
    value = params.get(name)
    if value is None:
        return {"default": default}
    if not isinstance(value, dict):
        value = {"default": value}
    result: dict[str, float] = {}
    for key, seconds in value.items():
        if not isinstance(key, str) or (key != "default" and not _TYPE_NAME.match(key)):
            raise OperationRefused(f"{name}: {key!r} is neither 'default' nor a resource type")
        try:
            result[key] = _check_seconds(seconds, f"{name} {key}")
        except ValueError as exc:
            raise OperationRefused(str(exc)) from None
    result.setdefault("default", default)
    return result


@dataclass(frozen=True)
class Deadlines:
    """What the plan fixed: warn-after and timeout, in seconds, per type with a default."""

    warn_after: dict[str, float] = field(default_factory=lambda: {"default": DEFAULT_WARN_AFTER_S})
    timeout: dict[str, float] = field(default_factory=lambda: {"default": DEFAULT_TIMEOUT_S})

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Deadlines:
        """`resource_warn_after` / `resource_timeout`: seconds, or {"default"|TYPE: seconds}."""
        return cls(
            warn_after=_setting(params, "resource_warn_after", DEFAULT_WARN_AFTER_S),
            timeout=_setting(params, "resource_timeout", DEFAULT_TIMEOUT_S),
        )

    @classmethod
    def from_data(cls, data: Any) -> Deadlines:
        if not isinstance(data, dict):
            return cls()
        return cls(warn_after=dict(data.get("warn_after") or {}), timeout=dict(data.get("timeout") or {}))

    def as_data(self) -> dict[str, Any]:
        return {"warn_after": dict(self.warn_after), "timeout": dict(self.timeout)}

    def for_type(self, resource_type: Any) -> tuple[float, float]:
        """(warn_after, timeout) of one row; a custom resource's timeout has a 1 hour floor
        unless its type is named explicitly."""
        rtype = resource_type if isinstance(resource_type, str) else ""
        warn = self.warn_after.get(rtype, self.warn_after.get("default", DEFAULT_WARN_AFTER_S))
        timeout = self.timeout.get(rtype)
        if timeout is None:
            timeout = self.timeout.get("default", DEFAULT_TIMEOUT_S)
            if is_custom_resource(rtype):
                timeout = max(timeout, CUSTOM_RESOURCE_FLOOR_S)
        return warn, timeout


def duration_text(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:g}s"
