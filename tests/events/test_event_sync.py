"""Sync mirrors every account's deployments/ event store (streams and index.json) against a
moto server: incrementally by ETag, keeping a pruned run's summary, deriving the summary of
a stream the index does not list, skipping torn lines, and linking runs to operations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stacks.models import Account, DeploymentEvent, DeploymentRun, EventIndex, Operation
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "cdkd-0.284.40"
A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
SAMPLE_RUN = "20261129T122811123Z-f37f3ced"
SCRUB = "cdkd/ScrubStack/us-east-1/deployments"
OLD_RUN = "20261101T000000000Z-0ld0ld00"  # in the index, stream pruned
LOOSE_RUN = "20261201T101010101Z-l00se000"  # a stream no index lists


def loose_stream() -> bytes:
    lines = [
        {
            "timestamp": "2026-12-01T10:10:10.101Z",
            "eventType": "RUN_STARTED",
            "stackName": "Loose",
            "command": "deploy",
            "region": "eu-west-1",
            "cdkdVersion": "0.284.40",
        },
        {
            "timestamp": "2026-12-01T10:10:11.000Z",
            "eventType": "RESOURCE_STARTED",
            "stackName": "Loose",
            "operation": "CREATE",
            "logicalId": "Q",
            "resourceType": "AWS::SQS::Queue",
            "provisionedBy": "sdk",
        },
        {
            "timestamp": "2026-12-01T10:10:12.000Z",
            "eventType": "RESOURCE_FAILED",
            "stackName": "Loose",
            "operation": "CREATE",
            "logicalId": "Q",
            "resourceType": "AWS::SQS::Queue",
            "provisionedBy": "sdk",
            "durationMs": 999,
            "error": {
                "name": "QueueDeletedRecently",
                "message": "wait 60 s",
                "awsErrorCode": "AWS.SimpleQueueService.QueueDeletedRecently",
            },
        },
    ]
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    return body + b'\n{"timestamp":"2026-12-01T10:10:13.000Z","eventType":"RUN_FINI'  # torn by a crash


@pytest.fixture
def account(aws):
    aws.make_bucket(A1, BUCKET)
    index = json.loads((SAMPLES / "ScrubStack-deployments-index.json").read_text())
    index["runs"].append(
        {
            "runId": OLD_RUN,
            "command": "deploy",
            "cdkdVersion": "0.284.39",
            "startedAt": "2026-11-01T00:00:00.000Z",
            "finishedAt": "2026-11-01T00:00:09.000Z",
            "result": "FAILED",
            "eventCount": 7,
        }
    )
    aws.put(A1, BUCKET, f"{SCRUB}/index.json", index)
    aws.put(A1, BUCKET, f"{SCRUB}/{SAMPLE_RUN}.jsonl", (SAMPLES / "ScrubStack-destroy-run.jsonl").read_bytes())
    aws.put(A1, BUCKET, f"cdkd/Loose/eu-west-1/deployments/{LOOSE_RUN}.jsonl", loose_stream())
    return Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")


def runs() -> dict[str, DeploymentRun]:
    return {r.run_id: r for r in DeploymentRun.objects.all()}


def test_it_mirrors_streams_and_the_index(aws, account):
    result = sync_account(account)

    assert result.errors == []
    mirrored = runs()
    assert set(mirrored) == {SAMPLE_RUN, OLD_RUN, LOOSE_RUN}
    sample = mirrored[SAMPLE_RUN]
    assert sample.as_summary() == json.loads((SAMPLES / "ScrubStack-deployments-index.json").read_text())["runs"][0]
    assert (sample.stack_name, sample.region, sample.in_index, sample.has_stream) == (
        "ScrubStack",
        "us-east-1",
        True,
        True,
    )
    assert sample.started_at.isoformat() == "2026-11-29T12:28:11.123000+00:00"
    assert sample.started_at_raw == "2026-11-29T12:28:11.123Z"
    assert sample.stream_etag.startswith('"')
    events = list(sample.events.order_by("seq"))
    stream = [json.loads(line) for line in (SAMPLES / "ScrubStack-destroy-run.jsonl").read_text().splitlines()]
    assert [e.raw for e in events] == stream
    assert [e.event_type for e in events] == ["RUN_STARTED", "RESOURCE_STARTED", "RESOURCE_SUCCEEDED", "RUN_FINISHED"]
    succeeded = events[2]
    assert (succeeded.logical_id, succeeded.resource_type, succeeded.physical_id, succeeded.duration_ms) == (
        "Param",
        "AWS::SSM::Parameter",
        "/scrub/param",
        22,
    )
    assert (succeeded.operation, succeeded.provisioned_by) == ("DELETE", "sdk")
    assert events[3].counts == {"created": 0, "updated": 0, "deleted": 1} and events[3].result == "SUCCEEDED"


def test_it_keeps_the_summary_of_a_run_whose_stream_was_pruned(aws, account):
    sync_account(account)

    old = runs()[OLD_RUN]
    assert (old.in_index, old.has_stream, old.result, old.event_count, old.command) == (
        True,
        False,
        "FAILED",
        7,
        "deploy",
    )
    assert not old.events.exists()


def test_it_derives_the_summary_of_a_stream_no_index_lists_and_skips_torn_lines(aws, account):
    sync_account(account)

    loose = runs()[LOOSE_RUN]
    assert (loose.in_index, loose.has_stream) == (False, True)
    # No RUN_FINISHED survived the crash: UNKNOWN, never a fabricated FAILED.
    assert loose.as_summary() == {
        "runId": LOOSE_RUN,
        "command": "deploy",
        "cdkdVersion": "0.284.40",
        "startedAt": "2026-12-01T10:10:10.101Z",
        "finishedAt": "",
        "result": "UNKNOWN",
        "eventCount": 3,
    }
    failed = loose.events.get(event_type="RESOURCE_FAILED")
    assert failed.error["awsErrorCode"] == "AWS.SimpleQueueService.QueueDeletedRecently"
    assert failed.error_message == "wait 60 s" and failed.duration_ms == 999


def test_it_issues_no_get_when_the_event_store_is_unchanged(aws, account):
    sync_account(account)
    aws.requests.clear()

    result = sync_account(account)

    assert result.errors == []
    assert aws.requests.get("GetObject", 0) == 0
    assert DeploymentEvent.objects.count() == 7


def test_it_fetches_only_the_changed_stream_and_applies_prunes_without_a_get(aws, account):
    sync_account(account)
    # The writer re-PUTs the whole stream at each flush: the run grows a RUN_FINISHED.
    aws.put(
        A1,
        BUCKET,
        f"cdkd/Loose/eu-west-1/deployments/{LOOSE_RUN}.jsonl",
        loose_stream().rsplit(b"\n", 1)[0]
        + b'\n{"timestamp":"2026-12-01T10:10:13.000Z","eventType":"RUN_FINISHED","stackName":"Loose","result":"FAILED",'
        + b'"counts":{"created":0,"updated":0,"deleted":0,"failed":1}}\n',
    )
    aws.delete(A1, BUCKET, f"{SCRUB}/{SAMPLE_RUN}.jsonl")  # `cdkd events prune`, index kept
    aws.requests.clear()

    sync_account(account)

    assert aws.requests["GetObject"] == 1
    mirrored = runs()
    assert (mirrored[LOOSE_RUN].result, mirrored[LOOSE_RUN].finished_at_raw, mirrored[LOOSE_RUN].event_count) == (
        "FAILED",
        "2026-12-01T10:10:13.000Z",
        4,
    )
    sample = mirrored[SAMPLE_RUN]
    assert (sample.in_index, sample.has_stream, sample.result, sample.event_count) == (True, False, "SUCCEEDED", 4)
    assert not sample.events.exists()


def test_it_derives_from_the_mirrored_stream_when_the_index_drops_a_run(aws, account):
    sync_account(account)
    index = json.loads((SAMPLES / "ScrubStack-deployments-index.json").read_text())
    index["runs"] = []  # a concurrent run won the last-writer-wins index
    aws.put(A1, BUCKET, f"{SCRUB}/index.json", index)
    aws.requests.clear()

    sync_account(account)

    assert aws.requests["GetObject"] == 1  # the index only; the stream is unchanged
    mirrored = runs()
    assert OLD_RUN not in mirrored  # neither in the index nor in a stream any more
    sample = mirrored[SAMPLE_RUN]
    assert (sample.in_index, sample.has_stream, sample.index_id) == (False, True, None)
    assert sample.as_summary() == {
        "runId": SAMPLE_RUN,
        "command": "destroy",
        "cdkdVersion": "0.284.40",
        "startedAt": "2026-11-29T12:28:11.123Z",
        "finishedAt": "2026-11-29T12:28:11.304Z",
        "result": "SUCCEEDED",
        "eventCount": 4,
    }


def test_it_falls_back_to_the_streams_when_the_index_is_unreadable(aws, account):
    aws.put(A1, BUCKET, f"{SCRUB}/index.json", b'{"indexVersion": 1, "runs": [')

    sync_account(account)

    assert "not valid JSON" in EventIndex.objects.get().error
    assert set(runs()) == {SAMPLE_RUN, LOOSE_RUN}
    assert runs()[SAMPLE_RUN].in_index is False


def test_it_drops_runs_whose_index_and_stream_are_gone(aws, account):
    sync_account(account)
    for key in (f"{SCRUB}/index.json", f"{SCRUB}/{SAMPLE_RUN}.jsonl"):
        aws.delete(A1, BUCKET, key)

    sync_account(account)

    assert set(runs()) == {LOOSE_RUN}
    assert not EventIndex.objects.exists()


def test_it_links_a_run_to_the_operation_that_names_it(aws, account):
    op = Operation.objects.create(
        kind="destroy",
        account=account,
        stack_name="ScrubStack",
        region="us-east-1",
        requester_name="alice",
        plan={},
        plan_digest="d",
        status="succeeded",
        result={"summary": "ok", "details": {"run_id": SAMPLE_RUN}},
    )
    Operation.objects.create(
        kind="orphan",
        account=account,
        stack_name="Other",
        region="us-east-1",
        requester_name="bob",
        plan={},
        plan_digest="d",
        result={"details": ["not", "a", "mapping"]},
    )

    sync_account(account)

    assert runs()[SAMPLE_RUN].operation == op
    assert runs()[LOOSE_RUN].operation is None
