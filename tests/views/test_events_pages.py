"""The events timeline and a run's page: filters, exports, permissions, links, query counts."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from stacks import audit
from stacks.eventsync import event_row
from stacks.models import DeploymentRun, Operation
from tests.views.conftest import make_stack

pytestmark = pytest.mark.django_db

RUN_A = "20261129T122811123Z-f37f3ced"
RUN_B = "20261201T080000000Z-bbbbbbbb"
RUN_C = "20261202T080000000Z-cccccccc"


def make_run(account, stack, run_id, *, region="us-east-1", command="destroy", result="SUCCEEDED", events=(), **extra):
    started = datetime.strptime(run_id[:18], "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)
    run = DeploymentRun.objects.create(
        account=account,
        stack_name=stack,
        region=region,
        run_id=run_id,
        command=command,
        cdkd_version="0.284.40",
        started_at_raw=started.isoformat(),
        started_at=started,
        run_at=started,
        result=result,
        event_count=len(events),
        in_index=True,
        has_stream=bool(events),
        stream_key=f"cdkd/{stack}/{region}/deployments/{run_id}.jsonl",
        synced_at=timezone.now(),
        **extra,
    )
    for seq, event in enumerate(events):
        row = event_row(seq, event)
        row.run = run
        row.save()
    return run


DESTROY_EVENTS = [
    {
        "timestamp": "2026-11-29T12:28:11.123Z",
        "eventType": "RUN_STARTED",
        "stackName": "web",
        "command": "destroy",
        "region": "us-east-1",
        "cdkdVersion": "0.284.40",
    },
    {
        "timestamp": "2026-11-29T12:28:11.152Z",
        "eventType": "RESOURCE_STARTED",
        "stackName": "web",
        "operation": "DELETE",
        "logicalId": "Bucket",
        "resourceType": "AWS::S3::Bucket",
        "provisionedBy": "sdk",
    },
    {
        "timestamp": "2026-11-29T12:28:12.000Z",
        "eventType": "RESOURCE_FAILED",
        "stackName": "web",
        "operation": "DELETE",
        "logicalId": "Bucket",
        "resourceType": "AWS::S3::Bucket",
        "provisionedBy": "sdk",
        "durationMs": 848,
        "error": {
            "name": "BucketNotEmpty",
            "message": "The bucket you tried to delete is not empty",
            "awsErrorCode": "BucketNotEmpty",
        },
    },
    {
        "timestamp": "2026-11-29T12:28:12.100Z",
        "eventType": "RESOURCE_SKIPPED",
        "stackName": "web",
        "operation": "DELETE",
        "logicalId": "Odd",
        "resourceType": "AWS::X::Y",
        "physicalId": "a|b",
        "reason": "composite physical id does not decode",
    },
    {
        "timestamp": "2026-11-29T12:28:12.300Z",
        "eventType": "RUN_FINISHED",
        "stackName": "web",
        "result": "FAILED",
        "counts": {"created": 0, "updated": 0, "deleted": 0, "failed": 1, "skipped": 1},
    },
]


@pytest.fixture
def world(prod, dev, root):
    op = Operation.objects.create(
        kind="destroy",
        account=prod,
        stack_name="web",
        region="us-east-1",
        requested_by=root,
        requester_name="root",
        plan={},
        plan_digest="sha256:x",
        status="partial",
        result={"details": {"run_id": RUN_A}},
    )
    audit.record("operation.requested", actor="root", operation=op)
    make_stack(prod, "web")
    a = make_run(prod, "web", RUN_A, result="FAILED", events=DESTROY_EVENTS, operation=op)
    b = make_run(prod, "api", RUN_B, region="eu-west-1", command="deploy")
    c = make_run(dev, "secret-dev-stack", RUN_C, command="deploy")
    return {"op": op, "a": a, "b": b, "c": c}


def listed(response) -> list[str]:
    return [r.run_id for r in response.context["page"]]


def test_it_lists_runs_newest_first_across_visible_accounts(alice_client, world):
    response = alice_client.get(reverse("events"))

    assert response.status_code == 200
    assert listed(response) == [RUN_C, RUN_B, RUN_A]
    assert (
        reverse("event_run", args=["222222222222", "us-east-1", "secret-dev-stack", RUN_C]) in response.content.decode()
    )


def test_it_hides_runs_of_other_accounts(client, bob, world):
    client.force_login(bob)

    response = client.get(reverse("events"))

    assert listed(response) == [RUN_C]
    assert b"api" not in response.content
    run = world["a"]
    url = reverse("event_run", args=[run.account.account_id, run.region, run.stack_name, run.run_id])
    assert client.get(url).status_code == 404
    exported = client.get(reverse("events"), {"format": "json"}).json()
    assert [r["runId"] for r in exported] == [RUN_C]


def test_it_shows_nothing_to_a_person_without_a_role(client, charlie, world):
    client.force_login(charlie)

    assert listed(client.get(reverse("events"))) == []
    assert client.get(reverse("event_run", args=["111111111111", "us-east-1", "web", RUN_A])).status_code == 404


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"account": "222222222222"}, [RUN_C]),
        ({"stack": "WE"}, [RUN_A]),
        ({"region": "eu-west-1"}, [RUN_B]),
        ({"command": "deploy"}, [RUN_C, RUN_B]),
        ({"result": "FAILED"}, [RUN_A]),
        ({"event_type": "RESOURCE_SKIPPED"}, [RUN_A]),
        ({"person": "ROOT"}, [RUN_A]),
        ({"since": "2026-12-01T00:00", "until": "2026-12-01T23:59"}, [RUN_B]),
    ],
)
def test_it_filters_the_timeline(alice_client, world, query, expected):
    assert listed(alice_client.get(reverse("events"), query)) == expected


def test_it_refuses_a_backwards_period_without_a_500(alice_client, world):
    response = alice_client.get(reverse("events"), {"since": "2026-12-02T00:00", "until": "2026-12-01T00:00"})

    assert response.status_code == 400


def test_it_ignores_a_bad_page_number(alice_client, world):
    assert alice_client.get(reverse("events"), {"page": "999"}).status_code == 200


def test_it_returns_the_table_partial_to_htmx(alice_client, world):
    response = alice_client.get(reverse("events"), {"command": "deploy"}, headers={"HX-Request": "true"})

    assert response.status_code == 200
    assert response.content.lstrip().startswith(b'<div id="runs-table"')


def test_it_exports_json_and_csv(alice_client, world):
    rows = alice_client.get(reverse("events"), {"format": "json", "result": "FAILED"}).json()

    assert rows == [
        {
            "account": "111111111111",
            "stackName": "web",
            "region": "us-east-1",
            "runId": RUN_A,
            "command": "destroy",
            "cdkdVersion": "0.284.40",
            "startedAt": "2026-11-29T12:28:11.123000+00:00",
            "finishedAt": "",
            "result": "FAILED",
            "eventCount": 5,
            "inIndex": True,
            "hasStream": True,
            "operation": world["op"].pk,
            "person": "root",
        }
    ]
    response = alice_client.get(reverse("events"), {"format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["runId"] for r in table] == [RUN_C, RUN_B, RUN_A]
    assert table[2]["person"] == "root" and table[0]["person"] == ""


def test_it_bounds_the_timelines_queries(alice_client, world, prod):
    for i in range(30):
        make_run(prod, f"s{i}", f"202610{i % 28 + 1:02d}T000000000Z-{i:08d}")
    with CaptureQueriesContext(connection) as few:
        alice_client.get(reverse("events"))
    for i in range(30, 60):
        make_run(prod, f"s{i}", f"202609{i % 28 + 1:02d}T000000000Z-{i:08d}")
    with CaptureQueriesContext(connection) as many:
        alice_client.get(reverse("events"))

    assert len(many) == len(few)


def test_it_shows_a_runs_events_with_links(alice_client, world):
    run = world["a"]

    response = alice_client.get(reverse("event_run", args=["111111111111", "us-east-1", "web", RUN_A]))

    assert response.status_code == 200
    page = response.content.decode()
    assert [e.event_type for e in response.context["events"]] == [e["eventType"] for e in DESTROY_EVENTS]
    assert "The bucket you tried to delete is not empty" in page and "BucketNotEmpty" in page
    assert "composite physical id does not decode" in page
    assert "848 ms" in page and "a|b" in page
    assert "+0 ~0 -0 !1 ⚠1" in page
    assert reverse("operation", args=[world["op"].pk]) in page
    assert reverse("stack", args=["111111111111", "us-east-1", "web"]) in page
    assert run.stream_key in page
    assert "operation.requested" in page  # the operation's audit entries


def test_it_says_when_the_stack_record_and_the_stream_are_gone(alice_client, world):
    response = alice_client.get(reverse("event_run", args=["111111111111", "eu-west-1", "api", RUN_B]))

    assert response.status_code == 200
    assert "no record now" in response.content.decode()
    assert "pruned" in response.content.decode()


def test_it_404s_an_unknown_run(alice_client, world):
    assert alice_client.get(reverse("event_run", args=["111111111111", "us-east-1", "web", "nope"])).status_code == 404


def test_it_exports_a_runs_events_as_cdkd_prints_them(alice_client, world):
    url = reverse("event_run", args=["111111111111", "us-east-1", "web", RUN_A])

    assert alice_client.get(url, {"format": "json"}).json() == DESTROY_EVENTS
    csv_text = b"".join(alice_client.get(url, {"format": "csv"}).streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert rows[2]["eventType"] == "RESOURCE_FAILED"
    assert json.loads(rows[2]["error"])["awsErrorCode"] == "BucketNotEmpty"


def test_it_lists_runs_on_the_stack_page(alice_client, world):
    response = alice_client.get(reverse("stack_events", args=["111111111111", "us-east-1", "web"]))

    assert response.status_code == 200
    assert [r.run_id for r in response.context["runs"]] == [RUN_A]
    assert reverse("event_run", args=["111111111111", "us-east-1", "web", RUN_A]) in response.content.decode()


def test_it_links_events_in_the_nav(alice_client, world):
    response = alice_client.get(reverse("stacks"))

    assert f'href="{reverse("events")}"' in response.content.decode()


def test_it_masks_credential_shapes_in_messages(alice_client, prod):
    leaky = {
        "timestamp": "2026-11-29T12:28:12.000Z",
        "eventType": "RESOURCE_FAILED",
        "logicalId": "Fn",
        "error": {"name": "Error", "message": "bad key AKIAABCDEFGHIJKLMNOP in env"},
        "reason": "token AKIAABCDEFGHIJKLMNOP",
    }
    make_run(prod, "leaky", RUN_A, events=[leaky])
    url = reverse("event_run", args=["111111111111", "us-east-1", "leaky", RUN_A])

    page = alice_client.get(url).content.decode()
    exported = alice_client.get(url, {"format": "json"}).json()

    assert "AKIAABCDEFGHIJKLMNOP" not in page and "bad key *** in env" in page
    assert exported[0]["error"]["message"] == "bad key *** in env" and exported[0]["reason"] == "token ***"
