"""The demo's parts: demo/receiver.py started as its own process (as scripts/demo.sh does)
lists what it is sent and checks the signature; demo/notifications.seed points a webhook of
every account at it. The delivery is the app's real one, run by RQ's SimpleWorker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from stacks import notify
from stacks.models import Account, AuditEvent, Webhook
from tests.notify.conftest import work

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
SECRET = "whsec_demo-test-secret-0123456789"


@pytest.fixture
def demo_receiver():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "CDKD_DEMO_WEBHOOK_SECRET": SECRET}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "demo" / "receiver.py"), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # it says where it listens once it does
        assert f"http://127.0.0.1:{port}/" in line, line
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_it_seeds_demo_webhooks_that_the_demo_receiver_lists_as_signed(monkeypatch, demo_receiver, notify_queue):
    get_user_model().objects.create_user("admin", is_superuser=True)
    get_user_model().objects.create_user("olivia")
    account = Account.objects.create(account_id="111111111111", name="Production")
    Account.objects.create(account_id="222222222222", name="Staging")
    monkeypatch.setenv("CDKD_DEMO_RECEIVER_URL", demo_receiver + "/")
    monkeypatch.setenv("CDKD_DEMO_WEBHOOK_SECRET", SECRET)
    from demo.notifications import seed

    assert len(seed()) == 3 and len(seed()) == 3  # again: updated, not duplicated
    assert Webhook.objects.count() == 3 and AuditEvent.objects.filter(action="webhook.created").count() == 3
    assert get_user_model().objects.get(username="olivia").email == "olivia@demo.example"

    with transaction.atomic():
        event = notify.emit("drift.found", account, stack="Prod-Api", region="us-east-1", drifted=2)
    work(notify_queue)

    listed = json.loads(urllib.request.urlopen(demo_receiver + "/payloads.json", timeout=10).read())
    assert {(item["path"], item["signature_valid"]) for item in listed} == {
        ("/json/111111111111", True),
        ("/slack/111111111111", True),
    }
    page = urllib.request.urlopen(demo_receiver + "/", timeout=10).read().decode()
    assert event.payload_id in page and "signature valid" in page and "Drift found: 2 resource(s)" in page


def test_it_marks_a_payload_signed_with_another_secret(demo_receiver):
    from stacks.webhooks import sign

    body = b'{"id":"evt_x"}'
    request = urllib.request.Request(
        demo_receiver + "/hook",
        data=body,
        method="POST",
        headers={"X-Cdkd-Signature": sign("not-the-demo-secret", body, int(time.time()))},
    )
    urllib.request.urlopen(request, timeout=10).close()
    [item] = json.loads(urllib.request.urlopen(demo_receiver + "/payloads.json", timeout=10).read())
    assert item["signature_valid"] is False and item["body"] == {"id": "evt_x"}
