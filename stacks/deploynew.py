"""Making a deploy plan and requesting it: the steps the "Plan a deploy" pages
(stacks.views.deploy) and the API (stacks.api.deploy) share, so a plan made from a script
is the same row, with the same checks, as one made in the browser.

`make_plan` takes a fresh upload or a stored assembly's digest, plans one of its stacks
against the live record (`deployplan.plan_assembly`: reads only) and stores the masked plan
as a `DeployPlan`; an assembly of several stacks with none named is stored and answered with
its stack names (`Choice`). `request_deploy` turns a plan into an Operation of kind
`deploy` whose approval binds to the plan's digest, the assembly and the record's ETag.
Every refusal of the input is a `Refused` with the status it means; the planner's own
`AssemblyError`/`ParameterError` (400) and `EngineError` (502) pass through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.template.defaultfilters import filesizeformat

from engine.deploy.assembly import Assembly as AssemblyFiles
from engine.deploy.plan import StackPlan
from engine.deploy.render import walk
from engine.deploy.run import STATEFUL_CONSENT
from stacks import actions, deployplan, operations
from stacks.forms import one_line
from stacks.models import Account, Assembly, DeployPlan, Operation, OperationKind, Stack
from stacks.secretmask import flagged_paths


class Refused(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass
class Choice:
    """The assembly holds several stacks and none was named: it is stored, so the next
    call names one of `stacks` with `assembly` (its digest)."""

    assembly: Assembly
    stacks: list[str]


def visible_assemblies(user, account: Account):
    """Assemblies this person uploaded, or that a plan on this account used: another
    team's templates are not theirs to browse."""
    query = Assembly.objects.filter(Q(uploaded_by=user) | Q(plans__account=account)).distinct()
    return query.order_by("-created_at", "-id")


def open_assembly(user, account: Account, *, upload: Any, digest: str) -> tuple[Assembly | None, AssemblyFiles]:
    """The stored row (None for a new upload, stored once it is used) and the files.
    `upload` is a Django UploadedFile or None; its size is checked before it is read."""
    limit = settings.CDKD_ASSEMBLY_MAX_BYTES
    if upload is not None:
        if upload.size > limit:
            raise Refused(
                f"{upload.name} is {filesizeformat(upload.size)}, over the limit of {filesizeformat(limit)}", 413
            )
        return None, deployplan.read_upload(upload.read(limit + 1), name=upload.name or "assembly.zip")
    digest = (digest or "").strip()
    if not digest:
        raise Refused("Upload a zip of a synthesized cdk.out, or pick an assembly already stored.")
    row = visible_assemblies(user, account).filter(digest=digest).first()
    if row is None:
        raise Refused("No stored assembly with that digest is available to you.", 404)
    return row, deployplan.load_stored(row)


def make_plan(
    user,
    account: Account,
    stack: Stack | None,
    *,
    upload: Any = None,
    digest: str = "",
    name: str = "",
    region: str = "",
    overrides: dict[str, str] | None = None,
    recursive: bool = False,
    actor: str,
) -> DeployPlan | Choice:
    """Plan `name` of the assembly (the stack's own name when `stack` is given; the only
    stack when the assembly holds one) on `account`, and store the plan."""
    row, files = open_assembly(user, account, upload=upload, digest=digest)
    if not files.stacks:
        raise Refused("The assembly holds no stack (no aws:cloudformation:stack artifact in its manifest).")
    upload_name = getattr(upload, "name", "") or ""
    name = stack.stack_name if stack else (name or "").strip()
    if not name and len(files.stacks) == 1:
        name = files.stacks[0].stack_name
    if not name:
        # Stored now, so the next step only chooses the stack.
        row = row or deployplan.store_assembly(files, user=user, name=upload_name)
        return Choice(row, [s.stack_name for s in files.stacks])
    (plan,) = deployplan.plan_assembly(
        account,
        files,
        [name],
        actor=actor,
        stack_region=(stack.region if stack else (region or "").strip()) or None,
        overrides=overrides or {},
        recursive=recursive,
    )
    if stack is not None and plan.plan["stateKey"] != stack.key:
        raise Refused(f"the assembly's {name} plans {plan.plan['stateKey']}, not this stack's {stack.key}")
    if stack is None:
        # Planned from the account: the stack page's rule for a record it already mirrors
        # (a newer schema, a damaged record), before anything is stored.
        mirror = Stack.objects.filter(account=account, key=plan.plan.get("stateKey") or "").first()
        why = mirror and actions.why_not(mirror, OperationKind.DEPLOY)
        if why:
            raise Refused(why, 409)
    row = row or deployplan.store_assembly(files, user=user, name=upload_name)
    return _save(user, account, row, plan, overrides or {}, recursive)


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


def _save(user, account: Account, row: Assembly, plan: StackPlan, overrides: dict, recursive: bool) -> DeployPlan:
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
        parameters=overrides,
        recursive=recursive,
        has_changes=plan.has_changes,
        blocking_count=len({r for p in walk([plan]) for r in p.blocking}),
        created_by=user,
    )


def shown_document(plan: DeployPlan) -> dict[str, Any]:
    """The stored (masked) document, masked again with what the scan flags today."""
    return deployplan.mask_plan_document(plan.document)


def blocking(document: dict[str, Any]) -> list[str]:
    """Every blocking reason of the plan and its nested children, once each."""
    found: list[str] = []

    def visit(node: dict[str, Any]) -> None:
        found.extend((node.get("plan") or {}).get("blocking") or [])
        for child in node.get("children") or []:
            if isinstance(child, dict):
                visit(child)

    visit(document)
    return list(dict.fromkeys(found))


def needs_consent(reasons: list[str]) -> bool:
    return any(r.endswith(STATEFUL_CONSENT) for r in reasons)


def requestable(reasons: list[str]) -> bool:
    """Only a stateful replacement, which an explicit consent lifts, may stand between a
    plan and its request."""
    return all(r.endswith(STATEFUL_CONSENT) for r in reasons)


def request_deploy(
    user,
    plan: DeployPlan,
    *,
    reason: str = "",
    stateful_consent: bool = False,
    client_address: str | None = None,
    via: str = "web",
) -> Operation:
    """Request the deploy of `plan` (the pipeline checks the role, plans again and
    compares, audits and queues per the account's policy)."""
    params = {
        "account": plan.account.account_id,
        "assembly_digest": plan.assembly.digest,
        "parameters": plan.parameters or {},
        "deploy_plan": plan.pk,
        "deploy_plan_digest": plan.digest,
        "deploy_plan_etag": plan.state_etag,
        "stateful_consent": bool(stateful_consent),
    }
    return operations.request_operation(
        user,
        plan.account,
        OperationKind.DEPLOY,
        plan.stack_name,
        plan.region,
        params,
        client_address=client_address,
        reason=one_line(reason),  # shown to approvers and kept in the audit, as for every kind
        via=via,
    )
