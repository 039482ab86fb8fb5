"""The API's request and response shapes (pydantic, through django-ninja): the OpenAPI
schema at /api/schema/ is generated from these. Field names are snake_case; time is ISO
8601 in UTC. Every string here has been masked where the pages mask it (stacks.secretmask)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema
from pydantic import field_validator

from stacks.columns import utf8_safe

ACCOUNT_PATTERN = r"^\d{12}$"
AccountId = Field(..., pattern=ACCOUNT_PATTERN, description="The 12-digit AWS account id")
RoleName = Literal["viewer", "operator", "approver", "admin"]
LockStateName = Literal["none", "live", "expired", "unreadable"]
# The kinds a stack's pages request (stacks.forms.WEB_KINDS; a test keeps the two equal).
# A deploy is requested from its plan (`/deploy-plans/{id}/request`), state migrate from
# its account (`/accounts/{id}/state-migrate`).
WebKind = Literal[
    "force-unlock",
    "orphan",
    "orphan-resources",
    "restore",
    "destroy",
    "scrub",
    "refresh-observed",
    "drift-accept",
    "drift-revert",
    "rollback",
    "events-prune",
]


# A path segment the database can hold: no NUL (PostgreSQL text refuses it).
TEXT_PATTERN = r"^[^\x00]+$"


class Input(Schema):
    """Every request shape: text the database can hold, refused (422) otherwise, as the
    pages' forms refuse NUL. JSON may also carry an unpaired surrogate (`"\\ud800"`)."""

    @field_validator("*", mode="after")
    @classmethod
    def _storable_text(cls, value: Any) -> Any:
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and utf8_safe(text) != text:
                raise ValueError("must not contain NUL or unpaired surrogate characters")
        return value


class ErrorOut(Schema):
    message: str = Field(..., description="Why nothing was done, in one line")
    detail: list[dict[str, Any]] | None = Field(None, description="Each invalid input, where it was and why")


class PageOut(Schema):
    count: int
    page: int
    page_size: int


# --- accounts ----------------------------------------------------------------------------------


class AccountOut(Schema):
    account_id: str
    name: str
    role: RoleName = Field(..., description="The caller's role on the account")
    bucket: str = Field(..., description="The state bucket the last sync resolved (empty before one)")
    bucket_status: str
    bucket_message: str
    last_synced_at: datetime | None
    last_sync_error: str
    stack_count: int
    defect_count: int


class AccountPage(PageOut):
    items: list[AccountOut]


# --- stacks and resources ----------------------------------------------------------------------


class LockOut(Schema):
    state: LockStateName
    owner: str
    operation: str
    timestamp_ms: int | None
    expires_at_ms: int | None
    readable: bool
    error: str


class StackOut(Schema):
    account_id: str
    stack_name: str
    region: str | None
    region_slug: str = Field(..., description="The region segment of the stack's URLs (`legacy`, `legacy-<region>`)")
    legacy: bool
    schema_version: int | None
    read_only: bool = Field(..., description="Written by a newer cdkd than this app knows: never written here")
    resource_count: int
    output_count: int
    has_defects: bool
    lock_state: LockStateName
    depth: int
    parent_stack_name: str
    record_last_modified_ms: int | None
    last_run_id: str | None
    last_run_result: str | None
    secret_findings: int
    etag: str
    synced_at: datetime


class StackPage(PageOut):
    items: list[StackOut]


class ResourceOut(Schema):
    logical_id: str
    resource_type: str
    physical_id: str
    provisioned_by: str
    deletion_policy: str
    malformed: bool = Field(..., description="The row itself is not an object: shown, never acted upon")


class WarningOut(Schema):
    code: str
    path: str
    message: str
    blocking: bool


class ActionOut(Schema):
    kind: str
    allowed: bool
    reason: str = Field(..., description="Why not, in one line, when not allowed")


