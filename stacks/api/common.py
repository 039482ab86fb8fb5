"""What every API route shares: token authentication, the JSON error, pagination, and the
wrapper that refuses read-only tokens and audits each mutating call with the token's id."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.core.paginator import EmptyPage, Paginator
from django.http import Http404, HttpRequest
from ninja import Status
from ninja.security import HttpBearer

from engine.errors import EngineError, NotFound
from engine.operations import OperationRefused
from stacks import audit
from stacks.api import tokens
from stacks.models import Account, ApiToken, Operation

logger = logging.getLogger(__name__)

MAX_PAGE_SIZE = 200


class ApiError(Exception):
    """A refusal with its status and one-line message: `{"message": ...}` in the response."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def as_api_error(exc: Exception) -> ApiError | None:
    """The refusals the pipeline and the access checks raise, as the status each means:
    404 an account, stack or operation this person may not see; 403 a role too low; 409
    refused by the pipeline now (state, four-eyes, a predicted refusal); 400/413 a request
    Django refuses to read (too many fields, too big); 502 AWS failed
    (a denied bucket is not the caller's fault, as on the pages)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        return ApiError(413, "The request body is too big.")
    if isinstance(exc, SuspiciousOperation):  # too many fields or files, a malformed multipart body
        return ApiError(400, f"The request cannot be read: {exc}")
    if isinstance(exc, Http404):
        return ApiError(404, str(exc) or "Not found.")
    if isinstance(exc, PermissionDenied):
        return ApiError(403, str(exc) or "Not allowed.")
    if isinstance(exc, OperationRefused):
        return ApiError(409, str(exc))
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc))
    if isinstance(exc, EngineError):
        return ApiError(502, str(exc))
    return None


class TokenAuth(HttpBearer):
    """`Authorization: Bearer cdkd_...`. The call then acts as the token's person, whose
    roles are read per account at each call (stacks.access), exactly as for the pages. A
    browser session is ignored: a cookie never authorises an API call, so no CSRF arises."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        found = tokens.token_for(token.strip())
        if found is None:
            return None
        request.user = found.user
        request.api_token = found  # type: ignore[attr-defined]
        return found


def token_of(request: HttpRequest) -> ApiToken:
    return request.auth  # type: ignore[attr-defined,return-value]


def page_of(queryset, page: int, page_size: int | None, convert: Callable[[Any], dict]) -> dict[str, Any]:
    """One page of `queryset` as `{count, page, page_size, items}`; a page past the end is
    empty (a 200), not an error, so a script can stop on an empty page."""
    size = min(page_size or settings.CDKD_PAGE_SIZE, MAX_PAGE_SIZE)
    paginator = Paginator(queryset, size)
    try:
        items = list(paginator.page(page).object_list) if paginator.count else []
    except EmptyPage:
        items = []
    return {"count": paginator.count, "page": page, "page_size": size, "items": [convert(i) for i in items]}


def target(
    request: HttpRequest,
    *,
    account: Account | None = None,
    operation: Operation | None = None,
    stack_name: str = "",
    region: str | None = "",
) -> None:
    """Name what a mutating call acts on, for its audit entry (set as soon as it is known,
    so a refusal is audited on the right account too). A stack without an operation (a
    plan, a drift check) is named by `stack_name` and `region`."""
    request.api_target = {  # type: ignore[attr-defined]
        "account": account or (operation.account if operation else None),
        "operation": operation,
        "stack_name": stack_name,
        "region": region or "",
    }


def _audit_call(request: HttpRequest, action: str, *, status: int, error: str = "") -> None:
    token = token_of(request)
    found = getattr(request, "api_target", {}) or {}
    operation = found.get("operation")
    audit.record(
        f"api.{action}",
        actor=token.user.get_username(),
        actor_user=token.user,
        account=found.get("account"),
        operation=operation if operation is not None and operation.pk else None,
        stack_name=found.get("stack_name", ""),
        region=found.get("region", ""),
        result="ok" if status < 400 else "refused",
        error=error[:500],
        client_address=audit.client_ip(request),
        details={
            "token": token.pk,
            "tokenPrefix": token.prefix,
            "method": request.method,
            "path": request.path[:300],
            "status": status,
        },
    )


def mutation(request: HttpRequest, action: str, work: Callable[[], tuple[int, Any]]) -> Status:
    """Run a route's change: refused (403) for a read-only token before anything runs, and
    audited as `api.<action>` with the token's id whatever the outcome. `work` returns
    (status, body); a refusal it raises becomes the status it means (`as_api_error`).
    Called inside the route rather than as a decorator: django-ninja reads a route's
    signature from the function itself, and authenticates only after its own wrappers."""
    if token_of(request).read_only:
        message = "This token is read-only: it cannot plan, request, approve, reject or cancel anything."
        _audit_call(request, action, status=403, error=message)
        raise ApiError(403, message)
    try:
        status, body = work()
    except Exception as exc:
        error = as_api_error(exc)
        if error is None:
            _audit_call(request, action, status=500, error=f"internal error ({type(exc).__name__})")
            raise
        _audit_call(request, action, status=error.status, error=error.message)
        raise error from exc
    _audit_call(request, action, status=status)
    return Status(status, body)
