"""Operations from the web: the confirmation page that previews a plan and requests it, the
operations list (inbox, my requests, all), one operation's page with its live region, and
the approve/reject, cancel and run-again actions.

Every view checks the person's role on the operation's account itself (404 when they hold
none, 403 when it is too low) before `stacks.operations` checks again; templates only hide
what these checks refuse. Refusals from the pipeline (PermissionDenied, OperationRefused,
EngineError) come back as a message on the page with a 4xx/5xx status, never a traceback.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from engine.errors import EngineError
from engine.operations import OperationRefused
from engine.providers import CLOUD_CONTROL, ResourceRef, provider_for
from engine.providers.cloudcontrol import NOTHING_IN_AWS, cloud_control_can_delete
from stacks import actions, audit, operations
from stacks.access import accounts_for, get_stack_or_404, has_role, role_on
from stacks.audit import client_ip
from stacks.forms import (
    FORCEABLE_KINDS,
    OPERATION_TABS,
    WEB_KINDS,
    CancelForm,
    DecisionForm,
    ItemFilterForm,
    OperationFilterForm,
    OperationParamsForm,
)
from stacks.models import (
    Approval,
    Lock,
    Operation,
    OperationKind,
    OperationStatus,
    Role,
    Stack,
)
from stacks.secretmask import mask_plan
from stacks.views import picker
from stacks.views.common import AuthedRequest, is_partial
from stacks.views.detail import parse_stack

# --- shared helpers -------------------------------------------------------------------------


def refusal(request: HttpRequest, message: str, status: int, *, title: str = "Not done") -> HttpResponse:
    """A page that says, in one line, why nothing was done (403 role too low, 400 bad
    input, 409 refused by the pipeline, 502 AWS failed)."""
    context = {"title": title, "message": message, "status": status}
    return render(request, "stacks/operation_error.html", context, status=status)


def awaiting_my_approval(user) -> QuerySet[Operation]:
    """Operations waiting for this person's decision: awaiting approval on an account where
    they are approver or admin, requested by someone else, not yet decided by them for the
    current plan. One SQL query."""
    decided = Approval.objects.filter(operation=OuterRef("pk"), approver=user, plan_digest=OuterRef("plan_digest"))
    return (
        Operation.objects.filter(
            status=OperationStatus.AWAITING_APPROVAL, account__in=accounts_for(user, Role.APPROVER)
        )
        .exclude(requested_by=user)
        .exclude(Exists(decided))
    )


def nav(request: HttpRequest) -> dict[str, Any]:
    """Context processor: the nav's "awaiting my approval" count, computed (one query) only
    when a template shows it, so polling fragments pay nothing."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"awaiting_my_approval": functools.cache(lambda: awaiting_my_approval(user).count())}


def _get_operation_or_404(request: AuthedRequest, op_id: int) -> Operation:
    op = get_object_or_404(Operation.objects.select_related("account", "requested_by"), pk=op_id)
    if role_on(request.user, op.account) is None:
        raise Http404("No such operation")
    return op


def _stack_for(op: Operation) -> Stack | None:
    """The mirrored record the operation targets, if it is still there (an orphan removes it)."""
    stacks = Stack.objects.filter(account=op.account, stack_name=op.stack_name)
    stacks = stacks.filter(region=op.region, legacy=False) if op.region else stacks.filter(legacy=True)
    return stacks.select_related("account").first()


# --- presenting a plan ----------------------------------------------------------------------


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


@dataclass
class ChangeRow:
    """One entry of `plan.changes`: a rewrite (`logicalId.path: before -> after`), another
    structured change, or a plain sentence."""

    text: str = ""
    kind: str = ""
    where: str = ""
    before: str | None = None
    after: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_rewrite(self) -> bool:
        return self.before is not None or self.after is not None


def change_rows(changes: Any) -> list[ChangeRow]:
    rows = []
    for change in changes if isinstance(changes, list) else []:
        if not isinstance(change, dict):
            rows.append(ChangeRow(text=_show(change)))
            continue
        rest = dict(change)
        row = ChangeRow(kind=str(rest.pop("kind", "") or rest.pop("action", "") or ""))
        logical_id, path = rest.pop("logicalId", None), rest.pop("path", None)
        if logical_id is not None or path is not None:
            row.where = ".".join(str(p) for p in (logical_id, path) if p not in (None, ""))
        elif "key" in rest:
            row.where = str(rest.pop("key"))
        if "before" in rest or "after" in rest:
            row.before = _show(rest.pop("before", None))
            row.after = _show(rest.pop("after", None))
        row.text = _show(rest.pop("message", rest.pop("summary", "")) or "")
        row.extra = rest
        rows.append(row)
    return rows


