"""The stack browser's views, one module per page family."""

from stacks.views.audit import audit_log
from stacks.views.detail import stack_detail, stack_download, stack_json, stack_resource
from stacks.views.events import event_run, event_timeline
from stacks.views.history import stack_diff, stack_history, stack_version, stack_version_download
from stacks.views.listing import account_list, stack_list, stack_tree, sync_start, sync_status
from stacks.views.operations import (
    operation_cancel,
    operation_decide,
    operation_detail,
    operation_list,
    operation_new,
    operation_retry,
)
from stacks.views.people import (
    account_member_add,
    account_member_change,
    account_member_remove,
    account_policy,
    account_settings,
)
from stacks.views.secrets import scan_start, scan_status, secret_findings

__all__ = [
    "account_list",
    "account_member_add",
    "account_member_change",
    "account_member_remove",
    "account_policy",
    "account_settings",
    "audit_log",
    "event_run",
    "event_timeline",
    "operation_cancel",
    "operation_decide",
    "operation_detail",
    "operation_list",
    "operation_new",
    "operation_retry",
    "scan_start",
    "scan_status",
    "secret_findings",
    "stack_detail",
    "stack_diff",
    "stack_download",
    "stack_history",
    "stack_json",
    "stack_list",
    "stack_resource",
    "stack_tree",
    "stack_version",
    "stack_version_download",
    "sync_start",
    "sync_status",
]
