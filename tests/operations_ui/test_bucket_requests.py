"""`state migrate` and `events prune` requested from the web, approved per the account's
policy and run by an in-process RQ worker against moto: the request pages (plan shown),
the approval, the bytes in the buckets after, the refusals (`actions.why_not`, 409), and
who may ask (viewer 403, outsider 404).

moto denies every object read and write under the account-only bucket policy a migration
puts on a new destination (it has no aws:PrincipalAccount to compare), so the tests read
the destination after checking that policy and taking it off (as
tests/integration/test_state_migrate.py does)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from rq import SimpleWorker

from stacks.models import Account, ApprovalPolicy, AuditEvent, Lock, Membership, Operation, OperationStatus, Role, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
B1 = "222222222222"
LEGACY = f"cdkd-state-{A1}-us-east-1"
NEW = f"cdkd-state-{A1}"
APP = b'{\n  "version": 11,\n  "stackName": "App",\n  "region": "us-east-1",\n  "resources": {}\n}'
V1 = b'{\n  "version": 1,\n  "stackName": "Old",\n  "region": "us-east-1",\n  "resources": {},\n  "x_kept": true\n}'
EVENTS = b'{"timestamp":"2026-11-01T10:00:00.000Z","eventType":"RUN_STARTED","stackName":"App"}\n'
OBJECTS = {
    "cdkd/App/us-east-1/state.json": APP,
    "cdkd/App/us-east-1/deployments/20261101T100000000Z-aaaaaaaa.jsonl": EVENTS,
    "cdkd/Old/state.json": V1,
}
PREFIX = "cdkd/App/us-east-1/deployments/"
INDEX = PREFIX + "index.json"
NOW = datetime.now(UTC)
RECENT = [f"{(NOW - timedelta(days=d)):%Y%m%dT%H%M%S}000Z-0000000{d}" for d in (1, 2)]
OLD = ["20200303T100000000Z-00000003", "20200302T100000000Z-00000002", "20200301T100000000Z-00000001"]


def people(account: Account, django_user_model) -> dict[str, Client]:
    """A logged-in client per persona: viewer, operator, two approvers, admin; otto is an
    admin of another account only (an outsider here)."""
    other = Account.objects.create(account_id=B1, name="dev", role_arn=f"arn:aws:iam::{B1}:role/cdkd-admin")
    clients = {}
    for name, role, where in (
        ("vera", Role.VIEWER, account),
        ("olivia", Role.OPERATOR, account),
        ("arthur", Role.APPROVER, account),
        ("april", Role.APPROVER, account),
        ("ada", Role.ADMIN, account),
        ("otto", Role.ADMIN, other),
    ):
        user = django_user_model.objects.create_user(name)
        Membership.objects.create(user=user, account=where, role=role)
        clients[name] = Client()
        clients[name].force_login(user)
    return clients


def work(queue) -> None:
    SimpleWorker([queue], connection=queue.connection).work(burst=True)


# --- state migrate ------------------------------------------------------------------------------


@pytest.fixture
def legacy(aws, django_user_model):
    aws.make_bucket(A1, LEGACY)
    aws.put(A1, LEGACY, "cdkd/App/us-east-1/state.json", b"an earlier body")  # history that is not copied
    for key, body in OBJECTS.items():
        aws.put(A1, LEGACY, key, body)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    sync_account(account)
    account.refresh_from_db()
    assert account.bucket_source == "default-legacy"
    return {"aws": aws, "account": account, "people": people(account, django_user_model)}


def keys(aws, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in aws.s3(A1).list_objects_v2(Bucket=bucket).get("Contents", []))


def bucket_exists(aws, bucket: str) -> bool:
    return bucket in [b["Name"] for b in aws.s3(A1).list_buckets()["Buckets"]]


def destination_bytes(aws) -> dict[str, bytes]:
    s3 = aws.s3(A1)
    policy = json.loads(s3.get_bucket_policy(Bucket=NEW)["Policy"])
    assert policy["Statement"][0]["Condition"] == {"StringNotEquals": {"aws:PrincipalAccount": A1}}
    s3.delete_bucket_policy(Bucket=NEW)
    return {key: aws.get(A1, NEW, key) for key in keys(aws, NEW)}


MIGRATE = reverse("state_migrate_new", args=[A1])


def test_it_links_the_request_from_the_attention_board_and_the_account_settings(legacy):
    olivia, ada = legacy["people"]["olivia"], legacy["people"]["ada"]

    rows = olivia.get(reverse("attention"), {"format": "json"}).json()["rows"]
    step = next(r["nextStep"] for r in rows if r["target"] == "bucket")
    settings_page = ada.get(reverse("account_settings", args=[A1])).content.decode()

    assert step["url"] == MIGRATE + "?region=us-east-1"
    assert (step["operation"], step["allowed"], step["reason"]) == ("state-migrate", True, "")
    assert step["approval"] == "needs 1 approval"
    assert f'href="{MIGRATE}"' in settings_page and "state-migrate-link" in settings_page


def test_it_requests_approves_and_runs_a_state_migrate_that_removes_the_legacy_bucket(legacy, queue):
    aws, olivia, arthur = legacy["aws"], legacy["people"]["olivia"], legacy["people"]["arthur"]

    preview = olivia.get(MIGRATE, {"region": "us-east-1", "remove_legacy": "on"})
    assert preview.status_code == 200, preview.content[:2000]
    table = preview.context["migrate_table"]
    assert (table["source"], table["destination"], table["remove_legacy"]) == (LEGACY, NEW, True)
    assert [e["key"] for e in table["copy"]] == sorted(OBJECTS) and table["same"] == []
    assert 'id="id_confirm_remove"' in preview.content.decode()
    digest = preview.context["digest"]

    # Removing the legacy bucket takes its own tick: without it nothing is requested.
    unticked = olivia.post(MIGRATE, {"region": "us-east-1", "remove_legacy": "on", "plan_digest": digest})
    assert unticked.status_code == 400 and not Operation.objects.exists()
    response = olivia.post(
        MIGRATE,
        {
            "region": "us-east-1",
            "remove_legacy": "on",
            "confirm_remove": "on",
            "plan_digest": digest,
            "reason": "OPS-9",
        },
    )
    assert response.status_code == 302
    op = Operation.objects.get()
    assert (op.kind, op.stack_name, op.region, op.params) == ("state-migrate", "", "us-east-1", {"remove_legacy": True})
    assert op.status == OperationStatus.AWAITING_APPROVAL and op.plan_digest == digest
    assert not bucket_exists(aws, NEW)  # nothing runs before the approval

    page = arthur.get(reverse("operation", args=[op.pk])).content.decode()
    assert 'id="migrate-plan"' in page and "cdkd/Old/state.json" in page and 'id="migrate-remove-legacy"' in page
    assert arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 302
    work(queue)

    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    assert op.result["details"]["copied"] == 3 and op.result["details"]["removed_source"] is True
    assert not bucket_exists(aws, LEGACY)
    assert destination_bytes(aws) == OBJECTS  # byte for byte: the v1 record keeps its key and its unknown field
    actions = list(AuditEvent.objects.filter(operation=op).order_by("id").values_list("action", "details"))
    assert [a for a, _ in actions] == [
        "operation.requested",
        "operation.approved",
        "operation.started",
        "operation.finished",
    ]
    assert actions[0][1]["options"] == {"remove_legacy": True} and actions[0][1]["reason"] == "OPS-9"


def test_it_waits_for_every_approver_the_policy_asks_for_and_keeps_the_legacy_bucket(legacy, queue):
    aws, people_ = legacy["aws"], legacy["people"]
    ApprovalPolicy.objects.create(account=legacy["account"], kind="state-migrate", approvers_needed=2)
    preview = people_["olivia"].get(MIGRATE)  # the region defaults to the legacy bucket's
    assert preview.status_code == 200 and preview.context["region"] == "us-east-1"
    people_["olivia"].post(MIGRATE, {"region": "us-east-1", "plan_digest": preview.context["digest"]})
    op = Operation.objects.get()
    decide = reverse("operation_decide", args=[op.pk])

    assert people_["olivia"].post(decide, {"decision": "approve"}).status_code == 403  # not an approver
    people_["arthur"].post(decide, {"decision": "approve"})
    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL and not bucket_exists(aws, NEW)
    people_["april"].post(decide, {"decision": "approve"})
    work(queue)

    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, op.error
    assert {k: aws.get(A1, LEGACY, k) for k in keys(aws, LEGACY)} == OBJECTS  # kept as it was
    assert destination_bytes(aws) == OBJECTS


def test_it_lets_no_approver_approve_their_own_migrate(legacy, queue):
    arthur = legacy["people"]["arthur"]
    preview = arthur.get(MIGRATE)
    arthur.post(MIGRATE, {"region": "us-east-1", "plan_digest": preview.context["digest"]})
    op = Operation.objects.get()

    assert arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 403
    work(queue)

    op.refresh_from_db()
    assert op.status == OperationStatus.AWAITING_APPROVAL and not bucket_exists(legacy["aws"], NEW)


def test_it_refuses_a_migrate_while_the_legacy_bucket_holds_a_lock(legacy):
    aws, olivia = legacy["aws"], legacy["people"]["olivia"]
    aws.put(A1, LEGACY, "cdkd/App/us-east-1/lock.json", {"owner": "bob@ci:1", "expiresAt": 4102444800000})
    sync_account(legacy["account"])
    assert Lock.objects.filter(account=legacy["account"]).exists()

    page = olivia.get(MIGRATE)
    post = olivia.post(MIGRATE, {"region": "us-east-1"})
    rows = olivia.get(reverse("attention"), {"format": "json"}).json()["rows"]
    step = next(r["nextStep"] for r in rows if r["target"] == "bucket")

    assert page.status_code == 409 and b"holds a lock (cdkd/App/us-east-1/lock.json)" in page.content
    assert post.status_code == 409 and not Operation.objects.exists()
    assert step["allowed"] is False and "holds a lock" in step["reason"]
    assert not bucket_exists(aws, NEW)


def test_it_refuses_a_region_with_no_legacy_bucket_and_a_bad_region(legacy):
    olivia = legacy["people"]["olivia"]

    missing = olivia.get(MIGRATE, {"region": "eu-west-1"})
    bad = olivia.post(MIGRATE, {"region": "../x"})

    assert missing.status_code == 409
    assert f"no legacy state bucket cdkd-state-{A1}-eu-west-1".encode() in missing.content
    assert bad.status_code == 400 and b"is not an AWS region name" in bad.content
    assert not Operation.objects.exists()


def test_it_refuses_a_migrate_for_an_account_that_names_its_bucket(db, django_user_model):
    """From the mirror only (no S3 call): the account's resolved bucket source."""
    account = Account.objects.create(
        account_id=A1, name="prod", bucket="team-state", resolved_bucket="team-state", bucket_source="explicit"
    )
    olivia = people(account, django_user_model)["olivia"]

    response = olivia.get(MIGRATE)

    assert response.status_code == 409 and b"names its state bucket (team-state) itself" in response.content


