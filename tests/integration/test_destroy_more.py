"""engine.destroy against moto, the behaviour seed 004 adds to the runner: per-resource retries
and the resource timeout, cdkd's implicit delete order, resources only the rollback journal
records, the remove-protection and skip-final-snapshot options, plan skips that come from the
providers' own checks, unverified guards, and nested children refused at run time.

The state bucket is moto's (through the proxy) in every test: the stored record, the journal
and the event store are read back as bytes. Most tests inject the delete seam (`FakeAws`, a set
of live physical ids) so AWS's answers are under the test's control, and the protection seam
with `FakeProtection`: that tests the runner's use of it, not the providers (another module).
The plan-skip test runs the real engine.providers against moto.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from engine.backend import StateBucket
from engine.destroy import Destroy, ProviderError
from engine.destroy.ordering import IMPLICIT_DELETE_DEPENDENCIES, referenced_alarm_names
from engine.operations import OperationRefused, Plan, StalePlan
from tests.integration.test_destroy import (
    ACCOUNT,
    BUCKET,
    CHILD,
    CHILD_STATE,
    JOURNAL,
    LOGS,
    REGION,
    STATE,
    FakeAws,
    cdkd_json,
    child_record,
    context,
    keys,
    parent_with_child,
    record,
    res,
    run,
    run_events,
    stored,
    versions,
)

pytestmark = pytest.mark.integration

TABLE = "AWS::DynamoDB::Table"


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)


def events_of(aws, logical_id: str) -> list[str]:
    events, _, _ = run_events(aws)
    return [e["eventType"] for e in events if e.get("logicalId") == logical_id]


def transient(
    message: str = "DependencyViolation: resource sg-1 has a dependent object", code: str = "DependencyViolation"
):
    return ProviderError(message, aws_code=code)


class Flaky(FakeAws):
    """Fails the first `times` deletes of `physical_id` with `error`, then behaves."""

    def __init__(self, aws: Any, live: set[str], physical_id: str, error: BaseException, times: int) -> None:
        super().__init__(aws, live)
        self.target, self.error, self.left = physical_id, error, times

    def delete(self, clients: Any, ref: Any, snapshot: bool = False) -> str:
        if ref.physical_id == self.target and self.left > 0:
            with self.lock:
                self.calls.append((ref.logical_id, snapshot))
                self.left -= 1
            raise self.error
        return super().delete(clients, ref, snapshot)


class FakeProtection:
    """The providers' protection seam (PROTECTION_TYPES, read_protection, set_protection) over
    a dict of guards by physical id; records every call in `calls` with the delete's."""

    def __init__(self, guards: dict[str, bool], calls: list, read_error: BaseException | None = None) -> None:
        self.PROTECTION_TYPES = frozenset({TABLE})
        self.guards = guards
        self.calls = calls
        self.read_error = read_error
        self.set_error: BaseException | None = None

    def read_protection(self, clients: Any, ref: Any) -> bool | None:
        self.calls.append(("read", ref.logical_id))
        if self.read_error is not None:
            raise self.read_error
        return self.guards.get(ref.physical_id)

    def set_protection(self, clients: Any, ref: Any, enabled: bool) -> None:
        self.calls.append(("set", ref.logical_id, enabled))
        if self.set_error is not None and enabled:
            raise self.set_error
        self.guards[ref.physical_id] = enabled


# --- retries -----------------------------------------------------------------------------------


def test_it_retries_a_dependency_violation_after_5_then_10_seconds_and_deletes(aws, bucket):
    resources = {"Sg": res("AWS::EC2::SecurityGroup", "sg-1"), "Q": res("AWS::SQS::Queue", "q")}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    fake = Flaky(aws, {"sg-1", "q"}, "sg-1", transient(), times=2)
    waits: list[float] = []

    _, outcome = run(Destroy(delete=fake.delete, sleep=waits.append), context(bucket))

    assert waits == [5.0, 10.0]  # cdkd's DELETE schedule: 5 s, 10 s, 20 s
    assert fake.order.count("Sg") == 3 and fake.live == set()
    assert outcome.status == "succeeded" and outcome.details["counts"]["deleted"] == 2
    assert stored(aws) is None
    # One started and one succeeded event per resource: a retry is not a new resource run.
    assert events_of(aws, "Sg") == ["RESOURCE_STARTED", "RESOURCE_SUCCEEDED"]
    assert any("retrying in 5s (attempt 2 of 4)" in message for _, message in LOGS)


