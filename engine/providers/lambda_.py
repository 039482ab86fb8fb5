"""AWS::Lambda::Function (DeleteFunction) and AWS::Lambda::Permission (RemovePermission).

A permission's physical id is the bare statement id (what cdkd records), or
`<function name or ARN>|<statementId>` (the older Cloud Control path, and the legacy
`function|statementId` form). The function comes from the `FunctionName` property, else from
the physical id. Per seed 004 the row is skipped, no AWS call, when neither names the
function, or when the physical id carries no statement id.
"""

from __future__ import annotations

from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    Clients,
    ResourceRef,
    SdkProvider,
    Skip,
    is_redacted,
    parse_arn,
    region_of,
)

NOT_FOUND_CODES = frozenset({"ResourceNotFoundException"})


class FunctionProvider(SdkProvider):
    types = ("AWS::Lambda::Function",)
    not_found_codes = NOT_FOUND_CODES
    action = "DeleteFunction"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        # DeleteFunction takes a name or an ARN; an ARN's region wins over the stack's.
        clients("lambda", region_of(ref, physical_id)).delete_function(FunctionName=physical_id)
        return DELETED


def split_permission_id(physical_id: str) -> tuple[str | None, str]:
    """(function from the physical id or None, statement id); Skip when it does not decode."""
    if "|" not in physical_id:
        return None, physical_id
    function, _, statement = physical_id.rpartition("|")
    if not statement.strip():
        raise Skip(
            f"{COMPOSITE_ID_SKIP_REASON} (the physical id carries no StatementId; expected <function>|<statementId>)"
        )
    if not function.strip():
        raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected <function>|<statementId>)")
    return function, statement


class PermissionProvider(SdkProvider):
    types = ("AWS::Lambda::Permission",)
    not_found_codes = NOT_FOUND_CODES  # the function or the statement is gone
    action = "RemovePermission"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        from_id, statement = split_permission_id(physical_id)
        prop = ref.properties.get("FunctionName")
        function = prop if isinstance(prop, str) and prop.strip() and not is_redacted(prop) else from_id
        if not function:
            raise Skip(
                "neither a FunctionName property nor a function in the physical id: the statement stays on the "
                "function's resource policy; repair FunctionName in state.json and run the destroy again"
            )
        arn = parse_arn(function)
        region = arn.region if arn and arn.region else ref.region
        clients("lambda", region).remove_permission(FunctionName=function, StatementId=statement)
        return DELETED


PROVIDERS = (FunctionProvider(), PermissionProvider())