@pytest.mark.parametrize(("persona", "status"), [("vera", 403), ("otto", 404)])
def test_it_keeps_viewers_and_outsiders_from_requesting_a_migrate(legacy, persona, status):
    client = legacy["people"][persona]

    assert client.get(MIGRATE).status_code == status
    assert client.post(MIGRATE, {"region": "us-east-1"}).status_code == status
    assert not Operation.objects.exists()
    assert not bucket_exists(legacy["aws"], NEW)


# --- events prune -------------------------------------------------------------------------------


def row(run_id: str) -> dict:
    return {"runId": run_id, "command": "deploy", "result": "SUCCEEDED", "eventCount": 2, "x_row_field": 1}


@pytest.fixture
def store(aws, django_user_model):
    bucket = NEW
    aws.make_bucket(A1, bucket)
    aws.put(A1, bucket, "cdkd/App/us-east-1/state.json", APP)
    for run_id in [*RECENT, *OLD]:
        key = f"{PREFIX}{run_id}.jsonl"
        aws.put(A1, bucket, key, b'{"eventType":"RUN_STARTED"}\n')  # a first flush...
        aws.put(A1, bucket, key, b'{"eventType":"RUN_STARTED"}\n{"eventType":"RUN_FINISHED"}\n')  # ...and the last
    index = {"indexVersion": 1, "stackName": "App", "region": "us-east-1", "x_future": "kept"}
    aws.put(A1, bucket, INDEX, {**index, "runs": [row(r) for r in [*RECENT, *OLD]], "lastModified": 1})
    account = Account.objects.create(
        account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin", bucket=bucket
    )
    sync_account(account)
    return {"aws": aws, "account": account, "people": people(account, django_user_model)}


