"""Django admin: accounts, memberships and approval policies are configuration and editable;
everything the sync mirrors from the buckets (the bucket is the source of truth) is
read-only, and so are operations, approvals and the audit log (a record of what happened:
changed only by the pipeline, and the audit log never)."""

from __future__ import annotations

from django.contrib import admin

from stacks.models import (
    Account,
    Approval,
    ApprovalPolicy,
    Assembly,
    AuditEvent,
    DeploymentEvent,
    DeploymentRun,
    DeployPlan,
    EventIndex,
    Lock,
    Membership,
    Operation,
    Resource,
    Stack,
    SyncRun,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Shows mirrored rows; S3 is changed through operations, never by editing these."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = [
        "account_id",
        "name",
        "resolved_bucket",
        "bucket_source",
        "bucket_region",
        "bucket_status",
        "last_synced_at",
    ]
    list_filter = ["bucket_status", "bucket_source"]
    search_fields = ["account_id", "name", "bucket", "resolved_bucket"]
    readonly_fields = [
        "resolved_bucket",
        "bucket_source",
        "bucket_region",
        "bucket_status",
        "bucket_message",
        "last_sync_started_at",
        "last_synced_at",
        "last_sync_error",
        "last_sync_counts",
        "created_at",
    ]
    fieldsets = [
        (None, {"fields": ["account_id", "name", "role_arn", "external_id", "bucket", "prefix", "region"]}),
        ("Last sync (read-only)", {"fields": readonly_fields}),
    ]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "account", "role"]
    list_filter = ["role", "account"]
    search_fields = ["user__username", "account__account_id", "account__name"]
    autocomplete_fields = ["user", "account"]


class ResourceInline(admin.TabularInline):
    model = Resource
    fields = ["logical_id", "resource_type", "physical_id", "provisioned_by", "deletion_policy", "malformed"]
    readonly_fields = fields
    can_delete = False
    extra = 0
    max_num = 0
    show_change_link = True


@admin.register(Stack)
class StackAdmin(ReadOnlyAdmin):
    list_display = [
        "stack_name",
        "account",
        "region",
        "legacy",
        "schema_version",
        "resource_count",
        "has_defects",
        "read_only",
        "depth",
        "synced_at",
    ]
    list_filter = ["account", "legacy", "has_defects", "read_only", "schema_version", "region"]
    search_fields = ["stack_name", "key", "account__account_id"]
    list_select_related = ["account"]
    exclude = ["body"]
    raw_id_fields = ["parent"]


@admin.register(Resource)
class ResourceAdmin(ReadOnlyAdmin):
    list_display = [
        "logical_id",
        "resource_type",
        "physical_id",
        "provisioned_by",
        "deletion_policy",
        "stack",
        "malformed",
    ]
    list_filter = ["provisioned_by", "deletion_policy", "malformed"]
    search_fields = ["logical_id", "physical_id", "resource_type", "stack__stack_name"]
    list_select_related = ["stack"]
    raw_id_fields = ["stack"]


@admin.register(Lock)
class LockAdmin(ReadOnlyAdmin):
    list_display = ["stack_name", "account", "region", "owner", "operation", "readable", "expires_at_ms", "synced_at"]
    list_filter = ["account", "readable", "operation"]
    search_fields = ["stack_name", "owner", "key"]
    list_select_related = ["account"]
    exclude = ["body"]
    raw_id_fields = ["stack"]


class DeploymentRunInline(admin.TabularInline):
    model = DeploymentRun
    readonly_fields = ["run_id", "command", "cdkd_version", "started_at", "finished_at", "result", "event_count"]
    fields = readonly_fields
    can_delete = False
    extra = 0
    max_num = 0


# Django would say "Event indexs". Set here, not in the model's Meta, so no migration.
EventIndex._meta.verbose_name_plural = "event indexes"


@admin.register(EventIndex)
class EventIndexAdmin(ReadOnlyAdmin):
    list_display = ["stack_name", "account", "region", "error", "synced_at"]
    list_filter = ["account", "region"]
    search_fields = ["stack_name", "key"]
    inlines = [DeploymentRunInline]


@admin.register(DeploymentRun)
class DeploymentRunAdmin(ReadOnlyAdmin):
    list_display = [
        "run_id",
        "stack_name",
        "region",
        "account",
        "command",
        "result",
        "cdkd_version",
        "started_at_raw",
        "event_count",
        "in_index",
        "has_stream",
        "operation",
    ]
    list_filter = ["command", "result", "in_index", "has_stream"]
    search_fields = ["run_id", "stack_name"]
    list_select_related = ["account", "operation"]
    raw_id_fields = ["index", "operation"]


class DeploymentEventInline(admin.TabularInline):
    model = DeploymentEvent
    fields = ["seq", "timestamp_raw", "event_type", "logical_id", "resource_type", "physical_id", "reason", "error"]
    readonly_fields = fields
    can_delete = False
    extra = 0
    max_num = 0


DeploymentRunAdmin.inlines = [DeploymentEventInline]


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    list_display = ["pk", "account", "trigger", "status", "requested_by", "done", "total", "created_at", "finished_at"]
    list_filter = ["status", "trigger"]
    search_fields = ["account__account_id", "requested_by__username"]
    list_select_related = ["account", "requested_by"]


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    list_display = ["account", "kind", "approval_required", "approvers_needed", "validity_hours"]
    list_filter = ["kind", "approval_required", "account"]
    search_fields = ["account__account_id", "account__name"]
    list_select_related = ["account"]
    autocomplete_fields = ["account"]


class ApprovalInline(admin.TabularInline):
    model = Approval
    fields = ["approver", "approved", "comment", "plan_digest", "plan_etag", "created_at"]
    readonly_fields = fields
    can_delete = False
    extra = 0
    max_num = 0


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ["pk", "kind", "stack_name", "region", "account", "requester_name", "via", "status", "created_at"]
    list_filter = ["status", "kind", "via", "account"]
    search_fields = ["stack_name", "requester_name", "account__account_id", "plan_digest"]
    list_select_related = ["account"]
    raw_id_fields = ["requested_by"]
    inlines = [ApprovalInline]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ["operation", "approver", "approved", "created_at"]
    list_filter = ["approved"]
    search_fields = ["approver__username", "operation__stack_name"]
    list_select_related = ["operation", "approver"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Append-only: no add, change or delete here (the model refuses them too)."""

    list_display = ["created_at", "actor", "action", "account_ref", "stack_name", "region", "operation", "result"]
    list_filter = ["action", "account_ref"]
    search_fields = ["actor", "action", "stack_name", "account_ref"]
    raw_id_fields = ["actor_user", "account", "operation"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


# "Assemblys" otherwise; as for the event indexes, no migration.
Assembly._meta.verbose_name_plural = "assemblies"


@admin.register(Assembly)
class AssemblyAdmin(ReadOnlyAdmin):
    list_display = ["digest", "stack_names", "size", "file_count", "uploaded_by", "created_at"]
    search_fields = ["digest", "original_name"]


@admin.register(DeployPlan)
class DeployPlanAdmin(ReadOnlyAdmin):
    """Plans are computed, never edited; the parameters (which may hold a secret) are not shown."""

    list_display = ["created_at", "account", "stack_name", "region", "digest", "has_changes", "blocking_count"]
    list_filter = ["has_changes", "account"]
    search_fields = ["stack_name", "digest"]
    exclude = ["parameters"]
    raw_id_fields = ["assembly", "created_by"]
    list_select_related = ["account"]
