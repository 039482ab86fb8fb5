"""The event history mirrored from every account's `deployments/` store: a timeline of runs
across the accounts a person can see (filtered, paginated, exported as CSV or JSON), and
one run's events in order, linked to the operation and audit entries that caused it.

Outsiders get a 404 for a run of an account they hold no role on, and never see its runs
listed. The number of queries does not depend on the number of runs or events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from engine.masking import mask_text
from stacks.access import accounts_for, get_account_or_404
from stacks.forms import EventFilterForm
from stacks.models import AuditEvent, DeploymentEvent, DeploymentRun, Stack
from stacks.views.common import AuthedRequest, is_partial
from stacks.views.exports import csv_download, json_download

# The columns of the timeline's CSV export: the keys of `run_json`, in its order.
RUN_EXPORT_FIELDS = [
    "account",
    "stackName",
    "region",
    "runId",
    "command",
    "cdkdVersion",
    "startedAt",
    "finishedAt",
    "result",
    "eventCount",
    "inIndex",
    "hasStream",
    "operation",
    "person",
]
EVENT_EXPORT_FIELDS = [
    "timestamp",
    "eventType",
    "stackName",
    "logicalId",
    "resourceType",
    "physicalId",
    "operation",
    "provisionedBy",
    "durationMs",
    "result",
    "reason",
    "error",
    "counts",
]

BADGES = {
    "RUN_STARTED": "info",
    "RUN_FINISHED": "info",
    "RESOURCE_STARTED": "none",
    "RESOURCE_SUCCEEDED": "ok",
    "RESOURCE_FAILED": "defect",
    "RESOURCE_RETAINED": "warn",
    "RESOURCE_SKIPPED": "warn",
    "ROLLBACK_STARTED": "warn",
    "ROLLBACK_RESOURCE_SUCCEEDED": "warn",
    "ROLLBACK_RESOURCE_FAILED": "defect",
    "ROLLBACK_FINISHED": "warn",
}
RESULT_BADGES = {"SUCCEEDED": "ok", "FAILED": "defect", "UNKNOWN": "warn"}


def visible_runs(user) -> QuerySet[DeploymentRun]:
    return DeploymentRun.objects.filter(account__in=accounts_for(user))


def filter_runs(runs: QuerySet[DeploymentRun], filters: dict) -> QuerySet[DeploymentRun]:
    if account := filters.get("account"):
        runs = runs.filter(account__account_id=account)
    if stack := (filters.get("stack") or "").strip():
        runs = runs.filter(stack_name__icontains=stack)
    if region := filters.get("region"):
        runs = runs.filter(region=region)
    if command := filters.get("command"):
        runs = runs.filter(command=command)
    if result := filters.get("result"):
        runs = runs.filter(result=result)
    if event_type := filters.get("event_type"):
        runs = runs.filter(Exists(DeploymentEvent.objects.filter(run=OuterRef("pk"), event_type=event_type)))
    if person := (filters.get("person") or "").strip():
        runs = runs.filter(
            Q(operation__requester_name__iexact=person) | Q(operation__requested_by__username__iexact=person)
        )
    if since := filters.get("since"):
        runs = runs.filter(run_at__gte=since)
    if until := filters.get("until"):
        runs = runs.filter(run_at__lte=until)
    return runs.select_related("account", "operation").order_by(F("run_at").desc(nulls_last=True), "-run_id", "pk")


def run_url(run: DeploymentRun) -> str:
    return reverse("event_run", args=[run.account.account_id, run.region, run.stack_name, run.run_id])


def run_json(run: DeploymentRun) -> dict[str, Any]:
    """One timeline row: where the run is, cdkd's `DeploymentRunSummary`, and what caused it."""
    return {
        "account": run.account.account_id,
        "stackName": run.stack_name,
        "region": run.region,
        **run.as_summary(),
        "inIndex": run.in_index,
        "hasStream": run.has_stream,
        "operation": run.operation_id,
        "person": run.operation.requester_name if run.operation else None,
    }


def _download(rows: Iterator[dict[str, Any]], fmt: str, fields: list[str], filename: str):
    if fmt == "csv":
        return csv_download(rows, fields, filename)
    return json_download(list(rows), filename)


