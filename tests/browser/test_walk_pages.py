"""Issue 11 walked item by item in Debian Chromium: one test per item of its list, each
asserting what the page shows and saving /tmp/walk-shots/<item>.png to be looked at.

The "actions" items run the real engine's plans against the moto server (the `aws`
fixture) and a first sync; the rest read the database mirror the views read. Where a page
needs S3 (History), the history module's two reads are replaced by stand-ins returning fixed
versions, as tests/browser/test_find_flow.py does: what is tested is the page, not S3.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from unittest import mock

import pytest
from playwright.sync_api import expect

from stacks import history, operations
from stacks.models import Account, AuditEvent, Membership, Operation, OperationStatus, Role, SyncRun, SyncStatus
from stacks.sync import sync_account
from tests.browser import test_find_flow as find
from tests.browser.conftest import log_in
from tests.operations_ui.conftest import fake_plan, make_operation
from tests.views.conftest import make_account, make_lock, make_stack, make_user, record, resource_row
from tests.views.test_events_pages import make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

A = "111111111111"
BUCKET = f"cdkd-state-{A}"
SHOTS = Path("/tmp/walk-shots")


def shot(page, item: str, full_page: bool = True) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{item}.png"), full_page=full_page)


def fake_compute(monkeypatch) -> None:
    monkeypatch.setattr(
        operations,
        "compute_plan",
        lambda account, kind, stack, region, params, person: fake_plan(kind, stack, region, params),
    )


# -- Actions only where they can succeed (real plans against moto) ------------------------------


def queue_record(name: str, version: int = 11, **extra) -> dict:
    rows = {"Queue": {"physicalId": f"q-{name}", "resourceType": "AWS::SQS::Queue", "properties": {}}}
    return {"version": version, "stackName": name, "region": "us-east-1", "resources": rows, "outputs": {}, **extra}


@pytest.fixture
def moto_world(aws):
    aws.make_bucket(A, BUCKET)
    aws.put(A, BUCKET, "cdkd/Shop/us-east-1/state.json", queue_record("Shop"))
    aws.put(A, BUCKET, "cdkd/Future/us-east-1/state.json", queue_record("Future", version=12))
    aws.put(A, BUCKET, "cdkd/Broken/us-east-1/state.json", {**queue_record("Broken"), "resources": []})
    now = int(time.time() * 1000)
    lock = {"owner": "bob@laptop:4242", "timestamp": now, "expiresAt": now + 600_000, "operation": "deploy"}
    aws.put(A, BUCKET, "cdkd/Shop/us-east-1/lock.json", json.dumps(lock).encode())
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        Membership.objects.create(user=make_user(name), account=account, role=role)
    sync_account(account)
    return account


@pytest.mark.integration
def test_it_disables_the_repairs_of_a_newer_cdkd_record_with_a_reason(page, live_server, moto_world):
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/{A}/us-east-1/Future/")
    for kind in ("destroy", "orphan", "scrub"):
        if page.locator(f"#action-{kind}").count():
            assert page.is_disabled(f"#action-{kind}"), kind
    reasons = page.locator("#action-reasons li")
    assert reasons.count() >= 1
    assert all("\n" not in reasons.nth(i).inner_text().strip() for i in range(reasons.count()))  # one line each
    assert "newer cdkd (schema version 12" in page.inner_text("#action-reasons")
    shot(page, "01-newer-record-disabled")


@pytest.mark.integration
def test_it_offers_force_under_a_live_lock_and_shows_it_and_the_reason_to_the_approver(
    browser, page, live_server, moto_world, queue
):
    base = live_server.url
    log_in(page, base, "olivia")
    page.goto(f"{base}/stacks/{A}/us-east-1/Shop/")
    page.click("#action-orphan")
    page.wait_for_selector("#predicted-refusal")
    assert "bob@laptop:4242" in page.inner_text("#predicted-refusal")
    assert not page.is_checked("#id_force")
    page.fill("#id_reason", "OPS-77: Shop retired")
    page.check("#id_force")
    shot(page, "02-orphan-force-offered")
    page.click("#confirm button[type=submit]")
    page.wait_for_selector("#operation-status:text('Awaiting approval')")
    op = Operation.objects.get()
    assert op.params == {"force": True}
    assert AuditEvent.objects.get(action="operation.requested").details["reason"] == "OPS-77: Shop retired"

    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        arthur = other.new_page()
        log_in(arthur, base, "arthur")
        arthur.goto(f"{base}/operations/{op.pk}/")
        assert "bob@laptop:4242" in arthur.inner_text("#forced-override")
        assert "OPS-77: Shop retired" in arthur.inner_text("#decide-reason")  # item: reason shown to approver
        shot(arthur, "03-approver-sees-force-and-reason")
    finally:
        other.close()


@pytest.mark.integration
def test_it_gives_damaged_record_advice_that_can_be_pasted(page, live_server, moto_world):
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/{A}/us-east-1/Broken/")
    text = page.inner_text("main")
    assert "state orphan Broken" in text  # the stack name filled in
    assert "<stack>" not in text and "'<stack>'" not in text
    # Consistent: the advice names orphan as the way out and does not say orphan refuses it.
    assert "orphan refuses this record" not in text
    assert page.is_disabled("#action-destroy")
    shot(page, "04-damaged-record-advice")


@pytest.mark.integration
def test_it_prints_each_change_of_a_destroy_plan_once(page, live_server, aws):
    sqs = aws.account_session(A).client("sqs", region_name="us-east-1")
    names = [f"walk-jobs-{i}" for i in range(3)]
    rows = {
        f"Queue{i}": {
            "physicalId": sqs.create_queue(QueueName=n)["QueueUrl"],
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": n},
            "provisionedBy": "sdk",
        }
        for i, n in enumerate(names)
    }
    aws.make_bucket(A, BUCKET)
    aws.put(A, BUCKET, "cdkd/Jobs/us-east-1/state.json", {**queue_record("Jobs"), "resources": rows})
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    Membership.objects.create(user=make_user("olivia"), account=account, role=Role.OPERATOR)
    sync_account(account)
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/{A}/us-east-1/Jobs/")
    page.click("#destroy-button")
    page.wait_for_selector("#plan")
    plan = page.inner_text("#plan")
    for name in names:
        assert plan.count(name) == 1, (name, plan)
    # Worded validation: a wrong confirmation names what is wrong in words, not a field name.
    page.fill("#id_confirm_name", "Jbos")
    page.click("#confirm button[type=submit]")
    page.wait_for_selector(".errorlist, .alert.bad")
    body = page.inner_text("main")
    assert "confirm_name" not in body and "This field" not in body
    shot(page, "05-destroy-plan-once-and-worded-error")


@pytest.mark.integration
def test_it_says_before_a_destroy_which_rows_go_through_cloud_control(page, live_server, aws):
    """The demo's Analytics and Db stacks hold types only Cloud Control deletes, which
    moto does not serve: the destroy page names those rows before anything is requested."""
    sqs = aws.account_session(A).client("sqs", region_name="us-east-1")
    rows = {
        "Queue": {
            "physicalId": sqs.create_queue(QueueName="walk-lake-q")["QueueUrl"],
            "resourceType": "AWS::SQS::Queue",
            "properties": {},
            "provisionedBy": "sdk",
        },
        "Rule": {"physicalId": "lake-nightly", "resourceType": "AWS::Events::Rule", "properties": {}},
        "Db": {"physicalId": "lake-db", "resourceType": "AWS::RDS::DBSubnetGroup", "properties": {}},
    }
    aws.make_bucket(A, BUCKET)
    aws.put(A, BUCKET, "cdkd/Lake/us-east-1/state.json", {**queue_record("Lake"), "resources": rows})
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    Membership.objects.create(user=make_user("olivia"), account=account, role=Role.OPERATOR)
    sync_account(account)
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/{A}/us-east-1/Lake/")
    page.click("#destroy-button")
    page.wait_for_selector("#plan")
    notice = page.inner_text("#plan-cloud-control")
    assert "2 resources go through the AWS Cloud Control API" in notice and "ends Partial" in notice
    marked = page.locator("#plan-destroy tr", has=page.locator(".badge:text('via Cloud Control')"))
    assert sorted(marked.nth(i).locator("td").nth(1).inner_text() for i in range(marked.count())) == ["Db", "Rule"]
    shot(page, "05b-destroy-plan-cloud-control-named")


# -- Operations ----------------------------------------------------------------------------------


def ops_world():
    prod = make_account(A, "prod")
    olivia = make_user("olivia")
    Membership.objects.create(user=olivia, account=prod, role=Role.OPERATOR)
    make_stack(prod, "web")
    return prod, olivia


def test_it_offers_run_again_on_a_partial_operation(page, live_server, monkeypatch):
    fake_compute(monkeypatch)
    prod, olivia = ops_world()
    op = make_operation(prod, olivia, kind="orphan", status=OperationStatus.PARTIAL, result={"summary": "1 left"})
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/operations/{op.pk}/")
    expect(page.locator("#run-again button")).to_be_visible()
    shot(page, "06-run-again-offered")
    page.click("#run-again button")
    page.wait_for_url(lambda url: f"/operations/{op.pk}/" not in url)
    again = Operation.objects.exclude(pk=op.pk).get()
    assert again.rerun_of_id == op.pk
    text = page.inner_text("body")
    assert f"Run again of #{op.pk}" in text
    # The same plan (digest equal): the notice does not claim it differs; #op had no approval.
    assert "plan differs" not in text and "same plan, but the approvals it had are not enough" in text
    shot(page, "06b-run-again-new-operation")


def test_it_asks_before_cancelling(page, live_server):
    prod, olivia = ops_world()
    op = make_operation(prod, olivia)
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/operations/{op.pk}/")
    page.click("#cancel-button")
    page.wait_for_selector("#cancel-confirm")
    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL  # nothing done yet
    shot(page, "07-cancel-confirmation")


def test_it_paginates_operation_items_and_filters_failed_only(page, live_server):
    prod, olivia = ops_world()
    items = {f"Res{i:04d}": {"status": "failed" if i % 100 == 0 else "deleted"} for i in range(2500)}
    op = make_operation(prod, olivia, kind="destroy", status=OperationStatus.PARTIAL, progress={"items": items})
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/operations/{op.pk}/")
    assert "2500" in page.inner_text("main h2:has-text('Items')")
    assert page.locator("#operation-items tbody tr").count() < 2500
    assert "page 1 of" in page.inner_text("#item-filter")
    page.select_option("#id_item_status", "failed")
    page.click("#item-filter button")
    expect(page.locator("#operation-items tbody tr")).to_have_count(25)
    assert page.locator("#operation-items .badge.status-deleted").count() == 0
    shot(page, "08-operation-items-failed-only")


# -- Find things fast ----------------------------------------------------------------------------


def test_it_sorts_the_stacks_table_shows_status_and_explains_a_long_search(page, live_server):
    find.world()
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/")
    page.click("#stack-table th a:text('Resources')")
    expect(page.locator("#stack-table th[aria-sort=ascending]")).to_have_count(1)
    network = page.locator("#stack-table tbody tr", has_text="network").inner_text()
    assert "deploy" in network and "failed" in network and "live" in network
    assert "1 finding" in page.locator("#stack-table tbody tr", has_text="api").inner_text()
    assert page.evaluate("document.querySelector('#stack-table table').scrollWidth") <= 1400
    # The search placeholder fits its box.
    fits = page.evaluate(
        "(() => { const i = document.querySelector('#stack-filters input[name=q], input[name=q]');"
        " const c = document.createElement('canvas').getContext('2d'); c.font = getComputedStyle(i).font;"
        " return c.measureText(i.placeholder).width <= i.clientWidth; })()"
    )
    assert fits
    shot(page, "09-stacks-table-sorted")
    page.goto(f"{live_server.url}/stacks/?q={'x' * 201}")
    expect(page.locator("#search-error")).to_contain_text("201 characters")
    expect(page.locator("#stack-table tbody tr")).to_have_count(1)
    shot(page, "10-search-too-long")


def tabs_world():
    alice = make_user("alice")
    prod = make_account(A, "prod")
    Membership.objects.create(user=alice, account=prod, role=Role.VIEWER)
    data = record(
        "orders",
        resources={
            "Assets": resource_row("AWS::S3::Bucket", find_bucket := "orders-assets-0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
            "Queue": resource_row(
                "AWS::SQS::Queue", "https://sqs.us-east-1.amazonaws.com/111111111111/orders-queue-with-a-long-name"
            ),
            "Role": resource_row(
                "AWS::IAM::Role",
                "orders-HandlerServiceRole-ABCDEFGHIJKL",
                attributes={"Arn": "arn:aws:iam::111111111111:role/orders-HandlerServiceRole-ABCDEFGHIJKL"},
            ),
        },
        outputs={"AssetsBucket": find_bucket},
    )
    stack = make_stack(prod, "orders", data=data)
    make_lock(stack, owner="ci@runner-17:4242", expires_in_ms=20 * 60_000)
    return find_bucket


def test_it_has_tabs_with_their_own_urls(page, live_server):
    tabs_world()
    base = f"{live_server.url}/stacks/{A}/us-east-1/orders/"
    log_in(page, live_server.url, "alice")
    for tab, path in (("resources", "resources/"), ("outputs", "outputs/"), ("events", "events/")):
        page.goto(base)
        page.click(f"#stack-tabs a[data-tab={tab}]")
        expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text(tab.capitalize())
        assert page.url == base + path
    page.goto(base + "outputs/")  # a tab's URL is a page of its own
    expect(page.locator("#stack-tabs a[aria-current=page]")).to_have_text("Outputs")
    shot(page, "11-tabs-own-urls")


def test_it_copies_ids_and_links_consoles_with_readable_physical_ids(page, live_server):
    bucket = tabs_world()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    log_in(page, live_server.url, "alice")
    page.goto(f"{live_server.url}/stacks/{A}/us-east-1/orders/resources/")
    link = page.locator("#res-Assets a.physical")
    assert link.get_attribute("href") == f"https://s3.console.aws.amazon.com/s3/buckets/{bucket}?region=us-east-1"
    assert page.locator("#res-Queue a.physical").count() == 1
    page.locator("#res-Assets button.copy").first.click()
    expect(page.locator("#res-Assets button.copy").first).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == bucket
    # The long SQS URL: the cell is wide enough that it does not wrap every 14 characters.
    cell = page.locator("#res-Queue a.physical").bounding_box()
    assert cell is not None
    assert cell["width"] > 14 * 7 * 2, cell  # well over two 14-character lines' width
    assert cell["height"] < 3 * 20, cell  # at most a couple of lines, not a tall column
    shot(page, "12-copy-console-physical-ids")


def test_it_shows_the_lock_cards_time_left(page, live_server):
    tabs_world()
    log_in(page, live_server.url, "alice")
    page.goto(f"{live_server.url}/stacks/{A}/us-east-1/orders/")
    left = page.inner_text("#lock-time-left")
    assert "minute" in left and ("left" in left or "in " in left), left
    shot(page, "13-lock-card-time-left")


def test_it_downloads_a_version_and_diffs_property_by_property(page, live_server):
    find.world()
    with (
        mock.patch.object(history, "list_versions", autospec=True, side_effect=find.versions),
        mock.patch.object(history, "get_version", autospec=True, side_effect=find.get_version),
    ):
        log_in(page, live_server.url, "olivia")
        page.goto(f"{live_server.url}/stacks/{A}/us-east-1/network/history/")
        page.wait_for_selector("#versions")
        text = page.locator("#versions").inner_text()
        assert "Download" in text and "2025-12-01 09:00:00" in text
        with page.expect_download() as download:
            page.locator("#versions a:text('Download')").first.click()
        assert json.loads(Path(download.value.path()).read_text())["stackName"] == "network"
        shot(page, "14-history-versions")
        page.check("input[name=a][value=v1]")
        page.check("input[name=b][value=v2]")
        page.click("button:text('Compare')")
        page.wait_for_selector("h1:text('diff')")
        content = page.content()
    assert "properties.CidrBlock" in content and "2025-12-01 08:00:00.000 UTC" in content
    shot(page, "15-history-diff")


def test_it_lists_exports_with_exporter_and_importers(page, live_server):
    find.world()
    log_in(page, live_server.url, "olivia")
    page.click("nav.topbar a:text('Exports')")
    row = page.locator("#exports tbody tr", has_text="Shared-VpcId")
    text = row.inner_text()
    assert "vpc-1" in text and "network" in text and "api" in text and "web" in text
    shot(page, "16-exports")
    row.locator("a:text('web')").click()
    page.wait_for_selector("h1:text('web')")


def test_it_picks_among_2000_resources_filters_and_selects_all_matches(page, live_server, monkeypatch):
    find.world()
    fake_compute(monkeypatch)
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/")
    page.click("a:text('a-very-long-stack-name')")
    page.click("a:text('Orphan resources')")
    page.wait_for_selector("#pick-resources")
    assert "Pick at least one" not in page.content()  # no error before anything is submitted
    rows = page.locator("#picker-select tbody tr")
    expect(rows).to_have_count(100)
    assert "AWS::SQS::Queue" in rows.first.inner_text() or "AWS::S3::Bucket" in rows.first.inner_text()
    assert page.evaluate("document.documentElement.scrollHeight") < 20_000  # not a 42,619-px column
    page.fill("#picker-filter input[name=match]", "queue-with-a-long-name-019")
    page.click("#picker-filter button")
    expect(rows).to_have_count(10)
    shot(page, "17-picker-filtered", full_page=False)
    page.click("#select-all-matches")
    page.wait_for_selector("#plan")
    assert page.locator("#confirm input[name=resources]").count() == 10
    shot(page, "17b-picker-submitted", full_page=False)


# -- Say what happened ---------------------------------------------------------------------------


def test_it_reports_sync_progress_and_updates_the_account_cards(page, live_server):
    from django.utils import timezone

    prod = find.world()
    olivia = Membership.objects.get(account=prod).user
    run = SyncRun.objects.create(
        account=prod, account_ids=[prod.pk], requested_by=olivia, status=SyncStatus.RUNNING, total=4, done=1
    )
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/")
    page.locator(f"#sync-run-{run.pk}").get_by_text("1 of 4 records downloaded").wait_for()
    shot(page, "18-sync-progress")
    make_stack(prod, "found-by-the-sync")
    result = {"accounts": [{"account": A, "listed": 5, "fetched": 1, "unchanged": 4, "removed": 0, "errors": []}]}
    SyncRun.objects.filter(pk=run.pk).update(status=SyncStatus.SUCCEEDED, finished_at=timezone.now(), result=result)
    page.locator(f"#sync-run-{run.pk}").get_by_text("5 records listed").wait_for()
    expect(page.locator("#accounts-summary")).to_contain_text("5 stacks")
    shot(page, "19-sync-ended-cards-updated")


def test_it_says_what_would_appear_in_an_empty_list(page, live_server):
    prod = make_account(A, "prod")
    Membership.objects.create(user=make_user("olivia"), account=prod, role=Role.OPERATOR)
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/stacks/")
    assert "appear here once a sync" in page.inner_text("#no-stacks")
    shot(page, "20a-empty-stacks")
    page.goto(f"{live_server.url}/events/")
    assert page.locator("#no-runs").count() == 1 and page.inner_text("#no-runs").strip()
    shot(page, "20b-empty-events")


def test_it_tells_a_person_with_no_role_and_offers_no_sync(page, live_server):
    make_account(A, "prod")
    make_user("nobody")
    log_in(page, live_server.url, "nobody")
    page.goto(f"{live_server.url}/stacks/")
    assert "no role on any account" in page.inner_text("main")
    assert page.locator("form[action='/sync/'], button:text('Sync now')").count() == 0
    shot(page, "21-no-role")


def test_it_links_stack_names_in_the_timeline(page, live_server):
    prod = make_account(A, "prod")
    Membership.objects.create(user=make_user("olivia"), account=prod, role=Role.VIEWER)
    make_stack(prod, "network")
    make_run(prod, "network", "20261201T080000000Z-aaaaaaaa", command="deploy", result="FAILED")
    log_in(page, live_server.url, "olivia")
    page.goto(f"{live_server.url}/events/")
    link = page.locator("#runs-table a:text-is('network')").first
    assert link.get_attribute("href").endswith(f"/stacks/{A}/us-east-1/network/")
    shot(page, "22-timeline-links")
    link.click()
    page.wait_for_selector("h1:text('network')")


def test_it_says_event_indexes_in_the_admin(page, live_server):
    make_user("root", is_staff=True, is_superuser=True)
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw")
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_selector("#content")
    text = page.inner_text("#content")
    assert "Event indexes" in text and "Event indexs" not in text
    assert "Assemblies" in text and "Assemblys" not in text  # the same naive plural, found on this page
    shot(page, "23-admin-event-indexes")
