"""Actions only where they can succeed: the stack page offers each repair only where it can
run, or shows it disabled with its reason in one line; the request view refuses the same
cases with a 409 (never a 500) and records nothing, however it is reached.

FAKE ENGINE: `planned` stands in for `compute_plan`; a refused kind must never reach it."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from engine.schema import parse_state
from stacks.actions import stack_actions, why_not
from stacks.models import Operation
from tests.operations_ui.conftest import login
from tests.views.conftest import make_lock, make_stack, record, resource_row

pytestmark = pytest.mark.django_db


def mirrored(account, name: str, data, *, legacy: bool = False, **fields):
    """A Stack row as the sync stores it: defects and read-only from the real parser."""
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    parsed = parse_state(body, key_region=None if legacy else "us-east-1")
    return make_stack(
        account,
        name,
        data=data if isinstance(data, dict) else {},
        body=body,
        legacy=legacy,
        defects=[d.as_dict() for d in parsed.defects],
        read_only=parsed.newer_than_supported,
        **fields,
    )


def stack_url(stack) -> str:
    return reverse("stack", args=[stack.account.account_id, stack.region_slug, stack.stack_name])


def new_url(stack, kind: str) -> str:
    return reverse("operation_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name, kind])


@pytest.fixture
def newer(prod):
    data = record("future", resources={"Q": resource_row("AWS::SQS::Queue", "q")})
    data["version"] = 12
    return mirrored(prod, "future", data)


@pytest.fixture
def damaged(prod):
    # `outputs` torn: damage outside the rows, so only the whole-record orphan can run.
    return mirrored(prod, "torn", record("torn", resources={"Q": resource_row()}, outputs="abc"))


@pytest.fixture
def bad_row(prod):
    return mirrored(prod, "badrow", record("badrow", resources={"Ok": resource_row(), "Bad": {"properties": {}}}))


def test_it_shows_a_newer_record_s_repairs_disabled_with_their_reasons(client, olivia, newer):
    page = login(client, olivia).get(stack_url(newer)).content.decode()
    for kind in ("orphan", "orphan-resources", "destroy", "scrub"):
        assert f'id="action-{kind}" disabled' in page
        assert new_url(newer, kind) not in page
    assert 'id="destroy-button"' not in page and 'id="scrub-button"' not in page
    reasons = page[page.index('id="action-reasons"') :]
    reasons = reasons[: reasons.index("</ul>")]
    assert reasons.count("<li") == 1  # one reason, one line, naming the five it disables
    assert (
        '<strong id="why-scrub">Scrub secrets</strong>, <strong id="why-deploy">Plan a deploy</strong>: '
        "Written by a newer cdkd (schema version 12" in reasons
    )
    assert reasons.count("<strong") == 5


def test_it_offers_only_the_whole_record_orphan_on_a_record_damaged_outside_its_rows(client, olivia, damaged):
    page = login(client, olivia).get(stack_url(damaged)).content.decode()
    assert f'href="{new_url(damaged, "orphan")}"' in page
    assert 'id="action-destroy" disabled' in page and 'id="action-scrub" disabled' in page
    assert 'id="action-orphan-resources" disabled' in page
    assert (
        '<strong id="why-destroy">Destroy</strong>, <strong id="why-scrub">Scrub secrets</strong>: '
        "The record is damaged (outputs: outputs-malformed)"
    ) in page
    assert "orphan the whole record instead" in page


def test_it_offers_orphaning_the_damaged_row_itself(olivia, bad_row):
    actions = stack_actions(olivia, bad_row)
    assert actions["orphan_resources"].allowed and actions["orphan"].allowed
    assert not actions["destroy"].allowed and not actions["scrub"].allowed


def test_it_offers_every_repair_on_a_healthy_record(client, olivia, web):
    make_lock(web)
    page = login(client, olivia).get(stack_url(web)).content.decode()
    for kind in ("force-unlock", "orphan", "orphan-resources", "scrub"):
        assert f'href="{new_url(web, kind)}"' in page
    assert 'id="destroy-button"' in page and "disabled" not in page.split('id="stack-operations"')[1].split("</nav>")[0]


@pytest.mark.parametrize("kind", ["orphan", "orphan-resources", "destroy", "scrub"])
def test_it_refuses_a_direct_request_on_a_newer_record_with_409(client, olivia, newer, planned, kind):
    login(client, olivia)
    data = {"confirm_name": "future", "resources": ["Q"], "reason": "try anyway"}
    for response in (client.get(new_url(newer, kind)), client.post(new_url(newer, kind), data)):
        assert response.status_code == 409
        assert b"Written by a newer cdkd (schema version 12" in response.content
    assert planned == [] and not Operation.objects.exists()


@pytest.mark.parametrize("kind", ["destroy", "scrub", "orphan-resources"])
def test_it_refuses_a_direct_request_on_a_damaged_record_with_409(client, olivia, damaged, planned, kind):
    response = login(client, olivia).post(new_url(damaged, kind), {"confirm_name": "torn", "resources": ["Q"]})
    assert response.status_code == 409 and b"damaged" in response.content
    assert planned == [] and not Operation.objects.exists()


def test_it_lets_the_damaged_record_be_orphaned(client, olivia, damaged, planned):
    response = login(client, olivia).post(new_url(damaged, "orphan"), {"reason": "OPS-7"})
    assert response.status_code == 302 and Operation.objects.get().stack_name == "torn"


def test_it_refuses_destroy_and_resource_orphans_on_a_legacy_record(prod, olivia):
    legacy = mirrored(prod, "old", record("old", region=None, resources={"Q": resource_row()}), legacy=True)
    assert "legacy record" in why_not(legacy, "destroy")
    assert "legacy record" in why_not(legacy, "orphan-resources")
    assert why_not(legacy, "orphan") is None


def test_it_names_the_operator_role_to_a_viewer(vera, web):
    actions = stack_actions(vera, web)
    assert not any(a.allowed for a in actions.values())
    assert actions["destroy"].reason == "You need the operator role on prod (111111111111) to request this."


@pytest.mark.parametrize("fixture", ["newer", "damaged"])
def test_it_shows_plan_a_deploy_disabled_where_a_deploy_refuses(client, olivia, fixture, request):
    stack = request.getfixturevalue(fixture)
    page = login(client, olivia).get(stack_url(stack)).content.decode()
    assert 'id="plan-deploy-button" disabled' in page
    assert (
        'id="why-deploy"' in page
        and 'href="' + reverse("stack_plan_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name])
        not in page
    )
    answer = client.get(reverse("stack_plan_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name]))
    assert answer.status_code == 409
    assert ("newer" in answer.content.decode()) or ("damaged" in answer.content.decode())


def test_it_offers_plan_a_deploy_on_a_healthy_record(client, olivia, web):
    page = login(client, olivia).get(stack_url(web)).content.decode()
    assert 'id="plan-deploy-button" href=' in page.replace('class="button secondary" ', "")
