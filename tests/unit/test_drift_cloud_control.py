"""Drift of a `provisionedBy: cc-api` row: the live model comes from Cloud Control's
GetResource. moto has no Cloud Control API, so botocore's Stubber answers for it here; the
comparator, the routing and the "gone" reading are the real ones."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from engine import drift
from engine.providers.base import Clients

ROW = {
    "resourceType": "AWS::Events::Rule",
    "physicalId": "Stack-Rule",
    "provisionedBy": "cc-api",
    "properties": {"State": "ENABLED", "ScheduleExpression": "rate(5 minutes)"},
    "attributes": {},
    "dependencies": [],
}


@pytest.fixture
def stubbed(monkeypatch):
    client = boto3.client("cloudcontrol", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    monkeypatch.setattr(Clients, "__call__", lambda self, service, region: client)
    clients = drift.CountingClients(boto3.Session(region_name="us-east-1"))
    with Stubber(client) as stub:
        yield clients, stub


def expect(stub, model: dict) -> None:
    stub.add_response(
        "get_resource",
        {
            "TypeName": "AWS::Events::Rule",
            "ResourceDescription": {"Identifier": "Stack-Rule", "Properties": json.dumps(model)},
        },
        {"TypeName": "AWS::Events::Rule", "Identifier": "Stack-Rule"},
    )


def test_it_reports_a_cloud_control_row_in_sync_and_modified_by_path(stubbed):
    clients, stub = stubbed
    expect(stub, {"State": "ENABLED", "ScheduleExpression": "rate(5 minutes)", "Arn": "arn:x"})
    expect(stub, {"State": "DISABLED", "ScheduleExpression": "rate(5 minutes)"})
    same = drift.check_row(clients, "Rule", ROW, region="us-east-1", account_id="111111111111")
    changed = drift.check_row(clients, "Rule", ROW, region="us-east-1", account_id="111111111111")
    assert same.status == drift.IN_SYNC  # a key the record never declared (Arn) is not drift
    assert changed.status == drift.MODIFIED
    assert changed.as_json()["differences"] == [{"path": "State", "expected": "ENABLED", "actual": "DISABLED"}]


def test_it_reports_a_cloud_control_row_deleted_when_get_resource_says_not_found(stubbed):
    clients, stub = stubbed
    stub.add_client_error("get_resource", service_error_code="ResourceNotFoundException", http_status_code=404)
    gone = drift.check_row(clients, "Rule", ROW, region="us-east-1", account_id="111111111111")
    assert gone.status == drift.DELETED


def test_it_reports_a_throttled_read_as_not_checked_with_the_code(stubbed):
    clients, stub = stubbed
    stub.add_client_error("get_resource", service_error_code="ThrottlingException", http_status_code=400)
    failed = drift.check_row(clients, "Rule", ROW, region="us-east-1", account_id="111111111111")
    assert failed.status != drift.DELETED and failed.error
    assert "ThrottlingException" in failed.as_json()["reason"] + json.dumps(failed.as_json())
