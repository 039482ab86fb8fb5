"""The JSON API under /api/v1/ (django-ninja), its OpenAPI 3 schema at /api/schema/.

Every call carries a personal token (`Authorization: Bearer cdkd_...`, made on the person's
Tokens page) and acts as that person: the same per-account checks as the pages
(stacks.access), read-only tokens refused on every mutating call, each mutating call
audited with the token's id (`common.mutation`). Every error is JSON `{"message": ...}`
with the status that says why; no traceback ever leaves the server.

One module per concern: accounts, inventory (stacks, a stack, resources), operations,
deploy (deploy plans and their requests, state migrate), drift (a stack's latest check, a
check now), logs (audit, events), attention (the board); schemas holds the shapes; tokens
makes and checks the secrets.
"""

from __future__ import annotations

import functools
import logging

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, re_path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from stacks.api import accounts, attention, deploy, drift, inventory, logs, operations
from stacks.api.common import ApiError, TokenAuth, as_api_error

logger = logging.getLogger(__name__)

PREFIX = "/api/v1/"

api = NinjaAPI(
    title="cdkd Admin API",
    version="1",
    description=(
        "The cdkd Admin inventory, operations and logs. Authenticate with a personal token: "
        '`Authorization: Bearer cdkd_...`. Errors are `{"message": ...}`.'
    ),
    auth=TokenAuth(),
    openapi_url=None,  # served at /api/schema/ (`schema`), outside the versioned prefix
    docs_url=None,  # an interactive page would load scripts the site's CSP refuses
    urls_namespace="api",
)
for module in (accounts, inventory, drift, operations, deploy, logs, attention):
    api.add_router("", module.router)


def _error(request: HttpRequest, message: str, status: int, detail=None) -> HttpResponse:
    body = {"message": message}
    if detail is not None:
        body["detail"] = detail
    return api.create_response(request, body, status=status)


@api.exception_handler(ApiError)
def _api_error(request, exc: ApiError):
    return _error(request, exc.message, exc.status)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request, exc):
    message = "A valid API token is needed: Authorization: Bearer cdkd_... (unknown, expired or revoked tokens fail)."
    response = _error(request, message, 401)
    response["WWW-Authenticate"] = 'Bearer realm="cdkd-admin"'
    return response


@api.exception_handler(ValidationError)
def _invalid(request, exc: ValidationError):
    detail = [
        {
            "where": ".".join(str(p) for p in e.get("loc", ())),
            "message": str(e.get("msg", "")),
            "type": str(e.get("type")),
        }
        for e in exc.errors
        if isinstance(e, dict)
    ]
    first = detail[0] if detail else {"where": "request", "message": "invalid"}
    more = f" (and {len(detail) - 1} more)" if len(detail) > 1 else ""
    return _error(request, f"Invalid input at {first['where']}: {first['message']}{more}", 422, detail)


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    return _error(request, str(exc), exc.status_code)


@api.exception_handler(Http404)
@api.exception_handler(Exception)
def _other(request, exc: Exception):
    error = as_api_error(exc)
    if error is not None:
        return _error(request, error.message, error.status)
    logger.exception("API call %s %s failed", request.method, request.path)
    return _error(request, f"Internal error ({type(exc).__name__}); it is logged on the server.", 500)


def _json_refusals(view):
    """Django's own refusals inside the API (a method the route does not take) as JSON."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and "json" not in response.get("Content-Type", ""):
            allowed = response.get("Allow", "")
            refused = JsonResponse(
                {"message": f"{request.method} is not allowed here (allowed: {allowed})."}, status=405
            )
            refused["Allow"] = allowed
            return refused
        return response

    wrapped.csrf_exempt = True  # a token in a header, never a cookie, authorises a call
    wrapped.login_required = False  # LoginRequiredMiddleware: the token is the login
    return wrapped


@never_cache
def _not_found(request, rest: str = ""):
    return JsonResponse({"message": f"No API route {request.path}: see /api/schema/."}, status=404)


_not_found.login_required = False  # type: ignore[attr-defined]
_not_found.csrf_exempt = True  # type: ignore[attr-defined]


def urls():
    """The URL patterns for `path("api/v1/", ...)`: the routes, each a JSON view that the
    login middleware lets through, then a JSON 404 for any other path."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = _json_refusals(pattern.callback)
    patterns.append(re_path(r"^(?P<rest>.*)$", _not_found, name="not_found"))
    return patterns, app_name, namespace


@functools.cache
def _schema_bytes() -> bytes:
    import json

    return json.dumps(api.get_openapi_schema(path_prefix=PREFIX), indent=1).encode()


@require_GET
def schema(request):
    """The OpenAPI 3 schema, for anyone (it says what exists, never what is there)."""
    return HttpResponse(_schema_bytes(), content_type="application/json")


schema.login_required = False  # type: ignore[attr-defined]
