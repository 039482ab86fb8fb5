"""AWS::SecretsManager::Secret: DeleteSecret with ForceDeleteWithoutRecovery.

Why no recovery window: cdkd deletes this way, as CloudFormation's delete handler does, so
the name is free at once and a redeploy of the same stack can create it again (with a
window, CreateSecret fails for up to 30 days with "scheduled for deletion"). A secret already
scheduled for deletion is force-deleted too, which finishes that deletion ("deleted").

DeleteSecret with ForceDeleteWithoutRecovery answers success for a secret that does not
exist (moto does this, and so may AWS), so DescribeSecret comes first to report
"not-found" honestly.
"""

from __future__ import annotations

from engine.providers.base import DELETED, Clients, ResourceRef, SdkProvider, region_of


class SecretProvider(SdkProvider):
    types = ("AWS::SecretsManager::Secret",)
    not_found_codes = frozenset({"ResourceNotFoundException"})
    action = "DeleteSecret"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        sm = clients("secretsmanager", region_of(ref, physical_id))
        sm.describe_secret(SecretId=physical_id)  # ResourceNotFoundException → "not-found"
        sm.delete_secret(SecretId=physical_id, ForceDeleteWithoutRecovery=True)
        return DELETED


PROVIDERS = (SecretProvider(),)
