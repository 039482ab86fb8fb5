"""The mirror of each stack's deployment events: `deployments/index.json` (EventIndex), its
runs (DeploymentRun) and the lines of each run's `{runId}.jsonl` (DeploymentEvent), written
by `stacks.eventsync`.

Imported by `stacks.models`, so they are the `stacks` app's models (app_label `stacks`).
"""

from __future__ import annotations

from django.db import models

from stacks.crypto import EncryptedJSONField, EncryptedTextField


class EventIndex(models.Model):
    """A stack's `deployments/index.json` (cdkd's newest 20 runs)."""

    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="event_indexes")
    key = models.CharField(max_length=1024)
    stack_name = models.CharField(max_length=1024)
    region = models.CharField(max_length=64)
    etag = models.CharField(max_length=128)
    error = models.TextField(blank=True)
    synced_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "key"], name="one_event_index_per_key")]

    def __str__(self) -> str:
        return f"runs of {self.stack_name} ({self.region})"


class RunResult(models.TextChoices):
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"
    UNKNOWN = "UNKNOWN", "Unknown (no RUN_FINISHED)"


EVENT_TYPES = [
    "RUN_STARTED",
    "RUN_FINISHED",
    "RESOURCE_STARTED",
    "RESOURCE_SUCCEEDED",
    "RESOURCE_FAILED",
    "RESOURCE_RETAINED",
    "RESOURCE_SKIPPED",
    "ROLLBACK_STARTED",
    "ROLLBACK_RESOURCE_SUCCEEDED",
    "ROLLBACK_RESOURCE_FAILED",
    "ROLLBACK_FINISHED",
]
RUN_COMMANDS = ["deploy", "destroy", "rollback"]


class DeploymentRun(models.Model):
    """One run of one stack in one region: `deployments/{runId}.jsonl` and/or its row in
    `deployments/index.json`. The index row's summary wins (it is what `cdkd events` shows);
    a run with a stream but no index row gets the summary derived from its stream; a run in
    the index whose stream was pruned keeps its summary and has no events."""

    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="deployment_runs")
    stack_name = models.CharField(max_length=1024)
    region = models.CharField(max_length=64)
    run_id = models.CharField(max_length=128)

    command = models.CharField(max_length=32, blank=True)
    cdkd_version = models.CharField(max_length=64, blank=True)
    started_at_raw = models.CharField(max_length=64, blank=True, help_text="startedAt as written")
    finished_at_raw = models.CharField(max_length=64, blank=True, help_text="finishedAt as written")
    started_at = models.DateTimeField(null=True, blank=True, help_text="startedAt, when it is a valid time")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="finishedAt, when it is a valid time")
    # For ordering and time filters: startedAt, else the run id's own timestamp.
    run_at = models.DateTimeField(null=True, blank=True)
    result = models.CharField(max_length=16, blank=True)
    event_count = models.IntegerField(default=0)

    index = models.ForeignKey(EventIndex, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    in_index = models.BooleanField(default=False, help_text="Listed in deployments/index.json")
    stream_key = models.CharField(max_length=1024, blank=True)
    stream_etag = models.CharField(max_length=128, blank=True, help_text="Empty when the stream is gone")
    has_stream = models.BooleanField(default=False)

    operation = models.ForeignKey(
        "stacks.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="deployment_runs"
    )
    synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-run_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["account", "stack_name", "region", "run_id"], name="one_run_per_stack_region"
            )
        ]
        indexes = [
            models.Index(fields=["-run_at", "-run_id"], name="run_timeline"),
            models.Index(fields=["account", "-run_at"], name="run_account_time"),
            models.Index(fields=["account", "stack_name", "region"], name="run_stack"),
            models.Index(fields=["command"], name="run_command"),
            models.Index(fields=["result"], name="run_result"),
            models.Index(fields=["operation"], name="run_operation"),
        ]

    def __str__(self) -> str:
        return self.run_id

    @property
    def summary_source(self) -> str:
        return "index" if self.in_index else ("stream" if self.has_stream else "none")

    def as_summary(self) -> dict:
        """cdkd's `DeploymentRunSummary` (what `cdkd events --json` lists)."""
        return {
            "runId": self.run_id,
            "command": self.command,
            "cdkdVersion": self.cdkd_version,
            "startedAt": self.started_at_raw,
            "finishedAt": self.finished_at_raw,
            "result": self.result,
            "eventCount": self.event_count,
        }


class DeploymentEvent(models.Model):
    """One line of a run's `{runId}.jsonl`, in stream order (`seq`); `raw` is the line's object."""

    run = models.ForeignKey(DeploymentRun, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    timestamp_raw = models.CharField(max_length=64, blank=True)
    timestamp = models.DateTimeField(null=True, blank=True)
    event_type = models.CharField(max_length=64, blank=True)
    stack_name = models.CharField(max_length=1024, blank=True, help_text="A nested child's events carry its name")
    logical_id = models.CharField(max_length=255, blank=True)
    resource_type = models.CharField(max_length=255, blank=True)
    physical_id = models.CharField(max_length=2048, blank=True)
    operation = models.CharField(max_length=16, blank=True)
    provisioned_by = models.CharField(max_length=16, blank=True)
    result = models.CharField(max_length=16, blank=True)
    # The free text of a line (cdkd masks only the secret values it knows of in it) and the
    # line itself are encrypted at rest like record bodies; the columns above are filters.
    reason = EncryptedTextField(blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    error = EncryptedJSONField(null=True, blank=True)
    counts = models.JSONField(null=True, blank=True)
    raw = EncryptedJSONField(default=dict)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="one_event_per_seq")]
        indexes = [
            models.Index(fields=["event_type", "run"], name="event_type_run"),
            models.Index(fields=["logical_id"], name="event_logical_id"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.logical_id}".strip()

    @property
    def error_message(self) -> str:
        if isinstance(self.error, dict):
            message = self.error.get("message")
            return message if isinstance(message, str) else ""
        return ""
