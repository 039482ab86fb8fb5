"""Log in, list stacks, search, open a stack, open its history and a diff of two versions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from unittest import mock

import pytest
from playwright.sync_api import expect

from engine.backend import StoredObject, VersionInfo
from stacks import history
from stacks.models import Membership, Role
from tests.views.conftest import make_account, make_lock, make_stack, make_user, record, resource_row

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEY = "cdkd/orders/us-east-1/state.json"
V1 = record(
    "orders",
    resources={"Queue": resource_row("AWS::SQS::Queue", "q-orders", properties={"VisibilityTimeout": 30})},
    outputs={"QueueUrl": "https://sqs/q-orders"},
)
V2 = record(
    "orders",
    resources={
        "Queue": resource_row("AWS::SQS::Queue", "q-orders", properties={"VisibilityTimeout": 60}),
        "Table": resource_row("AWS::Glue::Table", "analytics|orders", provisionedBy="cc-api", dependencies=["Queue"]),
    },
    outputs={"QueueUrl": "https://sqs/q-orders", "TableName": "orders"},
    exportNames=["QueueUrl"],
    lastModified=1_710_900_000_000,
)
BODIES = {"v1": V1, "v2": V2}


def world():
    alice = make_user("alice")
    prod = make_account("111111111111", "prod")
    dev = make_account("222222222222", "dev", bucket_status="denied", bucket_message="s3:ListBucket denied")
    for account in (prod, dev):
        Membership.objects.create(user=alice, account=account, role=Role.VIEWER)
    orders = make_stack(prod, "orders", data=V2)
    make_lock(orders)
    make_stack(prod, "orders~Worker", parent=orders)
    make_stack(prod, "billing", "eu-west-1", data=record("billing", "eu-west-1"))
    make_stack(prod, "legacy-app", None, legacy=True, data=record("legacy-app", None, version=1))
    make_stack(prod, "broken", body=b'{"version": 11, "stackName": "broken", "resources": []}', defects=[{"code": "x"}])


def versions(stack, *, actor):
    return [
        VersionInfo(KEY, "v2", datetime(2024, 3, 20, tzinfo=UTC), 900, True, False, '"v2"'),
        VersionInfo(KEY, "v1", datetime(2024, 3, 19, tzinfo=UTC), 700, False, False, '"v1"'),
    ]


def get_version(stack, version_id, *, actor):
    return StoredObject(KEY, json.dumps(BODIES[version_id]).encode(), f'"{version_id}"', version_id, None)


def test_it_browses_searches_and_diffs(page, live_server, artifacts):
    world()
    page.goto(f"{live_server.url}/stacks/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")

    page.wait_for_selector("#stack-table")
    assert page.locator("#stack-table tbody tr").count() == 5
    assert "s3:ListBucket denied" in page.content()
    page.screenshot(path=str(artifacts / "stacks.png"), full_page=True)

    page.fill("#id_q", "q-orders")  # a physical id: found through the resource search
    expect(page.locator("#stack-table tbody tr")).to_have_count(1)  # no string predicate: CSP forbids eval
    assert "q=q-orders" in page.url
    assert page.locator("#stack-table tbody tr a").inner_text() == "orders"

    # Wait for the navigation the click starts (a late search swap must not swallow it).
    with page.expect_navigation(timeout=20_000):
        page.click("#stack-table tbody tr a")
    page.wait_for_selector("h1:text('orders')", timeout=20_000)
    page.click("#stack-tabs a[data-tab=resources]")  # the resources are a tab of their own
    page.wait_for_selector("#resources")
    assert page.locator(".seg").count() == 2
    page.locator("#res-Queue + tr details summary").click()
    page.wait_for_selector("#res-Queue + tr .detail-body h3")
    page.screenshot(path=str(artifacts / "stack.png"), full_page=True)

    with (
        mock.patch.object(history, "list_versions", autospec=True, side_effect=versions),
        mock.patch.object(history, "get_version", autospec=True, side_effect=get_version),
    ):
        page.click("#stack-tabs a[data-tab=history]")
        page.wait_for_selector("text=Pick two to compare")
        page.check("input[name=a][value=v1]")
        page.check("input[name=b][value=v2]")
        page.click("button:text('Compare')")
        page.wait_for_selector("h1:text('diff')")
        content = page.content()
    assert "properties.VisibilityTimeout" in content
    assert "Table" in content and "added" in content
    assert "TableName" in content
    page.screenshot(path=str(artifacts / "diff.png"), full_page=True)


def test_it_shows_the_tree_and_a_damaged_record(page, live_server, artifacts):
    world()
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.click("text=Tree")
    page.wait_for_selector(".tree-indent")
    assert page.locator(".tree-indent").count() == 1
    page.screenshot(path=str(artifacts / "tree.png"), full_page=True)

    page.click("a:text('broken')")
    page.wait_for_selector(".alert.bad")
    assert "resources" in page.locator(".alert.bad").first.inner_text()
    page.screenshot(path=str(artifacts / "damaged.png"), full_page=True)
