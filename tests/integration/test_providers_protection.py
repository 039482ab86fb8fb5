"""Deletion protection read/set (issue 12, seed 004's `--remove-protection` table) against a moto
server: a round trip per type moto models, and botocore's Stubber where it does not — Logs
(PutLogGroupDeletionProtection not implemented), Auto Scaling (DeletionProtection not
modelled) and DocumentDB (moto serves it from its RDS backend, which refuses engine docdb).
The Stubber stands in for AWS, never for the provider under test. Split from
test_providers_destroy_more.py, whose fixtures and cases it reuses."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.providers import (
    PROTECTION_TYPES,
    Clients,
    ProviderError,
    ResourceRef,
    delete_resource,
    read_protection,
    set_protection,
)
from tests.integration.test_providers import A1, Moto, ref
from tests.integration.test_providers_destroy_more import _db_cluster, _db_instance, stubbed

pytestmark = pytest.mark.integration


@pytest.fixture
def moto(aws: Any) -> Moto:
    return Moto(aws)


@pytest.fixture
def clients(aws: Any) -> Clients:
    return Clients(aws.account_session(A1))


# -- protection ------------------------------------------------------------------------------


def _protected_table(m: Moto) -> ResourceRef:
    m("dynamodb").create_table(
        TableName="more-table",
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return ref("AWS::DynamoDB::Table", "more-table")


def _ec2_instance(m: Moto) -> ResourceRef:
    return ref(
        "AWS::EC2::Instance",
        m("ec2").run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"],
    )


def _load_balancer(m: Moto) -> ResourceRef:
    ec2 = m("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"us-east-1{az}")["Subnet"][
            "SubnetId"
        ]
        for i, az in ((1, "a"), (2, "b"))
    ]
    arn = m("elbv2").create_load_balancer(Name="more-lb", Subnets=subnets)["LoadBalancers"][0]["LoadBalancerArn"]
    return ref("AWS::ElasticLoadBalancingV2::LoadBalancer", arn)


def _user_pool(m: Moto) -> ResourceRef:
    pool = m("cognito-idp").create_user_pool(
        PoolName="more-pool", AdminCreateUserConfig={"AllowAdminCreateUserOnly": True}
    )["UserPool"]
    return ref("AWS::Cognito::UserPool", pool["Id"])


def _emr(m: Moto) -> ResourceRef:
    flow = m("emr").run_job_flow(
        Name="more-emr",
        ReleaseLabel="emr-6.0.0",
        JobFlowRole="r",
        ServiceRole="s",
        Instances={
            "MasterInstanceType": "m5.xlarge",
            "SlaveInstanceType": "m5.xlarge",
            "InstanceCount": 1,
            "KeepJobFlowAliveWhenNoSteps": True,
        },
    )
    return ref("AWS::EMR::Cluster", flow["JobFlowId"])


def _neptune_instance(m: Moto) -> ResourceRef:
    _db_cluster(m, "neptune", "neptune")
    m("neptune").create_db_instance(
        DBInstanceIdentifier="more-nep-1",
        DBInstanceClass="db.r5.large",
        Engine="neptune",
        DBClusterIdentifier="more-neptune-cluster",
    )
    return ref("AWS::Neptune::DBInstance", "more-nep-1")


PROTECTED: dict[str, Callable[[Moto], ResourceRef]] = {
    "AWS::DynamoDB::Table": _protected_table,
    "AWS::DynamoDB::GlobalTable": lambda m: ref("AWS::DynamoDB::GlobalTable", _protected_table(m).physical_id),
    "AWS::RDS::DBInstance": _db_instance,
    "AWS::RDS::DBCluster": _db_cluster,
    "AWS::Neptune::DBCluster": lambda m: _db_cluster(m, "neptune", "neptune"),
    "AWS::Neptune::DBInstance": _neptune_instance,
    "AWS::EC2::Instance": _ec2_instance,
    "AWS::ElasticLoadBalancingV2::LoadBalancer": _load_balancer,
    "AWS::Cognito::UserPool": _user_pool,
    "AWS::EMR::Cluster": _emr,
}
STUBBED_PROTECTION = ("AWS::Logs::LogGroup", "AWS::AutoScaling::AutoScalingGroup", "AWS::DocDB::DBCluster")
UNSUPPORTED_PROTECTION = (
    "AWS::DSQL::Cluster",
    "AWS::NeptuneGraph::Graph",
    "AWS::SMSVOICE::ProtectConfiguration",
    "AWS::VerifiedPermissions::PolicyStore",
    "AWS::EKS::Cluster",
    "AWS::RDS::GlobalCluster",
    "AWS::DocDB::GlobalCluster",
)


def test_it_covers_every_protection_type_of_the_seed_table():
    assert set(PROTECTED) | set(STUBBED_PROTECTION) | set(UNSUPPORTED_PROTECTION) == PROTECTION_TYPES


@pytest.mark.parametrize("resource_type", sorted(PROTECTED))
def test_it_reads_and_sets_protection_round_trip(aws, moto, clients, resource_type):
    r = PROTECTED[resource_type](moto)
    assert read_protection(clients, r) is False

    set_protection(clients, r, True)
    assert read_protection(clients, r) is True
    set_protection(clients, r, True)  # idempotent
    assert read_protection(clients, r) is True

    set_protection(clients, r, False)
    assert read_protection(clients, r) is False


def test_it_lets_a_protected_table_go_once_protection_is_off(aws, moto, clients):
    r = _protected_table(moto)
    set_protection(clients, r, True)
    with pytest.raises(ProviderError, match="DeletionProtectionEnabled"):
        delete_resource(clients, r)
    set_protection(clients, r, False)
    assert delete_resource(clients, r) == "deleted"


def test_it_lets_a_protected_rds_instance_go_once_protection_is_off(aws, moto, clients):
    r = _db_instance(moto)
    set_protection(clients, r, True)
    with pytest.raises(ProviderError, match="InvalidParameterCombination"):
        delete_resource(clients, r)
    set_protection(clients, r, False)
    assert delete_resource(clients, r) == "deleted"


def test_it_keeps_a_user_pools_own_settings_when_flipping_its_guard(aws, moto, clients):
    r = _user_pool(moto)
    set_protection(clients, r, True)
    pool = moto("cognito-idp").describe_user_pool(UserPoolId=r.physical_id)["UserPool"]
    assert pool["DeletionProtection"] == "ACTIVE"
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True


def test_it_reads_a_gone_resource_as_unprotected_and_none_for_a_type_without_protection(aws, clients):
    assert read_protection(clients, ref("AWS::RDS::DBInstance", "no-such-db")) is False
    assert read_protection(clients, ref("AWS::SQS::Queue", "https://sqs.us-east-1.amazonaws.com/1/q")) is None
    with pytest.raises(ProviderError, match="no deletion protection"):
        set_protection(clients, ref("AWS::SQS::Queue", "q"), False)


@pytest.mark.parametrize("resource_type", UNSUPPORTED_PROTECTION)
def test_it_refuses_the_cloud_control_protection_types_clearly(aws, clients, resource_type):
    aws.reset_counts()
    for call in (
        lambda: read_protection(clients, ref(resource_type, "x")),
        lambda: set_protection(clients, ref(resource_type, "x"), False),
    ):
        with pytest.raises(ProviderError, match="not supported by cdkd Admin"):
            call()
    assert sum(aws.requests.values()) == 0


def test_it_round_trips_log_group_protection(aws):
    """Stubber: moto does not implement PutLogGroupDeletionProtection."""
    client, stub, get = stubbed("logs")
    r = ref("AWS::Logs::LogGroup", "/aws/lambda/more")

    def groups(on):
        return {
            "logGroups": [
                {"logGroupName": "/aws/lambda/more-x"},
                {"logGroupName": "/aws/lambda/more", "deletionProtectionEnabled": on},
            ]
        }

    stub.add_response(
        "put_log_group_deletion_protection",
        {},
        {"logGroupIdentifier": "/aws/lambda/more", "deletionProtectionEnabled": True},
    )
    stub.add_response("describe_log_groups", groups(True), {"logGroupNamePrefix": "/aws/lambda/more"})
    stub.add_response(
        "put_log_group_deletion_protection",
        {},
        {"logGroupIdentifier": "/aws/lambda/more", "deletionProtectionEnabled": False},
    )
    stub.add_response("describe_log_groups", groups(False), {"logGroupNamePrefix": "/aws/lambda/more"})
    with stub:
        set_protection(get, r, True)
        assert read_protection(get, r) is True
        set_protection(get, r, False)
        assert read_protection(get, r) is False
    stub.assert_no_pending_responses()


def test_it_round_trips_docdb_cluster_protection(aws):
    """Stubber: moto has no DocumentDB."""
    client, stub, get = stubbed("docdb")
    r = ref("AWS::DocDB::DBCluster", "more-docs")
    stub.add_response(
        "modify_db_cluster",
        {},
        {"DBClusterIdentifier": "more-docs", "DeletionProtection": True, "ApplyImmediately": True},
    )
    stub.add_response(
        "describe_db_clusters", {"DBClusters": [{"DeletionProtection": True}]}, {"DBClusterIdentifier": "more-docs"}
    )
    stub.add_response(
        "modify_db_cluster",
        {},
        {"DBClusterIdentifier": "more-docs", "DeletionProtection": False, "ApplyImmediately": True},
    )
    stub.add_response(
        "describe_db_clusters", {"DBClusters": [{"DeletionProtection": False}]}, {"DBClusterIdentifier": "more-docs"}
    )
    with stub:
        set_protection(get, r, True)
        assert read_protection(get, r) is True
        set_protection(get, r, False)
        assert read_protection(get, r) is False
    stub.assert_no_pending_responses()


class TwoStubs:
    """Clients for the Auto Scaling test: a stubbed autoscaling client and a stubbed ec2 one."""

    def __init__(self) -> None:
        self.asg, self.asg_stub, _ = stubbed("autoscaling")
        self.ec2, self.ec2_stub, _ = stubbed("ec2")

    def __call__(self, service: str, region: str) -> Any:
        return {"autoscaling": self.asg, "ec2": self.ec2}[service]


def test_it_restores_an_auto_scaling_group_to_the_level_and_instances_it_turned_off(aws):
    """Stubber: moto does not model an Auto Scaling group's DeletionProtection."""
    c = TwoStubs()
    r = ref("AWS::AutoScaling::AutoScalingGroup", "more-asg")
    group = {
        "AutoScalingGroups": [
            {
                "AutoScalingGroupName": "more-asg",
                "MinSize": 0,
                "MaxSize": 2,
                "DesiredCapacity": 2,
                "DefaultCooldown": 300,
                "AvailabilityZones": ["us-east-1a"],
                "HealthCheckType": "EC2",
                "CreatedTime": datetime(2026, 1, 1, tzinfo=UTC),
                "DeletionProtection": "prevent-force-deletion",
                "Instances": [
                    {
                        "InstanceId": iid,
                        "AvailabilityZone": "us-east-1a",
                        "LifecycleState": "InService",
                        "HealthStatus": "Healthy",
                        "ProtectedFromScaleIn": False,
                    }
                    for iid in ("i-0guarded", "i-0open")
                ],
            }
        ]
    }
    attr = lambda iid, on: {"InstanceId": iid, "DisableApiTermination": {"Value": on}}  # noqa: E731
    c.asg_stub.add_response("describe_auto_scaling_groups", group, {"AutoScalingGroupNames": ["more-asg"]})
    c.asg_stub.add_response("describe_auto_scaling_groups", group, {"AutoScalingGroupNames": ["more-asg"]})
    c.asg_stub.add_response(
        "update_auto_scaling_group", {}, {"AutoScalingGroupName": "more-asg", "DeletionProtection": "none"}
    )
    c.asg_stub.add_response(
        "update_auto_scaling_group",
        {},
        {"AutoScalingGroupName": "more-asg", "DeletionProtection": "prevent-force-deletion"},
    )
    c.ec2_stub.add_response(
        "describe_instance_attribute",
        attr("i-0guarded", True),
        {"InstanceId": "i-0guarded", "Attribute": "disableApiTermination"},
    )
    c.ec2_stub.add_response(
        "describe_instance_attribute",
        attr("i-0open", False),
        {"InstanceId": "i-0open", "Attribute": "disableApiTermination"},
    )
    c.ec2_stub.add_response(
        "modify_instance_attribute", {}, {"InstanceId": "i-0guarded", "DisableApiTermination": {"Value": False}}
    )
    c.ec2_stub.add_response(
        "modify_instance_attribute", {}, {"InstanceId": "i-0guarded", "DisableApiTermination": {"Value": True}}
    )
    with c.asg_stub, c.ec2_stub:
        assert read_protection(c, r) is True
        set_protection(c, r, False)
        set_protection(c, r, True)  # the compensation: only what was on comes back
    c.asg_stub.assert_no_pending_responses()
    c.ec2_stub.assert_no_pending_responses()
