"""`manage.py cdkd deploy` and `cdkd rollback` exit codes and `--json` on a moto server, each
outcome made to happen for real, and `rollback`'s cdkd options `--orphan` and
`--revert-failed`.

deploy: 0 success, 1 failure, 2 partial (cdkd's PartialFailureError, deploy-engine.md 4.5/4.6:
a resource left unaddressed, here a delete the provider skips because the record names the
resource by an id that is not an SNS ARN; the row is kept). rollback: 0 clean, 2 partial
(journal kept), 1 error."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from engine.deploy.run import DeployFailed
from engine.providers import deploy_provider_for
from engine.providers.base import ProviderError
from stacks.models import Operation
from tests.deploy.test_deploy_command import A1, APP, BUCKET, JOURNAL, JSON_KEYS, KEY, LOCK, REGION, SAMPLE, run, sqs
from tests.deploy.test_deploy_command import world as world  # noqa: F401,PLC0414 - the fixture
from tests.deploy.test_run import context, deployer, golden_template

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

QUEUE = "Queue4A7E3555"
PARAM = "Param165332EC"


def deploy(*extra: str, app: str = APP) -> tuple[int, dict[str, Any], str]:
    code, out, err = run("deploy", "GoldenCdkStack", "--account", A1, "--app", app, "--yes", "--json", *extra)
    return code, json.loads(out), err


def rollback(*extra: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(
        "rollback", "GoldenCdkStack", "--account", A1, "--stack-region", REGION, "--yes", "--json", *extra
    )
    return code, json.loads(out), err


def s3(aws):
    return aws.account_session(A1).client("s3", region_name=REGION, endpoint_url=aws.moto.url)


def test_it_exits_2_with_the_json_when_a_delete_is_left_unaddressed(world):  # noqa: F811
    record = json.loads((SAMPLE / "state.json").read_bytes())
    # a row cdkd recorded that the template no longer has, named by something that is not an
    # SNS ARN: the provider skips its delete (cdkd's COMPOSITE_ID skip), the row stays
    record["resources"]["OldSubscription"] = {
        "resourceType": "AWS::SNS::Subscription",
        "physicalId": "subscription-from-a-hand-edit",
        "properties": {"Protocol": "sqs", "TopicArn": "x", "Endpoint": "y"},
        "attributes": {},
        "dependencies": [],
    }
    world.put(A1, BUCKET, KEY, record)
    code, body, message = deploy()
    assert code == 2, message
    assert list(body) == JSON_KEYS
    assert body["stack"] == "GoldenCdkStack" and body["region"] == REGION and body["result"] == "partial"
    assert body["deleted"] == [] and body["created"] == body["updated"] == body["replaced"] == []
    assert [e.split(":")[0] for e in body["errors"]] == ["OldSubscription"]
    assert "delete skipped" in body["errors"][0] and "ARN" in body["errors"][0]
    assert "left unaddressed" in message
    stored = json.loads(world.get(A1, BUCKET, KEY))
    assert stored["resources"]["OldSubscription"] == record["resources"]["OldSubscription"]  # kept for a retry
    assert world.etag(A1, BUCKET, LOCK) is None
    assert Operation.objects.get().status == "partial"


def test_it_exits_1_with_the_json_when_a_resource_fails(world):  # noqa: F811
    ssm = world.account_session(A1).client("ssm", region_name=REGION, endpoint_url=world.moto.url)
    ssm.put_parameter(Name="/GoldenCdkStack-Param165332EC", Value="someone else's", Type="String")
    code, body, message = deploy()  # with the automatic rollback
    assert code == 1, message
    assert list(body) == JSON_KEYS and body["result"] == "failed"
    assert any(e.startswith(f"{PARAM}: ") for e in body["errors"])
    assert sqs(world).list_queues().get("QueueUrls", []) == []  # rolled back


def bucket_app(tmp_path) -> str:
    """The golden app with a bucket the failing parameter depends on (so it is created first)."""
    app = tmp_path / "cdk.out"
    shutil.copytree(APP, app)
    path = app / "GoldenCdkStack.template.json"
    template = json.loads(path.read_text())
    template["Resources"]["Bucket83908E77"] = {"Type": "AWS::S3::Bucket", "Properties": {}}
    template["Resources"][PARAM]["Properties"]["Description"] = {"Ref": "Bucket83908E77"}
    path.write_text(json.dumps(template))
    return str(app)


def test_rollback_exits_2_when_a_revert_fails_then_0_when_it_can_finish(world, tmp_path):  # noqa: F811
    ssm = world.account_session(A1).client("ssm", region_name=REGION, endpoint_url=world.moto.url)
    ssm.put_parameter(Name="/GoldenCdkStack-Param165332EC", Value="someone else's", Type="String")
    code, body, _ = deploy("--no-rollback", "--concurrency", "1", app=bucket_app(tmp_path))
    assert code == 1 and "Bucket83908E77" in body["created"]
    name = json.loads(world.get(A1, BUCKET, KEY))["resources"]["Bucket83908E77"]["physicalId"]
    s3(world).put_object(Bucket=name, Key="data.csv", Body=b"1,2")  # someone wrote to it meanwhile

    code, rolled, message = rollback()
    assert code == 2, message
    assert rolled["result"] == "partial"
    assert [f.split(":")[0] for f in rolled["failures"]] == ["Bucket83908E77"]
    assert "BucketNotEmpty" in rolled["failures"][0]
    assert json.loads(world.get(A1, BUCKET, JOURNAL))["segments"]  # kept for the next run
    assert list(json.loads(world.get(A1, BUCKET, KEY))["resources"]) == ["Bucket83908E77"]
    assert world.etag(A1, BUCKET, LOCK) is None

    s3(world).delete_object(Bucket=name, Key="data.csv")
    code, rolled, message = rollback()
    assert code == 0, message
    assert rolled["result"] == "clean" and rolled["stateDeleted"] and rolled["failures"] == []
    assert world.etag(A1, BUCKET, JOURNAL) is None and world.etag(A1, BUCKET, KEY) is None
    kinds = list(Operation.objects.order_by("id").values_list("kind", "status"))
    assert kinds == [("deploy", "failed"), ("rollback", "partial"), ("rollback", "succeeded")]


def test_rollback_exits_1_on_a_journal_it_cannot_read(world):  # noqa: F811
    world.put(A1, BUCKET, JOURNAL, {"journalVersion": 2, "stackName": "GoldenCdkStack", "segments": []})
    code, body, message = rollback()
    assert code == 1 and "journalVersion 2" in message
    assert body["result"] == "refused" and "journalVersion 2" in body["errors"][0]
    assert not Operation.objects.exists()


def test_rollback_orphan_leaves_the_resource_in_aws_untracked(world):  # noqa: F811
    ssm = world.account_session(A1).client("ssm", region_name=REGION, endpoint_url=world.moto.url)
    ssm.put_parameter(Name="/GoldenCdkStack-Param165332EC", Value="someone else's", Type="String")
    code, body, _ = deploy("--no-rollback", "--concurrency", "1")
    assert code == 1 and QUEUE in body["created"]
    url = json.loads(world.get(A1, BUCKET, KEY))["resources"][QUEUE]["physicalId"]

    code, out, _ = run("rollback", "GoldenCdkStack", "--account", A1, "--stack-region", REGION, "--orphan", QUEUE)
    assert code == 0 and f"orphan {QUEUE}" in out and not Operation.objects.filter(kind="rollback").exists()
    code, _, message = rollback("--orphan", "NoSuchThing")
    assert code == 1 and "NoSuchThing" in message and "does not hold" in message

    code, rolled, message = rollback("--orphan", QUEUE)
    assert code == 0, message
    assert rolled["orphaned"] == [QUEUE] and QUEUE not in rolled["reverted"] and rolled["reverted"]
    assert rolled["stateDeleted"]  # nothing left to track: the first deploy's record goes
    path = url.split("/", 3)[3]
    assert [u.split("/", 3)[3] for u in sqs(world).list_queues()["QueueUrls"]] == [path]  # still in AWS
    sns = world.account_session(A1).client("sns", region_name=REGION, endpoint_url=world.moto.url)
    assert sns.list_topics()["Topics"] == []


class LandsThenFails:
    """The real provider; an update of the queue is applied in AWS, then answered with an
    error (a write that landed though the call failed: why a failed op keeps its attempt)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update(self, clients, ref, properties, target):
        if ref.logical_id == QUEUE:
            self.inner.update(clients, ref, properties, target)
            raise ProviderError(f"{QUEUE}: SetQueueAttributes failed (RequestTimeout)", aws_code="RequestTimeout")
        return self.inner.update(clients, ref, properties, target)


