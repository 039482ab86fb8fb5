"""AWS::Logs::LogGroup: DeleteLogGroup by name (the physical id); create, update, read.

Deploy (reference 5.7): the name is the template's `LogGroupName` or `/cdkd/` + the
generated name, the one attribute is `Arn` (`...:log-group:NAME:*`); CreateLogGroup's
ResourceAlreadyExistsException is the name collision. An update changes the retention
(removing `RetentionInDays` deletes the policy: logs never expire again), the KMS key and
the tags.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from engine.deploy.names import physical_name
from engine.providers.base import (
    DELETED,
    Clients,
    CreateResult,
    DeployCalls,
    DeployTarget,
    ResourceRef,
    SdkProvider,
    UpdateResult,
    already_exists,
    error_code,
    parse_arn,
    provider_error,
    region_of,
    tag_delta,
    tag_map,
)

LOG_GROUP = "AWS::Logs::LogGroup"


def log_group_name(physical_id: str) -> str:
    """The name of a name or a log group ARN (`...:log-group:NAME[:*]`)."""
    arn = parse_arn(physical_id)
    if arn is not None and arn.resource.startswith("log-group:"):
        name = arn.resource[len("log-group:") :]
        return name[:-2] if name.endswith(":*") else name
    return physical_id


def log_group_arn(name: str, target: DeployTarget) -> str:
    return f"arn:{target.partition}:logs:{target.region}:{target.account_id}:log-group:{name}:*"


class LogGroupProvider(SdkProvider, DeployCalls):
    types = (LOG_GROUP,)
    not_found_codes = frozenset({"ResourceNotFoundException"})
    action = "DeleteLogGroup"
    handled = frozenset({"LogGroupName", "RetentionInDays", "KmsKeyId", "Tags", "LogGroupClass"})

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        logs = clients("logs", region_of(ref, physical_id))
        logs.delete_log_group(logGroupName=log_group_name(physical_id))
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(resource_type, logical_id, properties, stack_name=target.stack_name)
        logs = clients("logs", target.region)
        params: dict[str, Any] = {"logGroupName": name}
        if isinstance(properties.get("KmsKeyId"), str):
            params["kmsKeyId"] = properties["KmsKeyId"]
        if isinstance(properties.get("LogGroupClass"), str):
            params["logGroupClass"] = properties["LogGroupClass"]
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["tags"] = tags
        try:
            logs.create_log_group(**params)
        except ClientError as exc:
            if error_code(exc) == "ResourceAlreadyExistsException":
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, LOG_GROUP, name), "CreateLogGroup", exc) from None
        if "RetentionInDays" in properties:
            try:
                logs.put_retention_policy(logGroupName=name, retentionInDays=int(properties["RetentionInDays"]))
            except ClientError as exc:
                # cdkd's rule: a create that fails after the resource exists deletes what it made
                logs.delete_log_group(logGroupName=name)
                raise provider_error(ResourceRef(logical_id, LOG_GROUP, name), "PutRetentionPolicy", exc) from None
        return CreateResult(name, {"Arn": log_group_arn(name, target)})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        name = log_group_name(ref.physical_id or "")
        logs = clients("logs", region_of(ref, ref.physical_id or ""))
        old = ref.properties
        lid = ref.logical_id
        if old.get("RetentionInDays") != properties.get("RetentionInDays"):
            if "RetentionInDays" in properties:
                self._guarded(
                    lid,
                    LOG_GROUP,
                    name,
                    "PutRetentionPolicy",
                    logs.put_retention_policy,
                    logGroupName=name,
                    retentionInDays=int(properties["RetentionInDays"]),
                )
            else:
                self._guarded(
                    lid, LOG_GROUP, name, "DeleteRetentionPolicy", logs.delete_retention_policy, logGroupName=name
                )
        if old.get("KmsKeyId") != properties.get("KmsKeyId"):
            if isinstance(properties.get("KmsKeyId"), str):
                self._guarded(
                    lid,
                    LOG_GROUP,
                    name,
                    "AssociateKmsKey",
                    logs.associate_kms_key,
                    logGroupName=name,
                    kmsKeyId=properties["KmsKeyId"],
                )
            else:
                self._guarded(lid, LOG_GROUP, name, "DisassociateKmsKey", logs.disassociate_kms_key, logGroupName=name)
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        arn = log_group_arn(name, target)[:-2]  # the tagging API takes the ARN without ":*"
        if remove:
            self._guarded(lid, LOG_GROUP, name, "UntagResource", logs.untag_resource, resourceArn=arn, tagKeys=remove)
        if add:
            self._guarded(lid, LOG_GROUP, name, "TagResource", logs.tag_resource, resourceArn=arn, tags=add)
        return UpdateResult(name, {"Arn": log_group_arn(name, target)})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        name = log_group_name(ref.physical_id or "")
        try:
            logs = clients("logs", region_of(ref, ref.physical_id or ""))
            groups = logs.describe_log_groups(logGroupNamePrefix=name).get("logGroups", [])
        except ClientError:
            return None
        group = next((g for g in groups if g.get("logGroupName") == name), None)
        if group is None:
            return None
        out: dict[str, Any] = {"LogGroupName": name}
        if "retentionInDays" in group:
            out["RetentionInDays"] = group["retentionInDays"]
        out["KmsKeyId"] = group.get("kmsKeyId", "")
        return out

    def _attributes(self, clients: Clients, ref: ResourceRef) -> dict[str, Any]:
        arn = ref.attributes.get("Arn")
        return {"Arn": arn} if arn else {}


PROVIDERS = (LogGroupProvider(),)
