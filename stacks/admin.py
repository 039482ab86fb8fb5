"""Django admin: accounts and memberships are configuration and editable; everything the
sync mirrors from the buckets (the bucket is the source of truth) is read-only."""

from __future__ import annotations

from django.contrib import admin

from stacks.models import Account, DeploymentRun, EventIndex, Lock, Membership, Resource, Stack, SyncRun


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


@admin.register(EventIndex)
class EventIndexAdmin(ReadOnlyAdmin):
    list_display = ["stack_name", "account", "region", "error", "synced_at"]
    list_filter = ["account", "region"]
    search_fields = ["stack_name", "key"]
    inlines = [DeploymentRunInline]


@admin.register(DeploymentRun)
class DeploymentRunAdmin(ReadOnlyAdmin):
    list_display = ["run_id", "command", "result", "cdkd_version", "started_at", "finished_at", "event_count", "index"]
    list_filter = ["command", "result"]
    search_fields = ["run_id", "index__stack_name"]
    list_select_related = ["index"]


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    list_display = ["pk", "account", "trigger", "status", "requested_by", "done", "total", "created_at", "finished_at"]
    list_filter = ["status", "trigger"]
    search_fields = ["account__account_id", "requested_by__username"]
    list_select_related = ["account", "requested_by"]
