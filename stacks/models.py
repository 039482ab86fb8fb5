"""The mirror of every account's cdkd state bucket, and who may see it.

The bucket is the source of truth: rows here are written by `stacks.sync` from what S3
returned and are never edited by hand (the Django admin shows them read-only).
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from engine.aws import AccountAccess
from stacks.crypto import EncryptedBinaryField, EncryptedJSONField, EncryptedTextField


def now_ms() -> int:
    return int(time.time() * 1000)


class Role(models.TextChoices):
    """Per-account roles, each including the ones before it."""

    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    APPROVER = "approver", "Approver"
    ADMIN = "admin", "Admin"

    @classmethod
    def rank(cls, role: str) -> int:
        return [cls.VIEWER, cls.OPERATOR, cls.APPROVER, cls.ADMIN].index(role)


class BucketStatus(models.TextChoices):
    UNKNOWN = "unknown", "Not synced yet"
    OK = "ok", "OK"
    MISSING = "missing", "Bucket missing"
    DENIED = "denied", "Access denied"
    ERROR = "error", "Error"


class BucketSource(models.TextChoices):
    EXPLICIT = "explicit", "Explicit"
    DEFAULT = "default", "Default (cdkd-state-{account})"
    DEFAULT_LEGACY = "default-legacy", "Legacy default (cdkd-state-{account}-{region})"


class Account(models.Model):
    """An AWS account whose cdkd state bucket the team uses."""

    account_id = models.CharField(
        max_length=12, unique=True, validators=[RegexValidator(r"^\d{12}$", "An AWS account id is 12 digits.")]
    )
    name = models.CharField(max_length=100, blank=True, help_text="A label people recognise")
    role_arn = models.CharField(
        max_length=2048, blank=True, help_text="Role to assume in the account; empty uses the app's own credentials"
    )
    external_id = models.CharField(max_length=1224, blank=True)
    bucket = models.CharField(max_length=63, blank=True, help_text="Explicit state bucket; empty resolves as cdkd does")
    prefix = models.CharField(max_length=512, default="cdkd")
    region = models.CharField(
        max_length=32, blank=True, help_text="cdkd's CLI region for this account (names the legacy bucket)"
    )

    # What the last sync found out about the bucket.
    resolved_bucket = models.CharField(max_length=63, blank=True)
    bucket_source = models.CharField(max_length=16, choices=BucketSource.choices, blank=True)
    bucket_region = models.CharField(max_length=32, blank=True)
    bucket_status = models.CharField(max_length=16, choices=BucketStatus.choices, default=BucketStatus.UNKNOWN)
    bucket_message = models.TextField(blank=True, help_text="Why the bucket is not usable, or a warning about it")
    bucket_checked_at = models.DateTimeField(null=True, blank=True, help_text="When the bucket was last resolved")

    last_sync_started_at = models.DateTimeField(null=True, blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True, help_text="End of the last sync that succeeded")
    last_sync_error = models.TextField(blank=True)
    last_sync_counts = models.JSONField(default=dict, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "account_id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.account_id})" if self.name else self.account_id

    @property
    def label(self) -> str:
        return self.name or self.account_id

    @property
    def cli_region(self) -> str:
        return self.region or settings.CDKD_DEFAULT_REGION

    def access(self) -> AccountAccess:
        """How the engine reaches this account's bucket."""
        return AccountAccess(
            account_id=self.account_id,
            role_arn=self.role_arn,
            external_id=self.external_id,
            bucket=self.bucket,
            prefix=self.prefix,
            region=self.cli_region,
        )


