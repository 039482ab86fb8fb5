"""The audit page: visibility, filters, CSV and JSON exports, chain check."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from stacks import audit
from stacks.management.commands.cdkd import audit_json
from stacks.models import AuditEvent
from tests.operations_ui.conftest import login, make_operation

pytestmark = pytest.mark.django_db


@pytest.fixture
def events(prod, dev, olivia, arthur):
    op = make_operation(prod, olivia)
    return {
        "requested": audit.record(
            "operation.requested", actor="olivia", actor_user=olivia, operation=op, client_address="10.0.0.7"
        ),
        "approved": audit.record("operation.approved", actor="arthur", actor_user=arthur, operation=op),
        "policy": audit.record("policy.changed", actor="ada", account=prod, result="orphan: 2x 24h"),
        "dev": audit.record("operation.requested", actor="dora", account=dev, stack_name="api"),
        "global": audit.record("accounts.added", actor="cli:root"),
    }


def ids(response) -> set[int]:
    return {e.pk for e in response.context["page"]}


def test_it_shows_events_of_visible_accounts_only(client, vera, root, events):
    response = login(client, vera).get(reverse("audit"))
    assert response.status_code == 200
    assert ids(response) == {events[k].pk for k in ("requested", "approved", "policy")}
    assert ids(login(client, root).get(reverse("audit"))) == {e.pk for e in events.values()}


def test_it_filters_by_account_person_action_stack_and_time(client, root, events, prod):
    login(client, root)

    def get(query: str) -> set[int]:
        return ids(client.get(reverse("audit") + "?" + query))

    assert get(f"account={prod.account_id}") == {events[k].pk for k in ("requested", "approved", "policy")}
    assert get("actor=ARTHUR") == {events["approved"].pk}
    assert get("action=operation.") == {events[k].pk for k in ("requested", "approved", "dev")}
    assert get("stack=api") == {events["dev"].pk}
    later = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert get(f"since={later}") == set()
    assert len(get(f"until={later}")) == 5


def test_it_answers_400_for_a_bad_date_or_period(client, vera, events):
    login(client, vera)
    response = client.get(reverse("audit") + "?since=yesterday")
    assert response.status_code == 400 and b"since" in response.content
    assert client.get(reverse("audit") + "?since=2024-03-02T00:00&until=2024-03-01T00:00").status_code == 400
    assert client.get(reverse("audit") + "?format=xml").status_code == 400


def test_it_exports_the_filtered_set_as_json(client, vera, events):
    response = login(client, vera).get(reverse("audit") + "?actor=olivia&format=json")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == [audit_json(AuditEvent.objects.get(pk=events["requested"].pk))]


def test_it_exports_the_filtered_set_as_csv(client, vera, events):
    response = login(client, vera).get(reverse("audit") + "?action=operation.&format=csv")
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["action"] for r in rows] == ["operation.approved", "operation.requested"]
    first = audit_json(AuditEvent.objects.get(pk=events["requested"].pk))
    assert rows[1]["hash"] == first["hash"] and rows[1]["clientAddress"] == "10.0.0.7"
    assert rows[1]["operation"] == str(first["operation"])


def test_it_verifies_the_chain_for_admins_only(client, vera, ada, events, prod):
    assert login(client, vera).get(reverse("audit") + f"?verify={prod.account_id}").status_code == 403
    response = login(client, ada).get(reverse("audit") + f"?verify={prod.account_id}")
    assert response.status_code == 200
    assert b"is intact (3 events checked)" in response.content
