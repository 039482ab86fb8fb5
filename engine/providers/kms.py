"""AWS::KMS::Key: ScheduleKeyDeletion (KMS keys cannot be deleted at once).

The waiting period is the record's `PendingWindowInDays` when it is a valid 7-30, else the
minimum, 7 days (what cdkd sends; CloudFormation's default would be 30).

A key already `PendingDeletion` (or `PendingReplicaDeletion`) answers "not-found": it is
already on its way out, this run scheduled nothing, and the runner counts "not-found" as
deleted. Rescheduling would fail on AWS (KMSInvalidStateException) and would move the date.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

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
    error_code,
    error_message,
    provider_error,
    region_of,
    tag_delta,
    tag_map,
)

KEY = "AWS::KMS::Key"
ALIAS = "AWS::KMS::Alias"

MIN_WINDOW, MAX_WINDOW = 7, 30
# fixed when the key is created (KMS has no call that changes them), with KMS's defaults
IMMUTABLE = {"KeySpec": "SYMMETRIC_DEFAULT", "KeyUsage": "ENCRYPT_DECRYPT", "MultiRegion": False}
PENDING_STATES = frozenset({"PendingDeletion", "PendingReplicaDeletion"})


def pending_window(properties: dict) -> int:
    value = properties.get("PendingWindowInDays")
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and MIN_WINDOW <= value <= MAX_WINDOW:
        return value
    return MIN_WINDOW


class KeyProvider(SdkProvider, DeployCalls):
    """Deploy (reference 5.7): the key id is the physical id, attributes `Arn` and `KeyId`;
    rotation and the enabled flag after CreateKey; the policy, description, rotation and tags
    update in place."""

    types = (KEY,)
    handled = frozenset(
        {
            "KeyPolicy",
            "Description",
            "KeySpec",
            "KeyUsage",
            "EnableKeyRotation",
            "Enabled",
            "MultiRegion",
            "PendingWindowInDays",
            "Tags",
            "RotationPeriodInDays",
        }
    )
    not_found_codes = frozenset({"NotFoundException"})
    action = "ScheduleKeyDeletion"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        kms = clients("kms", region_of(ref, physical_id))
        meta = kms.describe_key(KeyId=physical_id)["KeyMetadata"]
        if meta.get("KeyState") in PENDING_STATES:
            return NOT_FOUND
        try:
            # The key id from DescribeKey: the record may hold an ARN (moto 5.2.5 fails an ARN here).
            kms.schedule_key_deletion(KeyId=meta["KeyId"], PendingWindowInDays=pending_window(ref.properties))
        except ClientError as exc:
            # Scheduled by someone else between the read and the call.
            if "pending deletion" in error_message(exc).lower():
                return NOT_FOUND
            raise
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        kms = clients("kms", target.region)
        params: dict[str, Any] = {}
        if "KeyPolicy" in properties:
            policy = properties["KeyPolicy"]
            params["Policy"] = policy if isinstance(policy, str) else json.dumps(policy, separators=(",", ":"))
        for src, dst in (
            ("Description", "Description"),
            ("KeySpec", "KeySpec"),
            ("KeyUsage", "KeyUsage"),
            ("MultiRegion", "MultiRegion"),
        ):
            if src in properties:
                params[dst] = properties[src]
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["Tags"] = [{"TagKey": k, "TagValue": v} for k, v in tags.items()]
        try:
            meta = kms.create_key(**params)["KeyMetadata"]
        except ClientError as exc:
            raise provider_error(ResourceRef(logical_id, KEY, None), "CreateKey", exc) from None
        key_id = meta["KeyId"]
        try:
            if properties.get("EnableKeyRotation") in (True, "true"):
                kms.enable_key_rotation(KeyId=key_id)
            if properties.get("Enabled") in (False, "false"):
                kms.disable_key(KeyId=key_id)
        except ClientError as exc:
            kms.schedule_key_deletion(KeyId=key_id, PendingWindowInDays=MIN_WINDOW)
            raise provider_error(ResourceRef(logical_id, KEY, key_id), "EnableKeyRotation/DisableKey", exc) from None
        return CreateResult(key_id, {"Arn": meta["Arn"], "KeyId": key_id})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        key_id = ref.physical_id or ""
        kms = clients("kms", region_of(ref, key_id))
        old, lid = ref.properties, ref.logical_id
        fixed = [k for k, default in IMMUTABLE.items() if old.get(k, default) != properties.get(k, default)]
        if fixed:
            # CloudFormation fails this update too, whatever the UpdateReplacePolicy: a
            # replacement would schedule the old key (and what it encrypted) for deletion
            raise ProviderError(
                f"{lid} ({KEY} {key_id}): {', '.join(fixed)} cannot change on an existing key; the update was "
                "not made. Keep the old value, or give the key a new logical id to create a new key"
            )
        if old.get("KeyPolicy") != properties.get("KeyPolicy") and "KeyPolicy" in properties:
            policy = properties["KeyPolicy"]
            self._guarded(
                lid,
                KEY,
                key_id,
                "PutKeyPolicy",
                kms.put_key_policy,
                KeyId=key_id,
                PolicyName="default",
                Policy=policy if isinstance(policy, str) else json.dumps(policy, separators=(",", ":")),
            )
        if old.get("Description") != properties.get("Description"):
            self._guarded(
                lid,
                KEY,
                key_id,
                "UpdateKeyDescription",
                kms.update_key_description,
                KeyId=key_id,
                Description=properties.get("Description", ""),
            )
        if bool(old.get("EnableKeyRotation")) != bool(properties.get("EnableKeyRotation")):
            fn = kms.enable_key_rotation if properties.get("EnableKeyRotation") else kms.disable_key_rotation
            self._guarded(lid, KEY, key_id, "EnableKeyRotation/DisableKeyRotation", fn, KeyId=key_id)
        if old.get("Enabled", True) != properties.get("Enabled", True):
            fn = kms.enable_key if properties.get("Enabled", True) else kms.disable_key
            self._guarded(lid, KEY, key_id, "EnableKey/DisableKey", fn, KeyId=key_id)
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        if remove:
            self._guarded(lid, KEY, key_id, "UntagResource", kms.untag_resource, KeyId=key_id, TagKeys=remove)
        if add:
            self._guarded(
                lid,
                KEY,
                key_id,
                "TagResource",
                kms.tag_resource,
                KeyId=key_id,
                Tags=[{"TagKey": k, "TagValue": v} for k, v in add.items()],
            )
        meta = self._guarded(lid, KEY, key_id, "DescribeKey", kms.describe_key, KeyId=key_id)["KeyMetadata"]
        return UpdateResult(key_id, {"Arn": meta["Arn"], "KeyId": meta["KeyId"]})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        key_id = ref.physical_id or ""
        try:
            kms = clients("kms", region_of(ref, key_id))
            meta = kms.describe_key(KeyId=key_id)["KeyMetadata"]
            rotation = kms.get_key_rotation_status(KeyId=key_id).get("KeyRotationEnabled", False)
        except ClientError:
            return None
        return {
            "Description": meta.get("Description", ""),
            "KeyUsage": meta.get("KeyUsage"),
            "KeySpec": meta.get("KeySpec", meta.get("CustomerMasterKeySpec")),
            "Enabled": meta.get("Enabled", True),
            "EnableKeyRotation": rotation,
        }


class AliasProvider(SdkProvider, DeployCalls):
    """AWS::KMS::Alias (deploy-only): the alias name is the physical id, no attributes."""

    types = (ALIAS,)
    handled = frozenset({"AliasName", "TargetKeyId"})
    not_found_codes = frozenset({"NotFoundException"})
    action = "DeleteAlias"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        clients("kms", ref.region).delete_alias(AliasName=physical_id)
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = properties.get("AliasName")
        if not isinstance(name, str) or not name.startswith("alias/"):
            raise ProviderError(f"{logical_id} ({ALIAS}): AliasName must start with alias/")
        kms = clients("kms", target.region)
        try:
            kms.create_alias(AliasName=name, TargetKeyId=properties.get("TargetKeyId"))
        except ClientError as exc:
            if error_code(exc) == "AlreadyExistsException":
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, ALIAS, name), "CreateAlias", exc) from None
        return CreateResult(name, {})  # "none" in reference 5.7 is recorded as {} (the sample's subscription)

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        name = ref.physical_id or ""
        kms = clients("kms", ref.region)
        self._guarded(
            ref.logical_id,
            ALIAS,
            name,
            "UpdateAlias",
            kms.update_alias,
            AliasName=name,
            TargetKeyId=properties.get("TargetKeyId"),
        )
        return UpdateResult(name, {})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        try:
            aliases = clients("kms", ref.region).list_aliases().get("Aliases", [])
        except ClientError:
            return None
        found = next((a for a in aliases if a.get("AliasName") == ref.physical_id), None)
        return None if found is None else {"AliasName": found["AliasName"], "TargetKeyId": found.get("TargetKeyId")}


PROVIDERS = (KeyProvider(),)
DEPLOY_ONLY = (AliasProvider(),)  # not in the destroy registry: destroy keeps its routing