class StackDetailOut(StackOut):
    lock: LockOut | None
    resources: list[ResourceOut]
    warnings: list[WarningOut]
    actions: list[ActionOut] = Field(..., description="The repair operations the stack page offers the caller")


class ResourceHitOut(ResourceOut):
    account_id: str
    stack_name: str
    region: str | None
    region_slug: str


class ResourcePage(PageOut):
    items: list[ResourceHitOut]


# --- operations --------------------------------------------------------------------------------


class OperationParamsIn(Input):
    """The parameters of the stack page's confirmation form, per kind (unused ones ignored)."""

    force: bool = Field(False, description="orphan, orphan-resources: override a live lock / unresolved references")
    confirm_unreadable: bool = Field(False, description="force-unlock: remove a lock that cannot be read")
    resources: list[str] = Field(default_factory=list, max_length=10000, description="orphan-resources: logical ids")
    version_id: str = Field("", max_length=1024, description="restore: the S3 version id")
    concurrency: int | None = Field(None, ge=1, le=64, description="destroy: deletes at once")
    confirm_name: str = Field("", max_length=1024, description="destroy: the stack's name, typed to confirm")
    skip_final_snapshot: bool = Field(False, description="destroy: no final snapshot (cdkd's --skip-final-snapshot)")
    remove_protection: bool = Field(False, description="destroy: lift deletion protection (--remove-protection)")
    purge_history: bool = Field(False, description="scrub: delete the old versions of rewritten records")
    confirm_purge: bool = Field(False, description="scrub: confirm purge_history (it cannot be undone)")
    keep_history: bool = Field(False, description="scrub: keep the old versions")
    allow_replacement: bool = Field(False, description="scrub: consent to the replacements cdkd's next diff predicts")
    assembly: str = Field("", pattern=r"^([0-9a-f]{64})?$", description="scrub: a stored assembly's digest")
    revert_failed: bool = Field(False, description="rollback: revert the failed operations too (--revert-failed)")
    orphan: list[str] = Field(
        default_factory=list, max_length=1000, description="rollback: logical ids to leave in AWS (--orphan)"
    )
    keep: int | None = Field(None, ge=0, le=100_000, description="events-prune: keep the newest N runs (--keep)")
    older_than_days: int | None = Field(
        None, ge=1, le=36_500, description="events-prune: only runs older than this (--older-than)"
    )


class OperationRequestIn(Input):
    account_id: str = AccountId
    region_slug: str = Field(..., min_length=1, max_length=80, description="As in StackOut.region_slug")
    stack_name: str = Field(..., min_length=1, max_length=1024)
    kind: WebKind
    reason: str = Field("", max_length=500, description="Why: shown to approvers and kept in the audit")
    params: OperationParamsIn = Field(default_factory=OperationParamsIn)


class DecisionIn(Input):
    comment: str = Field("", max_length=2000)


class ApprovalOut(Schema):
    approver: str
    approved: bool
    counts: bool = Field(..., description="Still counts towards the policy (same plan, not expired, role held)")
    comment: str
    created_at: datetime


class OperationOut(Schema):
    id: int
    kind: str
    account_id: str
    stack_name: str
    region: str | None
    status: str
    requester: str
    via: str
    reason: str
    plan_digest: str
    plan_etag: str
    error: str
    created_at: datetime
    finished_at: datetime | None


class OperationPage(PageOut):
    items: list[OperationOut]


class OperationDetailOut(OperationOut):
    plan: dict[str, Any] = Field(..., description="The plan the approvers approve, masked as the pages show it")
    params: dict[str, Any]
    approvals: list[ApprovalOut]
    approvals_needed: int
    approval_required: bool
    progress: dict[str, Any]
    result: dict[str, Any]
    log: list[Any]
    rerun_of: int | None
    can_decide: bool
    can_cancel: bool


# --- audit and events --------------------------------------------------------------------------


