"""A destroy requested, approved, watched resource by resource, and found in the timeline.

Real engine against the moto server: the destroy deletes real SQS queues through the
providers. The run goes through a proxy that adds latency, so the page can be seen
mid-destroy; the operation runs in a thread (`run_operation`, what the RQ job calls) while
the requester's page polls.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from stacks.models import Account, ApprovalPolicy, Membership, Operation, Role
from stacks.operations import run_operation
from stacks.sync import sync_account
from tests.browser.conftest import log_in
from tests.views.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A = "111111111111"
BUCKET = f"cdkd-state-{A}"
NAMES = [f"jobs-{i}" for i in range(5)]


def test_it_requests_approves_watches_a_destroy_and_opens_its_run(browser, page, live_server, aws, artifacts):
    sqs = aws.account_session(A).client("sqs", region_name="us-east-1", endpoint_url=aws.moto.url)
    resources = {
        f"Queue{i}": {
            "physicalId": sqs.create_queue(QueueName=name)["QueueUrl"],
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": name},
            "provisionedBy": "sdk",
        }
        for i, name in enumerate(NAMES)
    }
    aws.make_bucket(A, BUCKET)
    aws.put(
        A,
        BUCKET,
        "cdkd/Jobs/us-east-1/state.json",
        {"version": 11, "stackName": "Jobs", "region": "us-east-1", "resources": resources, "outputs": {}},
    )
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    ApprovalPolicy.objects.create(account=account, kind="destroy", approvers_needed=1)
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        Membership.objects.create(user=make_user(name), account=account, role=role)
    sync_account(account)
    base = live_server.url

    log_in(page, base, "olivia")
    page.goto(f"{base}/stacks/{A}/us-east-1/Jobs/")
    page.click("#destroy-button")
    page.wait_for_selector("#plan")
    for name in NAMES:
        assert name in page.inner_text("#plan")
    page.fill("#id_confirm_name", "Jobs")
    page.click("#confirm button[type=submit]")
    page.wait_for_selector("#operation-status:text('Awaiting approval')")
    op = Operation.objects.get()

    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        arthur = other.new_page()
        log_in(arthur, base, "arthur")
        arthur.goto(f"{base}/operations/{op.pk}/")
        arthur.click("#decide button[value=approve]")
        arthur.wait_for_selector("#operation-status:text('Queued')")
    finally:
        other.close()

    aws.proxy.latency = 0.3  # slow enough to see the destroy half-way

    def work() -> None:
        try:
            run_operation(op.pk)
        finally:
            connection.close()  # this thread's own connection, or the test database cannot be dropped

    worker = threading.Thread(target=work)
    worker.start()
    try:
        page.wait_for_selector("#operation-items .badge.status-deleted", timeout=20_000)
        assert "Running" in page.inner_text("#operation-status")
        page.screenshot(path=str(artifacts / "destroy-running.png"), full_page=True)
        page.wait_for_selector("#operation-status:text('Succeeded')", timeout=60_000)
    finally:
        worker.join(timeout=60)
        aws.proxy.latency = 0.0
    assert page.locator("#operation-items .badge.status-deleted").count() == len(NAMES)
    page.screenshot(path=str(artifacts / "destroy-succeeded.png"), full_page=True)
    assert sqs.list_queues().get("QueueUrls", []) == []

    page.click("#operation-run")
    page.wait_for_selector("#run-events")
    events = page.inner_text("#run-events")
    assert "RUN_STARTED" in events and "RUN_FINISHED" in events and events.count("RESOURCE_SUCCEEDED") == len(NAMES)
    page.screenshot(path=str(artifacts / "destroy-run.png"), full_page=True)
    page.goto(f"{base}/events/?stack=Jobs")
    assert "destroy" in page.inner_text("main") and "SUCCEEDED" in page.inner_text("main")
