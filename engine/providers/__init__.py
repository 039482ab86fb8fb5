"""Per-resource-type deletes (and, later, creates and updates) through boto3.

`delete_resource(clients, ref, snapshot=...)` is what the destroy runner calls. It routes
the row as cdkd does for a delete (reference: deploy-engine.md §5.2): a `provisionedBy:
cc-api` row goes through Cloud Control (sticky), except for the types Cloud Control cannot
handle; otherwise the type's SDK provider; a type without one goes through Cloud Control.

Adding a type is one small module in this package that defines `PROVIDERS` (instances with
`types`, `supports_snapshot` and `delete`), plus its name in `_MODULES` below. A provider
with `read_protection`/`set_protection` also serves the protection calls; a module's
`PROTECTION` tuple holds protection handlers of types whose delete lives elsewhere.
"""

from __future__ import annotations

from typing import Any

from engine.providers import (
    custom,
    dynamodb,
    ec2_network,
    ec2_volume,
    elasticache,
    iam,
    iam_identity,
    kms,
    lambda_,
    lambda_layer,
    logs,
    protection,
    rds,
    redshift,
    route53,
    s3,
    secretsmanager,
    sns,
    sqs,
    ssm,
    waitcondition,
)
from engine.providers.base import (
    DELETED,
    IAM_NAME,
    NOT_FOUND,
    Clients,
    NotFoundGone,
    ProtectionProvider,
    Provider,
    ProviderError,
    ResourceRef,
    SdkProvider,
    Skip,
)
from engine.providers.cloudcontrol import PROVIDER as CLOUD_CONTROL
from engine.providers.cloudcontrol import CloudControlProvider, cloud_control_can_delete

_MODULES = (
    custom,
    s3,
    sqs,
    sns,
    dynamodb,
    iam,
    iam_identity,
    lambda_,
    lambda_layer,
    logs,
    ssm,
    secretsmanager,
    kms,
    route53,
    waitcondition,
    rds,
    elasticache,
    redshift,
    ec2_volume,
    ec2_network,
)
# Modules that only hold protection handlers (types whose delete lives elsewhere).
_PROTECTION_MODULES = (protection,)


def _registry() -> dict[str, Provider]:
    registry: dict[str, Provider] = {}
    for module in _MODULES:
        for provider in module.PROVIDERS:
            for resource_type in provider.types:
                if resource_type in registry:
                    raise RuntimeError(f"two providers for {resource_type}")  # a wiring mistake
                registry[resource_type] = provider
    return registry


REGISTRY: dict[str, Provider] = _registry()
SDK_TYPES: frozenset[str] = frozenset(REGISTRY)


def _deploy_registry() -> dict[str, Any]:
    """The types whose provider creates and updates (a provider with `create`), plus the
    deploy-only providers (queue and topic policies) that destroy's registry leaves out so
    destroy keeps routing them as before."""
    registry = {t: p for t, p in REGISTRY.items() if hasattr(p, "create")}
    for module in _MODULES:
        for provider in getattr(module, "DEPLOY_ONLY", ()):
            for resource_type in provider.types:
                registry[resource_type] = provider
    return registry


DEPLOY_REGISTRY: dict[str, Any] = _deploy_registry()


def deploy_provider_for(resource_type: str, provisioned_by: str | None = None) -> Any:
    """The provider a deploy uses for a type (cdkd's routing, reference 5.2): a recorded
    `cc-api` row sticks to Cloud Control where it can; otherwise the SDK provider (for the
    types destroy alone knows, one that can only delete: the run refuses to create or update
    those before any AWS call); a type without one goes through Cloud Control. None when
    neither can take it."""
    if provisioned_by == "cc-api" and cloud_control_can_delete(resource_type):
        return CLOUD_CONTROL
    sdk = DEPLOY_REGISTRY.get(resource_type) or REGISTRY.get(resource_type)  # delete-only types too
    if sdk is not None and getattr(sdk, "deploy_via_cloud_control", False) and cloud_control_can_delete(resource_type):
        return CLOUD_CONTROL  # a delete-only provider that must not block Cloud Control's create
    if sdk is not None:
        return sdk
    return CLOUD_CONTROL if cloud_control_can_delete(resource_type) else None


