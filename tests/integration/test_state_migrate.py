"""`state migrate` (engine.migrate through `manage.py cdkd state migrate` and the operation
pipeline) against moto: dry run, copy and keep, copy and remove; stored bytes checked.

moto denies every object read and write under the account-only bucket policy the migration
puts on a new destination (it has no aws:PrincipalAccount to compare), so the tests read
the destination after checking that policy and taking it off."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from stacks.models import Account, AuditEvent, Operation

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
LEGACY = f"cdkd-state-{A1}-us-east-1"
NEW = f"cdkd-state-{A1}"
V1 = b'{\n  "version": 1,\n  "stackName": "Old",\n  "region": "us-east-1",\n  "resources": {},\n  "x_kept": true\n}'
APP = b'{\n  "version": 11,\n  "stackName": "App",\n  "region": "us-east-1",\n  "resources": {}\n}'
EVENTS = b'{"timestamp":"2026-11-01T10:00:00.000Z","eventType":"RUN_STARTED","stackName":"App"}\n'
MARKER = b'{"assetBucket":"a","containerRepo":"r","assetSupportVersion":1,"createdAt":"2026-11-01T10:00:00Z"}'
OBJECTS = {
    "cdkd/App/us-east-1/state.json": APP,
    "cdkd/App/us-east-1/deployments/20261101T100000000Z-aaaaaaaa.jsonl": EVENTS,
    "cdkd/Old/state.json": V1,
    "cdkd-bootstrap/us-east-1.json": MARKER,
}


def cdkd(*args: str) -> str:
    out = io.StringIO()
    call_command("cdkd", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def legacy(aws):
    aws.make_bucket(A1, LEGACY)
    aws.put(A1, LEGACY, "cdkd/App/us-east-1/state.json", b"an earlier body")  # history that is not copied
    for key, body in OBJECTS.items():
        aws.put(A1, LEGACY, key, body)
    Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    return aws


def keys(aws, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in aws.s3(A1).list_objects_v2(Bucket=bucket).get("Contents", []))


def bucket_exists(aws, bucket: str) -> bool:
    return bucket in [b["Name"] for b in aws.s3(A1).list_buckets()["Buckets"]]


def destination_bytes(aws) -> dict[str, bytes]:
    """The new bucket's objects, after checking its hardening (and lifting the policy moto
    would apply to the reads: see the module docstring)."""
    s3 = aws.s3(A1)
    policy = json.loads(s3.get_bucket_policy(Bucket=NEW)["Policy"])
    assert policy["Statement"][0]["Condition"] == {"StringNotEquals": {"aws:PrincipalAccount": A1}}
    assert s3.get_bucket_versioning(Bucket=NEW)["Status"] == "Enabled"
    rules = s3.get_bucket_encryption(Bucket=NEW)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    s3.delete_bucket_policy(Bucket=NEW)
    return {key: aws.get(A1, NEW, key) for key in keys(aws, NEW)}


def test_it_changes_nothing_on_a_dry_run(legacy):
    out = json.loads(cdkd("state", "migrate", "--account", A1, "--region", "us-east-1", "--dry-run", "--json"))

    assert out | {"digest": "-"} == {
        "source": LEGACY,
        "destination": NEW,
        "region": "us-east-1",
        "dryRun": True,
        "createDestination": True,
        "removeLegacy": False,
        "toCopy": 4,
        "alreadyThere": 0,
        "bytes": sum(len(b) for b in OBJECTS.values()),
        "digest": "-",
    }
    assert not bucket_exists(legacy, NEW)
    assert keys(legacy, LEGACY) == sorted(OBJECTS)
    assert Operation.objects.count() == 0


def test_it_copies_every_object_byte_for_byte_and_keeps_the_source(legacy):
    out = json.loads(cdkd("state", "migrate", "--account", A1, "--region", "us-east-1", "--yes", "--json"))

    assert (out["status"], out["copied"], out["removedSource"]) == ("succeeded", 4, False)
    # Verbatim: the v1 record keeps its legacy key, version and unknown field; no re-stamping.
    assert destination_bytes(legacy) == OBJECTS
    assert legacy.s3(A1).head_object(Bucket=NEW, Key=next(iter(OBJECTS)))["ContentType"] == "binary/octet-stream"
    assert {k: legacy.get(A1, LEGACY, k) for k in keys(legacy, LEGACY)} == OBJECTS
    op = Operation.objects.get()
    assert (op.kind, op.status, op.region, op.via) == ("state-migrate", "succeeded", "us-east-1", "cli")
    assert list(AuditEvent.objects.filter(operation=op).values_list("action", flat=True).order_by("id")) == [
        "operation.requested",
        "operation.started",
        "operation.finished",
    ]


def test_it_is_idempotent_and_refuses_to_overwrite_different_bytes(legacy):
    cdkd("state", "migrate", "--account", A1, "--region", "us-east-1", "--yes")
    legacy.s3(A1).delete_bucket_policy(Bucket=NEW)

    again = json.loads(cdkd("state", "migrate", "--account", A1, "--region", "us-east-1", "--yes", "--json"))
    legacy.put(A1, NEW, "cdkd/App/us-east-1/state.json", b"someone else's record")
    with pytest.raises(CommandError, match="already holds different bytes at 1 key"):
        cdkd("state", "migrate", "--account", A1, "--region", "us-east-1", "--yes")

    assert (again["status"], again["copied"], again["alreadyThere"]) == ("succeeded", 0, 4)
    assert legacy.get(A1, NEW, "cdkd/App/us-east-1/state.json") == b"someone else's record"


def test_it_removes_every_version_of_the_legacy_bucket_after_a_verified_copy(legacy):
    out = json.loads(
        cdkd("state", "migrate", "--account", A1, "--region", "us-east-1", "--yes", "--remove-legacy", "--json")
    )

    assert (out["status"], out["copied"], out["removedSource"]) == ("succeeded", 4, True)
    assert out["removedVersions"] == 5  # four current objects and the earlier App body
    assert not bucket_exists(legacy, LEGACY)
    assert destination_bytes(legacy) == OBJECTS


def test_it_refuses_while_the_legacy_bucket_holds_a_lock(legacy):
    legacy.put(A1, LEGACY, "cdkd/App/us-east-1/lock.json", {"owner": "bob@ci:1", "expiresAt": 4102444800000})

    with pytest.raises(CommandError, match="holds 1 lock"):
        cdkd("state", "migrate", "--account", A1, "--region", "us-east-1", "--yes", "--remove-legacy")

    assert not bucket_exists(legacy, NEW)
    assert bucket_exists(legacy, LEGACY)


def test_it_refuses_a_region_with_no_legacy_bucket(legacy):
    with pytest.raises(CommandError, match=f"no legacy state bucket cdkd-state-{A1}-eu-west-1"):
        cdkd("state", "migrate", "--account", A1, "--region", "eu-west-1", "--dry-run")


def test_it_is_an_approved_operation_from_the_web_pipeline(legacy, django_user_model, queue):
    from stacks.models import Membership
    from stacks.operations import decide, request_operation, run_operation

    account = Account.objects.get()
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    Membership.objects.create(user=alice, account=account, role="operator")
    Membership.objects.create(user=bob, account=account, role="approver")

    op = request_operation(alice, account, "state-migrate", "", "us-east-1", {"remove_legacy": False})
    assert op.status == "awaiting-approval" and not bucket_exists(legacy, NEW)
    decide(bob, op, approve=True)
    run_operation(op.pk)

    op.refresh_from_db()
    assert op.status == "succeeded", op.error
    assert destination_bytes(legacy) == OBJECTS


def test_it_refuses_a_stale_plan_when_the_source_changed_after_approval(legacy, django_user_model, queue):
    from stacks.models import Membership
    from stacks.operations import decide, request_operation, run_operation

    account = Account.objects.get()
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    Membership.objects.create(user=alice, account=account, role="operator")
    Membership.objects.create(user=bob, account=account, role="approver")
    op = request_operation(alice, account, "state-migrate", "", "us-east-1", {"remove_legacy": True})
    decide(bob, op, approve=True)
    legacy.put(A1, LEGACY, "cdkd/New/us-east-1/state.json", APP)

    run_operation(op.pk)

    op.refresh_from_db()
    assert op.status == "refused" and "plan is stale" in op.error
    assert not bucket_exists(legacy, NEW) and bucket_exists(legacy, LEGACY)