def _as_engine_shows(value: Any) -> str:
    """A rewrite's value as `engine.rewrite` prints it in its `logicalId.path: a -> b` lines."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def rewrite_rows(data: Any, key: str = "rewrites") -> list[ChangeRow]:
    """An orphan-resources plan's reference rewrites (`plan.data.rewrites`) as table rows."""
    entries = data.get(key) if isinstance(data, dict) else None
    rows = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        where = ".".join(str(entry[k]) for k in ("logicalId", "path") if entry.get(k) not in (None, ""))
        if key == "rewrites":
            before, after = _as_engine_shows(entry.get("before")), _as_engine_shows(entry.get("after"))
            rows.append(ChangeRow(kind=str(entry.get("kind") or ""), where=where, before=before, after=after))
        else:
            rows.append(ChangeRow(where=where, text=f"{entry.get('reference', '')}: {entry.get('reason', '')}"))
    return rows


def _via_cloud_control(entry: dict[str, Any]) -> bool:
    """Whether the destroy deletes this row through the Cloud Control API (the engine's own
    routing, `engine.providers.provider_for`), so the page can say so before the request: an
    endpoint without Cloud Control (the demo's moto server) fails exactly these rows."""
    if entry.get("action") not in ("delete", "snapshot"):
        return False
    rtype = entry.get("resourceType")
    if not isinstance(rtype, str) or rtype in NOTHING_IN_AWS or not cloud_control_can_delete(rtype):
        return False
    ref = ResourceRef(logical_id="", resource_type=rtype, physical_id=None, provisioned_by=entry.get("provisionedBy"))
    return provider_for(ref) is CLOUD_CONTROL


def _destroy_row(data: dict[str, Any], depth: int, lid: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "depth": depth,
        "indent": depth * 1.5,
        "stack": data.get("stack") or "",
        "logical_id": entry.get("logicalId") if entry.get("journal") else lid,
        "journal": bool(entry.get("journal")),
        "action": str(entry.get("action") or ""),
        "resource_type": entry.get("resourceType") or "",
        "physical_id": entry.get("physicalId") or "",
        "deletion_policy": entry.get("deletionPolicy") or "",
        "reason": entry.get("reason") or "",
        "child": entry.get("childStack") or "",
        "remove_protection": bool(entry.get("removeProtection")),
        "looks_protected": bool(entry.get("looksProtected")),
        "cloud_control": _via_cloud_control(entry),
    }


def destroy_rows(data: Any, depth: int = 0) -> list[dict[str, Any]]:
    """A destroy plan's rows (`plan.data`), in deletion order: the resources only the rollback
    journal records first, then the record's, each nested child's rows right below its
    parent's row, indented by `depth` (the order of the plan's own change lines)."""
    if not isinstance(data, dict) or depth > 20:
        return []
    journal = data.get("journal") if isinstance(data.get("journal"), dict) else {}
    journal_rows = journal.get("rows") if isinstance(journal.get("rows"), dict) else {}
    planned = data.get("rows") if isinstance(data.get("rows"), dict) else {}
    order = data.get("order") if isinstance(data.get("order"), list) else list(planned)
    rows = [
        _destroy_row(data, depth, key, entry)
        for key, entry in journal_rows.items()
        if isinstance(key, str) and isinstance(entry, dict)
    ]
    for lid in order:
        entry = planned.get(lid) if isinstance(lid, str) else None
        if not isinstance(entry, dict):
            continue
        rows.append(_destroy_row(data, depth, lid, entry))
        rows += destroy_rows(entry.get("child"), depth + 1)
    return rows


