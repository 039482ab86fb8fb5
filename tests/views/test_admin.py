from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from stacks.models import Account, DeploymentRun, EventIndex, Lock, Membership, Resource, Stack, SyncRun
from tests.views.conftest import make_lock, make_stack, record, resource_row

pytestmark = pytest.mark.django_db

MIRRORED = [Stack, Resource, Lock, EventIndex, DeploymentRun, SyncRun]


def test_it_registers_every_model():
    for model in [Account, Membership, *MIRRORED]:
        assert admin.site.is_registered(model), model


def test_it_makes_mirrored_models_read_only(rf, root):
    request = rf.get("/")
    request.user = root
    for model in MIRRORED:
        model_admin = admin.site._registry[model]
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model
    assert admin.site._registry[Account].has_change_permission(request)
    assert admin.site._registry[Membership].has_add_permission(request)


def test_it_renders_the_admin_lists(client, root, prod):
    stack = make_stack(prod, "web", data=record("web", resources={"B": resource_row()}))
    make_lock(stack)
    SyncRun.objects.create(requested_by=root)
    client.force_login(root)
    for model in [Account, Membership, *MIRRORED]:
        response = client.get(reverse(f"admin:stacks_{model._meta.model_name}_changelist"))
        assert response.status_code == 200, model
    assert client.get(reverse("admin:stacks_stack_change", args=[stack.pk])).status_code == 200
    assert client.get(reverse("admin:stacks_account_change", args=[prod.pk])).status_code == 200