class AuditOut(Schema):
    id: int
    at: datetime
    actor: str
    action: str
    account_id: str
    stack_name: str
    region: str
    operation: int | None
    operation_kind: str
    plan_digest: str
    etag_before: str
    etag_after: str
    result: str
    error: str
    client_address: str | None
    details: dict[str, Any]
    prev_hash: str
    hash: str


class AuditPage(PageOut):
    items: list[AuditOut]


class RunOut(Schema):
    account_id: str
    stack_name: str
    region: str
    run_id: str
    command: str
    cdkd_version: str
    started_at: str = Field(..., description="startedAt as cdkd wrote it")
    finished_at: str
    result: str
    event_count: int
    in_index: bool
    has_stream: bool
    operation: int | None
    person: str | None


class RunPage(PageOut):
    items: list[RunOut]


class RunDetailOut(RunOut):
    events: list[dict[str, Any]] = Field(..., description="The run's events as stored, credential shapes masked")


# --- deploy plans and account operations ----------------------------------------------------


class DeployPlanIn(Input):
    """The Plan-a-deploy form's fields, sent as multipart/form-data beside the zip."""

    assembly: str = Field(
        "", pattern=r"^([0-9a-f]{64})?$", description="A stored assembly's digest, instead of uploading a zip"
    )
    stack: str = Field("", max_length=1024, description="The stack of the assembly (needed when it holds several)")
    region: str = Field(
        "", pattern=r"^([a-z]{2}(-[a-z]+)+-\d{1,2})?$", description="For a stack whose environment pins none"
    )
    parameters: list[str] = Field(
        default_factory=list, max_length=200, description="KEY=VALUE parameter overrides (cdkd's --parameters)"
    )
    recursive: bool = Field(False, description="Include nested stacks")


class DeployPlanOut(Schema):
    id: int
    account_id: str
    stack_name: str
    region: str
    state_key: str
    state_etag: str = Field(..., description="The record's ETag the plan read (empty: no record yet)")
    digest: str = Field(..., description="The plan's digest: the approval binds to it")
    assembly_digest: str
    has_changes: bool
    blocking: list[str] = Field(..., description="Why the deploy would refuse to run, once each")
    needs_consent: bool = Field(..., description="Requesting it needs stateful_consent (a stateful replacement)")
    requestable: bool = Field(..., description="Nothing but a consent stands between this plan and a request")
    parameters: dict[str, str] = Field(..., description="The overrides; a secret-named one masked")
    created_by: str
    created_at: datetime
    document: dict[str, Any] = Field(..., description="The plan as `cdkd diff --json` prints it, masked")


class DeployRequestIn(Input):
    reason: str = Field("", max_length=1000, description="Why: shown to approvers and kept in the audit")
    stateful_consent: bool = Field(
        False, description="Accept that the stateful replacements delete the old resources and their data"
    )


class StateMigrateIn(Input):
    region: str = Field("", max_length=32, description="The region in the legacy bucket's name (default: where found)")
    remove_legacy: bool = Field(False, description="Remove the legacy bucket after the verified copy")
    confirm_remove: bool = Field(False, description="Confirm remove_legacy (it cannot be undone)")
    reason: str = Field("", max_length=500, description="Why: shown to approvers and kept in the audit")


# --- drift ------------------------------------------------------------------------------------


class DriftCheckOut(Schema):
    id: int
    checked_at: datetime
    trigger: str = Field(..., description="schedule, cli or web")
    record_etag: str = Field(..., description="The record's ETag the check compared against")
    drifted: int = Field(..., description="MODIFIED + DELETED resources")
    errors: int = Field(..., description="Resources whose read failed")
    counts: dict[str, int]
    api_calls: int
    error: str = Field(..., description="Why the stack could not be checked at all (empty when it was)")
    resources: list[dict[str, Any]] = Field(
        ..., description="Per resource: logicalId, status, reason, differences (masked positions never compared)"
    )


class DriftQueuedOut(Schema):
    queued: bool = Field(..., description="False: a check of this stack was already queued or running")
    message: str