def destroy_options(plan: dict[str, Any]) -> dict[str, Any] | None:
    """The run-wide choices of a destroy plan, for the requester and the approver."""
    data = plan.get("data") if isinstance(plan, dict) else None
    options = data.get("options") if isinstance(data, dict) else None
    if not isinstance(options, dict):
        return None
    timeout = options.get("resource_timeout") if isinstance(options.get("resource_timeout"), dict) else {}
    warn = options.get("resource_warn_after") if isinstance(options.get("resource_warn_after"), dict) else {}

    def text(seconds: Any) -> str:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            return "?"
        for unit, size in (("h", 3600), ("m", 60)):
            if seconds >= size and seconds % size == 0:
                return f"{int(seconds // size)}{unit}"
        return f"{seconds:g}s"

    return {
        "skip_final_snapshot": options.get("skip_final_snapshot") is True,
        "remove_protection": options.get("remove_protection") is True,
        "timeout": text(timeout.get("default")),
        "warn_after": text(warn.get("default")),
        "per_type": sorted(f"{k}: {text(v)}" for k, v in timeout.items() if k != "default"),
    }


def _path_text(path: Any) -> str:
    out = ""
    for p in path if isinstance(path, list) else []:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def scrub_rows(data: Any) -> list[dict[str, Any]]:
    """A scrub plan's rewrites of the current record: where, what it becomes (`***` or the
    reference a deploy resolves again) and what matched. The plan holds no value."""
    entries = data.get("rewrites") if isinstance(data, dict) else None
    key = data.get("key", "") if isinstance(data, dict) else ""
    return [
        {"key": key, "path": _path_text(e.get("path")), "to": _show(e.get("to")), "source": _show(e.get("source"))}
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, dict)
    ]


# A destroy plan's warning about another record the import check could not read.
_UNREADABLE_WARNING = "; skipped by the import check, as cdkd skips it"


def _warnings_once(warnings: Any) -> tuple[list[str], list[str]]:
    """(the plan's warnings, each once, in order; the other records the import check could
    not read). Those are about other stacks, so they are one collapsed line, not one each
    (a nested child's plan repeats them)."""
    seen: set[str] = set()
    own: list[str] = []
    unreadable: list[str] = []
    for w in warnings if isinstance(warnings, list) else []:
        text = _show(w)
        if text in seen:
            continue
        seen.add(text)
        if text.startswith("could not read ") and text.endswith(_UNREADABLE_WARNING):
            unreadable.append(text[len("could not read ") : -len(_UNREADABLE_WARNING)])
        else:
            own.append(text)
    return own, unreadable


def _changes_once(plan: dict[str, Any], changes: list[ChangeRow], tables: dict[str, list]) -> list[ChangeRow]:
    """The plan's changes minus those a table above already prints (each change once):
    a destroy's row lines (one per row, first), a scrub's rewrites (first), an orphan of
    resources' `logicalId.path: before -> after` lines."""
    if tables["destroy_rows"]:
        return changes[len(tables["destroy_rows"]) :]
    if tables["scrub_rows"]:
        return changes[len(tables["scrub_rows"]) :]
    if tables["rewrites"]:
        lines = {f"{r.where}: {r.before} -> {r.after}" for r in tables["rewrites"]}
        return [c for c in changes if c.text not in lines]
    return changes


def plan_context(plan: dict[str, Any]) -> dict[str, Any]:
    plan = mask_plan(plan)  # shown masked: a rewrite resolves values out of the record
    kind = plan.get("kind")
    tables = {
        # orphan-resources' reference rewrites; scrub's `data.rewrites` are its own shape
        "rewrites": [] if kind == OperationKind.SCRUB else rewrite_rows(plan.get("data")),
        "scrub_rows": scrub_rows(plan.get("data")) if kind == OperationKind.SCRUB else [],
        "destroy_rows": destroy_rows(plan.get("data")) if kind == OperationKind.DESTROY else [],
    }
    tables["cloud_control_rows"] = [r for r in tables["destroy_rows"] if r["cloud_control"]]
    changes = _changes_once(plan, change_rows(plan.get("changes")), tables)
    own, unreadable = _warnings_once(plan.get("warnings"))
    return {
        "plan": plan,
        "changes": changes,
        "structured_changes": any(c.where or c.is_rewrite for c in changes),
        "unresolved": rewrite_rows(plan.get("data"), "unresolved"),
        "plan_warnings": own,
        "unreadable_elsewhere": unreadable,
        "is_scrub": kind == OperationKind.SCRUB,
        "destroy_options": destroy_options(plan) if kind == OperationKind.DESTROY else None,
        **tables,
    }


# --- requesting: the confirmation page -------------------------------------------------------


