"""Every page against a synced moto world, through the real S3 path: what a viewer of the
account sees, and that a person with no role on it sees none of it."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from stacks.models import Account, Membership, Role, Stack
from stacks.sync import sync_accounts

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1, A2 = "111111111111", "222222222222"
B1, B2 = f"cdkd-state-{A1}", f"cdkd-state-{A2}"


def body(stack: str, resources: dict, outputs: dict | None = None) -> dict:
    return {"version": 11, "stackName": stack, "region": "us-east-1", "resources": resources, "outputs": outputs or {}}


QUEUE = {"physicalId": "https://sqs/q", "resourceType": "AWS::SQS::Queue", "properties": {"VisibilityTimeout": 30}}


@pytest.fixture
def world(aws, django_user_model):
    aws.make_bucket(A1, B1)
    aws.make_bucket(A2, B2)
    key = "cdkd/Orders/us-east-1/state.json"
    first = aws.put(A1, B1, key, body("Orders", {"Queue": QUEUE}))
    aws.put(A1, B1, key, body("Orders", {"Queue": {**QUEUE, "properties": {"VisibilityTimeout": 60}}}, {"Url": "u"}))
    aws.put(A1, B1, "cdkd/Orders/us-east-1/lock.json", {"owner": "ci", "timestamp": 1, "expiresAt": 2})
    aws.put(A2, B2, "cdkd/PaymentsLedger/us-east-1/state.json", body("PaymentsLedger", {}))
    accounts = [
        Account.objects.create(account_id=a, name=n, role_arn=f"arn:aws:iam::{a}:role/cdkd-admin")
        for a, n in ((A1, "prod"), (A2, "payments-secret-acct"))
    ]
    sync_accounts(accounts)
    alice = django_user_model.objects.create_user("alice", password="pw")
    Membership.objects.create(user=alice, account=accounts[0], role=Role.VIEWER)
    django_user_model.objects.create_user("charlie", password="pw")
    return {"first_version": first["VersionId"]}


def stack_urls(stack: Stack, first_version: str) -> list[str]:
    kw = {"account_id": stack.account.account_id, "region_slug": stack.region_slug, "stack_name": stack.stack_name}
    return [
        reverse("stack", kwargs=kw),
        reverse("stack_json", kwargs=kw),
        reverse("stack_download", kwargs=kw),
        reverse("stack_history", kwargs=kw),
        reverse("stack_version", kwargs={**kw, "version_id": first_version}),
        reverse("stack_diff", kwargs=kw) + f"?a={first_version}&b=current",
        reverse("stack_resource", kwargs={**kw, "logical_id": "Queue"}),
    ]


def test_it_shows_every_page_of_a_synced_stack(client, world):
    client.login(username="alice", password="pw")
    orders = Stack.objects.get(stack_name="Orders")

    pages = {url: client.get(url) for url in stack_urls(orders, world["first_version"])}

    assert {url: r.status_code for url, r in pages.items()} == dict.fromkeys(pages, 200)
    history, version, diff = (r.content.decode() for r in list(pages.values())[3:6])
    assert world["first_version"] in history
    assert "30" in version and '"Url"' not in version
    assert "VisibilityTimeout" in diff and "60" in diff
    download = list(pages.values())[2]
    assert json.loads(download.content)["outputs"] == {"Url": "u"}
    listing = client.get(reverse("stacks")).content.decode()
    assert "Orders" in listing and "PaymentsLedger" not in listing
    assert (
        "Expired"
        in client.get(
            reverse("stack", kwargs={"account_id": A1, "region_slug": "us-east-1", "stack_name": "Orders"})
        ).content.decode()
    )


def test_it_hides_an_account_from_a_person_with_no_role_on_it(client, world):
    client.login(username="alice", password="pw")
    secret = Stack.objects.get(stack_name="PaymentsLedger")

    statuses = [client.get(url).status_code for url in stack_urls(secret, world["first_version"])]

    assert statuses == [404] * 7
    assert "payments-secret-acct" not in client.get(reverse("accounts")).content.decode()
    assert "PaymentsLedger" not in client.get(reverse("stacks") + "?q=Ledger").content.decode()


def test_it_shows_nothing_to_charlie(client, world):
    client.login(username="charlie", password="pw")
    orders = Stack.objects.get(stack_name="Orders")

    assert [client.get(url).status_code for url in stack_urls(orders, world["first_version"])] == [404] * 7
    assert "Orders" not in client.get(reverse("stacks")).content.decode()


def test_it_explains_a_version_that_does_not_exist(client, world):
    client.login(username="alice", password="pw")
    orders = Stack.objects.get(stack_name="Orders")
    kw = {
        "account_id": A1,
        "region_slug": orders.region_slug,
        "stack_name": "Orders",
        "version_id": "no-such/version+id",
    }

    response = client.get(reverse("stack_version", kwargs=kw))

    assert response.status_code == 404
    assert B1 in response.content.decode() and "Traceback" not in response.content.decode()
