"""engine.deploy.run's executor with a fake provider (state writes still go to a moto bucket):
bounded concurrency, dependency order, the first failure stopping new work, retries of
throttling with backoff, cancel, and the final state of the record after each."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from engine.deploy.run import Deployer, DeployFailed, RetryPolicy
from engine.providers.base import CreateResult, ProviderError, UpdateResult
from tests.deploy.test_run import ACCOUNT, BUCKET, JOURNAL, STATE, context
from tests.deploy.test_run import bucket as bucket  # noqa: F401,PLC0414 - the fixture

pytestmark = pytest.mark.integration


def queues(n: int, chain: bool = False) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    for i in range(n):
        props: dict[str, Any] = {"QueueName": f"q{i:03d}"}
        if chain and i:
            props["Tags"] = [{"Key": "after", "Value": {"Ref": f"Q{i - 1:03d}"}}]
        resources[f"Q{i:03d}"] = {"Type": "AWS::SQS::Queue", "Properties": props}
    return {"Resources": resources}


class Fake:
    """Creates queues in memory; records order and the most calls in flight at once."""

    types = ("AWS::SQS::Queue",)
    handled = frozenset({"QueueName", "Tags"})

    def __init__(self, *, delay: float = 0.0, fail: set[str] | None = None, throttle: int = 0) -> None:
        self.delay = delay
        self.fail = fail or set()
        self.throttle = throttle
        self.started: list[str] = []
        self.live: dict[str, dict] = {}
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.on_create: Any = None

    def __call__(self, rtype: str, provisioned_by: str | None = None) -> Fake:
        return self

    def create(self, clients, logical_id, resource_type, properties, target):
        with self.lock:
            self.started.append(logical_id)
            if self.throttle:
                self.throttle -= 1
                raise ProviderError("Rate exceeded", aws_code="ThrottlingException")
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.delay)
            if self.on_create:
                self.on_create(logical_id)
            if logical_id in self.fail:
                raise ProviderError(
                    f"{logical_id}: CreateQueue failed (InvalidAttributeValue)", aws_code="InvalidAttributeValue"
                )
            url = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/{properties['QueueName']}"
            self.live[url] = properties
            return CreateResult(url, {"QueueName": properties["QueueName"]})
        finally:
            with self.lock:
                self.in_flight -= 1

    def update(self, clients, ref, properties, target):
        self.live[ref.physical_id] = properties
        return UpdateResult(ref.physical_id, None)

    def delete(self, clients, ref, snapshot=False):
        self.live.pop(ref.physical_id, None)
        return "deleted"

    def read(self, clients, ref):
        return None


def run(bucket, fake: Fake, template: dict, sleeps: list[float] | None = None, **kw: Any):  # noqa: F811
    d = Deployer(
        provider_for=fake,
        clients=object(),
        retry=RetryPolicy(),
        sleep=(sleeps.append if sleeps is not None else (lambda s: None)),
    )
    return d.deploy(kw.pop("ctx", None) or context(bucket), template, account=ACCOUNT, **kw)


def test_it_runs_at_most_ten_creates_at_once_by_default(aws, bucket):  # noqa: F811
    fake = Fake(delay=0.05)
    result = run(bucket, fake, queues(30))
    assert len(result.created) == 30 and fake.peak == 10
    assert len(json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]) == 30


def test_it_honours_a_smaller_concurrency(aws, bucket):  # noqa: F811
    fake = Fake(delay=0.02)
    run(bucket, fake, queues(9), concurrency=3)
    assert fake.peak == 3


def test_it_creates_in_dependency_order(aws, bucket):  # noqa: F811
    fake = Fake()
    result = run(bucket, fake, queues(5, chain=True))
    assert fake.started == ["Q000", "Q001", "Q002", "Q003", "Q004"]
    record = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    assert record["resources"]["Q003"]["dependencies"] == ["Q002"]
    # a Ref to a created queue resolved to its real physical id
    assert record["resources"]["Q003"]["properties"]["Tags"] == [
        {"Key": "after", "Value": f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/q002"}
    ]
    assert result.created == ["Q000", "Q001", "Q002", "Q003", "Q004"]


def test_it_stops_new_work_at_the_first_failure(aws, bucket):  # noqa: F811
    fake = Fake(fail={"Q001"})
    with pytest.raises(DeployFailed) as caught:
        run(bucket, fake, queues(6), concurrency=1, no_rollback=True)
    assert fake.started == ["Q000", "Q001"]  # nothing started after the failure
    assert caught.value.result.created == ["Q000"]
    record = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    assert list(record["resources"]) == ["Q000"]  # the pre-rollback save tracks what was made


def test_it_retries_throttling_with_doubling_backoff(aws, bucket):  # noqa: F811
    fake = Fake(throttle=3)
    sleeps: list[float] = []
    result = run(bucket, fake, queues(1), sleeps=sleeps)
    assert result.created == ["Q000"]
    assert sleeps == [1.0, 2.0, 4.0]  # cdkd: 1 s doubling, capped at 8 s


def test_it_gives_up_after_the_retries(aws, bucket):  # noqa: F811
    fake = Fake(throttle=100)
    sleeps: list[float] = []
    with pytest.raises(DeployFailed):
        run(bucket, fake, queues(1), sleeps=sleeps, no_rollback=True)
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0]


def test_cancel_stops_new_work_and_lets_in_flight_calls_finish(aws, bucket):  # noqa: F811
    fake = Fake(delay=0.05)
    ctx = context(bucket)
    fake.on_create = lambda lid: ctx.cancel_event.set() if lid == "Q000" else None
    result = run(bucket, fake, queues(12), ctx=ctx, concurrency=2)
    assert result.result == "cancelled"
    assert len(fake.started) == 2  # Q000 and the one in flight beside it; nothing after
    assert sorted(result.created) == sorted(fake.started)
    record = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    assert sorted(record["resources"]) == sorted(fake.started)
    [segment] = json.loads(aws.get(ACCOUNT, BUCKET, JOURNAL))["segments"]
    assert segment["reason"] == "interrupted" and segment["failedOperations"] == []
    # running again converges: only the rest is created, nothing twice
    fake.on_create = None
    again = run(bucket, fake, queues(12))
    assert sorted(again.created) == sorted(set(f"Q{i:03d}" for i in range(12)) - set(result.created))
    assert len(fake.live) == 12
    assert aws.etag(ACCOUNT, BUCKET, JOURNAL) is None  # a successful deploy deletes the journal


def test_a_replacement_whose_name_is_still_held_fails_with_cdkds_code(aws, bucket):  # noqa: F811
    class Named(Fake):
        handled = frozenset({"QueueName", "Tags", "FifoQueue"})

        def create(self, clients, logical_id, resource_type, properties, target):
            url = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/{properties['QueueName']}"
            if url in self.live:
                raise ProviderError(f"{logical_id}: a resource named {url} already exists", aws_code="AlreadyExists")
            return super().create(clients, logical_id, resource_type, properties, target)

    fake = Named()
    run(bucket, fake, queues(1))
    before = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    template = queues(1)
    template["Resources"]["Q000"]["Properties"]["FifoQueue"] = True  # create-only: a replacement
    with pytest.raises(DeployFailed) as caught:
        run(bucket, fake, template)
    assert "NAMED_REPLACEMENT_COLLISION" in caught.value.result.errors[0]
    after = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    assert after["resources"] == before["resources"]  # the old queue is still the recorded one
    [segment] = json.loads(aws.get(ACCOUNT, BUCKET, JOURNAL))["segments"]
    [failed] = segment["failedOperations"]
    assert segment["operations"] == [] and failed["logicalId"] == "Q000"
    # it met a resource that is not its own: no attempted properties (seed 000)
    assert "attemptedProperties" not in failed and failed["previousState"] == before["resources"]["Q000"]


def test_it_holds_cdkds_lock_with_operation_deploy_and_releases_it(aws, bucket):  # noqa: F811
    lock_key = STATE.replace("state.json", "lock.json")
    seen: list[dict] = []
    fake = Fake()
    fake.on_create = lambda lid: seen.append(json.loads(aws.get(ACCOUNT, BUCKET, lock_key)))
    run(bucket, fake, queues(1))
    assert seen[0]["operation"] == "deploy" and seen[0]["owner"].startswith("cdkd-admin:alice@")
    assert aws.etag(ACCOUNT, BUCKET, lock_key) is None  # released
