"""`manage.py cdkd ...` against a moto server: the JSON shapes the DESIGN promises."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from stacks.models import Account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1, A2 = "111111111111", "222222222222"
BUCKET = f"cdkd-state-{A1}"
LOCK = {"owner": "alice@laptop:4242", "timestamp": 1795955000000, "expiresAt": 4102444800000, "operation": "deploy"}


def cdkd(*args: str) -> str:
    out = io.StringIO()
    call_command("cdkd", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def state(stack: str, region: str, resources: dict, **extra) -> dict:
    return {"version": 11, "stackName": stack, "region": region, "resources": resources, "outputs": {}, **extra}


@pytest.fixture
def bucket(aws):
    aws.make_bucket(A1, BUCKET)
    child_row = {"physicalId": "arn:child", "resourceType": "AWS::CloudFormation::Stack", "properties": {}}
    aws.put(A1, BUCKET, "cdkd/App/us-east-1/state.json", state("App", "us-east-1", {"Db": child_row}, x_future=1))
    aws.put(A1, BUCKET, "cdkd/App~Db/us-east-1/state.json", state("App~Db", "us-east-1", {}, parentStack="App"))
    aws.put(A1, BUCKET, "cdkd/App/us-east-1/lock.json", LOCK)
    aws.put(A1, BUCKET, "cdkd/Multi/us-east-1/state.json", state("Multi", "us-east-1", {}))
    aws.put(A1, BUCKET, "cdkd/Multi/eu-west-1/state.json", state("Multi", "eu-west-1", {}))
    aws.put(A1, BUCKET, "cdkd/Old/state.json", {"version": 1, "stackName": "Old", "resources": {}})
    aws.put(A1, BUCKET, "cdkd/Bad/us-east-1/state.json", b'{"version": 11, "resources": [')
    cdkd("accounts", "add", "--account-id", A1, "--role-arn", f"arn:aws:iam::{A1}:role/cdkd-admin", "--name", "prod")
    return aws


def test_it_adds_and_lists_accounts(bucket):
    rows = json.loads(cdkd("accounts", "list", "--json"))

    assert [(r["account"], r["name"], r["prefix"], r["status"]) for r in rows] == [(A1, "prod", "cdkd", "unknown")]


def test_it_refuses_a_bad_account_id(bucket):
    with pytest.raises(CommandError, match="12 digits"):
        cdkd("accounts", "add", "--account-id", "12345")
    assert Account.objects.count() == 1


def test_it_prints_sync_counts_as_json(bucket):
    first = json.loads(cdkd("sync", "--json"))
    second = json.loads(cdkd("sync", "--account", "prod", "--json"))

    assert first == {
        "accounts": [
            {"account": A1, "bucket": BUCKET, "listed": 6, "fetched": 6, "unchanged": 0, "removed": 0, "errors": []}
        ]
    }
    assert second["accounts"][0] | {} == first["accounts"][0] | {"fetched": 0, "unchanged": 6}


def test_it_exits_nonzero_when_an_account_cannot_be_synced(bucket):
    cdkd("accounts", "add", "--account-id", A2, "--role-arn", f"arn:aws:iam::{A2}:role/cdkd-admin")

    with pytest.raises(CommandError, match="1 of 2 accounts had errors"):
        cdkd("sync")
    assert Account.objects.get(account_id=A2).bucket_status == "missing"


def test_it_lists_stacks_as_json(bucket):
    rows = json.loads(cdkd("state", "list", "--json"))

    assert rows == [
        {"account": A1, "stackName": "App", "region": "us-east-1", "legacy": False},
        {"account": A1, "stackName": "App~Db", "region": "us-east-1", "legacy": False},
        {"account": A1, "stackName": "Bad", "region": "us-east-1", "legacy": False},
        {"account": A1, "stackName": "Multi", "region": "eu-west-1", "legacy": False},
        {"account": A1, "stackName": "Multi", "region": "us-east-1", "legacy": False},
        {"account": A1, "stackName": "Old", "region": None, "legacy": True},
    ]


def test_it_prints_the_tree(bucket):
    out = cdkd("state", "list", "--tree")

    assert "App  us-east-1\n  └─ Db\n" in out


def test_it_shows_the_stored_record_and_lock(bucket):
    shown = json.loads(cdkd("state", "show", "App", "--account", A1, "--json"))

    assert shown == {"state": json.loads(bucket.get(A1, BUCKET, "cdkd/App/us-east-1/state.json")), "lock": LOCK}
    assert shown["state"]["x_future"] == 1


def test_it_shows_nested_children(bucket):
    shown = json.loads(
        cdkd("state", "show", "App", "--account", A1, "--stack-region", "us-east-1", "--show-nested", "--json")
    )

    assert [c["state"]["stackName"] for c in shown["children"]] == ["App~Db"]
    assert shown["children"][0]["lock"] is None and shown["children"][0]["children"] == []


def test_it_shows_a_damaged_record_verbatim(bucket):
    shown = json.loads(cdkd("state", "show", "Bad", "--account", A1, "--json"))

    assert shown == {"state": '{"version": 11, "resources": [', "lock": None}


def test_it_shows_a_legacy_record(bucket):
    shown = json.loads(cdkd("state", "show", "Old", "--account", A1, "--json"))

    assert shown["state"]["version"] == 1


def test_it_needs_a_region_when_the_stack_has_several(bucket):
    with pytest.raises(CommandError, match=r"several regions \(eu-west-1, us-east-1\).*--stack-region"):
        cdkd("state", "show", "Multi", "--account", A1)


def test_it_names_the_missing_stack_and_account(bucket):
    with pytest.raises(CommandError, match="No stack 'Nope'.*111111111111"):
        cdkd("state", "show", "Nope", "--account", A1)
    with pytest.raises(CommandError, match="No account '999999999999'"):
        cdkd("state", "show", "App", "--account", "999999999999")


def test_it_lists_versions(bucket):
    bucket.put(A1, BUCKET, "cdkd/Multi/us-east-1/state.json", state("Multi", "us-east-1", {"changed": {}}))

    rows = json.loads(cdkd("state", "versions", "Multi", "--account", A1, "--stack-region", "us-east-1", "--json"))

    assert [set(r) for r in rows] == [{"versionId", "lastModified", "size", "isLatest", "deleteMarker"}] * 2
    assert [r["isLatest"] for r in rows] == [True, False]
    assert rows[0]["size"] == len(bucket.get(A1, BUCKET, "cdkd/Multi/us-east-1/state.json"))
