"""A deploy that fails mid-way, on moto: the pre-rollback save, the journal segment in cdkd's
shape, the automatic rollback and the settled journal; with no rollback, the journal left
for `finish_rollback` (cdkd's `rollback`), which reverts and cleans up."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.deploy.rollback import finish_rollback
from engine.deploy.run import DeployFailed
from engine.providers import deploy_provider_for
from engine.providers.base import ProviderError
from tests.deploy.test_run import (
    ACCOUNT,
    BUCKET,
    JOURNAL,
    STATE,
    Moto,
    bucket,  # noqa: F401 - the fixture
    context,
    deployer,
    golden_template,
)

pytestmark = pytest.mark.integration

FAILING = "Param165332EC"


class Failing:
    """A real provider whose create of one logical id fails as AWS would refuse it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, clients, logical_id, resource_type, properties, target):
        if logical_id == FAILING:
            raise ProviderError(
                f"{logical_id}: PutParameter failed (ValidationException): nope", aws_code="ValidationException"
            )
        return self.inner.create(clients, logical_id, resource_type, properties, target)


def failing_provider(rtype: str, provisioned_by: str | None = None) -> Any:
    provider = deploy_provider_for(rtype, provisioned_by)
    return Failing(provider) if provider is not None else None


def versions(aws, key: str) -> list[dict[str, Any]]:
    """Every stored body of `key`, oldest first."""
    s3 = aws.s3(ACCOUNT)
    listed = s3.list_object_versions(Bucket=BUCKET, Prefix=key).get("Versions", [])
    listed = [v for v in listed if v["Key"] == key][::-1]  # S3 lists newest first
    out = []
    for v in listed:
        body = s3.get_object(Bucket=BUCKET, Key=key, VersionId=v["VersionId"])["Body"].read()
        out.append(json.loads(body))
    return out


def live(aws) -> tuple[list[str], list[str]]:
    m = Moto(aws)
    queues = m("sqs").list_queues().get("QueueUrls", [])
    topics = [t["TopicArn"] for t in m("sns").list_topics()["Topics"]]
    return queues, topics


def test_it_rolls_back_a_failed_first_deploy_and_settles_the_journal(aws, bucket):  # noqa: F811
    d = deployer(provider_for=failing_provider)
    with pytest.raises(DeployFailed) as caught:
        d.deploy(context(bucket), golden_template(), account=ACCOUNT, concurrency=1)
    result = caught.value.result
    assert result.result == "failed"
    assert result.errors and result.errors[0].startswith(f"{FAILING}: ")
    assert result.rollback is not None and result.rollback["failures"] == [], result.rollback

    history = versions(aws, STATE)
    # a save per completed resource, the pre-rollback save holding everything created ...
    created = set(result.created)
    assert created and FAILING not in created
    pre_rollback = [v for v in history if set(v["resources"]) == created]
    assert pre_rollback, "no save held every created resource before the rollback"
    # ... and the post-rollback record holds nothing
    final = history[-1]
    assert final["resources"] == {} and final["version"] == 11
    assert live(aws) == ([], [])

    # the journal: this attempt's segment was popped, a failed-only one left for --revert-failed
    journal = json.loads(aws.get(ACCOUNT, BUCKET, JOURNAL))
    assert list(journal) == ["journalVersion", "stackName", "region", "segments"]
    assert journal["journalVersion"] == 1 and journal["stackName"] == "GoldenCdkStack"
    [segment] = journal["segments"]
    assert segment["reason"] == "auto-rollback-clean"
    assert segment["initialDeploy"] is True
    assert segment["operations"] == []
    [failed] = segment["failedOperations"]
    assert list(failed) == ["logicalId", "changeType", "resourceType", "provisionedBy", "attemptedProperties"]
    assert failed["logicalId"] == FAILING and failed["changeType"] == "CREATE"
    assert failed["attemptedProperties"]["Value"].startswith("us-east-1/arn:aws:sns:")

    # the event stream tells the same story
    from engine.events import parse_event_stream

    key = f"cdkd/GoldenCdkStack/us-east-1/deployments/{result.run_id}.jsonl"
    kinds = [e["eventType"] for e in parse_event_stream(aws.get(ACCOUNT, BUCKET, key))]
    assert kinds.index("RESOURCE_FAILED") < kinds.index("ROLLBACK_STARTED") < kinds.index("ROLLBACK_FINISHED")
    assert kinds.count("ROLLBACK_RESOURCE_SUCCEEDED") == len(created)
    assert kinds[-1] == "RUN_FINISHED"


def test_it_leaves_the_journal_with_no_rollback_and_finish_rollback_reverts_it(aws, bucket):  # noqa: F811
    d = deployer(provider_for=failing_provider)
    with pytest.raises(DeployFailed):
        d.deploy(context(bucket), golden_template(), account=ACCOUNT, concurrency=1, no_rollback=True)
    record = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    journal = json.loads(aws.get(ACCOUNT, BUCKET, JOURNAL))
    [segment] = journal["segments"]
    assert segment["reason"] == "no-rollback-failure" and segment["initialDeploy"] is True
    assert [op["logicalId"] for op in segment["operations"]] == list(record["resources"])
    for op in segment["operations"]:
        assert list(op) == ["logicalId", "changeType", "resourceType", "provisionedBy", "physicalId", "properties"]
        row = record["resources"][op["logicalId"]]
        assert op["physicalId"] == row["physicalId"] and op["properties"] == row["properties"]
    queues, topics = live(aws)
    assert queues and topics  # the created resources are still there

    outcome = finish_rollback(context(bucket, op="op-rollback-1"), account=ACCOUNT)
    assert outcome.result == "clean" and outcome.exit_code == 0
    assert outcome.report.failures == []
    assert sorted(outcome.report.reverted) == sorted(record["resources"])
    assert live(aws) == ([], [])
    assert aws.etag(ACCOUNT, BUCKET, JOURNAL) is None
    # the oldest segment was the stack's first deploy and no row remains: the record goes too
    assert outcome.state_deleted and aws.etag(ACCOUNT, BUCKET, STATE) is None


