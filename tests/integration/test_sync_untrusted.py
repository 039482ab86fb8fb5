"""One bad record never stops an account's sync (issue 8): every byte of the bucket is
untrusted. Each damaged file becomes a named defect (or a readable-lock error) on its own
stack, and the account's other records sync as usual.

The world: account 111111111111 ("prod") holds a healthy stack `Good` and one damaged
file per test, put where cdkd would keep it.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from stacks.models import Account, DeploymentEvent, DeploymentRun, EventIndex, Lock, Membership, Resource, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
FUTURE = 4102444800000  # 2100-01-01
BIGINT_MAX = 2**63 - 1


def record(stack: str, region: str = "us-east-1", resources: dict | None = None, **extra) -> dict:
    body = {"version": 11, "stackName": stack, "region": region, "resources": resources or {}, "outputs": {}}
    body.update(extra)
    body.setdefault("lastModified", 1795955307315)
    return body


def row(name: str = "q") -> dict:
    return {"physicalId": name, "resourceType": "AWS::SQS::Queue", "properties": {"QueueName": name}}


def state_key(stack: str, region: str = "us-east-1") -> str:
    return f"cdkd/{stack}/{region}/state.json"


def lock_key(stack: str, region: str = "us-east-1") -> str:
    return f"cdkd/{stack}/{region}/lock.json"


@pytest.fixture
def prod(aws):
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, state_key("Good"), record("Good", resources={"Q": row()}))
    return Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")


def sync_ok(account: Account):
    result = sync_account(account)
    assert result.errors == [], result.errors
    good = Stack.objects.get(account=account, stack_name="Good")
    assert list(good.resources.values_list("logical_id", flat=True)) == ["Q"]
    return result


def viewer(account: Account) -> Client:
    """vera, a viewer on the account, logged in."""
    vera = User.objects.create_user("vera", password="pw")
    Membership.objects.create(user=vera, account=account, role="viewer")
    client = Client()
    client.force_login(vera)
    return client


def codes(stack: Stack) -> list[str]:
    return [d["code"] for d in stack.defects]


BAD_STATES = [
    ("version-2^31", json.dumps(record("Bad", version=2**31)).encode(), "number-out-of-range"),
    (
        "version-1.5e10",
        json.dumps(record("Bad")).replace('"version": 11', '"version": 1.5e10').encode(),
        "number-out-of-range",
    ),
    ("lastModified-2^63", json.dumps(record("Bad", lastModified=2**63)).encode(), "number-out-of-range"),
    ("lastModified-1e300", json.dumps(record("Bad", lastModified=1e300)).encode(), "number-out-of-range"),
    ("nan-literal", b'{"version": 11, "resources": {}, "lastModified": NaN}', "not-json"),
    ("infinity-literal", b'{"version": 11, "resources": {}, "lastModified": -Infinity}', "not-json"),
    ("deep-10000", b'{"resources": {}, "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "too-deep"),
    ("deep-900", b'{"resources": {}, "x": ' + b"[" * 900 + b"]" * 900 + b"}", "too-deep"),
    ("invalid-utf8", b'{"resources": {"Q\xff": {}}}', "not-json"),
    ("bom", b"\xef\xbb\xbf" + json.dumps(record("Bad")).encode(), "not-json"),
    ("nul-logical-id", b'{"version": 11, "resources": {"\\u0000": 5}}', "resource-row-malformed"),
    ("lone-surrogate", b'{"version": 11, "resources": {"\\ud800": ' + json.dumps(row()).encode() + b"}}", None),
    ("huge-digits", b'{"version": 11, "resources": {}, "lastModified": ' + b"9" * 5000 + b"}", "not-json"),
]


@pytest.mark.parametrize(("body", "code"), [(b, c) for _, b, c in BAD_STATES], ids=[n for n, _, _ in BAD_STATES])
def test_it_turns_a_damaged_state_into_a_defect_of_that_stack_only(aws, prod, body, code):
    aws.put(A1, BUCKET, state_key("Bad"), body)

    result = sync_ok(prod)

    assert (result.listed, result.fetched) == (2, 2)
    bad = Stack.objects.get(account=prod, stack_name="Bad")
    assert bytes(bad.body) == body  # the stored bytes stay verbatim
    if code is not None:
        assert code in codes(bad) and bad.has_defects
    assert bad.schema_version is None or bad.schema_version <= 2**31 - 1
    assert bad.record_last_modified is None or abs(bad.record_last_modified) <= BIGINT_MAX


def test_it_keeps_a_huge_version_read_only_and_explains_it(aws, prod):
    aws.put(A1, BUCKET, state_key("Bad"), json.dumps(record("Bad", version=2**31)).encode())

    sync_ok(prod)

    bad = Stack.objects.get(stack_name="Bad")
    assert bad.read_only and bad.schema_version is None
    [defect] = [d for d in bad.defects if d["code"] == "number-out-of-range"]
    assert defect["path"] == "version" and "2147483648" in defect["message"]


def test_it_names_duplicate_keys_as_a_defect(aws, prod):
    body = b'{"version": 11, "resources": {}, "outputs": {"A": 1, "A": 2}, "region": "us-east-1"}'
    aws.put(A1, BUCKET, state_key("Bad"), body)

    sync_ok(prod)

    bad = Stack.objects.get(stack_name="Bad")
    assert codes(bad) == ["duplicate-key"] and bad.has_defects
    assert bad.defects[0]["path"] == "outputs.A"


def test_it_stores_a_lone_surrogate_logical_id_without_failing(aws, prod):
    aws.put(
        A1, BUCKET, state_key("Bad"), b'{"version": 11, "resources": {"\\ud800x": ' + json.dumps(row()).encode() + b"}}"
    )

    sync_ok(prod)

    [resource] = Resource.objects.filter(stack__stack_name="Bad")
    assert resource.logical_id == "\ufffdx"
    client = viewer(prod)
    page = client.get(f"/stacks/{A1}/us-east-1/Bad/resources/")
    assert page.status_code == 200 and b"\\ud800x" in page.content  # shown as its escape
    one = client.get(f"/stacks/{A1}/us-east-1/Bad/resources/%EF%BF%BDx/")  # the link a long list gives it
    assert one.status_code == 200 and b"AWS::SQS::Queue" in one.content


BAD_LOCKS = [
    ("expiresAt-2^63", json.dumps({"owner": "ci", "timestamp": 1, "expiresAt": 2**63}).encode(), "live"),
    ("expiresAt-1e300", b'{"owner": "ci", "timestamp": 1, "expiresAt": 1e300}', "live"),
    ("timestamp-2^64", json.dumps({"owner": "ci", "timestamp": 2**64, "expiresAt": FUTURE}).encode(), "live"),
    ("deep-10000", b"[" * 10_000 + b"]" * 10_000, "unreadable"),
    ("deep-object", b'{"owner": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}", "unreadable"),
    ("nan", b'{"owner": "ci", "timestamp": 1, "expiresAt": NaN}', "unreadable"),
    ("invalid-utf8", b'{"owner": "ci\xff", "timestamp": 1}', "unreadable"),
    ("bom", b'\xef\xbb\xbf{"owner": "ci", "timestamp": 1, "expiresAt": 4102444800000}', "unreadable"),
    ("surrogate-owner", b'{"owner": "\\udc00ci", "timestamp": 1, "expiresAt": 4102444800000}', "live"),
    ("nul-owner", b'{"owner": "\\u0000", "operation": "\\u0000\\ud800", "expiresAt": 4102444800000}', "live"),
]


@pytest.mark.parametrize(("body", "state"), [(b, s) for _, b, s in BAD_LOCKS], ids=[n for n, _, _ in BAD_LOCKS])
def test_it_mirrors_a_damaged_lock_without_failing_the_account(aws, prod, body, state):
    aws.put(A1, BUCKET, state_key("Bad"), json.dumps(record("Bad")).encode())
    aws.put(A1, BUCKET, lock_key("Bad"), body)

    sync_ok(prod)

    lock = Lock.objects.get(key=lock_key("Bad"))
    assert bytes(lock.body) == body and lock.stack.stack_name == "Bad"
    assert lock.state() == state
    for value in (lock.timestamp_ms, lock.expires_at_ms):
        assert value is None or abs(value) <= BIGINT_MAX
    if state == "unreadable":
        assert lock.error


def events_key(stack: str, name: str) -> str:
    return f"cdkd/{stack}/us-east-1/deployments/{name}"


RUN = "20261129T122811123Z-f37f3ced"


def test_it_mirrors_damaged_event_streams_and_indexes(aws, prod):
    aws.put(A1, BUCKET, state_key("Bad"), json.dumps(record("Bad")).encode())
    lines = [
        {"timestamp": "2026-11-29T12:28:11.123Z", "eventType": "RUN_STARTED", "command": "deploy"},
        {"timestamp": "0001-01-01T00:00:00+01:00", "eventType": "RESOURCE_STARTED", "logicalId": "\ud800"},
        {"timestamp": "9999-12-31T23:59:59-01:00", "eventType": "RESOURCE_SUCCEEDED", "durationMs": 2**70},
    ]
    stream = "\n".join(json.dumps(line) for line in lines).encode()
    stream += b'\n{"eventType": "X", "durationMs": 1e400, "reason": "\\u0000"}\n'
    stream += b"[" * 5000 + b"]" * 5000 + b"\n" + b'{"a": ' * 500 + b"1" + b"}" * 500 + b"\n"
    aws.put(A1, BUCKET, events_key("Bad", f"{RUN}.jsonl"), stream)
    index = {
        "indexVersion": 1,
        "runs": [
            {"runId": RUN, "command": "deploy", "startedAt": "0001-01-01T00:00:00+14:00", "eventCount": 2**40},
            {"runId": "\ud800bad", "command": "deploy"},
        ],
    }
    aws.put(A1, BUCKET, events_key("Bad", "index.json"), json.dumps(index).encode())

    sync_ok(prod)

    run = DeploymentRun.objects.get(run_id=RUN)
    assert run.in_index and run.event_count == 0 and run.started_at is None
    events = list(DeploymentEvent.objects.filter(run=run).order_by("seq"))
    assert [e.event_type for e in events][:4] == ["RUN_STARTED", "RESOURCE_STARTED", "RESOURCE_SUCCEEDED", "X"]
    assert events[1].timestamp is None and events[2].timestamp is None
    assert events[1].logical_id == "\ufffd" and events[3].duration_ms is None
    assert EventIndex.objects.get(key=events_key("Bad", "index.json")).error == ""


def test_it_marks_an_event_index_nested_too_deep(aws, prod):
    aws.put(A1, BUCKET, events_key("Bad", "index.json"), b'{"runs": ' + b"[" * 10_000 + b"]" * 10_000 + b"}")
    aws.put(A1, BUCKET, events_key("Bad", f"{RUN}.jsonl"), b'{"eventType": "RUN_STARTED", "command": "deploy"}\n')

    sync_ok(prod)

    assert "deep" in EventIndex.objects.get(key=events_key("Bad", "index.json")).error
    aws.put(A1, BUCKET, state_key("Bad"), json.dumps(record("Bad")).encode())
    sync_ok(prod)
    client = viewer(prod)

    page = client.get(f"/stacks/{A1}/us-east-1/Bad/events/")  # the Events tab

    assert page.status_code == 200 and b'data-code="event-index-unreadable"' in page.content


def test_it_shows_a_lock_nested_10000_deep_as_unreadable_in_state_show(aws, prod):
    from stacks.records import read_record

    aws.put(A1, BUCKET, state_key("Bad"), json.dumps(record("Bad")).encode())
    aws.put(A1, BUCKET, lock_key("Bad"), b"[" * 10_000 + b"]" * 10_000)
    sync_ok(prod)

    shown = read_record(Account.objects.get(pk=prod.pk), "Bad", "us-east-1", actor="test").as_json()

    assert shown["lock"]["unreadable"] is True and shown["state"]["stackName"] == "Bad"


def test_it_survives_a_region_segment_longer_than_any_region(aws, prod):
    region = "r" * 70
    aws.put(A1, BUCKET, f"cdkd/Bad/{region}/state.json", json.dumps(record("Bad", region=region)).encode())
    aws.put(A1, BUCKET, f"cdkd/Bad/{region}/lock.json", json.dumps({"owner": "ci", "expiresAt": FUTURE}).encode())
    aws.put(A1, BUCKET, f"cdkd/Bad/{region}/deployments/index.json", json.dumps({"runs": [{"runId": RUN}]}).encode())
    aws.put(A1, BUCKET, f"cdkd/Bad/{region}/deployments/{RUN}.jsonl", b'{"eventType": "RUN_STARTED"}\n')

    sync_ok(prod)

    bad = Stack.objects.get(stack_name="Bad")
    assert bad.key == f"cdkd/Bad/{region}/state.json" and len(bad.region) == 64
    assert Lock.objects.get(stack_name="Bad").stack == bad


def test_it_mirrors_at_most_a_bounded_number_of_events_per_run(aws, prod, monkeypatch):
    from stacks import eventsync

    monkeypatch.setattr(eventsync, "MAX_EVENTS_PER_RUN", 3)
    lines = [{"eventType": "RUN_STARTED", "command": "deploy"}] + [{"eventType": "RESOURCE_STARTED"}] * 4
    aws.put(A1, BUCKET, events_key("Bad", f"{RUN}.jsonl"), "".join(json.dumps(line) + "\n" for line in lines))

    sync_ok(prod)

    run = DeploymentRun.objects.get(run_id=RUN)
    assert run.event_count == 5 and run.events.count() == 3
