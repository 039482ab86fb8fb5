"""A sync that fails half-way leaves the mirror consistent (issue 8): the next sync never
calls a record "unchanged" whose rows were not completely written, and repairs the links
(parent, lock, index) a failed sync did not get to.

The world: account 111111111111 ("prod") with `Shop`, its nested child `Shop~Child`, a
lock on `Shop`, a third stack `Billing`, and Shop's event store (index + one stream).
"""

from __future__ import annotations

import json

import pytest

from stacks import sync, syncrecords
from stacks.models import Account, DeploymentEvent, DeploymentRun, Lock, Resource, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
RUN = "20261129T122811123Z-f37f3ced"


def record(stack: str, resources: dict, **extra) -> bytes:
    body = {"version": 11, "stackName": stack, "region": "us-east-1", "resources": resources, "outputs": {}}
    body.update(extra)
    return json.dumps(body, indent=2).encode()


def row(name: str, rtype: str = "AWS::SQS::Queue") -> dict:
    return {"physicalId": name, "resourceType": rtype, "properties": {}}


@pytest.fixture
def prod(aws):
    aws.make_bucket(A1, BUCKET)
    aws.put(
        A1, BUCKET, "cdkd/Shop/us-east-1/state.json", record("Shop", {"Child": row("c", "AWS::CloudFormation::Stack")})
    )
    aws.put(
        A1,
        BUCKET,
        "cdkd/Shop~Child/us-east-1/state.json",
        record("Shop~Child", {"Q": row("q"), "Boom": row("boom")}, parentStack="Shop", parentLogicalId="Child"),
    )
    aws.put(A1, BUCKET, "cdkd/Billing/us-east-1/state.json", record("Billing", {"T": row("t")}))
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/lock.json", {"owner": "ci", "timestamp": 1, "expiresAt": 4102444800000})
    index = {"indexVersion": 1, "runs": [{"runId": RUN, "command": "deploy", "result": "SUCCEEDED", "eventCount": 1}]}
    aws.put(A1, BUCKET, "cdkd/Shop/us-east-1/deployments/index.json", index)
    aws.put(A1, BUCKET, f"cdkd/Shop/us-east-1/deployments/{RUN}.jsonl", b'{"eventType": "RUN_STARTED"}\n')
    return Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")


def assert_complete(account: Account) -> None:
    """The mirror agrees with the bucket: every row, every link."""
    shop = Stack.objects.get(account=account, stack_name="Shop")
    child = Stack.objects.get(account=account, stack_name="Shop~Child")
    billing = Stack.objects.get(account=account, stack_name="Billing")
    assert child.parent_id == shop.pk
    assert sorted(child.resources.values_list("logical_id", flat=True)) == ["Boom", "Q"]
    assert list(billing.resources.values_list("logical_id", flat=True)) == ["T"]
    assert Lock.objects.get(account=account).stack_id == shop.pk
    run = DeploymentRun.objects.get(account=account, run_id=RUN)
    assert run.in_index and run.result == "SUCCEEDED" and run.index is not None
    assert list(DeploymentEvent.objects.filter(run=run).values_list("event_type", flat=True)) == ["RUN_STARTED"]
    assert not any(s.defects for s in (shop, child, billing))


def test_it_relinks_parents_and_locks_after_a_sync_that_died_after_the_records(aws, prod, monkeypatch):
    real_link = sync._link_parents

    def dies(account):
        raise SystemExit("worker killed")  # not an Exception: nothing inside the sync catches it

    monkeypatch.setattr(sync, "_link_parents", dies)
    with pytest.raises(SystemExit):
        sync_account(prod)
    monkeypatch.setattr(sync, "_link_parents", real_link)

    result = sync_account(prod)

    assert result.errors == [] and result.unchanged == 3  # the records were complete...
    assert_complete(prod)  # ...and the links they lacked are made now


def test_it_reads_an_event_index_again_when_its_runs_were_not_written(aws, prod, monkeypatch):
    real_create = DeploymentEvent.objects.bulk_create
    calls = []

    def fails_once(rows, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database went away")
        return real_create(rows, **kwargs)

    monkeypatch.setattr(DeploymentEvent.objects, "bulk_create", fails_once)
    first = sync_account(prod)
    assert first.errors == ["event history: could not be stored in the mirror (RuntimeError)"]
    assert Stack.objects.filter(account=prod).count() == 3  # the records synced regardless

    second = sync_account(prod)

    assert second.errors == []
    assert_complete(prod)


def test_it_stores_every_other_record_when_one_cannot_be_written(aws, prod, monkeypatch):
    real_create = Resource.objects.bulk_create
    broken = [True]

    def refuses_boom(rows, **kwargs):
        if broken[0] and any(r.logical_id == "Boom" for r in rows):
            raise RuntimeError("row refused")
        return real_create(rows, **kwargs)

    monkeypatch.setattr(Resource.objects, "bulk_create", refuses_boom)

    first = sync_account(prod)

    assert first.errors == []  # a defect of that one stack, not a failed account
    child = Stack.objects.get(stack_name="Shop~Child")
    assert [d["code"] for d in child.defects] == ["not-mirrored"] and child.etag == ""
    assert not child.resources.exists()
    assert list(Stack.objects.get(stack_name="Billing").resources.values_list("logical_id", flat=True)) == ["T"]

    broken[0] = False
    aws.reset_counts()
    second = sync_account(prod)

    assert (second.fetched, second.unchanged) == (1, 2)  # the stub was not "unchanged"
    assert aws.requests["GetObject"] == 1
    assert_complete(prod)


def test_it_fetches_again_the_records_of_a_batch_that_died_mid_apply(aws, prod, monkeypatch):
    monkeypatch.setattr(syncrecords, "BATCH", 1)  # what _apply_states batches by
    real_create = Resource.objects.bulk_create
    calls = []

    def dies_on_second(rows, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise SystemExit("worker killed")
        return real_create(rows, **kwargs)

    monkeypatch.setattr(Resource.objects, "bulk_create", dies_on_second)
    with pytest.raises(SystemExit):
        sync_account(prod)
    monkeypatch.setattr(Resource.objects, "bulk_create", real_create)
    stored = {s.key: s for s in Stack.objects.filter(account=prod)}
    assert len(stored) == 1 and stored[next(iter(stored))].resources.exists()  # one batch committed, whole

    second = sync_account(prod)

    assert (second.fetched, second.unchanged) == (2, 1)
    assert_complete(prod)
