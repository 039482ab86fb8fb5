"""Deploy plans (issue 9): an uploaded cloud assembly (Assembly) and cdkd's diff of one of
its stacks against the record as read (DeployPlan).

Imported by `stacks.models`, so they are the `stacks` app's models (app_label `stacks`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from stacks.crypto import EncryptedJSONField


class Assembly(models.Model):
    """A synthesized cloud assembly someone uploaded, kept once per content digest (the
    engine's `assembly_digest` over its files) as a canonical zip in the `assemblies`
    storage. It is data: nothing in it is ever run."""

    digest = models.CharField(max_length=64, unique=True)
    size = models.BigIntegerField(default=0, help_text="Bytes of the stored zip")
    file_count = models.PositiveIntegerField(default=0)
    stack_names = models.JSONField(default=list, blank=True)
    original_name = models.CharField(max_length=255, blank=True, help_text="The uploaded file's name")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"assembly {self.digest[:12]} ({', '.join(self.stack_names) or 'no stacks'})"


class DeployPlan(models.Model):
    """cdkd's diff of one stack of an assembly against the record as it was read, and the
    admin's plan document (reference 6.3), masked as every page masks a record. The plan
    binds to its inputs: the assembly digest, the record's ETag and version, the
    parameters; `digest` is the engine's digest of the unmasked plan."""

    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="deploy_plans")
    stack_name = models.CharField(max_length=1024)
    region = models.CharField(max_length=64)
    assembly = models.ForeignKey(Assembly, on_delete=models.PROTECT, related_name="plans")
    # cdkd's --json node with `plan` and `children`, masked; encrypted like record bodies.
    document = EncryptedJSONField()
    digest = models.CharField(max_length=64)
    state_key = models.CharField(max_length=1024)
    state_etag = models.CharField(max_length=128, blank=True, help_text="Empty: no record (a new stack)")
    state_version_id = models.CharField(max_length=1024, blank=True)
    parameters = EncryptedJSONField(default=dict)
    recursive = models.BooleanField(default=False)
    has_changes = models.BooleanField(default=False)
    blocking_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["account", "stack_name", "region"])]

    def __str__(self) -> str:
        return f"plan of {self.stack_name} ({self.region}) {self.digest[:12]}"
