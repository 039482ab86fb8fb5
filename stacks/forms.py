"""Input validation for the stack browser: the stacks filter, the resources filter, the
history diff and the sync request; and for operations: their parameters, approvals, the
operations and audit filters, approval policy and members. Views read `cleaned_data` only."""

from __future__ import annotations

from typing import Any

from django import forms

from stacks.models import LockState, OperationKind, OperationStatus, Role, policy_floor_problem


class StackFilterForm(forms.Form):
    """The stacks page's search box and filters; every field optional."""

    q = forms.CharField(required=False, max_length=200, label="Search")
    account = forms.ChoiceField(required=False)
    region = forms.ChoiceField(required=False)
    lock = forms.ChoiceField(
        required=False,
        choices=[("", "Any lock"), *[(s.value, s.label) for s in LockState]],
    )
    defects = forms.ChoiceField(
        required=False, choices=[("", "Defects: any"), ("yes", "With defects"), ("no", "Without defects")]
    )
    version = forms.ChoiceField(required=False)
    nesting = forms.ChoiceField(
        required=False, choices=[("", "Nested or top-level"), ("top", "Top-level"), ("nested", "Nested")]
    )

    def __init__(self, data, *, accounts, regions, versions):
        super().__init__(data)
        self.fields["account"].choices = [("", "All accounts")] + [(a.account_id, a.label) for a in accounts]
        self.fields["region"].choices = [("", "All regions"), ("legacy", "legacy (no region)")] + [
            (r, r) for r in regions
        ]
        self.fields["version"].choices = [("", "Any version")] + [(str(v), f"v{v}") for v in versions]

    def filters(self) -> dict:
        """The valid filters (an invalid choice is dropped, not an error page)."""
        if self.is_valid():
            return self.cleaned_data
        return {name: value for name, value in self.cleaned_data.items() if name not in self.errors}


class ResourceFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=300, label="Filter resources")
    page = forms.IntegerField(required=False, min_value=1)


class DiffForm(forms.Form):
    """Two versions of a record: S3 version ids, or `current` for the mirrored record."""

    a = forms.CharField(max_length=1024, label="From")
    b = forms.CharField(max_length=1024, label="To", initial="current")


class SyncForm(forms.Form):
    """Sync one account (its 12-digit id) or, when empty, every account the person sees."""

    account = forms.RegexField(regex=r"^\d{12}$", required=False)


# --- operations, approvals, audit, policy and people ---------------------------------------

# The kinds a person can request from a stack's pages.
WEB_KINDS = (
    OperationKind.FORCE_UNLOCK,
    OperationKind.ORPHAN,
    OperationKind.ORPHAN_RESOURCES,
    OperationKind.RESTORE,
    OperationKind.DESTROY,
    OperationKind.SCRUB,
)
FORCEABLE_KINDS = (OperationKind.ORPHAN, OperationKind.ORPHAN_RESOURCES)


class OperationParamsForm(forms.Form):
    """An operation's parameters, per kind. The same form reads the preview's query string
    (what to plan) and the confirmation's POST (what to request); `params()` is what
    `compute_plan`/`request_operation` receive. `plan_digest` is the plan the person saw."""

    force = forms.BooleanField(required=False, label="Force")
    confirm_unreadable = forms.BooleanField(required=False)
    unreadable_seen = forms.BooleanField(required=False, widget=forms.HiddenInput)  # the preview showed one
    resources = forms.MultipleChoiceField(required=False, label="Resources to orphan")
    version_id = forms.CharField(required=False, max_length=1024)
    # destroy: deletes at once (planned), and the stack's name typed to confirm (POST only)
    concurrency = forms.IntegerField(required=False, min_value=1, max_value=64, label="Deletes at once")
    confirm_name = forms.CharField(required=False, max_length=1024, label="Type the stack's name to confirm")
    # scrub: purge history (planned) and its own confirmation (POST only)
    purge_history = forms.BooleanField(required=False, label="Purge history")
    confirm_purge = forms.BooleanField(required=False)
    plan_digest = forms.CharField(required=False, max_length=80, widget=forms.HiddenInput)

    def __init__(self, data, *, kind: str, logical_ids: list[str] | None = None, unreadable_lock: bool = False):
        super().__init__(data)
        self.kind = kind
        self.unreadable_lock = unreadable_lock
        self.fields["resources"].choices = [(lid, lid) for lid in logical_ids or []]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.kind == OperationKind.ORPHAN_RESOURCES and not data.get("resources") and "resources" not in self.errors:
            self.add_error("resources", "Pick at least one resource to orphan.")
        if self.kind == OperationKind.RESTORE and not data.get("version_id"):
            self.add_error("version_id", "Name the version to restore.")
        return data

    def params(self) -> dict[str, Any]:
        data = self.cleaned_data
        if self.kind == OperationKind.FORCE_UNLOCK:
            return {"confirm_unreadable": bool(data.get("confirm_unreadable"))}
        if self.kind == OperationKind.ORPHAN:
            return {"force": bool(data.get("force"))}
        if self.kind == OperationKind.ORPHAN_RESOURCES:
            return {"resources": list(data.get("resources") or []), "force": bool(data.get("force"))}
        if self.kind == OperationKind.RESTORE:
            return {"version_id": data["version_id"]}
        if self.kind == OperationKind.DESTROY:
            return {"concurrency": data["concurrency"]} if data.get("concurrency") else {}
        if self.kind == OperationKind.SCRUB:
            return {"purge_history": bool(data.get("purge_history"))}
        return {}


