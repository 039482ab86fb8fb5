"""AWS::ElastiCache::CacheCluster and AWS::ElastiCache::ReplicationGroup: delete and final snapshot.

The physical id is the cache cluster id / replication group id. Snapshot names follow cdkd's
scheme with the ElastiCache base cut to 28 characters (`engine.providers.snapshots`).
- CacheCluster, snapshot=True: DeleteCacheCluster(FinalSnapshotIdentifier=...), the snapshot
  taken by the delete itself (Redis only: AWS's refusal for Memcached surfaces, as
  CloudFormation's DELETE_FAILED does). A Cloud Control row with snapshot=True is refused.
- ReplicationGroup, snapshot=True: a pre-delete CreateSnapshot, waited to `available`, then
  DeleteReplicationGroup. The source depends on cluster mode (seed 004): a sharded group
  (ClusterEnabled) is snapshotted by ReplicationGroupId; the cluster-mode-disabled default by
  its primary member cache cluster, since AWS rejects the group form there. A re-run resumes
  only a snapshot still `creating` under this group's `<base>-final-` prefix: names are
  user-chosen and reusable, so an `available` one may be a previous generation's and a new,
  timestamped one is taken instead. The group is waited back to `available` before the delete.
- snapshot=False: a plain delete.
A cluster or group already `deleting` is "not-found" (a delete is under way; this run
deleted nothing). The delete itself is not waited for.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from engine.providers.base import (
    DELETED,
    NOT_FOUND,
    Clients,
    ProviderError,
    ResourceRef,
    SdkProvider,
    describe,
    error_code,
    region_of,
)
from engine.providers.rds import refuse_cc_snapshot
from engine.providers.snapshots import ELASTICACHE_BASE_MAX, Waits, final_prefix, final_snapshot_id

CACHE_CLUSTER = "AWS::ElastiCache::CacheCluster"
REPLICATION_GROUP = "AWS::ElastiCache::ReplicationGroup"


class CacheClusterProvider(SdkProvider):
    types = (CACHE_CLUSTER,)
    supports_snapshot = True
    not_found_codes = frozenset({"CacheClusterNotFound", "CacheClusterNotFoundFault"})
    action = "DeleteCacheCluster"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        if snapshot and ref.provisioned_by == "cc-api":
            raise refuse_cc_snapshot(ref, physical_id)
        ec = clients("elasticache", region_of(ref, physical_id))
        found = ec.describe_cache_clusters(CacheClusterId=physical_id)["CacheClusters"][0]
        if found.get("CacheClusterStatus") == "deleting":
            return NOT_FOUND
        params: dict[str, Any] = {"CacheClusterId": physical_id}
        if snapshot:
            params["FinalSnapshotIdentifier"] = final_snapshot_id(physical_id, max_length=ELASTICACHE_BASE_MAX)
        ec.delete_cache_cluster(**params)
        return DELETED


def snapshot_source(group: dict[str, Any]) -> dict[str, str]:
    """Where CreateSnapshot must point for this group (seed 004: by cluster mode)."""
    if group.get("ClusterEnabled"):
        return {"ReplicationGroupId": group["ReplicationGroupId"]}
    for node_group in group.get("NodeGroups", []):
        for member in node_group.get("NodeGroupMembers", []):
            if member.get("CurrentRole") == "primary" and member.get("CacheClusterId"):
                return {"CacheClusterId": member["CacheClusterId"]}
    members = group.get("MemberClusters") or []
    if members:
        return {"CacheClusterId": members[0]}
    return {"ReplicationGroupId": group["ReplicationGroupId"]}


class ReplicationGroupProvider(SdkProvider, Waits):
    types = (REPLICATION_GROUP,)
    supports_snapshot = True
    not_found_codes = frozenset({"ReplicationGroupNotFoundFault", "ReplicationGroupNotFound"})
    action = "DeleteReplicationGroup"

    def __init__(self, **waits: Any) -> None:
        Waits.__init__(self, **waits)

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        ec = clients("elasticache", region_of(ref, physical_id))
        group = self._group(ec, physical_id)
        if group.get("Status") == "deleting":
            return NOT_FOUND
        if snapshot:
            self._snapshot(ec, ref, physical_id, group)
        ec.delete_replication_group(ReplicationGroupId=physical_id, RetainPrimaryCluster=False)
        return DELETED

    @staticmethod
    def _group(ec: Any, group_id: str) -> dict[str, Any]:
        return ec.describe_replication_groups(ReplicationGroupId=group_id)["ReplicationGroups"][0]

    def _snapshot(self, ec: Any, ref: ResourceRef, group_id: str, group: dict[str, Any]) -> str:
        source = snapshot_source(group)
        prefix = final_prefix(group_id, max_length=ELASTICACHE_BASE_MAX)
        listed = ec.describe_snapshots(**source).get("Snapshots", [])
        in_flight = [
            s for s in listed if s["SnapshotName"].startswith(prefix) and s.get("SnapshotStatus") == "creating"
        ]
        if in_flight:
            name = in_flight[0]["SnapshotName"]
        else:
            name = final_snapshot_id(group_id, max_length=ELASTICACHE_BASE_MAX)
            ec.create_snapshot(SnapshotName=name, **source)

        def available() -> bool:
            status = ec.describe_snapshots(SnapshotName=name)["Snapshots"][0].get("SnapshotStatus")
            if status == "failed":
                raise ProviderError(
                    f"{describe(ref, group_id)}: final snapshot {name} failed; the group was not deleted"
                )
            return status == "available"

        self.wait_for(ref, f"final snapshot {name}", available)
        self.wait_for(ref, "the group to settle after its snapshot", lambda: self._settled(ec, group_id))
        return name

    def _settled(self, ec: Any, group_id: str) -> bool:
        try:
            return self._group(ec, group_id).get("Status") == "available"
        except ClientError as exc:
            if error_code(exc) in self.not_found_codes:
                return True
            raise


PROVIDERS = (CacheClusterProvider(), ReplicationGroupProvider())