def visibility(world, url: str) -> str:
    attrs = sqs(world).get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]
    return attrs["VisibilityTimeout"]


def test_rollback_revert_failed_forces_a_failed_update_back(world, aws):  # noqa: F811
    """The failed update is made by the engine's deployer with the real SQS provider wrapped
    to fail after its write lands; the rollback under test runs the real providers."""
    from engine.backend import StateBucket

    bucket = StateBucket.open(aws.access(A1), actor="t", bucket=BUCKET, region=REGION)
    template = golden_template()
    deployer().deploy(context(bucket), template, account=A1)
    before = json.loads(world.get(A1, BUCKET, KEY))["resources"][QUEUE]
    template["Resources"][QUEUE]["Properties"]["VisibilityTimeout"] = 90
    with pytest.raises(DeployFailed):
        deployer(provider_for=lambda t, p=None: LandsThenFails(deploy_provider_for(t, p))).deploy(
            context(bucket, op="op-deploy-2"), template, account=A1, no_rollback=True
        )
    assert visibility(world, before["physicalId"]) == "90"  # it landed
    [segment] = json.loads(world.get(A1, BUCKET, JOURNAL))["segments"]
    assert segment["operations"] == [] and segment["failedOperations"][0]["logicalId"] == QUEUE

    code, out, _ = run("rollback", "GoldenCdkStack", "--account", A1, "--stack-region", REGION, "--revert-failed")
    assert code == 0 and f"revert-failed {QUEUE}" in out and "revert failed ops" in out
    code, rolled, message = rollback("--revert-failed")
    assert code == 0, message
    assert rolled["result"] == "clean" and rolled["reverted"] == [QUEUE] and not rolled["stateDeleted"]
    assert visibility(world, before["physicalId"]) == "45"
    assert json.loads(world.get(A1, BUCKET, KEY))["resources"][QUEUE] == before
    assert world.etag(A1, BUCKET, JOURNAL) is None


