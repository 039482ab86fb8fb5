"""Pages that say what happened and lead on: the sync card's counts and the account cards
sent along when it ends, the no-role page, the Exports page, links from the timeline and from
a record's imports, and the admin's "Event indexes". alice views prod and dev, bob dev only,
charlie has no role anywhere."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from stacks.consumers import mirror_imports
from stacks.models import SyncRun, SyncStatus
from tests.views.conftest import make_account, make_stack, record
from tests.views.test_events_pages import make_run

pytestmark = pytest.mark.django_db


# --- sync progress ---------------------------------------------------------------------------


def test_it_reports_a_running_sync_as_downloads_done_of_to_do(alice_client, alice):
    run = SyncRun.objects.create(requested_by=alice, status=SyncStatus.RUNNING, done=3, total=10, account_ids=[1])
    html = alice_client.get(reverse("sync_status", args=[run.pk]), headers={"HX-Request": "true"}).content.decode()
    assert "3 of 10 records downloaded" in html


def test_it_reports_a_finished_sync_that_downloaded_nothing_by_what_it_listed(alice_client, alice, prod, dev):
    # Nothing changed: no GET was made (done=0), yet 5 records were listed and checked.
    result = {
        "accounts": [
            {"account": prod.account_id, "listed": 3, "fetched": 0, "unchanged": 3, "removed": 0, "errors": []},
            {"account": dev.account_id, "listed": 2, "fetched": 0, "unchanged": 2, "removed": 0, "errors": []},
        ]
    }
    run = SyncRun.objects.create(requested_by=alice, status=SyncStatus.SUCCEEDED, done=0, total=0, result=result)
    html = alice_client.get(reverse("sync_status", args=[run.pk])).content.decode()
    assert "5 records listed, 0 downloaded, 5 unchanged" in html
    assert "0 records" not in html


def test_it_sends_the_account_cards_and_a_reload_event_when_the_sync_ends(alice_client, alice, prod):
    make_stack(prod, "fresh-stack")
    run = SyncRun.objects.create(requested_by=alice, status=SyncStatus.SUCCEEDED, result={"accounts": []})
    on_stacks = {"HX-Request": "true", "HX-Current-URL": "http://testserver/stacks/?sort=name"}
    response = alice_client.get(reverse("sync_status", args=[run.pk]), headers=on_stacks)
    assert response.status_code == 286
    assert response["HX-Trigger"] == "sync-finished"
    html = response.content.decode()
    assert 'id="accounts-summary" aria-label="Accounts" hx-swap-oob="true"' in html
    assert "1 stack</a>" in html  # prod's card, counted now


def test_it_sends_no_cards_to_the_sync_page_which_has_none(alice_client, alice, prod):
    run = SyncRun.objects.create(requested_by=alice, status=SyncStatus.SUCCEEDED, result={"accounts": []})
    on_sync_page = {"HX-Request": "true", "HX-Current-URL": f"http://testserver/sync/{run.pk}/"}
    response = alice_client.get(reverse("sync_status", args=[run.pk]), headers=on_sync_page)
    assert response.status_code == 286 and b"accounts-summary" not in response.content


def test_it_reloads_the_stack_table_on_the_sync_finished_event(alice_client, prod):
    html = alice_client.get(reverse("stacks"), {"sort": "-resources"}).content.decode()
    assert 'hx-get="/stacks/?sort=-resources" hx-trigger="sync-finished from:body"' in html


# --- no role anywhere -------------------------------------------------------------------------


def test_it_tells_a_person_with_no_role_so_and_offers_no_sync(client, charlie, prod):
    client.force_login(charlie)
    for name in ("stacks", "stacks_tree"):
        response = client.get(reverse(name))
        html = response.content.decode()
        assert response.status_code == 200
        assert "You have no role on any account yet" in html
        assert "Sync now" not in html and 'action="/sync/"' not in html


def test_it_refuses_a_sync_for_a_person_with_no_role(client, charlie, prod):
    client.force_login(charlie)
    response = client.post(reverse("sync"))
    assert response.status_code == 403
    assert b"A sync was not started" in response.content
    assert not SyncRun.objects.exists()


# --- exports ----------------------------------------------------------------------------------


def exporter(account, name, outputs, export_names=None, region="us-east-1"):
    extra = {} if export_names is None else {"exportNames": export_names}
    return make_stack(account, name, region, data=record(name, region, outputs=outputs, **extra))


def importer(account, name, entries, region="us-east-1"):
    data = record(name, region, imports=entries)
    stack = make_stack(account, name, region, data=data)
    from engine.schema import parse_state

    stack.imports = mirror_imports(parse_state(bytes(stack.body)))
    stack.save(update_fields=["imports"])
    return stack


def test_it_lists_each_export_with_its_value_exporter_and_importers(alice_client, prod):
    exporter(prod, "network", {"VpcId": "vpc-123", "Shared-VpcId": "vpc-123", "Plain": "x"}, ["Shared-VpcId"])
    importer(prod, "api", [{"sourceStack": "network", "sourceRegion": "us-east-1", "exportName": "Shared-VpcId"}])
    importer(prod, "web", [{"sourceStack": "network", "sourceRegion": "us-east-1", "exportName": "Shared-VpcId"}])
    response = alice_client.get(reverse("account_exports", args=[prod.account_id]))
    assert response.status_code == 200
    rows = list(response.context["page"].object_list)
    assert [(r.name, r.value, r.source.stack_name) for r in rows] == [("Shared-VpcId", "vpc-123", "network")]
    assert [i.stack_name for i in rows[0].importers] == ["api", "web"]
    html = response.content.decode()
    assert 'href="/stacks/111111111111/us-east-1/network/"' in html
    assert 'href="/stacks/111111111111/us-east-1/api/"' in html and 'href="/stacks/111111111111/us-east-1/web/"' in html
    assert "Plain" not in html  # an output that is not an export


def test_it_masks_an_exported_secret(alice_client, prod):
    exporter(prod, "db", {"DbPassword": "hunter2-very-secret"}, ["DbPassword"])
    html = alice_client.get(reverse("account_exports", args=[prod.account_id])).content.decode()
    assert "DbPassword" in html and "hunter2-very-secret" not in html and "***" in html


def test_it_counts_an_imported_key_of_a_pre_v9_record_and_flags_a_dangling_import(alice_client, prod):
    exporter(prod, "old", {"Shared-Bucket": "b-1", "Other": "o"})  # no exportNames: pre-v9
    importer(
        prod,
        "consumer",
        [
            {"sourceStack": "old", "sourceRegion": "us-east-1", "exportName": "Shared-Bucket"},
            {"sourceStack": "gone", "sourceRegion": "us-east-1", "exportName": "Gone-Export"},
        ],
    )
    rows = {r.name: r for r in alice_client.get(reverse("exports")).context["page"].object_list}
    assert set(rows) == {"Shared-Bucket", "Gone-Export"}
    assert rows["Shared-Bucket"].declared is False and rows["Shared-Bucket"].source.stack_name == "old"
    assert rows["Gone-Export"].source is None and rows["Gone-Export"].source_name == "gone"
    assert [i.stack_name for i in rows["Gone-Export"].importers] == ["consumer"]


def test_it_shows_across_accounts_only_what_the_person_may_see(client, bob, prod, dev):
    exporter(prod, "prod-net", {"E1": "v"}, ["E1"])
    exporter(dev, "dev-net", {"E2": "v"}, ["E2"])
    client.force_login(bob)
    names = [r.name for r in client.get(reverse("exports")).context["page"].object_list]
    assert names == ["E2"]
    assert client.get(reverse("account_exports", args=[prod.account_id])).status_code == 404


def test_it_filters_exports_by_export_or_stack_name(alice_client, prod):
    exporter(prod, "network", {"Net-Vpc": "v"}, ["Net-Vpc"])
    exporter(prod, "storage", {"Store-Bucket": "b"}, ["Store-Bucket"])
    page = alice_client.get(reverse("exports"), {"q": "storage"}).context["page"]
    assert [r.name for r in page.object_list] == ["Store-Bucket"]


def test_it_says_how_exports_appear_when_there_are_none(alice_client, prod):
    html = alice_client.get(reverse("exports")).content.decode()
    assert "No exports. An export appears here once a deploy has published" in html


def test_it_runs_the_same_number_of_queries_for_3_and_40_exporting_stacks(
    client, root, settings, django_assert_max_num_queries
):
    settings.CDKD_PAGE_SIZE = 100
    client.force_login(root)
    small = make_account("333333333333", "small")
    for i in range(3):
        exporter(small, f"s{i}", {f"E{i}": "v"}, [f"E{i}"])
    with CaptureQueriesContext(connection) as three:
        client.get(reverse("exports"))
    big = make_account("444444444444", "big")
    for i in range(37):
        exporter(big, f"b{i}", {f"B{i}": "v"}, [f"B{i}"])
        importer(big, f"c{i}", [{"sourceStack": f"b{i}", "sourceRegion": "us-east-1", "exportName": f"B{i}"}])
    with django_assert_max_num_queries(len(three.captured_queries)):
        response = client.get(reverse("exports"))
    assert response.context["total"] == 40


# --- links ------------------------------------------------------------------------------------


def test_it_links_a_timeline_stack_name_to_its_record_when_there_is_one(alice_client, prod):
    make_stack(prod, "live-stack")
    make_run(prod, "live-stack", "20261201T080000000Z-aaaaaaaa")
    make_run(prod, "gone-stack", "20261201T090000000Z-bbbbbbbb")
    html = alice_client.get(reverse("events")).content.decode()
    assert '<a href="/stacks/111111111111/us-east-1/live-stack/">live-stack</a>' in html
    assert 'href="/stacks/111111111111/us-east-1/gone-stack/"' not in html
    assert "gone-stack <span" in html


def test_it_says_how_runs_appear_when_there_are_none(alice_client, prod):
    assert "No runs yet. A run appears here once cdkd" in alice_client.get(reverse("events")).content.decode()


def test_it_links_a_nested_childs_name_in_a_run(alice_client, prod):
    parent = make_stack(prod, "parent")
    make_stack(prod, "parent~Child", parent=parent)
    event = {
        "type": "RESOURCE_SUCCEEDED",
        "timestamp": "2026-12-01T08:00:01.000Z",
        "stackName": "parent~Child",
        "logicalId": "Q",
        "resourceType": "AWS::SQS::Queue",
    }
    make_run(prod, "parent", "20261201T080000000Z-aaaaaaaa", events=[event])
    url = reverse("event_run", args=[prod.account_id, "us-east-1", "parent", "20261201T080000000Z-aaaaaaaa"])
    html = alice_client.get(url).content.decode()
    assert 'in <a href="/stacks/111111111111/us-east-1/parent~Child/">parent~Child</a>' in html


def test_it_links_an_import_source_on_the_stack_page(alice_client, prod):
    exporter(prod, "network", {"Shared-VpcId": "v"}, ["Shared-VpcId"])
    importer(prod, "api", [{"sourceStack": "network", "sourceRegion": "us-east-1", "exportName": "Shared-VpcId"}])
    # Imports are on the Outputs tab.
    html = alice_client.get(reverse("stack_outputs", args=[prod.account_id, "us-east-1", "api"])).content.decode()
    assert '<a href="/stacks/111111111111/us-east-1/network/">network</a>' in html


def test_it_names_event_indexes_in_the_admin(client, root):
    client.force_login(root)
    html = client.get(reverse("admin:index")).content.decode()
    assert "Event indexes" in html and "Event indexs" not in html


def test_it_masks_an_export_value_the_secret_scan_flagged(alice_client, prod):
    from stacks.models import SecretFinding

    stack = exporter(prod, "plain", {"Shared-Endpoint": "looks-harmless-42"}, ["Shared-Endpoint"])
    SecretFinding.objects.create(
        account=prod,
        stack_name="plain",
        region="us-east-1",
        key=stack.key,
        path=["outputs", "Shared-Endpoint"],
        source="x",
    )
    html = alice_client.get(reverse("exports")).content.decode()
    assert "Shared-Endpoint" in html and "looks-harmless-42" not in html


def test_it_words_a_timeline_filter_error_by_its_label_not_its_field_name(alice_client, prod):
    response = alice_client.get(reverse("events"), {"since": "not a date"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "From: Enter a valid date/time." in html and "since:" not in html
