"""The Cloud Control provider with botocore's Stubber (moto has no Cloud Control API):
DeleteResource, polling GetResourceRequestStatus, not-found both ways, failures, throttling,
the deadline, and what never reaches the API at all."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from engine import aws as engine_aws
from engine.providers import Clients, CloudControlProvider, ProviderError, ResourceRef, Skip, delete_resource

TYPE = "AWS::EC2::VPC"
VPC = "vpc-0abc"
TOKEN = "7f3b2c1e-0000-4000-8000-000000000001"


class FakeClock:
    """sleep() advances now(): polling runs instantly and the waits are recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    session = engine_aws.new_session(region_name="us-east-1")
    clients = Clients(session)
    client = clients("cloudcontrol", "us-east-1")
    clock = FakeClock()
    provider = CloudControlProvider(poll_interval=1.0, backoff=2.0, max_interval=3.0, timeout=60.0, **_hooks(clock))
    with Stubber(client) as stub:
        yield type("Env", (), {"clients": clients, "stub": stub, "clock": clock, "provider": provider})
        stub.assert_no_pending_responses()


def _hooks(clock: FakeClock) -> dict[str, Any]:
    return {"sleep": clock.sleep, "clock": clock.clock}


def ref(resource_type: str = TYPE, physical_id: Any = VPC, **kw: Any) -> ResourceRef:
    return ResourceRef(
        logical_id=kw.pop("logical_id", "Vpc"),
        resource_type=resource_type,
        physical_id=physical_id,
        properties=kw.pop("properties", {}),
        attributes={},
        region="us-east-1",
        account_id="111111111111",
        provisioned_by=kw.pop("provisioned_by", "cc-api"),
    )


def event(status: str, **extra: Any) -> dict[str, Any]:
    return {
        "ProgressEvent": {
            "TypeName": TYPE,
            "Identifier": VPC,
            "RequestToken": TOKEN,
            "Operation": "DELETE",
            "OperationStatus": status,
            **extra,
        }
    }


def expect_delete(env: Any, response: dict[str, Any]) -> None:
    env.stub.add_response("delete_resource", response, {"TypeName": TYPE, "Identifier": VPC})


def expect_poll(env: Any, response: dict[str, Any]) -> None:
    env.stub.add_response("get_resource_request_status", response, {"RequestToken": TOKEN})


def test_it_polls_until_success_with_growing_waits(env):
    expect_delete(env, event("PENDING"))
    expect_poll(env, event("IN_PROGRESS"))
    expect_poll(env, event("IN_PROGRESS"))
    expect_poll(env, event("IN_PROGRESS"))
    expect_poll(env, event("SUCCESS"))

    assert env.provider.delete(env.clients, ref()) == "deleted"

    assert env.clock.sleeps == [1.0, 2.0, 3.0, 3.0]  # ×2 backoff, capped at 3 s


def test_it_answers_not_found_when_delete_resource_says_so(env):
    env.stub.add_client_error(
        "delete_resource",
        service_error_code="ResourceNotFoundException",
        service_message=f"Resource of type '{TYPE}' with identifier '{VPC}' was not found.",
        http_status_code=404,
        expected_params={"TypeName": TYPE, "Identifier": VPC},
    )

    assert env.provider.delete(env.clients, ref()) == "not-found"
    assert env.clock.sleeps == []


def test_it_answers_not_found_when_the_handler_fails_with_not_found(env):
    expect_delete(env, event("IN_PROGRESS"))
    expect_poll(env, event("FAILED", ErrorCode="NotFound", StatusMessage="vpc-0abc does not exist"))

    assert env.provider.delete(env.clients, ref()) == "not-found"


def test_it_fails_with_the_status_message_and_error_code(env):
    expect_delete(env, event("IN_PROGRESS"))
    expect_poll(
        env,
        event(
            "FAILED",
            ErrorCode="GeneralServiceException",
            StatusMessage="The vpc 'vpc-0abc' has dependencies and cannot be deleted.",
        ),
    )

    with pytest.raises(ProviderError) as err:
        env.provider.delete(env.clients, ref())

    message = str(err.value)
    assert err.value.aws_code == "GeneralServiceException"
    assert "has dependencies and cannot be deleted" in message
    assert "Vpc" in message and TYPE in message and VPC in message and TOKEN in message


def test_it_fails_when_the_request_is_cancelled(env):
    expect_delete(env, event("IN_PROGRESS"))
    expect_poll(env, event("CANCEL_COMPLETE", StatusMessage="cancelled by user"))

    with pytest.raises(ProviderError, match="CANCEL_COMPLETE"):
        env.provider.delete(env.clients, ref())


