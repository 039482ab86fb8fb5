"""One stack: its record read once from the mirror, its lock, its resources (paginated),
the stored JSON pretty-printed and as a download, and one resource's sections.

Records are untrusted and may be huge: the resource table is paginated, outputs are shown
up to a bound, the inline JSON view is cut at JSON_INLINE_BYTES (the download is offered
for the rest), and a page is encoded so that a lone surrogate in a record (legal JSON, not
UTF-8) shows as a visible `\\udXXX` escape instead of failing the response."""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_POST

from engine.errors import EngineError
from engine.schema import ParsedRecord, parse_state
from stacks import actions, audit, console, history, lockcard
from stacks.access import get_stack_or_404, has_role
from stacks.columns import utf8_safe
from stacks.forms import ResourceFilterForm
from stacks.models import EventIndex, Lock, OperationKind, Role, SecretFinding, Stack, now_ms
from stacks.secretmask import masked_body, may_reveal
from stacks.views import present
from stacks.views.common import AuthedRequest, actor, engine_error, is_partial
from stacks.views.events import stack_runs

# The inline JSON view shows at most this many bytes of the record; the download has all.
JSON_INLINE_BYTES = 1024 * 1024
# The outputs table shows at most this many rows (a record may hold thousands).
OUTPUTS_SHOWN = 500
# Defects only a sync can know (the record was not downloaded or not stored): the page
# shows them as stored, since the mirror holds no body to parse.
SYNC_DEFECTS = frozenset({"too-large", "not-mirrored"})


def render(request, template: str, context: dict, status: int = 200) -> HttpResponse:
    """`django.shortcuts.render`, but a string that is not UTF-8 (a lone surrogate from a
    record's `\\ud800`) is written as its escape rather than ending in a server error."""
    text = render_to_string(template, context, request)
    return HttpResponse(
        text.encode("utf-8", "backslashreplace"), status=status, content_type="text/html; charset=utf-8"
    )


def stack_warnings(stack: Stack, parsed: ParsedRecord) -> list[present.RecordWarning]:
    """The record's warnings; for a row the sync could not fill, the defect it stored."""
    stored = [d for d in stack.defects or [] if isinstance(d, dict) and d.get("code") in SYNC_DEFECTS]
    if stored and not bytes(stack.body):
        return [
            present.RecordWarning(str(d.get("message", "")), str(d["code"]), str(d.get("path", ""))) for d in stored
        ]
    return present.record_warnings(stack, parsed)


def parse_stack(stack: Stack) -> ParsedRecord:
    """The mirrored body, parsed, masked for display (`stacks.secretmask`: detectors and
    what the secret scan flagged). A legacy key names no region, so only the key's region
    counts."""
    return parse_state(
        masked_body(stack, bytes(stack.body)),
        key_region=None if stack.legacy else stack.region,
        stack_name=stack.stack_name,  # fills in the repair commands of its messages
        account=stack.account.account_id,
    )


