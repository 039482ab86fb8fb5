"""Destroy's journal-only protection rule asks the mirror who holds a physical id when a plan
is computed in a web request (stacks.consumers.holders_from_mirror): one query, no GET."""

from __future__ import annotations

import pytest

from stacks.consumers import holders_from_mirror
from tests.views.conftest import make_account, make_stack, record, resource_row

pytestmark = pytest.mark.django_db


def test_it_names_the_other_records_that_hold_an_id_and_not_the_stack_itself(django_assert_num_queries):
    prod = make_account("111111111111", "prod")
    make_stack(prod, "App", data=record("App", resources={"Web": resource_row("AWS::EC2::Instance", "i-0abc")}))
    make_stack(prod, "Adopter", data=record("Adopter", resources={"Imp": resource_row("AWS::EC2::Instance", "i-0abc")}))
    make_stack(
        prod,
        "App",
        "eu-west-1",
        data=record("App", "eu-west-1", resources={"X": resource_row("AWS::EC2::Instance", "i-0abc")}),
    )
    other = make_account("222222222222", "dev")
    make_stack(
        other, "Elsewhere", data=record("Elsewhere", resources={"W": resource_row("AWS::EC2::Instance", "i-0abc")})
    )

    with django_assert_num_queries(2):
        held, unreadable = holders_from_mirror(prod, "App", "us-east-1", {"i-0abc", "i-free"})

    assert {pid: sorted(keys) for pid, keys in held.items()} == {
        "i-0abc": ["cdkd/Adopter/us-east-1/state.json", "cdkd/App/eu-west-1/state.json"]
    }
    assert unreadable == []
