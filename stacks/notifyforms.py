"""Input of the notification pages: a webhook's settings and a person's email subscriptions."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from stacks.forms import WordedForm
from stacks.models import EventKind, WebhookFormat
from stacks.webhooks import check_url

EVENT_CHOICES = [(k.value, k.label) for k in EventKind]


class WebhookForm(WordedForm):
    """Create (`creating=True`: the URL is required) or change a webhook. The URL and the
    secret are never rendered back: empty on a change keeps them."""

    name = forms.CharField(max_length=100, label="Name")
    url = forms.CharField(max_length=2048, required=False, label="URL")
    secret = forms.CharField(
        max_length=200, min_length=16, required=False, label="Signing secret", widget=forms.PasswordInput
    )
    events = forms.MultipleChoiceField(choices=EVENT_CHOICES, widget=forms.CheckboxSelectMultiple, label="Events")
    format = forms.ChoiceField(
        choices=WebhookFormat.choices, initial=WebhookFormat.JSON, required=False, label="Format"
    )
    active = forms.BooleanField(required=False, initial=True, label="Active")

    def __init__(self, *args, creating: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.creating = creating
        self.fields["url"].required = creating

    def clean_url(self) -> str:
        url = self.cleaned_data.get("url") or ""
        if not url.strip() and not self.creating:
            return ""
        try:
            return check_url(url)
        except ValidationError as exc:
            raise ValidationError(exc.messages) from None


class SubscriptionForm(forms.Form):
    """One account's email events for the person (the choices they may hear of there)."""

    events = forms.MultipleChoiceField(choices=EVENT_CHOICES, required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args, allowed: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["events"].choices = [(v, label) for v, label in EVENT_CHOICES if v in allowed]
