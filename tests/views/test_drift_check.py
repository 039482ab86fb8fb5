"""Check drift now refuses, before anything is queued or audited, a record it cannot check:
the page and the API answer 409 with the same reason (stacks.drift.request_check)."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from stacks.models import AuditEvent, Membership, Role
from tests.api.conftest import call, token_for
from tests.views.conftest import make_account, make_stack, make_user

pytestmark = pytest.mark.django_db

A = "111111111111"


@pytest.fixture
def olivia():
    account = make_account(A, "prod")
    make_stack(account, "Old", region=None, legacy=True)
    user = make_user("olivia")
    Membership.objects.create(user=user, account=account, role=Role.OPERATOR)
    return user


def test_it_refuses_a_legacy_record_on_the_page_and_through_the_api(olivia, sync_queue):
    client = Client()
    client.force_login(olivia)

    page = client.post(reverse("stack_drift_check", args=[A, "legacy", "Old"]))
    api = call("POST", f"/api/v1/stacks/{A}/legacy/Old/drift-check", token_for(olivia), {})

    assert page.status_code == 409 and b"no drift baseline" in page.content
    assert api.status_code == 409 and "no drift baseline" in json.loads(api.content)["message"]
    assert sync_queue.get_job_ids() == []
    assert not AuditEvent.objects.filter(action="drift.check-requested").exists()
