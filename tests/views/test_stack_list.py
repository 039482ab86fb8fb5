from __future__ import annotations

import pytest
from django.urls import reverse

from stacks.models import Membership, Role
from tests.views.conftest import make_account, make_lock, make_stack, record, resource_row

pytestmark = pytest.mark.django_db


def names(response) -> list[str]:
    return [s.stack_name for s in response.context["page"].object_list]


def test_it_lists_the_stacks_of_every_visible_account(alice_client, prod, dev):
    make_stack(prod, "web", data=record("web", resources={"Bucket": resource_row()}))
    make_stack(dev, "api", "eu-west-1")
    response = alice_client.get(reverse("stacks"))
    assert response.status_code == 200
    assert names(response) == ["api", "web"]
    assert b"prod" in response.content and b"eu-west-1" in response.content


def test_it_hides_accounts_without_a_role(client, bob, prod, dev):
    make_stack(prod, "secret-stack")
    make_stack(dev, "api")
    client.force_login(bob)
    response = client.get(reverse("stacks"))
    assert names(response) == ["api"]
    assert b"secret-stack" not in response.content
    assert b"111111111111" not in response.content


def test_it_ignores_an_account_filter_for_an_invisible_account(client, bob, prod, dev):
    make_stack(prod, "secret-stack")
    make_stack(dev, "api")
    client.force_login(bob)
    response = client.get(reverse("stacks"), {"account": prod.account_id})
    assert "secret-stack" not in names(response)


def test_it_searches_stack_names_and_resource_ids_without_duplicates(alice_client, prod):
    rows = {
        "Queue": resource_row("AWS::SQS::Queue", "https://sqs/q-orders"),
        "Queue2": resource_row("AWS::SQS::Queue", "q-orders-dlq"),
    }
    make_stack(prod, "orders", data=record("orders", resources=rows))
    make_stack(
        prod, "billing", data=record("billing", resources={"Table": resource_row("AWS::DynamoDB::Table", "tbl")})
    )
    make_stack(prod, "web")
    assert names(alice_client.get(reverse("stacks"), {"q": "BILL"})) == ["billing"]
    assert names(alice_client.get(reverse("stacks"), {"q": "queue"})) == ["orders"]
    assert names(alice_client.get(reverse("stacks"), {"q": "q-orders"})) == ["orders"]
    assert names(alice_client.get(reverse("stacks"), {"q": "nothing-like-it"})) == []


def test_it_filters_by_account_region_version_and_nesting(alice_client, prod, dev):
    parent = make_stack(prod, "app")
    make_stack(prod, "app~Child", parent=parent)
    make_stack(dev, "api", "eu-west-1", data=record("api", "eu-west-1", version=8))
    make_stack(dev, "old", None, legacy=True, data=record("old", None, version=1))
    url = reverse("stacks")
    assert names(alice_client.get(url, {"account": dev.account_id})) == ["api", "old"]
    assert names(alice_client.get(url, {"region": "eu-west-1"})) == ["api"]
    assert names(alice_client.get(url, {"region": "legacy"})) == ["old"]
    assert names(alice_client.get(url, {"version": "8"})) == ["api"]
    assert names(alice_client.get(url, {"nesting": "nested"})) == ["app~Child"]
    assert names(alice_client.get(url, {"nesting": "top"})) == ["api", "app", "old"]


def test_it_filters_and_shows_lock_states(alice_client, prod):
    make_lock(make_stack(prod, "live"), expires_in_ms=600_000)
    make_lock(make_stack(prod, "expired"), expires_in_ms=-1)
    make_lock(make_stack(prod, "no-deadline"), expires_in_ms=None)
    make_lock(make_stack(prod, "garbled"), readable=False)
    make_stack(prod, "free")
    url = reverse("stacks")
    assert names(alice_client.get(url, {"lock": "live"})) == ["live"]
    assert names(alice_client.get(url, {"lock": "expired"})) == ["expired", "no-deadline"]
    assert names(alice_client.get(url, {"lock": "unreadable"})) == ["garbled"]
    assert names(alice_client.get(url, {"lock": "none"})) == ["free"]
    states = {s.stack_name: s.lock_state for s in alice_client.get(url).context["page"]}
    assert states == {
        "live": "live",
        "expired": "expired",
        "no-deadline": "expired",
        "garbled": "unreadable",
        "free": "none",
    }


