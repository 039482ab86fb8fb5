"""Destroy from the web against moto: the stack page's Destroy button, the confirmation page
with the real engine's plan (every resource's action in order), the typed stack name, the
approval, an in-process worker deleting the resources, the operation page's items."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rq import SimpleWorker

from cdkd_site.queues import get_queue
from stacks.models import Account, Membership, Operation, OperationStatus, Role, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
REGION = "us-east-1"
STATE = "cdkd/Shop/us-east-1/state.json"


@pytest.fixture
def queue():
    queue = get_queue("default")
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


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