def test_it_gives_up_after_three_retries_and_keeps_the_row(aws, bucket):
    original = record(resources={"Sg": res("AWS::EC2::SecurityGroup", "sg-1"), "Q": res("AWS::SQS::Queue", "q")})
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(original))
    fake = Flaky(aws, {"sg-1", "q"}, "sg-1", transient("Rate exceeded", "Throttling"), times=99)
    waits: list[float] = []

    _, outcome = run(Destroy(delete=fake.delete, sleep=waits.append), context(bucket))

    assert waits == [5.0, 10.0, 20.0] and fake.order.count("Sg") == 4
    assert outcome.status == "partial" and outcome.details["counts"] == {
        "deleted": 1, "retained": 0, "skipped": 0, "failed": 1, "unverified": 0,
    }  # fmt: skip
    after = stored(aws)
    assert list(after["resources"]) == ["Sg"] and after["resources"]["Sg"] == original["resources"]["Sg"]
    assert events_of(aws, "Sg") == ["RESOURCE_STARTED", "RESOURCE_FAILED"]


@pytest.mark.parametrize(
    ("error", "calls"),
    [
        (ProviderError("User is not authorized to perform: iam:PassRole (propagating)", aws_code="AccessDenied"), 4),
        (ProviderError("Access Denied", aws_code="AccessDenied"), 1),  # not transient: no retry
        (ProviderError("Queue does not exist", aws_code="AWS.SimpleQueueService.NonExistentQueue"), 1),  # gone
    ],
)
def test_it_retries_only_what_cdkd_reads_as_transient(aws, bucket, error, calls):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", "q")})))
    fake = Flaky(aws, {"q"}, "q", error, times=99)

    run(Destroy(delete=fake.delete, sleep=lambda s: None), context(bucket))

    assert fake.order.count("Q") == calls


def test_it_fails_a_delete_past_the_resource_timeout_after_warning_and_goes_on(aws, bucket):
    """The hung delete blocks until the test ends, so the timeout is the only way out; the
    deadlines are set in the params (seconds), as the CLI flag and the setting set them."""
    resources = {"Slow": res(TABLE, "slow-table"), "Q": res("AWS::SQS::Queue", "q")}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    release = threading.Event()
    fake = FakeAws(aws, {"slow-table", "q"})
    fake.on_call = lambda ref: release.wait(60) if ref.logical_id == "Slow" else None
    calls: list = []
    protection = FakeProtection({"slow-table": True}, calls)
    spec = Destroy(delete=fake.delete, protection=protection)
    ctx = context(
        bucket, concurrency=2, remove_protection=True, resource_timeout={"default": 30, TABLE: 0.6},
        resource_warn_after=0.2,
    )  # fmt: skip
    LOGS.clear()
    try:
        plan, outcome = run(spec, ctx)
    finally:
        release.set()

    assert plan.data["deadlines"]["timeout"] == {"default": 30.0, TABLE: 0.6}
    assert outcome.status == "partial" and outcome.details["counts"]["failed"] == 1
    assert outcome.details["counts"]["deleted"] == 1 and list(stored(aws)["resources"]) == ["Slow"]
    events, _, _ = run_events(aws)
    failed = next(e for e in events if e["eventType"] == "RESOURCE_FAILED")
    assert failed["logicalId"] == "Slow" and "(resource timeout)" in failed["error"]["message"]
    warned = [m for level, m in LOGS if level == "warning" and "Slow" in m and "still deleting" in m]
    assert len(warned) == 1
    # A timeout leaves the guard off: nothing is put back (seed 004).
    assert calls == [("read", "Slow"), ("set", "Slow", False)]


