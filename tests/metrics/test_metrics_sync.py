"""/metrics after real syncs against the moto server: the sync duration and errors per
account come from what stacks.sync stored, not from rows written by the test."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stacks.models import Account
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1, A2 = "111111111111", "222222222222"
TOKEN = "t0ken"


def record(stack: str) -> dict:
    return {"version": 11, "stackName": stack, "region": "us-east-1", "resources": {}, "outputs": {}}


def test_it_reports_what_a_real_sync_stored(client, settings, aws, redis_db):
    settings.CDKD_METRICS_TOKEN = TOKEN
    aws.make_bucket(A1, f"cdkd-state-{A1}")
    aws.put(A1, f"cdkd-state-{A1}", "cdkd/Shop/us-east-1/state.json", record("Shop"))
    aws.put(A1, f"cdkd-state-{A1}", "cdkd/Net/us-east-1/state.json", record("Net"))
    aws.put(
        A1,
        f"cdkd-state-{A1}",
        "cdkd/Shop/us-east-1/lock.json",
        {"owner": "ci@runner:42", "timestamp": 1, "expiresAt": 4102444800000, "operation": "deploy"},
    )
    good = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    # No bucket made for this one: its sync fails with "bucket missing".
    missing = Account.objects.create(account_id=A2, name="gone", role_arn=f"arn:aws:iam::{A2}:role/cdkd-admin")

    sync_account(good)
    sync_account(missing)

    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    samples = {
        (s.name, json.dumps(s.labels, sort_keys=True)): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }

    def v(name, **labels):
        return samples.get((name, json.dumps(labels, sort_keys=True)))

    good.refresh_from_db()
    assert v("cdkd_stacks", account=A1) == 2
    assert v("cdkd_locks", account=A1, state="live") == 1
    assert v("cdkd_account_sync_errors", account=A1) == 0
    assert v("cdkd_account_last_sync_duration_seconds", account=A1) == pytest.approx(
        (good.last_synced_at - good.last_sync_started_at).total_seconds()
    )
    assert v("cdkd_account_bucket_status", account=A1, status="ok") == 1
    assert v("cdkd_stacks", account=A2) == 0
    assert v("cdkd_account_sync_errors", account=A2) == 1
    assert v("cdkd_account_bucket_status", account=A2, status="missing") == 1
    assert v("cdkd_account_last_sync_duration_seconds", account=A2) is None
    assert v("cdkd_account_last_sync_start_timestamp_seconds", account=A2) is not None