def _new_operation_context(stack: Stack, kind: str, form: OperationParamsForm, unreadable: bool) -> dict[str, Any]:
    from stacks.views.secrets import scrub_assemblies  # it imports this module

    return {
        "stack": stack,
        "kind": kind,
        "kind_label": OperationKind(kind).label,
        "form": form,
        "unreadable_lock": unreadable,
        "forceable": kind in FORCEABLE_KINDS,
        "leaves_aws_alone": kind in (OperationKind.ORPHAN, OperationKind.ORPHAN_RESOURCES),
        "is_destroy": kind == OperationKind.DESTROY,
        "is_scrub": kind == OperationKind.SCRUB,
        "is_rollback": kind == OperationKind.ROLLBACK,
        "assemblies": scrub_assemblies(stack) if kind == OperationKind.SCRUB else [],
    }


def _missing_confirmation(kind: str, stack: Stack, form: OperationParamsForm, params: dict[str, Any]) -> bool:
    """Destroy needs the stack's name typed; a scrub that purges history its own tick.
    Adds the error to the form and returns True when one is missing."""
    if kind == OperationKind.DESTROY and (form.cleaned_data.get("confirm_name") or "") != stack.stack_name:
        form.add_error("confirm_name", f"Type the stack's name ({stack.stack_name}) exactly to confirm the destroy.")
        return True
    if kind == OperationKind.SCRUB and params.get("purge_history") and not form.cleaned_data.get("confirm_purge"):
        form.add_error("confirm_purge", "Tick the purge confirmation: deleting old versions cannot be undone.")
        return True
    return False


def _audit_secret_read(request: AuthedRequest, stack: Stack, data: dict[str, Any] | None, error: str) -> None:
    """A scrub preview reads every Secrets Manager and SSM SecureString value of the
    account (to find them in the record): each such read is audited, like a reveal."""
    regions = data.get("regions") if isinstance(data, dict) else None
    audit.record(
        "secrets.read",
        actor=request.user.get_username(),
        actor_user=request.user,
        account=stack.account,
        stack_name=stack.stack_name,
        region=stack.region or "",
        result="failed" if error else "ok",
        error=error[:500],
        client_address=client_ip(request),
        details={"purpose": "scrub preview", "services": ["secretsmanager", "ssm"], "regions": regions or []},
    )


