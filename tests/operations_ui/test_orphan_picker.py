"""The orphan-resources picker: type and physical id per row, a server-side filter, select
all matches, a page at a time at 2,000 resources, and no error before anything is
submitted. olivia operates prod. FAKE ENGINE: `planned` stands in for `compute_plan`."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.operations_ui.conftest import login
from tests.views.conftest import make_stack, record, resource_row

pytestmark = pytest.mark.django_db


def new_url(stack) -> str:
    return reverse(
        "operation_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name, "orphan-resources"]
    )


@pytest.fixture
def big(prod):
    resources = {}
    for i in range(2000):
        rtype = "AWS::SQS::Queue" if i % 2 else "AWS::S3::Bucket"
        resources[f"Res{i:04d}"] = resource_row(rtype, f"arn:aws:thing:us-east-1:111111111111:phys-{i:04d}")
    return make_stack(prod, "big", data=record("big", resources=resources))


def test_it_shows_type_and_physical_id_without_an_error_before_a_submit(client, olivia, web, planned):
    html = login(client, olivia).get(new_url(web)).content.decode()
    assert "AWS::SQS::Queue" in html and "q-orders" in html and "fn-web" in html
    assert "Pick at least one resource" not in html
    assert planned == []


def test_it_says_pick_one_when_the_selection_is_submitted_empty(client, olivia, web, planned):
    html = login(client, olivia).get(new_url(web), {"submitted": "1", "match": ""}).content.decode()
    assert "Pick at least one resource" in html and planned == []


def test_it_filters_on_the_server_by_id_type_or_physical_id(client, olivia, web, planned):
    login(client, olivia)
    html = client.get(new_url(web), {"pick": "filter", "match": "lambda"}).content.decode()
    assert 'value="Fn"' in html and 'value="Queue"' not in html
    assert "1 of 2 match" in html
    html = client.get(new_url(web), {"pick": "filter", "match": "q-ORD"}).content.decode()
    assert 'value="Queue"' in html and 'value="Fn"' not in html
    assert planned == []


def test_it_selects_every_match_and_plans_them(client, olivia, big, planned):
    login(client, olivia)
    response = client.get(new_url(big), {"match": "SQS", "select": "all-matches"})
    assert response.status_code == 200
    (call,) = planned
    assert len(call[4]["resources"]) == 1000 and all(int(lid[3:]) % 2 for lid in call[4]["resources"])
    html = response.content.decode()
    assert html.count('type="hidden" name="resources"') >= 1000  # the confirmation carries them


def test_it_pages_2000_resources_a_hundred_at_a_time_in_bounded_queries(client, olivia, big, planned):
    login(client, olivia)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(new_url(big), {"pick": "filter", "page": 3})
    html = response.content.decode()
    assert html.count('name="resources"') == 100
    assert 'value="Res0200"' in html and 'value="Res0199"' not in html
    assert "3 / 20" in html and "Select all 2000 resources" in html
    assert len(queries.captured_queries) < 20
    assert len(html) < 120_000  # one compact line per resource


def test_it_uses_no_inline_script_in_the_picker(client, olivia, web, planned):
    html = login(client, olivia).get(new_url(web)).content.decode()
    section = html[html.index('id="pick-resources"') :]
    assert "<script" not in section and "onclick" not in section and "style=" not in section
