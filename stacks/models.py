"""The mirror of every account's cdkd state bucket, and who may see it.

The bucket is the source of truth: rows here are written by `stacks.sync` from what S3
returned and are never edited by hand (the Django admin shows them read-only).
"""

from __future__ import annotations

import time
from fnmatch import fnmatchcase

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from engine.aws import AccountAccess
from stacks.crypto import EncryptedBinaryField


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


class MembershipSource(models.TextChoices):
    MANUAL = "manual", "Granted by an admin"
    RULE = "rule", "Group rules only"


class Membership(models.Model):
    """A person's role on one account. Superusers need none: they act as admin everywhere.

    `role` is what every check reads: the higher of the admin's grant and the role group
    rules give (`stacks.grouproles`). The two are kept apart so that rules never remove or
    lower a grant: a `manual` row stays when its rules go, a `rule` row goes with them."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    source = models.CharField(max_length=8, choices=MembershipSource.choices, default=MembershipSource.MANUAL)
    # On a manual row a rule raised: the role the admin granted ("" = `role` is the grant).
    granted_role = models.CharField(max_length=16, choices=Role.choices, blank=True)
    # The role group rules give the person here ("" = none), from the groups of their last login.
    rule_role = models.CharField(max_length=16, choices=Role.choices, blank=True)
    # The reveal right: download a record's stored bytes unmasked (audited). Admins hold it
    # whatever this says (`stacks.secretmask.may_reveal`); an admin grants it to others.
    can_reveal = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "account"], name="one_role_per_account")]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} on {self.account}"

    @property
    def manual_role(self) -> str:
        """The admin's grant ("" for a row only rules hold)."""
        if self.source != MembershipSource.MANUAL:
            return ""
        return self.granted_role or self.role

    def combine(self, manual: str, rule: str) -> None:
        """Set the row from an admin's grant and the rules' role (at least one non-empty)."""
        self.source = MembershipSource.MANUAL if manual else MembershipSource.RULE
        self.granted_role = manual
        self.rule_role = rule
        self.role = max((r for r in (manual, rule) if r), key=Role.rank)


class SsoIdentity(models.Model):
    """Who a person is at the OpenID provider, and the groups it named at their last login
    (what group rules are evaluated against until the next one)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True)
    last_login_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_sso_subject")]
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"

    def __str__(self) -> str:
        return f"{self.user} ({self.subject} at {self.issuer})"


class GroupRoleRule(models.Model):
    """People in an identity-provider group get a role on one account, or on every account
    whose name (or id) matches a shell-style pattern such as `prod-*`."""

    group = models.CharField(max_length=255, help_text="The group name as the provider's groups claim spells it")
    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.CASCADE, related_name="group_rules")
    account_pattern = models.CharField(
        max_length=200,
        blank=True,
        help_text="Instead of one account: every account whose name or id matches (*, ?, [abc])",
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    created_by = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "account_pattern", "account__name", "account__account_id"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(account__isnull=False) & models.Q(account_pattern=""))
                | (models.Q(account__isnull=True) & ~models.Q(account_pattern="")),
                name="rule_one_account_or_a_pattern",
            ),
            models.UniqueConstraint(
                fields=["group", "account"],
                condition=models.Q(account__isnull=False),
                name="one_rule_per_group_account",
            ),
            models.UniqueConstraint(
                fields=["group", "account_pattern"],
                condition=~models.Q(account_pattern=""),
                name="one_rule_per_group_pattern",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} -> {self.role} on {self.target}"

    @property
    def target(self) -> str:
        return f"accounts matching {self.account_pattern}" if self.account_pattern else str(self.account)

    def matches(self, account: Account) -> bool:
        if self.account_id is not None:
            return self.account_id == account.pk
        return any(fnmatchcase(text, self.account_pattern) for text in (account.name, account.account_id) if text)


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


# The other groups of this app's models live in their own modules; importing them here makes
# them the `stacks` app's models and keeps `from stacks.models import X` working for all of them.
from stacks.checkmodels import (  # noqa: E402, F401
    BucketPosture,
    DriftCheck,
)
from stacks.eventmodels import (  # noqa: E402, F401
    EVENT_TYPES,
    RUN_COMMANDS,
    DeploymentEvent,
    DeploymentRun,
    EventIndex,
    RunResult,
)
from stacks.jobmodels import (  # noqa: E402, F401
    BackgroundRun,
    ScanRun,
    SecretFinding,
    SyncRun,
    SyncStatus,
)
from stacks.notifymodels import (  # noqa: E402, F401
    EventKind,
    NotificationEvent,
    Subscription,
    Webhook,
    WebhookDelivery,
    WebhookFormat,
)
from stacks.opmodels import (  # noqa: E402, F401
    FINISHED_STATUSES,
    AppendOnlyQuerySet,
    Approval,
    ApprovalPolicy,
    AuditEvent,
    Operation,
    OperationKind,
    OperationStatus,
    min_approvers,
    policy_floor_problem,
)
from stacks.planmodels import (  # noqa: E402, F401
    Assembly,
    DeployPlan,
)
