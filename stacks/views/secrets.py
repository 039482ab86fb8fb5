"""Secret findings and scans: the findings page across the accounts a person can see (filters,
pages, CSV/JSON export), "Scan now" and its progress.

Reading findings needs a role on the account (outsiders get 404); a finding says where a
secret is and what matched, never the value. Scanning reads the secrets' values in the
worker, so it needs the operator role (`stacks.scans.request_scan` checks again).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from stacks import scans
from stacks.access import accounts_for, get_account_or_404
from stacks.audit import client_ip
from stacks.forms import FindingFilterForm, ScanForm
from stacks.models import Account, Assembly, Role, ScanRun, SecretFinding, Stack, SyncStatus
from stacks.views.common import AuthedRequest, is_partial
from stacks.views.exports import csv_download, json_download
from stacks.views.operations import refusal

# What each `source` filter matches in a finding's `source` text (engine.secrets' labels).
SOURCE_FILTERS = {
    "secretsmanager": Q(source__contains="Secrets Manager secret"),
    "ssm": Q(source__contains="SSM SecureString parameter"),
    "shape": Q(source__contains="credential shape:"),
    "property": Q(source__startswith="property ") | Q(source__contains="; property "),
}
EXPORT_FIELDS = ["account", "stackName", "region", "key", "versionId", "path", "source", "whole"]


def scrub_assemblies(stack: Stack, limit: int = 20) -> list[Assembly]:
    """The stored assemblies a scrub of `stack` can be driven by: those planned on its
    account that hold a stack of that name, newest first."""
    rows = Assembly.objects.filter(plans__account=stack.account).distinct().order_by("-created_at", "-id")[:200]
    return [a for a in rows if stack.stack_name in (a.stack_names or [])][:limit]


def visible_findings(user) -> QuerySet[SecretFinding]:
    return SecretFinding.objects.filter(account__in=accounts_for(user))


def filter_findings(findings: QuerySet[SecretFinding], filters: dict) -> QuerySet[SecretFinding]:
    if account := filters.get("account"):
        findings = findings.filter(account__account_id=account)
    if stack := (filters.get("stack") or "").strip():
        findings = findings.filter(stack_name=stack)
    if region := (filters.get("region") or "").strip():
        findings = findings.filter(region=region)
    if (version := filters.get("version")) == "current":
        findings = findings.filter(version_id__isnull=True)
    elif version == "history":
        findings = findings.filter(version_id__isnull=False)
    if source := filters.get("source"):
        findings = findings.filter(SOURCE_FILTERS[source])
    if key_kind := filters.get("key_kind"):
        findings = findings.filter(key_kind=key_kind)
    return findings.select_related("account").order_by(
        "account__account_id", "stack_name", "region", "key", "version_id", "id"
    )


def finding_json(finding: SecretFinding) -> dict[str, Any]:
    """The CLI's finding shape (`cdkd scrub --dry-run --json`), with `whole` added."""
    return {
        "account": finding.account.account_id,
        "stackName": finding.stack_name or None,
        "region": finding.region or None,
        "key": finding.key,
        "versionId": finding.version_id,
        "path": finding.path,
        "source": finding.source,
        "whole": finding.whole,
    }


def _export(findings: QuerySet[SecretFinding], fmt: str) -> HttpResponse | StreamingHttpResponse:
    if fmt == "csv":
        rows = ({**finding_json(f), "path": f.path_text} for f in findings.iterator(chunk_size=500))
        return csv_download(rows, EXPORT_FIELDS, "cdkd-secret-findings")
    return json_download(
        {"findings": [finding_json(f) for f in findings.iterator(chunk_size=500)]}, "cdkd-secret-findings"
    )


def _links(findings: list[SecretFinding]) -> list[tuple[SecretFinding, Stack | None, str]]:
    """(finding, its mirrored stack or None, the history version URL or "") for one page:
    one query for the stacks, whatever the page holds."""
    wanted = {(f.account_id, f.stack_name, f.region) for f in findings if f.stack_name}
    stacks: dict[tuple, Stack] = {}
    if wanted:
        query = Q()
        for account_id, name, region in wanted:
            query |= Q(account_id=account_id, stack_name=name, region=region or None, legacy=False)
        for stack in (
            Stack.objects.filter(query)
            .select_related("account")
            .only("pk", "account__account_id", "stack_name", "region", "legacy", "key")
        ):
            stacks[(stack.account_id, stack.stack_name, stack.region or "")] = stack
    rows = []
    for f in findings:
        stack = stacks.get((f.account_id, f.stack_name, f.region))
        version_url = ""
        if stack is not None and f.version_id and f.key == stack.key:
            version_url = reverse(
                "stack_version", args=[stack.account.account_id, stack.region_slug, stack.stack_name, f.version_id]
            )
        rows.append((f, stack, version_url))
    return rows


