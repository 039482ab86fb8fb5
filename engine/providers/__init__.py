"""Per-resource-type deletes (and, later, creates and updates) through boto3.

`delete_resource(clients, ref, snapshot=...)` is what the destroy runner calls. It routes
the row as cdkd does for a delete (reference: deploy-engine.md §5.2): a `provisionedBy:
cc-api` row goes through Cloud Control (sticky), except for the types Cloud Control cannot
handle; otherwise the type's SDK provider; a type without one goes through Cloud Control.

Adding a type is one small module in this package that defines `PROVIDERS` (instances with
`types`, `supports_snapshot` and `delete`), plus its name in `_MODULES` below.
"""

from __future__ import annotations

from typing import Any

from engine.providers import custom, dynamodb, iam, kms, lambda_, logs, s3, secretsmanager, sns, sqs, ssm
from engine.providers.base import (
    DELETED,
    NOT_FOUND,
    Clients,
    NotFoundGone,
    Provider,
    ProviderError,
    ResourceRef,
    SdkProvider,
    Skip,
)
from engine.providers.cloudcontrol import PROVIDER as CLOUD_CONTROL
from engine.providers.cloudcontrol import CloudControlProvider, cloud_control_can_delete

_MODULES = (s3, sqs, sns, dynamodb, iam, lambda_, logs, ssm, secretsmanager, kms, custom)


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
    if sdk is not None:
        return sdk
    return CLOUD_CONTROL if cloud_control_can_delete(resource_type) else None


def provider_for(ref: ResourceRef) -> Provider:
    """The provider that deletes this row: Cloud Control for cc-api rows (where it can) and
    for every type without an SDK provider; otherwise the SDK provider of the type."""
    if custom.is_custom_type(ref.resource_type):
        return custom.PROVIDER  # every Custom::* too; never Cloud Control's
    sdk = REGISTRY.get(ref.resource_type)
    if ref.provisioned_by == "cc-api" and cloud_control_can_delete(ref.resource_type):
        return CLOUD_CONTROL
    return sdk if sdk is not None else CLOUD_CONTROL


def delete_resource(clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str:
    """Delete the row's AWS resource: "deleted" or "not-found"; raises Skip or ProviderError."""
    return provider_for(ref).delete(clients, ref, snapshot=snapshot)


__all__ = [
    "CLOUD_CONTROL",
    "DEPLOY_REGISTRY",
    "DELETED",
    "NOT_FOUND",
    "REGISTRY",
    "SDK_TYPES",
    "Clients",
    "CloudControlProvider",
    "NotFoundGone",
    "Provider",
    "ProviderError",
    "ResourceRef",
    "SdkProvider",
    "Skip",
    "delete_resource",
    "deploy_provider_for",
    "provider_for",
]