PRUNE = reverse("operation_new", args=[A1, "us-east-1", "App", "events-prune"])


def stream_versions(aws) -> dict[str, list[str]]:
    listing = aws.s3(A1).list_object_versions(Bucket=NEW, Prefix=PREFIX)
    out: dict[str, list[str]] = {}
    for v in listing.get("Versions", []):
        out.setdefault(v["Key"], []).append("body")
    for m in listing.get("DeleteMarkers", []):
        out.setdefault(m["Key"], []).append("marker")
    return out


def test_it_links_the_prune_from_the_events_tab_for_operators_only(store):
    events = reverse("stack_events", args=[A1, "us-east-1", "App"])

    assert f'href="{PRUNE}"' in store["people"]["olivia"].get(events).content.decode()
    assert PRUNE not in store["people"]["vera"].get(events).content.decode()


def test_it_requests_approves_and_prunes_runs_older_than_the_cutoff_beyond_the_newest(store, queue):
    aws, olivia, arthur = store["aws"], store["people"]["olivia"], store["people"]["arthur"]
    record_before = aws.get(A1, NEW, "cdkd/App/us-east-1/state.json")

    preview = olivia.get(PRUNE, {"keep": 3, "older_than_days": 30})
    assert preview.status_code == 200, preview.content[:2000]
    table = preview.context["prune_table"]
    assert [r["run_id"] for r in table["deleted"]] == OLD[1:] and table["kept"] == [*RECENT, OLD[0]]
    digest = preview.context["digest"]
    response = olivia.post(PRUNE, {"keep": 3, "older_than_days": 30, "plan_digest": digest, "reason": "tidy"})
    assert response.status_code == 302
    op = Operation.objects.get()
    assert (op.kind, op.stack_name, op.region) == ("events-prune", "App", "us-east-1")
    assert op.params == {"keep": 3, "older_than_days": 30} and op.status == OperationStatus.AWAITING_APPROVAL
    page = arthur.get(reverse("operation", args=[op.pk])).content.decode()
    assert 'id="prune-deleted"' in page and OLD[2] in page and 'id="prune-kept"' in page

    arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"})
    work(queue)

    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    found = stream_versions(aws)
    for run_id in [*RECENT, OLD[0]]:
        assert found[f"{PREFIX}{run_id}.jsonl"] == ["body", "body"]  # untouched, history and all
    for run_id in OLD[1:]:
        assert found[f"{PREFIX}{run_id}.jsonl"] == ["marker"]  # deleted with its earlier versions
    index = json.loads(aws.get(A1, NEW, INDEX))
    assert [r["runId"] for r in index["runs"]] == [*RECENT, OLD[0]]
    assert index["runs"][0] == row(RECENT[0]) and index["x_future"] == "kept"  # rows and fields verbatim
    assert aws.get(A1, NEW, "cdkd/App/us-east-1/state.json") == record_before  # the record is not touched
    audited = AuditEvent.objects.get(operation=op, action="operation.requested")
    assert audited.details["options"] == {"keep": 3, "older_than_days": 30}


