"""A deploy in the browser: an operator uploads the golden cdk.out for a new stack on the
account's plan page, reads the plan and requests the deploy with a reason; an approver (another
person) approves it; the requester watches each resource go to "created" while the run (the
RQ job's `run_operation`, in a thread) deploys through the engine to the moto server, slowed
by the proxy so the page is seen mid-run, until Succeeded. Screenshots: /tmp/deploy-op-*.png.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from stacks.models import Account, Membership, Operation, Role
from stacks.operations import run_operation
from tests.browser.conftest import log_in
from tests.deploy.zips import GOLDEN, zip_dir
from tests.views.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A = "111111111111"
BUCKET = f"cdkd-state-{A}"
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"


def test_it_uploads_plans_requests_approves_and_watches_a_deploy(browser, page, live_server, aws, tmp_path, settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "assemblies": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "assemblies")},
        },
    }
    aws.make_bucket(A, BUCKET)
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        Membership.objects.create(user=make_user(name), account=account, role=role)
    upload = tmp_path / "cdk.out.zip"
    upload.write_bytes(zip_dir(GOLDEN, prefix="cdk.out/"))
    base = live_server.url

    log_in(page, base, "olivia")
    page.goto(f"{base}/accounts/{A}/plan/")
    page.set_input_files("#id_assembly_file", str(upload))
    page.click("#plan-submit")
    page.wait_for_selector("#plan-summary")
    assert "5 to create" in page.inner_text("#plan-summary")
    page.fill("#plan-request textarea[name=reason]", "first deploy")
    page.screenshot(path="/tmp/deploy-op-plan.png", full_page=True)
    page.click("#request-deploy")
    page.wait_for_selector("#operation-status:text('Awaiting approval')")
    op = Operation.objects.get()
    assert op.kind == "deploy" and op.reason == "first deploy"

    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        arthur = other.new_page()
        log_in(arthur, base, "arthur")
        arthur.goto(f"{base}/operations/{op.pk}/")
        assert "Queue4A7E3555" in arthur.inner_text("main")  # the approver sees the plan's resources
        arthur.screenshot(path="/tmp/deploy-op-approve.png", full_page=True)
        arthur.click("#decide button[value=approve]")
        arthur.wait_for_selector("#operation-status:text('Queued')")
    finally:
        other.close()

    aws.proxy.latency = 0.3  # slow enough to see the deploy half-way

    def work() -> None:
        try:
            run_operation(op.pk)
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    try:
        page.goto(f"{base}/operations/{op.pk}/")
        page.wait_for_selector("#operation-items .badge.status-created", timeout=30_000)
        page.screenshot(path="/tmp/deploy-op-running.png", full_page=True)
        page.wait_for_selector("#operation-status:text('Succeeded')", timeout=90_000)
    finally:
        worker.join(timeout=90)
        aws.proxy.latency = 0.0
    assert page.locator("#operation-items .badge.status-created").count() == 5
    page.screenshot(path="/tmp/deploy-op-succeeded.png", full_page=True)
    assert len(json.loads(aws.get(A, BUCKET, KEY))["resources"]) == 5
