"""Issue 14 ("Fit the organisation") walked in Debian Chromium with its real parts:

- single sign-on through the loopback OpenID provider (demo/oidc_provider: django-oauth-
  toolkit in its own process, its login form filled in the browser) ending on the stacks
  page with the role a group rule gave at that login;
- a webhook's delivery log after a real delivery by the notify job to the demo's receiver
  (demo/receiver.py in its own process), and the receiver's own page listing it as signed;
- the API tokens page making a read-only token, shown once, which the API then takes;
- /healthz as JSON, with an RQ worker registered as a starting worker registers itself.

Screenshots go to /tmp/org-*.png, to be looked at.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from playwright.sync_api import expect

from cdkd_site.queues import get_queue
from demo.oidc_provider.process import OidcProvider
from stacks import notify, webhooks
from stacks.models import ApiToken, GroupRoleRule, Membership, Role, SsoIdentity, WebhookDelivery
from stacks.sso import forget_discovery
from tests.browser.conftest import log_in
from tests.notify.conftest import work
from tests.sso.conftest import configure
from tests.views.conftest import make_account, make_stack, make_user

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
PROD, STAGING = "111111111111", "222222222222"
PASSWORD = "priya-provider-pw"
SECRET = "whsec_walk-org-0123456789abcdef"


def shot(page, name: str) -> None:
    page.screenshot(path=f"/tmp/org-{name}.png", full_page=True)


@pytest.fixture(scope="module")
def provider(live_server, tmp_path_factory):
    """The provider the demo runs, its client allowed back only to the live server."""
    server = OidcProvider(tmp_path_factory.mktemp("org-provider"))
    server.setup(f"{live_server.url}/oidc/callback/").start()
    yield server
    server.stop()


@pytest.fixture
def notices(settings):
    """The notifications queue on the test Redis, emptied before and after."""
    settings.CDKD_WEBHOOK_BACKOFF_SECONDS = 0
    queue = get_queue("notify")
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


@pytest.fixture
def receiver():
    """demo/receiver.py as scripts/demo.py starts it, checking signatures with SECRET."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "demo" / "receiver.py"), "--port", str(port)],
        env={"PATH": os.environ.get("PATH", ""), "CDKD_DEMO_WEBHOOK_SECRET": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert f"127.0.0.1:{port}" in proc.stdout.readline()  # it says so once it listens
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_it_signs_in_through_the_provider_and_shows_the_role_a_group_rule_gave(page, live_server, settings, provider):
    configure(settings, provider)
    try:
        make_stack(make_account(PROD, "Production"), "Prod-Api")
        make_stack(make_account(STAGING, "Staging"), "Staging-Api")
        GroupRoleRule.objects.create(group="platform-leads", account_pattern="Prod*", role=Role.APPROVER)
        provider.user("priya", PASSWORD, "platform-leads")

        page.goto(f"{live_server.url}/login/")
        expect(page.locator("#sso-login")).to_be_visible()  # beside the password form: local login stays on
        expect(page.locator("#id_password")).to_be_visible()
        page.click("#sso-login")
        page.wait_for_url(f"{provider.url}/**")
        expect(page.locator("h1")).to_have_text("Loopback identity provider")
        page.fill("#id_username", "priya")
        page.fill("#id_password", PASSWORD)
        shot(page, "sso-provider")
        page.click("#provider-submit")

        page.wait_for_url(f"{live_server.url}/stacks/")
        expect(page.locator("h1")).to_have_text("Stacks")
        role = page.locator(f'[data-your-role="{PROD}"]')
        expect(role).to_contain_text("Your role: approver")
        expect(role.locator(".badge")).to_have_text("by group rule")
        expect(page.locator(f'[data-your-role="{STAGING}"]')).to_have_count(0)  # no rule, no role there
        expect(page.locator(".stack-name")).to_have_text(["Prod-Api"])
        expect(page.locator("header, nav").first).to_contain_text("priya")
        shot(page, "sso-stacks")
    finally:
        forget_discovery()

    identity = SsoIdentity.objects.select_related("user").get()
    assert identity.user.username == "priya" and identity.groups == ["platform-leads"]
    assert identity.issuer == provider.issuer
    assert list(Membership.objects.values_list("account__account_id", "role", "rule_role", "source")) == [
        (PROD, "approver", "approver", "rule")
    ]


def test_it_shows_a_delivery_in_the_webhook_log_and_on_the_receiver(page, live_server, settings, notices, receiver):
    settings.CDKD_BASE_URL = live_server.url
    account = make_account(PROD, "Production")
    adele = make_user("adele")
    Membership.objects.create(user=adele, account=account, role=Role.ADMIN)
    data = {"name": "demo receiver", "url": f"{receiver}/json/{PROD}", "secret": SECRET, "format": "json"}
    hook = webhooks.save_webhook(adele, account, {**data, "events": ["drift.found"], "active": True})
    with transaction.atomic():
        event = notify.emit("drift.found", account, stack="Prod-Api", region="us-east-1", drifted=2)
    work(notices)  # the fan-out job, then the delivery job: a real POST to the receiver

    [delivery] = WebhookDelivery.objects.all()
    assert delivery.status_code == 200
    log_in(page, live_server.url, "adele")
    page.goto(f"{live_server.url}/accounts/{PROD}/settings/webhooks/{hook.pk}/")
    row = page.locator(f"#delivery-{delivery.pk}")
    expect(row).to_contain_text(event.payload_id)
    expect(row).to_contain_text("200")
    shot(page, "webhook-log")

    page.goto(f"{receiver}/")
    expect(page.locator("body")).to_contain_text("1 payload(s) received")
    expect(page.locator("body")).to_contain_text("signature valid")
    expect(page.locator("body")).to_contain_text("Drift found: 2 resource(s) of Prod-Api (us-east-1) on Production")
    shot(page, "receiver")


def test_it_makes_an_api_token_shown_once(page, live_server):
    account = make_account(PROD, "Production")
    olivia = make_user("olivia")
    Membership.objects.create(user=olivia, account=account, role=Role.OPERATOR)
    log_in(page, live_server.url, "olivia")

    page.goto(f"{live_server.url}/tokens/")
    page.fill("#token-form input[name=name]", "nightly-report")
    expect(page.locator("#token-form input[name=read_only]")).to_be_checked()
    page.click("#token-form button[type=submit]")
    secret = page.locator("#token-secret").inner_text().strip()
    assert secret.startswith("cdkd_")
    expect(page.locator("#new-token")).to_contain_text("shown only this once")
    token = ApiToken.objects.get(user=olivia)
    expect(page.locator(f"#token-{token.pk}")).to_contain_text("read-only")
    shot(page, "token-made")

    page.goto(f"{live_server.url}/tokens/")  # again: the secret is gone for good
    expect(page.locator("#token-secret")).to_have_count(0)
    assert secret not in page.content() and secret not in token.token_hash
    expect(page.locator(f"#token-{token.pk}")).to_contain_text(token.prefix)
    shot(page, "token-list")
    api = page.request.get(f"{live_server.url}/api/v1/accounts", headers={"Authorization": f"Bearer {secret}"})
    assert api.status == 200 and [a["account_id"] for a in api.json()["items"]] == [PROD]


def test_it_answers_healthz_as_json(page, live_server, notices):
    from rq import Worker

    # As a starting `cdkd worker` registers itself (its hash and heartbeat in RQ's registry).
    worker = Worker(list(django_settings.RQ_QUEUES), connection=notices.connection, name="walk-org-worker")
    worker.register_birth()
    try:
        response = page.goto(f"{live_server.url}/healthz")
        assert response.status == 200 and response.headers["content-type"].startswith("application/json")
        body = json.loads(page.locator("body").inner_text())
        assert body["status"] == "ok"
        assert {name: check["ok"] for name, check in body["checks"].items()} == {
            "database": True,
            "redis": True,
            "worker": True,
        }
        shot(page, "healthz")
    finally:
        worker.register_death()
