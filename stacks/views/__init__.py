"""The stack browser's views, one module per page family."""

from stacks.views.detail import stack_detail, stack_download, stack_json, stack_resource
from stacks.views.history import stack_diff, stack_history, stack_version
from stacks.views.listing import account_list, stack_list, stack_tree, sync_start, sync_status

__all__ = [
    "account_list",
    "stack_detail",
    "stack_diff",
    "stack_download",
    "stack_history",
    "stack_json",
    "stack_list",
    "stack_resource",
    "stack_tree",
    "stack_version",
    "sync_start",
    "sync_status",
]
