"""The stack browser's routes.

A stack is addressed by account id, region slug (`Stack.region_slug`: the region, or
`legacy`/`legacy-<region>`) and stack name. Stack names may hold any character but `/`, so
`<str:stack_name>` is enough and `reverse()` percent-encodes the rest.
"""

from __future__ import annotations

from django.urls import include, path

from stacks import views
from stacks.views import notifications as notify_views
from stacks.views.attention import attention_board
from stacks.views.bucket_requests import state_migrate_new
from stacks.views.deploy import account_plan_new, deploy_plan, deploy_plan_json, deploy_plan_request, stack_plan_new
from stacks.views.detail import stack_reveal
from stacks.views.drift import stack_drift_check
from stacks.views.exports_page import account_exports, all_exports
from stacks.views.people import account_member_reveal, account_rule_add, account_rule_remove
from stacks.views.tokens import api_token_revoke, api_tokens

STACK = "stacks/<str:account_id>/<str:region_slug>/<str:stack_name>/"

stack_patterns = [
    path("", views.stack_detail, name="stack"),
    # The stack page's tabs (Overview is the page itself; History is the history page).
    path("resources/", views.stack_detail, {"tab": "resources"}, name="stack_resources"),
    path("outputs/", views.stack_detail, {"tab": "outputs"}, name="stack_outputs"),
    path("events/", views.stack_detail, {"tab": "events"}, name="stack_events"),
    path("json/", views.stack_json, name="stack_json"),
    path("download/", views.stack_download, name="stack_download"),
    # POST only: the verbatim bytes (current, or `version_id`), audited; needs the reveal right.
    path("reveal/", stack_reveal, name="stack_reveal"),
    path("history/", views.stack_history, name="stack_history"),
    path("history/diff/", views.stack_diff, name="stack_diff"),
    # Before the version route: "download" is not a version id. Masked, `?version_id=`.
    path("history/download/", views.stack_version_download, name="stack_version_download"),
    # S3 version ids may contain "/" and "+".
    path("history/<path:version_id>/", views.stack_version, name="stack_version"),
    # A malformed record can hold any logical id, `/` included.
    path("resources/<path:logical_id>/", views.stack_resource, name="stack_resource"),
    path("operations/new/<str:kind>/", views.operation_new, name="operation_new"),
    path("plan/", stack_plan_new, name="stack_plan_new"),
    path("drift/check/", stack_drift_check, name="stack_drift_check"),
]

operation_patterns = [
    path("", views.operation_detail, name="operation"),
    path("decide/", views.operation_decide, name="operation_decide"),
    path("cancel/", views.operation_cancel, name="operation_cancel"),
    path("retry/", views.operation_retry, name="operation_retry"),
]

account_patterns = [
    path("", views.account_settings, name="account_settings"),
    path("policy/", views.account_policy, name="account_policy"),
    path("members/", views.account_member_add, name="account_member_add"),
    path("members/<int:membership_id>/", views.account_member_change, name="account_member_change"),
    path("members/<int:membership_id>/remove/", views.account_member_remove, name="account_member_remove"),
    path("members/<int:membership_id>/reveal/", account_member_reveal, name="account_member_reveal"),
    # Webhooks (stacks.views.notifications): account admins only.
    path("webhooks/", notify_views.webhook_list, name="webhooks"),
    path("webhooks/new/", notify_views.webhook_new, name="webhook_new"),
    path("webhooks/<int:webhook_id>/", notify_views.webhook_detail, name="webhook"),
    path("webhooks/<int:webhook_id>/edit/", notify_views.webhook_edit, name="webhook_edit"),
    path("webhooks/<int:webhook_id>/delete/", notify_views.webhook_delete, name="webhook_delete"),
    path(
        "webhooks/<int:webhook_id>/deliveries/<int:delivery_id>/redeliver/",
        notify_views.webhook_redeliver,
        name="webhook_redeliver",
    ),
    path("rules/", account_rule_add, name="account_rule_add"),
    path("rules/<int:rule_id>/remove/", account_rule_remove, name="account_rule_remove"),
]

urlpatterns = [
    path("stacks/", views.stack_list, name="stacks"),
    path("stacks/tree/", views.stack_tree, name="stacks_tree"),
    path("accounts/", views.account_list, name="accounts"),
    path("sync/", views.sync_start, name="sync"),
    path("sync/<int:run_id>/", views.sync_status, name="sync_status"),
    path(STACK, include(stack_patterns)),
    path("operations/", views.operation_list, name="operations"),
    path("operations/<int:op_id>/", include(operation_patterns)),
    path("audit/", views.audit_log, name="audit"),
    path("attention/", attention_board, name="attention"),
    path("settings/notifications/", notify_views.notification_settings, name="notification_settings"),
    path("secrets/", views.secret_findings, name="secrets"),
    path("secrets/scan/", views.scan_start, name="scan"),
    path("secrets/scans/<int:run_id>/", views.scan_status, name="scan_status"),
    path("events/", views.event_timeline, name="events"),
    # A run id is one key segment (no "/"); cdkd's are `20260613T012345678Z-1a2b3c4d`.
    path("events/<str:account_id>/<str:region>/<str:stack_name>/<str:run_id>/", views.event_run, name="event_run"),
    path("accounts/<str:account_id>/settings/", include(account_patterns)),
    # Every export, its value, exporter and importers: of one account, or of every visible one.
    path("accounts/<str:account_id>/exports/", account_exports, name="account_exports"),
    path("exports/", all_exports, name="exports"),
    # Plan a deploy (read-only): of a new stack from the account, of a stack from its page.
    path("accounts/<str:account_id>/plan/", account_plan_new, name="account_plan_new"),
    # An account's operation: state migrate of its legacy bucket (operators request it).
    path("accounts/<str:account_id>/state-migrate/", state_migrate_new, name="state_migrate_new"),
    path("plans/<int:plan_id>/", deploy_plan, name="deploy_plan"),
    path("plans/<int:plan_id>/json/", deploy_plan_json, name="deploy_plan_json"),
    path("plans/<int:plan_id>/deploy/", deploy_plan_request, name="deploy_plan_request"),
    # The person's own API tokens (the API itself is under /api/v1/, cdkd_site.urls).
    path("tokens/", api_tokens, name="api_tokens"),
    path("tokens/<int:token_id>/revoke/", api_token_revoke, name="api_token_revoke"),
]
