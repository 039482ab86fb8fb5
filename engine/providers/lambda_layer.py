"""AWS::Lambda::LayerVersion: DeleteLayerVersion by the version ARN cdkd records.

The physical id is `arn:aws:lambda:REGION:ACCOUNT:layer:NAME:VERSION`; anything else is the
seed 004 skip ("malformed version ARN": the layer version stays published), with no AWS call.
DeleteLayerVersion answers 200 for a version that is already gone, so GetLayerVersion asks
first: that is what makes a re-run say "not-found" rather than "deleted".
"""

from __future__ import annotations

from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    Clients,
    ResourceRef,
    SdkProvider,
    Skip,
    parse_arn,
    region_of,
)

LAYER_VERSION = "AWS::Lambda::LayerVersion"


def split_layer_version(physical_id: str) -> tuple[str, int]:
    """(layer ARN, version number) of a layer version ARN, or Skip."""
    arn = parse_arn(physical_id)
    parts = arn.resource.split(":") if arn is not None else []
    if arn is None or arn.service != "lambda" or len(parts) != 3 or parts[0] != "layer" or not parts[2].isdigit():
        raise Skip(
            f"{COMPOSITE_ID_SKIP_REASON} (expected a layer version ARN arn:aws:lambda:<region>:<account>:layer:"
            f"<name>:<version>; the layer version stays published)"
        )
    return physical_id.rsplit(":", 1)[0], int(parts[2])


class LayerVersionProvider(SdkProvider):
    types = (LAYER_VERSION,)
    not_found_codes = frozenset({"ResourceNotFoundException"})
    action = "DeleteLayerVersion"

    def delete(self, clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str:
        if isinstance(ref.physical_id, str) and ref.physical_id.strip():
            split_layer_version(ref.physical_id.strip())  # a malformed id skips before any call
        return super().delete(clients, ref, snapshot=snapshot)

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        layer, version = split_layer_version(physical_id)
        lam = clients("lambda", region_of(ref, physical_id))
        lam.get_layer_version(LayerName=layer, VersionNumber=version)  # gone → "not-found"
        lam.delete_layer_version(LayerName=layer, VersionNumber=version)
        return DELETED


PROVIDERS = (LayerVersionProvider(),)
