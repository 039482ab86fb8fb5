"""Repair advice on damaged records: a command that pastes as it is (stack name, account
and region filled in, shell-quoted), and consistent with what the app offers (it never
says orphan refuses the record while recommending orphan)."""

from __future__ import annotations

import json
import shlex

import pytest
from django.urls import reverse

from engine.schema import parse_state
from tests.operations_ui.conftest import login
from tests.views.conftest import make_stack, record, resource_row

pytestmark = pytest.mark.django_db

TORN = {"version": 11, "stackName": "x", "region": "us-east-1", "resources": {"Q": "torn"}}


def commands(message: str) -> list[str]:
    return message.split("`")[1::2]


def test_it_fills_in_the_stack_account_and_region():
    rec = parse_state(json.dumps(TORN).encode(), key_region="us-east-1", stack_name="shop-api", account="111111111111")
    message = rec.defects[0].message
    assert "python manage.py cdkd state show shop-api --account 111111111111 --stack-region us-east-1 --json" in message
    assert "python manage.py cdkd state orphan shop-api --account 111111111111 --stack-region us-east-1" in message
    assert "--resource Q" in message and "<stack>" not in message and "<region>" not in message


@pytest.mark.parametrize("name", ["it's a stack", "a;rm -rf /", "$(id)", "ünïcode"])
def test_each_command_pastes_as_one_word_per_argument(name):
    rec = parse_state(json.dumps(TORN).encode(), key_region="us-east-1", stack_name=name, account="111111111111")
    for command in commands(rec.defects[0].message):
        if command.startswith("python manage.py cdkd"):
            words = shlex.split(command)
            assert words[5] == name and words[6:8] == ["--account", "111111111111"]


def test_it_never_lists_orphan_among_the_refusers_while_recommending_it():
    rec = parse_state(json.dumps(TORN).encode(), key_region="us-east-1", stack_name="shop", account="111111111111")
    message = rec.defects[0].message
    refusers = message.split(" refuse this record")[0]
    assert "state orphan" not in refusers and "reads `resources` nowhere" in message
    assert "cdkd orphan <constructPath>" in refusers  # the construct-path orphan does refuse


def test_a_legacy_record_is_shown_by_leaving_the_region_out():
    body = json.dumps({"version": 1, "stackName": "old"}).encode()
    message = parse_state(body, key_region=None, stack_name="old", account="111111111111").defects[0].message
    assert "python manage.py cdkd state show old --account 111111111111 --json" in message
    assert "--stack-region" not in message


def test_the_stack_page_shows_the_filled_in_command(client, olivia, prod):
    data = record("shop api", resources={"Q": resource_row(), "Bad": "torn"})
    stack = make_stack(
        prod, "shop api", data=data, defects=[{"code": "resource-row-malformed", "path": "resources.Bad"}]
    )
    page = (
        login(client, olivia)
        .get(reverse("stack", args=[prod.account_id, "us-east-1", "shop api"]))
        .content.decode()
        .replace("&#x27;", "'")
    )
    assert stack.stack_name in page
    assert "python manage.py cdkd state show 'shop api' --account 111111111111 --stack-region us-east-1 --json" in page
    assert "--resource Bad" in page