# --- implicit order --------------------------------------------------------------------------------


def test_it_orders_an_internet_gateway_after_its_attachment_and_the_nat_gateway(aws, bucket):
    resources = {
        "Igw": res("AWS::EC2::InternetGateway", "igw-1"),
        "Vpc": res("AWS::EC2::VPC", "vpc-1"),
        "Attach": res("AWS::EC2::VPCGatewayAttachment", "igw-1|vpc-1", {"VpcId": {"Ref": "Vpc"}}),
        "Subnet": res("AWS::EC2::Subnet", "subnet-1", {"VpcId": {"Ref": "Vpc"}}),
        "Nat": res("AWS::EC2::NatGateway", "nat-1", {"SubnetId": {"Ref": "Subnet"}}),
        "Fn": res("AWS::Lambda::Function", "fn-1"),
        "Alarm": res("AWS::CloudWatch::Alarm", "metric-alarm", {"AlarmName": "metric-alarm"}),
        "Composite": res(
            "AWS::CloudWatch::CompositeAlarm",
            "comp",
            {"AlarmRule": 'ALARM("arn:aws:cloudwatch:r:1:alarm:metric-alarm")'},
        ),
    }
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    fake = FakeAws(aws, {row["physicalId"] for row in resources.values()})

    plan, outcome = run(Destroy(delete=fake.delete), context(bucket))

    order = fake.order
    before = [("Nat", "Attach"), ("Attach", "Igw"), ("Nat", "Igw"), ("Attach", "Vpc"), ("Igw", "Vpc"),
              ("Fn", "Subnet"), ("Subnet", "Vpc"), ("Composite", "Alarm")]  # fmt: skip
    for first, then in before:
        assert order.index(first) < order.index(then), (first, then, order)
    assert plan.data["levels"] == [["Nat"], ["Attach", "Fn"], ["Igw", "Subnet", "Composite"], ["Vpc", "Alarm"]]
    assert outcome.status == "succeeded"


def test_its_type_pairs_are_cdkds_and_alarm_rules_name_alarms():
    assert IMPLICIT_DELETE_DEPENDENCIES["AWS::EC2::InternetGateway"] == (
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::EC2::NatGateway",
    )
    assert set(IMPLICIT_DELETE_DEPENDENCIES["AWS::EC2::VPC"]) >= {"AWS::EC2::Subnet", "AWS::EC2::RouteTable"}
    assert all(key not in values for key, values in IMPLICIT_DELETE_DEPENDENCIES.items())
    assert referenced_alarm_names("ALARM(a) OR (OK('b') AND INSUFFICIENT_DATA(\"a\")) OR TRUE") == ["a", "b"]


def test_it_leaves_out_an_implicit_edge_the_record_orders_the_other_way(aws, bucket):
    # A subnet whose properties reference a function (odd, but a record may say so): the
    # record's own edge wins over the type pair, and the plan says so.
    resources = {
        "Fn": res("AWS::Lambda::Function", "fn-1"),
        "Subnet": res("AWS::EC2::Subnet", "subnet-1", {"Tag": {"Fn::GetAtt": ["Fn", "Arn"]}}),
    }
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    fake = FakeAws(aws, {"fn-1", "subnet-1"})

    plan, _ = run(Destroy(delete=fake.delete), context(bucket))

    assert fake.order == ["Subnet", "Fn"]
    assert any("implicit order Fn before Subnet" in w for w in plan.warnings)


# --- resources only the rollback journal records ------------------------------------------------------


def journal_of(*failed: dict[str, Any]) -> dict[str, Any]:
    return {
        "journalVersion": 1,
        "stackName": "App",
        "region": REGION,
        "segments": [
            {
                "timestamp": 1,
                "reason": "no-rollback-failure",
                "initialDeploy": False,
                "cdkdVersion": "0.284.40",
                "operations": [],
                "failedOperations": list(failed),
            }
        ],
    }


