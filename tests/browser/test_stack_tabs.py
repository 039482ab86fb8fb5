"""The stack page's tabs in Chromium, served as production serves it (gunicorn, DEBUG off,
hashed static files, the strict CSP). alice opens a stack whose lock's holder finished its
run an hour ago and left a rollback journal: she reads the lock card's verdict and the
journal notice, clicks through the tabs, History included (the URL follows each, and the
back button returns), copies a physical id, and the browser reports no CSP violation.
Screenshots: /tmp/ui-stack-*.png.

gunicorn is another process, so S3 cannot be faked there: the History tab shows the error
an unreachable bucket gives, in the tab, which is what this test reads of it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from stacks.models import DeploymentEvent, DeploymentRun, Membership, Role
from tests.browser.test_csp import REPORT_VIOLATIONS
from tests.support.webserver import free_port, gunicorn_server
from tests.views.conftest import make_account, make_lock, make_stack, make_user, record, resource_row

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BUCKET = "orders-assets-bucket-0a1b2c3d4e5f60718293a4b5c6d7e8f9"


@pytest.fixture
def server(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("the gunicorn process shares the test database only on PostgreSQL")
    # S3 at a port nothing listens on: the History tab's listing fails at once (after the
    # SDK's retries), and no request leaves the machine.
    aws = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with gunicorn_server(tmp_path / "static", **aws) as base:
        yield base


def world():
    alice = make_user("alice")
    prod = make_account("111111111111", "prod")
    Membership.objects.create(user=alice, account=prod, role=Role.VIEWER)
    data = record(
        "orders",
        resources={
            "Assets": resource_row("AWS::S3::Bucket", BUCKET),
            "Queue": resource_row("AWS::SQS::Queue", "https://sqs.us-east-1.amazonaws.com/111111111111/orders-queue"),
            "Alerts": resource_row("AWS::SNS::Topic", "arn:aws:sns:us-east-1:111111111111:orders-alerts"),
            "Table": resource_row("AWS::Glue::Table", "analytics|orders|v2"),
        },
        outputs={"AssetsBucket": BUCKET},
    )
    stack = make_stack(
        prod,
        "orders",
        data=data,
        journal_key="cdkd/orders/us-east-1/rollback-journal.json",
        journal_etag='"j"',
        journal_size=3100,
        journal_modified=timezone.now() - timedelta(minutes=57),
    )
    lock = make_lock(stack, owner="ci@runner-17:4242", expires_in_ms=-600_000)
    lock.timestamp_ms -= 3_600_000
    lock.save()
    started = timezone.now() - timedelta(minutes=58)
    run = DeploymentRun.objects.create(
        account=prod,
        stack_name="orders",
        region="us-east-1",
        run_id=started.strftime("%Y%m%dT%H%M%S000Z") + "-1a2b3c4d",
        command="deploy",
        started_at=started,
        run_at=started,
        result="FAILED",
        finished_at_raw=(started + timedelta(minutes=2)).isoformat(),
        in_index=True,
        event_count=1,
    )
    DeploymentEvent.objects.create(run=run, seq=0, event_type="RUN_FINISHED", timestamp=started + timedelta(minutes=2))


def test_it_walks_the_tabs_reads_the_lock_card_and_copies(page, server):
    world()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.add_init_script(REPORT_VIOLATIONS)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    base = f"{server}/stacks/111111111111/us-east-1/orders/"

    page.goto(base)
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:text('orders')")
    verdict = page.locator("#lock-verdict")
    assert verdict.get_attribute("data-verdict") == "likely abandoned"
    assert "has finished (FAILED), yet the lock is still there" in verdict.inner_text()
    assert "written under this lock 57 minutes ago and left" in verdict.inner_text()
    notice = page.locator("#journal-notice")
    assert "Leftover rollback journal, written 57 minutes ago" in notice.inner_text()
    assert "cdkd rollback orders --account 111111111111" in page.locator("#journal-command").inner_text()
    assert "locked by ci@runner-17:4242" not in notice.inner_text()  # the lock expired: a rollback can take it
    assert "expired 10 minutes ago" in page.locator("#lock-time-left").inner_text()
    assert page.locator("#stack-tabs a[aria-current=page]").inner_text() == "Overview"
    page.screenshot(path="/tmp/ui-stack-overview.png", full_page=True)

    page.click("#stack-tabs a[data-tab=resources]")
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("Resources")
    assert page.url == base + "resources/"
    assert page.locator("#lock-verdict").count() == 0  # swapped out with the Overview tab
    bucket_link = page.locator("#res-Assets a.physical")
    assert (
        bucket_link.get_attribute("href") == f"https://s3.console.aws.amazon.com/s3/buckets/{BUCKET}?region=us-east-1"
    )
    assert page.locator("#res-Table a.physical").count() == 0  # a composite id has no one console page
    # The id reads on one line (it wrapped every 14 characters with word-break: break-all).
    box = bucket_link.bounding_box()
    assert box is not None and box["height"] < 20, box
    page.locator("#res-Assets button.copy").click()
    expect(page.locator("#res-Assets button.copy")).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == BUCKET
    page.screenshot(path="/tmp/ui-stack-resources.png", full_page=True)

    page.click("#stack-tabs a[data-tab=outputs]")
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("Outputs")
    assert page.url == base + "outputs/"
    assert page.locator("button.copy[value=AssetsBucket]").count() == 1
    page.screenshot(path="/tmp/ui-stack-outputs.png", full_page=True)

    page.click("#stack-tabs a[data-tab=events]")
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("Events")
    assert page.url == base + "events/"
    assert "FAILED" in page.locator("#stack-runs").inner_text()
    page.screenshot(path="/tmp/ui-stack-events.png", full_page=True)

    page.click("#stack-tabs a[data-tab=history]")
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("History")
    assert page.url == base + "history/"
    assert page.locator("#journal-notice").count() == 0
    failed = page.locator("[data-code=history-unreadable]")
    expect(failed).to_contain_text("Listing the record's versions failed", timeout=90_000)
    page.screenshot(path="/tmp/ui-stack-history.png", full_page=True)

    page.go_back()  # htmx restores the pushed tab
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("Events")
    page.go_back()
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("Outputs")

    # Without htmx the tab URL is a full page of its own.
    page.goto(base + "resources/")
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("Resources")
    assert page.locator("#stack-operations").count() == 0  # a viewer: no repair buttons

    assert [line for line in console if "Content Security Policy" in line or "CSP violation" in line] == []
    assert not [line for line in console if line.startswith("error:") and "favicon" not in line], console
