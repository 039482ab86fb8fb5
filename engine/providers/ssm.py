"""AWS::SSM::Parameter: DeleteParameter by name (the physical id)."""

from __future__ import annotations

from engine.providers.base import DELETED, Clients, ResourceRef, SdkProvider


class ParameterProvider(SdkProvider):
    types = ("AWS::SSM::Parameter",)
    not_found_codes = frozenset({"ParameterNotFound"})
    action = "DeleteParameter"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        clients("ssm", ref.region).delete_parameter(Name=physical_id)
        return DELETED


PROVIDERS = (ParameterProvider(),)