@never_cache
@require_http_methods(["GET", "POST"])
def operation_new(
    request: AuthedRequest, account_id: str, region_slug: str, stack_name: str, kind: str
) -> HttpResponse:
    """GET: compute and show the plan for the parameters in the query string. POST: request
    it (the pipeline plans again; the digest the person saw is compared with the new one)."""
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    if kind not in WEB_KINDS:
        raise Http404("No such operation")
    if not has_role(request.user, stack.account, Role.OPERATOR):
        return refusal(request, f"You need the operator role on {stack.account} to request this.", 403)
    # The rule the stack page's buttons follow. A lock is the bucket's to tell (the mirror
    # may lag): force-unlock's own plan says when there is none.
    why = None if kind == OperationKind.FORCE_UNLOCK else actions.why_not(stack, kind)
    if why:
        return refusal(request, why, 409, title=f"{OperationKind(kind).label} cannot run on {stack.stack_name}")
    lock = Lock.objects.filter(stack=stack).first() if kind == OperationKind.FORCE_UNLOCK else None
    unreadable = lock is not None and not lock.readable
    rows = picker.pick_rows(parse_stack(stack).resource_rows()) if kind == "orphan-resources" else []
    logical_ids = [r.logical_id for r in rows]
    data = request.POST if request.method == "POST" else picker.expand(request.GET, rows)
    form = OperationParamsForm(data, kind=kind, logical_ids=logical_ids, unreadable_lock=unreadable)
    context = _new_operation_context(stack, kind, form, unreadable)
    context["logical_ids"] = logical_ids
    region = None if stack.legacy else stack.region

    if request.method == "GET" and kind == OperationKind.ORPHAN_RESOURCES and picker.is_picking(data):
        return render(
            request, "stacks/operation_new.html", {**context, **picker.picker_context(data, rows), "picking": True}
        )
    if not form.is_valid():
        context["picking"] = "resources" in form.errors
        if context["picking"]:
            context.update(picker.picker_context(data, rows), picker_submitted=True)
        return render(request, "stacks/operation_new.html", context, status=400)
    params = form.params()
    status = 200

    if request.method == "POST" and _missing_confirmation(kind, stack, form, params):
        status = 400  # show the plan again, with the error
    elif request.method == "POST":
        if (unreadable or form.cleaned_data.get("unreadable_seen")) and not params.get("confirm_unreadable"):
            form.add_error("confirm_unreadable", "Tick the second confirmation to remove a lock that cannot be read.")
            return render(request, "stacks/operation_new.html", context, status=400)
        try:
            op = operations.request_operation(
                request.user,
                stack.account,
                kind,
                stack.stack_name,
                region,
                params,
                client_address=client_ip(request),
                reason=form.cleaned_data.get("reason") or "",
            )
        except PermissionDenied as exc:
            return refusal(request, str(exc) or "Not allowed.", 403)
        except OperationRefused as exc:
            return render(request, "stacks/operation_new.html", {**context, "refusal": str(exc)}, status=409)
        except EngineError as exc:
            return render(request, "stacks/operation_new.html", {**context, "engine_error": str(exc)}, status=502)
        seen = form.cleaned_data.get("plan_digest")
        if form.cleaned_data.get("force_offered") and params.get("force"):
            messages.info(request, "Forced: the plan includes the override you ticked; the approver sees it.")
        elif seen and seen != op.plan_digest:
            messages.warning(request, "The record changed after the preview: the operation holds a new plan. Check it.")
        messages.success(request, f"Requested operation #{op.pk}: {op.get_kind_display()} of {op.stack_name}.")
        return redirect("operation", op_id=op.pk)

    if unreadable:
        # Planning only reads; the confirmation form still asks for the second tick.
        params["confirm_unreadable"] = True
    try:
        plan = operations.compute_plan(
            stack.account, kind, stack.stack_name, region, params, request.user.get_username()
        )
    except OperationRefused as exc:
        return render(request, "stacks/operation_new.html", {**context, "refusal": str(exc)}, status=409)
    except EngineError as exc:
        if kind == OperationKind.SCRUB:
            _audit_secret_read(request, stack, None, str(exc))
        return render(request, "stacks/operation_new.html", {**context, "engine_error": str(exc)}, status=502)
    if kind == OperationKind.SCRUB:
        _audit_secret_read(request, stack, plan.data, "")
    context.update(plan_context(plan.as_json()), digest=plan.digest, params=params)
    context["predicted_refusal"] = actions.predicted_refusal(plan.as_json())
    context["forced_override"] = actions.forced_override(plan.as_json(), params)
    context["unreadable_lock"] = unreadable or (
        kind == OperationKind.FORCE_UNLOCK and plan.data.get("unreadable") is True
    )
    return render(request, "stacks/operation_new.html", context, status=status)


# --- the operations list ---------------------------------------------------------------------


@never_cache
@require_GET
def operation_list(request: AuthedRequest) -> HttpResponse:
    user = request.user
    accounts = list(accounts_for(user).order_by("name", "account_id"))
    form = OperationFilterForm(request.GET, accounts=accounts)
    valid = form.is_valid()
    filters = form.cleaned_data if valid else {}
    tab = filters.get("tab") or ("inbox" if accounts_for(user, Role.APPROVER).exists() else "mine")
    if tab == "inbox":
        ops = awaiting_my_approval(user)
    elif tab == "mine":
        ops = Operation.objects.filter(requested_by=user, account__in=accounts_for(user))
    else:
        ops = operations.visible_operations(user)
    if account := filters.get("account"):
        ops = ops.filter(account__account_id=account)
    if kind := filters.get("kind"):
        ops = ops.filter(kind=kind)
    if status := filters.get("status"):
        ops = ops.filter(status=status)
    ops = ops.select_related("account", "requested_by").order_by("-created_at", "-pk")
    page = Paginator(ops, settings.CDKD_PAGE_SIZE).get_page(filters.get("page"))
    context = {"form": form, "tab": tab, "tabs": OPERATION_TABS, "page": page}
    template = "stacks/operations.html#table" if is_partial(request) else "stacks/operations.html"
    return render(request, template, context, status=200 if valid else 400)


# --- one operation ---------------------------------------------------------------------------


