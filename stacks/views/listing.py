"""The stacks table (and its tree view), the accounts page and on-demand sync.

Every query starts from `stacks.access` so a person sees only the accounts they hold a role
on. The number of SQL queries does not depend on the number of stacks: the lock state is an
annotation, account and lock come in with `select_related`, and the resource search is an
`Exists()` subquery (a join would repeat a stack once per matching resource).
"""

from __future__ import annotations

from collections import defaultdict
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import (
    Case,
    CharField,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from stacks import sync
from stacks.access import accounts_for, get_account_or_404, stacks_for
from stacks.forms import StackFilterForm, SyncForm
from stacks.models import (
    Account,
    DeploymentRun,
    LockState,
    Membership,
    Resource,
    Role,
    SecretFinding,
    Stack,
    SyncRun,
    SyncStatus,
    now_ms,
)
from stacks.views.common import AuthedRequest, is_partial


def lock_state_expr(at_ms: int) -> Case:
    """`Lock.state()` as SQL, so the table can show and filter it without a query per row."""
    return Case(
        When(lock__isnull=True, then=Value(LockState.NONE)),
        When(lock__readable=False, then=Value(LockState.UNREADABLE)),
        When(Q(lock__expires_at_ms__isnull=True) | Q(lock__expires_at_ms__lte=at_ms), then=Value(LockState.EXPIRED)),
        default=Value(LockState.LIVE),
        output_field=CharField(),
    )


# The table's sortable columns: `?sort=<key>` (or `-<key>` for descending) -> ORDER BY.
# A whitelist: anything else sorts by name. Every order ends on the unique triple so pages
# never overlap.
SORTS = {
    "account": ("account__name", "account__account_id"),
    "name": ("stack_name",),
    "region": ("region",),
    "version": ("schema_version",),
    "resources": ("resource_count",),
    "lock": ("lock_state",),
    "defects": ("has_defects",),
    "modified": ("record_last_modified",),
    "run": ("last_run_at",),
    "secrets": ("secret_count",),
}
_TIEBREAK = ("stack_name", "region", "account__account_id")


def sort_key(raw: str | None) -> str:
    """The valid sort key of `?sort=`, or "name"."""
    raw = (raw or "").strip()
    return raw if raw.lstrip("-") in SORTS else "name"


def _order(sort: str) -> list:
    desc = sort.startswith("-")
    order = []
    for field in SORTS[sort.lstrip("-")]:
        expr = F(field)
        order.append(expr.desc(nulls_last=True) if desc else expr.asc(nulls_last=True))
    return order + [F(f).asc(nulls_last=True) for f in _TIEBREAK if f not in SORTS[sort.lstrip("-")]]


def with_status(stacks: QuerySet[Stack]) -> QuerySet[Stack]:
    """Last run (id, command, result, time) and open secret findings, as subqueries of the
    same SELECT: the status column costs no query per row."""
    runs = DeploymentRun.objects.filter(
        account=OuterRef("account"), stack_name=OuterRef("stack_name"), region=OuterRef("region")
    ).order_by(F("run_at").desc(nulls_last=True), "-run_id")
    findings = (
        SecretFinding.objects.filter(
            account=OuterRef("account"),
            stack_name=OuterRef("stack_name"),
            region=Coalesce(OuterRef("region"), Value("")),
        )
        .order_by()
        .values("account")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return stacks.annotate(
        last_run_id=Subquery(runs.values("run_id")[:1]),
        last_run_command=Subquery(runs.values("command")[:1]),
        last_run_result=Subquery(runs.values("result")[:1]),
        last_run_at=Subquery(runs.values("run_at")[:1]),
        secret_count=Coalesce(Subquery(findings, output_field=IntegerField()), Value(0)),
    )


def filter_stacks(stacks: QuerySet[Stack], filters: dict, at_ms: int, sort: str = "name") -> QuerySet[Stack]:
    """Apply the stacks page's search and filters to an already access-checked queryset."""
    stacks = stacks.select_related("account", "lock").annotate(lock_state=lock_state_expr(at_ms))
    stacks = with_status(stacks)
    if q := (filters.get("q") or "").strip():
        matching = Resource.objects.filter(stack=OuterRef("pk")).filter(
            Q(logical_id__icontains=q) | Q(physical_id__icontains=q)
        )
        stacks = stacks.filter(Q(stack_name__icontains=q) | Exists(matching))
    if account := filters.get("account"):
        stacks = stacks.filter(account__account_id=account)
    if region := filters.get("region"):
        stacks = stacks.filter(legacy=True) if region == "legacy" else stacks.filter(region=region)
    if lock := filters.get("lock"):
        stacks = stacks.filter(lock_state=lock)
    if defects := filters.get("defects"):
        stacks = stacks.filter(has_defects=defects == "yes")
    if version := filters.get("version"):
        stacks = stacks.filter(schema_version=int(version))
    if nesting := filters.get("nesting"):
        stacks = stacks.filter(depth__gt=0) if nesting == "nested" else stacks.filter(depth=0)
    return stacks.order_by(*_order(sort_key(sort)))


def account_cards(user) -> list[Account]:
    """The accounts header of the stacks page (also sent out of band when a sync ends), each
    with the person's role there and whether a group rule gave it (`stacks.grouproles`)."""
    cards = list(
        accounts_for(user)
        .annotate(
            stack_count=Count("stacks", distinct=True),
            defect_count=Count("stacks", filter=Q(stacks__has_defects=True), distinct=True),
        )
        .order_by("name", "account_id")
    )
    rows = {m.account_id: m for m in Membership.objects.filter(user=user)}
    for card in cards:
        row = rows.get(card.pk)
        card.your_role = row.get_role_display() if row else ("Admin (superuser)" if user.is_superuser else "")
        card.role_by_rule = bool(row and row.rule_role == row.role and row.manual_role != row.role)
    return cards


def describe_sync(run: SyncRun | None) -> SyncRun | None:
    """What the progress card says: while running, the GETs done of those to do; at the end,
    the records listed, downloaded and unchanged summed over the accounts (a sync in which
    nothing changed downloads nothing, so `done` alone would read "0 records")."""
    if run is None:
        return None
    accounts = run.result.get("accounts", []) if isinstance(run.result, dict) else []

    def total(name: str) -> int:
        return sum(a[name] for a in accounts if isinstance(a, dict) and isinstance(a.get(name), int))

    run.listed, run.fetched, run.unchanged, run.removed = (
        total(n) for n in ("listed", "fetched", "unchanged", "removed")
    )
    return run


def _no_role(request: AuthedRequest) -> HttpResponse | None:
    """A person with no role anywhere gets a page that says so (and no Sync button)."""
    if request.user.is_superuser or accounts_for(request.user).exists():
        return None
    return render(request, "stacks/no_role.html", status=200)


def _page_context(request: AuthedRequest) -> dict:
    """The parts the list and the tree share: filter form, account header, active sync."""
    user = request.user
    accounts = account_cards(user)
    visible = stacks_for(user)
    regions = visible.exclude(region=None).order_by("region").values_list("region", flat=True).distinct()
    versions = (
        visible.exclude(schema_version=None)
        .order_by("schema_version")
        .values_list("schema_version", flat=True)
        .distinct()
    )
    form = StackFilterForm(request.GET, accounts=accounts, regions=list(regions), versions=list(versions))
    form.is_valid()
    active_sync = (
        SyncRun.objects.filter(requested_by=user, status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING])
        .order_by("-created_at")
        .first()
    )
    describe_sync(active_sync)
    sort = sort_key(request.GET.get("sort"))
    return {
        "form": form,
        "accounts": accounts,
        "active_sync": active_sync,
        "sync_form": SyncForm(),
        "sort": sort,
        # The search cannot run (too long): say so and list nothing, rather than everything.
        "search_error": _search_error(form),
        "headers": sort_headers(request, sort),
    }


COLUMNS = [
    ("account", "Account", ""),
    ("name", "Stack", ""),
    ("region", "Region", ""),
    ("version", "Version", "num"),
    ("resources", "Resources", "num"),
    ("run", "Last run", ""),
    ("lock", "Lock", ""),
    ("defects", "Defects", ""),
    ("secrets", "Secrets", ""),
    ("modified", "Last modified", ""),
]


def sort_headers(request: AuthedRequest, sort: str) -> list[dict]:
    """Each column's header: a link that sorts by it (again: the other way round)."""
    base = _without(request.GET, "sort", "page")
    headers = []
    for key, label, css in COLUMNS:
        current = sort.lstrip("-") == key
        target = f"-{key}" if current and not sort.startswith("-") else key
        query = f"{base}&sort={target}" if base else f"sort={target}"
        aria = ("descending" if sort.startswith("-") else "ascending") if current else ""
        headers.append({"key": key, "label": label, "css": css, "url": f"?{query}", "aria": aria})
    return headers


def _search_error(form: StackFilterForm) -> str:
    if "q" not in form.errors:
        return ""
    limit = form.fields["q"].max_length
    length = len(form.data.get("q", ""))
    return f"The search is {length} characters long; it can be at most {limit}. Shorten it to search."


def _without(params, *names: str) -> str:
    kept = params.copy()
    for name in names:
        kept.pop(name, None)
    return kept.urlencode()


@require_GET
def stack_list(request: AuthedRequest) -> HttpResponse:
    if request.GET.get("view") == "tree":
        return stack_tree(request)
    if (no_role := _no_role(request)) is not None:
        return no_role
    context = _page_context(request)
    stacks = filter_stacks(stacks_for(request.user), context["form"].filters(), now_ms(), context["sort"])
    if context["search_error"]:
        stacks = stacks.none()
    context["page"] = Paginator(stacks, settings.CDKD_PAGE_SIZE).get_page(request.GET.get("page"))
    context["tree"] = False
    template = "stacks/list.html#table" if is_partial(request) else "stacks/list.html"
    return render(request, template, context)


def _tree_rows(roots: list[Stack], descendants: list[Stack]) -> list[tuple[Stack, int]]:
    """(stack, indent) in pre-order: each page root followed by its nested children."""
    children: dict[int, list[Stack]] = defaultdict(list)
    for stack in descendants:
        children[stack.parent_id].append(stack)
    rows: list[tuple[Stack, int]] = []
    seen: set[int] = set()

    def visit(stack: Stack, indent: int) -> None:
        if stack.pk in seen:  # a damaged parent chain must not loop
            return
        seen.add(stack.pk)
        rows.append((stack, indent))
        for child in children.get(stack.pk, []):
            visit(child, indent + 1)

    for root in roots:
        visit(root, 0)
    return rows


@require_GET
def stack_tree(request: AuthedRequest) -> HttpResponse:
    """Top-level stacks (and children whose parent record is gone), a page at a time, each
    with every nested stack below it. Filters choose the roots."""
    if (no_role := _no_role(request)) is not None:
        return no_role
    context = _page_context(request)
    at_ms = now_ms()
    filters = {k: v for k, v in context["form"].filters().items() if k != "nesting"}
    roots = filter_stacks(stacks_for(request.user), filters, at_ms, context["sort"]).filter(parent__isnull=True)
    if context["search_error"]:
        roots = roots.none()
    page = Paginator(roots, settings.CDKD_PAGE_SIZE).get_page(request.GET.get("page"))
    page_roots = list(page.object_list)
    descendants = list(
        filter_stacks(stacks_for(request.user), {}, at_ms).filter(
            parent__isnull=False,
            account_id__in={s.account_id for s in page_roots},
            root_name__in={s.root_name for s in page_roots},
        )
    )
    context.update(page=page, tree=True, tree_rows=_tree_rows(page_roots, descendants))
    template = "stacks/list.html#table" if is_partial(request) else "stacks/list.html"
    return render(request, template, context)


@require_GET
def account_list(request: AuthedRequest) -> HttpResponse:
    at_ms = now_ms()
    accounts = (
        accounts_for(request.user)
        .annotate(
            stack_count=Count("stacks", distinct=True),
            nested_count=Count("stacks", filter=Q(stacks__depth__gt=0), distinct=True),
            defect_count=Count("stacks", filter=Q(stacks__has_defects=True), distinct=True),
            legacy_count=Count("stacks", filter=Q(stacks__legacy=True), distinct=True),
            live_lock_count=Count(
                "locks", filter=Q(locks__readable=True, locks__expires_at_ms__gt=at_ms), distinct=True
            ),
        )
        .order_by("name", "account_id")
    )
    administered = set(accounts_for(request.user, Role.ADMIN).values_list("pk", flat=True))
    context = {"accounts": accounts, "sync_form": SyncForm(), "administered": administered}
    return render(request, "stacks/accounts.html", context)


@require_POST
def sync_start(request: AuthedRequest) -> HttpResponse:
    """Queue a sync of one account or of every account the person sees, then show its
    progress (a polling fragment for htmx, the sync page otherwise)."""
    if not request.user.is_superuser and not accounts_for(request.user).exists():
        return render(request, "stacks/no_role.html", {"refused": True}, status=403)
    form = SyncForm(request.POST)
    if not form.is_valid():
        raise Http404("No such account")
    account: Account | None = None
    if form.cleaned_data["account"]:
        account = get_account_or_404(request.user, form.cleaned_data["account"])
    try:
        run = sync.request_sync(request.user, account=account)
    except PermissionDenied:
        raise Http404("No such account") from None
    if is_partial(request):
        return render(request, "stacks/sync.html#progress", {"run": describe_sync(run)})
    return redirect("sync_status", run_id=run.pk)


def _get_run_or_404(request: AuthedRequest, run_id: int) -> SyncRun:
    run = get_object_or_404(SyncRun.objects.select_related("account"), pk=run_id)
    if run.account is not None:
        get_account_or_404(request.user, run.account.account_id)
    elif not (request.user.is_superuser or run.requested_by_id == request.user.pk):
        # A sync of every account reports on accounts this person may not see.
        raise Http404("No such sync")
    return run


@never_cache
@require_GET
def sync_status(request: AuthedRequest, run_id: int) -> HttpResponse:
    run = describe_sync(_get_run_or_404(request, run_id))
    if is_partial(request):
        response = render(request, "stacks/sync.html#progress", {"run": run})
        if run.finished:
            # On the stacks page the account cards come along out of band, and the table
            # reloads on the `sync-finished` event: the page is current without a reload.
            content = response.content
            if urlsplit(request.htmx.current_url or "").path.startswith(reverse("stacks")):
                context = {"accounts": account_cards(request.user), "oob": True}
                content += render(request, "stacks/list.html#accounts-summary", context).content
            stopped = HttpResponseStopPolling(content)
            stopped["HX-Trigger"] = "sync-finished"
            return stopped
        return response
    return render(request, "stacks/sync.html", {"run": run})