class Membership(models.Model):
    """A person's role on one account. Superusers need none: they act as admin everywhere."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    # The reveal right: download a record's stored bytes unmasked (audited). Admins hold it
    # whatever this says (`stacks.secretmask.may_reveal`); an admin grants it to others.
    can_reveal = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "account"], name="one_role_per_account")]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} on {self.account}"


class Stack(models.Model):
    """One `state.json` record (region-scoped or legacy) as last read from the bucket."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="stacks")
    key = models.CharField(max_length=1024)
    stack_name = models.CharField(max_length=1024)
    # The key decides the region; None only for a legacy key whose body names no region.
    region = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 (None = no region, not "")
    legacy = models.BooleanField(default=False)

    etag = models.CharField(max_length=128)
    version_id = models.CharField(max_length=1024, blank=True)
    size = models.BigIntegerField(default=0)
    s3_last_modified = models.DateTimeField(null=True, blank=True)
    # Verbatim, and encrypted at rest: a record holds whatever cdkd resolved, secrets included.
    body = EncryptedBinaryField(help_text="The stored bytes, verbatim (encrypted at rest)")

    schema_version = models.IntegerField(null=True, blank=True)
    record_last_modified = models.BigIntegerField(null=True, blank=True, help_text="The record's lastModified (ms)")
    read_only = models.BooleanField(default=False, help_text="Written by a newer cdkd than this app knows")
    defects = models.JSONField(default=list, blank=True)
    has_defects = models.BooleanField(default=False)
    body_region = models.CharField(
        max_length=128, blank=True, help_text="Kind of region value the body held, if it disagrees"
    )
    region_mismatch = models.BooleanField(default=False)

    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    parent_stack_name = models.CharField(max_length=1024, blank=True)
    parent_logical_id = models.CharField(max_length=255, blank=True)
    root_name = models.CharField(max_length=1024, help_text="The top-level stack of the ~ chain")
    depth = models.PositiveSmallIntegerField(default=0)

    resource_count = models.PositiveIntegerField(default=0)
    output_count = models.PositiveIntegerField(default=0)
    # What destroy's import check reads from the mirror (stacks.consumers.mirror_imports).
    imports = models.JSONField(
        null=True,
        blank=True,
        help_text="The record's imports entries, or why they cannot be read; null = not mirrored yet",
    )
    synced_at = models.DateTimeField()

    # The rollback-journal.json beside the record, as the sync's listing saw it (never its
    # body: it holds resolved properties). journal_key None: not known yet (no sync since
    # these fields exist); "": none. journal_modified is set exactly when a journal is.
    journal_key = models.CharField(max_length=1024, null=True, blank=True)  # noqa: DJ001 (None = not known yet)
    journal_etag = models.CharField(max_length=128, blank=True)
    journal_size = models.BigIntegerField(null=True, blank=True)
    journal_modified = models.DateTimeField(
        null=True, blank=True, db_index=True, help_text="S3 LastModified of a leftover rollback journal"
    )

    class Meta:
        ordering = ["stack_name", "region"]
        constraints = [models.UniqueConstraint(fields=["account", "key"], name="one_stack_per_key")]
        indexes = [
            models.Index(fields=["stack_name"]),
            models.Index(fields=["account", "stack_name", "region"]),
            models.Index(fields=["account", "root_name"]),
        ]

    def __str__(self) -> str:
        return f"{self.stack_name} ({self.region or 'legacy'})"

    @property
    def is_nested(self) -> bool:
        return self.depth > 0

    @property
    def region_slug(self) -> str:
        """The region segment of the stack's URLs. A legacy record is `legacy` or
        `legacy-{region}`, so it never collides with a region-scoped copy of the stack."""
        if self.legacy:
            return f"legacy-{self.region}" if self.region else "legacy"
        return self.region or ""


class Resource(models.Model):
    """One row of a record's `resources`, so resources are searchable across accounts."""

    stack = models.ForeignKey(Stack, on_delete=models.CASCADE, related_name="resources")
    logical_id = models.CharField(max_length=255)
    resource_type = models.CharField(max_length=255, blank=True)
    physical_id = models.CharField(max_length=2048, blank=True)
    # "" = absent in the record (the legacy SDK default), else "sdk" or "cc-api".
    provisioned_by = models.CharField(max_length=16, blank=True)
    deletion_policy = models.CharField(max_length=32, blank=True)
    malformed = models.BooleanField(default=False)

    class Meta:
        ordering = ["logical_id"]
        indexes = [
            models.Index(fields=["logical_id"]),
            models.Index(fields=["physical_id"]),
            models.Index(fields=["resource_type"]),
        ]

    def __str__(self) -> str:
        return f"{self.logical_id} ({self.resource_type})"


