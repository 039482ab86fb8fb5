"""What every stack-browser view shares: the typed request and the engine-error page."""

from __future__ import annotations

import logging

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from engine.errors import EngineError, NotFound
from stacks.models import Stack

logger = logging.getLogger(__name__)


class AuthedRequest(HttpRequest):
    """LoginRequiredMiddleware guarantees an authenticated user; HtmxMiddleware adds htmx."""

    user: User
    htmx: HtmxDetails


def is_partial(request: AuthedRequest) -> bool:
    """An htmx request for a fragment (a boosted request wants the whole page)."""
    return bool(request.htmx) and not request.htmx.boosted


def actor(request: AuthedRequest) -> str:
    """Who acts on AWS, for the role session name."""
    return f"web-{request.user.get_username()}"


def engine_error(request: AuthedRequest, stack: Stack, exc: EngineError, *, doing: str) -> HttpResponse:
    """The engine's one-line message on a page: 404 for a key or version that does not
    exist, 502 for everything AWS refused or failed (a denied bucket is not the viewer's
    fault, so never 403)."""
    status = 404 if isinstance(exc, NotFound) else 502
    logger.info("%s failed for %s in %s: %s", doing, stack.key, stack.account.account_id, exc)
    context = {"stack": stack, "message": str(exc), "doing": doing, "kind": type(exc).__name__}
    return render(request, "stacks/engine_error.html", context, status=status)
