"""An operator requests an orphan on a stack's page, an approver approves it in another
browser, a worker runs it, and the requester's page shows it finish without a reload.

Real engine: the `orphan` spec runs against the moto server (the `aws` fixture), and the
worker is RQ's SimpleWorker in this process (burst mode, on the main thread because RQ
installs signal handlers) while both browsers stay on their pages.
"""

from __future__ import annotations

import pytest

from stacks.models import Account, AuditEvent, Membership, Operation, Role, Stack
from stacks.sync import sync_account
from tests.browser.conftest import log_in
from tests.views.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A = "111111111111"
BUCKET = f"cdkd-state-{A}"
STATE_KEY = "cdkd/Shop/us-east-1/state.json"
RECORD = {
    "version": 11,
    "stackName": "Shop",
    "region": "us-east-1",
    "resources": {"Queue": {"physicalId": "q-shop", "resourceType": "AWS::SQS::Queue", "properties": {}}},
    "outputs": {},
    "lastModified": 1_710_835_200_000,
}


def test_it_requests_approves_and_watches_an_orphan_finish(browser, page, live_server, aws, queue, artifacts):
    from rq import SimpleWorker

    aws.make_bucket(A, BUCKET)
    aws.put(A, BUCKET, STATE_KEY, RECORD)
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        Membership.objects.create(user=make_user(name), account=account, role=role)
    sync_account(account)
    assert Stack.objects.filter(stack_name="Shop").exists()
    base = live_server.url

    # olivia asks for the orphan from the stack's page and reads the plan first.
    log_in(page, base, "olivia")
    page.goto(f"{base}/stacks/{A}/us-east-1/Shop/")
    page.click("#stack-operations a:text('Orphan record')")
    page.wait_for_selector("#plan")
    assert "The AWS resources are not touched." in page.inner_text("#aws-untouched")
    page.screenshot(path=str(artifacts / "operation-confirm.png"), full_page=True)
    page.click("#confirm button[type=submit]")
    page.wait_for_selector("#operation-status:text('Awaiting approval')")
    op = Operation.objects.get()
    assert page.url.endswith(f"/operations/{op.pk}/")
    page.evaluate("window.stillTheSamePage = true")

    # arthur finds it in his inbox and approves it.
    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        arthur = other.new_page()
        arthur.set_default_timeout(10_000)
        log_in(arthur, base, "arthur")
        assert arthur.inner_text("#nav-inbox-count") == "1"
        arthur.goto(f"{base}/operations/")
        arthur.click(f"#operation-table a:text('#{op.pk}')")
        arthur.fill("#decide textarea[name=comment]", "Shop was moved to another tool")
        arthur.click("#decide button[value=approve]")
        arthur.wait_for_selector("#operation-status:text('Queued')")
        arthur.screenshot(path=str(artifacts / "operation-approved.png"), full_page=True)
    finally:
        other.close()

    # olivia's page, still open, follows the run by polling.
    page.wait_for_selector("#operation-status:text('Queued')", timeout=10_000)
    SimpleWorker([queue], connection=queue.connection).work(burst=True)
    page.wait_for_selector("#operation-status:text('Succeeded')", timeout=15_000)
    assert page.evaluate("window.stillTheSamePage") is True  # no reload
    assert "Shop was moved to another tool" in page.inner_text("#approvals")
    page.screenshot(path=str(artifacts / "operation-succeeded.png"), full_page=True)

    op.refresh_from_db()
    assert op.status == "succeeded"
    assert aws.etag(A, BUCKET, STATE_KEY) is None  # the record is gone; AWS resources were never touched
    assert not Stack.objects.filter(stack_name="Shop").exists()  # re-synced
    actions = list(AuditEvent.objects.filter(operation=op).order_by("id").values_list("action", flat=True))
    assert actions == ["operation.requested", "operation.approved", "operation.started", "operation.finished"]

    page.goto(f"{base}/audit/?stack=Shop")
    assert page.locator("#audit-table tbody tr").count() == 4
    page.screenshot(path=str(artifacts / "audit.png"), full_page=True)
    page.goto(f"{base}/operations/?tab=mine")
    assert page.locator("#operation-table tbody tr .badge").inner_text() == "Succeeded"
    page.screenshot(path=str(artifacts / "operations.png"), full_page=True)


def test_it_lets_an_admin_edit_the_policy_and_people(page, live_server, artifacts):
    account = Account.objects.create(account_id=A, name="prod")
    Membership.objects.create(user=make_user("ada"), account=account, role=Role.ADMIN)
    make_user("nina")
    log_in(page, live_server.url, "ada")
    page.click("a:text('Accounts')")
    page.click("a:text('Policy and people')")
    row = page.locator("#policy-orphan")
    row.locator("input[name=approvers_needed]").fill("2")
    row.locator("button:text('Save')").click()
    page.wait_for_selector("text=Saved the policy for orphan record")
    page.fill("#add-member input[name=username]", "nina")
    page.select_option("#add-member select[name=role]", "approver")
    page.click("#add-member button[type=submit]")
    page.wait_for_selector("#member-nina")
    assert page.locator("#member-nina select").input_value() == "approver"
    page.screenshot(path=str(artifacts / "account-settings.png"), full_page=True)
    assert [(e.action, e.details) for e in AuditEvent.objects.order_by("id")] == [
        ("policy.changed", {"change": "orphan: 2x 24h"}),
        ("membership.changed", {"change": "nina: none->approver"}),
    ]
