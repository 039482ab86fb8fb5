"""The destroy-side providers of issue 12 against a moto server: the types Cloud Control cannot
delete (bucket policy, IAM user / group / instance profile / user-to-group addition, Lambda
layer version, Route 53 hosted zone, wait conditions) and final snapshots (RDS, Neptune,
DocumentDB, ElastiCache, Redshift, EC2 volume). Protection read/set is in
test_providers_protection.py.

Setup and checks talk to moto directly; the code under test goes through the proxy. Where
moto lacks an API the test says so and uses botocore's Stubber for that service's client:
DocumentDB (moto serves it from its RDS backend, which refuses engine `docdb`) and
ElastiCache's final snapshot on delete and replication-group snapshot source (moto ignores
FinalSnapshotIdentifier and models no member cache clusters). The Stubber stands in for AWS,
never for the provider under test."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from engine.providers import (
    CLOUD_CONTROL,
    REGISTRY,
    Clients,
    ProviderError,
    ResourceRef,
    Skip,
    delete_resource,
    provider_for,
)
from engine.providers.elasticache import ReplicationGroupProvider
from engine.providers.snapshots import final_snapshot_id
from tests.integration.test_providers import A1, CASES, POLICY, TRUST, Moto, gone, ref

pytestmark = pytest.mark.integration


@pytest.fixture
def moto(aws: Any) -> Moto:
    return Moto(aws)


@pytest.fixture
def clients(aws: Any) -> Clients:
    return Clients(aws.account_session(A1))


def stubbed(service: str) -> tuple[Any, Stubber, Callable[[str, str], Any]]:
    """A real botocore client of `service` under a Stubber, and a Clients-shaped callable."""
    client = boto3.client(
        service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x", endpoint_url="http://stub"
    )
    stub = Stubber(client)

    def get(name: str, region: str) -> Any:
        assert name == service, f"unexpected client {name}"
        return client

    return client, stub, get


# -- one case per new SDK type -------------------------------------------------------------


@dataclass
class Case:
    make: Callable[[Moto], ResourceRef]
    is_gone: Callable[[Moto, ResourceRef], bool]


def _bucket_policy(m: Moto) -> ResourceRef:
    m("s3").create_bucket(Bucket="more-policy-bucket")
    m("s3").put_bucket_policy(
        Bucket="more-policy-bucket",
        Policy='{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:*",'
        '"Resource":"arn:aws:s3:::more-policy-bucket/*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}',
    )
    return ref("AWS::S3::BucketPolicy", "more-policy-bucket", {"Bucket": "more-policy-bucket"})


def _user(m: Moto) -> ResourceRef:
    iam = m("iam")
    iam.create_user(UserName="more-user")
    iam.create_group(GroupName="more-user-group")
    iam.add_user_to_group(GroupName="more-user-group", UserName="more-user")
    arn = iam.create_policy(PolicyName="more-user-mp", PolicyDocument=POLICY)["Policy"]["Arn"]
    iam.attach_user_policy(UserName="more-user", PolicyArn=arn)
    iam.put_user_policy(UserName="more-user", PolicyName="inline", PolicyDocument=POLICY)
    iam.create_access_key(UserName="more-user")
    iam.create_login_profile(UserName="more-user", Password="Passw0rd!Passw0rd")
    return ref("AWS::IAM::User", "more-user")


def _group(m: Moto) -> ResourceRef:
    iam = m("iam")
    iam.create_group(GroupName="more-group")
    iam.create_user(UserName="more-group-member")
    iam.add_user_to_group(GroupName="more-group", UserName="more-group-member")
    arn = iam.create_policy(PolicyName="more-group-mp", PolicyDocument=POLICY)["Policy"]["Arn"]
    iam.attach_group_policy(GroupName="more-group", PolicyArn=arn)
    iam.put_group_policy(GroupName="more-group", PolicyName="inline", PolicyDocument=POLICY)
    return ref("AWS::IAM::Group", "more-group")


def _instance_profile(m: Moto) -> ResourceRef:
    iam = m("iam")
    iam.create_role(RoleName="more-profile-role", AssumeRolePolicyDocument=TRUST)
    iam.create_instance_profile(InstanceProfileName="more-profile")
    iam.add_role_to_instance_profile(InstanceProfileName="more-profile", RoleName="more-profile-role")
    return ref("AWS::IAM::InstanceProfile", "more-profile")


def _membership(m: Moto) -> ResourceRef:
    iam = m("iam")
    iam.create_group(GroupName="more-members")
    for user in ("more-m1", "more-m2", "more-bystander"):
        iam.create_user(UserName=user)
        iam.add_user_to_group(GroupName="more-members", UserName=user)
    # cdkd's physical id for the addition names nothing in IAM; the properties address it.
    return ref(
        "AWS::IAM::UserToGroupAddition",
        "Stack-Members-1A2B",
        {"GroupName": "more-members", "Users": ["more-m1", "more-m2"]},
    )


def _membership_gone(m: Moto, r: ResourceRef) -> bool:
    users = {u["UserName"] for u in m("iam").get_group(GroupName="more-members")["Users"]}
    return not users & {"more-m1", "more-m2"}


def _layer(m: Moto) -> ResourceRef:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("python/lib.py", "X = 1\n")
    arn = m("lambda").publish_layer_version(LayerName="more-layer", Content={"ZipFile": buf.getvalue()})
    return ref("AWS::Lambda::LayerVersion", arn["LayerVersionArn"])


def _layer_gone(m: Moto, r: ResourceRef) -> bool:
    return gone(
        lambda: m("lambda").get_layer_version(LayerName="more-layer", VersionNumber=1), "ResourceNotFoundException"
    )


def _zone(m: Moto) -> ResourceRef:
    r53 = m("route53")
    zone = r53.create_hosted_zone(Name="more.example.com", CallerReference="more")["HostedZone"]["Id"]
    changes = [
        {
            "Action": "CREATE",
            "ResourceRecordSet": {"Name": name, "Type": kind, "TTL": 60, "ResourceRecords": [{"Value": value}]},
        }
        for name, kind, value in (
            ("www.more.example.com", "A", "192.0.2.1"),
            ("mail.more.example.com", "TXT", '"v=spf1 -all"'),
            ("sub.more.example.com", "NS", "ns1.example.net"),
        )
    ]
    r53.change_resource_record_sets(HostedZoneId=zone, ChangeBatch={"Changes": changes})
    return ref("AWS::Route53::HostedZone", zone.rsplit("/", 1)[1])


def _db_instance(m: Moto) -> ResourceRef:
    m("rds").create_db_instance(
        DBInstanceIdentifier="more-db",
        DBInstanceClass="db.t3.micro",
        Engine="postgres",
        MasterUsername="admin1",
        MasterUserPassword="password1",
        AllocatedStorage=20,
    )
    return ref("AWS::RDS::DBInstance", "more-db")


def _db_cluster(m: Moto, service: str = "rds", engine: str = "aurora-postgresql") -> ResourceRef:
    kw = {"MasterUsername": "admin1", "MasterUserPassword": "password1"} if service == "rds" else {}
    m(service).create_db_cluster(DBClusterIdentifier=f"more-{service}-cluster", Engine=engine, **kw)
    rtype = "AWS::RDS::DBCluster" if service == "rds" else "AWS::Neptune::DBCluster"
    return ref(rtype, f"more-{service}-cluster")


def _cache_cluster(m: Moto) -> ResourceRef:
    m("elasticache").create_cache_cluster(
        CacheClusterId="more-cache", Engine="redis", CacheNodeType="cache.t3.micro", NumCacheNodes=1
    )
    return ref("AWS::ElastiCache::CacheCluster", "more-cache")


def _cache_gone(m: Moto, r: ResourceRef) -> bool:
    # moto keeps a deleted cluster as "deleting" forever; AWS removes it after a while.
    try:
        found = m("elasticache").describe_cache_clusters(CacheClusterId="more-cache")["CacheClusters"][0]
    except m("elasticache").exceptions.CacheClusterNotFoundFault:
        return True
    return found["CacheClusterStatus"] == "deleting"


def _replication_group(m: Moto) -> ResourceRef:
    m("elasticache").create_replication_group(
        ReplicationGroupId="more-rg",
        ReplicationGroupDescription="x",
        Engine="redis",
        CacheNodeType="cache.t3.micro",
        NumCacheClusters=1,
    )
    return ref("AWS::ElastiCache::ReplicationGroup", "more-rg")


def _rg_gone(m: Moto, r: ResourceRef) -> bool:
    group = m("elasticache").describe_replication_groups(ReplicationGroupId="more-rg")["ReplicationGroups"][0]
    return group["Status"] == "deleting"  # moto's stand-in for gone, as above


def _redshift(m: Moto) -> ResourceRef:
    m("redshift").create_cluster(
        ClusterIdentifier="more-warehouse",
        NodeType="dc2.large",
        MasterUsername="admin1",
        MasterUserPassword="Password1",
        ClusterType="single-node",
    )
    return ref("AWS::Redshift::Cluster", "more-warehouse")


def _volume(m: Moto) -> ResourceRef:
    return ref("AWS::EC2::Volume", m("ec2").create_volume(AvailabilityZone="us-east-1a", Size=1)["VolumeId"])


MORE: dict[str, Case] = {
    "AWS::S3::BucketPolicy": Case(
        _bucket_policy,
        lambda m, r: gone(lambda: m("s3").get_bucket_policy(Bucket=r.physical_id), "NoSuchBucketPolicy"),
    ),
    "AWS::IAM::User": Case(_user, lambda m, r: gone(lambda: m("iam").get_user(UserName="more-user"), "NoSuchEntity")),
    "AWS::IAM::Group": Case(
        _group, lambda m, r: gone(lambda: m("iam").get_group(GroupName="more-group"), "NoSuchEntity")
    ),
    "AWS::IAM::InstanceProfile": Case(
        _instance_profile,
        lambda m, r: gone(lambda: m("iam").get_instance_profile(InstanceProfileName="more-profile"), "NoSuchEntity"),
    ),
    "AWS::IAM::UserToGroupAddition": Case(_membership, _membership_gone),
    "AWS::Lambda::LayerVersion": Case(_layer, _layer_gone),
    "AWS::Route53::HostedZone": Case(
        _zone, lambda m, r: gone(lambda: m("route53").get_hosted_zone(Id=r.physical_id), "NoSuchHostedZone")
    ),
    "AWS::RDS::DBInstance": Case(
        _db_instance,
        lambda m, r: gone(lambda: m("rds").describe_db_instances(DBInstanceIdentifier="more-db"), "DBInstanceNotFound"),
    ),
    "AWS::RDS::DBCluster": Case(
        _db_cluster,
        lambda m, r: gone(
            lambda: m("rds").describe_db_clusters(DBClusterIdentifier=r.physical_id), "DBClusterNotFoundFault"
        ),
    ),
    "AWS::Neptune::DBCluster": Case(
        lambda m: _db_cluster(m, "neptune", "neptune"),
        lambda m, r: gone(
            lambda: m("neptune").describe_db_clusters(DBClusterIdentifier=r.physical_id), "DBClusterNotFoundFault"
        ),
    ),
    "AWS::ElastiCache::CacheCluster": Case(_cache_cluster, _cache_gone),
    "AWS::ElastiCache::ReplicationGroup": Case(_replication_group, _rg_gone),
    "AWS::Redshift::Cluster": Case(
        _redshift,
        lambda m, r: gone(
            lambda: m("redshift").describe_clusters(ClusterIdentifier="more-warehouse"), "ClusterNotFound"
        ),
    ),
    "AWS::EC2::Volume": Case(
        _volume,
        lambda m, r: gone(lambda: m("ec2").describe_volumes(VolumeIds=[r.physical_id]), "InvalidVolume.NotFound"),
    ),
}
NO_AWS = ("AWS::CloudFormation::WaitCondition", "AWS::CloudFormation::WaitConditionHandle")
STUBBED_ONLY = ("AWS::DocDB::DBCluster",)  # moto has no DocumentDB: see its Stubber test


def test_it_has_a_case_for_every_sdk_type_of_either_file():
    from engine.providers.ec2_network import TYPES as EC2_NETWORK  # tests/integration/test_destroy_cdk_shapes.py

    assert set(CASES) | set(MORE) | set(NO_AWS) | set(STUBBED_ONLY) | set(EC2_NETWORK) == set(REGISTRY)


@pytest.mark.parametrize("resource_type", sorted(MORE))
def test_it_deletes_each_new_type_and_then_finds_it_gone(aws, moto, clients, resource_type):
    case = MORE[resource_type]
    r = case.make(moto)
    assert not case.is_gone(moto, r)
    assert provider_for(r) is REGISTRY[resource_type]  # never the Cloud Control skip any more

    assert delete_resource(clients, r) == "deleted"
    assert case.is_gone(moto, r)

    assert delete_resource(clients, r) == "not-found"
    assert case.is_gone(moto, r)


def test_it_strips_a_user_of_everything_iam_refuses_a_delete_over(aws, moto, clients):
    r = _user(moto)
    iam = moto("iam")
    assert delete_resource(clients, r) == "deleted"
    assert iam.get_group(GroupName="more-user-group")["Users"] == []  # the group is its own resource
    assert iam.get_policy(PolicyArn=f"arn:aws:iam::{A1}:policy/more-user-mp")["Policy"]["AttachmentCount"] == 0


def test_it_removes_only_the_recorded_users_from_the_group(aws, moto, clients):
    r = _membership(moto)
    assert delete_resource(clients, r) == "deleted"
    users = [u["UserName"] for u in moto("iam").get_group(GroupName="more-members")["Users"]]
    assert users == ["more-bystander"]


def test_it_keeps_the_apex_records_until_the_zone_goes(aws, moto, clients):
    r = _zone(moto)
    r53 = moto("route53")
    assert delete_resource(clients, ref("AWS::Route53::HostedZone", f"/hostedzone/{r.physical_id}")) == "deleted"
    assert gone(lambda: r53.get_hosted_zone(Id=r.physical_id), "NoSuchHostedZone")


@pytest.mark.parametrize("resource_type", NO_AWS)
def test_it_deletes_a_wait_condition_without_calling_aws(aws, clients, resource_type):
    aws.reset_counts()
    r = ref(resource_type, "cdkd-wait-condition-handle-Handle-0b7c")
    assert delete_resource(clients, r) == "deleted"
    assert delete_resource(clients, r) == "deleted"  # nothing in AWS, so nothing can be "not found"
    assert sum(aws.requests.values()) == 0


SKIPS = {
    "membership with no properties": ref("AWS::IAM::UserToGroupAddition", "m", {}),
    "membership missing Users": ref("AWS::IAM::UserToGroupAddition", "m", {"GroupName": "g"}),
    "membership Users a string": ref("AWS::IAM::UserToGroupAddition", "m", {"GroupName": "g", "Users": "u"}),
    "membership Users masked": ref("AWS::IAM::UserToGroupAddition", "m", {"GroupName": "g", "Users": ["***"]}),
    "membership Users secret-derived": ref(
        "AWS::IAM::UserToGroupAddition",
        "m",
        {"GroupName": "g", "Users": ["{{resolve:secretsmanager:u:SecretString:n}}"]},
    ),
    "layer version id no ARN": ref("AWS::Lambda::LayerVersion", "more-layer:1"),
    "layer version ARN without a version": ref("AWS::Lambda::LayerVersion", f"arn:aws:lambda:us-east-1:{A1}:layer:l"),
    "user id a role ARN": ref("AWS::IAM::User", f"arn:aws:iam::{A1}:role/r"),
    "zone with no physical id": ref("AWS::Route53::HostedZone", None),
}


@pytest.mark.parametrize("case", sorted(SKIPS))
def test_it_skips_a_new_type_row_it_cannot_address_without_calling_aws(aws, clients, case):
    aws.reset_counts()
    with pytest.raises(Skip) as skipped:
        delete_resource(clients, SKIPS[case])
    assert str(skipped.value)
    assert sum(aws.requests.values()) == 0


def test_it_names_the_group_when_iam_refuses_the_delete(aws, moto, clients):
    _group(moto)
    aws.proxy.deny_operation("DeleteGroup")
    with pytest.raises(ProviderError) as err:
        delete_resource(clients, ref("AWS::IAM::Group", "more-group", logical_id="Admins"))
    assert err.value.aws_code == "AccessDenied"
    assert "Admins" in str(err.value) and "DeleteGroup" in str(err.value)


# -- final snapshots -------------------------------------------------------------------------


def test_it_builds_cdkd_snapshot_identifiers():
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert final_snapshot_id("My_DB.Prod", now=at) == "my-db-prod-final-20260102-030405"
    assert final_snapshot_id("9lives--x-", now=at) == "r9lives-x-final-20260102-030405"
    long = "a" * 27 + "-bcd"
    assert final_snapshot_id(long, max_length=28, now=at) == "a" * 27 + "-final-20260102-030405"


def _db_snapshots(m: Moto, prefix: str) -> list[str]:
    return [
        s["DBSnapshotIdentifier"]
        for s in m("rds").describe_db_snapshots()["DBSnapshots"]
        if s["DBSnapshotIdentifier"].startswith(prefix)
    ]


def _cluster_snapshots(m: Moto, service: str, prefix: str) -> list[str]:
    found = m(service).describe_db_cluster_snapshots()["DBClusterSnapshots"]
    return [s["DBClusterSnapshotIdentifier"] for s in found if s["DBClusterSnapshotIdentifier"].startswith(prefix)]


@pytest.mark.parametrize("snapshot", [True, False])
def test_it_snapshots_an_rds_instance_only_when_asked(aws, moto, clients, snapshot):
    r = _db_instance(moto)
    assert delete_resource(clients, r, snapshot=snapshot) == "deleted"
    assert gone(lambda: moto("rds").describe_db_instances(DBInstanceIdentifier="more-db"), "DBInstanceNotFound")
    assert len(_db_snapshots(moto, "more-db-final-")) == (1 if snapshot else 0)


def test_it_takes_no_instance_snapshot_of_a_cluster_member(aws, moto, clients):
    _db_cluster(moto)
    moto("rds").create_db_instance(
        DBInstanceIdentifier="more-member",
        DBInstanceClass="db.r5.large",
        Engine="aurora-postgresql",
        DBClusterIdentifier="more-rds-cluster",
    )
    assert delete_resource(clients, ref("AWS::RDS::DBInstance", "more-member"), snapshot=True) == "deleted"
    assert _db_snapshots(moto, "more-member-final-") == []  # the cluster's snapshot covers it


@pytest.mark.parametrize(("service", "engine"), [("rds", "aurora-postgresql"), ("neptune", "neptune")])
@pytest.mark.parametrize("snapshot", [True, False])
def test_it_snapshots_a_cluster_only_when_asked(aws, moto, clients, service, engine, snapshot):
    r = _db_cluster(moto, service, engine)
    assert delete_resource(clients, r, snapshot=snapshot) == "deleted"
    assert len(_cluster_snapshots(moto, service, f"more-{service}-cluster-final-")) == (1 if snapshot else 0)


def test_it_deletes_a_cc_api_rds_row_through_rds_and_refuses_its_snapshot(aws, moto, clients):
    r = _db_instance(moto)
    cc_row = ref("AWS::RDS::DBInstance", "more-db", provisioned_by="cc-api")
    assert provider_for(cc_row) is REGISTRY["AWS::RDS::DBInstance"]  # Cloud Control would snapshot unasked

    aws.reset_counts()
    with pytest.raises(ProviderError, match="Cloud Control"):
        delete_resource(clients, cc_row, snapshot=True)
    assert sum(aws.requests.values()) == 0
    assert delete_resource(clients, cc_row) == "deleted"
    assert _db_snapshots(moto, "more-db-final-") == []
    assert r.physical_id == "more-db"


def test_it_leaves_a_cc_api_neptune_cluster_in_a_global_cluster_on_cloud_control():
    row = ref("AWS::Neptune::DBCluster", "n", {"GlobalClusterIdentifier": "g"}, provisioned_by="cc-api")
    assert provider_for(row) is CLOUD_CONTROL


@pytest.mark.parametrize("snapshot", [True, False])
def test_it_snapshots_a_redshift_cluster_before_deleting_it_only_when_asked(aws, moto, clients, snapshot):
    r = _redshift(moto)
    assert delete_resource(clients, r, snapshot=snapshot) == "deleted"
    found = moto("redshift").describe_cluster_snapshots(SnapshotType="manual")["Snapshots"]
    names = [s["SnapshotIdentifier"] for s in found if s["SnapshotIdentifier"].startswith("more-warehouse-final-")]
    assert len(names) == (1 if snapshot else 0)
    assert gone(lambda: moto("redshift").describe_clusters(ClusterIdentifier="more-warehouse"), "ClusterNotFound")


def _tagged(m: Moto, volume_id: str) -> list[dict[str, Any]]:
    return m("ec2").describe_snapshots(
        OwnerIds=["self"], Filters=[{"Name": "tag:cdkd:final-snapshot-of", "Values": [volume_id]}]
    )["Snapshots"]


@pytest.mark.parametrize("snapshot", [True, False])
def test_it_snapshots_a_volume_with_cdkds_tag_only_when_asked(aws, moto, clients, snapshot):
    r = _volume(moto)
    assert delete_resource(clients, r, snapshot=snapshot) == "deleted"
    snaps = _tagged(moto, r.physical_id)
    assert len(snaps) == (1 if snapshot else 0)
    if snapshot:
        assert snaps[0]["VolumeId"] == r.physical_id


def test_it_reuses_the_tagged_snapshot_a_previous_run_took(aws, moto, clients):
    r = _volume(moto)
    earlier = moto("ec2").create_snapshot(
        VolumeId=r.physical_id,
        TagSpecifications=[
            {"ResourceType": "snapshot", "Tags": [{"Key": "cdkd:final-snapshot-of", "Value": r.physical_id}]}
        ],
    )["SnapshotId"]
    assert delete_resource(clients, r, snapshot=True) == "deleted"
    assert [s["SnapshotId"] for s in _tagged(moto, r.physical_id)] == [earlier]


def test_it_passes_the_final_snapshot_to_a_cache_cluster_delete(aws):
    """Stubber: moto accepts FinalSnapshotIdentifier on DeleteCacheCluster but takes no snapshot."""
    client, stub, get = stubbed("elasticache")
    cluster = {"CacheClusters": [{"CacheClusterId": "more-cache", "CacheClusterStatus": "available"}]}
    stub.add_response("describe_cache_clusters", cluster, {"CacheClusterId": "more-cache"})
    stub.add_response("delete_cache_cluster", {}, {"CacheClusterId": "more-cache", "FinalSnapshotIdentifier": ANY})
    stub.add_response("describe_cache_clusters", cluster, {"CacheClusterId": "more-cache"})
    stub.add_response("delete_cache_cluster", {}, {"CacheClusterId": "more-cache"})
    with stub:
        assert (
            REGISTRY["AWS::ElastiCache::CacheCluster"].delete(
                get, ref("AWS::ElastiCache::CacheCluster", "more-cache"), snapshot=True
            )
            == "deleted"
        )
        assert (
            REGISTRY["AWS::ElastiCache::CacheCluster"].delete(get, ref("AWS::ElastiCache::CacheCluster", "more-cache"))
            == "deleted"
        )
    stub.assert_no_pending_responses()


def _group_shape(cluster_enabled: bool) -> dict[str, Any]:
    return {
        "ReplicationGroupId": "more-rg",
        "Status": "available",
        "ClusterEnabled": cluster_enabled,
        "MemberClusters": ["more-rg-002", "more-rg-001"],
        "NodeGroups": [
            {
                "NodeGroupId": "0001",
                "NodeGroupMembers": [
                    {"CacheClusterId": "more-rg-002", "CurrentRole": "replica"},
                    {"CacheClusterId": "more-rg-001", "CurrentRole": "primary"},
                ],
            }
        ],
    }


@pytest.mark.parametrize(
    ("cluster_enabled", "source"),
    [(False, {"CacheClusterId": "more-rg-001"}), (True, {"ReplicationGroupId": "more-rg"})],
)
def test_it_snapshots_a_replication_group_from_the_source_its_cluster_mode_needs(aws, cluster_enabled, source):
    """Stubber: moto models no member cache clusters, so the primary-member path cannot run there."""
    client, stub, get = stubbed("elasticache")
    group = {"ReplicationGroups": [_group_shape(cluster_enabled)]}
    stub.add_response("describe_replication_groups", group, {"ReplicationGroupId": "more-rg"})
    # An available snapshot of an earlier generation under the prefix is not adopted.
    old = {"SnapshotName": "more-rg-final-20250101-000000", "SnapshotStatus": "available"}
    stub.add_response("describe_snapshots", {"Snapshots": [old]}, source)
    stub.add_response("create_snapshot", {"Snapshot": {}}, {"SnapshotName": ANY, **source})
    stub.add_response(
        "describe_snapshots",
        {"Snapshots": [{"SnapshotName": "x", "SnapshotStatus": "available"}]},
        {"SnapshotName": ANY},
    )
    stub.add_response("describe_replication_groups", group, {"ReplicationGroupId": "more-rg"})
    stub.add_response("delete_replication_group", {}, {"ReplicationGroupId": "more-rg", "RetainPrimaryCluster": False})
    provider = ReplicationGroupProvider(sleep=lambda s: None)
    with stub:
        assert provider.delete(get, ref("AWS::ElastiCache::ReplicationGroup", "more-rg"), snapshot=True) == "deleted"
    stub.assert_no_pending_responses()


def test_it_resumes_an_in_flight_replication_group_snapshot(aws):
    """Stubber, as above: a re-run waits on the snapshot still creating instead of taking another."""
    client, stub, get = stubbed("elasticache")
    group = {"ReplicationGroups": [_group_shape(True)]}
    stub.add_response("describe_replication_groups", group, {"ReplicationGroupId": "more-rg"})
    creating = {"SnapshotName": "more-rg-final-20260101-000000", "SnapshotStatus": "creating"}
    stub.add_response("describe_snapshots", {"Snapshots": [creating]}, {"ReplicationGroupId": "more-rg"})
    stub.add_response("describe_snapshots", {"Snapshots": [creating]}, {"SnapshotName": creating["SnapshotName"]})
    done = {**creating, "SnapshotStatus": "available"}
    stub.add_response("describe_snapshots", {"Snapshots": [done]}, {"SnapshotName": creating["SnapshotName"]})
    stub.add_response("describe_replication_groups", group, {"ReplicationGroupId": "more-rg"})
    stub.add_response("delete_replication_group", {}, {"ReplicationGroupId": "more-rg", "RetainPrimaryCluster": False})
    slept: list[float] = []
    with stub:
        assert (
            ReplicationGroupProvider(sleep=slept.append).delete(
                get, ref("AWS::ElastiCache::ReplicationGroup", "more-rg"), snapshot=True
            )
            == "deleted"
        )
    stub.assert_no_pending_responses()
    assert len(slept) == 1


@pytest.mark.parametrize("snapshot", [True, False])
def test_it_deletes_a_docdb_cluster_with_or_without_its_final_snapshot(aws, snapshot):
    """Stubber: moto has no DocumentDB (its RDS backend refuses engine docdb)."""
    client, stub, get = stubbed("docdb")
    found = {"DBClusters": [{"DBClusterIdentifier": "more-docs", "Status": "available"}]}
    stub.add_response("describe_db_clusters", found, {"DBClusterIdentifier": "more-docs"})
    params: dict[str, Any] = {"DBClusterIdentifier": "more-docs", "SkipFinalSnapshot": not snapshot}
    if snapshot:
        params["FinalDBSnapshotIdentifier"] = ANY
    stub.add_response("delete_db_cluster", {}, params)
    stub.add_client_error("describe_db_clusters", "DBClusterNotFoundFault", http_status_code=404)
    stub.add_client_error("describe_db_clusters", "DBClusterNotFoundFault", http_status_code=404)
    with stub:
        r = ref("AWS::DocDB::DBCluster", "more-docs")
        assert REGISTRY["AWS::DocDB::DBCluster"].delete(get, r, snapshot=snapshot) == "deleted"
        assert REGISTRY["AWS::DocDB::DBCluster"].delete(get, r, snapshot=snapshot) == "not-found"
    stub.assert_no_pending_responses()


def test_it_refuses_a_snapshot_a_new_delete_only_type_cannot_take(aws, moto, clients):
    _group(moto)
    with pytest.raises(ProviderError, match="Snapshot"):
        delete_resource(clients, ref("AWS::IAM::Group", "more-group"), snapshot=True)
    assert moto("iam").get_group(GroupName="more-group")["Group"]["GroupName"] == "more-group"