def _percent(progress: dict[str, Any], finished: bool) -> int | None:
    done, total = progress.get("done"), progress.get("total")
    if not isinstance(done, int) or not isinstance(total, int) or total <= 0:
        return 100 if finished and progress else None
    return max(0, min(100, int(100 * done / total)))


# Item statuses that count as failed for the "failed only" filter (engine.destroy's FAILED).
FAILED_ITEM_STATUSES = frozenset({"failed", "fail", "error"})


def _item_page(request: AuthedRequest, items: dict[str, Any]) -> dict[str, Any]:
    """One page of the operation's items, filtered by status; the filter and page come
    from the query string (kept by the polling region and the pagination links)."""
    form = ItemFilterForm(request.GET)
    filters = form.cleaned_data if form.is_valid() else {}
    rows = [(item_id, v if isinstance(v, dict) else {"status": _show(v)}) for item_id, v in sorted(items.items())]
    failed = [r for r in rows if str(r[1].get("status", "")) in FAILED_ITEM_STATUSES]
    shown = failed if filters.get("item_status") == "failed" else rows
    page = Paginator(shown, settings.CDKD_PAGE_SIZE).get_page(filters.get("page"))
    return {
        "items": list(page.object_list),
        "items_total": len(rows),
        "items_failed": len(failed),
        "items_page": page,
        "item_filter": filters.get("item_status") or "",
        "item_query": request.GET.urlencode(),
    }


def _live_context(request: AuthedRequest, op: Operation) -> dict[str, Any]:
    """What the polling region shows: status, approvals, progress, log, result, actions."""
    policy = operations.policy_for(op.account, op.kind)
    approvals = list(op.approvals.select_related("approver"))
    counting = {a.pk for a in operations.valid_approvals(op)}
    progress = op.progress if isinstance(op.progress, dict) else {}
    items = progress.get("items")
    items = items if isinstance(items, dict) else {}
    return {
        **_item_page(request, items),
        "op": op,
        "policy": policy,
        "approvals": [(a, a.pk in counting) for a in approvals],
        "approvals_counting": len(counting),
        "progress": progress,
        "percent": _percent(progress, op.finished),
        "log": op.log if isinstance(op.log, list) else [],
        "result": op.result if isinstance(op.result, dict) else {},
        "can_cancel": operations.can(request.user, op, "cancel"),
        "can_retry": operations.can(request.user, op, "retry"),
        "can_run_again": operations.can(request.user, op, "run_again"),
        "mine": op.requested_by_id == request.user.pk,
    }


def _operation_page(
    request: AuthedRequest, op: Operation, *, status: int = 200, decision_form=None, confirm_cancel: bool = False
) -> HttpResponse:
    context = _live_context(request, op)
    plan = op.plan if isinstance(op.plan, dict) else {}
    context.update(plan_context(plan))
    context.update(
        stack=_stack_for(op),
        can_decide=operations.can(request.user, op, "decide"),
        decision_form=decision_form or DecisionForm(),
        forced_override=actions.forced_override(plan, op.params if isinstance(op.params, dict) else {}),
        confirm_cancel=(confirm_cancel or request.GET.get("confirm") == "cancel") and context["can_cancel"],
        reruns=list(op.reruns.order_by("pk").values_list("pk", flat=True)),
    )
    return render(request, "stacks/operation.html", context, status=status)


@never_cache
@require_GET
def operation_detail(request: AuthedRequest, op_id: int) -> HttpResponse:
    op = _get_operation_or_404(request, op_id)
    if is_partial(request):
        response = render(request, "stacks/operation.html#live", _live_context(request, op))
        if op.finished:
            return HttpResponseStopPolling(response.content)
        return response
    return _operation_page(request, op)


def _refused_on_page(request: AuthedRequest, op: Operation, message: str, status: int, **kwargs) -> HttpResponse:
    messages.error(request, message)
    op.refresh_from_db()
    return _operation_page(request, op, status=status, **kwargs)


def _attempt(request: AuthedRequest, op: Operation, action) -> tuple[Operation | None, HttpResponse | None]:
    """Run one pipeline action; a refusal becomes the operation page with its message and
    the status that says why (403 not allowed, 409 not now, 502 AWS)."""
    try:
        return action(), None
    except PermissionDenied as exc:
        return None, _refused_on_page(request, op, str(exc) or "Not allowed.", 403)
    except OperationRefused as exc:
        return None, _refused_on_page(request, op, str(exc), 409)
    except EngineError as exc:
        return None, _refused_on_page(request, op, str(exc), 502)


