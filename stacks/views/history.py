"""A record's S3 version history: the list, one version, and a diff of two.

S3 is read through `stacks.history` (never boto3 here). An engine failure becomes a page
with its message: 404 for a version that does not exist, 502 for AWS refusing or failing.
Every body shown (a version, either side of a diff) is masked by `stacks.secretmask`; the
verbatim bytes of a version come only through the audited Reveal action.
"""

from __future__ import annotations

import json
import logging

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from engine.errors import EngineError, NotFound
from engine.schema import parse_state
from stacks import diff, history
from stacks.access import get_stack_or_404
from stacks.forms import DiffForm
from stacks.secretmask import masked_body, may_reveal
from stacks.views import present
from stacks.views.common import AuthedRequest, actor, engine_error, is_partial
from stacks.views.detail import (  # render: a lone surrogate is escaped, not a 500
    _attachment,
    load_stack,
    parse_stack,
    render,
    render_tab,
    tab_context,
)

logger = logging.getLogger(__name__)

CURRENT = "current"
VERSIONS_PER_PAGE = 20


@never_cache
@require_GET
def stack_history(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    """The stack page's History tab: a tab like the others (its own URL, a full page without
    JavaScript, just the tab for htmx), listing the record's S3 versions a page at a time."""
    stack = load_stack(request, account_id, region_slug, stack_name)
    context, _lock = tab_context(request, stack, "history")
    try:
        versions = history.list_versions(stack, actor=actor(request))
    except EngineError as exc:
        status = 404 if isinstance(exc, NotFound) else 502
        logger.info("listing the versions of %s in %s failed: %s", stack.key, stack.account.account_id, exc)
        context.update(history_error=str(exc), history_error_kind=type(exc).__name__)
        # htmx swaps only a 2xx answer: the tab itself says what failed; its URL answers the status.
        return render_tab(request, stack, context, 200 if is_partial(request) else status)
    readable = [v for v in versions if not v.delete_marker]
    form = DiffForm(initial={"a": readable[1].version_id if len(readable) > 1 else "", "b": CURRENT})
    # Each version on the page is read (one GET each) for what its body says: a page at a time.
    page = Paginator(versions, VERSIONS_PER_PAGE).get_page(request.GET.get("page"))
    rows = history.describe_versions(stack, list(page.object_list), actor=actor(request))
    context.update(versions=rows, page=page, form=form)
    return render_tab(request, stack, context)


@never_cache
@require_GET
def stack_version(
    request: AuthedRequest, account_id: str, region_slug: str, stack_name: str, version_id: str
) -> HttpResponse:
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    try:
        stored = history.get_version(stack, version_id, actor=actor(request))
    except EngineError as exc:
        return engine_error(request, stack, exc, doing=f"Reading version {version_id}")
    body = masked_body(stack, stored.body, stored.version_id or version_id)
    parsed = parse_state(body, key_region=None if stack.legacy else stack.region)
    if parsed.data is not None:
        text = json.dumps(parsed.data, indent=2, ensure_ascii=False)
    else:
        text = body.decode("utf-8", errors="replace")
    context = {
        "stack": stack,
        "stored": stored,
        "version_id": version_id,
        "parsed": parsed,
        "warnings": present.record_warnings(stack, parsed),
        "resource_count": len(parsed.resource_rows()),
        "output_count": len(parsed.outputs()),
        "text": text,
        "can_reveal": may_reveal(request.user, stack.account),
    }
    return render(request, "stacks/version.html", context)


@never_cache
@require_GET
def stack_diff(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    """Diff two versions (`a` to `b`); `current` means the record as last synced."""
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    form = DiffForm(request.GET)
    if not form.is_valid():
        return render(request, "stacks/diff.html", {"stack": stack, "form": form}, status=400)
    sides = {}
    for side in ("a", "b"):
        version_id = form.cleaned_data[side]
        if version_id == CURRENT:
            sides[side] = parse_stack(stack)
            continue
        try:
            stored = history.get_version(stack, version_id, actor=actor(request))
        except EngineError as exc:
            return engine_error(request, stack, exc, doing=f"Reading version {version_id}")
        body = masked_body(stack, stored.body, stored.version_id or version_id)
        sides[side] = parse_state(body, key_region=None if stack.legacy else stack.region)
    context = {
        "stack": stack,
        "form": form,
        "a": form.cleaned_data["a"],
        "b": form.cleaned_data["b"],
        "diff": diff.diff_records(sides["a"], sides["b"]),
        "a_defects": sides["a"].defects,
        "b_defects": sides["b"].defects,
    }
    return render(request, "stacks/diff.html", context)


@never_cache
@require_GET
def stack_version_download(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    """One version's body (`?version_id=`) as a file, masked as every page masks it; the
    verbatim bytes only through Reveal."""
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    version_id = request.GET.get("version_id", "")
    if not version_id or len(version_id) > 1024:
        raise Http404("Name a version")
    try:
        stored = history.get_version(stack, version_id, actor=actor(request))
    except EngineError as exc:
        return engine_error(request, stack, exc, doing=f"Reading version {version_id}")
    body = masked_body(stack, stored.body, stored.version_id or version_id)
    suffix = "." + "".join(c if c.isalnum() else "_" for c in version_id)[:40]
    response = _attachment(stack, body, suffix)
    response["X-Cdkd-Masked"] = "no" if body == stored.body else "yes"
    return response
