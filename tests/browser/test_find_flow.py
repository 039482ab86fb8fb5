"""Find things fast, in Chromium: sort the stacks table and read each row's status, see an
overlong search explained, follow the Exports page to an importer, read the history's
per-version facts and a diff, and filter the orphan-resources picker then select every match.
Screenshots go to /tmp/ui-find-*.png. olivia operates prod."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from unittest import mock

import pytest
from playwright.sync_api import expect

from engine.backend import StoredObject, VersionInfo
from engine.schema import parse_state
from stacks import history, operations
from stacks.consumers import mirror_imports
from stacks.models import Membership, Role, SecretFinding
from tests.operations_ui.conftest import fake_plan
from tests.views.conftest import make_account, make_lock, make_stack, make_user, record, resource_row
from tests.views.test_events_pages import make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEY = "cdkd/network/us-east-1/state.json"
NET_V1 = record(
    "network",
    resources={"Vpc": resource_row("AWS::EC2::VPC", "vpc-1", properties={"CidrBlock": "10.0.0.0/16"})},
    lastModified=1_764_576_000_000,
)
NET_V2 = record(
    "network",
    resources={
        "Vpc": resource_row("AWS::EC2::VPC", "vpc-1", properties={"CidrBlock": "10.1.0.0/16"}),
        "Subnet": resource_row(
            "AWS::EC2::Subnet", "subnet-1", properties={"VpcId": "vpc-1", "CidrBlock": "10.1.1.0/24"}
        ),
    },
    outputs={"VpcId": "vpc-1", "Shared-VpcId": "vpc-1"},
    exportNames=["Shared-VpcId"],
    lastModified=1_764_579_600_000,
)
BODIES = {"v1": NET_V1, "v2": NET_V2}
SHOTS = "/tmp/ui-find-{}.png"


def world():
    olivia = make_user("olivia")
    prod = make_account("111111111111", "prod")
    Membership.objects.create(user=olivia, account=prod, role=Role.OPERATOR)
    network = make_stack(prod, "network", data=NET_V2)
    for name in ("api", "web"):
        data = record(
            name, imports=[{"sourceStack": "network", "sourceRegion": "us-east-1", "exportName": "Shared-VpcId"}]
        )
        stack = make_stack(prod, name, data=data)
        stack.imports = mirror_imports(parse_state(bytes(stack.body)))
        stack.save(update_fields=["imports"])
    make_lock(network)
    make_run(prod, "network", "20261201T080000000Z-aaaaaaaa", command="deploy", result="FAILED")
    SecretFinding.objects.create(
        account=prod, stack_name="api", region="us-east-1", key="cdkd/api/us-east-1/state.json", source="x"
    )
    big = {
        f"Res{i:04d}": resource_row(
            "AWS::SQS::Queue" if i % 2 else "AWS::S3::Bucket",
            f"arn:aws:sqs:us-east-1:111111111111:queue-with-a-long-name-{i:04d}",
        )
        for i in range(2000)
    }
    make_stack(
        prod, "a-very-long-stack-name-that-goes-on-" + "and-on-" * 12 + "end", data=record("long", resources=big)
    )
    return prod


def versions(stack, *, actor):
    return [
        VersionInfo(KEY, "v2", datetime(2026, 12, 1, 9, 0, 1, tzinfo=UTC), 900, True, False, '"v2"'),
        VersionInfo(KEY, "v1", datetime(2026, 12, 1, 8, 0, 5, tzinfo=UTC), 700, False, False, '"v1"'),
    ]


def get_version(stack, version_id, *, actor):
    return StoredObject(KEY, json.dumps(BODIES[version_id]).encode(), f'"{version_id}"', version_id, None)


def test_it_finds_stacks_exports_history_and_resources(page, live_server, monkeypatch):
    world()
    monkeypatch.setattr(
        operations,
        "compute_plan",
        lambda account, kind, stack, region, params, person: fake_plan(kind, stack, region, params),
    )
    page.goto(f"{live_server.url}/stacks/")
    page.fill("#id_username", "olivia")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_selector("#stack-table")

    # Sort by resources: ascending, then descending on a second click.
    page.click("#stack-table th a:text('Resources')")
    expect(page.locator("#stack-table th[aria-sort=ascending]")).to_have_count(1)
    page.wait_for_url("**/stacks/?sort=resources")  # pushed once the swap has settled
    page.click("#stack-table th a:text('Resources')")
    expect(page.locator("#stack-table th[aria-sort=descending]")).to_have_count(1)
    assert "sort=-resources" in page.url
    first = page.locator("#stack-table tbody tr").first
    assert "a-very-long-stack-name" in first.inner_text()
    network = page.locator("#stack-table tbody tr", has_text="network")
    assert "deploy" in network.inner_text() and "failed" in network.inner_text() and "live" in network.inner_text()
    assert "1 finding" in page.locator("#stack-table tbody tr", has_text="api").inner_text()
    # The long name wraps inside its cell: the table fits the viewport.
    assert page.evaluate("document.querySelector('#stack-table table').scrollWidth") <= 1400
    page.screenshot(path=SHOTS.format("stacks-sorted"), full_page=True)

    page.goto(f"{live_server.url}/stacks/?q={'x' * 201}")
    expect(page.locator("#search-error")).to_contain_text("201 characters")
    expect(page.locator("#stack-table tbody tr")).to_have_count(1)
    page.screenshot(path=SHOTS.format("search-too-long"), full_page=True)

    # Exports: the value, the exporter, each importer; an importer's link opens its page.
    page.click("nav.topbar a:text('Exports')")
    row = page.locator("#exports tbody tr", has_text="Shared-VpcId")
    assert "vpc-1" in row.inner_text() and "network" in row.inner_text()
    page.screenshot(path=SHOTS.format("exports"), full_page=True)
    row.locator("a:text('web')").click()
    page.wait_for_selector("h1:text('web')")

    with (
        mock.patch.object(history, "list_versions", autospec=True, side_effect=versions),
        mock.patch.object(history, "get_version", autospec=True, side_effect=get_version),
    ):
        page.goto(f"{live_server.url}/stacks/111111111111/us-east-1/network/history/")
        page.wait_for_selector("#versions")
        text = page.locator("#versions").inner_text()
        assert "2025-12-01 09:00:00" in text and "2025-12-01 08:00:00" in text  # cdkd's lastModified
        assert "Download" in text
        assert "cdkd deploy 20261201T080000000Z-aaaaaaaa" in text  # v1 fell within that run
        page.screenshot(path=SHOTS.format("history"), full_page=True)
        page.check("input[name=a][value=v1]")
        page.check("input[name=b][value=v2]")
        page.click("button:text('Compare')")
        page.wait_for_selector("h1:text('diff')")
        content = page.content()
    assert "properties.CidrBlock" in content and "properties.VpcId" in content  # the added Subnet, per property
    assert "2025-12-01 08:00:00.000 UTC" in content
    page.screenshot(path=SHOTS.format("diff"), full_page=True)

    # The picker at 2,000 resources: no error up front, filter, then select every match.
    page.goto(f"{live_server.url}/stacks/")
    page.click("a:text('a-very-long-stack-name')")
    page.click("a:text('Orphan resources')")
    page.wait_for_selector("#pick-resources")
    assert "Pick at least one" not in page.content()
    expect(page.locator("#picker-select tbody tr")).to_have_count(100)
    page.screenshot(path=SHOTS.format("picker"), full_page=False)
    page.fill("#picker-filter input[name=match]", "queue-with-a-long-name-019")
    page.click("#picker-filter button")
    expect(page.locator("#picker-select tbody tr")).to_have_count(10)
    assert "10 of 2000 match" in page.locator("#picker-filter").inner_text()
    page.screenshot(path=SHOTS.format("picker-filtered"), full_page=False)
    page.click("#select-all-matches")
    page.wait_for_selector("#plan")
    assert page.locator("#confirm input[name=resources]").count() == 10
    page.screenshot(path=SHOTS.format("picker-plan"), full_page=False)


def test_it_updates_the_account_cards_and_table_when_a_sync_ends(page, live_server):
    from django.utils import timezone

    from stacks.models import SyncRun, SyncStatus

    prod = world()
    olivia = Membership.objects.get(account=prod).user
    run = SyncRun.objects.create(
        account=prod, account_ids=[prod.pk], requested_by=olivia, status=SyncStatus.RUNNING, total=4, done=1
    )
    page.goto(f"{live_server.url}/stacks/")
    page.fill("#id_username", "olivia")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.locator(f"#sync-run-{run.pk}").get_by_text("1 of 4 records downloaded").wait_for()
    expect(page.locator("#accounts-summary")).to_contain_text("4 stacks")
    # The sync ends having found a fifth record: cards and table follow, with no reload.
    make_stack(prod, "found-by-the-sync")
    prod.last_synced_at = timezone.now()
    prod.save(update_fields=["last_synced_at"])
    result = {
        "accounts": [
            {"account": prod.account_id, "listed": 5, "fetched": 1, "unchanged": 4, "removed": 0, "errors": []}
        ]
    }
    SyncRun.objects.filter(pk=run.pk).update(status=SyncStatus.SUCCEEDED, finished_at=timezone.now(), result=result)
    page.locator(f"#sync-run-{run.pk}").get_by_text("5 records listed, 1 downloaded, 4 unchanged").wait_for()
    expect(page.locator("#accounts-summary")).to_contain_text("5 stacks")
    expect(page.locator("#stack-table tbody tr")).to_have_count(5)
    assert "Last sync: never" not in page.locator("#accounts-summary").inner_text()
    page.screenshot(path=SHOTS.format("sync-ended"), full_page=True)
