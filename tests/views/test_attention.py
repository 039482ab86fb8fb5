"""The attention board: each row kind seeded in the mirror and shown with its next step,
who sees what, a fixed number of SQL queries whatever the count, the exports and the CLI."""

from __future__ import annotations

import csv
import io
import json
import sys
import types
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from stacks import attention
from stacks.attentionrows import Context, has_journal_fields
from stacks.models import (
    DeploymentEvent,
    DeploymentRun,
    Membership,
    Operation,
    Role,
    SecretFinding,
    now_ms,
)
from tests.support import attention_seed
from tests.views.conftest import make_account, make_lock, make_stack, make_user, record, resource_row

pytestmark = pytest.mark.django_db

HOUR = 3_600_000


def run_at(hours_ago: float) -> datetime:
    return timezone.now() - timedelta(hours=hours_ago)


def make_run(account, stack_name, *, hours_ago, command="deploy", result="FAILED", event=None, **extra):
    started = run_at(hours_ago)
    run = DeploymentRun.objects.create(
        account=account,
        stack_name=stack_name,
        region="us-east-1",
        run_id=started.strftime("%Y%m%dT%H%M%S%f")[:18] + "Z-1a2b3c4d",
        command=command,
        run_at=started,
        started_at=started,
        result=result,
        synced_at=timezone.now(),
        **extra,
    )
    if event:
        DeploymentEvent.objects.create(run=run, seq=0, event_type=event, timestamp=started, raw={})
    return run


def make_op(account, stack_name, *, status="failed", kind="deploy", hours_ago=1, **extra):
    return Operation.objects.create(
        kind=kind,
        account=account,
        stack_name=stack_name,
        region="us-east-1",
        requester_name="olivia",
        plan={},
        plan_digest="sha256:x",
        status=status,
        finished_at=run_at(hours_ago),
        **extra,
    )


def world(prod, dev):
    """One stack per row kind on prod, one stale lock on dev, and a healthy stack."""
    make_stack(prod, "healthy")
    held = make_stack(prod, "held")
    lock = make_lock(held, owner="carol@ci:77")
    lock.timestamp_ms = now_ms() - 2 * HOUR
    lock.save()
    make_run(prod, "held", hours_ago=2, result="UNKNOWN", event="RESOURCE_STARTED")
    make_lock(make_stack(prod, "expired"), expires_in_ms=-60_000)
    make_lock(make_stack(prod, "garbled"), readable=False, error="not JSON")
    make_op(prod, make_stack(prod, "half-deployed").stack_name, status="partial", error="Queue failed")
    make_stack(prod, "gone-wrong")
    make_run(prod, "gone-wrong", hours_ago=3, command="destroy")
    make_stack(prod, "cli-deploy")
    make_run(prod, "cli-deploy", hours_ago=3, command="deploy")
    make_stack(prod, "broken", defects=[{"code": "resources-not-object", "path": "resources"}])
    make_stack(prod, "ancient", data=record("ancient", version=5))
    make_stack(prod, "old-key", None, legacy=True, data=record("old-key", None, version=1))
    leaky = make_stack(prod, "leaky")
    for version in (None, "v1"):
        SecretFinding.objects.create(
            account=prod, stack_name=leaky.stack_name, region="us-east-1", key=leaky.key, version_id=version,
            path=["resources", "Db", "properties", "Password"], source="secretsmanager",
        )  # fmt: skip
    dev_held = make_stack(dev, "dev-held")
    dev_lock = make_lock(dev_held)
    dev_lock.timestamp_ms = now_ms() - 5 * HOUR
    dev_lock.save()


@pytest.fixture
def oscar(prod, dev):
    """An operator on prod, a viewer on dev."""
    user = make_user("oscar")
    Membership.objects.create(user=user, account=prod, role=Role.OPERATOR)
    Membership.objects.create(user=user, account=dev, role=Role.VIEWER)
    return user


def board_json(client, **query):
    response = client.get(reverse("attention"), {"format": "json", **query})
    assert response.status_code == 200
    return json.loads(b"".join(response.streaming_content) if response.streaming else response.content)


def by_stack(data):
    return {(r["account"], r["stack"], r["kind"]): r for r in data["rows"]}