@never_cache
@require_GET
def event_timeline(request: AuthedRequest) -> HttpResponse | StreamingHttpResponse:
    user = request.user
    accounts = list(accounts_for(user).order_by("name", "account_id"))
    visible = visible_runs(user)
    regions = list(visible.order_by("region").values_list("region", flat=True).distinct())
    form = EventFilterForm(request.GET, accounts=accounts, regions=regions)
    if not form.is_valid():
        return render(request, "stacks/events.html", {"form": form, "page": None}, status=400)
    filters = form.cleaned_data
    runs = filter_runs(visible, filters)
    if filters["format"]:
        rows = (run_json(run) for run in runs.iterator(chunk_size=500))
        return _download(rows, filters["format"], RUN_EXPORT_FIELDS, "cdkd-runs")
    # Whether the run's stack still has a record, so its name links to the stack page.
    records = Stack.objects.filter(
        account=OuterRef("account"), stack_name=OuterRef("stack_name"), region=OuterRef("region"), legacy=False
    )
    runs = runs.annotate(has_record=Exists(records))
    page = Paginator(runs, settings.CDKD_PAGE_SIZE).get_page(filters.get("page"))
    for run in page.object_list:
        run.badge = RESULT_BADGES.get(run.result, "none")
    context = {"form": form, "page": page}
    template = "stacks/events.html#table" if is_partial(request) else "stacks/events.html"
    return render(request, template, context)


def masked_event(raw: Any) -> Any:
    """A stored event with credential shapes masked out of its free text (`reason`,
    `error.message`): cdkd's own writer masks only the secret values it knew, and older
    writers nothing (reference §12)."""
    if not isinstance(raw, dict):
        return raw
    out = dict(raw)
    if isinstance(out.get("reason"), str):
        out["reason"] = mask_text(out["reason"])
    if isinstance(out.get("error"), dict) and isinstance(out["error"].get("message"), str):
        out["error"] = {**out["error"], "message": mask_text(out["error"]["message"])}
    return out


def _event_view(event: DeploymentEvent) -> DeploymentEvent:
    event.badge = BADGES.get(event.event_type, "none")
    event.reason = mask_text(event.reason)
    event.message = mask_text(event.error_message)
    counts = event.counts if isinstance(event.counts, dict) else None
    if counts:

        def n(name: str) -> int:
            value = counts.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        text = f"+{n('created')} ~{n('updated')} -{n('deleted')}"
        if n("failed"):
            text += f" !{n('failed')}"
        if n("skipped"):
            text += f" ⚠{n('skipped')}"
        event.counts_text = text
    return event


@never_cache
@require_GET
def event_run(
    request: AuthedRequest, account_id: str, region: str, stack_name: str, run_id: str
) -> HttpResponse | StreamingHttpResponse:
    account = get_account_or_404(request.user, account_id)
    run = (
        DeploymentRun.objects.filter(account=account, stack_name=stack_name, region=region, run_id=run_id)
        .select_related("account", "operation", "operation__requested_by")
        .first()
    )
    if run is None:
        raise Http404("No such run")
    fmt = request.GET.get("format")
    if fmt in ("csv", "json"):
        raws = (masked_event(e.raw) for e in run.events.order_by("seq").only("raw").iterator(chunk_size=1000))
        if fmt == "json":  # the shape `cdkd events --run --json` prints
            return _download(raws, "json", [], f"{run.stack_name}-{run.run_id}")
        return _download(raws, "csv", EVENT_EXPORT_FIELDS, f"{run.stack_name}-{run.run_id}")
    events = [_event_view(e) for e in run.events.order_by("seq")]
    audit = list(AuditEvent.objects.filter(operation=run.operation_id).order_by("id")) if run.operation_id else []
    stack = Stack.objects.filter(account=account, stack_name=stack_name, region=region, legacy=False).first()
    # A nested child's events carry its name: link those that have a record (one query).
    children = {e.stack_name for e in events if e.stack_name and e.stack_name != run.stack_name}
    linked = set(
        Stack.objects.filter(account=account, region=region, legacy=False, stack_name__in=children).values_list(
            "stack_name", flat=True
        )
    )
    for e in events:
        e.child_has_record = e.stack_name in linked
    context = {
        "run": run,
        "run_badge": RESULT_BADGES.get(run.result, "none"),
        "events": events,
        "audit": audit,
        "stack": stack,
    }
    return render(request, "stacks/event_run.html", context)


def stack_runs(stack: Stack, limit: int = 5) -> list[DeploymentRun]:
    """The stack's newest runs, for the stack page (one query)."""
    if stack.legacy or not stack.region:
        return []
    runs = list(
        DeploymentRun.objects.filter(account=stack.account_id, stack_name=stack.stack_name, region=stack.region)
        .select_related("account")
        .order_by(F("run_at").desc(nulls_last=True), "-run_id")[:limit]
    )
    for run in runs:
        run.badge = RESULT_BADGES.get(run.result, "none")
    return runs