def test_it_refuses_bad_prune_options_with_the_field_named(store):
    response = store["people"]["olivia"].get(PRUNE, {"keep": -1, "older_than_days": 0})

    assert response.status_code == 400
    assert b"Keep the newest runs must be at least 0." in response.content
    assert b"Older than (days) must be at least 1." in response.content


@pytest.mark.parametrize(("persona", "status"), [("vera", 403), ("otto", 404)])
def test_it_keeps_viewers_and_outsiders_from_requesting_a_prune(store, persona, status):
    client = store["people"][persona]

    assert client.get(PRUNE, {"keep": 0}).status_code == status
    assert client.post(PRUNE, {"keep": 0}).status_code == status
    assert not Operation.objects.exists()
    assert len(json.loads(store["aws"].get(A1, NEW, INDEX))["runs"]) == 5


def test_it_refuses_to_prune_a_legacy_record_which_has_no_event_store(aws, django_user_model):
    aws.make_bucket(A1, NEW)
    aws.put(A1, NEW, "cdkd/Old/state.json", V1)
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    sync_account(account)
    olivia = people(account, django_user_model)["olivia"]
    slug = Stack.objects.get(stack_name="Old").region_slug
    url = reverse("operation_new", args=[A1, slug, "Old", "events-prune"])

    response = olivia.get(url)

    assert response.status_code == 409 and b"has no event store to prune" in response.content
    assert olivia.post(url, {"keep": 0}).status_code == 409 and not Operation.objects.exists()
