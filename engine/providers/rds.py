"""RDS DBInstance / DBCluster, Neptune DBCluster, DocumentDB DBCluster: delete, final snapshot,
deletion protection; Neptune DBInstance: deletion protection only (its delete stays on Cloud
Control).

The physical id is the instance / cluster identifier. Always through the service's SDK, never
Cloud Control: Cloud Control's delete handlers for these take an untagged final snapshot on
every delete, since they cannot be told the policy (seed 004 "No snapshot under DeletionPolicy:
Delete"). So:
- snapshot=True: DeleteDBInstance / DeleteDBCluster(SkipFinalSnapshot=false,
  FinalDBSnapshotIdentifier=`<base>-final-<utc>`), the snapshot taken by the delete itself. An
  instance that is a cluster member (DBClusterIdentifier set) takes no instance snapshot: the
  cluster's covers it, as CloudFormation does.
- snapshot=False: SkipFinalSnapshot=true.
- a `DeleteAutomatedBackups` in the record is sent with an RDS delete; an RDS cluster in a
  global cluster (recorded GlobalClusterIdentifier) is detached from it first.
- a row Cloud Control provisioned (`provisionedBy: cc-api`) with snapshot=True is refused: cdkd
  cannot honour the policy on that route (snapshot by hand, then --skip-final-snapshot).
The delete then waits for the resource to be gone (the subnet and parameter groups deleted
after it need that); a wait that gives up raises with `accepted=True`.

Protection (`DeletionProtection`): read with Describe*, set with Modify*(DeletionProtection=...,
ApplyImmediately=true). A resource that is gone reads as unprotected.
"""

from __future__ import annotations

from typing import Any, ClassVar

from botocore.exceptions import ClientError

from engine.providers.base import (
    DELETED,
    IAM_NAME,
    NOT_FOUND,
    Clients,
    ProviderError,
    ResourceRef,
    SdkProvider,
    describe,
    error_code,
    provider_error,
    region_of,
    require_physical_id,
)
from engine.providers.snapshots import Waits, final_snapshot_id, guarded

DB_INSTANCE = "AWS::RDS::DBInstance"
DB_CLUSTER = "AWS::RDS::DBCluster"
NEPTUNE_CLUSTER = "AWS::Neptune::DBCluster"
NEPTUNE_INSTANCE = "AWS::Neptune::DBInstance"
DOCDB_CLUSTER = "AWS::DocDB::DBCluster"

INSTANCE_NOT_FOUND = frozenset({"DBInstanceNotFound", "DBInstanceNotFoundFault"})
CLUSTER_NOT_FOUND = frozenset({"DBClusterNotFoundFault", "DBClusterNotFound"})
GONE_STATES = frozenset({"deleting"})


def refuse_cc_snapshot(ref: ResourceRef, physical_id: str) -> ProviderError:
    return ProviderError(
        f"{describe(ref, physical_id)}: DeletionPolicy Snapshot cannot be honoured: the row was provisioned "
        f"through Cloud Control, whose delete has no final-snapshot parameter; take a snapshot by hand, then "
        f"destroy with skip final snapshot. The resource was not deleted"
    )


