"""The stack browser's routes.

A stack is addressed by account id, region slug (`Stack.region_slug`: the region, or
`legacy`/`legacy-<region>`) and stack name. Stack names may hold any character but `/`, so
`<str:stack_name>` is enough and `reverse()` percent-encodes the rest.
"""

from __future__ import annotations

from django.urls import include, path

from stacks import views

STACK = "stacks/<str:account_id>/<str:region_slug>/<str:stack_name>/"

stack_patterns = [
    path("", views.stack_detail, name="stack"),
    path("json/", views.stack_json, name="stack_json"),
    path("download/", views.stack_download, name="stack_download"),
    path("history/", views.stack_history, name="stack_history"),
    path("history/diff/", views.stack_diff, name="stack_diff"),
    # S3 version ids may contain "/" and "+".
    path("history/<path:version_id>/", views.stack_version, name="stack_version"),
    # A malformed record can hold any logical id, `/` included.
    path("resources/<path:logical_id>/", views.stack_resource, name="stack_resource"),
]

urlpatterns = [
    path("stacks/", views.stack_list, name="stacks"),
    path("stacks/tree/", views.stack_tree, name="stacks_tree"),
    path("accounts/", views.account_list, name="accounts"),
    path("sync/", views.sync_start, name="sync"),
    path("sync/<int:run_id>/", views.sync_status, name="sync_status"),
    path(STACK, include(stack_patterns)),
]
