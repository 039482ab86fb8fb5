"""`manage.py cdkd events` reads the bucket directly, like `cdkd events` (reference §4.6),
and prints cdkd's JSON shapes: the listing and a run's events, against the real samples."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from stacks.models import Account, DeploymentRun

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "cdkd-0.284.40"
A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
RUN = "20261129T122811123Z-f37f3ced"
SCRUB = "cdkd/ScrubStack/us-east-1/deployments"


def cdkd(*args: str) -> str:
    out = io.StringIO()
    call_command("cdkd", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def bucket(aws):
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, f"{SCRUB}/index.json", (SAMPLES / "ScrubStack-deployments-index.json").read_bytes())
    aws.put(A1, BUCKET, f"{SCRUB}/{RUN}.jsonl", (SAMPLES / "ScrubStack-destroy-run.jsonl").read_bytes())
    Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    return aws


def test_it_lists_runs_in_cdkds_shape(bucket):
    listing = json.loads(cdkd("events", "ScrubStack", "--account", A1, "--json"))

    index = json.loads((SAMPLES / "ScrubStack-deployments-index.json").read_text())
    assert listing == {"stackName": "ScrubStack", "region": "us-east-1", "runs": index["runs"]}
    assert list(listing) == ["stackName", "region", "runs"]
    assert list(listing["runs"][0]) == list(index["runs"][0])
    assert not DeploymentRun.objects.exists()  # the bucket, not the mirror


def test_it_prints_a_runs_events_verbatim(bucket):
    printed = json.loads(cdkd("events", "ScrubStack", "--account", "prod", "--run", RUN, "--json"))

    stream = (SAMPLES / "ScrubStack-destroy-run.jsonl").read_text().splitlines()
    assert printed == [json.loads(line) for line in stream]


def test_it_derives_the_listing_from_the_streams_without_an_index(bucket):
    bucket.delete(A1, BUCKET, f"{SCRUB}/index.json")
    later = "20261130T000000000Z-aaaaaaaa"
    bucket.put(A1, BUCKET, f"{SCRUB}/{later}.jsonl", b'{"eventType":"RUN_STARTED","timestamp":"x","command":"deploy"')
    torn = "20261130T000000001Z-bbbbbbbb"
    bucket.put(
        A1,
        BUCKET,
        f"{SCRUB}/{torn}.jsonl",
        b'{"timestamp":"2026-11-30T00:00:00.001Z","eventType":"RUN_STARTED","command":"deploy","cdkdVersion":"1.0"}\n{"tor',
    )

    listing = json.loads(cdkd("events", "ScrubStack", "--account", A1, "--stack-region", "us-east-1", "--json"))

    assert [r["runId"] for r in listing["runs"]] == [torn, later, RUN]
    assert listing["runs"][0] == {
        "runId": torn,
        "command": "deploy",
        "cdkdVersion": "1.0",
        "startedAt": "2026-11-30T00:00:00.001Z",
        "finishedAt": "",
        "result": "UNKNOWN",
        "eventCount": 1,
    }
    # Nothing readable: cdkd's fallback row.
    assert listing["runs"][1] == {
        "runId": later,
        "command": "deploy",
        "cdkdVersion": "unknown",
        "startedAt": "",
        "finishedAt": "",
        "result": "UNKNOWN",
        "eventCount": 0,
    }
    assert listing["runs"][2] == {
        "runId": RUN,
        "command": "destroy",
        "cdkdVersion": "0.284.40",
        "startedAt": "2026-11-29T12:28:11.123Z",
        "finishedAt": "2026-11-29T12:28:11.304Z",
        "result": "SUCCEEDED",
        "eventCount": 4,
    }


def test_it_says_when_a_stack_has_no_event_history(bucket):
    bucket.put(A1, BUCKET, "cdkd/Quiet/us-east-1/state.json", {"version": 11, "stackName": "Quiet", "resources": {}})

    with pytest.raises(CommandError, match="EVENTS_NOT_FOUND: no event history for Quiet"):
        cdkd("events", "Quiet", "--account", A1)


def test_it_refuses_to_guess_between_regions(bucket):
    bucket.put(A1, BUCKET, f"cdkd/ScrubStack/eu-west-1/deployments/{RUN}.jsonl", b"")

    with pytest.raises(CommandError, match=r"exists in several regions \(eu-west-1, us-east-1\): pass --stack-region"):
        cdkd("events", "ScrubStack", "--account", A1)
    assert json.loads(cdkd("events", "ScrubStack", "--account", A1, "--stack-region", "eu-west-1", "--json")) == {
        "stackName": "ScrubStack",
        "region": "eu-west-1",
        "runs": [
            {
                "runId": RUN,
                "command": "deploy",
                "cdkdVersion": "unknown",
                "startedAt": "",
                "finishedAt": "",
                "result": "UNKNOWN",
                "eventCount": 0,
            }
        ],
    }


def test_it_exits_non_zero_with_one_line_for_a_missing_run(bucket):
    with pytest.raises(CommandError) as caught:
        cdkd("events", "ScrubStack", "--account", A1, "--run", "20990101T000000000Z-nope0000")

    assert caught.value.returncode != 0
    assert str(caught.value) == "EVENTS_RUN_NOT_FOUND: no run 20990101T000000000Z-nope0000 of ScrubStack in us-east-1"


def test_it_prints_events_for_people(bucket):
    text = cdkd("events", "ScrubStack", "--account", A1, "--run", RUN)

    lines = text.splitlines()
    assert lines[0] == "2026-11-29T12:28:11.123Z  RUN_STARTED  destroy  us-east-1  0.284.40"
    assert lines[2] == (
        "2026-11-29T12:28:11.174Z  RESOURCE_SUCCEEDED  Param (AWS::SSM::Parameter)  DELETE  [sdk]  22ms"
    )
    assert lines[3] == "2026-11-29T12:28:11.304Z  RUN_FINISHED  SUCCEEDED  +0/~0/-1"
    assert RUN in cdkd("events", "ScrubStack", "--account", A1)