class _RdsFamily(SdkProvider, Waits):
    """One family of identifier-addressed databases: which client, which calls, which codes."""

    service: ClassVar[str] = "rds"
    kind: ClassVar[str] = "instance"  # "instance" | "cluster"
    supports_snapshot = True

    def __init__(self, **waits: Any) -> None:
        Waits.__init__(self, **waits)

    # -- the calls, by kind ---------------------------------------------------------------

    def _client(self, clients: Clients, ref: ResourceRef, physical_id: str) -> Any:
        return clients(self.service, region_of(ref, physical_id))

    def _describe(self, client: Any, ident: str) -> dict[str, Any]:
        if self.kind == "instance":
            return client.describe_db_instances(DBInstanceIdentifier=ident)["DBInstances"][0]
        return client.describe_db_clusters(DBClusterIdentifier=ident)["DBClusters"][0]

    def _status(self, found: dict[str, Any]) -> str:
        return str(found.get("DBInstanceStatus") or found.get("Status") or "")

    def _gone(self, client: Any, ident: str) -> bool:
        try:
            self._describe(client, ident)
        except ClientError as exc:
            if error_code(exc) in self.not_found_codes:
                return True
            raise
        return False

    # -- delete ---------------------------------------------------------------------------

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        if snapshot and ref.provisioned_by == "cc-api":
            raise refuse_cc_snapshot(ref, physical_id)
        client = self._client(clients, ref, physical_id)
        found = self._describe(client, physical_id)  # not there → "not-found"
        if self._status(found) in GONE_STATES:
            return NOT_FOUND  # someone else's delete is under way; this run deleted nothing
        params = self._delete_params(client, ref, physical_id, found, snapshot)
        if self.kind == "instance":
            client.delete_db_instance(**params)
        else:
            client.delete_db_cluster(**params)
        self.wait_for(ref, f"the {self.kind} to be deleted", lambda: self._gone(client, physical_id), accepted=True)
        return DELETED

    def _delete_params(
        self, client: Any, ref: ResourceRef, ident: str, found: dict[str, Any], snapshot: bool
    ) -> dict[str, Any]:
        key = "DBInstanceIdentifier" if self.kind == "instance" else "DBClusterIdentifier"
        params: dict[str, Any] = {key: ident}
        member = self.kind == "instance" and bool(found.get("DBClusterIdentifier"))
        if snapshot and not member:
            params["SkipFinalSnapshot"] = False
            params["FinalDBSnapshotIdentifier"] = final_snapshot_id(ident)
        else:
            params["SkipFinalSnapshot"] = True
        return params

    # -- protection -----------------------------------------------------------------------

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        ident = require_physical_id(ref)
        client = self._client(clients, ref, ident)
        try:
            return bool(self._describe(client, ident).get("DeletionProtection"))
        except ClientError as exc:
            if error_code(exc) in self.not_found_codes:
                return False
            raise self._error(ref, "Describe", exc) from None

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        ident = require_physical_id(ref)
        client = self._client(clients, ref, ident)
        if self.kind == "instance":
            guarded(
                ref,
                "ModifyDBInstance",
                client.modify_db_instance,
                DBInstanceIdentifier=ident,
                DeletionProtection=enabled,
                ApplyImmediately=True,
            )
        else:
            guarded(
                ref,
                "ModifyDBCluster",
                client.modify_db_cluster,
                DBClusterIdentifier=ident,
                DeletionProtection=enabled,
                ApplyImmediately=True,
            )

    def _error(self, ref: ResourceRef, verb: str, exc: ClientError) -> ProviderError:
        action = f"{verb}DB{'Instances' if self.kind == 'instance' else 'Clusters'}"
        return provider_error(ref, action, exc)


class DbInstanceProvider(_RdsFamily):
    types = (DB_INSTANCE,)
    kind = "instance"
    not_found_codes = INSTANCE_NOT_FOUND
    action = "DeleteDBInstance"

    def _delete_params(
        self, client: Any, ref: ResourceRef, ident: str, found: dict[str, Any], snapshot: bool
    ) -> dict[str, Any]:
        params = super()._delete_params(client, ref, ident, found, snapshot)
        if isinstance(ref.properties.get("DeleteAutomatedBackups"), bool):
            params["DeleteAutomatedBackups"] = ref.properties["DeleteAutomatedBackups"]
        return params


class DbClusterProvider(_RdsFamily):
    types = (DB_CLUSTER,)
    kind = "cluster"
    not_found_codes = CLUSTER_NOT_FOUND
    action = "DeleteDBCluster"

    def _delete_params(
        self, client: Any, ref: ResourceRef, ident: str, found: dict[str, Any], snapshot: bool
    ) -> dict[str, Any]:
        params = super()._delete_params(client, ref, ident, found, snapshot)
        if isinstance(ref.properties.get("DeleteAutomatedBackups"), bool):
            params["DeleteAutomatedBackups"] = ref.properties["DeleteAutomatedBackups"]
        global_id = ref.properties.get("GlobalClusterIdentifier")
        if isinstance(global_id, str) and IAM_NAME.match(global_id) and found.get("DBClusterArn"):
            # A member of a global cluster cannot be deleted: detach it first, as CloudFormation does.
            try:
                client.remove_from_global_cluster(
                    GlobalClusterIdentifier=global_id, DbClusterIdentifier=found["DBClusterArn"]
                )
            except ClientError as exc:
                if error_code(exc) not in ("GlobalClusterNotFoundFault", "InvalidGlobalClusterStateFault"):
                    raise
        return params


class NeptuneClusterProvider(_RdsFamily):
    types = (NEPTUNE_CLUSTER,)
    service = "neptune"
    kind = "cluster"
    not_found_codes = CLUSTER_NOT_FOUND
    action = "DeleteDBCluster"


class DocDbClusterProvider(_RdsFamily):
    types = (DOCDB_CLUSTER,)
    service = "docdb"
    kind = "cluster"
    not_found_codes = CLUSTER_NOT_FOUND
    action = "DeleteDBCluster"


class NeptuneInstanceProtection(_RdsFamily):
    """Protection only: a Neptune instance's delete stays where it was routed."""

    types = (NEPTUNE_INSTANCE,)
    service = "neptune"
    kind = "instance"
    not_found_codes = INSTANCE_NOT_FOUND
    supports_snapshot = False


PROVIDERS = (DbInstanceProvider(), DbClusterProvider(), NeptuneClusterProvider(), DocDbClusterProvider())
PROTECTION = (NeptuneInstanceProtection(),)  # not in the destroy registry
