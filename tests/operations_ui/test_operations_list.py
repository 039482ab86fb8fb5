"""The operations list: inbox, my requests, all; filters, pages, and the nav badge."""

from __future__ import annotations

import pytest
from django.urls import reverse

from stacks.models import Approval, OperationStatus, Role
from tests.operations_ui.conftest import login, make_operation, member

pytestmark = pytest.mark.django_db


def pks(response) -> set[int]:
    return {op.pk for op in response.context["page"]}


def test_it_lists_what_awaits_my_approval(client, olivia, arthur, april, prod, dev):
    theirs = make_operation(prod, olivia)
    mine = make_operation(prod, arthur)
    decided = make_operation(prod, april)
    Approval.objects.create(operation=decided, approver=arthur, approved=True, plan_digest=decided.plan_digest)
    make_operation(prod, olivia, status=OperationStatus.QUEUED)
    make_operation(dev, member("dora", dev, Role.OPERATOR))
    response = login(client, arthur).get(reverse("operations"))
    assert response.status_code == 200
    assert response.context["tab"] == "inbox"
    assert pks(response) == {theirs.pk}
    assert mine.pk not in pks(client.get(reverse("operations") + "?tab=inbox"))


def test_it_counts_the_inbox_in_the_nav_with_one_query(client, olivia, arthur, prod, django_assert_num_queries):
    make_operation(prod, olivia)
    make_operation(prod, olivia)
    login(client, arthur)
    response = client.get(reverse("accounts"))
    assert b'id="nav-inbox-count">2<' in response.content
    from django.test import RequestFactory

    from stacks.views.operations import nav

    request = RequestFactory().get("/")
    request.user = arthur
    count = nav(request)["awaiting_my_approval"]
    with django_assert_num_queries(1):
        assert count() == 2
        assert count() == 2


def test_it_shows_my_requests_and_all(client, olivia, arthur, prod, dev):
    mine = make_operation(prod, olivia, status=OperationStatus.SUCCEEDED)
    other = make_operation(prod, arthur)
    hidden = make_operation(dev, member("dora", dev, Role.OPERATOR))
    login(client, olivia)
    default = client.get(reverse("operations"))
    assert default.context["tab"] == "mine" and pks(default) == {mine.pk}
    assert pks(client.get(reverse("operations") + "?tab=all")) == {mine.pk, other.pk}
    assert hidden.pk not in pks(client.get(reverse("operations") + "?tab=all"))


def test_it_filters_by_account_kind_and_status(client, root, olivia, prod, dev):
    a = make_operation(prod, olivia, kind="orphan")
    b = make_operation(prod, olivia, kind="force-unlock", status=OperationStatus.FAILED)
    c = make_operation(dev, None, kind="orphan", status=OperationStatus.SUCCEEDED)
    login(client, root)
    base = reverse("operations") + "?tab=all"
    assert pks(client.get(base)) == {a.pk, b.pk, c.pk}
    assert pks(client.get(base + f"&account={dev.account_id}")) == {c.pk}
    assert pks(client.get(base + "&kind=force-unlock")) == {b.pk}
    assert pks(client.get(base + "&status=awaiting-approval")) == {a.pk}


def test_it_answers_400_for_a_bad_filter(client, olivia, prod):
    login(client, olivia)
    assert client.get(reverse("operations") + "?status=bogus").status_code == 400
    assert client.get(reverse("operations") + "?account=999999999999").status_code == 400


def test_it_pages_with_a_bounded_number_of_queries(client, olivia, prod, settings, django_assert_max_num_queries):
    settings.CDKD_PAGE_SIZE = 5
    for _ in range(12):
        make_operation(prod, olivia)
    login(client, olivia)
    with django_assert_max_num_queries(10):
        response = client.get(reverse("operations") + "?tab=all&page=2")
    assert response.context["page"].number == 2 and len(pks(response)) == 5
    assert b"Page 2 of 3" in response.content


def test_it_returns_the_table_fragment_to_htmx(client, olivia, prod):
    make_operation(prod, olivia)
    response = login(client, olivia).get(reverse("operations") + "?tab=all", headers={"HX-Request": "true"})
    assert b'id="operation-table"' in response.content and b"<html" not in response.content