class LockState(models.TextChoices):
    NONE = "none", "Unlocked"
    LIVE = "live", "Locked"
    EXPIRED = "expired", "Expired lock"
    UNREADABLE = "unreadable", "Unreadable lock"


class Lock(models.Model):
    """A `lock.json` as last read. It may exist with no record beside it (a first deploy)."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="locks")
    key = models.CharField(max_length=1024)
    stack_name = models.CharField(max_length=1024)
    region = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 (None = no region, not "")
    stack = models.OneToOneField(Stack, null=True, blank=True, on_delete=models.SET_NULL, related_name="lock")

    etag = models.CharField(max_length=128)
    s3_last_modified = models.DateTimeField(null=True, blank=True)
    # The lock's own bytes come from the bucket like a record's: encrypted the same way.
    body = EncryptedBinaryField()
    readable = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    owner = models.TextField(blank=True)
    operation = models.CharField(max_length=255, blank=True)
    timestamp_ms = models.BigIntegerField(null=True, blank=True)
    # None when expiresAt is absent or not a finite number: cdkd counts that as expired.
    expires_at_ms = models.BigIntegerField(null=True, blank=True)
    synced_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "key"], name="one_lock_per_key")]

    def __str__(self) -> str:
        return f"lock on {self.stack_name} ({self.region or 'legacy'})"

    def state(self, at_ms: int | None = None) -> str:
        if not self.readable:
            return LockState.UNREADABLE
        if self.expires_at_ms is None or (at_ms or now_ms()) >= self.expires_at_ms:
            return LockState.EXPIRED
        return LockState.LIVE


class EventIndex(models.Model):
    """A stack's `deployments/index.json` (cdkd's newest 20 runs)."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="event_indexes")
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

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="deployment_runs")
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
        "Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="deployment_runs"
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

    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.CASCADE, related_name="sync_runs")
    trigger = models.CharField(max_length=16, default="ui", help_text="ui, schedule or command")

    class Meta(BackgroundRun.Meta):
        pass

    def __str__(self) -> str:
        return f"sync #{self.pk} ({self.status})"


# --- secret scans -------------------------------------------------------------------------


class ScanRun(BackgroundRun):
    """One secret scan (`engine.scrub.scan`) of one or more accounts, whole or limited to
    stacks (and a region); `total` counts accounts. Never holds a secret value: only
    counts, warnings (masked by the engine) and where findings are."""

    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.CASCADE, related_name="scan_runs")
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
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="secret_findings")
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


# --- operations, approvals and the audit log ------------------------------------------


class OperationKind(models.TextChoices):
    FORCE_UNLOCK = "force-unlock", "Force-unlock"
    ORPHAN = "orphan", "Orphan record"
    ORPHAN_RESOURCES = "orphan-resources", "Orphan resources"
    RESTORE = "restore", "Restore version"
    DESTROY = "destroy", "Destroy"
    SCRUB = "scrub", "Scrub secrets"
    DEPLOY = "deploy", "Deploy"
    ROLLBACK = "rollback", "Roll back"
    REFRESH_OBSERVED = "refresh-observed", "Refresh observed"
    DRIFT_ACCEPT = "drift-accept", "Accept drift"
    DRIFT_REVERT = "drift-revert", "Revert drift"
    STATE_MIGRATE = "state-migrate", "State migrate"
    EVENTS_PRUNE = "events-prune", "Prune events"


class OperationStatus(models.TextChoices):
    REQUESTED = "requested", "Requested"
    AWAITING_APPROVAL = "awaiting-approval", "Awaiting approval"
    APPROVED = "approved", "Approved"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    PARTIAL = "partial", "Partial"
    REFUSED = "refused", "Refused"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


FINISHED_STATUSES = frozenset(
    {
        OperationStatus.SUCCEEDED,
        OperationStatus.FAILED,
        OperationStatus.PARTIAL,
        OperationStatus.REFUSED,
        OperationStatus.CANCELLED,
        OperationStatus.EXPIRED,
    }
)


