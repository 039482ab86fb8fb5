"""htmx under the Content-Security-Policy, as production serves it: gunicorn with DEBUG off
after collectstatic (hashed static files from whitenoise). alice logs in, watches a sync's
progress region poll and swap, searches the stack list, and the browser reports no
CSP violation on any of it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from stacks.models import Membership, Role, SyncRun, SyncStatus
from tests.support.webserver import gunicorn_server
from tests.views.conftest import make_account, make_stack, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every violation, whatever the directive, is pushed to the console where the test reads it.
REPORT_VIOLATIONS = """
document.addEventListener('securitypolicyviolation', (e) => {
  console.error('CSP violation: ' + e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline'));
});
"""


@pytest.fixture
def server(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("the gunicorn process shares the test database only on PostgreSQL")
    with gunicorn_server(tmp_path / "static") as base:
        yield base


def test_it_polls_and_swaps_under_the_policy_with_no_violation(page, server, artifacts):
    alice = make_user("alice")
    prod = make_account("111111111111", "prod")
    Membership.objects.create(user=alice, account=prod, role=Role.VIEWER)
    make_stack(prod, "orders")
    make_stack(prod, "billing")
    run = SyncRun.objects.create(
        account=prod, account_ids=[prod.pk], requested_by=alice, status=SyncStatus.RUNNING, total=10, done=3
    )
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.add_init_script(REPORT_VIOLATIONS)

    response = page.goto(f"{server}/sync/{run.pk}/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    region = page.locator(f"#sync-run-{run.pk}")
    region.get_by_text("3 of 10 records downloaded").wait_for()

    # The worker's progress, picked up by the region's own polling (hx-trigger="every 1s").
    SyncRun.objects.filter(pk=run.pk).update(done=7)
    region.get_by_text("7 of 10 records downloaded").wait_for()
    SyncRun.objects.filter(pk=run.pk).update(
        status=SyncStatus.SUCCEEDED,
        done=10,
        finished_at=timezone.now(),
        result={"accounts": [{"account": "111111111111", "listed": 2, "fetched": 2, "unchanged": 0, "removed": 0}]},
    )
    region.get_by_text("2 records listed, 2 downloaded, 0 unchanged").wait_for()
    assert "2 listed, 2 downloaded" in region.inner_text()
    assert page.evaluate("window.htmx && htmx.config.allowEval") is False
    page.screenshot(path=str(artifacts / "csp-sync.png"), full_page=True)

    # A search swaps the stack table in place.
    page.goto(f"{server}/stacks/")
    assert page.locator("#stack-table tbody tr").count() == 2
    page.fill("#id_q", "orders")
    # A locator wait: Playwright's string predicates would need the eval the policy forbids.
    expect(page.locator("#stack-table tbody tr")).to_have_count(1)
    assert "q=orders" in page.url

    assert [line for line in console if "Content Security Policy" in line or "CSP violation" in line] == []
    assert not [line for line in console if line.startswith("error:") and "favicon" not in line], console
