"""AWS::KMS::Key: ScheduleKeyDeletion (KMS keys cannot be deleted at once).

The waiting period is the record's `PendingWindowInDays` when it is a valid 7-30, else the
minimum, 7 days (what cdkd sends; CloudFormation's default would be 30).

A key already `PendingDeletion` (or `PendingReplicaDeletion`) answers "not-found": it is
already on its way out, this run scheduled nothing, and the runner counts "not-found" as
deleted. Rescheduling would fail on AWS (KMSInvalidStateException) and would move the date.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from engine.providers.base import DELETED, NOT_FOUND, Clients, ResourceRef, SdkProvider, error_message, region_of

MIN_WINDOW, MAX_WINDOW = 7, 30
PENDING_STATES = frozenset({"PendingDeletion", "PendingReplicaDeletion"})


def pending_window(properties: dict) -> int:
    value = properties.get("PendingWindowInDays")
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and MIN_WINDOW <= value <= MAX_WINDOW:
        return value
    return MIN_WINDOW


class KeyProvider(SdkProvider):
    types = ("AWS::KMS::Key",)
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


PROVIDERS = (KeyProvider(),)
