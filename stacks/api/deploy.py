"""Deploys and the account's own operations from a script: plan a deploy (a zip of a
synthesized `cdk.out`, or a stored assembly's digest), read the plan, request it; and
request `state migrate`.

The steps are the Plan-a-deploy pages' (`stacks.deploynew`: the same plan row, the same
checks) and the state-migrate page's; the order of refusals is the pages' (404 no role,
403 role too low, 409 refused now). A plan is computed by reading S3 only; the request is
planned again by the pipeline, which binds the approval to the plan's digest.
"""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from ninja import File, Form, Path, Router, UploadedFile

from engine.deploy.assembly import AssemblyError
from engine.deploy.intrinsics import ParameterError, parse_overrides
from engine.masking import MASK
from engine.secrets import secret_name
from stacks import actions, deploynew, operations
from stacks.access import get_account_or_404, has_role, role_on
from stacks.api.common import ApiError, mutation, target
from stacks.api.operations import WRITE_ERRORS, operation_detail
from stacks.api.schemas import (
    ACCOUNT_PATTERN,
    DeployPlanIn,
    DeployPlanOut,
    DeployRequestIn,
    ErrorOut,
    OperationDetailOut,
    StateMigrateIn,
)
from stacks.audit import client_ip
from stacks.forms import StateMigrateForm
from stacks.models import DeployPlan, OperationKind, Role

router = Router(tags=["deploy"])
READ_ERRORS = {401: ErrorOut, 404: ErrorOut, 422: ErrorOut}
PLAN_ERRORS = {**WRITE_ERRORS, 413: ErrorOut}


def plan_out(plan: DeployPlan) -> dict[str, Any]:
    document = deploynew.shown_document(plan)
    reasons = deploynew.blocking(document)
    return {
        "id": plan.pk,
        "account_id": plan.account.account_id,
        "stack_name": plan.stack_name,
        "region": plan.region,
        "state_key": plan.state_key,
        "state_etag": plan.state_etag,
        "digest": plan.digest,
        "assembly_digest": plan.assembly.digest,
        "has_changes": plan.has_changes,
        "blocking": reasons,
        "needs_consent": deploynew.needs_consent(reasons),
        "requestable": deploynew.requestable(reasons),
        "parameters": {k: (MASK if secret_name(k) else str(v)) for k, v in (plan.parameters or {}).items()},
        "created_by": plan.created_by.get_username() if plan.created_by else "",
        "created_at": plan.created_at,
        "document": document,
    }


def _plan(request, account_id: str, body: DeployPlanIn, upload) -> tuple[int, dict]:
    user = request.user
    account = get_account_or_404(user, account_id)
    target(request, account=account)
    if not has_role(user, account, Role.OPERATOR):
        raise ApiError(403, f"Planning a deploy needs the operator role on {account.label}.")
    try:
        overrides = parse_overrides(body.parameters)
        result = deploynew.make_plan(
            user,
            account,
            None,
            upload=upload,
            digest=body.assembly,
            name=body.stack,
            region=body.region,
            overrides=overrides,
            recursive=body.recursive,
            actor=user.get_username(),
        )
    except deploynew.Refused as exc:
        raise ApiError(exc.status, exc.message) from exc
    except (AssemblyError, ParameterError) as exc:
        raise ApiError(400, str(exc)) from exc
    if not isinstance(result, deploynew.Choice):
        target(request, account=account, stack_name=result.stack_name, region=result.region)
    if isinstance(result, deploynew.Choice):
        names = ", ".join(result.stacks)
        raise ApiError(
            400,
            f"The assembly holds {len(result.stacks)} stacks ({names}): name one in `stack`; "
            f"it is stored as assembly {result.assembly.digest}.",
        )
    return 201, plan_out(result)


@router.post(
    "/accounts/{account_id}/deploy-plans",
    response={201: DeployPlanOut, **PLAN_ERRORS},
    summary="Plan a deploy: cdkd's diff of one stack of an assembly against its live record",
    description=(
        "multipart/form-data: `assembly_file` (a zip of a synthesized cdk.out) or `assembly` (a stored "
        "assembly's digest), and the stack to plan. Reads S3 only; the plan is stored and can be requested."
    ),
)
def create_deploy_plan(
    request,
    body: Form[DeployPlanIn],
    account_id: str = Path(..., pattern=ACCOUNT_PATTERN),
    assembly_file: File[UploadedFile] = None,
):
    return mutation(request, "deploy.plan", lambda: _plan(request, account_id, body, assembly_file))


def _load_plan(request, plan_id: int) -> DeployPlan:
    plan = get_object_or_404(DeployPlan.objects.select_related("account", "assembly", "created_by"), pk=plan_id)
    if role_on(request.user, plan.account) is None:
        raise ApiError(404, "No such plan.")
    return plan


PlanId = Path(..., ge=1, le=2**63 - 1)


@router.get("/deploy-plans/{plan_id}", response={200: DeployPlanOut, **READ_ERRORS}, summary="One deploy plan")
def get_deploy_plan(request, plan_id: int = PlanId):
    return plan_out(_load_plan(request, plan_id))


def _request_deploy(request, plan_id: int, body: DeployRequestIn) -> tuple[int, dict]:
    plan = _load_plan(request, plan_id)
    target(request, account=plan.account, stack_name=plan.stack_name, region=plan.region)
    op = deploynew.request_deploy(
        request.user,
        plan,
        reason=body.reason,
        stateful_consent=body.stateful_consent,
        client_address=client_ip(request),
        via="api",
    )
    target(request, operation=op)
    return 201, operation_detail(request.user, op)


@router.post(
    "/deploy-plans/{plan_id}/request",
    response={201: OperationDetailOut, **WRITE_ERRORS},
    summary="Request the deploy of a plan; the approval binds to the plan's digest",
)
def request_deploy(request, body: DeployRequestIn, plan_id: int = PlanId):
    return mutation(request, "deploy.request", lambda: _request_deploy(request, plan_id, body))


def _state_migrate(request, account_id: str, body: StateMigrateIn) -> tuple[int, dict]:
    user = request.user
    account = get_account_or_404(user, account_id)
    target(request, account=account)
    if not has_role(user, account, Role.OPERATOR):
        raise ApiError(403, f"You need the operator role on {account} to request this.")
    why = actions.migrate_why_not(account)
    if why:
        raise ApiError(409, why)
    data = body.dict()
    data["region"] = data["region"] or actions.migrate_region(account)
    form = StateMigrateForm(data)
    if not form.is_valid():
        raise ApiError(400, " ".join(e for errors in form.errors.values() for e in errors))
    params = form.params()
    if params["remove_legacy"] and not body.confirm_remove:
        raise ApiError(400, "Set confirm_remove as well: removing the legacy bucket and its history cannot be undone.")
    op = operations.request_operation(
        user,
        account,
        OperationKind.STATE_MIGRATE,
        "",
        form.cleaned_data["region"],
        params,
        client_address=client_ip(request),
        reason=form.cleaned_data.get("reason") or "",
        via="api",
    )
    target(request, operation=op)
    return 201, operation_detail(user, op)


@router.post(
    "/accounts/{account_id}/state-migrate",
    response={201: OperationDetailOut, **WRITE_ERRORS},
    summary="Request `state migrate`: copy the legacy bucket's records into the account's bucket",
)
def request_state_migrate(request, body: StateMigrateIn, account_id: str = Path(..., pattern=ACCOUNT_PATTERN)):
    return mutation(request, "state-migrate.request", lambda: _state_migrate(request, account_id, body))
