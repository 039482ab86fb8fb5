"""Actions only where they can succeed, in Chromium: a newer cdkd's record shows its
repairs disabled with the reason; an orphan planned under a live lock offers Force as an
explicit choice, requested with a reason; the approver sees both; cancel asks first.

Real engine: the `orphan` plan runs against the moto server (the `aws` fixture).
Screenshots go to /tmp/ui-actions-*.png."""

from __future__ import annotations

import json
import time

import pytest

from stacks.models import Account, AuditEvent, Membership, Operation, OperationStatus, Role
from stacks.sync import sync_account
from tests.browser.conftest import log_in
from tests.views.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A = "111111111111"
BUCKET = f"cdkd-state-{A}"


def record(name: str, version: int = 11) -> dict:
    return {
        "version": version,
        "stackName": name,
        "region": "us-east-1",
        "resources": {"Queue": {"physicalId": f"q-{name}", "resourceType": "AWS::SQS::Queue", "properties": {}}},
        "outputs": {},
        "lastModified": 1_710_835_200_000,
    }


def test_it_offers_only_what_can_run_and_carries_reason_and_force_to_the_approver(
    browser, page, live_server, aws, queue
):
    aws.make_bucket(A, BUCKET)
    aws.put(A, BUCKET, "cdkd/Shop/us-east-1/state.json", record("Shop"))
    aws.put(A, BUCKET, "cdkd/Future/us-east-1/state.json", record("Future", version=12))
    now = int(time.time() * 1000)
    lock = {"owner": "bob@laptop:4242", "timestamp": now, "expiresAt": now + 600_000, "operation": "deploy"}
    aws.put(A, BUCKET, "cdkd/Shop/us-east-1/lock.json", json.dumps(lock).encode())
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        Membership.objects.create(user=make_user(name), account=account, role=role)
    sync_account(account)
    base = live_server.url

    # A newer cdkd's record: the repairs are there, disabled, each with its reason.
    log_in(page, base, "olivia")
    page.goto(f"{base}/stacks/{A}/us-east-1/Future/")
    assert page.is_disabled("#action-destroy") and page.is_disabled("#action-orphan")
    reasons = page.inner_text("#action-reasons")
    assert "Destroy" in reasons and "newer cdkd (schema version 12" in reasons
    assert "newer cdkd" in page.get_attribute("#action-destroy", "title")
    page.screenshot(path="/tmp/ui-actions-disabled.png", full_page=True)

    # Shop is locked by bob: the orphan's plan predicts the refusal and offers Force.
    page.goto(f"{base}/stacks/{A}/us-east-1/Shop/")
    page.click("#action-orphan")
    page.wait_for_selector("#predicted-refusal")
    assert "locked by bob@laptop:4242" in page.inner_text("#predicted-refusal")
    assert not page.is_checked("#id_force")
    page.fill("#id_reason", "OPS-1234: Shop retired, bob's deploy is stuck")
    page.check("#id_force")
    page.screenshot(path="/tmp/ui-actions-request.png", full_page=True)
    page.click("#confirm button[type=submit]")
    page.wait_for_selector("#operation-status:text('Awaiting approval')")
    op = Operation.objects.get()
    assert op.params == {"force": True} and op.reason.startswith("OPS-1234")
    assert AuditEvent.objects.get(action="operation.requested").details["reason"].startswith("OPS-1234")

    # arthur sees the reason and the override before deciding.
    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        arthur = other.new_page()
        arthur.set_default_timeout(10_000)
        log_in(arthur, base, "arthur")
        arthur.goto(f"{base}/operations/?tab=inbox")
        assert "OPS-1234" in arthur.inner_text("#operation-table")
        arthur.goto(f"{base}/operations/{op.pk}/")
        assert "OPS-1234: Shop retired" in arthur.inner_text("#operation-reason")
        assert "bob@laptop:4242" in arthur.inner_text("#forced-override")
        assert "You approve the override too." in arthur.inner_text("#decide")
        arthur.screenshot(path="/tmp/ui-actions-approver.png", full_page=True)
    finally:
        other.close()

    # olivia cancels: the button asks first, the answer does it.
    page.click("#cancel-button")
    page.wait_for_selector("#cancel-confirm")
    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL
    page.screenshot(path="/tmp/ui-actions-cancel-confirm.png", full_page=True)
    page.click("#cancel-confirm button[name=confirm]")
    page.wait_for_selector("#operation-status:text('Cancelled')")
    op.refresh_from_db()
    assert op.status == OperationStatus.CANCELLED
    page.screenshot(path="/tmp/ui-actions-cancelled.png", full_page=True)
