"""Destroy from the web against moto: the stack page's Destroy button, the confirmation page
with the real engine's plan (every resource's action in order), the typed stack name, the
approval, an in-process worker deleting the resources, the operation page's items."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rq import SimpleWorker

from stacks.models import Account, Membership, Operation, OperationStatus, Role, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
REGION = "us-east-1"
STATE = "cdkd/Shop/us-east-1/state.json"


@pytest.fixture
def shop(aws, django_user_model):
    sqs = aws.account_session(A1).client("sqs", region_name=REGION, endpoint_url=aws.moto.url)
    url = sqs.create_queue(QueueName="shop-q")["QueueUrl"]
    logs = aws.account_session(A1).client("logs", region_name=REGION, endpoint_url=aws.moto.url)
    logs.create_log_group(logGroupName="/shop/logs")
    aws.make_bucket(A1, BUCKET)
    record = {
        "version": 11,
        "stackName": "Shop",
        "region": REGION,
        "resources": {
            "Queue": {"physicalId": url, "resourceType": "AWS::SQS::Queue", "properties": {}, "attributes": {}},
            "Logs": {
                "physicalId": "/shop/logs",
                "resourceType": "AWS::Logs::LogGroup",
                "deletionPolicy": "Retain",
                "properties": {},
                "attributes": {},
            },
            "Ghost": {"resourceType": "AWS::SNS::Topic", "properties": {}, "attributes": {}},
        },
        "outputs": {},
        "lastModified": 1_700_000_000_000,
    }
    aws.put(A1, BUCKET, STATE, record)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    people = {}
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        people[name] = django_user_model.objects.create_user(name)
        Membership.objects.create(user=people[name], account=account, role=role)
    sync_account(account)
    return {"account": account, "people": people, "sqs": sqs, "url": url, "logs": logs}


def test_it_destroys_a_stack_requested_from_its_page_and_approved(aws, queue, shop):
    olivia, arthur = Client(), Client()
    olivia.force_login(shop["people"]["olivia"])
    arthur.force_login(shop["people"]["arthur"])
    stack_page = olivia.get(reverse("stack", args=[A1, REGION, "Shop"])).content.decode()
    url = reverse("operation_new", args=[A1, REGION, "Shop", "destroy"])
    assert url in stack_page

    preview = olivia.get(url, {"concurrency": 2})
    assert preview.status_code == 200, preview.content[:2000]
    actions = {r["logical_id"]: r["action"] for r in preview.context["destroy_rows"]}
    assert actions == {"Queue": "delete", "Logs": "retain", "Ghost": "skip"}
    assert b"Type <strong" in preview.content
    digest = preview.context["digest"]

    assert olivia.post(url, {"concurrency": 2, "plan_digest": digest, "confirm_name": "shop"}).status_code == 400
    assert not Operation.objects.exists()
    response = olivia.post(url, {"concurrency": 2, "plan_digest": digest, "confirm_name": "Shop"})
    assert response.status_code == 302
    op = Operation.objects.get()
    assert op.kind == "destroy" and op.params == {"concurrency": 2}
    assert arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 302
    SimpleWorker([queue], connection=queue.connection).work(burst=True)

    op.refresh_from_db()
    # The skipped row (no physical id) keeps the record: a partial destroy.
    assert op.status == OperationStatus.PARTIAL, (op.error, op.result)
    assert shop["url"] not in shop["sqs"].list_queues().get("QueueUrls", [])
    assert shop["logs"].describe_log_groups(logGroupNamePrefix="/shop/logs")["logGroups"]  # Retain: kept
    page = olivia.get(reverse("operation", args=[op.pk])).content.decode()
    assert 'id="operation-items"' in page and "Queue" in page
    assert Stack.objects.get(stack_name="Shop").resource_count == 2  # the re-sync mirrored the trimmed record


def test_it_shows_the_destroy_options_to_the_approver_and_records_them(aws, queue, shop, monkeypatch):
    """The protection seam of engine.providers is a test double here (`set_protection` and
    `read_protection` over a dict): this tests the request, the pages and the runner's calls,
    not the providers."""
    import engine.providers as providers
    from stacks.models import AuditEvent

    dynamodb = aws.account_session(A1).client("dynamodb", region_name=REGION, endpoint_url=aws.moto.url)
    dynamodb.create_table(
        TableName="shop-orders",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    body = aws.get(A1, BUCKET, STATE)
    import json

    record = json.loads(body)
    del record["resources"]["Ghost"]
    record["resources"]["Orders"] = {
        "physicalId": "shop-orders",
        "resourceType": "AWS::DynamoDB::Table",
        "properties": {"TableName": "shop-orders", "DeletionProtectionEnabled": True},
        "attributes": {},
    }
    aws.put(A1, BUCKET, STATE, record)
    sync_account(shop["account"])
    guards, calls = {"shop-orders": True}, []
    monkeypatch.setattr(providers, "PROTECTION_TYPES", frozenset({"AWS::DynamoDB::Table"}), raising=False)
    monkeypatch.setattr(providers, "read_protection", lambda clients, ref: guards.get(ref.physical_id), raising=False)
    monkeypatch.setattr(
        providers,
        "set_protection",
        lambda clients, ref, enabled: (
            calls.append((ref.logical_id, enabled)) or guards.update({ref.physical_id: enabled})
        ),
        raising=False,
    )
    olivia, arthur = Client(), Client()
    olivia.force_login(shop["people"]["olivia"])
    arthur.force_login(shop["people"]["arthur"])
    url = reverse("operation_new", args=[A1, REGION, "Shop", "destroy"])

    preview = olivia.get(url, {"remove_protection": "on", "skip_final_snapshot": "on"})
    assert preview.status_code == 200, preview.content[:2000]
    page = preview.content.decode()
    assert 'id="id_remove_protection_plan" checked' in page and 'id="destroy-options"' in page
    rows = {r["logical_id"]: r for r in preview.context["destroy_rows"]}
    assert rows["Orders"]["remove_protection"] is True and rows["Orders"]["looks_protected"] is True
    assert 'name="remove_protection" value="on"' in page.split('id="confirm"', 1)[1]  # carried to the POST

    response = olivia.post(
        url,
        {"remove_protection": "on", "skip_final_snapshot": "on", "plan_digest": preview.context["digest"],
         "confirm_name": "Shop"},
    )  # fmt: skip
    assert response.status_code == 302
    op = Operation.objects.get()
    assert op.params == {"remove_protection": True, "skip_final_snapshot": True}
    requested = AuditEvent.objects.get(action="operation.requested", operation=op)
    assert requested.details["options"]["remove_protection"] is True
    assert requested.details["options"]["skip_final_snapshot"] is True

    approver_page = arthur.get(reverse("operation", args=[op.pk])).content.decode()
    assert 'id="decide-remove-protection"' in approver_page and 'id="decide-skip-snapshot"' in approver_page
    assert "turned off right before each delete" in approver_page

    assert arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 302
    SimpleWorker([queue], connection=queue.connection).work(burst=True)

    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    assert calls == [("Orders", False)]  # turned off once; the delete went through, nothing put back
    assert "shop-orders" not in dynamodb.list_tables()["TableNames"]