class Operation(models.Model):
    """One requested change to a state bucket, from request to result. Created before it
    is queued; the plan (and its digest) is fixed when it is created."""

    kind = models.CharField(max_length=32, choices=OperationKind.choices)
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="operations")
    stack_name = models.CharField(max_length=1024)
    region = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 (None = legacy record)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="operations"
    )
    requester_name = models.CharField(max_length=255, help_text="username, or cli:<os user>")
    via = models.CharField(max_length=8, default="web", help_text="web or cli")
    params = models.JSONField(default=dict, blank=True)
    # The parameters the kind's spec names `secret_params` (a deploy's template parameters),
    # encrypted at rest like record bodies; `all_params` gives the engine both.
    secret_params = EncryptedJSONField(default=dict, blank=True)
    # Why the requester asks (free text or a ticket reference); shown to approvers, audited.
    reason = models.CharField(max_length=500, blank=True)
    # "Run again" of a partial or failed operation: the one it repeats.
    rerun_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns")

    plan = models.JSONField(default=dict)
    plan_digest = models.CharField(max_length=80)
    plan_etag = models.CharField(max_length=128, blank=True, help_text="The ETag the plan was computed from")

    status = models.CharField(max_length=24, choices=OperationStatus.choices, default=OperationStatus.REQUESTED)
    progress = models.JSONField(default=dict, blank=True)
    log = models.JSONField(default=list, blank=True)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    etag_before = models.CharField(max_length=128, blank=True)
    etag_after = models.CharField(max_length=128, blank=True)
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status"]), models.Index(fields=["account", "stack_name", "region"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.get_kind_display()} {self.stack_name}"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def region_slug(self) -> str:
        return self.region or "legacy"

    @property
    def all_params(self) -> dict:
        """The clear parameters and the decrypted secret ones (pages mask them on display)."""
        return {**(self.params or {}), **(self.secret_params or {})}


def min_approvers(kind: str) -> int:
    """The installation's floor for `kind` (settings `CDKD_MIN_APPROVERS_<KIND>`): the fewest
    approvers it needs on every account, whatever the account's policy row says."""
    return getattr(settings, "CDKD_MIN_APPROVERS_" + kind.upper().replace("-", "_"), 0)


def policy_floor_problem(kind: str, approval_required: bool, approvers_needed: int) -> str | None:
    """Why a policy goes below the floor, in one sentence for the person who set it; None when it does not."""
    floor = min_approvers(kind)
    if floor and (not approval_required or approvers_needed < floor):
        setting = "CDKD_MIN_APPROVERS_" + kind.upper().replace("-", "_")
        return (
            f"{kind} needs at least {floor} approver(s) on every account ({setting}={floor}): approval cannot be "
            f"switched off or set below that here."
        )
    return None


class ApprovalPolicy(models.Model):
    """Whether an operation kind needs approval on an account, by how many, for how long.
    Without a row, every kind needs one approver and an approval lasts 24 hours. A row never
    lowers the installation's floor (`min_approvers`): the run-time check applies it too."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="approval_policies")
    kind = models.CharField(max_length=32, choices=OperationKind.choices)
    approval_required = models.BooleanField(default=True)
    approvers_needed = models.PositiveSmallIntegerField(default=1)
    validity_hours = models.PositiveIntegerField(default=24)

    class Meta:
        verbose_name_plural = "approval policies"
        constraints = [models.UniqueConstraint(fields=["account", "kind"], name="one_policy_per_kind")]

    def __str__(self) -> str:
        need = f"{self.approvers_needed} approver(s)" if self.approval_required else "no approval"
        return f"{self.kind} on {self.account}: {need}"

    def clean(self) -> None:
        # The admin site's form validates here; the settings page's PolicyForm says the same.
        problem = policy_floor_problem(self.kind, self.approval_required, self.approvers_needed)
        if problem:
            raise ValidationError(problem)


class Approval(models.Model):
    """An approver's decision, bound to the plan digest and ETag they saw."""

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals")
    approved = models.BooleanField(help_text="False: rejected")
    plan_digest = models.CharField(max_length=80)
    plan_etag = models.CharField(max_length=128, blank=True)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["operation", "approver", "plan_digest"], name="one_decision_per_plan")
        ]

    def __str__(self) -> str:
        return f"{'approval' if self.approved else 'rejection'} of #{self.operation_id} by {self.approver}"


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("the audit log is append-only")

    def delete(self):
        raise PermissionError("the audit log is append-only")


