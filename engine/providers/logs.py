"""AWS::Logs::LogGroup: DeleteLogGroup by name (the physical id)."""

from __future__ import annotations

from engine.providers.base import DELETED, Clients, ResourceRef, SdkProvider, parse_arn, region_of


def log_group_name(physical_id: str) -> str:
    """The name of a name or a log group ARN (`...:log-group:NAME[:*]`)."""
    arn = parse_arn(physical_id)
    if arn is not None and arn.resource.startswith("log-group:"):
        name = arn.resource[len("log-group:") :]
        return name[:-2] if name.endswith(":*") else name
    return physical_id


class LogGroupProvider(SdkProvider):
    types = ("AWS::Logs::LogGroup",)
    not_found_codes = frozenset({"ResourceNotFoundException"})
    action = "DeleteLogGroup"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        logs = clients("logs", region_of(ref, physical_id))
        logs.delete_log_group(logGroupName=log_group_name(physical_id))
        return DELETED


PROVIDERS = (LogGroupProvider(),)
