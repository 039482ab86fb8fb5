"""/healthz and /metrics: for load balancers and Prometheus, not people, so no login
(LoginRequiredMiddleware would send them to the login page). /metrics has its own guard
(stacks.metrics.refusal); /healthz tells only ok or a fixed sentence per check."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client.exposition import choose_encoder

from stacks import health, metrics


@login_not_required
@never_cache
@require_GET
def healthz(request):
    healthy, body = health.run_checks()
    return JsonResponse(body, status=200 if healthy else 503)


@login_not_required
@never_cache
@require_GET
def metrics_view(request):
    refused = metrics.refusal(request)
    if refused is not None:
        status, message = refused
        response = HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(metrics.REGISTRY), content_type=content_type)