def load_stack(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> Stack:
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    stack.account  # noqa: B018 - one query now rather than one per use below
    return stack


TABS = [
    ("overview", "Overview", "stack"),
    ("resources", "Resources", "stack_resources"),
    ("outputs", "Outputs", "stack_outputs"),
    ("events", "Events", "stack_events"),
    ("history", "History", "stack_history"),
]
# The Events tab lists this many of the stack's newest runs (the timeline has them all).
RUNS_SHOWN = 20


def tab_context(request: AuthedRequest, stack: Stack, tab: str) -> tuple[dict, Lock | None]:
    """What every tab of the stack page needs (the tab bar, the lock, the parsed record),
    and the stack's Lock row."""
    args = [stack.account.account_id, stack.region_slug, stack.stack_name]
    lock_row = Lock.objects.filter(stack=stack).first()
    context = {
        "stack": stack,
        "parsed": parse_stack(stack),
        "tab": tab,
        "tabs": [{"key": k, "label": label, "url": reverse(name, args=args)} for k, label, name in TABS],
        "tab_url": reverse(dict((k, n) for k, _l, n in TABS)[tab], args=args),
        "lock": present.lock_view(lock_row, now_ms()),
        "can_operate": has_role(request.user, stack.account, Role.OPERATOR),
        "deploy_why_not": actions.why_not(stack, OperationKind.DEPLOY, lock=lock_row, lock_known=True),
    }
    return context, lock_row


def render_tab(request: AuthedRequest, stack: Stack, context: dict, status: int = 200) -> HttpResponse:
    """Just the tab (`#stack-tab`, the `tab` partial and its tab's own partial) for htmx;
    the whole stack page around it otherwise (a direct load, a link without JavaScript)."""
    if is_partial(request) and request.htmx.target == "stack-tab":
        return render(request, "stacks/stack.html#tab", context, status)
    context.update(warnings=stack_warnings(stack, context["parsed"]), secrets=secret_counts(stack))
    return render(request, "stacks/stack.html", context, status)


@require_GET
def stack_detail(
    request: AuthedRequest, account_id: str, region_slug: str, stack_name: str, tab: str = "overview"
) -> HttpResponse:
    """The stack page, one tab at a time: each tab has its own URL (a full page without
    JavaScript) and answers htmx with just the tab (`#stack-tab`) or, for the resource
    filter and pages, just the table (`#resources`). Only the tab's own data is read.
    History is `stacks.views.history.stack_history`, on the same frame."""
    stack = load_stack(request, account_id, region_slug, stack_name)
    if tab == "overview" and ("page" in request.GET or "q" in request.GET):
        # A link from before the tabs (`?page=3#res-X`, `?q=`): the resources are a tab now.
        args = [stack.account.account_id, stack.region_slug, stack.stack_name]
        return redirect(reverse("stack_resources", args=args) + "?" + request.GET.urlencode())
    context, lock_row = tab_context(request, stack, tab)
    parsed = context["parsed"]
    if tab == "resources":
        form = ResourceFilterForm(request.GET)
        query = form.cleaned_data.get("q", "") if form.is_valid() else ""
        rows, page_of = present.resource_rows(parsed, query)
        page = Paginator(rows, present.RESOURCES_PER_PAGE).get_page(request.GET.get("page"))
        raw = present.raw_resources(parsed)
        page_rows = [present.resource_row(lid, row, raw.get(lid), page_of) for lid, row in page.object_list]
        for row in page_rows:
            # A URL holds UTF-8 only: a lone surrogate in a logical id is linked as U+FFFD.
            row.url_id = utf8_safe(row.logical_id)
            row.console_url = console.console_url(row.resource_type, row.physical_id, stack.region)
        context.update(
            form=form,
            page=page,
            rows=page_rows,
            total_rows=len(page_of),
            inline_details=len(page_of) <= present.INLINE_DETAILS_UP_TO,
            orphans=[entry.model_dump() for entry in parsed.orphans()],
        )
        if is_partial(request) and request.htmx.target == "resources":
            return render(request, "stacks/stack.html#resources", context)
    elif tab == "outputs":
        outputs = present.output_rows(parsed)
        context.update(
            outputs=outputs[:OUTPUTS_SHOWN],
            output_total=len(outputs),
            export_names=parsed.export_names(),
            imports=[entry.model_dump() for entry in parsed.imports()],
            output_reads=[entry.model_dump() for entry in parsed.output_reads()],
            skipped_outputs=parsed.skipped_outputs(),
        )
    elif tab == "events":
        runs = stack_runs(stack, RUNS_SHOWN)
        context.update(runs=runs, index_error=_event_index_error(stack, runs))
    else:
        runs = stack_runs(stack, 1)
        context.update(
            parent=stack.parent,
            children=stack.children.select_related("account").order_by("stack_name", "region"),
            last_run=runs[0] if runs else None,
            lock_card=_lock_card(stack, lock_row, runs[0] if runs else None),
            journal=present.journal_notice(stack, context["lock"], now_ms()),
        )
    return render_tab(request, stack, context)


def _ms(value) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


def _lock_card(stack: Stack, lock: Lock | None, run) -> lockcard.Verdict | None:
    """The evidence before a force-unlock, from the mirror only (one query, for the run's
    newest event; no bucket read; the journal as the last sync listed it)."""
    if lock is None:
        return None
    event = run.events.order_by("-seq").only("seq", "timestamp", "event_type").first() if run else None
    written = [t for t in (stack.record_last_modified, _ms(stack.s3_last_modified)) if isinstance(t, int)]
    evidence = lockcard.Evidence(
        now_ms=now_ms(),
        readable=lock.readable,
        timestamp_ms=lock.timestamp_ms,
        expires_at_ms=lock.expires_at_ms,
        run_id=run.run_id if run else "",
        run_started_ms=_ms(run.run_at) if run else None,
        run_finished=bool(run and (run.finished_at_raw or run.result in ("SUCCEEDED", "FAILED"))),
        run_result=run.result if run else "",
        last_event_ms=_ms(event.timestamp) if event else None,
        last_event_type=event.event_type if event else "",
        record_written_ms=max(written) if written else None,
        journal=None if stack.journal_key is None else bool(stack.journal_key),
        journal_modified_ms=_ms(stack.journal_modified),
    )
    card = lockcard.judge(evidence)
    card.event = event
    card.run = run
    return card


def _event_index_error(stack: Stack, runs: list) -> str:
    """Why the stack's deployments/index.json could not be read, or "". Asked (one query)
    only when the stack has runs and none of them comes from the index."""
    if stack.legacy or not stack.region or not runs or any(run.in_index for run in runs):
        return ""
    found = EventIndex.objects.filter(account=stack.account_id, stack_name=stack.stack_name, region=stack.region)
    return found.exclude(error="").values_list("error", flat=True).first() or ""


def secret_counts(stack: Stack) -> dict[str, int]:
    """The stack's findings from the last scan that covered it: current and history."""
    return SecretFinding.objects.filter(
        account=stack.account, stack_name=stack.stack_name, region=stack.region or ""
    ).aggregate(
        current=Count("pk", filter=Q(version_id__isnull=True)), history=Count("pk", filter=Q(version_id__isnull=False))
    )


@require_GET
def stack_resource(
    request: AuthedRequest, account_id: str, region_slug: str, stack_name: str, logical_id: str
) -> HttpResponse:
    """One resource's properties, observed properties, attributes and other fields; the
    fragment the stack page lazy-loads, or a page of its own without JavaScript."""
    stack = load_stack(request, account_id, region_slug, stack_name)
    parsed = parse_stack(stack)
    rows = dict(parsed.resource_rows())
    if logical_id not in rows:
        # The link of a logical id holding a lone surrogate names it with U+FFFD instead.
        matches = [lid for lid in rows if utf8_safe(lid) == logical_id]
        if len(matches) != 1:
            raise Http404("No such resource in this record")
        logical_id = matches[0]
    row = present.resource_row(logical_id, rows[logical_id], present.raw_resources(parsed).get(logical_id), {})
    context = {"stack": stack, "r": row}
    template = "stacks/resource.html#details" if is_partial(request) else "stacks/resource.html"
    return render(request, template, context)


@require_GET
def stack_json(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    """The stored record, pretty-printed when it is JSON. A record over JSON_INLINE_BYTES is
    shown as its first bytes as stored (cdkd writes indented JSON), never parsed and
    re-printed whole, with the download offered for the rest."""
    stack = load_stack(request, account_id, region_slug, stack_name)
    body = bytes(stack.body)
    truncated = len(body) > JSON_INLINE_BYTES
    warnings = []
    if truncated:
        shown = masked_body(stack, body)[:JSON_INLINE_BYTES]
        text = shown.decode("utf-8", errors="replace")
        is_json = not any(isinstance(d, dict) and d.get("code") == "not-json" for d in stack.defects or [])
    elif not body and stack.has_defects:
        text, is_json = "", False  # the sync stored no body (too large, or not storable)
        warnings = [w for w in stack_warnings(stack, parse_stack(stack)) if w.code in SYNC_DEFECTS]
    else:
        parsed = parse_stack(stack)
        is_json = parsed.data is not None
        if is_json:
            text = json.dumps(parsed.data, indent=2, ensure_ascii=False)
        else:
            text = parsed.raw.decode("utf-8", errors="replace")  # the masked body, as text
    context = {
        "stack": stack,
        "text": text,
        "is_json": is_json,
        "truncated": truncated,
        "shown_bytes": JSON_INLINE_BYTES,
        "warnings": warnings,
        "can_reveal": may_reveal(request.user, stack.account),
    }
    return render(request, "stacks/json.html", context)


def _attachment(stack: Stack, body: bytes, suffix: str = "") -> HttpResponse:
    filename = f"{stack.stack_name}.{stack.region_slug}{suffix}.state.json"
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    response["Cache-Control"] = "no-store, private"
    return response


@require_GET
def stack_download(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    """The record as every page shows it: masked (detectors and scan findings). The same
    bytes as stored, with the stored ETag, when nothing in it is masked."""
    stack = load_stack(request, account_id, region_slug, stack_name)
    stored = bytes(stack.body)
    body = masked_body(stack, stored)
    response = _attachment(stack, body)
    response["X-Cdkd-Masked"] = "no" if body == stored else "yes"
    if body == stored:
        response["ETag"] = stack.etag
    return response


@require_POST
def stack_reveal(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    """The stored bytes verbatim (the current record, or the version named by
    `version_id`), for a person with the account's reveal right; audited first."""
    stack = load_stack(request, account_id, region_slug, stack_name)
    if not may_reveal(request.user, stack.account):
        context = {"title": "Not revealed", "status": 403}
        context["message"] = f"Only people with the reveal right on {stack.account} can download the stored bytes."
        return render(request, "stacks/operation_error.html", context, status=403)
    version_id = (request.POST.get("version_id") or "").strip()
    if len(version_id) > 1024:
        context = {"title": "Not revealed", "status": 400, "message": "That is not a version id."}
        return render(request, "stacks/operation_error.html", context, status=400)
    if version_id:
        try:
            stored = history.get_version(stack, version_id, actor=actor(request))
        except EngineError as exc:
            return engine_error(request, stack, exc, doing=f"Reading version {version_id}")
        body, etag = stored.body, stored.etag
    else:
        body, etag = bytes(stack.body), stack.etag
    audit.record(
        "reveal",
        actor=request.user.get_username(),
        actor_user=request.user,
        account=stack.account,
        stack_name=stack.stack_name,
        region=stack.region or "",
        etag_before=etag,
        result="ok",
        client_address=audit.client_ip(request),
        details={"key": stack.key, "version": version_id or "current", "bytes": len(body)},
    )
    return _attachment(stack, body, f".{version_id[:32]}" if version_id else "")
