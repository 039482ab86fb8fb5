"""Huge records stay bounded (issue 8): a 20 MB record with 20,000 resources syncs, and its
pages paginate the resources, cut the outputs and the inline JSON (offering the download),
with a query count that does not grow with the record. A record over the download bound is
never fetched and shows why.

vera is a viewer on account 111111111111 ("prod").
"""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from engine import schema
from stacks.models import Account, Membership, Resource, Stack
from stacks.sync import sync_account
from stacks.views import detail, present

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
STACK_URL = f"/stacks/{A1}/us-east-1/Huge/"


def huge_record(resources: int = 20_000, outputs: int = 2_000) -> bytes:
    pad = "x" * 900
    rows = {
        f"Res{i:05d}": {
            "physicalId": f"queue-{i}",
            "resourceType": "AWS::SQS::Queue",
            "properties": {"QueueName": f"q{i}", "Pad": pad},
            "dependencies": [f"Res{i - 1:05d}"] if i else [],
        }
        for i in range(resources)
    }
    body = {
        "version": 11,
        "stackName": "Huge",
        "region": "us-east-1",
        "resources": rows,
        "outputs": {f"Out{i}": f"value-{i}" for i in range(outputs)},
        "lastModified": 1795955307315,
    }
    return json.dumps(body, indent=2).encode()


@pytest.fixture
def vera(aws, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    aws.make_bucket(A1, BUCKET)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    user = User.objects.create_user("vera", password="pw")
    Membership.objects.create(user=user, account=account, role="viewer")
    client = Client()
    client.force_login(user)
    client.account = account
    return client


def get(client: Client, path: str) -> tuple[int, bytes, int, float]:
    with CaptureQueriesContext(connection) as queries:
        started = time.monotonic()
        response = client.get(path)
        seconds = time.monotonic() - started
    return response.status_code, response.content, len(queries), seconds


def test_it_syncs_and_shows_a_20_mb_record_of_20000_resources_in_pages(aws, vera):
    body = huge_record()
    assert len(body) > 20_000_000
    aws.put(A1, BUCKET, "cdkd/Huge/us-east-1/state.json", body)
    aws.put(A1, BUCKET, "cdkd/Small/us-east-1/state.json", huge_record(resources=3, outputs=1))

    started = time.monotonic()
    result = sync_account(vera.account)
    print(f"sync of 20,000 resources: {time.monotonic() - started:.1f} s")

    assert result.errors == []
    assert Resource.objects.filter(stack__stack_name="Huge").count() == 20_000

    status, page1, queries1, seconds = get(vera, STACK_URL + "resources/")
    print(f"stack page (resources tab): {seconds:.2f} s, {len(page1):,} bytes, {queries1} queries")
    assert status == 200
    assert page1.count(b'<tr id="res-Res') == present.RESOURCES_PER_PAGE
    assert b"1 / 100" in page1 and b"?page=2" in page1
    status, outputs, _, _ = get(vera, STACK_URL + "outputs/")
    assert outputs.count(b'<td><span class="mono">Out') == detail.OUTPUTS_SHOWN and b'id="outputs-cut"' in outputs

    status, last, queries_last, _ = get(vera, STACK_URL + "resources/?page=100")
    assert status == 200 and b"res-Res19999" in last and b"res-Res00000" not in last
    _, _, queries_small, _ = get(vera, f"/stacks/{A1}/us-east-1/Small/resources/")
    assert queries1 == queries_last == queries_small  # the record's size costs no query

    status, text, queries_json, seconds = get(vera, STACK_URL + "json/")
    print(f"json page: {seconds:.2f} s, {len(text):,} bytes, {queries_json} queries")
    assert status == 200 and b'id="json-truncated"' in text
    assert len(text) < 2 * detail.JSON_INLINE_BYTES  # HTML escaping of the quotes, at most
    assert f'href="{STACK_URL}download/"'.encode() in text

    status, one, _, seconds = get(vera, STACK_URL + "resources/Res12345/")
    print(f"resource page: {seconds:.2f} s")
    assert status == 200 and b"queue-12345" in one

    download = vera.get(STACK_URL + "download/")
    assert download.status_code == 200 and download.content == body


def test_it_never_downloads_a_record_over_the_bound(aws, vera, monkeypatch):
    monkeypatch.setattr(schema, "MAX_BODY_BYTES", 50_000)
    aws.put(A1, BUCKET, "cdkd/Huge/us-east-1/state.json", huge_record(resources=100, outputs=1))
    aws.put(A1, BUCKET, "cdkd/Huge/us-east-1/lock.json", json.dumps({"owner": "x" * 60_000}).encode())
    aws.put(A1, BUCKET, "cdkd/Small/us-east-1/state.json", huge_record(resources=3, outputs=1))

    result = sync_account(vera.account)

    assert result.errors == [] and (result.listed, result.fetched) == (2, 2)
    assert aws.requests["GetObject"] == 1  # Small only
    huge = Stack.objects.get(stack_name="Huge")
    assert [d["code"] for d in huge.defects] == ["too-large"] and huge.read_only and bytes(huge.body) == b""
    assert huge.lock.state() == "unreadable" and "over the 50,000" in huge.lock.error

    aws.reset_counts()
    again = sync_account(vera.account)
    assert (again.fetched, again.unchanged) == (0, 2) and aws.requests["GetObject"] == 0

    status, page, _, _ = get(vera, STACK_URL)
    assert status == 200 and b'data-code="too-large"' in page and b"aws s3 cp" in page
    status, text, _, _ = get(vera, STACK_URL + "json/")
    assert status == 200 and b'data-code="too-large"' in text
