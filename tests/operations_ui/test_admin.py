"""The Django admin: operations, approvals and the audit log read-only; policies editable."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from stacks import audit
from stacks.models import Approval, ApprovalPolicy, AuditEvent, Operation
from tests.operations_ui.conftest import login, make_operation

pytestmark = pytest.mark.django_db


def test_it_makes_operations_approvals_and_audit_read_only(rf, root):
    request = rf.get("/")
    request.user = root
    for model in (Operation, Approval, AuditEvent):
        model_admin = admin.site._registry[model]
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model
    assert "delete_selected" not in admin.site._registry[AuditEvent].get_actions(request)
    assert admin.site._registry[ApprovalPolicy].has_change_permission(request)


def test_it_renders_their_pages(client, root, olivia, arthur, prod):
    op = make_operation(prod, olivia)
    Approval.objects.create(operation=op, approver=arthur, approved=True, plan_digest=op.plan_digest)
    event = audit.record("operation.requested", actor="olivia", operation=op)
    ApprovalPolicy.objects.create(account=prod, kind="orphan")
    login(client, root)
    for model in (Operation, Approval, AuditEvent, ApprovalPolicy):
        assert client.get(reverse(f"admin:stacks_{model._meta.model_name}_changelist")).status_code == 200, model
    assert client.get(reverse("admin:stacks_operation_change", args=[op.pk])).status_code == 200
    assert client.get(reverse("admin:stacks_auditevent_change", args=[event.pk])).status_code == 200
    assert client.post(reverse("admin:stacks_auditevent_delete", args=[event.pk]), {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()
