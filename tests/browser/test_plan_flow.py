"""Plan a deploy in the browser: an operator uploads a zipped cdk.out from the stack page,
the plan is computed against the record cdkd 0.284.40 wrote (moto server), and the plan
page shows the replacement and the blocking reason; a viewer opens the shared link.

The assembly is the real aws-cdk-lib synth of the edited sample app (a topic rename: a
replacement) with its SSM parameter renamed too (a stateful replacement the first deploy
engine refuses: a blocking reason).
"""

from __future__ import annotations

import pytest

from stacks.models import Account, DeployPlan, Membership, Role
from stacks.sync import sync_account
from tests.browser.conftest import log_in
from tests.deploy.zips import GOLDEN_CHANGED, SAMPLE, with_stateful_replacement, zip_dir
from tests.views.conftest import make_user

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A = "111111111111"
BUCKET = f"cdkd-state-{A}"
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"
SCREENSHOT = "/tmp/planweb-plan.png"
# Every Content-Security-Policy violation is pushed to the console, where the test reads it.
REPORT_VIOLATIONS = """
document.addEventListener('securitypolicyviolation', (e) => {
  console.error('CSP violation: ' + e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline'));
});
"""


def test_it_uploads_plans_and_reads_a_replacement_and_a_blocking_reason(
    browser, page, live_server, aws, tmp_path, settings
):
    settings.STORAGES = {
        **settings.STORAGES,
        "assemblies": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "assemblies")},
        },
    }
    aws.make_bucket(A, BUCKET)
    aws.put(A, BUCKET, KEY, (SAMPLE / "state.json").read_bytes())
    account = Account.objects.create(account_id=A, name="prod", role_arn=f"arn:aws:iam::{A}:role/cdkd-admin")
    for name, role in (("olivia", Role.OPERATOR), ("vera", Role.VIEWER)):
        Membership.objects.create(user=make_user(name), account=account, role=role)
    sync_account(account)
    upload = tmp_path / "cdk.out.zip"
    upload.write_bytes(zip_dir(GOLDEN_CHANGED, template=with_stateful_replacement, prefix="cdk.out/"))
    base = live_server.url
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.add_init_script(REPORT_VIOLATIONS)

    log_in(page, base, "olivia")
    page.goto(f"{base}/stacks/{A}/us-east-1/GoldenCdkStack/")
    page.click("#plan-deploy-button")
    page.wait_for_selector("#plan-form")
    page.set_input_files("#id_assembly_file", str(upload))
    page.screenshot(path="/tmp/planweb-form.png")
    page.click("#plan-submit")
    page.wait_for_selector("#plan-summary")

    plan = DeployPlan.objects.get()
    assert page.url == f"{base}/plans/{plan.pk}/"
    topic = page.locator("#change-0-topicbfc7af6e")
    assert topic.get_attribute("data-action") == "replace"
    assert "replacement" in topic.locator(".badge.replace").first.inner_text()
    assert "TopicName" in topic.inner_text() and "golden-renamed" in topic.inner_text()
    param = page.locator("#change-0-param165332ec")
    assert param.locator(".badge.stateful").inner_text() == "stateful replacement"
    blocking = page.locator("#plan-blocking").inner_text()
    assert "Param165332EC (AWS::SSM::Parameter): replacing it destroys its data" in blocking
    assert plan.digest in page.inner_text("#plan-digest")
    # the stateful replacement is listed first, in its own colour
    cards = page.locator(".plan-change")
    assert cards.first.get_attribute("id") == "change-0-param165332ec"
    assert "stateful" in (cards.first.get_attribute("class") or "").split()
    assert page.locator("#plan-stale").count() == 0
    page.screenshot(path=SCREENSHOT, full_page=True)
    assert not [line for line in console if "CSP violation" in line]
    assert page.context.request.get(f"{base}/plans/{plan.pk}/").headers.get("content-security-policy")

    # the link can be shared: a viewer reads the same plan, without a "Plan again" button
    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        viewer = other.new_page()
        log_in(viewer, base, "vera")
        viewer.goto(f"{base}/plans/{plan.pk}/")
        assert "replacing it destroys its data" in viewer.inner_text("#plan-blocking")
        assert viewer.get_by_role("link", name="Plan again").count() == 0
    finally:
        other.close()