class AuditEvent(models.Model):
    """Append-only. Each event carries the hash of the previous event of its account, so
    an edit or a removal anywhere breaks the chain (`manage.py cdkd audit --verify`)."""

    created_at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=255, help_text="username, or cli:<os user>, or worker")
    actor_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=64)
    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.PROTECT, related_name="audit_events")
    account_ref = models.CharField(max_length=12, blank=True, help_text="account id, kept if the account is removed")
    stack_name = models.CharField(max_length=1024, blank=True)
    region = models.CharField(max_length=64, blank=True)
    operation = models.ForeignKey(
        Operation, null=True, blank=True, on_delete=models.PROTECT, related_name="audit_events"
    )
    operation_kind = models.CharField(
        max_length=32, blank=True, help_text="The operation's kind, so an exported event reads on its own"
    )
    plan_digest = models.CharField(max_length=80, blank=True)
    etag_before = models.CharField(max_length=128, blank=True)
    etag_after = models.CharField(max_length=128, blank=True)
    result = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    client_address = models.GenericIPAddressField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True, help_text="What changed, for policy and people edits")
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["account_ref", "id"]), models.Index(fields=["action"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.stack_name}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        return super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("the audit log is append-only")

    def canonical(self) -> str:
        """The fields the hash covers, in a fixed order. `operation_kind` joins the list
        only when set, so the events written before the field existed verify unchanged."""
        import json

        fields: list = [
            self.prev_hash,
            self.created_at.isoformat(),
            self.actor,
            self.action,
            self.account_ref,
            self.stack_name,
            self.region,
            self.operation_id,
            self.plan_digest,
            self.etag_before,
            self.etag_after,
            self.result,
            self.error,
            self.client_address,
            self.details,
        ]
        if self.operation_kind:
            fields.append({"operationKind": self.operation_kind})
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


# --- deploy plans (issue 9) --------------------------------------------------------------------


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

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="deploy_plans")
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


# --- drift checks (issue 13) -------------------------------------------------------------------


class DriftCheck(models.Model):
    """One drift check of one stack (stacks.drift): when, what it found per resource
    (status, reason and differences, masked as every output of engine.drift is), and the
    API calls it made. `latest` marks the newest check of its stack, so "the latest check
    per stack with drifted resources" is one indexed filter (`stacks.drift.latest_drifted`)."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="drift_checks")
    stack = models.ForeignKey(Stack, null=True, on_delete=models.CASCADE, related_name="drift_checks")
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


# --- personal API tokens (issue 14) ------------------------------------------------------------


class ApiToken(models.Model):
    """A person's token for the JSON API (`stacks.api`). Only the SHA-256 of the secret is
    kept: the secret is shown once, when it is made. A token acts as its person, with the
    person's roles as they are at each call; `read_only` refuses every mutating call."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, in the person's words")
    token_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the secret, hex")
    prefix = models.CharField(max_length=16, help_text="The secret's first characters, to tell tokens apart")
    read_only = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"API token {self.prefix}… ({self.name}) of {self.user}"

    def usable(self, at=None) -> bool:
        at = at or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > at)


# --- bucket posture (issue 13) -----------------------------------------------------------------


class BucketPosture(models.Model):
    """The last posture check of an account's state bucket (`engine.posture`): one entry per
    check in `results` ({key, label, status, found, change, since}), `since` being when the
    check's status was first seen. Holds bucket settings only, never a record's content."""

    account = models.OneToOneField(Account, on_delete=models.CASCADE, related_name="posture")
    bucket = models.CharField(max_length=63, blank=True)
    checked_at = models.DateTimeField()
    results = models.JSONField(default=list, blank=True)
    problem_count = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True, help_text="Why the bucket could not be checked at all")

    def __str__(self) -> str:
        return f"posture of {self.bucket or self.account}"


# Notifications live in their own module; importing them here makes them this app's models.
from stacks.notifymodels import (  # noqa: E402, F401
    EventKind,
    NotificationEvent,
    Subscription,
    Webhook,
    WebhookDelivery,
    WebhookFormat,
)