def test_it_exits_2_when_a_replaced_resource_cannot_be_deleted(world, tmp_path, monkeypatch):  # noqa: F811
    """cdkd counts a replacement whose old resource is left behind as partial: the new queue is
    recorded, the old one is named in the errors and stays in AWS. The old queue's delete is
    made to fail at the provider (the runner's accounting is what is under test)."""
    assert deploy()[0] == 0
    old_url = json.loads(world.get(A1, BUCKET, KEY))["resources"][QUEUE]["physicalId"]
    app = tmp_path / "cdk.out"
    shutil.copytree(APP, app)
    path = app / "GoldenCdkStack.template.json"
    template = json.loads(path.read_text())
    template["Resources"][QUEUE]["Properties"]["QueueName"] = "golden-renamed"  # create-only: replace
    path.write_text(json.dumps(template))
    provider = deploy_provider_for("AWS::SQS::Queue")

    def refuse(self, clients, ref, **kwargs):
        raise ProviderError(f"{ref.logical_id}: AccessDenied on DeleteQueue", aws_code="AccessDenied")

    monkeypatch.setattr(type(provider), "delete", refuse)
    code, body, message = deploy(app=str(app))
    assert code == 2, message
    assert body["result"] == "partial" and QUEUE in body["replaced"]  # (its subscription too)
    assert [e.split(":")[0] for e in body["errors"]] == [QUEUE] and old_url in body["errors"][0]
    stored = json.loads(world.get(A1, BUCKET, KEY))
    assert stored["resources"][QUEUE]["physicalId"].endswith("/golden-renamed")
    left = [u.rsplit("/", 1)[-1] for u in sqs(world).list_queues()["QueueUrls"]]
    assert old_url.rsplit("/", 1)[-1] in left  # left behind, as reported
