"""The confirmation page: preview the plan (GET), request it (POST).

FAKE ENGINE: `planned` (conftest) stands in for `compute_plan`."""

from __future__ import annotations

import pytest
from django.urls import reverse

from engine.errors import AccessDenied
from engine.operations import OperationRefused
from stacks import operations
from stacks.models import ApprovalPolicy, AuditEvent, Operation, OperationStatus
from tests.operations_ui.conftest import ETAG, fake_plan, login
from tests.views.conftest import make_lock

pytestmark = pytest.mark.django_db


def new_url(stack, kind: str) -> str:
    return reverse("operation_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name, kind])


def test_it_previews_an_orphan_plan(client, olivia, web, planned):
    response = login(client, olivia).get(new_url(web, "orphan"))
    content = response.content.decode()
    assert response.status_code == 200
    assert planned == [("111111111111", "orphan", "web", "us-east-1", {"force": False}, "olivia")]
    assert "The AWS resources are not touched." in content
    assert "orphan web" in content  # summary
    assert "delete web/us-east-1/state.json" in content  # every change
    assert "a fake plan (tests)" in content  # warnings
    assert ETAG.replace('"', "&quot;") in content
    assert fake_plan("orphan", "web", "us-east-1", {"force": False}).digest in content
    assert 'name="csrfmiddlewaretoken"' in content


def test_it_lets_an_operator_pick_resources_then_shows_every_rewrite(client, olivia, web, planned):
    login(client, olivia)
    picker = client.get(new_url(web, "orphan-resources"))
    assert picker.status_code == 200 and planned == []
    assert b'value="Queue"' in picker.content and b'value="Fn"' in picker.content
    response = client.get(new_url(web, "orphan-resources") + "?resources=Queue")
    content = response.content.decode()
    assert planned[0][4] == {"resources": ["Queue"], "force": False}
    text = content.replace("&quot;", '"')
    assert 'id="plan-rewrites"' in text and '<td class="mono small">Fn.Properties.Q</td>' in text
    assert '<td class="mono small diff-before">{"Ref": "Queue"}</td>' in text
    assert 'Fn.Properties.Q: {"Ref": "Queue"} -> "q-orders"\n' in text  # the text form, one per line
    assert "The AWS resources are not touched." in content


def test_it_refuses_an_unknown_logical_id_and_an_empty_pick(client, olivia, web, planned):
    login(client, olivia)
    assert client.get(new_url(web, "orphan-resources") + "?resources=Nope").status_code == 400
    assert client.get(new_url(web, "orphan-resources") + "?resources=").status_code == 400
    assert planned == []


def test_it_shows_a_refusal_in_one_line_and_offers_force(client, olivia, web, monkeypatch):
    refuse = OperationRefused("stack web is locked by carol@build-host:4242 (deploy) until 10:00")
    monkeypatch.setattr(operations, "compute_plan", lambda *a: (_ for _ in ()).throw(refuse))
    response = login(client, olivia).get(new_url(web, "orphan"))
    assert response.status_code == 409
    assert b"locked by carol@build-host:4242" in response.content
    assert b"Plan again with force" in response.content
    assert b'id="confirm"' not in response.content


def test_it_shows_an_aws_failure_as_502(client, olivia, web, monkeypatch):
    monkeypatch.setattr(
        operations, "compute_plan", lambda *a: (_ for _ in ()).throw(AccessDenied("s3:GetObject denied"))
    )
    response = login(client, olivia).get(new_url(web, "orphan"))
    assert response.status_code == 502
    assert b"s3:GetObject denied" in response.content


def test_it_requests_the_operation_and_records_it(client, olivia, web, planned):
    digest = fake_plan("orphan", "web", "us-east-1", {"force": False}).digest
    response = login(client, olivia).post(new_url(web, "orphan"), {"plan_digest": digest}, REMOTE_ADDR="10.0.0.7")
    op = Operation.objects.get()
    assert response.status_code == 302
    assert response.url == reverse("operation", args=[op.pk])
    assert (op.kind, op.stack_name, op.region, op.requested_by, op.status) == (
        "orphan",
        "web",
        "us-east-1",
        olivia,
        OperationStatus.AWAITING_APPROVAL,
    )
    assert op.plan_digest == digest and op.plan_etag == ETAG
    event = AuditEvent.objects.get(action="operation.requested")
    assert (event.actor, event.client_address, event.operation_id) == ("olivia", "10.0.0.7", op.pk)


def test_it_warns_when_the_plan_changed_since_the_preview(client, olivia, web, planned):
    response = login(client, olivia).post(new_url(web, "orphan"), {"plan_digest": "sha256:old"}, follow=True)
    assert b"The record changed after the preview" in response.content


def test_it_queues_at_once_when_the_policy_needs_no_approval(client, olivia, web, planned):
    ApprovalPolicy.objects.create(account=web.account, kind="orphan", approval_required=False)
    login(client, olivia).post(new_url(web, "orphan"))
    assert Operation.objects.get().status == OperationStatus.QUEUED


def test_it_refuses_viewers_with_403_and_outsiders_with_404(client, vera, otto, web, planned):
    assert login(client, vera).get(new_url(web, "orphan")).status_code == 403
    assert client.post(new_url(web, "orphan")).status_code == 403
    assert login(client, otto).get(new_url(web, "orphan")).status_code == 404
    assert client.post(new_url(web, "orphan")).status_code == 404
    assert planned == [] and not Operation.objects.exists()


def test_it_404s_an_unknown_kind(client, olivia, web, planned):
    assert login(client, olivia).get(new_url(web, "deploy")).status_code == 404


def test_it_asks_a_second_confirmation_for_an_unreadable_lock(client, olivia, web, planned):
    make_lock(web, readable=False, error="not JSON")
    login(client, olivia)
    preview = client.get(new_url(web, "force-unlock"))
    assert preview.status_code == 200
    assert b'name="confirm_unreadable"' in preview.content
    assert planned[0][4] == {"confirm_unreadable": True}  # planning is a read; the request needs the tick
    refused = client.post(new_url(web, "force-unlock"))
    assert refused.status_code == 400
    assert b"Tick the second confirmation" in refused.content
    assert not Operation.objects.exists()
    client.post(new_url(web, "force-unlock"), {"confirm_unreadable": "on"})
    assert Operation.objects.get().params == {"confirm_unreadable": True}


def test_it_needs_a_version_to_restore(client, olivia, web, planned):
    login(client, olivia)
    assert client.get(new_url(web, "restore")).status_code == 400
    response = client.get(new_url(web, "restore") + "?version_id=v1%2Fa%2Bb")
    assert response.status_code == 200
    assert planned[0][4] == {"version_id": "v1/a+b"}
    assert b'name="version_id" value="v1/a+b"' in response.content


def test_it_shows_actions_to_operators_only(client, olivia, vera, web):
    make_lock(web)
    page = login(client, olivia).get(reverse("stack", args=[web.account.account_id, "us-east-1", "web"]))
    for kind in ("force-unlock", "orphan", "orphan-resources"):
        assert new_url(web, kind).encode() in page.content
    page = login(client, vera).get(reverse("stack", args=[web.account.account_id, "us-east-1", "web"]))
    assert b"stack-operations" not in page.content


def test_it_maps_a_refusal_at_request_time_to_409(client, olivia, web, monkeypatch):
    monkeypatch.setattr(operations, "compute_plan", lambda *a: (_ for _ in ()).throw(OperationRefused("damaged")))
    response = login(client, olivia).post(new_url(web, "orphan"))
    assert response.status_code == 409 and b"damaged" in response.content
    assert not Operation.objects.exists()


def test_it_asks_the_second_confirmation_when_only_the_plan_sees_an_unreadable_lock(client, olivia, web, monkeypatch):
    plan = fake_plan("force-unlock", "web", "us-east-1")
    plan.data = {"unreadable": True}
    monkeypatch.setattr(operations, "compute_plan", lambda *a: plan)
    login(client, olivia)
    preview = client.get(new_url(web, "force-unlock"))
    assert b'name="confirm_unreadable"' in preview.content and b'name="unreadable_seen"' in preview.content
    assert client.post(new_url(web, "force-unlock"), {"unreadable_seen": "on"}).status_code == 400
    assert not Operation.objects.exists()


def test_it_offers_restore_on_the_history_page_to_operators_only(client, olivia, vera, web):
    from datetime import UTC, datetime
    from unittest import mock

    from engine.backend import VersionInfo
    from stacks import history

    versions = [
        VersionInfo(web.key, "v2", datetime(2024, 3, 20, tzinfo=UTC), 9, True, False, '"v2"'),
        VersionInfo(web.key, "v1/x", datetime(2024, 3, 19, tzinfo=UTC), 9, False, False, '"v1"'),
    ]
    history_url = reverse("stack_history", args=[web.account.account_id, "us-east-1", "web"])
    with mock.patch.object(history, "list_versions", autospec=True, return_value=versions):
        page = login(client, olivia).get(history_url).content.decode()
        assert page.count("Restore this version") == 1  # not for the latest
        assert new_url(web, "restore") + "?version_id=v1%2Fx" in page
        assert "Restore this version" not in login(client, vera).get(history_url).content.decode()
