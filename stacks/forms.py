"""Input validation for the stack browser: the stacks filter, the resources filter, the
history diff and the sync request; and for operations: their parameters, approvals, the
operations and audit filters, approval policy and members. Views read `cleaned_data` only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from stacks.models import Assembly, LockState, OperationKind, OperationStatus, Role, policy_floor_problem

REASON_MAX = 500  # Operation.reason's length


def one_line(text: str) -> str:
    """Plain text on one line: control characters (newlines included) become spaces, runs
    of spaces one. For reasons and names shown to other people and kept in the audit."""
    return " ".join("".join(c if c.isprintable() else " " for c in text or "").split())


def _label(form: forms.Form, name: str) -> str:
    field = form.fields.get(name)
    label = field.label if field is not None and field.label else name.replace("_", " ")
    return str(label)[:1].upper() + str(label)[1:]


def _sentence(label: str, error: forms.ValidationError) -> str:
    """One error as a sentence that names the field in words, not by its form name."""
    params = error.params or {}
    limit = params.get("limit_value")
    by_code = {
        "required": f"{label} is required.",
        "min_value": f"{label} must be at least {limit}.",
        "max_value": f"{label} must be at most {limit}.",
        "invalid": f"{label} must be a whole number." if "number" in str(error.message) else f"{label} is not valid.",
        "invalid_choice": f"{label}: that is not one of the choices.",
        "max_length": f"{label} must be at most {limit} characters (it has {params.get('show_value')}).",
        "min_length": f"{label} must be at least {limit} characters.",
    }
    if error.code in by_code:
        return by_code[error.code]
    return " ".join(error.messages)  # the form's own messages are sentences already


def worded_errors(form: forms.Form) -> list[str]:
    """Every error of a bound form in words: "Approvers needed must be at most 20.", never
    "approvers_needed: Ensure this value is less than or equal to 20"."""
    out = []
    for name, errors in form.errors.as_data().items():
        for error in errors:
            out.append(" ".join(error.messages) if name == "__all__" else _sentence(_label(form, name), error))
    return out


class WordedForm(forms.Form):
    @property
    def worded_errors(self) -> list[str]:
        return worded_errors(self)


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
    *(OperationKind.REFRESH_OBSERVED, OperationKind.DRIFT_ACCEPT, OperationKind.DRIFT_REVERT),
    OperationKind.ROLLBACK,
    OperationKind.EVENTS_PRUNE,
)
# The kinds requested from an account's pages (no stack: `stacks.views.bucket_requests`).
ACCOUNT_KINDS = (OperationKind.STATE_MIGRATE,)
FORCEABLE_KINDS = (OperationKind.ORPHAN, OperationKind.ORPHAN_RESOURCES)


def destroy_deadline_params() -> dict[str, Any]:
    """The web path's per-resource deadlines (settings), as destroy params; cdkd's defaults
    (30 min, warn after 5) are left out so the params say only what differs."""
    params: dict[str, Any] = {}
    if settings.CDKD_DESTROY_RESOURCE_TIMEOUT_SECONDS != 1800:
        params["resource_timeout"] = settings.CDKD_DESTROY_RESOURCE_TIMEOUT_SECONDS
    if settings.CDKD_DESTROY_RESOURCE_WARN_AFTER_SECONDS != 300:
        params["resource_warn_after"] = settings.CDKD_DESTROY_RESOURCE_WARN_AFTER_SECONDS
    return params


class OperationParamsForm(WordedForm):
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
    # destroy plan options, as cdkd names them (--skip-final-snapshot, --remove-protection)
    skip_final_snapshot = forms.BooleanField(required=False, label="Skip final snapshot")
    remove_protection = forms.BooleanField(required=False, label="Remove protection")
    # scrub: purge history (planned) and its own confirmation (POST only); keep history (cdkd
    # purges each rewritten record's history by default); consent to a predicted replacement;
    # the stored assembly whose templates drive the rewrite
    purge_history = forms.BooleanField(required=False, label="Purge history")
    confirm_purge = forms.BooleanField(required=False)
    keep_history = forms.BooleanField(required=False, label="Keep history")
    allow_replacement = forms.BooleanField(required=False, label="Allow replacement")
    assembly = forms.RegexField(regex=r"^[0-9a-f]{64}$", required=False, label="Assembly")
    # rollback, as cdkd names them (--revert-failed, --orphan <logicalId>...)
    revert_failed = forms.BooleanField(required=False, label="Revert failed operations")
    orphan = forms.CharField(required=False, max_length=4000, label="Leave in AWS (logical ids)")
    # events prune, as cdkd names them (--keep N, --older-than DAYS); neither: the newest 20 stay
    keep = forms.IntegerField(required=False, min_value=0, max_value=100_000, label="Keep the newest runs")
    older_than_days = forms.IntegerField(required=False, min_value=1, max_value=36_500, label="Older than (days)")
    plan_digest = forms.CharField(required=False, max_length=80, widget=forms.HiddenInput)
    # Why (free text or a ticket reference): shown to approvers and kept in the audit.
    reason = forms.CharField(required=False, max_length=REASON_MAX, label="Reason")
    force_offered = forms.BooleanField(required=False, widget=forms.HiddenInput)  # the form offered Force

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
        if self.kind == OperationKind.SCRUB:
            clean_scrub(self, data)
        return data

    def clean_orphan(self) -> list[str]:
        """Logical ids, separated by spaces or commas, each once (the plan refuses one the
        journal does not hold, naming it)."""
        text = self.cleaned_data.get("orphan") or ""
        ids = [part for part in text.replace(",", " ").split() if part]
        bad = [i for i in ids if not i.isprintable() or len(i) > 255]
        if bad:
            raise forms.ValidationError("Leave in AWS takes logical ids (printable, at most 255 characters each).")
        return list(dict.fromkeys(ids))

    def clean_reason(self) -> str:
        return one_line(self.cleaned_data.get("reason") or "")

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
            params: dict[str, Any] = {"concurrency": data["concurrency"]} if data.get("concurrency") else {}
            for option in ("skip_final_snapshot", "remove_protection"):
                if data.get(option):
                    params[option] = True
            return params | destroy_deadline_params()
        if self.kind == OperationKind.SCRUB:
            return scrub_params(data)
        if self.kind == OperationKind.ROLLBACK:
            return rollback_params(data)
        if self.kind == OperationKind.EVENTS_PRUNE:  # as `cdkd events prune` passes them
            return {"keep": data.get("keep"), "older_than_days": data.get("older_than_days")}
        return {}


class StateMigrateForm(WordedForm):
    """`state migrate` from the web: the region in the legacy bucket's name and whether to
    remove that bucket after the verified copy (ticked twice on the confirmation)."""

    region = forms.CharField(max_length=32, label="Region")
    remove_legacy = forms.BooleanField(required=False, label="Remove the legacy bucket")
    confirm_remove = forms.BooleanField(required=False)
    plan_digest = forms.CharField(required=False, max_length=80, widget=forms.HiddenInput)
    reason = forms.CharField(required=False, max_length=REASON_MAX, label="Reason")

    def clean_region(self) -> str:
        from engine.keys import is_region_shaped

        region = self.cleaned_data["region"].strip()
        if not is_region_shaped(region):
            raise forms.ValidationError(f"Region {region!r} is not an AWS region name (e.g. us-east-1).")
        return region

    def clean_reason(self) -> str:
        return one_line(self.cleaned_data.get("reason") or "")

    def params(self) -> dict[str, Any]:
        return {"remove_legacy": bool(self.cleaned_data.get("remove_legacy"))}


def rollback_params(data: dict[str, Any]) -> dict[str, Any]:
    """A rollback's parameters, as `cdkd rollback` takes them; the account is the
    operation's own (set by the pipeline, never by the form)."""
    params: dict[str, Any] = {}
    if data.get("revert_failed"):
        params["revert_failed"] = True
    if data.get("orphan"):
        params["orphan"] = list(data["orphan"])
    return params


