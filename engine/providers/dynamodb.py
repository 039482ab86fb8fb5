"""AWS::DynamoDB::Table: DeleteTable.

- Not there (ResourceNotFoundException) → "not-found"; already DELETING → "not-found" too
  (someone else's delete is under way; this run deleted nothing).
- Deletion protection on → ProviderError naming it: the admin has no --remove-protection,
  and turning a guard off is a person's decision.
- No final snapshot: CloudFormation does not accept `DeletionPolicy: Snapshot` on a table and
  cdkd's snapshot-capable types do not include it, so a Snapshot policy here fails the
  resource (the runner's refusal), as cdkd does.
"""

from __future__ import annotations

from engine.providers.base import (
    DELETED,
    NOT_FOUND,
    Clients,
    ProviderError,
    ResourceRef,
    SdkProvider,
    describe,
    parse_arn,
    region_of,
)


def table_name(physical_id: str) -> str:
    """The table name of a name or a table ARN (`arn:aws:dynamodb:r:a:table/NAME`)."""
    arn = parse_arn(physical_id)
    if arn is not None and arn.resource.startswith("table/"):
        return arn.resource.split("/", 2)[1]
    return physical_id


class TableProvider(SdkProvider):
    types = ("AWS::DynamoDB::Table",)
    supports_snapshot = False
    not_found_codes = frozenset({"ResourceNotFoundException", "TableNotFoundException"})
    action = "DeleteTable"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name = table_name(physical_id)
        ddb = clients("dynamodb", region_of(ref, physical_id))
        table = ddb.describe_table(TableName=name)["Table"]
        if table.get("TableStatus") == "DELETING":
            return NOT_FOUND
        if table.get("DeletionProtectionEnabled"):
            raise ProviderError(
                f"{describe(ref, physical_id)}: DeleteTable refused: deletion protection is enabled "
                f"(DeletionProtectionEnabled); turn it off on the table, then run the destroy again",
                aws_code="DeletionProtectionEnabled",
            )
        ddb.delete_table(TableName=name)
        return DELETED


PROVIDERS = (TableProvider(),)
