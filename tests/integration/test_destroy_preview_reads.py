"""The destroy confirmation page checks imports against the mirror, not the bucket: the S3
GETs it makes do not grow with the number of records; a consumer the mirror knows refuses
the preview; one that appeared in the bucket since the last sync is caught by the run,
which checks the bucket again under the lock.

Olivia (operator) previews and requests; Arthur (approver) approves. Counts come from the S3
proxy in front of moto."""

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


def record(name: str, *, imports=None, outputs=None) -> dict:
    body = {
        "version": 11,
        "stackName": name,
        "region": REGION,
        "resources": {"Topic": {"resourceType": "AWS::SNS::Topic", "properties": {}, "attributes": {}}},
        "outputs": outputs if outputs is not None else {},
        "lastModified": 1_700_000_000_000,
    }
    if imports:
        body["imports"] = imports
    return body


@pytest.fixture
def world(aws, django_user_model):
    aws.make_bucket(A1, BUCKET)
    # Shop exports something, so cdkd's import check applies to it.
    aws.put(A1, BUCKET, f"cdkd/Shop/{REGION}/state.json", record("Shop", outputs={"TopicArn": "arn:x"}))
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    people = {}
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER)):
        people[name] = django_user_model.objects.create_user(name)
        Membership.objects.create(user=people[name], account=account, role=role)
    return {"account": account, "people": people}


def add_records(aws, start: int, count: int) -> None:
    aws.put_many(
        A1, BUCKET, {f"cdkd/Other{i:04d}/{REGION}/state.json": record(f"Other{i:04d}") for i in range(start, count)}
    )


def preview_gets(aws, client: Client) -> tuple[int, int]:
    url = reverse("operation_new", args=[A1, REGION, "Shop", "destroy"])
    aws.reset_counts()
    response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    s3 = {api: n for api, n in aws.requests.items() if api != "AssumeRole"}  # a cached role session may renew
    return aws.requests.get("GetObject", 0), sum(s3.values())


def test_the_preview_reads_a_constant_number_of_objects(aws, world):
    olivia = Client()
    olivia.force_login(world["people"]["olivia"])
    add_records(aws, 0, 10)
    sync_account(world["account"])
    few = preview_gets(aws, olivia)

    add_records(aws, 10, 80)
    sync_account(world["account"])
    many = preview_gets(aws, olivia)

    assert Stack.objects.count() == 81
    assert many == few  # the same GETs (the record itself, its journal) for 11 records or 81
    assert many[0] <= 2


def test_a_consumer_in_the_mirror_refuses_the_preview_without_reading_it(aws, world):
    olivia = Client()
    olivia.force_login(world["people"]["olivia"])
    add_records(aws, 0, 5)
    imports = [{"sourceStack": "Shop", "sourceRegion": REGION, "exportName": "TopicArn"}]
    aws.put(A1, BUCKET, f"cdkd/Web/{REGION}/state.json", record("Web", imports=imports))
    # The same name in another region is another stack: it does not block.
    other = [{"sourceStack": "Shop", "sourceRegion": "eu-west-1", "exportName": "X"}]
    aws.put(A1, BUCKET, f"cdkd/Api/{REGION}/state.json", record("Api", imports=other))
    aws.put(A1, BUCKET, f"cdkd/Torn/{REGION}/state.json", b"{torn")
    sync_account(world["account"])
    assert Stack.objects.get(stack_name="Web").imports == imports

    aws.reset_counts()
    response = olivia.get(reverse("operation_new", args=[A1, REGION, "Shop", "destroy"]))

    assert response.status_code == 409
    assert "still imported by another stack: Web (us-east-1): imports export &#x27;TopicArn&#x27;" in (
        response.content.decode()
    )
    assert aws.requests.get("GetObject", 0) <= 1  # Shop's own record only

    Stack.objects.filter(stack_name="Web").delete()  # as if Web had gone at the last sync
    response = olivia.get(reverse("operation_new", args=[A1, REGION, "Shop", "destroy"]))
    assert response.status_code == 200
    # Records of other stacks that cannot be read are folded into one line of their own.
    unreadable = response.context["unreadable_elsewhere"]
    assert any("cdkd/Torn/us-east-1/state.json (not a readable record)" in w for w in unreadable)


def test_the_run_checks_the_bucket_again_under_the_lock(aws, world, queue):
    olivia, arthur = Client(), Client()
    olivia.force_login(world["people"]["olivia"])
    arthur.force_login(world["people"]["arthur"])
    sync_account(world["account"])
    url = reverse("operation_new", args=[A1, REGION, "Shop", "destroy"])
    digest = olivia.get(url).context["digest"]
    assert olivia.post(url, {"plan_digest": digest, "confirm_name": "Shop"}).status_code == 302
    op = Operation.objects.get()
    # A consumer deployed after the last sync: the mirror does not know it, the bucket does.
    imports = [{"sourceStack": "Shop", "sourceRegion": REGION, "exportName": "TopicArn"}]
    aws.put(A1, BUCKET, f"cdkd/Late/{REGION}/state.json", record("Late", imports=imports))

    assert arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 302
    SimpleWorker([queue], connection=queue.connection).work(burst=True)

    op.refresh_from_db()
    assert op.status == OperationStatus.REFUSED and "Late (us-east-1)" in op.error
    assert aws.etag(A1, BUCKET, f"cdkd/Shop/{REGION}/state.json") is not None