@require_POST
def operation_decide(request: AuthedRequest, op_id: int) -> HttpResponse:
    op = _get_operation_or_404(request, op_id)
    if not has_role(request.user, op.account, Role.APPROVER):
        return _refused_on_page(request, op, f"You need the approver role on {op.account} to decide on this.", 403)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _refused_on_page(request, op, "Choose Approve or Reject.", 400, decision_form=form)
    approve = form.cleaned_data["decision"] == "approve"
    comment = form.cleaned_data["comment"]
    op, refused = _attempt(
        request,
        op,
        lambda: operations.decide(
            request.user, op, approve=approve, comment=comment, client_address=client_ip(request)
        ),
    )
    if refused:
        return refused
    if not approve:
        messages.success(request, f"Rejected operation #{op.pk}.")
    elif op.status == OperationStatus.AWAITING_APPROVAL:
        messages.success(request, f"Approved operation #{op.pk}; it needs more approvals before it runs.")
    else:
        messages.success(request, f"Approved operation #{op.pk}; it is {op.get_status_display().lower()}.")
    return redirect("operation", op_id=op.pk)


@require_POST
def operation_cancel(request: AuthedRequest, op_id: int) -> HttpResponse:
    """Cancel, as the second step: the page's Cancel button opens the confirmation
    (`?confirm=cancel`), whose button posts `confirm=yes`. A POST without it only shows
    the confirmation again (no inline script: the site's CSP allows none)."""
    op = _get_operation_or_404(request, op_id)
    if not has_role(request.user, op.account, Role.OPERATOR):
        return _refused_on_page(request, op, f"You need the operator role on {op.account} to cancel this.", 403)
    if not CancelForm(request.POST).is_valid() and operations.can(request.user, op, "cancel"):
        return _operation_page(request, op, confirm_cancel=True)
    op, refused = _attempt(request, op, lambda: operations.cancel(request.user, op, client_address=client_ip(request)))
    if refused:
        return refused
    if op.status == OperationStatus.CANCELLED:
        messages.success(request, f"Cancelled operation #{op.pk}.")
    else:
        messages.success(request, f"Asked operation #{op.pk} to stop; it finishes the item it is working on.")
    return redirect("operation", op_id=op.pk)


@require_POST
def operation_retry(request: AuthedRequest, op_id: int) -> HttpResponse:
    """Run again: an abandoned operation is queued again as it was (approvers); a partial
    or failed one is requested again with a new plan (operators), approved anew only when
    that plan differs."""
    op = _get_operation_or_404(request, op_id)
    if not (isinstance(op.result, dict) and op.result.get("abandoned")) or operations.replans_after_abandon(op):
        return _run_again(request, op)
    if not has_role(request.user, op.account, Role.APPROVER):
        return _refused_on_page(request, op, f"You need the approver role on {op.account} to run this again.", 403)
    op, refused = _attempt(request, op, lambda: operations.retry(request.user, op, client_address=client_ip(request)))
    if refused:
        return refused
    messages.success(request, f"Queued operation #{op.pk} to run again.")
    return redirect("operation", op_id=op.pk)


def _run_again(request: AuthedRequest, op: Operation) -> HttpResponse:
    if not has_role(request.user, op.account, Role.OPERATOR):
        return _refused_on_page(request, op, f"You need the operator role on {op.account} to run this again.", 403)
    new, refused = _attempt(
        request, op, lambda: operations.run_again(request.user, op, client_address=client_ip(request))
    )
    if refused:
        return refused
    if new.status == OperationStatus.AWAITING_APPROVAL:
        # Say why it waits: a changed plan, or the same plan whose approvals do not suffice
        # (none given, expired, or fewer than the policy needs).
        why = (
            "its plan differs, so it needs approval again"
            if new.plan_digest != op.plan_digest or new.plan_etag != op.plan_etag
            else "same plan, but the approvals it had are not enough now, so it needs approval"
        )
        messages.success(request, f"Requested #{new.pk}, a run again of #{op.pk}: {why}.")
    else:
        messages.success(request, f"Requested #{new.pk}, a run again of #{op.pk}: {new.get_status_display().lower()}.")
    return redirect("operation", op_id=new.pk)