def test_it_fails_a_delete_resource_refusal_with_awss_code(env):
    env.stub.add_client_error(
        "delete_resource",
        service_error_code="UnsupportedActionException",
        service_message="Resource type AWS::EC2::VPC does not support DELETE action",
        http_status_code=400,
    )

    with pytest.raises(ProviderError) as err:
        env.provider.delete(env.clients, ref())

    assert err.value.aws_code == "UnsupportedActionException"
    assert "cloudcontrol:DeleteResource" in str(err.value) and "UnsupportedActionException" in str(err.value)


def test_it_retries_throttling_on_delete_and_on_polls(env):
    env.stub.add_client_error("delete_resource", service_error_code="ThrottlingException", http_status_code=400)
    expect_delete(env, event("IN_PROGRESS"))
    env.stub.add_client_error(
        "get_resource_request_status", service_error_code="ThrottlingException", http_status_code=400
    )
    expect_poll(env, event("SUCCESS"))

    assert env.provider.delete(env.clients, ref()) == "deleted"
    assert len(env.clock.sleeps) == 3  # throttle backoff, poll wait, throttle backoff


def test_it_gives_up_on_throttling_after_its_retries(env):
    provider = CloudControlProvider(poll_interval=1.0, throttle_retries=2, **_hooks(env.clock))
    for _ in range(3):
        env.stub.add_client_error("delete_resource", service_error_code="ThrottlingException", http_status_code=400)

    with pytest.raises(ProviderError) as err:
        provider.delete(env.clients, ref())

    assert err.value.aws_code == "ThrottlingException"


def test_it_stops_waiting_at_the_deadline_and_names_the_request(env):
    provider = CloudControlProvider(poll_interval=10.0, backoff=1.0, timeout=25.0, **_hooks(env.clock))
    expect_delete(env, event("IN_PROGRESS"))
    for _ in range(3):
        expect_poll(env, event("IN_PROGRESS"))

    with pytest.raises(ProviderError) as err:
        provider.delete(env.clients, ref())

    assert "still IN_PROGRESS" in str(err.value) and TOKEN in str(err.value)
    assert env.clock.sleeps == [10.0, 10.0, 10.0]  # polls at 10, 20, 30 s; 30 s is past the 25 s deadline


def test_it_routes_a_cc_api_row_of_an_sdk_type_through_cloud_control(env, monkeypatch):
    from engine import providers

    monkeypatch.setattr(providers, "CLOUD_CONTROL", env.provider)
    env.stub.add_response(
        "delete_resource",
        {"ProgressEvent": {"TypeName": "AWS::SQS::Queue", "RequestToken": TOKEN, "OperationStatus": "SUCCESS"}},
        {"TypeName": "AWS::SQS::Queue", "Identifier": "https://sqs.us-east-1.amazonaws.com/111111111111/q"},
    )

    r = ref("AWS::SQS::Queue", "https://sqs.us-east-1.amazonaws.com/111111111111/q", provisioned_by="cc-api")
    assert delete_resource(env.clients, r) == "deleted"


@pytest.mark.parametrize(
    ("case", "row"),
    [
        ("no physical id", ref(physical_id=None)),
        ("blank physical id", ref(physical_id="  ")),
        ("redacted physical id", ref(physical_id="***")),
        ("custom resource", ref("Custom::Thing", "abc", provisioned_by="sdk")),
        ("nested stack row", ref("AWS::CloudFormation::Stack", "arn:aws:cloudformation:...", provisioned_by="sdk")),
        ("layer version", ref("AWS::Lambda::LayerVersion", "arn:aws:lambda:...:layer:l:1", provisioned_by="sdk")),
    ],
)
def test_it_skips_without_calling_cloud_control(env, case, row):
    with pytest.raises(Skip) as skipped:
        env.provider.delete(env.clients, row)

    assert str(skipped.value)
    # assert_no_pending_responses + no queued responses: any call would have raised.


def test_it_refuses_a_final_snapshot_without_calling_cloud_control(env):
    assert env.provider.supports_snapshot is False

    with pytest.raises(ProviderError, match="Snapshot"):
        env.provider.delete(env.clients, ref("AWS::RDS::DBInstance", "db-1"), snapshot=True)


def test_it_counts_cdk_metadata_as_nothing_to_delete(env):
    assert env.provider.delete(env.clients, ref("AWS::CDK::Metadata", None, provisioned_by=None)) == "not-found"
