"""Changes to a state bucket: Operation (request to result), the ApprovalPolicy and the
installation's approver floor, Approval decisions, and the hash-chained AuditEvent log.

Imported by `stacks.models`, so they are the `stacks` app's models (app_label `stacks`).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from stacks.crypto import EncryptedJSONField


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
    account = models.ForeignKey("stacks.Account", on_delete=models.PROTECT, related_name="operations")
    stack_name = models.CharField(max_length=1024)
    region = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 (None = legacy record)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="operations"
    )
    requester_name = models.CharField(max_length=255, help_text="username, or cli:<os user>")
    via = models.CharField(max_length=8, default="web", help_text="web, api (a token's call) or cli")
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

    account = models.ForeignKey("stacks.Account", on_delete=models.CASCADE, related_name="approval_policies")
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
    account = models.ForeignKey(
        "stacks.Account", null=True, blank=True, on_delete=models.PROTECT, related_name="audit_events"
    )
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
