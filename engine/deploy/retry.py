"""cdkd's retry classification and schedules (deploy-engine.md 1.7; `retry.ts`,
`retryable-errors.ts`), for the deploy runner's provider calls."""

from __future__ import annotations

from dataclasses import dataclass

from engine.providers.base import ProviderError

# retryable-errors.ts, in outline: throttling codes, 5xx, and transient messages
THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "SlowDown",
        "ProvisionedThroughputExceededException",
        "ServiceUnavailable",
        "InternalFailure",
        "InternalError",
    }
)
TRANSIENT_MESSAGES = (
    "Rate exceeded",
    "DependencyViolation",
    "currently in the following state: Pending",
    "concurrent update operation",
    "try again",
)
IAM_PROPAGATION_MESSAGES = (
    "cannot be assumed",
    "role defined for the function",
    "not authorized to perform",
    "Invalid principal in policy",
)


@dataclass(frozen=True)
class RetryPolicy:
    """cdkd's schedules (1.7): 8 retries from 1 s doubling to 8 s; IAM propagation 26 from
    250 ms capped at 2 s; deletes 3 from 5 s. `scale` shrinks every delay (tests)."""

    retries: int = 8
    initial: float = 1.0
    cap: float = 8.0
    iam_retries: int = 26
    iam_initial: float = 0.25
    iam_cap: float = 2.0
    delete_retries: int = 3
    delete_initial: float = 5.0
    scale: float = 1.0
    resource_timeout: float = 30 * 60.0


def retry_class(exc: BaseException) -> str | None:
    """ "iam" (dense schedule), "transient", or None (not retryable)."""
    if not isinstance(exc, ProviderError):
        return None
    message = str(exc)
    if any(m in message for m in IAM_PROPAGATION_MESSAGES):
        return "iam"
    if (exc.aws_code or "") in THROTTLE_CODES or any(m in message for m in TRANSIENT_MESSAGES):
        return "transient"
    return None
