"""Plan a deploy from the browser: upload a synthesized `cdk.out` zip (or pick one already
stored), choose the stack, compute cdkd's plan against the live record
(`stacks.deployplan.plan_assembly`, what `manage.py cdkd diff` runs) and show it on a page
of its own that can be shared.

Creating a plan needs the operator role on the account; reading one, any role (404 for a
person with none). Every refusal of the input (not a zip, an escaping path, a symlink,
too big, another account's stack, no such stack, a bad parameter) is a message and a 4xx;
AWS failures are a 502. Nothing is written to any bucket.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from engine.deploy.assembly import AssemblyError
from engine.deploy.intrinsics import ParameterError, parse_overrides
from engine.errors import EngineError
from engine.masking import MASK
from engine.operations import OperationRefused
from engine.secrets import secret_name
from stacks import actions, deploynew
from stacks.access import get_account_or_404, get_stack_or_404, has_role, role_on
from stacks.audit import client_ip
from stacks.models import Account, DeployPlan, OperationKind, Role, Stack
from stacks.views.common import AuthedRequest, actor
from stacks.views.plan_present import plan_nodes, record_notice

RECENT_ASSEMBLIES = 20


class PlanForm(forms.Form):
    assembly_file = forms.FileField(required=False, label="cdk.out zip")
    assembly = forms.CharField(required=False, max_length=64, label="or a stored assembly")
    stack = forms.CharField(required=False, max_length=1024)
    region = forms.RegexField(
        required=False,
        max_length=32,
        regex=r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$",
        error_messages={"invalid": "The region must look like us-east-1."},
        help_text="For a stack whose environment pins none",
    )
    parameters = forms.CharField(required=False, max_length=20_000, widget=forms.Textarea(attrs={"rows": 3}))
    recursive = forms.BooleanField(required=False, label="Include nested stacks")

    def clean_parameters(self) -> dict[str, str]:
        lines = [line.strip() for line in self.cleaned_data["parameters"].splitlines() if line.strip()]
        try:
            return parse_overrides(lines)
        except ParameterError as exc:
            raise forms.ValidationError(str(exc)) from None


def _refuse(request: AuthedRequest, message: str, status: int) -> HttpResponse:
    context = {"title": "No plan", "message": message, "status": status}
    return render(request, "stacks/operation_error.html", context, status=status)


@require_http_methods(["GET", "POST"])
def account_plan_new(request: AuthedRequest, account_id: str) -> HttpResponse:
    """Plan a stack of an assembly on this account, typically a new one."""
    account = get_account_or_404(request.user, account_id)
    return _plan_new(request, account, None)


@require_http_methods(["GET", "POST"])
def stack_plan_new(request: AuthedRequest, account_id: str, region_slug: str, stack_name: str) -> HttpResponse:
    """Plan the next deploy of this stack."""
    stack = get_stack_or_404(request.user, account_id, region_slug, stack_name)
    why = actions.why_not(stack, OperationKind.DEPLOY)
    if why and has_role(request.user, stack.account, Role.OPERATOR):
        return _refuse(request, why, 409)  # the plan would only block: say so before an upload
    return _plan_new(request, stack.account, stack)


def _plan_new(request: AuthedRequest, account: Account, stack: Stack | None) -> HttpResponse:
    if not has_role(request.user, account, Role.OPERATOR):
        return _refuse(request, f"Planning a deploy needs the operator role on {account.label}.", 403)
    form = PlanForm(request.POST, request.FILES) if request.method == "POST" else PlanForm()
    context: dict[str, Any] = {
        "account": account,
        "stack": stack,
        "form": form,
        "stored": deploynew.visible_assemblies(request.user, account)[:RECENT_ASSEMBLIES],
        "limit": settings.CDKD_ASSEMBLY_MAX_BYTES,
    }
    if request.method != "POST":
        return render(request, "stacks/plan_new.html", context)
    if not form.is_valid():
        context["error"] = " ".join(e for errors in form.errors.values() for e in errors)
        return render(request, "stacks/plan_new.html", context, status=400)
    data = form.cleaned_data
    try:
        result = deploynew.make_plan(
            request.user,
            account,
            stack,
            upload=data["assembly_file"],
            digest=data["assembly"],
            name=data["stack"],
            region=data["region"],
            overrides=data["parameters"],
            recursive=data["recursive"],
            actor=actor(request),
        )
    except deploynew.Refused as exc:
        context["error"] = exc.message
        return render(request, "stacks/plan_new.html", context, status=exc.status)
    except (AssemblyError, ParameterError) as exc:
        context["error"] = str(exc)
        return render(request, "stacks/plan_new.html", context, status=400)
    except EngineError as exc:
        context["error"] = f"S3 could not be read: {exc}"
        return render(request, "stacks/plan_new.html", context, status=502)
    if isinstance(result, deploynew.Choice):
        context["picked"], context["choices"] = result.assembly, result.stacks
        return render(request, "stacks/plan_new.html", context)
    return redirect("deploy_plan", plan_id=result.pk)


# --- the plan page --------------------------------------------------------------------------


def _load_plan(request: AuthedRequest, plan_id: int) -> DeployPlan:
    plan = get_object_or_404(DeployPlan.objects.select_related("account", "assembly", "created_by"), pk=plan_id)
    if role_on(request.user, plan.account) is None:
        raise Http404("No such plan")
    return plan


@require_GET
def deploy_plan(request: AuthedRequest, plan_id: int) -> HttpResponse:
    plan = _load_plan(request, plan_id)
    document = deploynew.shown_document(plan)
    nodes = plan_nodes(document)
    parameters = {k: (MASK if secret_name(k) else v) for k, v in (plan.parameters or {}).items()}
    mirror = Stack.objects.filter(account=plan.account, key=plan.state_key).first()
    context = {
        "plan": plan,
        "top": nodes[0],
        "nodes": nodes,
        "doc": document.get("plan") or {},
        "parameters": parameters,
        "notice": record_notice(plan),
        "mirror": mirror,
        "can_plan": has_role(request.user, plan.account, Role.OPERATOR),
        "blocking": list(dict.fromkeys(r for n in nodes for r in n.blocking)),
    }
    # only a stateful replacement (which an explicit consent lifts) may stand between it and a request
    context["can_request"] = context["can_plan"] and deploynew.requestable(context["blocking"])
    context["needs_consent"] = deploynew.needs_consent(context["blocking"])
    return render(request, "stacks/plan.html", context)


class DeployRequestForm(forms.Form):
    reason = forms.CharField(required=False, max_length=1000, widget=forms.Textarea(attrs={"rows": 2}))
    stateful_consent = forms.BooleanField(
        required=False, label="I accept that the stateful replacements delete the old resources and their data"
    )


@require_POST
def deploy_plan_request(request: AuthedRequest, plan_id: int) -> HttpResponse:
    """Request the deploy of this plan: an Operation of kind `deploy` whose approval binds to
    the plan's digest, the assembly digest and the record's ETag (engine.deploy.operation)."""
    plan = _load_plan(request, plan_id)
    form = DeployRequestForm(request.POST)
    if not form.is_valid():
        return _refuse(request, " ".join(e for errors in form.errors.values() for e in errors), 400)
    try:
        op = deploynew.request_deploy(
            request.user,
            plan,
            reason=form.cleaned_data["reason"],
            stateful_consent=form.cleaned_data["stateful_consent"],
            client_address=client_ip(request),
        )
    except PermissionDenied as exc:
        return _refuse(request, str(exc) or "Not allowed.", 403)
    except OperationRefused as exc:
        return _refuse(request, f"The deploy cannot be requested: {exc}", 409)
    except EngineError as exc:
        return _refuse(request, f"S3 could not be read: {exc}", 502)
    messages.success(request, f"Requested operation #{op.pk}: deploy of {op.stack_name}.")
    return redirect("operation", op_id=op.pk)


@require_GET
def deploy_plan_json(request: AuthedRequest, plan_id: int) -> HttpResponse:
    """The plan as `cdkd diff --json` prints it (one node, with `plan`), masked."""
    plan = _load_plan(request, plan_id)
    body = json.dumps([deploynew.shown_document(plan)], indent=2, ensure_ascii=False) + "\n"
    response = HttpResponse(body, content_type="application/json")
    response["Cache-Control"] = "no-store, private"
    return response