# cc-api rows deleted through the SDK anyway (seed 004): Cloud Control's RDS / Neptune delete
# handlers snapshot unasked, and its EC2 volume handler snapshots twice and hangs; Redshift
# and replication groups take their snapshot as a separate pre-delete step in any case.
SDK_DELETE_FOR_CC_ROWS = frozenset(
    {
        "AWS::RDS::DBInstance",
        "AWS::RDS::DBCluster",
        "AWS::Neptune::DBCluster",
        "AWS::EC2::Volume",
        "AWS::Redshift::Cluster",
        "AWS::ElastiCache::ReplicationGroup",
    }
)


def _stays_on_cloud_control(ref: ResourceRef) -> bool:
    """A cc-api row of the types above that Cloud Control must still delete: a cluster in a
    global cluster the SDK cannot detach here (seed 004 "These cases still go through Cloud
    Control"): a Neptune cluster with GlobalClusterIdentifier, an RDS one whose value is no
    plain name."""
    global_id = ref.properties.get("GlobalClusterIdentifier") if isinstance(ref.properties, dict) else None
    if global_id is None:
        return False
    if ref.resource_type == "AWS::Neptune::DBCluster":
        return True
    return ref.resource_type == "AWS::RDS::DBCluster" and not (isinstance(global_id, str) and IAM_NAME.match(global_id))


def provider_for(ref: ResourceRef) -> Provider:
    """The provider that deletes this row: Cloud Control for cc-api rows (where it can, except
    the snapshot-bearing types above) and for every type without an SDK provider; otherwise
    the SDK provider of the type."""
    if custom.is_custom_type(ref.resource_type):
        return custom.PROVIDER  # every Custom::* too; never Cloud Control's
    sdk = REGISTRY.get(ref.resource_type)
    if ref.provisioned_by == "cc-api" and cloud_control_can_delete(ref.resource_type):
        if sdk is not None and ref.resource_type in SDK_DELETE_FOR_CC_ROWS and not _stays_on_cloud_control(ref):
            return sdk
        return CLOUD_CONTROL
    return sdk if sdk is not None else CLOUD_CONTROL


def delete_resource(clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str:
    """Delete the row's AWS resource: "deleted" or "not-found"; raises Skip or ProviderError."""
    return provider_for(ref).delete(clients, ref, snapshot=snapshot)


# -- protection (seed 004 "--remove-protection") ----------------------------------------------


def _protection_registry() -> dict[str, Any]:
    registry: dict[str, Any] = {}
    handlers: list[Any] = [p for m in _MODULES for p in m.PROVIDERS if hasattr(p, "read_protection")]
    handlers += [p for m in (*_MODULES, *_PROTECTION_MODULES) for p in getattr(m, "PROTECTION", ())]
    for handler in handlers:
        for resource_type in handler.types:
            if resource_type in registry:
                raise RuntimeError(f"two protection handlers for {resource_type}")  # a wiring mistake
            registry[resource_type] = handler
    return registry


PROTECTION_REGISTRY: dict[str, Any] = _protection_registry()
PROTECTION_TYPES: frozenset[str] = frozenset(PROTECTION_REGISTRY)


def read_protection(clients: Clients, ref: ResourceRef) -> bool | None:
    """Is the row's deletion/termination guard on now (read from AWS)? None: its type has no
    protection. A resource that is gone reads False. Raises ProviderError (AWS refused the
    read, or the type's flip is not supported) or Skip (the row cannot be addressed)."""
    handler = PROTECTION_REGISTRY.get(ref.resource_type)
    return None if handler is None else bool(handler.read_protection(clients, ref))


def set_protection(clients: Clients, ref: ResourceRef, enabled: bool) -> None:
    """Turn the row's guard on or off in place. ProviderError for a type without protection."""
    handler = PROTECTION_REGISTRY.get(ref.resource_type)
    if handler is None:
        raise ProviderError(f"{ref.logical_id} ({ref.resource_type}): this type has no deletion protection to change")
    handler.set_protection(clients, ref, enabled)


__all__ = [
    "CLOUD_CONTROL",
    "DEPLOY_REGISTRY",
    "PROTECTION_REGISTRY",
    "PROTECTION_TYPES",
    "DELETED",
    "NOT_FOUND",
    "REGISTRY",
    "SDK_TYPES",
    "Clients",
    "CloudControlProvider",
    "NotFoundGone",
    "Provider",
    "ProtectionProvider",
    "ProviderError",
    "ResourceRef",
    "SdkProvider",
    "Skip",
    "delete_resource",
    "deploy_provider_for",
    "provider_for",
    "read_protection",
    "set_protection",
]
