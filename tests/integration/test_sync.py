"""Sync against a moto server over HTTP, three accounts reached through AssumeRole."""

from __future__ import annotations

import json

import pytest

from stacks.models import Account, BucketStatus, DeploymentRun, Lock, Resource, Stack
from stacks.sync import sync_account, sync_accounts

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1, A2, A3 = "111111111111", "222222222222", "333333333333"
FUTURE = 4102444800000  # 2100-01-01


def record(stack: str, region: str, resources: dict | None = None, **extra) -> dict:
    body = {"version": 11, "stackName": stack, "region": region, "resources": resources or {}, "outputs": {}}
    body.update(extra)
    body.setdefault("lastModified", 1795955307315)
    return body


def queue_row(name: str) -> dict:
    return {
        "physicalId": f"https://sqs.us-east-1.amazonaws.com/111111111111/{name}",
        "resourceType": "AWS::SQS::Queue",
        "properties": {"QueueName": name},
        "attributes": {},
        "provisionedBy": "sdk",
    }


@pytest.fixture
def world(aws):
    """Account 1 on the default bucket name, 2 on the legacy name, 3 on an explicit bucket in
    eu-west-1 under a custom prefix."""
    aws.make_bucket(A1, f"cdkd-state-{A1}")
    aws.make_bucket(A2, f"cdkd-state-{A2}-us-east-1")
    aws.make_bucket(A3, "platform-state-eu", region="eu-west-1")
    b1, b2, b3 = f"cdkd-state-{A1}", f"cdkd-state-{A2}-us-east-1", "platform-state-eu"

    parent_rows = {
        "Orders": queue_row("orders"),
        "Child": {"physicalId": "x", "resourceType": "AWS::CloudFormation::Stack", "properties": {}},
    }
    aws.put(A1, b1, "cdkd/Shop/us-east-1/state.json", record("Shop", "us-east-1", parent_rows))
    aws.put(
        A1,
        b1,
        "cdkd/Shop~Child/us-east-1/state.json",
        record(
            "Shop~Child",
            "us-east-1",
            {"Q": queue_row("q")},
            parentStack="Shop",
            parentLogicalId="Child",
            parentRegion="us-east-1",
        ),
    )
    aws.put(A1, b1, "cdkd/Shop/eu-west-1/state.json", record("Shop", "eu-west-1"))
    aws.put(
        A1,
        b1,
        "cdkd/Broken/us-east-1/state.json",
        {"version": 11, "stackName": "Broken", "region": "us-east-1", "resources": []},
    )
    aws.put(
        A1,
        b1,
        "cdkd/Shop/us-east-1/lock.json",
        {"owner": "ci@runner:42", "timestamp": 1, "expiresAt": FUTURE, "operation": "deploy"},
    )
    aws.put(A1, b1, "cdkd/Broken/us-east-1/lock.json", b'{"owner": "x", "timest')
    aws.put(
        A1,
        b1,
        "cdkd/Shop/us-east-1/deployments/index.json",
        {
            "indexVersion": 1,
            "stackName": "Shop",
            "region": "us-east-1",
            "runs": [
                {
                    "runId": "20261129T122811123Z-f37f3ced",
                    "command": "deploy",
                    "cdkdVersion": "0.290.36",
                    "startedAt": "2026-11-29T12:28:11.123Z",
                    "finishedAt": "2026-11-29T12:28:12.000Z",
                    "result": "SUCCEEDED",
                    "eventCount": 4,
                }
            ],
            "lastModified": 1,
        },
    )
    aws.put(
        A2,
        b2,
        "cdkd/Legacy/state.json",
        {"version": 1, "stackName": "Legacy", "region": "us-west-2", "resources": {"T": queue_row("t")}},
    )
    aws.put(A2, b2, "cdkd/NoRegion/state.json", {"version": 1, "stackName": "NoRegion", "resources": {}})
    aws.put(A3, b3, "teams/platform/Net/eu-west-1/state.json", record("Net", "eu-west-1", {"Q": queue_row("net-q")}))
    # A key of another prefix in the same bucket is not this account's record.
    aws.put(A3, b3, "cdkd/Other/eu-west-1/state.json", record("Other", "eu-west-1"))

    accounts = [
        Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin"),
        Account.objects.create(
            account_id=A2, name="staging", role_arn=f"arn:aws:iam::{A2}:role/cdkd-admin", region="us-east-1"
        ),
        Account.objects.create(
            account_id=A3, name="eu", role_arn=f"arn:aws:iam::{A3}:role/cdkd-admin", bucket=b3, prefix="teams/platform"
        ),
    ]
    return accounts