def scrub_params(data: dict[str, Any]) -> dict[str, Any]:
    """A scrub's parameters: `purge_history` always, the others only when chosen."""
    params: dict[str, Any] = {"purge_history": bool(data.get("purge_history"))}
    if data.get("keep_history"):
        params["keep_history"] = True
    if data.get("allow_replacement"):
        params["allow_replacement"] = True
    if data.get("assembly"):
        params["assembly_digest"] = data["assembly"]
    return params


def clean_scrub(form: forms.Form, data: dict[str, Any]) -> None:
    if data.get("keep_history") and data.get("purge_history"):
        form.add_error("keep_history", "Keep history and purge history contradict each other: choose one.")
    digest = data.get("assembly")
    if digest and not Assembly.objects.filter(digest=digest).exists():
        form.add_error("assembly", f"No stored assembly {digest[:12]}: upload it on the deploy page first.")


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


class FindingFilterForm(WordedForm):
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


class ItemFilterForm(WordedForm):
    """An operation page's items: one page of them, optionally of one status only."""

    item_status = forms.ChoiceField(
        required=False,
        label="Item status",
        choices=[("", "Every item"), ("failed", "Failed only")],
    )
    page = forms.IntegerField(required=False, min_value=1, label="Page")


class CancelForm(forms.Form):
    """The cancel confirmation: the button on the confirmation step sends `confirm=yes`."""

    confirm = forms.ChoiceField(choices=[("yes", "yes")])


class OperationFilterForm(WordedForm):
    tab = forms.ChoiceField(required=False, choices=OPERATION_TABS)
    account = forms.ChoiceField(required=False)
    kind = forms.ChoiceField(required=False, choices=[("", "Any kind"), *OperationKind.choices])
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *OperationStatus.choices])
    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, data, *, accounts):
        super().__init__(data)
        self.fields["account"].choices = [("", "All accounts")] + [(a.account_id, a.label) for a in accounts]


LOCAL_TIME = forms.DateTimeInput(attrs={"type": "datetime-local"})


class AuditFilterForm(WordedForm):
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


class PolicyForm(WordedForm):
    """One operation kind's approval policy on one account."""

    kind = forms.ChoiceField(choices=OperationKind.choices, label="Operation kind")
    approval_required = forms.BooleanField(required=False, label="Approval required")
    approvers_needed = forms.IntegerField(min_value=1, max_value=20, initial=1, label="Approvers needed")
    validity_hours = forms.IntegerField(min_value=1, max_value=24 * 90, initial=24, label="Hours an approval holds")

    @property
    def worded_errors(self) -> list[str]:
        kind = self.data.get("kind")
        label = dict(OperationKind.choices).get(kind) if isinstance(kind, str) else None
        return [f"{label} policy: {m}" if label else m for m in worded_errors(self)]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("kind") and data.get("approvers_needed") is not None:
            problem = policy_floor_problem(data["kind"], data.get("approval_required", False), data["approvers_needed"])
            if problem:
                self.add_error(None, problem)
        return data


class MemberAddForm(WordedForm):
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
