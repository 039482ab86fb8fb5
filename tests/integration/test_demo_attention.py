"""The demo shows every attention-board row kind and drift working: the demo world, the
attention stacks `demo.attention.plant_attention` writes (queues made in moto through the
engine's SQS provider, changed and deleted out of band with boto3), a sync, then
`check_attention` (a real drift check through stacks.drift, a real secret scan), and the
board an admin sees (stacks.attention.build). No stub: moto serves SQS and S3."""

from __future__ import annotations

import json

import pytest

from demo import DEMO_ACCOUNTS, LEAK_ACCOUNT, LEAK_STACK, PRODUCTION, build_demo_world, cdkd_json, plant_leaked_secrets
from demo.attention import DRIFT_STACK, JOURNAL_STACK, LOCK_OWNER, LOCK_STACK, REGION, check_attention, plant_attention
from stacks import attentionrows as rows
from stacks.attention import build
from stacks.attentionrows import Context
from stacks.drift import latest_for_stack
from stacks.models import Account, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(aws, queue, django_user_model):
    world = build_demo_world(aws.account_session, big_stack_resources=20, resources=False)
    world.count_planted(plant_leaked_secrets(aws.account_session(LEAK_ACCOUNT)))
    plant_attention(world, aws.account_session)
    summaries = {a.account_id: a for a in world.accounts}
    for spec in DEMO_ACCOUNTS:
        account = Account.objects.create(
            account_id=spec.account_id,
            name=spec.name,
            role_arn=spec.role_arn,
            external_id=spec.external_id,
            prefix=spec.prefix,
            bucket=spec.bucket if spec.explicit_bucket else "",
        )
        result = sync_account(account)
        assert not result.errors, result.errors
        # The summary the demo prints stays true with the attention stacks counted in.
        assert result.listed == summaries[spec.account_id].state_records, spec.name
    admin = django_user_model.objects.create_user("admin", password="pw", is_superuser=True)
    lines = check_attention("admin")
    return world, admin, lines


def _rows(board, kind: str, stack: str | None = None) -> list[rows.Row]:
    return [r for r in board.rows if r.kind == kind and (stack is None or r.stack_name == stack)]


def test_it_shows_every_row_kind_it_seeds_with_the_next_step(demo, aws):
    world, admin, lines = demo
    board = build(Context.for_user(admin))

    (stale,) = _rows(board, rows.STALE_LOCK, LOCK_STACK)
    assert stale.problem.startswith(f"Locked by {LOCK_OWNER} for 3 hours")
    assert (stale.step.kind, stale.step.allowed) == ("force-unlock", True)
    assert stale.evidence[0] == "Verdict: likely abandoned", stale.evidence
    assert any("has finished (SUCCEEDED), yet the lock is still there" in e for e in stale.evidence)

    dead = _rows(board, rows.DEAD_LOCK, "Prod-SearchApi")  # the showcase's expired lock, reused
    assert dead and dead[0].step.kind == "force-unlock" and dead[0].step.allowed

    (journal,) = _rows(board, rows.JOURNAL, JOURNAL_STACK)
    assert journal.step.kind == "rollback"
    assert journal.step.command.startswith(f"python manage.py cdkd rollback {JOURNAL_STACK} --account 111111111111")
    assert journal.evidence == [f"journal: cdkd/{JOURNAL_STACK}/{REGION}/rollback-journal.json"]

    (failed,) = _rows(board, rows.FAILED_RUN, JOURNAL_STACK)
    assert failed.problem == "cdkd deploy failed"
    assert (failed.step.label, failed.step.kind, failed.step.allowed) == ("Plan a deploy", "deploy", True)
    run_id = world.interesting["failed_run"].key.rsplit("/", 1)[1].removesuffix(".jsonl")
    assert failed.evidence[0].startswith(f"cdkd deploy run {run_id} ended FAILED")

    (drift,) = _rows(board, rows.DRIFT, DRIFT_STACK)
    assert drift.problem == "Drift: 2 resources differ from the record"
    assert drift.evidence[0] == "1 modified, 1 deleted"
    assert (drift.step.kind, drift.step.allowed) == ("drift-accept", True)

    damaged = [r for r in _rows(board, rows.RECORD) if r.problem == "Damaged record"]
    assert damaged and all(r.step.label == "Restore an earlier version" for r in damaged)
    old = [r for r in _rows(board, rows.RECORD) if r.problem.startswith("Old schema version")]
    assert old and all(r.step.label == "State migrate" and r.step.command.startswith("cdkd deploy ") for r in old)

    (secrets,) = _rows(board, rows.SECRETS, LEAK_STACK)
    assert secrets.step.kind == "scrub" and secrets.step.allowed
    assert secrets.problem.endswith("secret findings")
    assert lines[1].startswith(f"secrets    scanned {LEAK_STACK}: ") and not lines[1].endswith(": 0 open findings")
    # No secret value reaches the lines the demo prints or the row.
    assert "Paym3nts" not in json.dumps([lines, secrets.as_json()])


