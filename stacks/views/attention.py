"""The attention board (`/attention/`): the rows `stacks.attention` builds for the accounts
the person can see, filtered, one page at a time, or exported whole as CSV or JSON."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from stacks import attention
from stacks.attentionrows import EXPORT_FIELDS, KINDS, Context, board_json, export_row
from stacks.forms import WordedForm
from stacks.views.common import AuthedRequest, is_partial
from stacks.views.exports import csv_download, json_download


class AttentionFilterForm(WordedForm):
    account = forms.ChoiceField(required=False)
    kind = forms.ChoiceField(required=False, choices=[("", "Any problem"), *KINDS], label="Problem")
    format = forms.ChoiceField(required=False, choices=[("", "page"), ("csv", "CSV"), ("json", "JSON")])
    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, data, *, accounts):
        super().__init__(data)
        self.fields["account"].choices = [("", "All accounts")] + [(a.account_id, a.label) for a in accounts]


@never_cache
@require_GET
def attention_board(request: AuthedRequest) -> HttpResponse:
    ctx = Context.for_user(request.user)
    form = AttentionFilterForm(request.GET, accounts=list(ctx.accounts.values()))
    valid = form.is_valid()
    filters = form.cleaned_data if valid else {}
    board = attention.build(ctx, account_id=filters.get("account") or None, kind=filters.get("kind") or None)
    if filters.get("format") == "csv":
        return csv_download((export_row(r) for r in board.rows), EXPORT_FIELDS, "cdkd-attention")
    if filters.get("format") == "json":
        return json_download(board_json(board), "cdkd-attention")
    page = Paginator(board.rows, settings.CDKD_PAGE_SIZE).get_page(filters.get("page"))
    context = {
        "form": form,
        "board": board,
        "page": page,
        "filtered": bool(filters.get("account") or filters.get("kind")),
    }
    template = "stacks/attention.html#board" if is_partial(request) else "stacks/attention.html"
    return render(request, template, context, status=200 if valid else 400)
