"""The Exports page: every export of an account (or of every account a person sees), its
value (masked as every page masks a record), the stack that exports it and every stack that
imports it.

Nothing here reads S3: exports come from the mirrored records (`outputs`, and `exportNames`
where cdkd wrote it, v9 on), importers from the `Stack.imports` mirror column that destroy's
import check reads too (stacks.consumers). A record without `exportNames` (before v9) does
not say which outputs are exports, so only the keys another record imports count for it.
An import whose export no mirrored record holds is listed as dangling.

Cost: one query for the stacks with their bodies, one for the importers; each body is
decrypted, masked and parsed once. Only the filtered rows reach the template, a page at a
time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from engine.schema import parse_state
from stacks.access import accounts_for, get_account_or_404
from stacks.models import Account, SecretFinding, Stack
from stacks.secretmask import mask_bytes
from stacks.views.common import AuthedRequest


class ExportFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Filter exports")
    page = forms.IntegerField(required=False, min_value=1)


@dataclass
class Importer:
    stack_name: str
    region: str | None
    region_slug: str


@dataclass
class ExportRow:
    account: Account
    region: str
    name: str
    value: Any = None
    is_string: bool = False
    source: Stack | None = None  # None: no mirrored record exports it (a dangling import)
    declared: bool = True  # False: a pre-v9 record, known to be an export because it is imported
    source_name: str = ""
    importers: list[Importer] = field(default_factory=list)


def export_rows(stacks: QuerySet[Stack]) -> list[ExportRow]:
    """Every export of `stacks` (already access-checked), keyed by (account, region, name)."""
    by_id: dict[int, Account] = {}
    imported: dict[tuple[int, str, str], set[str]] = defaultdict(set)  # (acct, stack, region) -> names
    importers: dict[tuple[int, str, str], list[Importer]] = defaultdict(list)  # (acct, region, export)
    for row in stacks.order_by("account_id", "stack_name", "region").values(
        "account_id", "stack_name", "region", "legacy", "imports"
    ):
        entries = row["imports"] if isinstance(row["imports"], list) else []
        slug = Stack(region=row["region"], legacy=row["legacy"]).region_slug
        for entry in entries:
            name, src, src_region = entry.get("exportName"), entry.get("sourceStack"), entry.get("sourceRegion")
            if not isinstance(name, str) or not isinstance(src_region, str):
                continue
            if isinstance(src, str):
                imported[(row["account_id"], src, src_region)].add(name)
            importers[(row["account_id"], src_region, name)].append(Importer(row["stack_name"], row["region"], slug))

    # What the scans flagged in the current records, in one query (secretmask.flagged_paths
    # asks per stack): the same masking as every page, without a query per record.
    flagged: dict[tuple[int, str], list] = defaultdict(list)
    account_ids = stacks.values("account_id")
    findings = SecretFinding.objects.filter(account_id__in=account_ids)
    current_versions = dict(stacks.values_list("pk", "version_id"))
    for account_id, key, version_id, path in findings.values_list("account_id", "key", "version_id", "path"):
        if isinstance(path, list):
            flagged[(account_id, key)].append((version_id, path))

    rows: dict[tuple[int, str, str], ExportRow] = {}
    for stack in stacks.select_related("account").defer(None).order_by("account_id", "stack_name", "region"):
        by_id[stack.account_id] = stack.account
        if stack.legacy or not stack.region:
            continue  # cdkd publishes exports per region: a legacy record exports nothing by region
        current = {None, current_versions.get(stack.pk) or None}
        paths = [path for version, path in flagged.get((stack.account_id, stack.key), []) if version in current]
        parsed = parse_state(mask_bytes(bytes(stack.body), paths), key_region=stack.region)
        outputs = parsed.outputs()
        names = parsed.export_names()
        declared = names is not None
        keys = names if declared else imported.get((stack.account_id, stack.stack_name, stack.region), set())
        for name in sorted(k for k in keys if k in outputs):
            value = outputs[name]
            rows[(stack.account_id, stack.region, name)] = ExportRow(
                stack.account, stack.region, name, value, isinstance(value, str), stack, declared, stack.stack_name
            )
    for (account_id, region, name), found in importers.items():
        row = rows.get((account_id, region, name))
        if row is None and account_id in by_id:
            sources = {
                src for (a, src, r), names in imported.items() if a == account_id and r == region and name in names
            }
            row = rows[(account_id, region, name)] = ExportRow(
                by_id[account_id], region, name, source_name=", ".join(sorted(sources))
            )
        if row is not None:
            row.importers = found
    return sorted(rows.values(), key=lambda r: (r.account.label, r.account.account_id, r.region, r.name))


def _matches(row: ExportRow, q: str) -> bool:
    q = q.casefold()
    names = [row.name, row.source_name, *(i.stack_name for i in row.importers)]
    return any(q in n.casefold() for n in names)


def _page(request: AuthedRequest, stacks: QuerySet[Stack], account: Account | None) -> HttpResponse:
    form = ExportFilterForm(request.GET)
    valid = form.is_valid()
    q = (form.cleaned_data.get("q") or "").strip() if valid else ""
    rows = export_rows(stacks)
    total = len(rows)
    if q:
        rows = [r for r in rows if _matches(r, q)]
    page = Paginator(rows, settings.CDKD_PAGE_SIZE).get_page(form.cleaned_data.get("page") if valid else None)
    context = {
        "account": account,
        "form": form,
        "page": page,
        "total": total,
        "q": q,
        "filter_error": "" if valid else "The filter is longer than 200 characters; shorten it to filter.",
    }
    return render(request, "stacks/exports.html", context)


@require_GET
def account_exports(request: AuthedRequest, account_id: str) -> HttpResponse:
    account = get_account_or_404(request.user, account_id)
    return _page(request, Stack.objects.filter(account=account), account)


@require_GET
def all_exports(request: AuthedRequest) -> HttpResponse:
    return _page(request, Stack.objects.filter(account__in=accounts_for(request.user)), None)
