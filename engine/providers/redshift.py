"""AWS::Redshift::Cluster: delete, with a pre-delete final snapshot.

The physical id is the cluster identifier. snapshot=True: CreateClusterSnapshot
(`<base>-final-<utc>`), waited to `available`, then a second wait for the cluster itself to
settle (seed 004: a fresh snapshot leaves it busy, and the delete would fail with "There is
an operation running on the Cluster"), then DeleteCluster(SkipFinalClusterSnapshot=true). A
re-run resumes only a snapshot still `creating` under the cluster's `<base>-final-` prefix
(an `available` one may be a previous generation's). snapshot=False: the same delete without
the snapshot. A cluster already `deleting` is "not-found"; the delete is waited to the end.
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
from engine.providers.snapshots import Waits, final_prefix, final_snapshot_id

CLUSTER = "AWS::Redshift::Cluster"


class ClusterProvider(SdkProvider, Waits):
    types = (CLUSTER,)
    supports_snapshot = True
    not_found_codes = frozenset({"ClusterNotFound", "ClusterNotFoundFault"})
    action = "DeleteCluster"

    def __init__(self, **waits: Any) -> None:
        Waits.__init__(self, **waits)

    def _cluster(self, rs: Any, ident: str) -> dict[str, Any] | None:
        try:
            return rs.describe_clusters(ClusterIdentifier=ident)["Clusters"][0]
        except ClientError as exc:
            if error_code(exc) in self.not_found_codes:
                return None
            raise

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        rs = clients("redshift", region_of(ref, physical_id))
        cluster = self._cluster(rs, physical_id)
        if cluster is None or cluster.get("ClusterStatus") == "deleting":
            return NOT_FOUND
        if snapshot:
            self._snapshot(rs, ref, physical_id)
            self.wait_for(
                ref,
                "the cluster to settle after its snapshot",
                lambda: (self._cluster(rs, physical_id) or {}).get("ClusterStatus") == "available",
            )
        rs.delete_cluster(ClusterIdentifier=physical_id, SkipFinalClusterSnapshot=True)
        self.wait_for(ref, "the cluster to be deleted", lambda: self._cluster(rs, physical_id) is None, accepted=True)
        return DELETED

    def _snapshot(self, rs: Any, ref: ResourceRef, ident: str) -> str:
        prefix = final_prefix(ident)
        listed = rs.describe_cluster_snapshots(ClusterIdentifier=ident, SnapshotType="manual").get("Snapshots", [])
        in_flight = [s for s in listed if s["SnapshotIdentifier"].startswith(prefix) and s.get("Status") == "creating"]
        if in_flight:
            name = in_flight[0]["SnapshotIdentifier"]
        else:
            name = final_snapshot_id(ident)
            rs.create_cluster_snapshot(SnapshotIdentifier=name, ClusterIdentifier=ident)

        def available() -> bool:
            status = rs.describe_cluster_snapshots(SnapshotIdentifier=name)["Snapshots"][0].get("Status")
            if status in ("failed", "deleted"):
                raise ProviderError(f"{describe(ref, ident)}: final snapshot {name} is {status}; not deleted")
            return status == "available"

        self.wait_for(ref, f"final snapshot {name}", available)
        return name


PROVIDERS = (ClusterProvider(),)
