"""AWS::CloudFormation::WaitCondition and AWS::CloudFormation::WaitConditionHandle.

Nothing in AWS stands behind either outside CloudFormation: cdkd provisions the handle as a
no-op placeholder (`cdkd-wait-condition-handle-<logicalId>-<uuid>`), and a handle imported
from CloudFormation names a pre-signed URL into CloudFormation's own signal bucket, which no
API deletes. So the delete is cdkd's no-op: no AWS call, "deleted", and the row goes.
"""

from __future__ import annotations

from engine.providers.base import DELETED, Clients, ResourceRef, SdkProvider


class WaitConditionProvider(SdkProvider):
    types = ("AWS::CloudFormation::WaitCondition", "AWS::CloudFormation::WaitConditionHandle")
    action = "none (no AWS resource)"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        return DELETED


PROVIDERS = (WaitConditionProvider(),)
