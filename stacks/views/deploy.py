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
from django.db.models import Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import filesizeformat
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from engine.deploy.assembly import Assembly as AssemblyFiles
from engine.deploy.assembly import AssemblyError
from engine.deploy.intrinsics import ParameterError, parse_overrides
from engine.deploy.plan import StackPlan
from engine.deploy.render import walk
from engine.deploy.run import STATEFUL_CONSENT
from engine.errors import EngineError
from engine.masking import MASK
from engine.operations import OperationRefused
from engine.secrets import secret_name
from stacks import actions, deployplan, operations
from stacks.access import get_account_or_404, get_stack_or_404, has_role, role_on
from stacks.audit import client_ip
from stacks.models import Account, Assembly, DeployPlan, OperationKind, Role, Stack
from stacks.secretmask import flagged_paths
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


class Refused(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _visible_assemblies(request: AuthedRequest, account: Account):
    """Assemblies this person uploaded, or that a plan on this account used: another
    team's templates are not theirs to browse."""
    query = Assembly.objects.filter(Q(uploaded_by=request.user) | Q(plans__account=account)).distinct()
    return query.order_by("-created_at", "-id")


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
        "stored": _visible_assemblies(request, account)[:RECENT_ASSEMBLIES],
        "limit": settings.CDKD_ASSEMBLY_MAX_BYTES,
    }
    if request.method != "POST":
        return render(request, "stacks/plan_new.html", context)
    if not form.is_valid():
        context["error"] = " ".join(e for errors in form.errors.values() for e in errors)
        return render(request, "stacks/plan_new.html", context, status=400)
    try:
        row, files = _assembly(request, form, account)
        if not files.stacks:
            raise Refused("The assembly holds no stack (no aws:cloudformation:stack artifact in its manifest).")
        name = stack.stack_name if stack else form.cleaned_data["stack"].strip()
        if not name and len(files.stacks) == 1:
            name = files.stacks[0].stack_name
        if not name:
            # Stored now, so the second step only chooses the stack.
            context["picked"] = row or _store(request, form, files)
            context["choices"] = [s.stack_name for s in files.stacks]
            return render(request, "stacks/plan_new.html", context)
        region = (stack.region if stack else form.cleaned_data["region"].strip()) or None
        (plan,) = deployplan.plan_assembly(
            account,
            files,
            [name],
            actor=actor(request),
            stack_region=region,
            overrides=form.cleaned_data["parameters"],
            recursive=form.cleaned_data["recursive"],
        )
        if stack is not None and plan.plan["stateKey"] != stack.key:
            raise Refused(f"the assembly's {name} plans {plan.plan['stateKey']}, not this stack's {stack.key}")
    except Refused as exc:
        context["error"] = exc.message
        return render(request, "stacks/plan_new.html", context, status=exc.status)
    except (AssemblyError, ParameterError) as exc:
        context["error"] = str(exc)
        return render(request, "stacks/plan_new.html", context, status=400)
    except EngineError as exc:
        context["error"] = f"S3 could not be read: {exc}"
        return render(request, "stacks/plan_new.html", context, status=502)
    row = row or _store(request, form, files)
    saved = _save(request, account, row, plan, form.cleaned_data)
    return redirect("deploy_plan", plan_id=saved.pk)


def _assembly(request: AuthedRequest, form: PlanForm, account: Account) -> tuple[Assembly | None, AssemblyFiles]:
    """The stored row (None for a new upload, stored once it is used) and the files."""
    upload = form.cleaned_data["assembly_file"]
    limit = settings.CDKD_ASSEMBLY_MAX_BYTES
    if upload is not None:
        if upload.size > limit:
            raise Refused(
                f"{upload.name} is {filesizeformat(upload.size)}, over the limit of {filesizeformat(limit)}", 413
            )
        data = upload.read(limit + 1)
        return None, deployplan.read_upload(data, name=upload.name or "assembly.zip")
    digest = form.cleaned_data["assembly"].strip()
    if not digest:
        raise Refused("Upload a zip of a synthesized cdk.out, or pick an assembly already stored.")
    row = _visible_assemblies(request, account).filter(digest=digest).first()
    if row is None:
        raise Refused("No stored assembly with that digest is available to you.", 404)
    return row, deployplan.load_stored(row)


def _store(request: AuthedRequest, form: PlanForm, files: AssemblyFiles) -> Assembly:
    upload = form.cleaned_data["assembly_file"]
    return deployplan.store_assembly(files, user=request.user, name=getattr(upload, "name", "") or "")


def _known_secrets(account: Account, plan: StackPlan) -> list[str]:
    """Values the secret scan flagged in the records this plan read (to mask them
    wherever they appear in the plan)."""
    known: list[str] = []
    for node in walk([plan]):
        stack = Stack.objects.filter(account=account, key=node.plan.get("stateKey") or "").first()
        if stack is None:
            continue
        paths = flagged_paths(stack, None)
        if paths:
            try:
                data = json.loads(bytes(stack.body))
            except ValueError:
                continue
            known.extend(deployplan.flagged_values(data, paths))
    return known


def _save(request: AuthedRequest, account: Account, row: Assembly, plan: StackPlan, data: dict) -> DeployPlan:
    document = deployplan.mask_plan_document(plan.json_node(with_plan=True), known=_known_secrets(account, plan))
    return DeployPlan.objects.create(
        account=account,
        stack_name=plan.stack,
        region=plan.region,
        assembly=row,
        document=document,
        digest=plan.plan["digest"],
        state_key=plan.plan.get("stateKey") or "",
        state_etag=plan.plan.get("stateEtag") or "",
        state_version_id=plan.plan.get("stateVersionId") or "",
        parameters=data["parameters"],
        recursive=data["recursive"],
        has_changes=plan.has_changes,
        blocking_count=len({r for p in walk([plan]) for r in p.blocking}),
        created_by=request.user,
    )


# --- the plan page --------------------------------------------------------------------------


def _load_plan(request: AuthedRequest, plan_id: int) -> DeployPlan:
    plan = get_object_or_404(DeployPlan.objects.select_related("account", "assembly", "created_by"), pk=plan_id)
    if role_on(request.user, plan.account) is None:
        raise Http404("No such plan")
    return plan


def _shown_document(plan: DeployPlan) -> dict[str, Any]:
    """The stored (masked) document, masked again with what the scan flags today."""
    return deployplan.mask_plan_document(plan.document)


@require_GET
def deploy_plan(request: AuthedRequest, plan_id: int) -> HttpResponse:
    plan = _load_plan(request, plan_id)
    document = _shown_document(plan)
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
    context["can_request"] = context["can_plan"] and all(b.endswith(STATEFUL_CONSENT) for b in context["blocking"])
    context["needs_consent"] = any(b.endswith(STATEFUL_CONSENT) for b in context["blocking"])
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
    params = {
        "account": plan.account.account_id,
        "assembly_digest": plan.assembly.digest,
        "parameters": plan.parameters or {},
        "deploy_plan": plan.pk,
        "deploy_plan_digest": plan.digest,
        "deploy_plan_etag": plan.state_etag,
        "stateful_consent": form.cleaned_data["stateful_consent"],
    }
    try:
        op = operations.request_operation(
            request.user,
            plan.account,
            "deploy",
            plan.stack_name,
            plan.region,
            params,
            client_address=client_ip(request),
            reason=form.cleaned_data["reason"],  # shown to approvers and kept in the audit, as for every kind
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
    body = json.dumps([_shown_document(plan)], indent=2, ensure_ascii=False) + "\n"
    response = HttpResponse(body, content_type="application/json")
    response["Cache-Control"] = "no-store, private"
    return response