def test_it_reverts_an_in_place_update_when_a_later_resource_fails(aws, bucket):  # noqa: F811
    template = golden_template()
    deployer().deploy(context(bucket), template, account=ACCOUNT)
    before = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    template["Resources"]["Queue4A7E3555"]["Properties"]["VisibilityTimeout"] = 90
    template["Resources"]["Param165332EC"]["Properties"]["Description"] = "now failing"

    class FailUpdate(Failing):
        def update(self, clients, ref, properties, target):
            if ref.logical_id == FAILING:
                raise ProviderError("PutParameter failed (ValidationException)", aws_code="ValidationException")
            return self.inner.update(clients, ref, properties, target)

    def provider(rtype, provisioned_by=None):
        return FailUpdate(deploy_provider_for(rtype, provisioned_by))

    with pytest.raises(DeployFailed) as caught:
        deployer(provider_for=provider).deploy(context(bucket), template, account=ACCOUNT, concurrency=2)
    assert caught.value.result.rollback["reverted"] == ["Queue4A7E3555"]
    after = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    assert after["resources"]["Queue4A7E3555"] == before["resources"]["Queue4A7E3555"]
    url = after["resources"]["Queue4A7E3555"]["physicalId"]
    attrs = Moto(aws)("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "45"
    [segment] = json.loads(aws.get(ACCOUNT, BUCKET, JOURNAL))["segments"]
    [failed] = segment["failedOperations"]
    assert failed["changeType"] == "UPDATE" and failed["previousState"] == before["resources"][FAILING]
    assert failed["physicalId"] == before["resources"][FAILING]["physicalId"]


def test_finish_rollback_keeps_the_journal_when_a_revert_fails(aws, bucket):  # noqa: F811
    d = deployer(provider_for=failing_provider)
    with pytest.raises(DeployFailed):
        d.deploy(context(bucket), golden_template(), account=ACCOUNT, concurrency=1, no_rollback=True)
    journal_before = aws.get(ACCOUNT, BUCKET, JOURNAL)

    class CannotDelete(Failing):
        def delete(self, clients, ref, snapshot=False):
            if ref.resource_type == "AWS::SNS::Topic":
                raise ProviderError("DeleteTopic failed (AuthorizationError)", aws_code="AuthorizationError")
            return self.inner.delete(clients, ref, snapshot=snapshot)

    outcome = finish_rollback(
        context(bucket, op="op-rollback-2"),
        account=ACCOUNT,
        provider_for=lambda t, p=None: CannotDelete(deploy_provider_for(t, p)),
    )
    assert outcome.result == "partial" and outcome.exit_code == 2
    assert [f.split(":")[0] for f in outcome.report.failures] == ["TopicBFC7AF6E"]
    # the journal is kept for a re-run, the record holds only what is still there
    assert json.loads(aws.get(ACCOUNT, BUCKET, JOURNAL)) == json.loads(journal_before)
    record = json.loads(aws.get(ACCOUNT, BUCKET, STATE))
    assert list(record["resources"]) == ["TopicBFC7AF6E"]
    # a second run with working deletes finishes the job
    again = finish_rollback(context(bucket, op="op-rollback-3"), account=ACCOUNT)
    assert again.result == "clean" and again.report.already and live(aws) == ([], [])


def test_an_automatic_rollback_reverses_a_replacement(aws, bucket):  # noqa: F811
    template = {
        "Resources": {
            "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "old-q", "VisibilityTimeout": 40}},
            FAILING: {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": "v1"}},
        }
    }
    deployer().deploy(context(bucket), template, account=ACCOUNT)
    before = json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]
    template["Resources"]["Queue"]["Properties"]["QueueName"] = "new-q"  # a replacement
    template["Resources"][FAILING]["Properties"]["Value"] = "v2"

    class FailUpdate(Failing):
        def update(self, clients, ref, properties, target):
            if ref.logical_id == FAILING:
                raise ProviderError("PutParameter failed (ValidationException)", aws_code="ValidationException")
            return self.inner.update(clients, ref, properties, target)

    with pytest.raises(DeployFailed) as caught:
        deployer(provider_for=lambda t, p=None: FailUpdate(deploy_provider_for(t, p))).deploy(
            context(bucket), template, account=ACCOUNT, concurrency=2
        )
    result = caught.value.result
    assert result.replaced == ["Queue"]
    assert result.rollback["reverted"] == ["Queue"] and result.rollback["failures"] == []
    assert any("reverse-replacement" in w for w in result.rollback["warnings"])
    after = json.loads(aws.get(ACCOUNT, BUCKET, STATE))["resources"]
    assert after["Queue"]["physicalId"] == before["Queue"]["physicalId"]
    assert after["Queue"]["properties"] == {"QueueName": "old-q", "VisibilityTimeout": 40}
    queues, _ = live(aws)
    assert [q.rsplit("/", 1)[-1] for q in queues] == ["old-q"]
