"""Operation pages with thousands of items paginate and filter by status; plans print
each change once; a destroy plan's warnings about other records are one collapsed line."""

from __future__ import annotations

import pytest
from django.urls import reverse

from engine.operations import Plan
from stacks.models import Operation, OperationStatus
from stacks.views.operations import plan_context
from tests.operations_ui.conftest import login, make_operation

pytestmark = pytest.mark.django_db


def destroy_plan() -> dict:
    rows = {
        "Fn": {"action": "delete", "resourceType": "AWS::Lambda::Function", "physicalId": "fn-web"},
        "Queue": {"action": "delete", "resourceType": "AWS::SQS::Queue", "physicalId": "q-orders"},
    }
    return Plan(
        kind="destroy",
        stack="web",
        region="us-east-1",
        etag='"etag-1"',
        summary="Destroy web",
        changes=[
            "delete Fn (AWS::Lambda::Function, physical id 'fn-web')",
            "delete Queue (AWS::SQS::Queue, physical id 'q-orders')",
            "when everything is gone: delete the record",
        ],
        warnings=[
            "could not read cdkd/other/us-east-1/state.json (not a readable record); skipped by the import check, "
            "as cdkd skips it",
            "could not read cdkd/other/us-east-1/state.json (not a readable record); skipped by the import check, "
            "as cdkd skips it",
            "web: Keep is kept in AWS (DeletionPolicy Retain)",
        ],
        data={"stack": "web", "order": ["Fn", "Queue"], "rows": rows},
    ).as_json()


def test_it_prints_each_destroy_change_once_and_collapses_other_records_warnings():
    context = plan_context(destroy_plan())
    assert [r["logical_id"] for r in context["destroy_rows"]] == ["Fn", "Queue"]
    assert [c.text for c in context["changes"]] == ["when everything is gone: delete the record"]
    assert context["plan_warnings"] == ["web: Keep is kept in AWS (DeletionPolicy Retain)"]
    assert context["unreadable_elsewhere"] == ["cdkd/other/us-east-1/state.json (not a readable record)"]


def test_it_prints_each_rewrite_once():
    plan = Plan(
        kind="orphan-resources",
        stack="web",
        region="us-east-1",
        etag='"e"',
        summary="s",
        changes=["remove Queue from the record", 'Fn.Properties.Q: {"Ref": "Queue"} -> "q-orders"'],
        data={
            "rewrites": [
                {
                    "kind": "Ref",
                    "logicalId": "Fn",
                    "path": "Properties.Q",
                    "before": {"Ref": "Queue"},
                    "after": "q-orders",
                }
            ]
        },
    ).as_json()
    context = plan_context(plan)
    assert [c.text for c in context["changes"]] == ["remove Queue from the record"]
    assert len(context["rewrites"]) == 1


def test_the_operation_page_shows_a_destroy_row_once(client, olivia, web):
    op = make_operation(web.account, olivia, kind="destroy")
    Operation.objects.filter(pk=op.pk).update(plan=destroy_plan())
    page = login(client, olivia).get(reverse("operation", args=[op.pk])).content.decode()
    assert page.count("fn-web") == 1  # the rows table only, not the change list again
    assert page.count("cdkd/other/us-east-1/state.json") == 1 and 'id="plan-unreadable"' in page


@pytest.fixture
def big(web, olivia):
    items = {
        f"Res{i:04d}": {"status": "failed" if i % 500 == 7 else "deleted", "type": "AWS::SQS::Queue"}
        for i in range(2000)
    }
    return make_operation(
        web.account,
        olivia,
        kind="destroy",
        status=OperationStatus.PARTIAL,
        progress={"done": 2000, "total": 2000, "items": items},
    )


def test_it_paginates_thousands_of_items(client, olivia, big, settings):
    login(client, olivia)
    page = client.get(reverse("operation", args=[big.pk])).content.decode()
    table = page[page.index('id="operation-items"') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 1 + settings.CDKD_PAGE_SIZE  # the header and one page
    assert "Items (2000, 4 failed)" in page and 'aria-label="Item pages"' in page
    second = client.get(reverse("operation", args=[big.pk]) + "?page=2").content.decode()
    assert f"Res{settings.CDKD_PAGE_SIZE:04d}" in second and "Res0000" not in second


def test_it_filters_items_to_the_failed_ones(client, olivia, big):
    page = login(client, olivia).get(reverse("operation", args=[big.pk]) + "?item_status=failed").content.decode()
    table = page[page.index('id="operation-items"') :]
    table = table[: table.index("</table>")]
    assert [f"Res{i:04d}" in table for i in (7, 507, 1007, 1507)] == [True] * 4
    assert "Res0000" not in table and table.count("status-failed") == 4
    assert '<option value="failed" selected>' in page


def test_the_polling_region_keeps_the_filter(client, olivia, web):
    items = {"A": {"status": "failed"}, "B": {"status": "deleting"}}
    op = make_operation(web.account, olivia, status=OperationStatus.RUNNING, progress={"items": items})
    url = reverse("operation", args=[op.pk])
    page = login(client, olivia).get(url + "?item_status=failed").content.decode()
    assert f'hx-get="{url}?item_status=failed"' in page
    live = client.get(url + "?item_status=failed", headers={"HX-Request": "true"}).content.decode()
    assert ">A<" in live and ">B<" not in live
