"""What the periodic checks found: drift per stack (DriftCheck, issue 13) and the state
bucket's posture per account (BucketPosture, issue 13).

Imported by `stacks.models`, so they are the `stacks` app's models (app_label `stacks`).
"""

from __future__ import annotations

from django.db import models

from stacks.crypto import EncryptedJSONField


class DriftCheck(models.Model):
    """One drift check of one stack (stacks.drift): when, what it found per resource
    (status, reason and differences, masked as every output of engine.drift is), and the
    API calls it made. `latest` marks the newest check of its stack, so "the latest check
    per stack with drifted resources" is one indexed filter (`stacks.drift.latest_drifted`)."""

    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="drift_checks")
    stack = models.ForeignKey("stacks.Stack", null=True, on_delete=models.CASCADE, related_name="drift_checks")
    stack_name = models.CharField(max_length=1024)
    region = models.CharField(max_length=64)
    checked_at = models.DateTimeField()
    trigger = models.CharField(max_length=16, default="schedule", help_text="schedule, cli or web")
    record_etag = models.CharField(max_length=128, blank=True)
    drifted = models.PositiveIntegerField(default=0, help_text="MODIFIED + DELETED resources")
    errors = models.PositiveIntegerField(default=0, help_text="Resources whose read failed")
    counts = models.JSONField(default=dict, blank=True)
    # engine.drift's per-resource JSON (masked); encrypted like record bodies all the same.
    resources = EncryptedJSONField(default=list)
    api_calls = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, help_text="Why the stack could not be checked at all")
    latest = models.BooleanField(default=True)

    class Meta:
        ordering = ["-checked_at", "-id"]
        indexes = [
            models.Index(fields=["account", "stack_name", "region", "-checked_at"]),
            models.Index(
                fields=["account", "-checked_at"],
                condition=models.Q(latest=True, drifted__gt=0),
                name="drift_latest_drifted",
            ),
        ]

    def __str__(self) -> str:
        return f"drift of {self.stack_name} ({self.region}) at {self.checked_at:%Y-%m-%d %H:%M}: {self.drifted} drifted"


class BucketPosture(models.Model):
    """The last posture check of an account's state bucket (`engine.posture`): one entry per
    check in `results` ({key, label, status, found, change, since}), `since` being when the
    check's status was first seen. Holds bucket settings only, never a record's content."""

    account = models.OneToOneField("stacks.Account", on_delete=models.CASCADE, related_name="posture")
    bucket = models.CharField(max_length=63, blank=True)
    checked_at = models.DateTimeField()
    results = models.JSONField(default=list, blank=True)
    problem_count = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True, help_text="Why the bucket could not be checked at all")

    def __str__(self) -> str:
        return f"posture of {self.bucket or self.account}"
