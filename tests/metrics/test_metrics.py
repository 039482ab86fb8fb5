"""/metrics: closed by default, the token and network guards, and values that match the
rows and queues they are read from (parsed with prometheus_client's own parser)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from stacks.models import Account, Lock, Operation, SecretFinding, Stack, now_ms

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-scrape-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def scrape(client, **headers) -> dict:
    """{(name, sorted labels): value} of one authorised scrape."""
    response = client.get("/metrics", headers={**AUTH, **headers})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, metric: str, /, **labels) -> float | None:
    return samples.get((metric, tuple(sorted(labels.items()))))


# --- the guard -----------------------------------------------------------------------------


def test_it_answers_404_when_neither_a_token_nor_networks_are_set(client, settings):
    settings.CDKD_METRICS_TOKEN = ""
    settings.CDKD_METRICS_ALLOW_CIDRS = []

    response = client.get("/metrics", headers=AUTH)

    assert response.status_code == 404
    assert b"cdkd_" not in response.content


@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer "],
    ids=["none", "wrong", "basic-scheme", "longer", "empty"],
)
def test_it_answers_401_without_the_right_bearer_token(client, settings, header):
    settings.CDKD_METRICS_TOKEN = TOKEN
    settings.CDKD_METRICS_ALLOW_CIDRS = []

    response = client.get("/metrics", headers={"Authorization": header} if header else {})

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"cdkd_" not in response.content


def test_it_answers_200_with_the_token_and_no_login(client, settings, redis_db):
    settings.CDKD_METRICS_TOKEN = TOKEN
    settings.CDKD_METRICS_ALLOW_CIDRS = []

    response = client.get("/metrics", headers={"Authorization": f"bearer {TOKEN}"})

    assert response.status_code == 200
    assert b"# TYPE cdkd_stacks gauge" in response.content


def test_it_allows_a_client_inside_the_networks_and_refuses_one_outside(client, settings, redis_db):
    settings.CDKD_METRICS_TOKEN = ""
    settings.CDKD_METRICS_ALLOW_CIDRS = ["10.0.0.0/8", "2001:db8::/32"]

    assert client.get("/metrics", REMOTE_ADDR="10.20.30.40").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="2001:db8::7").status_code == 200
    # A dual-stack socket reports an IPv4 client as ::ffff:a.b.c.d.
    assert client.get("/metrics", REMOTE_ADDR="::ffff:10.1.1.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.5").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_it_takes_the_client_address_from_the_proxy_hop_cdkd_proxy_count_names(client, settings, redis_db):
    settings.CDKD_METRICS_TOKEN = ""
    settings.CDKD_METRICS_ALLOW_CIDRS = ["10.0.0.0/8"]
    settings.CDKD_PROXY_COUNT = 1

    # The proxy (REMOTE_ADDR) appended the address it saw; what the client wrote before it is ignored.
    inside = client.get("/metrics", REMOTE_ADDR="172.16.0.2", HTTP_X_FORWARDED_FOR="10.9.9.9")
    forged = client.get("/metrics", REMOTE_ADDR="172.16.0.2", HTTP_X_FORWARDED_FOR="10.9.9.9, 203.0.113.9")

    assert inside.status_code == 200
    assert forged.status_code == 403


def test_it_needs_both_when_both_the_token_and_networks_are_set(client, settings, redis_db):
    settings.CDKD_METRICS_TOKEN = TOKEN
    settings.CDKD_METRICS_ALLOW_CIDRS = ["10.0.0.0/8"]

    assert client.get("/metrics", REMOTE_ADDR="10.0.0.1", headers=AUTH).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.1").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.1", headers=AUTH).status_code == 403


def test_it_refuses_a_network_setting_that_is_not_a_network(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from cdkd_site.settings import envcidrs

    monkeypatch.setenv("CDKD_METRICS_ALLOW_CIDRS", "10.0.0.0/8, prometheus.internal")
    with pytest.raises(ImproperlyConfigured, match=r"CDKD_METRICS_ALLOW_CIDRS: 'prometheus.internal' is not a network"):
        envcidrs("CDKD_METRICS_ALLOW_CIDRS")
    monkeypatch.setenv("CDKD_METRICS_ALLOW_CIDRS", " 10.1.2.3/8 ,192.168.1.5,")
    assert envcidrs("CDKD_METRICS_ALLOW_CIDRS") == ["10.0.0.0/8", "192.168.1.5/32"]


# --- the values ----------------------------------------------------------------------------


@pytest.fixture
def token(settings):
    settings.CDKD_METRICS_TOKEN = TOKEN
    settings.CDKD_METRICS_ALLOW_CIDRS = []


def make_stack(account, name, *, resources=0, defects=False):
    return Stack.objects.create(
        account=account,
        key=f"cdkd/{name}/us-east-1/state.json",
        stack_name=name,
        region="us-east-1",
        etag='"e"',
        body=b"{}",
        root_name=name,
        resource_count=resources,
        has_defects=defects,
        synced_at=timezone.now(),
    )


def make_lock(account, name, *, expires_at_ms, readable=True):
    return Lock.objects.create(
        account=account,
        key=f"cdkd/{name}/us-east-1/lock.json",
        stack_name=name,
        region="us-east-1",
        etag='"l"',
        body=b"{}",
        readable=readable,
        expires_at_ms=expires_at_ms,
        synced_at=timezone.now(),
    )


def make_operation(account, kind, status):
    return Operation.objects.create(
        kind=kind, account=account, stack_name="S", region="us-east-1", requester_name="olivia", plan={}, status=status
    )


def make_finding(account, name, version_id=None):
    return SecretFinding.objects.create(
        account=account, stack_name=name, region="us-east-1", key=f"cdkd/{name}/us-east-1/state.json",
        version_id=version_id, path=["resources"], source="shape",
    )  # fmt: skip


def test_it_reports_the_seeded_rows_per_account(client, token, redis_db):
    started = timezone.now() - timedelta(minutes=10)
    prod = Account.objects.create(
        account_id="111111111111",
        name="prod",
        bucket_status="ok",
        last_sync_started_at=started,
        last_synced_at=started + timedelta(seconds=42.5),
    )
    staging = Account.objects.create(
        account_id="222222222222",
        name="staging",
        bucket_status="denied",
        last_sync_started_at=started,
        last_sync_error="Access denied to bucket cdkd-state-222222222222",
    )
    make_stack(prod, "A", resources=3)
    make_stack(prod, "B", resources=4, defects=True)
    make_stack(staging, "C", resources=1)
    now = now_ms()
    make_lock(prod, "A", expires_at_ms=now + 600_000)
    make_lock(prod, "B", expires_at_ms=now - 1)
    make_lock(prod, "X", expires_at_ms=None)  # no expiresAt: expired, as cdkd counts it
    make_lock(staging, "C", expires_at_ms=None, readable=False)
    make_finding(prod, "A")
    make_finding(prod, "A", version_id="v1")
    make_finding(prod, "B", version_id="v2")
    from stacks.models import DriftCheck

    checked = timezone.now()
    for name, drifted, latest in (("A", 2, True), ("B", 0, True), ("B", 3, False)):  # B's old check is superseded
        DriftCheck.objects.create(
            account=prod, stack_name=name, region="us-east-1", checked_at=checked, drifted=drifted, latest=latest
        )

    s = scrape(client)

    assert value(s, "cdkd_account_info", account="111111111111", name="prod") == 1
    assert value(s, "cdkd_stacks", account="111111111111") == 2
    assert value(s, "cdkd_stacks", account="222222222222") == 1
    assert value(s, "cdkd_resources", account="111111111111") == 7
    assert value(s, "cdkd_stacks_with_defects", account="111111111111") == 1
    assert value(s, "cdkd_stacks_with_defects", account="222222222222") == 0
    assert value(s, "cdkd_locks", account="111111111111", state="live") == 1
    assert value(s, "cdkd_locks", account="111111111111", state="expired") == 2
    assert value(s, "cdkd_locks", account="111111111111", state="unreadable") == 0
    assert value(s, "cdkd_locks", account="222222222222", state="unreadable") == 1
    assert value(s, "cdkd_secret_findings", account="111111111111", version="current") == 1
    assert value(s, "cdkd_secret_findings", account="111111111111", version="noncurrent") == 2
    assert value(s, "cdkd_drift_stacks", account="111111111111", state="checked") == 2
    assert value(s, "cdkd_drift_stacks", account="111111111111", state="drifted") == 1
    assert value(s, "cdkd_drift_resources", account="111111111111") == 2
    assert value(s, "cdkd_drift_resources", account="222222222222") == 0
    assert value(s, "cdkd_secret_findings", account="222222222222", version="current") == 0
    # Sync: prod's last sync finished cleanly in 42.5 s; staging's last one failed.
    assert value(s, "cdkd_account_last_sync_duration_seconds", account="111111111111") == 42.5
    assert value(s, "cdkd_account_last_sync_duration_seconds", account="222222222222") is None
    assert value(s, "cdkd_account_last_sync_start_timestamp_seconds", account="222222222222") == started.timestamp()
    assert value(s, "cdkd_account_last_sync_success_timestamp_seconds", account="111111111111") == pytest.approx(
        started.timestamp() + 42.5
    )
    assert value(s, "cdkd_account_sync_errors", account="111111111111") == 0
    assert value(s, "cdkd_account_sync_errors", account="222222222222") == 1
    assert value(s, "cdkd_account_bucket_status", account="222222222222", status="denied") == 1
    assert value(s, "cdkd_account_bucket_status", account="222222222222", status="ok") == 0


def test_it_counts_operations_by_kind_and_result(client, token, redis_db):
    account = Account.objects.create(account_id="111111111111")
    for kind, status in [
        ("deploy", "succeeded"),
        ("deploy", "succeeded"),
        ("deploy", "failed"),
        ("destroy", "partial"),
        ("force-unlock", "awaiting-approval"),
        ("deploy", "running"),
    ]:
        make_operation(account, kind, status)

    s = scrape(client)

    assert value(s, "cdkd_operations_finished_total", kind="deploy", result="succeeded") == 2
    assert value(s, "cdkd_operations_finished_total", kind="deploy", result="failed") == 1
    assert value(s, "cdkd_operations_finished_total", kind="destroy", result="partial") == 1
    assert value(s, "cdkd_operations_finished_total", kind="scrub", result="succeeded") == 0  # zero, not absent
    assert value(s, "cdkd_operations_open", kind="force-unlock", status="awaiting-approval") == 1
    assert value(s, "cdkd_operations_open", kind="deploy", status="running") == 1
    assert value(s, "cdkd_operations_finished_total", kind="deploy", result="running") is None


@pytest.mark.django_db(transaction=True)
def test_it_reports_queue_depth_per_queue_and_the_live_workers(client, token, redis_db, register_worker):
    from rq.job import Job
    from rq.registry import FailedJobRegistry

    from cdkd_site.queues import get_queue

    default, sync = get_queue("default"), get_queue("sync")
    for _ in range(3):
        default.enqueue_call("stacks.jobs.scheduled_sync")
    sync.enqueue_call("stacks.jobs.scheduled_sync")
    failed = Job.create("stacks.jobs.scheduled_sync", connection=sync.connection)
    failed.save()
    FailedJobRegistry("sync", connection=sync.connection).add(failed, ttl=600)
    register_worker(("default", "sync"))
    register_worker(("sync",))
    register_worker(("default",), age_seconds=3600)  # dead long ago: not counted

    s = scrape(client)

    assert value(s, "cdkd_redis_up") == 1
    assert value(s, "cdkd_queue_jobs", queue="default", state="queued") == 3
    assert value(s, "cdkd_queue_jobs", queue="sync", state="queued") == 1
    assert value(s, "cdkd_queue_jobs", queue="sync", state="failed") == 1
    assert value(s, "cdkd_queue_jobs", queue="default", state="failed") == 0
    assert value(s, "cdkd_queue_jobs", queue="default", state="started") == 0
    assert value(s, "cdkd_queue_workers", queue="default") == 1
    assert value(s, "cdkd_queue_workers", queue="sync") == 2
    # A scrape only reads: the failed job is still in its registry.
    assert FailedJobRegistry("sync", connection=sync.connection).get_job_ids(cleanup=False) == [failed.id]


def test_it_still_reports_the_database_when_redis_does_not_answer(client, token, settings, closed_port):
    settings.REDIS_URL = f"redis://:hunter2@127.0.0.1:{closed_port}/0"
    make_stack(Account.objects.create(account_id="111111111111"), "A")

    response = client.get("/metrics", headers=AUTH)
    s = scrape(client)

    assert value(s, "cdkd_redis_up") == 0
    assert value(s, "cdkd_stacks", account="111111111111") == 1
    assert not any(name == "cdkd_queue_jobs" for name, _ in s)
    assert b"hunter2" not in response.content


def test_it_runs_the_same_number_of_queries_for_5_and_500_stacks(client, token, redis_db):
    from tests.support.attention_seed import seed

    def queries_for(stacks: int) -> int:
        seed(accounts=3, stacks=stacks)
        with CaptureQueriesContext(connection) as captured:
            samples = scrape(client)
        assert sum(v for (n, _), v in samples.items() if n == "cdkd_stacks") == Stack.objects.count()
        return len(captured.captured_queries)

    small = queries_for(5)
    Operation.objects.all().delete()
    Account.objects.all().delete()
    large = queries_for(500)

    assert small == large == 6
