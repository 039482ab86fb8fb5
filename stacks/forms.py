"""Input validation for the stack browser: the stacks filter, the resources filter, the
history diff and the sync request. Views read `cleaned_data` only."""

from __future__ import annotations

from django import forms

from stacks.models import LockState


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
