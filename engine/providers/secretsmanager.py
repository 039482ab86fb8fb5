"""AWS::SecretsManager::Secret: DeleteSecret with ForceDeleteWithoutRecovery.

Why no recovery window: cdkd deletes this way, as CloudFormation's delete handler does, so
the name is free at once and a redeploy of the same stack can create it again (with a
window, CreateSecret fails for up to 30 days with "scheduled for deletion"). A secret already
scheduled for deletion is force-deleted too, which finishes that deletion ("deleted").

DeleteSecret with ForceDeleteWithoutRecovery answers success for a secret that does not
exist (moto does this, and so may AWS), so DescribeSecret comes first to report
"not-found" honestly.
"""

from __future__ import annotations

import json
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
    provider_error,
    region_of,
    tag_delta,
    tag_map,
)

SECRET = "AWS::SecretsManager::Secret"


def _generated(spec: dict[str, Any]) -> dict[str, Any]:
    """GetRandomPassword's parameters from GenerateSecretString."""
    keys = (
        "PasswordLength",
        "ExcludeCharacters",
        "ExcludeNumbers",
        "ExcludePunctuation",
        "ExcludeUppercase",
        "ExcludeLowercase",
        "IncludeSpace",
        "RequireEachIncludedType",
    )
    return {k: spec[k] for k in keys if k in spec}


class SecretProvider(SdkProvider, DeployCalls):
    """Deploy (reference 5.7): the secret ARN is the physical id (name max 512, `/` and `_`
    kept), attribute `Id`. `GenerateSecretString` draws the value with GetRandomPassword (the
    generated value never enters `properties`); a literal `SecretString` lands in state as
    cdkd stores it (the plan refuses secret references)."""

    types = (SECRET,)
    handled = frozenset({"Name", "Description", "KmsKeyId", "SecretString", "GenerateSecretString", "Tags"})
    not_found_codes = frozenset({"ResourceNotFoundException"})
    action = "DeleteSecret"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        sm = clients("secretsmanager", region_of(ref, physical_id))
        sm.describe_secret(SecretId=physical_id)  # ResourceNotFoundException → "not-found"
        sm.delete_secret(SecretId=physical_id, ForceDeleteWithoutRecovery=True)
        return DELETED

    def _value(self, sm: Any, properties: dict) -> str | None:
        if isinstance(properties.get("SecretString"), str):
            return properties["SecretString"]
        spec = properties.get("GenerateSecretString")
        if not isinstance(spec, dict):
            return None
        password = sm.get_random_password(**_generated(spec))["RandomPassword"]
        template, key = spec.get("SecretStringTemplate"), spec.get("GenerateStringKey")
        if isinstance(template, str) and isinstance(key, str):
            body = json.loads(template)
            body[key] = password
            return json.dumps(body, separators=(",", ":"))
        return password

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(SECRET, logical_id, properties, stack_name=target.stack_name)
        sm = clients("secretsmanager", target.region)
        params: dict[str, Any] = {"Name": name}
        for key in ("Description", "KmsKeyId"):
            if key in properties:
                params[key] = properties[key]
        try:
            value = self._value(sm, properties)
            if value is not None:
                params["SecretString"] = value
            tags = tag_map(properties.get("Tags"))
            if tags:
                params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
            arn = sm.create_secret(**params)["ARN"]
        except ClientError as exc:
            if error_code(exc) == "ResourceExistsException":
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, SECRET, name), "CreateSecret", exc) from None
        return CreateResult(arn, {"Id": arn})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        arn = ref.physical_id or ""
        sm = clients("secretsmanager", region_of(ref, arn))
        old, lid = ref.properties, ref.logical_id
        params: dict[str, Any] = {}
        for key in ("Description", "KmsKeyId"):
            if old.get(key) != properties.get(key) and key in properties:
                params[key] = properties[key]
        if old.get("SecretString") != properties.get("SecretString") or old.get(
            "GenerateSecretString"
        ) != properties.get("GenerateSecretString"):
            value = self._guarded(lid, SECRET, arn, "GetRandomPassword", self._value, sm, properties)
            if value is not None:
                params["SecretString"] = value
        if params:
            self._guarded(lid, SECRET, arn, "UpdateSecret", sm.update_secret, SecretId=arn, **params)
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        if remove:
            self._guarded(lid, SECRET, arn, "UntagResource", sm.untag_resource, SecretId=arn, TagKeys=remove)
        if add:
            self._guarded(
                lid,
                SECRET,
                arn,
                "TagResource",
                sm.tag_resource,
                SecretId=arn,
                Tags=[{"Key": k, "Value": v} for k, v in add.items()],
            )
        return UpdateResult(arn, {"Id": arn})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        try:
            meta = clients("secretsmanager", region_of(ref, ref.physical_id or "")).describe_secret(
                SecretId=ref.physical_id
            )
        except ClientError:
            return None
        return {
            "Name": meta.get("Name"),
            "Description": meta.get("Description", ""),
            "KmsKeyId": meta.get("KmsKeyId", ""),
        }


PROVIDERS = (SecretProvider(),)
