from __future__ import annotations

from unittest import mock

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from stacks import sync
from stacks.models import SyncRun, SyncStatus
from tests.views.conftest import make_lock, make_stack

pytestmark = pytest.mark.django_db


def test_it_lists_visible_accounts_with_bucket_and_counts(alice_client, prod, dev):
    prod.bucket_source = "default-legacy"
    prod.resolved_bucket = "cdkd-state-111111111111-us-east-1"
    prod.bucket_message = "Legacy bucket name: migrate to cdkd-state-111111111111"
    prod.save()
    make_lock(make_stack(prod, "web"))
    make_stack(prod, "api", defects=[{"code": "x", "path": "", "message": "m"}])
    response = alice_client.get(reverse("accounts"))
    content = response.content.decode()
    assert response.status_code == 200
    assert "cdkd-state-111111111111-us-east-1" in content
    assert "Legacy bucket name: migrate to cdkd-state-111111111111" in content
    accounts = {a.account_id: a for a in response.context["accounts"]}
    assert accounts[prod.account_id].stack_count == 2
    assert accounts[prod.account_id].defect_count == 1
    assert accounts[prod.account_id].live_lock_count == 1
    assert accounts[dev.account_id].stack_count == 0


def test_it_shows_outsiders_no_accounts(client, charlie, prod):
    client.force_login(charlie)
    response = client.get(reverse("accounts"))
    assert prod.account_id not in response.content.decode()


def test_it_queues_a_sync_and_shows_its_progress(alice_client, alice):
    run = SyncRun.objects.create(requested_by=alice)
    with mock.patch.object(sync, "request_sync", autospec=True, return_value=run) as request_sync:
        response = alice_client.post(reverse("sync"))
    request_sync.assert_called_once_with(alice, account=None)
    assert response.status_code == 302
    assert response.url == reverse("sync_status", args=[run.pk])


def test_it_queues_a_sync_of_one_account(alice_client, alice, prod):
    run = SyncRun.objects.create(requested_by=alice, account=prod)
    with mock.patch.object(sync, "request_sync", autospec=True, return_value=run) as request_sync:
        response = alice_client.post(reverse("sync"), {"account": prod.account_id}, headers={"HX-Request": "true"})
    request_sync.assert_called_once_with(alice, account=prod)
    assert response.status_code == 200
    assert f'hx-get="{reverse("sync_status", args=[run.pk])}"'.encode() in response.content
    assert b'role="progressbar"' in response.content


def test_it_refuses_a_sync_of_an_invisible_account(client, bob, prod):
    client.force_login(bob)
    with mock.patch.object(sync, "request_sync", autospec=True) as request_sync:
        response = client.post(reverse("sync"), {"account": prod.account_id})
    assert response.status_code == 404
    request_sync.assert_not_called()


def test_it_maps_permission_denied_from_sync_to_404(alice_client, prod):
    with mock.patch.object(sync, "request_sync", autospec=True, side_effect=PermissionDenied):
        assert alice_client.post(reverse("sync"), {"account": prod.account_id}).status_code == 404


def test_it_refuses_get_on_sync(alice_client):
    assert alice_client.get(reverse("sync")).status_code == 405


def test_it_keeps_polling_a_running_sync(alice_client, alice):
    run = SyncRun.objects.create(requested_by=alice, status=SyncStatus.RUNNING, total=10, done=4)
    response = alice_client.get(reverse("sync_status", args=[run.pk]), headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert b'aria-valuenow="40"' in response.content
    assert b'hx-trigger="every 1s"' in response.content


def test_it_stops_polling_a_finished_sync(alice_client, alice, prod):
    run = SyncRun.objects.create(
        requested_by=alice,
        status=SyncStatus.PARTIAL,
        result={
            "accounts": [
                {
                    "account": prod.account_id,
                    "listed": 3,
                    "fetched": 1,
                    "unchanged": 2,
                    "removed": 0,
                    "errors": ["boom on key"],
                }
            ]
        },
    )
    response = alice_client.get(reverse("sync_status", args=[run.pk]), headers={"HX-Request": "true"})
    assert response.status_code == 286
    assert b"hx-trigger" not in response.content
    assert b"boom on key" in response.content


def test_it_shows_the_sync_page_without_htmx(alice_client, alice):
    run = SyncRun.objects.create(requested_by=alice)
    response = alice_client.get(reverse("sync_status", args=[run.pk]))
    assert response.status_code == 200
    assert b"<html" in response.content
    assert b'http-equiv="refresh"' in response.content


def test_it_hides_other_peoples_syncs(client, alice, bob, prod):
    everyone = SyncRun.objects.create(requested_by=alice)
    prod_only = SyncRun.objects.create(requested_by=alice, account=prod)
    client.force_login(bob)
    assert client.get(reverse("sync_status", args=[everyone.pk])).status_code == 404
    assert client.get(reverse("sync_status", args=[prod_only.pk])).status_code == 404


def test_it_shows_a_running_sync_on_the_stacks_page(alice_client, alice):
    run = SyncRun.objects.create(requested_by=alice, status=SyncStatus.RUNNING)
    response = alice_client.get(reverse("stacks"))
    assert f'id="sync-run-{run.pk}"'.encode() in response.content
