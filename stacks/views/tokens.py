"""The person's API tokens (under their name in the top bar): make one (its secret shown
once, on the response to the POST that made it, never stored or sent again), list them
(prefix, scope, expiry, last use) and revoke one. A person sees and revokes only their own."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from stacks.api.tokens import create_token, revoke_token
from stacks.audit import client_ip
from stacks.forms import WordedForm, one_line
from stacks.models import ApiToken
from stacks.views.common import AuthedRequest

EXPIRY_DAYS = [("7", "7 days"), ("30", "30 days"), ("90", "90 days"), ("365", "1 year")]
# A person's live tokens at once: enough for every script, few enough to review.
MAX_ACTIVE = 20


class TokenForm(WordedForm):
    name = forms.CharField(max_length=100, label="Name", help_text="What uses it, e.g. nightly-report")
    expires_in = forms.ChoiceField(choices=EXPIRY_DAYS, initial="30", label="Expires in")
    read_only = forms.BooleanField(required=False, label="Read-only", initial=True)

    def clean_name(self) -> str:
        name = one_line(self.cleaned_data["name"])
        if not name:
            raise forms.ValidationError("Name is required.")
        return name


def _page(request: AuthedRequest, form: TokenForm, *, secret: str = "", made=None, status: int = 200) -> HttpResponse:
    tokens = list(ApiToken.objects.filter(user=request.user))
    now = timezone.now()
    for token in tokens:
        token.is_usable = token.usable(now)
    context = {"form": form, "tokens": tokens, "secret": secret, "made": made, "now": now}
    response = render(request, "stacks/tokens.html", context, status=status)
    response["Cache-Control"] = "no-store, private"  # the one response that holds a secret
    return response


@never_cache
@require_http_methods(["GET", "POST"])
def api_tokens(request: AuthedRequest) -> HttpResponse:
    if request.method == "GET":
        return _page(request, TokenForm())
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    now = timezone.now()
    active = ApiToken.objects.filter(user=request.user, revoked_at__isnull=True, expires_at__gt=now).count()
    if active >= MAX_ACTIVE:
        form.add_error(None, f"You have {active} live tokens, the most one person may hold: revoke one first.")
        return _page(request, form, status=400)
    token, secret = create_token(
        request.user,
        form.cleaned_data["name"],
        expires_at=now + timedelta(days=int(form.cleaned_data["expires_in"])),
        read_only=form.cleaned_data["read_only"],
        client_address=client_ip(request),
    )
    return _page(request, TokenForm(), secret=secret, made=token, status=201)


@require_POST
def api_token_revoke(request: AuthedRequest, token_id: int) -> HttpResponse:
    token = ApiToken.objects.filter(pk=token_id, user=request.user).first()
    if token is None:  # someone else's token does not exist for this person
        raise Http404("No such token")
    if revoke_token(request.user, token, client_address=client_ip(request)):
        messages.success(request, f"Revoked token {token.prefix}… ({token.name}): it no longer works.")
    else:
        messages.info(request, f"Token {token.prefix}… was revoked already.")
    return redirect("api_tokens")