def failed_create(lid: str, rtype: str, pid: str | None, **extra: Any) -> dict[str, Any]:
    op = {"logicalId": lid, "changeType": "CREATE", "resourceType": rtype, "provisionedBy": "sdk"}
    if pid is not None:
        op["physicalId"] = pid
    op["attemptedProperties"] = {"QueueName": lid.lower()}
    op.update(extra)
    return op


def test_it_deletes_what_only_the_journal_records_first_then_the_journal_with_its_versions(aws, bucket):
    resources = {"Q": res("AWS::SQS::Queue", "q"), "T": res("AWS::SNS::Topic", "t", deps=["Q"])}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    for _ in range(2):
        aws.put(
            ACCOUNT,
            BUCKET,
            JOURNAL,
            cdkd_json(
                journal_of(
                    failed_create("Lost", "AWS::SQS::Queue", "lost-q"),
                    failed_create("Q", "AWS::SQS::Queue", "q"),  # state holds it: the record's row deletes it
                    failed_create("Never", "AWS::SQS::Queue", None),  # nothing proved it exists
                    failed_create("Kept", "AWS::SQS::Queue", "kept-q", deletionPolicy="Retain"),
                    failed_create("Roe", "AWS::SQS::Queue", "roe-q", deletionPolicy="RetainExceptOnCreate"),
                )
            ),
        )
    fake = FakeAws(aws, {"q", "t", "lost-q", "kept-q", "roe-q"})

    plan, outcome = run(Destroy(delete=fake.delete), context(bucket, concurrency=4))

    journal = plan.data["journal"]
    assert list(journal["rows"]) == ["journal:Lost", "journal:Kept", "journal:Roe"]
    assert {k: r["action"] for k, r in journal["rows"].items()} == {
        "journal:Lost": "delete", "journal:Kept": "retain", "journal:Roe": "delete",
    }  # fmt: skip
    assert "only in the rollback journal" in plan.changes[0] and "3 only the rollback journal records" in plan.summary
    # Every journal-only delete ends before the record's first one starts.
    assert sorted(fake.order[:2]) == ["Lost", "Roe"] and fake.order[2:] == ["T", "Q"]
    assert fake.live == {"kept-q"}  # Retain leaves it in AWS
    assert outcome.status == "succeeded" and outcome.details["counts"]["deleted"] == 4
    assert stored(aws) is None
    assert [v.get("IsLatest") for v in versions(aws, JOURNAL)] == [True]  # only the delete marker
    assert events_of(aws, "Lost") == ["RESOURCE_STARTED", "RESOURCE_SUCCEEDED"]
    assert events_of(aws, "Kept") == ["RESOURCE_RETAINED"]


def test_it_keeps_the_record_and_the_journal_while_a_journal_only_resource_remains(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", "q")})))
    aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json(journal_of(failed_create("Lost", "AWS::SQS::Queue", "lost-q"))))
    journal_body = aws.get(ACCOUNT, BUCKET, JOURNAL)
    fake = FakeAws(aws, {"q", "lost-q"})
    fake.fail["lost-q"] = ProviderError("Access Denied", aws_code="AccessDenied")

    _, outcome = run(Destroy(delete=fake.delete), context(bucket))

    assert outcome.status == "partial" and outcome.details["counts"]["failed"] == 1
    assert fake.order == ["Lost", "Q"]  # a failed journal row does not hold the record's rows back
    assert stored(aws)["resources"] == {} and aws.get(ACCOUNT, BUCKET, JOURNAL) == journal_body
    assert any("rollback-journal.json is kept" in w for w in outcome.warnings)

    del fake.fail["lost-q"]
    _, outcome = run(Destroy(delete=fake.delete), context(bucket))  # a new plan: the re-run

    assert (
        outcome.status == "succeeded"
        and fake.live == set()
        and keys(aws, "cdkd/App/") == keys(aws, "cdkd/App/us-east-1/deployments/")
    )


