"""The mirror knows each record's leftover rollback journal from the listing alone, on a
moto server: it appears with a record, appears and goes under an unchanged record (an
incremental sync issues no GET for it), follows a rewrite, and is cleared by the re-sync
that ends a `rollback` operation (run for real by `manage.py cdkd rollback`)."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from stacks.models import Account, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
STATE = "cdkd/Shop/us-east-1/state.json"
JOURNAL = "cdkd/Shop/us-east-1/rollback-journal.json"


def record(stack: str, region: str = "us-east-1", **extra) -> dict:
    body = {"version": 11, "stackName": stack, "region": region, "resources": {}, "outputs": {}}
    body.update(lastModified=1795955307315, **extra)
    return body


def journal(stack: str = "Shop", segments: int = 1) -> dict:
    """cdkd's shape: a deploy whose only op failed and was refused (nothing to revert)."""
    segment = {
        "runId": "20261201T080000000Z-aaaaaaaa",
        "timestamp": 1795955307315,
        "reason": "no-rollback-failure",
        "initialDeploy": False,
        "cdkdVersion": "0.290.36",
        "operations": [],
        "failedOperations": [
            {"logicalId": "Queue", "changeType": "CREATE", "resourceType": "AWS::SQS::Queue", "provisionedBy": "sdk"}
        ],
    }
    return {"journalVersion": 1, "stackName": stack, "region": "us-east-1", "segments": [segment] * segments}


@pytest.fixture
def account(aws):
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, STATE, record("Shop"))
    aws.put(A1, BUCKET, "cdkd/Web/us-east-1/state.json", record("Web"))
    return Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")


def listed(aws, key: str) -> dict:
    (item,) = aws.s3(A1).list_objects_v2(Bucket=BUCKET, Prefix=key)["Contents"]
    return item


def journal_columns(name: str) -> tuple:
    stack = Stack.objects.get(stack_name=name)
    return stack.journal_key, stack.journal_etag, stack.journal_size, stack.journal_modified


def test_it_records_a_journal_listed_with_a_new_record(aws, account):
    aws.put(A1, BUCKET, JOURNAL, journal())
    aws.reset_counts()

    result = sync_account(account)

    assert result.errors == [] and result.fetched == 2
    item = listed(aws, JOURNAL)
    assert journal_columns("Shop") == (JOURNAL, item["ETag"], item["Size"], item["LastModified"])
    assert journal_columns("Web") == ("", "", None, None)  # looked for, and none there
    assert aws.requests["GetObject"] == 2  # the two records; the journal is never read


def test_it_sees_a_journal_appear_and_go_under_an_unchanged_record(aws, account):
    sync_account(account)
    assert journal_columns("Shop") == ("", "", None, None)

    aws.put(A1, BUCKET, JOURNAL, journal())
    aws.reset_counts()
    result = sync_account(account)
    assert (result.fetched, result.unchanged) == (0, 2)
    assert aws.requests.get("GetObject", 0) == 0  # from the listing alone
    item = listed(aws, JOURNAL)
    assert journal_columns("Shop") == (JOURNAL, item["ETag"], item["Size"], item["LastModified"])
    assert Stack.objects.filter(journal_modified__isnull=False).count() == 1  # what the attention board asks

    aws.put(A1, BUCKET, JOURNAL, journal(segments=2))  # a second failed attempt appends a segment
    sync_account(account)
    again = listed(aws, JOURNAL)
    assert journal_columns("Shop") == (JOURNAL, again["ETag"], again["Size"], again["LastModified"])
    assert again["ETag"] != item["ETag"] and again["Size"] > item["Size"]

    aws.delete(A1, BUCKET, JOURNAL)
    aws.reset_counts()
    sync_account(account)
    assert journal_columns("Shop") == ("", "", None, None)
    assert aws.requests.get("GetObject", 0) == 0


def test_it_keeps_the_journal_when_the_record_is_rewritten(aws, account):
    aws.put(A1, BUCKET, JOURNAL, journal())
    sync_account(account)
    before = journal_columns("Shop")
    aws.put(A1, BUCKET, STATE, record("Shop", lastModifiedBy="x"))  # the record changes, the journal stays

    result = sync_account(account)

    assert result.fetched == 1 and journal_columns("Shop") == before


def test_it_fills_in_rows_mirrored_before_the_journal_was_known(aws, account):
    sync_account(account)
    Stack.objects.update(journal_key=None, journal_etag="", journal_size=None, journal_modified=None)
    aws.put(A1, BUCKET, JOURNAL, journal())

    sync_account(account)

    assert journal_columns("Shop")[0] == JOURNAL
    assert journal_columns("Web") == ("", "", None, None)  # None (not known) became "" (none)


def test_it_gives_a_legacy_record_no_journal_and_a_lone_journal_no_row(aws, account):
    # A legacy record has no journal of its own; a journal with no record beside it names
    # no stack the mirror holds (a first deploy that never saved its record).
    aws.put(A1, BUCKET, "cdkd/Old/state.json", {"version": 1, "stackName": "Old", "region": "us-east-1"})
    aws.put(A1, BUCKET, "cdkd/Old/us-east-1/rollback-journal.json", journal("Old"))
    aws.put(A1, BUCKET, "cdkd/Gone/us-east-1/rollback-journal.json", journal("Gone"))

    result = sync_account(account)

    assert result.errors == []
    assert journal_columns("Old") == ("", "", None, None)
    assert not Stack.objects.filter(stack_name="Gone").exists()


def test_it_clears_the_journal_in_the_resync_after_a_rollback_operation(aws, account):
    aws.put(A1, BUCKET, JOURNAL, journal())
    sync_account(account)
    assert journal_columns("Shop")[0] == JOURNAL
    modified = journal_columns("Shop")[3]
    assert modified is not None and Stack.objects.filter(journal_modified__gte=modified - timedelta(days=1)).exists()

    out = io.StringIO()
    args = ["rollback", "Shop", "--account", A1, "--stack-region", "us-east-1", "--yes", "--json"]
    try:
        call_command("cdkd", *args, stdout=out)
    except CommandError as exc:  # pragma: no cover - the message says why
        pytest.fail(str(exc))

    assert json.loads(out.getvalue())["result"] == "clean"
    assert aws.etag(A1, BUCKET, JOURNAL) is None  # the engine deleted it ...
    assert journal_columns("Shop") == ("", "", None, None)  # ... and the operation's re-sync saw it go
