"""Secrets safe by default: before any scan, no page or download shows a viewer a secret
the detectors recognise; the verbatim bytes go only to people with the reveal right, each
reveal audited; the scrub preview's read of Secrets Manager and SSM is audited.

The world: `tests.secrets.world` (moto S3, Secrets Manager, SSM), plus `Payments`, shaped
like the demo's `Prod-PaymentsLegacy`: an older version holding the database password as
`MasterUserPassword`, a current one holding it in a URL output (`DbUrl`), a `pk_live_` key
as attribute `ApiKey`, and a function whose environment holds a GitHub token, a
`password=` connection string, an AWS key pair, a PEM key and a bearer header.

Persona: vera views, olivia operates, ada administers A1; otto has no role.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from stacks.models import AuditEvent, Membership, Role, SecretFinding, Stack
from stacks.sync import sync_account
from tests.secrets.world import (
    A1,
    DEMO_PW,
    DEMO_SECRETS,
    LEAKY,
    REGION,
    accounts,
    people,
    plant,
    plant_leaky,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ARGS = [A1, REGION, LEAKY]


def leaks(body: bytes) -> list[str]:
    return [s[:8] + "..." for s in DEMO_SECRETS if s.encode() in body]


@pytest.fixture
def world(aws) -> dict[str, Any]:
    planted = plant(aws)
    versions = plant_leaky(aws)
    prod, dev = accounts()
    persons = people(prod, dev)
    persons["ada"] = User.objects.create_user("ada", "ada@example.com", "pw")
    Membership.objects.create(user=persons["ada"], account=prod, role=Role.ADMIN)
    sync_account(prod)
    assert SecretFinding.objects.count() == 0  # no scan has run
    return {"aws": aws, "prod": prod, "persons": persons, "versions": versions, "planted": planted}


def as_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_no_page_or_download_shows_a_viewer_a_detected_secret_before_any_scan(world):
    vera = as_client(world["persons"]["vera"])
    old, current = world["versions"]["older"], world["versions"]["current"]
    stack = Stack.objects.get(stack_name=LEAKY)
    assert len(leaks(bytes(stack.body))) == len(DEMO_SECRETS)  # the control: the mirror holds every one
    urls = [
        reverse("stack", args=ARGS),
        reverse("stack_resources", args=ARGS),
        reverse("stack_resources", args=ARGS) + "?q=Fn",
        reverse("stack_outputs", args=ARGS),
        reverse("stack_events", args=ARGS),
        reverse("stack_json", args=ARGS),
        reverse("stack_download", args=ARGS),
        reverse("stack_history", args=ARGS),
        reverse("stack_version", args=[*ARGS, old]),
        reverse("stack_version", args=[*ARGS, current]),
        reverse("stack_diff", args=ARGS) + f"?a={old}&b=current",
        reverse("stack_diff", args=ARGS) + f"?a=current&b={old}",
        reverse("stacks"),
        reverse("stacks_tree"),
        *(reverse("stack_resource", args=[*ARGS, lid]) for lid in ("Db", "Fn", "DbPasswordRotation")),
    ]
    pages: dict[str, bytes] = {}
    for url in urls:
        response = vera.get(url)
        assert response.status_code == 200, url
        pages[url] = body_of(response)
    found = {url: leaks(body) for url, body in pages.items() if leaks(body)}
    assert found == {}
    # What is not a secret stays readable: names, endpoints, the URL around its password.
    json_page = pages[reverse("stack_json", args=ARGS)].decode()
    assert "postgres://payments:***@payments-legacy-db:5432/payments" in json_page
    assert "payments-legacy-db.demo.us-east-1.rds.amazonaws.com" in json_page
    assert "DbPasswordRotation" in json_page and "hello-visible" in json_page
    assert "{{resolve:secretsmanager:" in json_page  # a reference is not a secret
    download = pages[reverse("stack_download", args=ARGS)]
    assert b'"ApiKey": "***"' in download and b'"stackName": "Payments"' in download
    # The older version's MasterUserPassword, and the diff that would print it.
    assert "***" in pages[reverse("stack_version", args=[*ARGS, old])].decode()


def test_a_clean_record_downloads_byte_for_byte_with_its_etag(world):
    vera = as_client(world["persons"]["vera"])
    clean = Stack.objects.get(stack_name="Clean")
    response = vera.get(reverse("stack_download", args=[A1, REGION, "Clean"]))
    assert response.content == bytes(clean.body) and response["ETag"] == clean.etag
    assert response["X-Cdkd-Masked"] == "no"


def test_an_admin_reveals_the_verbatim_bytes_and_each_reveal_is_audited(world):
    aws, ada = world["aws"], as_client(world["persons"]["ada"])
    stored = aws.s3(A1).get_object(Bucket=f"cdkd-state-{A1}", Key=f"cdkd/{LEAKY}/{REGION}/state.json")["Body"].read()
    json_page = ada.get(reverse("stack_json", args=ARGS)).content.decode()
    assert 'id="reveal-button"' in json_page and DEMO_PW not in json_page  # the page itself stays masked

    response = ada.post(reverse("stack_reveal", args=ARGS))

    assert response.status_code == 200 and response.content == stored
    assert response["Content-Disposition"].startswith("attachment;") and "no-store" in response["Cache-Control"]
    event = AuditEvent.objects.get(action="reveal")
    assert (event.actor, event.account_ref, event.stack_name, event.result) == ("ada", A1, LEAKY, "ok")
    assert event.details["version"] == "current" and event.details["bytes"] == len(stored)
    assert DEMO_PW not in str(event.details) and DEMO_PW.encode() not in event.canonical().encode()

    old = world["versions"]["older"]
    version_page = ada.get(reverse("stack_version", args=[*ARGS, old])).content.decode()
    assert f'name="version_id" value="{old}"' in version_page
    older = ada.post(reverse("stack_reveal", args=ARGS), {"version_id": old})
    assert older.status_code == 200 and DEMO_PW.encode() in older.content
    assert AuditEvent.objects.filter(action="reveal", details__version=old).count() == 1


def test_a_viewer_gets_403_for_reveal_until_an_admin_grants_the_right(world):
    vera_user, ada = world["persons"]["vera"], as_client(world["persons"]["ada"])
    vera, otto = as_client(vera_user), as_client(world["persons"]["otto"])
    assert 'id="reveal-button"' not in vera.get(reverse("stack_json", args=ARGS)).content.decode()

    refused = vera.post(reverse("stack_reveal", args=ARGS))
    assert refused.status_code == 403 and DEMO_PW.encode() not in refused.content
    assert vera.post(reverse("stack_reveal", args=ARGS), {"version_id": world["versions"]["older"]}).status_code == 403
    assert otto.post(reverse("stack_reveal", args=ARGS)).status_code == 404  # an outsider learns nothing
    assert vera.get(reverse("stack_reveal", args=ARGS)).status_code == 405  # never on a GET
    assert not AuditEvent.objects.filter(action="reveal").exists()

    membership = Membership.objects.get(user=vera_user, account=world["prod"])
    grant = reverse("account_member_reveal", args=[A1, membership.pk])
    people_page = ada.get(reverse("account_settings", args=[A1])).content.decode()
    assert 'id="reveal-vera"' in people_page and f'action="{grant}"' in people_page
    assert vera.post(grant, {"can_reveal": "on"}).status_code == 403  # only an admin grants it
    assert ada.post(grant, {"can_reveal": "on"}).status_code == 302
    membership.refresh_from_db()
    assert membership.can_reveal
    assert AuditEvent.objects.filter(action="membership.changed", details__change="vera: reveal granted").exists()

    revealed = vera.post(reverse("stack_reveal", args=ARGS))
    assert revealed.status_code == 200 and DEMO_PW.encode() in revealed.content
    assert AuditEvent.objects.get(action="reveal").actor == "vera"

    assert ada.post(grant, {}).status_code == 302  # withdrawn
    assert vera.post(reverse("stack_reveal", args=ARGS)).status_code == 403


def test_the_scrub_preview_audits_its_read_of_secrets_manager_and_ssm(world):
    olivia = as_client(world["persons"]["olivia"])

    response = olivia.get(reverse("operation_new", args=[A1, REGION, "App", "scrub"]))

    assert response.status_code == 200 and response.context["plan"]["kind"] == "scrub"
    event = AuditEvent.objects.get(action="secrets.read")
    assert (event.actor, event.account_ref, event.stack_name, event.result) == ("olivia", A1, "App", "ok")
    assert event.details["purpose"] == "scrub preview" and REGION in event.details["regions"]