def test_it_refuses_to_run_when_the_journal_changed_since_the_plan(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", "q")})))
    aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json(journal_of(failed_create("Lost", "AWS::SQS::Queue", "lost-q"))))
    fake = FakeAws(aws, {"q", "lost-q"})
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json(journal_of(failed_create("Other", "AWS::SQS::Queue", "other-q"))))

    with pytest.raises(StalePlan):
        spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert fake.calls == [] and "Q" in stored(aws)["resources"]


# --- remove protection and skip final snapshot ------------------------------------------------------------


def protected_record() -> dict[str, Any]:
    return record(
        resources={
            "Table": res(TABLE, "orders", {"DeletionProtectionEnabled": True}),
            "Q": res("AWS::SQS::Queue", "q"),
        }
    )


def test_it_turns_protection_off_only_when_asked_reading_it_first(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(protected_record()))
    calls: list = []
    fake = FakeAws(aws, {"orders", "q"})
    fake.on_call = lambda ref: calls.append(("delete", ref.logical_id))
    protection = FakeProtection({"orders": True}, calls)

    plan, outcome = run(Destroy(delete=fake.delete, protection=protection), context(bucket, remove_protection=True))

    assert plan.data["rows"]["Table"]["removeProtection"] is True and "removeProtection" not in plan.data["rows"]["Q"]
    assert plan.data["options"]["remove_protection"] is True and "options: remove protection" in plan.summary
    assert any(c.startswith("turn its protection off, then delete Table") for c in plan.changes)
    assert any("1 look protected in state" in c for c in plan.changes)
    assert calls == [("read", "Table"), ("set", "Table", False), ("delete", "Table"), ("delete", "Q")]
    assert outcome.status == "succeeded"


def test_it_leaves_protection_alone_without_the_option_and_warns_in_the_plan(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(protected_record()))
    calls: list = []
    fake = FakeAws(aws, {"orders", "q"})
    fake.fail["orders"] = ProviderError("Table orders has deletion protection enabled", aws_code="ValidationException")

    plan, outcome = run(
        Destroy(delete=fake.delete, protection=FakeProtection({"orders": True}, calls)), context(bucket)
    )

    assert calls == [] and outcome.details["counts"]["failed"] == 1
    assert any("Table (AWS::DynamoDB::Table) looks protected in state" in w for w in plan.warnings)
    assert "Table" in stored(aws)["resources"]


def test_it_puts_the_guard_back_when_the_delete_ends_in_failure(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(protected_record()))
    calls: list = []
    protection = FakeProtection({"orders": True}, calls)
    fake = Flaky(aws, {"orders", "q"}, "orders", transient("Throttling: Rate exceeded", "Throttling"), times=99)
    fake.on_call = lambda ref: calls.append(("delete", ref.logical_id))
    LOGS.clear()

    _, outcome = run(
        Destroy(delete=fake.delete, protection=protection, sleep=lambda s: None),
        context(bucket, remove_protection=True),
    )

    # Compensated once, after the LAST attempt, not after each retry.
    assert calls[:2] == [("read", "Table"), ("set", "Table", False)] and calls[2:] == [("set", "Table", True)] + [
        ("delete", "Q")
    ]
    assert protection.guards["orders"] is True and fake.order.count("Table") == 4
    assert outcome.details["counts"]["failed"] == 1 and "Table" in stored(aws)["resources"]
    assert any("protection was turned on again" in m for _, m in LOGS)


def test_it_reports_a_failed_restore_as_its_own_error_and_an_unreadable_guard_as_unverified(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(protected_record()))
    calls: list = []
    protection = FakeProtection({"orders": True}, calls)
    protection.set_error = ProviderError("Access Denied", aws_code="AccessDenied")
    fake = FakeAws(aws, {"orders", "q"})
    fake.fail["orders"] = ProviderError("Access Denied on DeleteTable", aws_code="AccessDenied")
    LOGS.clear()

    run(Destroy(delete=fake.delete, protection=protection), context(bucket, remove_protection=True))

    assert any(level == "error" and "protection is still OFF" in m for level, m in LOGS)

    # A guard whose read fails: the delete runs, nothing is put back, and it counts unverified.
    calls.clear()
    unreadable = FakeProtection({}, calls, read_error=ProviderError("not allowed", aws_code="AccessDenied"))
    del fake.fail["orders"]
    plan, outcome = run(Destroy(delete=fake.delete, protection=unreadable), context(bucket, remove_protection=True))

    assert calls == [("read", "Table"), ("set", "Table", False)]
    assert outcome.status == "succeeded" and outcome.details["counts"]["unverified"] == 1
    assert "1 unverified" in outcome.summary and any("Table (protection-read" in w for w in outcome.warnings)
    events, _, _ = run_events(aws)
    guard = next(e for e in events if e["eventType"] == "RESOURCE_GUARD_INDETERMINATE")
    assert guard["logicalId"] == "Table" and guard["guard"] == "protection-read"


