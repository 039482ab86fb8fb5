"""Read-only background jobs over accounts: syncs (SyncRun) and secret scans (ScanRun, with
what they found: SecretFinding), sharing the abstract BackgroundRun.

Imported by `stacks.models`, so they are the `stacks` app's models (app_label `stacks`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SyncStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    PARTIAL = "partial", "Some accounts failed"
    FAILED = "failed", "Failed"


class BackgroundRun(models.Model):
    """A read-only background job over one or more accounts (a sync, a scan): created
    before it is queued, claimed once by the worker, with progress for a polling page."""

    # The accounts this run covers, fixed when it is requested (pks).
    account_ids = models.JSONField(default=list, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    status = models.CharField(max_length=16, choices=SyncStatus.choices, default=SyncStatus.QUEUED)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    phase = models.CharField(max_length=128, blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @property
    def finished(self) -> bool:
        return self.status in (SyncStatus.SUCCEEDED, SyncStatus.PARTIAL, SyncStatus.FAILED)

    @property
    def percent(self) -> int:
        if self.finished:
            return 100
        return int(100 * self.done / self.total) if self.total else 0


class SyncRun(BackgroundRun):
    """One sync of one account or of all of them (the requester's visible ones); `total`
    counts the records to download once the listing is done."""

    account = models.ForeignKey(
        "stacks.Account", null=True, blank=True, on_delete=models.CASCADE, related_name="sync_runs"
    )
    trigger = models.CharField(max_length=16, default="ui", help_text="ui, schedule or command")

    class Meta(BackgroundRun.Meta):
        pass

    def __str__(self) -> str:
        return f"sync #{self.pk} ({self.status})"


class ScanRun(BackgroundRun):
    """One secret scan (`engine.scrub.scan`) of one or more accounts, whole or limited to
    stacks (and a region); `total` counts accounts. Never holds a secret value: only
    counts, warnings (masked by the engine) and where findings are."""

    account = models.ForeignKey(
        "stacks.Account", null=True, blank=True, on_delete=models.CASCADE, related_name="scan_runs"
    )
    # Empty: every stack of each account (a whole-account scan).
    stacks = models.JSONField(default=list, blank=True)
    region = models.CharField(max_length=64, blank=True, help_text="Only this region of the stacks (stack scans)")
    history = models.BooleanField(default=True, help_text="Noncurrent versions are read too")
    objects_scanned = models.PositiveIntegerField(default=0)
    keys = models.PositiveIntegerField(default=0)
    secrets = models.PositiveIntegerField(default=0, help_text="Known secret values searched for")
    finding_count = models.PositiveIntegerField(default=0)
    warnings = models.JSONField(default=list, blank=True)

    class Meta(BackgroundRun.Meta):
        pass

    def __str__(self) -> str:
        return f"scan #{self.pk} ({self.status})"

    @property
    def scope(self) -> str:
        if not self.stacks:
            return "whole account" if len(self.account_ids) == 1 else f"{len(self.account_ids)} accounts"
        names = ", ".join(self.stacks)
        return f"{names} ({self.region})" if self.region else names


class SecretFinding(models.Model):
    """One place the last scan of its scope found a secret: where (key, version, JSON path)
    and what matched (`source`), never any part of the value. A whole-account scan replaces
    the account's findings; a stack scan replaces that stack's."""

    KEY_KINDS = [
        ("record", "State record"),
        ("journal", "Rollback journal"),
        ("exports-index", "Exports index"),
        ("events", "Event stream"),
        ("placeholder", "Custom-resource placeholder"),
        ("other", "Other"),
    ]

    scan = models.ForeignKey(ScanRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="findings")
    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="secret_findings")
    stack_name = models.CharField(max_length=1024, blank=True, help_text="Empty: not attributable to a stack")
    region = models.CharField(max_length=64, blank=True)
    key = models.CharField(max_length=1024)
    key_kind = models.CharField(max_length=16, choices=KEY_KINDS, default="other")
    version_id = models.CharField(max_length=1024, null=True, blank=True)  # noqa: DJ001 (None = current version)
    path = models.JSONField(default=list)
    source = models.TextField()
    whole = models.BooleanField(default=True, help_text="False: embedded in a longer string")
    found_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["account", "stack_name", "region", "key", "version_id", "id"]
        indexes = [
            models.Index(fields=["account", "stack_name", "region"], name="finding_stack"),
            models.Index(fields=["key_kind"], name="finding_key_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.key} {'current' if self.version_id is None else self.version_id}: {self.source}"

    @property
    def current(self) -> bool:
        return self.version_id is None

    @property
    def path_text(self) -> str:
        out = ""
        for p in self.path if isinstance(self.path, list) else []:
            out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
        return out or "(whole object)"