def test_it_mirrors_every_account(aws, world):
    results = sync_accounts(world)

    assert [(r.account, r.listed, r.fetched, r.unchanged, r.removed, r.errors) for r in results] == [
        (A1, 4, 4, 0, 0, []),
        (A2, 2, 2, 0, 0, []),
        (A3, 1, 1, 0, 0, []),
    ]
    a1, a2, a3 = (Account.objects.get(pk=a.pk) for a in world)
    assert (a1.resolved_bucket, a1.bucket_source, a1.bucket_status) == (f"cdkd-state-{A1}", "default", "ok")
    assert (a2.bucket_source, a2.bucket_status) == ("default-legacy", "ok")
    assert "cdkd state migrate" in a2.bucket_message
    assert (a3.resolved_bucket, a3.bucket_region, a3.bucket_source) == ("platform-state-eu", "eu-west-1", "explicit")

    child = Stack.objects.get(account=a1, stack_name="Shop~Child")
    assert child.parent == Stack.objects.get(account=a1, stack_name="Shop", region="us-east-1")
    assert (child.depth, child.root_name, child.parent_logical_id) == (1, "Shop", "Child")
    shop = Stack.objects.get(account=a1, stack_name="Shop", region="us-east-1")
    assert json.loads(bytes(shop.body)) == json.loads(aws.get(A1, f"cdkd-state-{A1}", "cdkd/Shop/us-east-1/state.json"))
    assert shop.etag.startswith('"') and shop.schema_version == 11 and shop.resource_count == 2
    assert shop.lock.state() == "live" and shop.lock.owner == "ci@runner:42"
    assert Stack.objects.get(stack_name="Broken").lock.state() == "unreadable"
    assert Stack.objects.get(stack_name="Broken").defects[0]["code"] == "resources-malformed"
    assert list(DeploymentRun.objects.values_list("run_id", "result")) == [
        ("20261129T122811123Z-f37f3ced", "SUCCEEDED")
    ]

    legacy = Stack.objects.get(stack_name="Legacy")
    assert (legacy.legacy, legacy.region, legacy.schema_version) == (True, "us-west-2", 1)
    assert Stack.objects.get(stack_name="NoRegion").region is None
    assert list(Stack.objects.filter(account=a3).values_list("stack_name", flat=True)) == ["Net"]
    assert Resource.objects.get(physical_id__endswith="/net-q").stack.account == a3


def test_it_issues_no_get_when_nothing_changed(aws, world):
    sync_accounts(world)
    aws.requests.clear()

    results = sync_accounts(world)

    assert [(r.fetched, r.unchanged, r.removed) for r in results] == [(0, 4, 0), (0, 2, 0), (0, 1, 0)]
    assert aws.requests.get("GetObject", 0) == 0
    assert aws.requests["ListObjectsV2"] >= 3


def test_it_fetches_only_what_changed_and_drops_what_is_gone(aws, world):
    a1 = world[0]
    sync_account(a1)
    bucket = f"cdkd-state-{A1}"
    aws.put(A1, bucket, "cdkd/Shop/eu-west-1/state.json", record("Shop", "eu-west-1", {"New": queue_row("new")}))
    aws.delete(A1, bucket, "cdkd/Broken/us-east-1/state.json")
    aws.delete(A1, bucket, "cdkd/Shop/us-east-1/lock.json")
    aws.requests.clear()

    result = sync_account(a1)

    assert (result.listed, result.fetched, result.unchanged, result.removed) == (3, 1, 2, 1)
    assert aws.requests["GetObject"] == 1
    assert not Stack.objects.filter(stack_name="Broken").exists()
    assert list(Resource.objects.filter(stack__region="eu-west-1").values_list("logical_id", flat=True)) == ["New"]
    assert not Lock.objects.filter(key="cdkd/Shop/us-east-1/lock.json").exists()


def test_it_shows_a_denied_bucket_and_keeps_going(aws, world):
    sync_accounts(world)
    aws.deny(f"cdkd-state-{A2}-us-east-1")

    results = sync_accounts(world)

    assert results[1].errors and f"cdkd-state-{A2}-us-east-1" in results[1].errors[0]
    a2 = Account.objects.get(account_id=A2)
    assert a2.bucket_status == BucketStatus.DENIED
    assert a2.stacks.count() == 2  # what was mirrored stays: a denied bucket is not an empty one
    assert not results[0].errors and not results[2].errors


def test_it_shows_a_missing_bucket(aws, world):
    Account.objects.filter(account_id=A3).update(bucket="no-such-bucket-here")

    result = sync_account(Account.objects.get(account_id=A3))

    assert "no-such-bucket-here" in result.errors[0]
    assert Account.objects.get(account_id=A3).bucket_status == BucketStatus.MISSING


def test_it_trusts_a_resolved_bucket_for_an_hour(aws, world, settings):
    from django.utils import timezone

    a2 = world[1]  # the legacy-named bucket: resolving it costs two HeadBucket calls
    sync_account(a2)
    aws.requests.clear()

    sync_account(Account.objects.get(pk=a2.pk))
    assert aws.requests.get("HeadBucket", 0) == 0 and aws.requests.get("GetBucketLocation", 0) == 0

    an_hour_ago = timezone.now() - timezone.timedelta(seconds=settings.CDKD_BUCKET_RECHECK_SECONDS + 60)
    Account.objects.filter(pk=a2.pk).update(bucket_checked_at=an_hour_ago)
    sync_account(Account.objects.get(pk=a2.pk))
    assert aws.requests["HeadBucket"] == 2
    a2.refresh_from_db()
    assert (a2.resolved_bucket, a2.bucket_source) == (f"cdkd-state-{A2}-us-east-1", "default-legacy")


def test_it_resolves_again_when_the_explicit_bucket_is_edited(aws, world):
    a3 = world[2]
    sync_account(a3)
    Account.objects.filter(pk=a3.pk).update(bucket="no-such-bucket-here")

    result = sync_account(Account.objects.get(pk=a3.pk))

    assert result.errors and "no-such-bucket-here" in result.errors[0]
    assert Account.objects.get(pk=a3.pk).bucket_status == BucketStatus.MISSING
