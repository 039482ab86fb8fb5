"""AWS::SSM::Parameter: DeleteParameter by name (the physical id); create, update, read.

Deploy (reference 5.7, cdkd's SSM provider): the name is the template's `Name` or `/` +
the generated name; `Type` defaults to `String`; the attributes are `Type`, `Value` and
`Arn` (built from the name: a leading `/` is the separator). PutParameter without
Overwrite fails with ParameterAlreadyExists, which is the name collision; an update
overwrites (Tags cannot ride along with Overwrite, so they are diffed separately).
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
    ProviderError,
    ResourceRef,
    SdkProvider,
    UpdateResult,
    already_exists,
    error_code,
    js_scalar,
    provider_error,
    tag_delta,
    tag_map,
)

PARAMETER = "AWS::SSM::Parameter"
OPTIONAL = ("Description", "AllowedPattern", "Tier", "Policies", "DataType")


def parameter_arn(name: str, target: DeployTarget) -> str:
    qualified = name[1:] if name.startswith("/") else name
    return f"arn:{target.partition}:ssm:{target.region}:{target.account_id}:parameter/{qualified}"


class ParameterProvider(SdkProvider, DeployCalls):
    types = (PARAMETER,)
    not_found_codes = frozenset({"ParameterNotFound"})
    action = "DeleteParameter"
    handled = frozenset({"Name", "Type", "Value", "Tags", *OPTIONAL})

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        clients("ssm", ref.region).delete_parameter(Name=physical_id)
        return DELETED

    def _params(self, logical_id: str, name: str, properties: dict) -> dict[str, Any]:
        value = properties.get("Value")
        if value is None or value == "":
            raise ProviderError(f"{logical_id} ({PARAMETER} {name}): Value is required")
        params: dict[str, Any] = {"Name": name, "Value": js_scalar(value), "Type": properties.get("Type") or "String"}
        for key in OPTIONAL:
            if key in properties:
                params[key] = js_scalar(properties[key]) if key == "Policies" else properties[key]
        return params

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(resource_type, logical_id, properties, stack_name=target.stack_name)
        params = self._params(logical_id, name, properties)
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items() if not k.startswith("aws:")]
        ssm = clients("ssm", target.region)
        try:
            ssm.put_parameter(**params)
        except ClientError as exc:
            if error_code(exc) == "ParameterAlreadyExists":
                raise already_exists(logical_id, resource_type, name) from None
            raise self._as_error(logical_id, name, "PutParameter", exc) from None
        return CreateResult(name, self._attrs(name, params, target))

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        name = ref.physical_id or ""
        params = self._params(ref.logical_id, name, properties)
        ssm = clients("ssm", ref.region)
        self._guarded(ref.logical_id, PARAMETER, name, "PutParameter", ssm.put_parameter, Overwrite=True, **params)
        add, remove = tag_delta(ref.properties.get("Tags"), properties.get("Tags"))
        if remove:
            self._guarded(
                ref.logical_id,
                PARAMETER,
                name,
                "RemoveTagsFromResource",
                ssm.remove_tags_from_resource,
                ResourceType="Parameter",
                ResourceId=name,
                TagKeys=remove,
            )
        if add:
            self._guarded(
                ref.logical_id,
                PARAMETER,
                name,
                "AddTagsToResource",
                ssm.add_tags_to_resource,
                ResourceType="Parameter",
                ResourceId=name,
                Tags=[{"Key": k, "Value": v} for k, v in add.items()],
            )
        return UpdateResult(name, self._attrs(name, params, target))

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        """observedProperties in cdkd's shape (the sample record's SSM entry)."""
        name = ref.physical_id or ""
        ssm = clients("ssm", ref.region)
        try:
            param = ssm.get_parameter(Name=name)["Parameter"]
            described = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}]).get(
                "Parameters", []
            )
            tags = ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=name).get("TagList", [])
        except ClientError:
            return None
        meta = described[0] if described else {}
        return {
            "Name": name,
            "Type": param.get("Type"),
            "Value": param.get("Value"),
            "DataType": param.get("DataType", "text"),
            "Description": meta.get("Description", ""),
            "AllowedPattern": meta.get("AllowedPattern", ""),
            "Tier": meta.get("Tier", "Standard"),
            "Policies": meta.get("Policies", []),
            "Tags": {t["Key"]: t["Value"] for t in tags},
        }

    def _attributes(self, clients: Clients, ref: ResourceRef) -> dict[str, Any]:
        param = clients("ssm", ref.region).get_parameter(Name=ref.physical_id)["Parameter"]
        return {"Type": param["Type"], "Value": param["Value"], "Arn": param.get("ARN")}

    @staticmethod
    def _attrs(name: str, params: dict[str, Any], target: DeployTarget) -> dict[str, Any]:
        return {"Type": params["Type"], "Value": params["Value"], "Arn": parameter_arn(name, target)}

    @staticmethod
    def _as_error(logical_id: str, name: str, action: str, exc: ClientError) -> ProviderError:
        return provider_error(ResourceRef(logical_id, PARAMETER, name), action, exc)


PROVIDERS = (ParameterProvider(),)