def test_it_shows_each_row_kind_with_its_next_step(client, prod, dev, oscar):
    world(prod, dev)
    client.force_login(oscar)
    response = client.get(reverse("attention"))
    assert response.status_code == 200
    page = response.content.decode()
    rows = by_stack(board_json(client))
    p = prod.account_id

    held = rows[(p, "held", "stale-lock")]
    assert held["nextStep"]["url"] == reverse("operation_new", args=[p, "us-east-1", "held", "force-unlock"])
    assert held["nextStep"]["allowed"] and held["nextStep"]["approval"] == "needs 1 approval"
    assert held["evidence"][0].startswith("Verdict: likely ")
    assert any("RESOURCE_STARTED" in line for line in held["evidence"])  # the holder's newest event
    assert "carol@ci:77" in held["problem"]
    assert (p, "healthy", "stale-lock") not in rows and not any(k[1] == "healthy" for k in rows)

    assert rows[(p, "expired", "dead-lock")]["nextStep"]["operation"] == "force-unlock"
    garbled = rows[(p, "garbled", "dead-lock")]
    assert garbled["problem"] == "lock.json cannot be read" and "not JSON" in garbled["evidence"]

    half = rows[(p, "half-deployed", "failed-run")]
    op = Operation.objects.get(stack_name="half-deployed")
    assert half["nextStep"] == half["nextStep"] | {"label": "Run again", "method": "post", "allowed": True}
    assert half["nextStep"]["url"] == reverse("operation_retry", args=[op.pk])
    assert "Queue failed" in half["evidence"]
    destroy = rows[(p, "gone-wrong", "failed-run")]["nextStep"]
    assert destroy["url"] == reverse("operation_new", args=[p, "us-east-1", "gone-wrong", "destroy"])
    deploy = rows[(p, "cli-deploy", "failed-run")]["nextStep"]
    assert deploy["label"] == "Plan a deploy"
    assert deploy["url"] == reverse("stack_plan_new", args=[p, "us-east-1", "cli-deploy"])

    assert rows[(p, "broken", "record")]["nextStep"]["url"] == reverse("stack_history", args=[p, "us-east-1", "broken"])
    assert rows[(p, "ancient", "record")]["problem"] == "Old schema version 5"
    assert rows[(p, "old-key", "record")]["problem"].startswith("Legacy record")
    assert rows[(p, "old-key", "record")]["nextStep"]["label"] == "State migrate"

    leaky = rows[(p, "leaky", "secrets")]
    assert leaky["problem"] == "2 secret findings"
    assert leaky["evidence"] == ["1 in the current record", "1 in older versions"]
    assert leaky["nextStep"]["url"] == reverse("operation_new", args=[p, "us-east-1", "leaky", "scrub"])

    # On dev oscar is a viewer: the row is shown, its button is not offered.
    dev_row = rows[(dev.account_id, "dev-held", "stale-lock")]
    assert not dev_row["nextStep"]["allowed"] and "operator role" in dev_row["nextStep"]["reason"]

    # The page: the buttons are links into the request pages, the disabled one says why.
    assert f'href="{held["nextStep"]["url"]}"' in page
    assert f'action="{half["nextStep"]["url"]}"' in page
    assert "You need the operator role on dev" in page
    assert "Lock held too long: 2" in page and 'id="attention-accounts"' in page


