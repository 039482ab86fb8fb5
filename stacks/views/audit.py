"""The audit log: events on the accounts a person can see (events tied to no account only
for superusers), filtered by account, person, action, stack and time, a page at a time or
exported whole as CSV or JSON (`audit_json`, the shape `manage.py cdkd audit --json` prints).
An account's admin can check its hash chain from here."""

from __future__ import annotations

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from stacks import audit
from stacks.access import accounts_for, has_role
from stacks.forms import AuditFilterForm
from stacks.management.commands.cdkd import audit_json
from stacks.models import AuditEvent, Role
from stacks.views.common import AuthedRequest, is_partial
from stacks.views.exports import csv_download, json_download
from stacks.views.operations import refusal

# The columns of the CSV export: the keys of `audit_json`, in its order.
EXPORT_FIELDS = [
    "id",
    "at",
    "actor",
    "action",
    "account",
    "stack",
    "region",
    "operation",
    "operationKind",
    "planDigest",
    "etagBefore",
    "etagAfter",
    "result",
    "error",
    "clientAddress",
    "prevHash",
    "hash",
]


def visible_events(user) -> QuerySet[AuditEvent]:
    if user.is_superuser:
        return AuditEvent.objects.all()
    return AuditEvent.objects.filter(account__in=accounts_for(user))


def filter_events(events: QuerySet[AuditEvent], filters: dict) -> QuerySet[AuditEvent]:
    if account := filters.get("account"):
        events = events.filter(account_ref=account)
    if actor := (filters.get("actor") or "").strip():
        events = events.filter(actor__iexact=actor)
    if action := (filters.get("action") or "").strip():
        events = events.filter(action__istartswith=action)
    if stack := (filters.get("stack") or "").strip():
        events = events.filter(stack_name__icontains=stack)
    if since := filters.get("since"):
        events = events.filter(created_at__gte=since)
    if until := filters.get("until"):
        events = events.filter(created_at__lte=until)
    return events.order_by("-id")


def _export(events: QuerySet[AuditEvent], fmt: str) -> HttpResponse | StreamingHttpResponse:
    rows = (audit_json(e) for e in events.iterator(chunk_size=500))
    if fmt == "csv":
        return csv_download(rows, EXPORT_FIELDS, "cdkd-audit")
    return json_download(list(rows), "cdkd-audit")


@never_cache
@require_GET
def audit_log(request: AuthedRequest) -> HttpResponse | StreamingHttpResponse:
    user = request.user
    accounts = list(accounts_for(user).order_by("name", "account_id"))
    form = AuditFilterForm(request.GET, accounts=accounts)
    if not form.is_valid():
        context = {"form": form, "page": None, "actions": []}
        return render(request, "stacks/audit.html", context, status=400)
    filters = form.cleaned_data
    events = filter_events(visible_events(user), filters)
    if filters["format"]:
        return _export(events, filters["format"])

    chain = None
    if ref := filters.get("verify"):
        account = next((a for a in accounts if a.account_id == ref), None)
        if account is None:  # as everywhere: an account without a role on it does not exist here
            raise Http404("No such account")
        if not has_role(user, account, Role.ADMIN):
            return refusal(request, "Only an admin of the account can verify its audit chain.", 403)
        checked, problems = audit.verify(ref)
        chain = {"account": account, "checked": checked, "problems": problems}

    page = Paginator(events, settings.CDKD_PAGE_SIZE).get_page(filters.get("page"))
    context = {
        "form": form,
        "page": page,
        "chain": chain,
        "actions": visible_events(user).order_by("action").values_list("action", flat=True).distinct(),
        "admin_accounts": accounts_for(user, Role.ADMIN).order_by("name", "account_id"),
    }
    template = "stacks/audit.html#table" if is_partial(request) else "stacks/audit.html"
    return render(request, template, context)
