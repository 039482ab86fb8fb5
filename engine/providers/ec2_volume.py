"""AWS::EC2::Volume: EC2 DeleteVolume, with a pre-delete final snapshot.

Always EC2, never Cloud Control (seed 004: its delete handler has been seen taking a second,
untagged snapshot and leaving the volume stuck in `deleting`). snapshot=True: CreateSnapshot
tagged `cdkd:final-snapshot-of: <volumeId>`, waited to `completed`, then DeleteVolume. A
re-run reuses a pending or completed snapshot carrying that tag instead of paying for a second
one: the tag is keyed on an AWS-generated volume id that is never reused. A volume already
`deleting`/`deleted` is "not-found".
"""

from __future__ import annotations

from typing import Any

from engine.providers.base import (
    DELETED,
    NOT_FOUND,
    Clients,
    ProviderError,
    ResourceRef,
    SdkProvider,
    describe,
    region_of,
)
from engine.providers.snapshots import Waits

VOLUME = "AWS::EC2::Volume"
SNAPSHOT_TAG = "cdkd:final-snapshot-of"


class VolumeProvider(SdkProvider, Waits):
    types = (VOLUME,)
    supports_snapshot = True
    not_found_codes = frozenset({"InvalidVolume.NotFound"})
    action = "DeleteVolume"

    def __init__(self, **waits: Any) -> None:
        Waits.__init__(self, **waits)

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        ec2 = clients("ec2", region_of(ref, physical_id))
        volume = ec2.describe_volumes(VolumeIds=[physical_id])["Volumes"][0]
        if volume.get("State") in ("deleting", "deleted"):
            return NOT_FOUND
        if snapshot:
            self._snapshot(ec2, ref, physical_id)
        ec2.delete_volume(VolumeId=physical_id)
        return DELETED

    def _snapshot(self, ec2: Any, ref: ResourceRef, volume_id: str) -> str:
        tagged = ec2.describe_snapshots(
            OwnerIds=["self"], Filters=[{"Name": f"tag:{SNAPSHOT_TAG}", "Values": [volume_id]}]
        ).get("Snapshots", [])
        usable = sorted(
            (s for s in tagged if s.get("State") in ("pending", "completed")), key=lambda s: s["State"] != "completed"
        )
        if usable:
            snapshot_id = usable[0]["SnapshotId"]
        else:
            snapshot_id = ec2.create_snapshot(
                VolumeId=volume_id,
                Description=f"cdkd final snapshot of {volume_id} ({ref.logical_id})",
                TagSpecifications=[{"ResourceType": "snapshot", "Tags": [{"Key": SNAPSHOT_TAG, "Value": volume_id}]}],
            )["SnapshotId"]

        def completed() -> bool:
            state = ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"][0].get("State")
            if state == "error":
                raise ProviderError(
                    f"{describe(ref, volume_id)}: final snapshot {snapshot_id} failed; the volume was not deleted"
                )
            return state == "completed"

        self.wait_for(ref, f"final snapshot {snapshot_id}", completed)
        return snapshot_id


PROVIDERS = (VolumeProvider(),)