class ScanForm(forms.Form):
    """Scan one account (its 12-digit id), one stack of it (name and region), or, with no
    account, every account on which the person is an operator."""

    account = forms.RegexField(regex=r"^\d{12}$", required=False)
    stack = forms.CharField(required=False, max_length=1024)
    region = forms.CharField(required=False, max_length=64)
    current_only = forms.BooleanField(required=False, label="Current versions only (skip the history)")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("stack") and not data.get("account"):
            self.add_error("account", "A stack scan names its account.")
        return data


FINDING_SOURCES = [
    ("", "Any source"),
    ("secretsmanager", "Secrets Manager"),
    ("ssm", "SSM SecureString"),
    ("shape", "Credential shape"),
    ("property", "Secret-bearing property"),
]
FINDING_VERSIONS = [("", "Current and history"), ("current", "Current versions"), ("history", "History only")]


class FindingFilterForm(forms.Form):
    """The secrets page's filters; `format` exports the filtered findings."""

    account = forms.ChoiceField(required=False)
    stack = forms.CharField(required=False, max_length=1024)
    region = forms.CharField(required=False, max_length=64)
    version = forms.ChoiceField(required=False, choices=FINDING_VERSIONS)
    source = forms.ChoiceField(required=False, choices=FINDING_SOURCES)
    key_kind = forms.ChoiceField(required=False, label="Where")
    format = forms.ChoiceField(required=False, choices=[("", "page"), ("csv", "CSV"), ("json", "JSON")])
    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, data, *, accounts):
        from stacks.models import SecretFinding

        super().__init__(data)
        self.fields["account"].choices = [("", "All accounts")] + [(a.account_id, a.label) for a in accounts]
        self.fields["key_kind"].choices = [("", "Anywhere"), *SecretFinding.KEY_KINDS]


class DecisionForm(forms.Form):
    """Approve or reject an operation, with an optional comment."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    comment = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


OPERATION_TABS = [("inbox", "Awaiting my approval"), ("mine", "My requests"), ("all", "All")]


class OperationFilterForm(forms.Form):
    tab = forms.ChoiceField(required=False, choices=OPERATION_TABS)
    account = forms.ChoiceField(required=False)
    kind = forms.ChoiceField(required=False, choices=[("", "Any kind"), *OperationKind.choices])
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *OperationStatus.choices])
    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, data, *, accounts):
        super().__init__(data)
        self.fields["account"].choices = [("", "All accounts")] + [(a.account_id, a.label) for a in accounts]


LOCAL_TIME = forms.DateTimeInput(attrs={"type": "datetime-local"})


class AuditFilterForm(forms.Form):
    account = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=255, label="Person")
    action = forms.CharField(required=False, max_length=64)
    stack = forms.CharField(required=False, max_length=1024)
    since = forms.DateTimeField(required=False, label="From", widget=LOCAL_TIME)
    until = forms.DateTimeField(required=False, label="To", widget=LOCAL_TIME)
    format = forms.ChoiceField(required=False, choices=[("", "page"), ("csv", "CSV"), ("json", "JSON")])
    page = forms.IntegerField(required=False, min_value=1)
    verify = forms.RegexField(regex=r"^\d{12}$", required=False)

    def __init__(self, data, *, accounts):
        super().__init__(data)
        self.fields["account"].choices = [("", "All accounts")] + [(a.account_id, a.label) for a in accounts]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The end of the period is before its start.")
        return data


class PolicyForm(forms.Form):
    """One operation kind's approval policy on one account."""

    kind = forms.ChoiceField(choices=OperationKind.choices)
    approval_required = forms.BooleanField(required=False)
    approvers_needed = forms.IntegerField(min_value=1, max_value=20, initial=1)
    validity_hours = forms.IntegerField(min_value=1, max_value=24 * 90, initial=24)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("kind") and data.get("approvers_needed") is not None:
            problem = policy_floor_problem(data["kind"], data.get("approval_required", False), data["approvers_needed"])
            if problem:
                self.add_error(None, problem)
        return data


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class MemberRevealForm(forms.Form):
    """Grant (`on`) or withdraw (absent) a member's reveal right."""

    can_reveal = forms.BooleanField(required=False)


# --- events --------------------------------------------------------------------------------


class EventFilterForm(forms.Form):
    """The timeline of runs: every filter optional; `event_type` keeps runs holding such an
    event; `person` is the requester of the operation that caused the run."""

    account = forms.ChoiceField(required=False)
    stack = forms.CharField(required=False, max_length=1024)
    region = forms.ChoiceField(required=False)
    command = forms.ChoiceField(required=False)
    result = forms.ChoiceField(required=False)
    event_type = forms.ChoiceField(required=False, label="Event type")
    person = forms.CharField(required=False, max_length=255)
    since = forms.DateTimeField(required=False, label="From", widget=LOCAL_TIME)
    until = forms.DateTimeField(required=False, label="To", widget=LOCAL_TIME)
    format = forms.ChoiceField(required=False, choices=[("", "page"), ("csv", "CSV"), ("json", "JSON")])
    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, data, *, accounts, regions):
        from stacks.models import EVENT_TYPES, RUN_COMMANDS, RunResult

        super().__init__(data)
        self.fields["account"].choices = [("", "All accounts")] + [(a.account_id, a.label) for a in accounts]
        self.fields["region"].choices = [("", "All regions")] + [(r, r) for r in regions]
        self.fields["command"].choices = [("", "Any command")] + [(c, c) for c in RUN_COMMANDS]
        self.fields["result"].choices = [("", "Any result"), *RunResult.choices]
        self.fields["event_type"].choices = [("", "Any event type")] + [(t, t) for t in EVENT_TYPES]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The end of the period is before its start.")
        return data
