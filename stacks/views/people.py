"""An account's settings: the approval policy per operation kind, the people with a role
on it, with each one's reveal right (download a record's stored bytes unmasked; admins hold
it by role), and the group rules that give single sign-on people roles. Only the account's
admins (and superusers) see or change them: others with a role get 403, outsiders 404.
Every change is recorded in the audit log.

A role granted here and a role from group rules are kept apart (`Membership.combine`): the
page edits the grant, rules edit theirs, and the person holds the higher of the two."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from stacks import audit, grouproles, operations
from stacks.access import get_account_or_404, has_role
from stacks.forms import MemberAddForm, MemberRevealForm, MemberRoleForm, PolicyForm
from stacks.models import (
    Account,
    ApprovalPolicy,
    GroupRoleRule,
    Membership,
    MembershipSource,
    OperationKind,
    Role,
    min_approvers,
)
from stacks.views.common import AuthedRequest
from stacks.views.operations import refusal


class GroupRuleForm(forms.Form):
    """A group rule from the settings page: this account, or (superusers) a name pattern."""

    group = forms.CharField(max_length=255, strip=True)
    role = forms.ChoiceField(choices=Role.choices)
    account_pattern = forms.CharField(max_length=200, required=False, strip=True)

    def clean_group(self) -> str:
        group = self.cleaned_data["group"]
        if any(ord(c) < 32 or ord(c) == 127 for c in group):
            raise forms.ValidationError("The group name holds a control character.")
        return group

    def clean_account_pattern(self) -> str:
        pattern = self.cleaned_data["account_pattern"]
        if any(ord(c) < 32 or ord(c) == 127 for c in pattern):
            raise forms.ValidationError("The account pattern holds a control character.")
        return pattern


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
    rule_form: GroupRuleForm | None = None,
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
        "rules": [r for r in GroupRoleRule.objects.select_related("account") if r.matches(account)],
        "rule_form": rule_form or GroupRuleForm(),
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
        elif membership.source == MembershipSource.RULE:
            # Only rules held it: the grant is added beside them.
            old = membership.role
            membership.combine(role, membership.rule_role)
            membership.save(update_fields=["role", "source", "granted_role", "rule_role"])
            change = f"{username}: {old}->{membership.role}"
            _record(request, "membership.changed", account, change + _granted_note(membership, role))
            created = True
    if not created:
        messages.error(request, f"{username} already is {membership.role} on {account}; change the role below.")
        return _settings_page(request, account, status=409, add_form=form)
    messages.success(request, f"{username} is now {role} on {account}.")
    return redirect("account_settings", account_id=account.account_id)


def _granted_note(membership: Membership, granted: str) -> str:
    """Where a group rule holds the person above the grant, the log says what was granted."""
    return f" (granted {granted})" if membership.role != granted else ""


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
    old, granted = membership.role, form.cleaned_data["role"]
    if membership.manual_role != granted:
        with transaction.atomic():
            membership.combine(granted, membership.rule_role)
            membership.save(update_fields=["role", "source", "granted_role", "rule_role"])
            change = f"{membership.user.get_username()}: {old}->{membership.role}"
            _record(request, "membership.changed", account, change + _granted_note(membership, granted))
    messages.success(request, f"{membership.user.get_username()} is now {membership.role} on {account}.")
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
        if membership.rule_role:
            # The grant goes; what the person's groups give stays until the rules say otherwise.
            membership.combine("", membership.rule_role)
            membership.save(update_fields=["role", "source", "granted_role", "rule_role"])
            _record(request, "membership.changed", account, f"{username}: {old}->{membership.role} (grant removed)")
        else:
            membership.delete()
            _record(request, "membership.changed", account, f"{username}: {old}->none")
    if membership.rule_role:
        messages.success(request, f"Removed the grant: {username} stays {membership.role} on {account} by group rules.")
    else:
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


# --- group rules ---------------------------------------------------------------------------


def _rule_audit(request: AuthedRequest, rule: GroupRoleRule, verb: str, account: Account) -> None:
    audit.record(
        "group_rule.changed",
        actor=request.user.get_username(),
        actor_user=request.user,
        # A pattern rule reaches many accounts: it is logged site-wide, each role it moves per account.
        account=rule.account if rule.account_id else None,
        result="ok",
        details={"change": f"{verb} {rule.group} -> {rule.role} on {rule.target}", "from_account": account.account_id},
        client_address=audit.client_ip(request),
    )


@require_POST
def account_rule_add(request: AuthedRequest, account_id: str) -> HttpResponse:
    """A rule for this account; a pattern rule (many accounts, some not this admin's) needs a superuser."""
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    form = GroupRuleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The group rule was not added: give a group name and a role.")
        return _settings_page(request, account, status=400, rule_form=form)
    group, role, pattern = (form.cleaned_data[k] for k in ("group", "role", "account_pattern"))
    if pattern and not request.user.is_superuser:
        messages.error(request, "Only a superuser can add a rule for every account matching a pattern.")
        return _settings_page(request, account, status=403, rule_form=form)
    duplicate = GroupRoleRule.objects.filter(group=group)
    duplicate = duplicate.filter(account_pattern=pattern) if pattern else duplicate.filter(account=account)
    if duplicate.exists():
        messages.error(request, f"{group} already has a rule for {pattern or account}; remove it first.")
        return _settings_page(request, account, status=409, rule_form=form)
    with transaction.atomic():
        rule = GroupRoleRule.objects.create(
            group=group,
            role=role,
            account=None if pattern else account,
            account_pattern=pattern,
            created_by=request.user.get_username(),
        )
        _rule_audit(request, rule, "added", account)
        changed = grouproles.refresh_everyone(reason=f"rule added by {request.user.get_username()}")
    messages.success(request, f"People in {group} are now {role} on {rule.target} ({changed} role change(s) now).")
    return redirect("account_settings", account_id=account.account_id)


@require_POST
def account_rule_remove(request: AuthedRequest, account_id: str, rule_id: int) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    rule = get_object_or_404(GroupRoleRule.objects.select_related("account"), pk=rule_id)
    if not rule.matches(account):
        return _settings_page(request, account, status=404)
    if rule.account_pattern and not request.user.is_superuser:
        messages.error(request, "Only a superuser can remove a rule for every account matching a pattern.")
        return _settings_page(request, account, status=403)
    with transaction.atomic():
        _rule_audit(request, rule, "removed", account)
        rule.delete()
        changed = grouproles.refresh_everyone(reason=f"rule removed by {request.user.get_username()}")
    messages.success(
        request, f"Removed the rule {rule.group} -> {rule.role} on {rule.target} ({changed} role change(s))."
    )
    return redirect("account_settings", account_id=account.account_id)
