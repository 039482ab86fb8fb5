"""`events prune` (engine.prune through `manage.py cdkd events prune`) against moto: which
runs stay, the index as rewritten, and the noncurrent versions of what was deleted."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from stacks.models import Account, Operation

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
PREFIX = "cdkd/App/us-east-1/deployments/"
INDEX = PREFIX + "index.json"
NOW = datetime.now(UTC)
# Newest first: two recent runs, three from 2020, and one whose id carries no timestamp.
RECENT = [f"{(NOW - timedelta(days=d)):%Y%m%dT%H%M%S}000Z-0000000{d}" for d in (1, 2)]
OLD = ["20200303T100000000Z-00000003", "20200302T100000000Z-00000002", "20200301T100000000Z-00000001"]
UNDATED = "manual-run"


def cdkd(*args: str) -> str:
    out = io.StringIO()
    call_command("cdkd", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def row(run_id: str) -> dict:
    return {
        "runId": run_id,
        "command": "deploy",
        "cdkdVersion": "0.290.36",
        "startedAt": "",
        "finishedAt": "",
        "result": "SUCCEEDED",
        "eventCount": 2,
        "x_row_field": 1,
    }


@pytest.fixture
def store(aws):
    aws.make_bucket(A1, BUCKET)
    aws.put(
        A1,
        BUCKET,
        "cdkd/App/us-east-1/state.json",
        {"version": 11, "stackName": "App", "region": "us-east-1", "resources": {}},
    )
    for run_id in [*RECENT, *OLD, UNDATED]:
        key = f"{PREFIX}{run_id}.jsonl"
        aws.put(A1, BUCKET, key, b'{"eventType":"RUN_STARTED"}\n')  # a first flush...
        aws.put(A1, BUCKET, key, b'{"eventType":"RUN_STARTED"}\n{"eventType":"RUN_FINISHED"}\n')  # ...and the last
    index = {
        "indexVersion": 1,
        "stackName": "App",
        "region": "us-east-1",
        "x_future": "kept",
        "runs": [row(r) for r in [*RECENT, *OLD]],
        "lastModified": 1,
    }
    aws.put(A1, BUCKET, INDEX, index)
    Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin", bucket=BUCKET)
    return aws


def versions(aws) -> dict[str, list[str]]:
    """Per key under the prefix: "body" / "marker" per version, newest first as S3 lists."""
    listing = aws.s3(A1).list_object_versions(Bucket=BUCKET, Prefix=PREFIX)
    out: dict[str, list[str]] = {}
    for v in listing.get("Versions", []):
        out.setdefault(v["Key"], []).append("body")
    for m in listing.get("DeleteMarkers", []):
        out.setdefault(m["Key"], []).append("marker")
    return out


def stream(run_id: str) -> str:
    return f"{PREFIX}{run_id}.jsonl"


def prune(*flags: str) -> dict:
    return json.loads(cdkd("events", "prune", "App", "--account", A1, "--stack-region", "us-east-1", *flags, "--json"))


def test_it_keeps_the_newest_n_runs_and_purges_the_others_history(store):
    out = prune("--keep", "3", "--yes")

    assert out["status"] == "succeeded"
    # Newest first by run id, as cdkd orders them: "manual-run" sorts above the dated ids.
    assert out["deletedRuns"] == OLD
    kept = {UNDATED, *RECENT}
    found = versions(store)
    for run_id in kept:
        assert found[stream(run_id)] == ["body", "body"]  # untouched, history and all
    for run_id in set(OLD) | set(RECENT) - kept:
        assert found[stream(run_id)] == ["marker"]  # deleted, and no earlier body left
    index = json.loads(store.get(A1, BUCKET, INDEX))
    assert [r["runId"] for r in index["runs"]] == RECENT
    assert index["runs"][0] == row(RECENT[0]) and index["x_future"] == "kept"  # rows and fields verbatim
    assert Operation.objects.get().kind == "events-prune"


def test_it_deletes_only_runs_older_than_the_cutoff_and_keeps_undated_ones(store):
    out = prune("--older-than", "30", "--yes")

    assert sorted(out["deletedRuns"]) == sorted(OLD)
    assert out["kept"] == 3
    live = {k for k, v in versions(store).items() if v[0] == "body" and k.endswith(".jsonl")}
    assert live == {stream(r) for r in [*RECENT, UNDATED]}
    assert [r["runId"] for r in json.loads(store.get(A1, BUCKET, INDEX))["runs"]] == RECENT


def test_it_deletes_a_run_only_beyond_the_newest_n_and_older_than_the_cutoff(store):
    out = prune("--keep", "4", "--older-than", "30", "--yes")

    assert out["deletedRuns"] == OLD[1:]  # OLD[0] is the 4th newest (after manual-run and RECENT)
    assert [r["runId"] for r in json.loads(store.get(A1, BUCKET, INDEX))["runs"]] == [*RECENT, OLD[0]]


def test_it_deletes_everything_with_keep_zero_including_the_index_and_every_old_version(store):
    out = prune("--keep", "0", "--yes")

    assert out["status"] == "succeeded" and out["kept"] == 0
    found = versions(store)
    assert set(found) == {INDEX} | {stream(r) for r in [*RECENT, *OLD, UNDATED]}
    assert all(kinds == ["marker"] for kinds in found.values())  # no body of any of them survives
    assert store.etag(A1, BUCKET, "cdkd/App/us-east-1/state.json") is not None  # the record is not touched


def test_it_prints_the_plan_and_changes_nothing_without_yes(store):
    before = versions(store)

    out = prune("--keep", "1")

    assert len(out["plan"]["data"]["doomed"]) == 5
    assert versions(store) == before
    assert Operation.objects.count() == 0


def test_it_is_partial_when_the_noncurrent_versions_cannot_be_purged(store):
    store.proxy.deny_operation("ListObjectVersions")

    with pytest.raises(CommandError) as caught:
        prune("--older-than", "30", "--yes")

    assert caught.value.returncode == 2
    op = Operation.objects.get()
    assert op.status == "partial"
    assert any("s3:ListBucketVersions" in w for w in op.result["warnings"])
    store.proxy.clear_rules()
    assert versions(store)[stream(OLD[0])] == ["body", "body", "marker"]  # deleted, its history still there


def test_it_refuses_bad_flags(store):
    with pytest.raises(CommandError, match="keep must be a whole number"):
        prune("--keep", "-1", "--yes")
    with pytest.raises(CommandError, match="belong to `events prune STACK`"):
        cdkd("events", "App", "--account", A1, "--keep", "2")