def test_it_orders_counts_and_filters(client, prod, dev, oscar):
    world(prod, dev)
    client.force_login(oscar)
    data = board_json(client)
    assert data["counts"]["byAccount"] == {prod.account_id: 10, dev.account_id: 1}
    assert data["counts"]["byKind"] == {
        "stale-lock": 2, "dead-lock": 2, "journal": 0, "failed-run": 3, "drift": 0,
        "record": 3, "secrets": 1, "posture": 0,
    }  # fmt: skip
    assert data["rows"][0]["kind"] == "stale-lock" and data["rows"][0]["stack"] == "dev-held"  # the oldest first
    only = board_json(client, account=dev.account_id)
    assert [r["stack"] for r in only["rows"]] == ["dev-held"]
    assert only["counts"]["total"] == 11  # the counts stay those of every visible row
    kind = board_json(client, kind="record")
    assert {r["stack"] for r in kind["rows"]} == {"broken", "ancient", "old-key"}
    # htmx asks for the board partial only.
    response = client.get(reverse("attention"), {"kind": "secrets"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="attention-board"') and "leaky" in body and "broken" not in body


def test_it_never_shows_another_accounts_rows(client, prod, dev, bob, charlie):
    world(prod, dev)
    client.force_login(bob)  # a viewer on dev only
    data = board_json(client)
    assert {r["account"] for r in data["rows"]} == {dev.account_id}
    assert list(data["counts"]["byAccount"]) == [dev.account_id]
    page = client.get(reverse("attention")).content.decode()
    assert prod.account_id not in page and "dev-held" in page
    assert not [name for name in ("garbled", "leaky", "half-deployed", "gone-wrong", "ancient") if name in page]
    # Naming prod in the filter is a bad request (the message repeats only what was typed).
    response = client.get(reverse("attention"), {"account": prod.account_id, "format": "json"})
    assert response.status_code == 400 and b"garbled" not in response.content and b"prod" not in response.content
    csv_text = b"".join(client.get(reverse("attention"), {"format": "csv"}).streaming_content).decode()
    assert prod.account_id not in csv_text and "dev-held" in csv_text
    client.force_login(charlie)  # no role anywhere
    assert board_json(client)["rows"] == []


def test_it_forgets_a_failure_a_later_run_settled(client, prod, dev, root):
    make_stack(prod, "fixed")
    make_run(prod, "fixed", hours_ago=5, command="deploy")
    make_run(prod, "fixed", hours_ago=1, command="deploy", result="SUCCEEDED")
    make_stack(prod, "redone")
    make_op(prod, "redone", status="failed", hours_ago=5)
    make_run(prod, "redone", hours_ago=1, command="deploy", result="SUCCEEDED")  # cdkd, by hand, since
    make_stack(prod, "retried")
    failed = make_op(prod, "retried", status="failed", hours_ago=5)
    make_op(prod, "retried", status="succeeded", hours_ago=1, rerun_of=failed)
    client.force_login(root)
    assert board_json(client)["rows"] == []


def test_it_exports_csv_with_formulas_neutralised(client, prod, dev, root):
    make_lock(make_stack(prod, "=HYPERLINK(1)"), expires_in_ms=-1)
    client.force_login(root)
    response = client.get(reverse("attention"), {"format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == 1
    assert rows[0]["stack"] == "'=HYPERLINK(1)" and rows[0]["kind"] == "dead-lock"
    assert rows[0]["nextStep"] == "Force-unlock" and rows[0]["allowed"] == "True"


def test_it_makes_a_fixed_number_of_queries_for_5_and_500_stacks(client, root):
    client.force_login(root)
    counts = []
    for n in (5, 500):
        from stacks.models import Account

        Account.objects.all().delete()
        attention_seed.seed(3, n)
        with CaptureQueriesContext(connection) as captured:
            response = client.get(reverse("attention"))
        assert response.status_code == 200
        counts.append(len(captured))
    small, large = counts
    assert small == large, f"{small} queries for 5 stacks, {large} for 500"
    assert response.content.count(b'class="attention-row"') == 50  # one page (CDKD_PAGE_SIZE)


def test_it_counts_what_the_seeded_world_holds_at_scale(root):
    attention_seed.seed(30, 300)
    board = attention.build(Context.for_user(root))
    per_kind = {k: n for k, _label, n in board.by_kind}
    # 300 stacks, the pattern of 10 handed out in turn: 30 of each problem.
    assert per_kind == {
        "stale-lock": 30, "dead-lock": 30, "journal": 0, "failed-run": 60, "drift": 0,
        "record": 30, "secrets": 30, "posture": 0,
    }  # fmt: skip


@pytest.mark.skipif(not has_journal_fields(), reason="Stack.journal_modified is not on this branch's models yet")
def test_it_shows_a_leftover_journal_with_rollback(client, prod, dev, root):
    stack = make_stack(prod, "half-rolled")
    stack.journal_key = "cdkd/half-rolled/us-east-1/rollback-journal.json"
    stack.journal_modified = datetime(2024, 3, 19, 9, 0, tzinfo=UTC)
    stack.save()
    client.force_login(root)
    row = by_stack(board_json(client))[(prod.account_id, "half-rolled", "journal")]
    assert row["since"] == "2024-03-19T09:00:00+00:00"
    assert row["nextStep"]["command"].startswith("python manage.py cdkd rollback half-rolled")


def test_it_shows_drift_with_accept_or_revert(client, prod, dev, root, bob):
    from stacks.models import DriftCheck

    drifted = make_stack(prod, "drifted", data=record("drifted", resources={"Q": resource_row()}))
    calm = make_stack(prod, "calm")
    when = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    # an older check that found drift, superseded by the latest one, which found none: no row
    DriftCheck.objects.create(
        account=prod,
        stack=calm,
        stack_name="calm",
        region="us-east-1",
        checked_at=when,
        drifted=1,
        counts={"MODIFIED": 1},
        latest=False,
    )
    DriftCheck.objects.create(
        account=prod,
        stack=calm,
        stack_name="calm",
        region="us-east-1",
        checked_at=when,
        drifted=0,
        counts={"IN_SYNC": 3},
        latest=True,
    )
    DriftCheck.objects.create(
        account=prod,
        stack=drifted,
        stack_name="drifted",
        region="us-east-1",
        checked_at=when,
        drifted=2,
        counts={"MODIFIED": 1, "DELETED": 1, "IN_SYNC": 4},
        latest=True,
    )
    client.force_login(root)
    rows = by_stack(board_json(client))
    row = rows[(prod.account_id, "drifted", "drift")]
    assert (prod.account_id, "calm", "drift") not in rows
    assert row["problem"] == "Drift: 2 resources differ from the record"
    assert row["since"] == "2026-11-30T08:00:00+00:00"
    assert row["evidence"][0] == "1 modified, 1 deleted"
    assert row["nextStep"]["label"] == "Accept drift" and row["nextStep"]["allowed"]
    client.force_login(bob)  # dev's viewer: prod's drift is not theirs to see
    assert not [r for r in board_json(client)["rows"] if r["kind"] == "drift"]


def test_it_shows_posture_problems_when_the_posture_module_is_there(client, prod, dev, bob, monkeypatch):
    """`stacks.posture` is built by another session: a stand-in module with its documented
    entry point (`posture_problems(account_ids)`) is put in its place here. It answers for
    both accounts; bob must see dev's only."""
    seen = {}

    def posture_problems(account_ids):
        seen["ids"] = account_ids
        return [
            {"account_id": prod.account_id, "check": "Versioning", "found": "suspended", "change": "Enable it"},
            {"account_id": dev.account_id, "check": "Public access block", "found": "off", "change": "Block it"},
        ]

    monkeypatch.setitem(sys.modules, "stacks.posture", types.SimpleNamespace(posture_problems=posture_problems))
    client.force_login(bob)
    rows = board_json(client)["rows"]
    assert seen["ids"] == [dev.account_id]
    assert [(r["account"], r["kind"], r["problem"], r["target"]) for r in rows] == [
        (dev.account_id, "posture", "Public access block: off", "bucket")
    ]
    assert rows[0]["nextStep"]["label"] == "Block it"


def test_it_shows_a_legacy_bucket_as_one_bucket_row(client, db, root):
    legacy = make_account(
        "333333333333", "old", bucket_source="default-legacy", resolved_bucket="cdkd-state-333333333333-us-east-1"
    )
    make_stack(legacy, "app")
    client.force_login(root)
    rows = board_json(client)["rows"]
    assert [(r["kind"], r["target"], r["stack"]) for r in rows] == [("record", "bucket", "")]
    assert rows[0]["nextStep"]["command"] == (
        "python manage.py cdkd state migrate --account 333333333333 --region us-east-1 --dry-run"
    )


def test_it_prints_the_board_from_the_cli_as_json(prod, dev, capsys):
    world(prod, dev)
    call_command("cdkd", "attention", "--json")
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"counts", "rows"}
    assert set(data["counts"]) == {"total", "byAccount", "byKind"} and data["counts"]["total"] == 11
    row = data["rows"][0]
    assert set(row) == {
        "kind", "problem", "account", "accountName", "target", "stack", "region", "legacy", "since", "evidence",
        "nextStep",
    }  # fmt: skip
    assert set(row["nextStep"]) == {
        "label", "operation", "url", "method", "command", "allowed", "reason", "approval", "advice",
    }  # fmt: skip
    held = next(r for r in data["rows"] if r["stack"] == "held")
    assert held["nextStep"]["command"] == (
        f"python manage.py cdkd force-unlock held --account {prod.account_id} --stack-region us-east-1 --yes"
    )
    call_command("cdkd", "attention", "--account", dev.account_id, "--json")
    assert {r["account"] for r in json.loads(capsys.readouterr().out)["rows"]} == {dev.account_id}
    call_command("cdkd", "attention", "--account", "dev")
    text = capsys.readouterr().out
    assert text.startswith("1 problem(s): Lock held too long: 1") and "next: python manage.py cdkd force-unlock" in text
    with pytest.raises(CommandError, match="No account '999999999999'"):
        call_command("cdkd", "attention", "--account", "999999999999")
