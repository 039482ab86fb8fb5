"""AWS::DynamoDB::Table: DeleteTable.

- Not there (ResourceNotFoundException) → "not-found"; already DELETING → "not-found" too
  (someone else's delete is under way; this run deleted nothing).
- Deletion protection on → ProviderError naming it: the delete never turns a guard off by
  itself; the runner's remove-protection option does, through `set_protection` (UpdateTable,
  then a wait for ACTIVE), and `read_protection` reads it. AWS::DynamoDB::GlobalTable (deleted
  through Cloud Control) shares those two calls on its table in the stack's region.
- No final snapshot: CloudFormation does not accept `DeletionPolicy: Snapshot` on a table and
  cdkd's snapshot-capable types do not include it, so a Snapshot policy here fails the
  resource (the runner's refusal), as cdkd does.

Deploy (reference 5.7): the table name is the physical id (max 255); attributes `Arn`,
`TableId`, `StreamArn` (with a stream) and `TableName`; CreateTable waits for ACTIVE, then TTL
and point-in-time recovery are applied, and the table is deleted again if those fail.
ResourceInUseException on create is the name collision. An update changes billing,
throughput, stream, SSE and deletion protection through UpdateTable, adds and removes global
secondary indexes one at a time (waiting for ACTIVE between), and diffs TTL, PITR and tags.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from engine.deploy.names import physical_name
from engine.providers.base import (
    DELETED,
    NOT_FOUND,
    Clients,
    CreateResult,
    DeployCalls,
    DeployTarget,
    ProviderError,
    ResourceRef,
    SdkProvider,
    UpdateResult,
    already_exists,
    describe,
    error_code,
    parse_arn,
    provider_error,
    region_of,
    require_physical_id,
    tag_delta,
    tag_map,
)

TABLE = "AWS::DynamoDB::Table"
CREATE_KEYS = (
    "KeySchema",
    "AttributeDefinitions",
    "BillingMode",
    "ProvisionedThroughput",
    "GlobalSecondaryIndexes",
    "LocalSecondaryIndexes",
    "StreamSpecification",
    "SSESpecification",
    "TableClass",
    "DeletionProtectionEnabled",
)


def table_name(physical_id: str) -> str:
    """The table name of a name or a table ARN (`arn:aws:dynamodb:r:a:table/NAME`)."""
    arn = parse_arn(physical_id)
    if arn is not None and arn.resource.startswith("table/"):
        return arn.resource.split("/", 2)[1]
    return physical_id


def _sse(value: Any) -> dict[str, Any]:
    out = {"Enabled": bool((value or {}).get("SSEEnabled", False))}
    for key in ("SSEType", "KMSMasterKeyId"):
        if (value or {}).get(key):
            out[key] = value[key]
    return out


class TableProvider(SdkProvider, DeployCalls):
    types = (TABLE,)
    handled = frozenset(
        {"TableName", *CREATE_KEYS, "TimeToLiveSpecification", "PointInTimeRecoverySpecification", "Tags"}
    )

    def __init__(self, *, sleep: Callable[[float], None] = time.sleep, wait_timeout: float = 600.0) -> None:
        self.sleep = sleep
        self.wait_timeout = wait_timeout

    supports_snapshot = False
    not_found_codes = frozenset({"ResourceNotFoundException", "TableNotFoundException"})
    action = "DeleteTable"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name = table_name(physical_id)
        ddb = clients("dynamodb", region_of(ref, physical_id))
        table = ddb.describe_table(TableName=name)["Table"]
        if table.get("TableStatus") == "DELETING":
            return NOT_FOUND
        if table.get("DeletionProtectionEnabled"):
            raise ProviderError(
                f"{describe(ref, physical_id)}: DeleteTable refused: deletion protection is enabled "
                f"(DeletionProtectionEnabled); turn it off on the table, then run the destroy again",
                aws_code="DeletionProtectionEnabled",
            )
        ddb.delete_table(TableName=name)
        return DELETED

    # -- protection (seed 004: UpdateTable(DeletionProtectionEnabled), then wait for ACTIVE) --

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        pid = require_physical_id(ref)
        ddb = clients("dynamodb", region_of(ref, pid))
        try:
            return bool(ddb.describe_table(TableName=table_name(pid))["Table"].get("DeletionProtectionEnabled"))
        except ClientError as exc:
            if error_code(exc) in self.not_found_codes:
                return False
            raise provider_error(ref, "DescribeTable", exc) from None

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        pid = require_physical_id(ref)
        name = table_name(pid)
        ddb = clients("dynamodb", region_of(ref, pid))
        try:
            ddb.update_table(TableName=name, DeletionProtectionEnabled=enabled)
            self._wait_active(ddb, ref.logical_id, name)
        except ClientError as exc:
            raise provider_error(ref, "UpdateTable", exc) from None

    def _wait_active(self, ddb: Any, lid: str, name: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.wait_timeout
        delay = 0.5
        while True:
            table = ddb.describe_table(TableName=name)["Table"]
            busy = table.get("TableStatus") != "ACTIVE" or any(
                g.get("IndexStatus") not in (None, "ACTIVE") for g in table.get("GlobalSecondaryIndexes", [])
            )
            if not busy:
                return table
            if time.monotonic() > deadline:
                raise ProviderError(
                    f"{lid} ({TABLE} {name}): still {table.get('TableStatus')} after {self.wait_timeout:.0f}s"
                )
            self.sleep(delay)
            delay = min(delay * 2, 5.0)

    @staticmethod
    def _attributes_of(table: dict[str, Any]) -> dict[str, Any]:
        out = {"Arn": table["TableArn"], "TableId": table.get("TableId")}
        if table.get("LatestStreamArn"):
            out["StreamArn"] = table["LatestStreamArn"]
        out["TableName"] = table["TableName"]
        return out

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(TABLE, logical_id, properties, stack_name=target.stack_name)
        ddb = clients("dynamodb", target.region)
        params: dict[str, Any] = {"TableName": name}
        for key in CREATE_KEYS:
            if key in properties:
                params[key] = properties[key]
        if "SSESpecification" in params:
            params["SSESpecification"] = _sse(params["SSESpecification"])
        if isinstance(params.get("StreamSpecification"), dict):
            params["StreamSpecification"] = dict(params["StreamSpecification"], StreamEnabled=True)
        params.setdefault("BillingMode", "PROVISIONED" if "ProvisionedThroughput" in params else "PAY_PER_REQUEST")
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
        try:
            ddb.create_table(**params)
        except ClientError as exc:
            if error_code(exc) == "ResourceInUseException":
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, TABLE, name), "CreateTable", exc) from None
        try:
            table = self._wait_active(ddb, logical_id, name)
            self._extras(ddb, logical_id, name, {}, properties)
        except (ProviderError, ClientError) as exc:
            ddb.delete_table(TableName=name)  # never leave a table the record cannot hold
            if isinstance(exc, ClientError):
                raise provider_error(
                    ResourceRef(logical_id, TABLE, name), "UpdateTimeToLive/UpdateContinuousBackups", exc
                ) from None
            raise
        return CreateResult(name, self._attributes_of(table))

    def _extras(self, ddb: Any, lid: str, name: str, old: dict, new: dict) -> None:
        ttl_old, ttl_new = old.get("TimeToLiveSpecification"), new.get("TimeToLiveSpecification")
        if ttl_old != ttl_new and (ttl_new or ttl_old):
            spec = ttl_new or {"AttributeName": (ttl_old or {}).get("AttributeName"), "Enabled": False}
            self._guarded(
                lid,
                TABLE,
                name,
                "UpdateTimeToLive",
                ddb.update_time_to_live,
                TableName=name,
                TimeToLiveSpecification={
                    "AttributeName": spec.get("AttributeName"),
                    "Enabled": bool(spec.get("Enabled")),
                },
            )
        pitr_old = bool((old.get("PointInTimeRecoverySpecification") or {}).get("PointInTimeRecoveryEnabled"))
        pitr_new = bool((new.get("PointInTimeRecoverySpecification") or {}).get("PointInTimeRecoveryEnabled"))
        if pitr_old != pitr_new:
            self._guarded(
                lid,
                TABLE,
                name,
                "UpdateContinuousBackups",
                ddb.update_continuous_backups,
                TableName=name,
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": pitr_new},
            )

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        name = table_name(ref.physical_id or "")
        ddb = clients("dynamodb", region_of(ref, ref.physical_id or ""))
        old, lid = ref.properties, ref.logical_id
        params: dict[str, Any] = {}
        if old.get("BillingMode") != properties.get("BillingMode") and properties.get("BillingMode"):
            params["BillingMode"] = properties["BillingMode"]
        if old.get("ProvisionedThroughput") != properties.get("ProvisionedThroughput") and properties.get(
            "ProvisionedThroughput"
        ):
            params["ProvisionedThroughput"] = properties["ProvisionedThroughput"]
        if old.get("StreamSpecification") != properties.get("StreamSpecification"):
            stream = properties.get("StreamSpecification")
            params["StreamSpecification"] = dict(stream, StreamEnabled=True) if stream else {"StreamEnabled": False}
        if old.get("SSESpecification") != properties.get("SSESpecification"):
            params["SSESpecification"] = _sse(properties.get("SSESpecification"))
        if old.get("DeletionProtectionEnabled") != properties.get("DeletionProtectionEnabled"):
            params["DeletionProtectionEnabled"] = bool(properties.get("DeletionProtectionEnabled"))
        if params:
            self._guarded(lid, TABLE, name, "UpdateTable", ddb.update_table, TableName=name, **params)
            self._wait_active(ddb, lid, name)
        before = {g["IndexName"]: g for g in old.get("GlobalSecondaryIndexes") or []}
        after = {g["IndexName"]: g for g in properties.get("GlobalSecondaryIndexes") or []}
        for index in before:
            if index not in after or before[index] != after[index]:
                self._guarded(
                    lid,
                    TABLE,
                    name,
                    "UpdateTable",
                    ddb.update_table,
                    TableName=name,
                    GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": index}}],
                )
                self._wait_active(ddb, lid, name)
        for index, spec in after.items():
            if index not in before or before[index] != spec:
                self._guarded(
                    lid,
                    TABLE,
                    name,
                    "UpdateTable",
                    ddb.update_table,
                    TableName=name,
                    AttributeDefinitions=properties.get("AttributeDefinitions") or [],
                    GlobalSecondaryIndexUpdates=[{"Create": spec}],
                )
                self._wait_active(ddb, lid, name)
        self._extras(ddb, lid, name, old, properties)
        table = ddb.describe_table(TableName=name)["Table"]
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        if remove:
            self._guarded(
                lid, TABLE, name, "UntagResource", ddb.untag_resource, ResourceArn=table["TableArn"], TagKeys=remove
            )
        if add:
            self._guarded(
                lid,
                TABLE,
                name,
                "TagResource",
                ddb.tag_resource,
                ResourceArn=table["TableArn"],
                Tags=[{"Key": k, "Value": v} for k, v in add.items()],
            )
        return UpdateResult(name, self._attributes_of(table))

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        name = table_name(ref.physical_id or "")
        try:
            ddb = clients("dynamodb", region_of(ref, ref.physical_id or ""))
            table = ddb.describe_table(TableName=name)["Table"]
        except ClientError:
            return None
        out: dict[str, Any] = {
            "TableName": name,
            "KeySchema": table.get("KeySchema", []),
            "AttributeDefinitions": table.get("AttributeDefinitions", []),
            "BillingMode": (table.get("BillingModeSummary") or {}).get("BillingMode", "PROVISIONED"),
        }
        if table.get("StreamSpecification"):
            out["StreamSpecification"] = {"StreamViewType": table["StreamSpecification"].get("StreamViewType")}
        return out

    def _attributes(self, clients: Clients, ref: ResourceRef) -> dict[str, Any]:
        name = table_name(ref.physical_id or "")
        return self._attributes_of(
            clients("dynamodb", region_of(ref, ref.physical_id or "")).describe_table(TableName=name)["Table"]
        )


PROVIDERS = (TableProvider(),)


class GlobalTableProtection:
    """AWS::DynamoDB::GlobalTable protection only (its delete goes through Cloud Control): the
    same UpdateTable / DescribeTable on the table in the stack's region."""

    types = ("AWS::DynamoDB::GlobalTable",)

    def __init__(self, table: TableProvider) -> None:
        self._table = table

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        return self._table.read_protection(clients, ref)

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        self._table.set_protection(clients, ref, enabled)


PROTECTION = (GlobalTableProtection(PROVIDERS[0]),)