def test_it_refuses_remove_protection_while_the_providers_cannot_do_it(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(protected_record()))
    with pytest.raises(OperationRefused, match="remove protection is not available"):
        Destroy(delete=FakeAws().delete).plan(context(bucket, remove_protection=True))


def test_it_deletes_a_snapshot_resource_without_one_when_asked(aws, bucket):
    resources = {"Db": res("AWS::RDS::DBInstance", "db-1", deletionPolicy="Snapshot")}
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    fake = FakeAws(aws, {"db-1"})
    spec = Destroy(delete=fake.delete, supports_snapshot=lambda ref: True)

    plan = spec.plan(context(bucket))
    assert plan.data["rows"]["Db"]["action"] == "snapshot" and plan.data["options"]["skip_final_snapshot"] is False

    plan, outcome = run(spec, context(bucket, skip_final_snapshot=True))

    assert plan.data["rows"]["Db"]["action"] == "delete" and fake.calls == [("Db", False)]
    assert any(
        "1 resource(s) with DeletionPolicy Snapshot are deleted without a final snapshot" in c for c in plan.changes
    )


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"remove_protection": "yes"}, "remove_protection must be true or false"),
        ({"resource_timeout": 0}, "resource_timeout default must be more than 0"),
        ({"resource_timeout": {"Bucket": 5}}, "neither 'default' nor a resource type"),
    ],
)
def test_it_refuses_bad_options_naming_them(aws, bucket, params, match):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(protected_record()))
    with pytest.raises(OperationRefused, match=match):
        Destroy(delete=FakeAws().delete).plan(context(bucket, **params))


# --- the plan shows every skip the run makes --------------------------------------------------------------


def test_the_plan_shows_the_skips_the_real_providers_make_and_the_run_agrees(aws, bucket):
    sqs = aws.account_session(ACCOUNT).client("sqs", region_name=REGION, endpoint_url=aws.moto.url)
    url = sqs.create_queue(QueueName="real-q")["QueueUrl"]
    resources = {
        "Q": res("AWS::SQS::Queue", url),
        "ArnQ": res("AWS::SQS::Queue", "arn:aws:sns:us-east-1:111111111111:not-a-queue"),
        "Perm": res("AWS::Lambda::Permission", "some-fn|", {}),
        # a masked token: known to be undeliverable without an AWS call (a real token's handler
        # is only found gone or FAILED at run time: tests/integration/test_custom_resources.py)
        "Custom": res("Custom::Thing", "custom-1", {"ServiceToken": "***"}),
    }
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources=resources)))
    spec = Destroy()  # engine.providers behind every seam

    plan, outcome = run(spec, context(bucket))

    skips = {lid: row["reason"] for lid, row in plan.data["rows"].items() if row["action"] == "skip"}
    assert set(skips) == {"ArnQ", "Perm", "Custom"} and plan.data["rows"]["Q"]["action"] == "delete"
    assert "skip 3" in plan.summary
    events, _, _ = run_events(aws)
    run_skips = {e["logicalId"]: e["reason"] for e in events if e["eventType"] == "RESOURCE_SKIPPED"}
    assert run_skips == skips  # the run skips exactly what the plan said, for the same reasons
    assert outcome.details["counts"]["skipped"] == 3 and outcome.details["counts"]["deleted"] == 1
    assert sorted(stored(aws)["resources"]) == ["ArnQ", "Custom", "Perm"]
    assert "real-q" not in json.dumps(sqs.list_queues())