def _active_scans(user) -> list[ScanRun]:
    return list(
        ScanRun.objects.filter(requested_by=user, status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING]).order_by(
            "-created_at"
        )[:5]
    )


@never_cache
@require_GET
def secret_findings(request: AuthedRequest) -> HttpResponse | StreamingHttpResponse:
    user = request.user
    accounts = list(accounts_for(user).order_by("name", "account_id"))
    form = FindingFilterForm(request.GET, accounts=accounts)
    if not form.is_valid():
        context = {"form": form, "page": None, "rows": [], "accounts": []}
        return render(request, "stacks/secrets.html", context, status=400)
    filters = form.cleaned_data
    findings = filter_findings(visible_findings(user), filters)
    if filters["format"]:
        return _export(findings, filters["format"])
    page = Paginator(findings, settings.CDKD_PAGE_SIZE).get_page(filters.get("page"))
    context = {"form": form, "page": page, "rows": _links(list(page.object_list))}
    if is_partial(request):
        return render(request, "stacks/secrets.html#table", context)
    operated = set(accounts_for(user, Role.OPERATOR).values_list("pk", flat=True))
    counts = dict(
        SecretFinding.objects.filter(account__in=[a.pk for a in accounts])
        .values_list("account")
        .annotate(n=Count("pk"))
        .values_list("account", "n")
    )
    # A whole-account scan covers every account in its `account_ids` ("scan every account
    # I operate" has no single account), so look through the recent ones.
    wanted = {a.pk for a in accounts}
    last_scans: dict[int, ScanRun] = {}
    for run in ScanRun.objects.filter(stacks=[], finished_at__isnull=False).order_by("-created_at")[:200]:
        for pk in set(run.account_ids) & wanted:
            last_scans.setdefault(pk, run)
    context.update(
        accounts=[(a, counts.get(a.pk, 0), last_scans.get(a.pk), a.pk in operated) for a in accounts],
        can_scan_any=bool(operated),
        active_scans=_active_scans(user),
    )
    return render(request, "stacks/secrets.html", context)


@require_POST
def scan_start(request: AuthedRequest) -> HttpResponse:
    """Queue a scan of one account, one stack of it, or every account the person operates;
    then show its progress (a polling fragment for htmx, the scan page otherwise)."""
    form = ScanForm(request.POST)
    if not form.is_valid():
        return refusal(request, "Name an account (and a region with a stack) to scan.", 400)
    data = form.cleaned_data
    account: Account | None = None
    if data["account"]:
        account = get_account_or_404(request.user, data["account"])
    stacks = [data["stack"]] if data["stack"] else None
    if stacks and not Stack.objects.filter(account=account, stack_name=data["stack"]).exists():
        raise Http404("No such stack")
    try:
        run = scans.request_scan(
            request.user,
            account,
            stacks,
            region=data["region"] or None,
            history=not data["current_only"],
            client_address=client_ip(request),
        )
    except PermissionDenied as exc:
        return refusal(request, str(exc) or "Not allowed.", 403)
    if is_partial(request):
        return render(request, "stacks/scan.html#progress", {"run": run})
    messages.success(request, f"Queued secret scan #{run.pk} ({run.scope}).")
    return redirect("scan_status", run_id=run.pk)


def _get_run_or_404(request: AuthedRequest, run_id: int) -> ScanRun:
    run = get_object_or_404(ScanRun.objects.select_related("account"), pk=run_id)
    if request.user.is_superuser or run.requested_by_id == request.user.pk:
        return run
    visible = set(accounts_for(request.user).values_list("pk", flat=True))
    if not run.account_ids or not set(run.account_ids) <= visible:
        raise Http404("No such scan")
    return run


@never_cache
@require_GET
def scan_status(request: AuthedRequest, run_id: int) -> HttpResponse:
    run = _get_run_or_404(request, run_id)
    if is_partial(request):
        response = render(request, "stacks/scan.html#progress", {"run": run})
        if run.finished:
            return HttpResponseStopPolling(response.content)
        return response
    return render(request, "stacks/scan.html", {"run": run})
