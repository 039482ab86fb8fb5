"""Secret scans and the scrub from the web, against moto (S3, Secrets Manager, SSM) with real
Postgres and Redis: a scan requested, queued with its id only, run by an in-process worker,
its findings stored without values; the scope rules; the scrub requested on its
confirmation page, approved, run by the worker, and the stack scanned again."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from rq import SimpleWorker

from cdkd_site.queues import get_queue
from stacks import scans
from stacks.models import AuditEvent, Operation, OperationStatus, ScanRun, SecretFinding, SyncStatus
from stacks.sync import sync_account
from tests.secrets.world import (
    A1,
    BUCKET1,
    FAR,
    INDEX,
    JOURNAL,
    PW,
    REGION,
    SECRET_VALUES,
    STATE,
    accounts,
    people,
    plant,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queues():
    default, sync = get_queue("default"), get_queue("sync")
    default.connection.flushdb()
    yield default, sync
    default.connection.flushdb()


def work(queues) -> None:
    default, sync = queues
    SimpleWorker([default, sync], connection=default.connection).work(burst=True)


@pytest.fixture
def world(aws, queues):
    planted = plant(aws)
    prod, dev = accounts()
    for account in (prod, dev):
        sync_account(account)
    return {**planted, "prod": prod, "dev": dev, "people": people(prod, dev)}


def assert_no_value(*things) -> None:
    text = json.dumps(things, default=str)
    for value in SECRET_VALUES:
        assert value not in text, f"a secret value leaked: {value[:4]}..."


def finding_rows() -> list[dict]:
    return list(SecretFinding.objects.values())


def test_it_scans_every_account_in_a_worker_and_stores_findings_without_values(world, queues):
    olivia = world["people"]["olivia"]
    run = scans.request_scan(olivia)
    assert run.account_ids == sorted([world["prod"].pk, world["dev"].pk])
    job = queues[1].fetch_job(f"scan-{run.pk}")
    assert job.func_name == "stacks.jobs.run_scan" and job.args == (run.pk,) and job.kwargs == {}
    requested = AuditEvent.objects.filter(action="secrets.scan-requested", actor="olivia")
    assert sorted(requested.values_list("account_ref", flat=True)) == [A1, world["dev"].account_id]

    work(queues)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, run.result
    assert run.done == run.total == 2
    assert run.objects_scanned > 0 and run.secrets >= 5
    found = {
        (f.account.account_id, f.key, f.version_id is None, tuple(f.path), f.key_kind)
        for f in SecretFinding.objects.select_related("account")
    }
    older = world["older"]
    assert (A1, STATE, True, ("resources", "Db", "properties", "MasterUserPassword"), "record") in found
    assert (A1, STATE, True, ("resources", "Db", "observedProperties", "MasterUserPassword"), "record") in found
    assert (A1, STATE, True, ("resources", "Fn", "attributes", "Token"), "record") in found
    assert (A1, STATE, True, ("outputs", "ConnString"), "record") in found
    assert (A1, STATE, True, ("orphans", 0, "state", "properties", "MasterUserPassword"), "record") in found
    assert (A1, STATE, False, ("outputs", "Old"), "record") in found
    assert (A1, INDEX, True, ("exports", "DbPassword", "value"), "exports-index") in found
    assert (A1, INDEX, False, ("exports", "DbPassword", "value"), "exports-index") in found
    assert any(k == JOURNAL and not cur and kind == "journal" for _, k, cur, _, kind in found)
    assert (world["dev"].account_id, FAR, True, ("outputs", "S"), "record") in found
    assert SecretFinding.objects.filter(version_id=older[STATE]).exists()
    embedded = SecretFinding.objects.get(key=STATE, version_id=None, path=["outputs", "ConnString"])
    assert not embedded.whole and embedded.source == "SSM SecureString parameter /prod/api-key"
    assert_no_value(finding_rows(), list(ScanRun.objects.values()))


def test_it_runs_a_claimed_scan_once(world, queues):
    run = scans.request_scan(world["people"]["olivia"], world["prod"])
    work(queues)
    first = set(SecretFinding.objects.values_list("pk", flat=True))
    assert first
    again = scans.execute_scan_run(run.pk)
    assert again.status == SyncStatus.SUCCEEDED
    assert set(SecretFinding.objects.values_list("pk", flat=True)) == first


def test_it_needs_an_operator_to_scan(world):
    vera, otto = world["people"]["vera"], world["people"]["otto"]
    with pytest.raises(PermissionDenied):
        scans.request_scan(vera, world["prod"])
    with pytest.raises(PermissionDenied):
        scans.request_scan(vera)
    with pytest.raises(PermissionDenied):
        scans.request_scan(otto, world["prod"])
    assert not ScanRun.objects.exists()


def test_a_stack_scan_replaces_that_stacks_findings_and_a_whole_scan_the_accounts(world, queues):
    prod = world["prod"]
    olivia = world["people"]["olivia"]
    stale = {"account": prod, "region": REGION, "key": "k", "path": ["x"], "source": "stale"}
    gone_stack = SecretFinding.objects.create(stack_name="Gone", **stale)
    app_stale = SecretFinding.objects.create(stack_name="App", **stale)

    scans.request_scan(olivia, prod, ["App"], region=REGION)
    work(queues)
    assert not SecretFinding.objects.filter(pk=app_stale.pk).exists()
    assert SecretFinding.objects.filter(pk=gone_stack.pk).exists()  # another stack: untouched
    assert set(SecretFinding.objects.values_list("stack_name", flat=True)) == {"App", "Gone"}
    assert not SecretFinding.objects.filter(account=world["dev"]).exists()

    scans.request_scan(olivia, prod)
    work(queues)
    assert not SecretFinding.objects.filter(pk=gone_stack.pk).exists()
    assert SecretFinding.objects.filter(account=prod, stack_name="App").exists()


def test_it_scrubs_through_the_web_with_approval_and_scans_the_stack_again(aws, world, queues):
    prod = world["prod"]
    olivia, arthur = world["people"]["olivia"], world["people"]["arthur"]
    scans.request_scan(olivia, prod)
    work(queues)
    assert SecretFinding.objects.filter(account=prod, stack_name="App", version_id__isnull=True).exists()

    requester, approver = Client(), Client()
    requester.force_login(olivia)
    approver.force_login(arthur)
    url = reverse("operation_new", args=[A1, REGION, "App", "scrub"])
    preview = requester.get(url, {"purge_history": "on"})
    assert preview.status_code == 200
    page = preview.content.decode()
    assert 'id="plan-scrub"' in page and "resources.Db.properties.MasterUserPassword" in page
    assert "Rotate every secret" in page and 'name="confirm_purge"' in page
    digest = preview.context["digest"]

    # The purge needs its own tick.
    refused = requester.post(url, {"purge_history": "on", "plan_digest": digest})
    assert refused.status_code == 400 and not Operation.objects.exists()
    response = requester.post(url, {"purge_history": "on", "confirm_purge": "on", "plan_digest": digest})
    assert response.status_code == 302
    op = Operation.objects.get()
    assert op.kind == "scrub" and op.params == {"purge_history": True}
    assert op.status == OperationStatus.AWAITING_APPROVAL

    decided = approver.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"})
    assert decided.status_code == 302
    work(queues)
    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.result)
    assert "ROTATE" in op.result["summary"]

    stored = aws.get(A1, BUCKET1, STATE)
    for value in (PW,):
        assert value.encode() not in stored
    versions = aws.s3(A1).list_object_versions(Bucket=BUCKET1, Prefix=STATE)["Versions"]
    assert [v["IsLatest"] for v in versions if v["Key"] == STATE] == [True]

    # The worker scanned the stack again: nothing is left of App.
    rescan = ScanRun.objects.filter(stacks=["App"]).latest("created_at")
    assert rescan.status == SyncStatus.SUCCEEDED and rescan.requested_by is None
    assert not SecretFinding.objects.filter(account=prod, stack_name="App").exists()
    page = requester.get(reverse("operation", args=[op.pk])).content.decode()
    assert "Rotate every secret" in page
    assert_no_value(op.plan, op.result, op.log, op.params)
