"""Check a stack's drift now, from its Resources tab: a queued read (stacks.drift.request_check),
one live check per stack; the panel shows the result once the worker has stored it."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from redis.exceptions import RedisError

from engine.operations import OperationRefused
from stacks import drift
from stacks.access import get_stack_or_404
from stacks.audit import client_ip
from stacks.views.common import AuthedRequest
from stacks.views.operations import refusal


@require_POST
def stack_drift_check(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    try:
        queued = drift.request_check(request.user, stack, client_address=client_ip(request))
    except PermissionDenied as exc:
        return refusal(request, str(exc), 403)
    except OperationRefused as exc:
        return refusal(request, str(exc), 409, title=f"Drift cannot be checked on {stack.stack_name}")
    except RedisError:
        return refusal(request, "The job queue (Redis) cannot be reached: nothing was queued. Try again later.", 503)
    if queued:
        messages.success(request, f"Drift check of {stack.stack_name} queued: its result appears in the Drift panel.")
    else:
        messages.info(request, f"A drift check of {stack.stack_name} is already queued or running.")
    return redirect("stack_resources", account_id, region_slug, stack_name)
