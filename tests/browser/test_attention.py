"""The attention board in a browser: the rows of an operator's accounts, the problem filter
through htmx (the URL follows), and a force-unlock step that opens its confirmation page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from stacks.models import Membership, Role
from tests.browser.conftest import log_in
from tests.views.conftest import make_account, make_user
from tests.views.test_attention import world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_lists_filters_and_opens_a_next_step(page, live_server):
    prod, dev = make_account("111111111111", "prod"), make_account("222222222222", "dev")
    world(prod, dev)
    oscar = make_user("oscar")
    Membership.objects.create(user=oscar, account=prod, role=Role.OPERATOR)
    Membership.objects.create(user=oscar, account=dev, role=Role.VIEWER)
    log_in(page, live_server.url, "oscar")

    page.goto(f"{live_server.url}/attention/")
    rows = page.locator("#attention-table tbody tr.attention-row")
    expect(rows).to_have_count(11)
    expect(page.locator("#attention-counts")).to_contain_text("11 problems")
    page.screenshot(path="/tmp/board.png", full_page=True)

    page.select_option("#id_kind", "dead-lock")  # the form submits on change, through htmx
    expect(rows).to_have_count(2)
    assert "kind=dead-lock" in page.url
    expect(page.locator("h1")).to_have_text("What needs attention")  # the page was not reloaded away

    with page.expect_navigation():
        expired = page.locator("tr[data-kind=dead-lock]", has_text="Expired lock left by")
        expired.get_by_role("link", name="Force-unlock").click()
    assert "/stacks/111111111111/us-east-1/expired/operations/new/force-unlock/" in page.url
    expect(page.locator("h1")).to_contain_text("Force-unlock")