def test_it_filters_by_defects(alice_client, prod):
    make_stack(prod, "damaged", defects=[{"code": "outputs-malformed", "path": "outputs", "message": "bad"}])
    make_stack(prod, "fine")
    assert names(alice_client.get(reverse("stacks"), {"defects": "yes"})) == ["damaged"]
    assert names(alice_client.get(reverse("stacks"), {"defects": "no"})) == ["fine"]
    assert b"1 defect" in alice_client.get(reverse("stacks")).content


def test_it_answers_htmx_with_the_table_partial(alice_client, prod):
    make_stack(prod, "web")
    response = alice_client.get(reverse("stacks"), {"q": "web"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert b'id="stack-table"' in response.content
    assert b"<html" not in response.content
    assert b"Sync now" not in response.content


def test_it_paginates(alice_client, prod, settings):
    settings.CDKD_PAGE_SIZE = 3
    for i in range(7):
        make_stack(prod, f"s{i}")
    response = alice_client.get(reverse("stacks"), {"page": 3})
    assert names(response) == ["s6"]
    assert b"Previous" in response.content


def test_it_shows_per_account_counts_sync_times_and_bucket_trouble(alice_client, prod, dev):
    make_stack(prod, "web")
    dev.bucket_status = "denied"
    dev.bucket_message = "s3:ListBucket denied on cdkd-state-222222222222"
    dev.last_sync_error = "AccessDenied: s3:ListBucket"
    dev.save()
    response = alice_client.get(reverse("stacks"))
    content = response.content.decode()
    assert "1 stack" in content
    assert "Access denied" in content
    assert "s3:ListBucket denied on cdkd-state-222222222222" in content
    assert "Last sync failed: AccessDenied: s3:ListBucket" in content


def populate(account, n: int) -> None:
    for i in range(n):
        stack = make_stack(account, f"stack-{i:03}", data=record(f"stack-{i:03}", resources={"R": resource_row()}))
        if i % 3 == 0:
            make_lock(stack)


@pytest.mark.parametrize("view", ["stacks", "stacks_tree"])
def test_it_runs_the_same_number_of_queries_for_5_and_60_stacks(
    client, root, view, settings, django_assert_max_num_queries
):
    settings.CDKD_PAGE_SIZE = 100
    client.force_login(root)
    small = make_account("333333333333", "small")
    populate(small, 5)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as five:
        client.get(reverse(view), {"q": "stack"})
    populate(make_account("444444444444", "big"), 55)
    with django_assert_max_num_queries(len(five.captured_queries)):
        response = client.get(reverse(view), {"q": "stack"})
    assert response.context["page"].paginator.count == 60


def test_it_shows_nested_stacks_under_their_parents_in_the_tree(alice_client, prod):
    app = make_stack(prod, "app")
    child = make_stack(prod, "app~Db", parent=app)
    make_stack(prod, "app~Db~Replica", parent=child)
    make_stack(prod, "solo")
    response = alice_client.get(reverse("stacks_tree"))
    rows = [(s.stack_name, indent) for s, indent in response.context["tree_rows"]]
    assert rows == [("app", 0), ("app~Db", 1), ("app~Db~Replica", 2), ("solo", 0)]
    assert alice_client.get(reverse("stacks"), {"view": "tree"}).context["tree"] is True


def test_it_keeps_other_accounts_children_out_of_the_tree(client, bob, prod, dev):
    app = make_stack(dev, "app")
    make_stack(dev, "app~Db", parent=app)
    make_stack(prod, "app~Db2", parent=make_stack(prod, "app"))
    client.force_login(bob)
    rows = [s.stack_name for s, _ in client.get(reverse("stacks_tree")).context["tree_rows"]]
    assert rows == ["app", "app~Db"]


def test_it_shows_accounts_even_without_stacks(client, db):
    from tests.views.conftest import make_user

    carol = make_user("carol")
    empty = make_account(
        "555555555555", "empty", bucket_status="missing", bucket_message="No bucket cdkd-state-555555555555"
    )
    Membership.objects.create(user=carol, account=empty, role=Role.VIEWER)
    client.force_login(carol)
    content = client.get(reverse("stacks")).content.decode()
    assert "Bucket missing" in content
    assert "No bucket cdkd-state-555555555555" in content