# --- nested children refused at run time ------------------------------------------------------------------


def test_a_nested_child_whose_lock_is_held_at_run_time_is_failed_never_deleted(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(parent_with_child()))
    aws.put(ACCOUNT, BUCKET, CHILD_STATE, cdkd_json(child_record()))
    fake = FakeAws(aws, {"parent-q", "child-fn", "child-role"})
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    lock = {
        "owner": "cdkd:bob@laptop",
        "operation": "deploy",
        "timestamp": 4_000_000_000_000,
        "expiresAt": 4_000_000_000_000,
    }
    aws.put(ACCOUNT, BUCKET, f"cdkd/{CHILD}/{REGION}/lock.json", cdkd_json(lock))

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert fake.calls == []  # neither the child's rows nor the queue the nested row holds
    assert outcome.details["counts"]["deleted"] == 0 and outcome.details["counts"]["failed"] == 1
    assert outcome.status == "failed"
    assert list(stored(aws)["resources"]) == ["Queue", "Nested"] and stored(aws, CHILD_STATE) == child_record()
    assert events_of(aws, "Nested") == ["RESOURCE_STARTED", "RESOURCE_FAILED"]


def test_a_nested_child_that_changed_since_the_plan_is_failed_never_deleted(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(parent_with_child()))
    aws.put(ACCOUNT, BUCKET, CHILD_STATE, cdkd_json(child_record()))
    fake = FakeAws(aws, {"parent-q", "child-fn", "child-role"})
    spec = Destroy(delete=fake.delete)
    ctx = context(bucket)
    plan = spec.plan(ctx)
    changed = child_record(lastModified=2, extra="edited")
    aws.put(ACCOUNT, BUCKET, CHILD_STATE, cdkd_json(changed))

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert fake.calls == [] and outcome.details["counts"]["deleted"] == 0
    assert outcome.details["stacks"][CHILD]["status"] != "succeeded"
    assert stored(aws, CHILD_STATE) == changed and "Nested" in stored(aws)["resources"]
    events, _, _ = run_events(aws)
    failed = next(e for e in events if e["eventType"] == "RESOURCE_FAILED" and e["logicalId"] == "Nested")
    assert "plan is stale" in failed["error"]["message"]


def test_a_childs_unverified_guards_show_on_the_parents_summary(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(parent_with_child()))
    aws.put(ACCOUNT, BUCKET, CHILD_STATE, cdkd_json(child_record()))
    fake = FakeAws(aws, {"parent-q", "child-fn", "child-role"})

    class Answer:
        status = "deleted"
        unverified = [{"guard": "ownership", "reason": "tags could not be read"}]

    def delete(clients: Any, ref: Any, snapshot: bool = False) -> Any:
        fake.delete(clients, ref, snapshot)
        return Answer() if ref.logical_id == "ChildRole" else "deleted"

    _, outcome = run(Destroy(delete=delete), context(bucket))

    assert outcome.status == "succeeded" and outcome.details["counts"]["unverified"] == 1
    assert any("App~Nested: ChildRole (ownership: tags could not be read)" in w for w in outcome.warnings)


# --- remove protection on what only the rollback journal records (seed 004's proof) --------------

INSTANCE = "AWS::EC2::Instance"


def journal_protection(guards: dict[str, bool], calls: list) -> FakeProtection:
    protection = FakeProtection(guards, calls)
    protection.PROTECTION_TYPES = frozenset({TABLE, INSTANCE})
    return protection


def with_journal_only(aws, *failed: dict[str, Any]) -> None:
    aws.put(ACCOUNT, BUCKET, STATE, cdkd_json(record(resources={"Q": res("AWS::SQS::Queue", "q")})))
    aws.put(ACCOUNT, BUCKET, JOURNAL, cdkd_json(journal_of(*failed)))