def test_it_drifts_one_queue_modified_and_one_deleted_for_real(demo, aws):
    world, _admin, lines = demo
    stack = Stack.objects.get(account__account_id=PRODUCTION.account_id, stack_name=DRIFT_STACK, region=REGION)
    check = latest_for_stack(stack)
    assert check is not None and check.trigger == "cli" and not check.error
    assert check.counts == {"IN_SYNC": 1, "MODIFIED": 1, "DELETED": 1, "NOT_CHECKED": 0}
    statuses = {r["logicalId"]: r for r in check.resources}
    record = json.loads(aws.get(PRODUCTION.account_id, PRODUCTION.bucket, world.interesting["drift"].key))
    assert set(statuses) == set(record["resources"])
    urls = [row["physicalId"] for row in record["resources"].values()]
    assert all(u.startswith("https://sqs.us-east-1.amazonaws.com/111111111111/Prod-WebhookQueues-") for u in urls)
    by_status = {r["status"]: r for r in check.resources}
    assert by_status["MODIFIED"]["differences"] == [{"path": "VisibilityTimeout", "expected": 60, "actual": 5}]
    assert "WebhookRetry" in by_status["MODIFIED"]["logicalId"]
    assert "WebhookDeadLetter" in by_status["DELETED"]["logicalId"]
    assert lines[0].startswith(f"drift      {DRIFT_STACK}: 1 modified, 1 deleted, 1 in sync")


def test_it_stores_cdkd_bytes_for_the_lock_and_the_journal(demo, aws):
    world, _admin, _lines = demo

    def stored(name: str) -> tuple[bytes, dict]:
        body = aws.get(PRODUCTION.account_id, PRODUCTION.bucket, world.interesting[name].key)
        return body, json.loads(body)

    body, lock = stored("stale_lock")
    assert body == cdkd_json(lock) and list(lock) == ["owner", "timestamp", "expiresAt", "operation"]
    assert lock["owner"] == LOCK_OWNER and lock["timestamp"] < lock["expiresAt"]

    body, journal = stored("journal")
    assert body == cdkd_json(journal)
    assert list(journal) == ["journalVersion", "stackName", "region", "segments"]
    (segment,) = journal["segments"]
    assert list(segment) == [
        "runId", "timestamp", "reason", "initialDeploy", "cdkdVersion", "operations", "failedOperations",
    ]  # fmt: skip
    assert segment["reason"] == "no-rollback-failure"
    (created,) = segment["operations"]
    record = json.loads(aws.get(PRODUCTION.account_id, PRODUCTION.bucket, f"cdkd/{JOURNAL_STACK}/{REGION}/state.json"))
    # The journalled create is in the record and in AWS: a rollback has something to undo.
    assert record["resources"][created["logicalId"]]["physicalId"] == created["physicalId"]
    sqs = aws.account_session(PRODUCTION.account_id).client("sqs", region_name=REGION)
    assert sqs.get_queue_url(QueueName=created["physicalId"].rsplit("/", 1)[1])["QueueUrl"]
    assert segment["failedOperations"][0]["attemptedProperties"]["MessageRetentionPeriod"] == 2000000


def test_it_rolls_the_journal_back_for_real_through_cdkd_rollback(demo, aws):
    """The board's step for the journal row, run: the queue the failed deploy created is
    deleted from AWS, its row dropped from the record, the journal gone."""
    from django.core.management import call_command

    world, _admin, _lines = demo
    journal = json.loads(aws.get(PRODUCTION.account_id, PRODUCTION.bucket, world.interesting["journal"].key))
    created = journal["segments"][0]["operations"][0]
    sqs = aws.account_session(PRODUCTION.account_id).client("sqs", region_name=REGION)
    name = created["physicalId"].rsplit("/", 1)[1]

    args = ["--account", PRODUCTION.account_id, "--stack-region", REGION, "--yes"]
    call_command("cdkd", "rollback", JOURNAL_STACK, *args)

    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=name)
    record = json.loads(aws.get(PRODUCTION.account_id, PRODUCTION.bucket, f"cdkd/{JOURNAL_STACK}/{REGION}/state.json"))
    assert created["logicalId"] not in record["resources"] and len(record["resources"]) == 1
    assert aws.etag(PRODUCTION.account_id, PRODUCTION.bucket, world.interesting["journal"].key) is None


def test_it_never_offers_a_destroy_of_an_attention_stack_that_would_fail(demo, aws):
    """A destroy of each attention stack is refused before it deletes anything (the live
    lock: the run cannot take it) or ends Succeeded, never partway."""
    from engine.backend import StateBucket
    from engine.destroy import Destroy
    from engine.keys import KeyLayout
    from engine.locks import LockContention
    from engine.operations import Context as OpContext
    from engine.operations import OperationRefused, Plan

    world, _admin, _lines = demo
    assert not {r.stack for r in world.destroyable} & {LOCK_STACK, JOURNAL_STACK, DRIFT_STACK}
    bucket = StateBucket.open(aws.access(PRODUCTION.account_id), actor="arthur", bucket=PRODUCTION.bucket)
    outcomes = {}
    for stack in (LOCK_STACK, JOURNAL_STACK, DRIFT_STACK):
        ctx = OpContext(
            bucket=bucket, layout=KeyLayout("cdkd"), stack=stack, region=REGION, params={}, operation_id=f"op-{stack}",
            person="arthur", log=lambda level, message: None, progress=lambda *a, **k: None,
        )  # fmt: skip
        try:
            plan = Destroy().plan(ctx)
        except OperationRefused as exc:
            outcomes[stack] = f"refused: {exc}"
            continue
        try:
            outcomes[stack] = Destroy().execute(ctx, Plan.from_json(plan.as_json())).status
        except LockContention as exc:
            outcomes[stack] = f"refused: {exc}"
    assert outcomes[LOCK_STACK].startswith("refused: Could not acquire the lock"), outcomes
    sqs = aws.account_session(PRODUCTION.account_id).client("sqs", region_name=REGION)
    assert [u for u in sqs.list_queues(QueueNamePrefix=LOCK_STACK).get("QueueUrls", [])]  # nothing deleted
    assert all(o == "succeeded" or o.startswith("refused") for o in outcomes.values()), outcomes
