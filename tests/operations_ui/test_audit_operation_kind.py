"""Each audit event names the kind of operation it belongs to, the hash covers that name,
the chain of events written before the field existed still verifies, and the exports carry
it. An outsider asking to verify an account's chain gets 404, like everywhere else."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pytest
from django.db import connection
from django.urls import reverse

from stacks import audit
from stacks.models import AuditEvent
from tests.operations_ui.conftest import login, make_operation

pytestmark = pytest.mark.django_db


def old_canonical(e: AuditEvent) -> str:
    """The hashed text as the code before `operation_kind` wrote it, verbatim."""
    return json.dumps(
        [
            e.prev_hash,
            e.created_at.isoformat(),
            e.actor,
            e.action,
            e.account_ref,
            e.stack_name,
            e.region,
            e.operation_id,
            e.plan_digest,
            e.etag_before,
            e.etag_after,
            e.result,
            e.error,
            e.client_address,
            e.details,
        ],
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )


def test_it_names_the_operation_kind_and_hashes_it(prod, olivia):
    op = make_operation(prod, olivia, kind="destroy")

    event = audit.record("operation.requested", actor="olivia", actor_user=olivia, operation=op)

    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.operation_kind == "destroy"
    assert stored.hash == hashlib.sha256(stored.canonical().encode()).hexdigest()
    assert stored.hash != hashlib.sha256(old_canonical(stored).encode()).hexdigest()  # the kind is in it
    assert audit.verify(prod.account_id) == (1, [])


def test_it_detects_an_edited_operation_kind(prod, olivia):
    op = make_operation(prod, olivia, kind="orphan")
    event = audit.record("operation.requested", actor="olivia", operation=op)
    with connection.cursor() as cursor:  # around the append-only manager, as an attacker would
        cursor.execute("UPDATE stacks_auditevent SET operation_kind = %s WHERE id = %s", ["force-unlock", event.pk])

    checked, problems = audit.verify(prod.account_id)

    assert checked == 1 and [p.event_id for p in problems] == [event.pk]
    assert "does not match its hash" in problems[0].message


def test_events_without_a_kind_hash_as_before(prod):
    """Events written before the field (operation_kind empty) keep their hashes: verify stays green."""
    event = audit.record("policy.changed", actor="ada", account=prod, result="orphan: 2x 24h")

    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.operation_kind == ""
    assert stored.canonical() == old_canonical(stored)
    assert audit.verify(prod.account_id) == (1, [])


def test_the_exports_carry_the_operation_kind(client, vera, prod, olivia):
    op = make_operation(prod, olivia, kind="scrub")
    audit.record("operation.requested", actor="olivia", operation=op)
    login(client, vera)

    rows = client.get(reverse("audit"), {"format": "json"}).json()
    assert [(r["operation"], r["operationKind"]) for r in rows] == [(op.pk, "scrub")]
    response = client.get(reverse("audit"), {"format": "csv"})
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert table[0]["operationKind"] == "scrub" and table[0]["operation"] == str(op.pk)
    page = client.get(reverse("audit")).content.decode()
    assert "scrub" in page


def test_verify_answers_404_for_an_account_the_person_cannot_see(client, otto, vera, ada, prod, dev):
    audit.record("policy.changed", actor="ada", account=prod)

    assert login(client, otto).get(reverse("audit"), {"verify": prod.account_id}).status_code == 404
    assert login(client, otto).get(reverse("audit"), {"verify": "999999999999"}).status_code == 404
    assert login(client, vera).get(reverse("audit"), {"verify": prod.account_id}).status_code == 403
    assert login(client, ada).get(reverse("audit"), {"verify": prod.account_id}).status_code == 200


def test_a_policy_change_names_the_kind_it_changes(client, ada, prod):
    data = {"kind": "restore", "approval_required": "on", "approvers_needed": 2, "validity_hours": 4}
    assert login(client, ada).post(reverse("account_policy", args=[prod.account_id]), data).status_code == 302

    event = AuditEvent.objects.get(action="policy.changed")
    assert event.operation_kind == "restore" and event.operation_id is None
    assert audit.verify(prod.account_id) == (1, [])