def test_it_lifts_a_journal_only_instances_protection_when_nothing_else_holds_it(aws, bucket):
    with_journal_only(
        aws, failed_create("Web", INSTANCE, "i-0abc", attemptedProperties={"DisableApiTermination": True})
    )
    calls: list = []
    fake = FakeAws(aws, {"q", "i-0abc"})
    fake.on_call = lambda ref: calls.append(("delete", ref.logical_id))

    plan, outcome = run(
        Destroy(delete=fake.delete, protection=journal_protection({"i-0abc": True}, calls)),
        context(bucket, remove_protection=True),
    )

    row = plan.data["journal"]["rows"]["journal:Web"]
    assert row["removeProtection"] is True and "never reused" in row["protectionProof"]
    assert any(c.startswith("turn its protection off, then delete journal:Web") for c in plan.changes)
    assert calls[:3] == [("read", "Web"), ("set", "Web", False), ("delete", "Web")]
    assert outcome.status == "succeeded" and fake.live == set()


def test_it_keeps_the_protection_of_a_journal_only_resource_another_stack_holds(aws, bucket):
    with_journal_only(aws, failed_create("Web", INSTANCE, "i-0abc"))
    other = record(resources={"Imported": res(INSTANCE, "i-0abc")}, stackName="Adopter")
    aws.put(ACCOUNT, BUCKET, "cdkd/Adopter/us-east-1/state.json", cdkd_json(other))  # a later `cdkd import`
    calls: list = []
    fake = FakeAws(aws, {"q", "i-0abc"})
    fake.fail["i-0abc"] = ProviderError("The instance may not be terminated (DisableApiTermination)")

    plan, outcome = run(
        Destroy(delete=fake.delete, protection=journal_protection({"i-0abc": True}, calls)),
        context(bucket, remove_protection=True),
    )

    assert "removeProtection" not in plan.data["journal"]["rows"]["journal:Web"]
    assert any(
        "protection stays on (another stack's record holds i-0abc now: cdkd/Adopter/us-east-1/state.json)" in w
        for w in plan.warnings
    )
    assert ("set", "Web", False) not in calls and outcome.status == "partial"
    assert aws.get(ACCOUNT, BUCKET, JOURNAL)  # the journal keeps it for a re-run


def test_it_keeps_the_protection_of_a_journal_only_table_whose_name_can_be_taken_again(aws, bucket):
    with_journal_only(
        aws, failed_create("Table", TABLE, "orders", attemptedProperties={"DeletionProtectionEnabled": True})
    )
    calls: list = []
    fake = FakeAws(aws, {"q", "orders"})

    plan, _ = run(
        Destroy(delete=fake.delete, protection=journal_protection({"orders": True}, calls)),
        context(bucket, remove_protection=True),
    )

    assert "removeProtection" not in plan.data["journal"]["rows"]["journal:Table"]
    assert any("its type's names can be taken again" in w for w in plan.warnings)
    assert ("set", "Table", False) not in calls


def test_it_checks_the_holders_again_under_the_lock(aws, bucket):
    with_journal_only(aws, failed_create("Web", INSTANCE, "i-0abc"))
    calls: list = []
    fake = FakeAws(aws, {"q", "i-0abc"})
    fake.fail["i-0abc"] = ProviderError("The instance may not be terminated (DisableApiTermination)")
    spec = Destroy(delete=fake.delete, protection=journal_protection({"i-0abc": True}, calls))
    ctx = context(bucket, remove_protection=True)
    plan = spec.plan(ctx)
    assert plan.data["journal"]["rows"]["journal:Web"]["removeProtection"] is True
    other = record(resources={"Imported": res(INSTANCE, "i-0abc")}, stackName="Adopter")
    aws.put(ACCOUNT, BUCKET, "cdkd/Adopter/us-east-1/state.json", cdkd_json(other))  # adopted after the plan
    LOGS.clear()

    outcome = spec.execute(ctx, Plan.from_json(plan.as_json()))

    assert ("set", "Web", False) not in calls and outcome.status == "partial"
    assert any("its protection stays on" in m and "Adopter" in m for _level, m in LOGS)
