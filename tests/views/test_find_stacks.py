"""The stacks table finds things: sortable columns, a status at a glance per row (last run
and its result, lock, defects, secret findings), a search that says why it cannot run, and
an empty table that says how stacks appear. alice is a viewer on prod and dev."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from stacks.models import SecretFinding
from tests.views.conftest import T0, make_account, make_lock, make_stack, record, resource_row
from tests.views.test_events_pages import make_run

pytestmark = pytest.mark.django_db


def names(response) -> list[str]:
    return [s.stack_name for s in response.context["page"].object_list]


def test_it_sorts_by_a_whitelisted_column_both_ways(alice_client, prod):
    make_stack(prod, "alpha", data=record("alpha", resources={"A": resource_row()}, lastModified=T0 + 3))
    make_stack(prod, "bravo", data=record("bravo", resources={}, lastModified=T0 + 1))
    make_stack(prod, "charlie", data=record("charlie", resources={"A": resource_row(), "B": resource_row()}))
    assert names(alice_client.get(reverse("stacks"), {"sort": "resources"})) == ["bravo", "alpha", "charlie"]
    assert names(alice_client.get(reverse("stacks"), {"sort": "-resources"})) == ["charlie", "alpha", "bravo"]
    assert names(alice_client.get(reverse("stacks"), {"sort": "-modified"})) == ["alpha", "bravo", "charlie"]


def test_it_sorts_by_name_when_the_sort_key_is_not_a_column(alice_client, prod):
    for name in ("charlie", "alpha", "bravo"):
        make_stack(prod, name)
    response = alice_client.get(reverse("stacks"), {"sort": "body; DROP TABLE"})
    assert response.status_code == 200
    assert names(response) == ["alpha", "bravo", "charlie"]


def test_it_links_each_header_to_the_other_direction_keeping_the_filters(alice_client, prod):
    make_stack(prod, "alpha")
    response = alice_client.get(reverse("stacks"), {"sort": "resources", "q": "alp"})
    headers = {h["key"]: h for h in response.context["headers"]}
    assert headers["resources"]["url"] == "?q=alp&sort=-resources"
    assert headers["resources"]["aria"] == "ascending"
    assert headers["name"]["url"] == "?q=alp&sort=name"
    assert 'aria-sort="ascending"' in response.content.decode()


def test_it_shows_the_last_run_lock_defects_and_secret_findings_of_each_row(alice_client, prod):
    quiet = make_stack(prod, "quiet-stack")
    busy = make_stack(prod, "busy-stack", defects=[{"code": "x", "message": "bad"}])
    make_lock(busy)
    make_run(prod, "busy-stack", "20261201T080000000Z-aaaaaaaa", command="deploy", result="SUCCEEDED")
    make_run(prod, "busy-stack", "20261202T080000000Z-bbbbbbbb", command="destroy", result="FAILED")
    for n in range(2):
        SecretFinding.objects.create(
            account=prod, stack_name="busy-stack", region="us-east-1", key=busy.key, path=["p", n], source="x"
        )
    response = alice_client.get(reverse("stacks"), {"sort": "name"})
    rows = {s.stack_name: s for s in response.context["page"].object_list}
    assert rows["busy-stack"].last_run_id == "20261202T080000000Z-bbbbbbbb"
    assert rows["busy-stack"].last_run_result == "FAILED"
    assert rows["busy-stack"].secret_count == 2
    assert rows["busy-stack"].lock_state == "live"
    assert rows["quiet-stack"].last_run_id is None and rows["quiet-stack"].secret_count == 0
    html = response.content.decode()
    assert "20261202T080000000Z-bbbbbbbb" in html and ">failed<" in html
    assert "2 findings" in html and "1 defect" in html
    assert quiet.stack_name in html
    assert names(alice_client.get(reverse("stacks"), {"sort": "-secrets"}))[0] == "busy-stack"
    assert names(alice_client.get(reverse("stacks"), {"sort": "-run"}))[0] == "busy-stack"


def populate(account, n):
    for i in range(n):
        stack = make_stack(account, f"stack-{account.account_id}-{i:03d}")
        make_run(account, stack.stack_name, f"20261201T0800000{i % 10}0Z-{i:08x}")
        SecretFinding.objects.create(
            account=account, stack_name=stack.stack_name, region="us-east-1", key=stack.key, source="x"
        )
        if i % 3 == 0:
            make_lock(stack)


@pytest.mark.parametrize("view", ["stacks", "stacks_tree"])
@pytest.mark.parametrize("sort", ["name", "-run", "secrets"])
def test_it_runs_the_same_number_of_queries_with_status_for_5_and_60_stacks(
    client, root, view, sort, settings, django_assert_max_num_queries
):
    settings.CDKD_PAGE_SIZE = 100
    client.force_login(root)
    populate(make_account("333333333333", "small"), 5)
    with CaptureQueriesContext(connection) as five:
        client.get(reverse(view), {"sort": sort})
    populate(make_account("444444444444", "big"), 55)
    with django_assert_max_num_queries(len(five.captured_queries)):
        response = client.get(reverse(view), {"sort": sort})
    assert response.context["page"].paginator.count == 60


def test_it_says_why_an_overlong_search_cannot_run_instead_of_listing_everything(alice_client, prod):
    for i in range(3):
        make_stack(prod, f"stack-{i}")
    response = alice_client.get(reverse("stacks"), {"q": "x" * 201})
    assert response.status_code == 200
    assert response.context["page"].paginator.count == 0
    html = response.content.decode()
    assert "The search is 201 characters long; it can be at most 200." in html
    assert "stack-0" not in html


def test_it_says_how_stacks_appear_when_there_are_none(alice_client, prod):
    html = alice_client.get(reverse("stacks")).content.decode()
    assert "No stacks yet" in html and "Sync now" in html


def test_it_offers_a_reset_when_filters_match_nothing(alice_client, prod):
    make_stack(prod, "alpha")
    html = alice_client.get(reverse("stacks"), {"q": "nothing-like-this"}).content.decode()
    assert "No stacks match these filters" in html and "Reset the filters" in html
