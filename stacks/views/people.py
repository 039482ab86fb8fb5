"""An account's settings: the approval policy per operation kind and the people with a role
on it, with each one's reveal right (download a record's stored bytes unmasked; admins hold
it by role). Only the account's admins (and superusers) see or change them: others with a role get
403, outsiders 404. Every change is recorded in the audit log."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from stacks import audit, operations
from stacks.access import get_account_or_404, has_role
from stacks.forms import MemberAddForm, MemberRevealForm, MemberRoleForm, PolicyForm
from stacks.models import Account, ApprovalPolicy, Membership, OperationKind, min_approvers
from stacks.views.common import AuthedRequest
from stacks.views.operations import refusal


def _admin_account(request: AuthedRequest, account_id: str) -> Account | HttpResponse:
    """The account, or the 403 page; 404 (raised) for an account the person cannot see."""
    account = get_account_or_404(request.user, account_id)
    if not has_role(request.user, account, "admin"):
        return refusal(request, f"Only an admin of {account} can change its approval policy and people.", 403)
    return account


def _record(request: AuthedRequest, action: str, account: Account, result: str, kind: str = "") -> None:
    audit.record(
        action,
        actor=request.user.get_username(),
        actor_user=request.user,
        account=account,
        operation_kind=kind,
        result="ok",
        details={"change": result},
        client_address=audit.client_ip(request),
    )


def _settings_page(
    request: AuthedRequest,
    account: Account,
    *,
    status: int = 200,
    policy_form: PolicyForm | None = None,
    add_form: MemberAddForm | None = None,
) -> HttpResponse:
    rows = {p.kind: p for p in ApprovalPolicy.objects.filter(account=account)}
    # What `operations.policy_for` applies: the row (or one approver, 24 hours) raised to the floor.
    effective = {kind: operations.policy_for(account, kind) for kind in OperationKind}
    policies = [
        {
            "kind": kind,
            "row": rows.get(kind),
            "required": effective[kind].approval_required,
            "needed": effective[kind].approvers_needed,
            "hours": rows[kind].validity_hours if kind in rows else 24,
            "floor": min_approvers(kind),
        }
        for kind in OperationKind
    ]
    context = {
        "account": account,
        "policies": policies,
        "policy_form": policy_form,
        "members": Membership.objects.filter(account=account).select_related("user").order_by("user__username"),
        "add_form": add_form or MemberAddForm(),
        "role_form": MemberRoleForm(),
    }
    return render(request, "stacks/account_settings.html", context, status=status)


@never_cache
@require_GET
def account_settings(request: AuthedRequest, account_id: str) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    return _settings_page(request, account)


@require_POST
def account_policy(request: AuthedRequest, account_id: str) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    form = PolicyForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The policy was not saved: check the values below.")
        return _settings_page(request, account, status=400, policy_form=form)
    data = form.cleaned_data
    with transaction.atomic():
        ApprovalPolicy.objects.update_or_create(
            account=account,
            kind=data["kind"],
            defaults={
                "approval_required": data["approval_required"],
                "approvers_needed": data["approvers_needed"],
                "validity_hours": data["validity_hours"],
            },
        )
        if data["approval_required"]:
            summary = f"{data['kind']}: {data['approvers_needed']}x {data['validity_hours']}h"
        else:
            summary = f"{data['kind']}: no approval"
        _record(request, "policy.changed", account, summary, kind=data["kind"])
    messages.success(request, f"Saved the policy for {OperationKind(data['kind']).label.lower()} on {account}.")
    return redirect("account_settings", account_id=account.account_id)


@require_POST
def account_member_add(request: AuthedRequest, account_id: str) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    form = MemberAddForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give a username and a role.")
        return _settings_page(request, account, status=400, add_form=form)
    username, role = form.cleaned_data["username"].strip(), form.cleaned_data["role"]
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        messages.error(request, f"No person is called {username!r}.")
        return _settings_page(request, account, status=400, add_form=form)
    with transaction.atomic():
        membership, created = Membership.objects.get_or_create(user=user, account=account, defaults={"role": role})
        if created:
            _record(request, "membership.changed", account, f"{username}: none->{role}")
    if not created:
        messages.error(request, f"{username} already is {membership.role} on {account}; change the role below.")
        return _settings_page(request, account, status=409, add_form=form)
    messages.success(request, f"{username} is now {role} on {account}.")
    return redirect("account_settings", account_id=account.account_id)


def _membership(request: AuthedRequest, account: Account, membership_id: int) -> Membership:
    return get_object_or_404(Membership.objects.select_related("user"), pk=membership_id, account=account)


def _own(request: AuthedRequest, membership: Membership) -> bool:
    """An admin does not change their own role here (they could lock everyone out)."""
    return membership.user_id == request.user.pk and not request.user.is_superuser


@require_POST
def account_member_change(request: AuthedRequest, account_id: str, membership_id: int) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    membership = _membership(request, account, membership_id)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose one of the roles.")
        return _settings_page(request, account, status=400)
    if _own(request, membership):
        messages.error(request, "You cannot change your own role; ask another admin.")
        return _settings_page(request, account, status=400)
    old, new = membership.role, form.cleaned_data["role"]
    if old != new:
        with transaction.atomic():
            membership.role = new
            membership.save(update_fields=["role"])
            _record(request, "membership.changed", account, f"{membership.user.get_username()}: {old}->{new}")
    messages.success(request, f"{membership.user.get_username()} is now {new} on {account}.")
    return redirect("account_settings", account_id=account.account_id)


@require_POST
def account_member_remove(request: AuthedRequest, account_id: str, membership_id: int) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    membership = _membership(request, account, membership_id)
    if _own(request, membership):
        messages.error(request, "You cannot remove yourself; ask another admin.")
        return _settings_page(request, account, status=400)
    username, old = membership.user.get_username(), membership.role
    with transaction.atomic():
        membership.delete()
        _record(request, "membership.changed", account, f"{username}: {old}->none")
    messages.success(request, f"{username} no longer has a role on {account}.")
    return redirect("account_settings", account_id=account.account_id)


@require_POST
def account_member_reveal(request: AuthedRequest, account_id: str, membership_id: int) -> HttpResponse:
    """Grant or withdraw a member's reveal right (admins hold it by role whatever this says)."""
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    membership = _membership(request, account, membership_id)
    form = MemberRevealForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, account, status=400)
    new = form.cleaned_data["can_reveal"]
    name = membership.user.get_username()
    if membership.can_reveal != new:
        with transaction.atomic():
            membership.can_reveal = new
            membership.save(update_fields=["can_reveal"])
            _record(request, "membership.changed", account, f"{name}: reveal {'granted' if new else 'withdrawn'}")
    messages.success(request, f"{name} {'may' if new else 'may no longer'} reveal stored records of {account}.")
    return redirect("account_settings", account_id=account.account_id)
