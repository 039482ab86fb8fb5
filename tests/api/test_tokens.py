"""Personal API tokens through the token page and the API: shown once, stored as a
SHA-256 only, expiring, revocable, person-bound, read-only when asked; CSRF on the page."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from stacks.models import ApiToken, AuditEvent
from tests.api.conftest import call, token_for

pytestmark = pytest.mark.django_db

SECRET = re.compile(rb"cdkd_[A-Za-z0-9_-]{43}")


def make_on_page(client: Client, user, **form) -> tuple[bytes, str]:
    client.force_login(user)
    response = client.post(reverse("api_tokens"), {"name": "ci", "expires_in": "30", **form})
    assert response.status_code == 201
    found = SECRET.findall(response.content)
    assert found, "the new token is on the page that made it"
    return response.content, found[0].decode()


def test_it_shows_the_secret_once_and_stores_only_its_hash(world):
    client = Client()
    viewer = world["people"]["viewer"]

    _page, secret = make_on_page(client, viewer, read_only="on")

    token = ApiToken.objects.get(user=viewer)
    assert token.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert token.prefix == secret[:11] and token.read_only
    # 32 random bytes, urlsafe-base64: 43 characters after the scheme.
    assert len(secret) == len("cdkd_") + 43
    stored = json.dumps(list(ApiToken.objects.values()), default=str)
    assert secret not in stored and secret[len("cdkd_") :] not in stored
    again = client.get(reverse("api_tokens"))
    assert again.status_code == 200
    assert secret.encode() not in again.content and token.prefix.encode() in again.content
    assert not SECRET.search(again.content)
    # Nor is it in the session (a message would put it there) or the audit log.
    assert secret not in json.dumps(dict(client.session.items()), default=str)
    created = AuditEvent.objects.get(action="api-token.created")
    assert created.details["token"] == token.pk and secret not in json.dumps(created.details)
    assert call("GET", "/api/v1/accounts", secret).status_code == 200


def test_it_refuses_an_expired_token(world):
    secret = token_for(world["people"]["viewer"], days=7)
    assert call("GET", "/api/v1/accounts", secret).status_code == 200

    with time_machine.travel(timezone.now() + timedelta(days=7, seconds=1), tick=False):
        response = call("GET", "/api/v1/accounts", secret)

    assert response.status_code == 401
    assert "token" in json.loads(response.content)["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_it_refuses_a_revoked_token(world):
    client = Client()
    viewer = world["people"]["viewer"]
    _page, secret = make_on_page(client, viewer)
    token = ApiToken.objects.get(user=viewer)

    response = client.post(reverse("api_token_revoke", args=[token.pk]))

    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert call("GET", "/api/v1/accounts", secret).status_code == 401
    assert AuditEvent.objects.filter(action="api-token.revoked", details__token=token.pk).count() == 1
    assert b"revoked" in client.get(reverse("api_tokens")).content


def test_it_lets_nobody_revoke_another_persons_token(world):
    secret = token_for(world["people"]["viewer"])
    token = ApiToken.objects.get(user=world["people"]["viewer"])
    client = Client()
    client.force_login(world["people"]["superuser"])

    response = client.post(reverse("api_token_revoke", args=[token.pk]))

    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
    assert call("GET", "/api/v1/accounts", secret).status_code == 200


def test_it_lists_only_the_persons_own_tokens(world):
    token_for(world["people"]["admin"])
    other = ApiToken.objects.get(user=world["people"]["admin"])
    client = Client()
    client.force_login(world["people"]["viewer"])

    page = client.get(reverse("api_tokens"))

    assert other.prefix.encode() not in page.content


def test_it_refuses_the_token_of_a_deactivated_person(world):
    viewer = world["people"]["viewer"]
    secret = token_for(viewer)
    viewer.is_active = False
    viewer.save()

    assert call("GET", "/api/v1/accounts", secret).status_code == 401


@pytest.mark.parametrize(
    "header",
    ["", "Bearer", "Bearer cdkd_nope", "Basic dmVyYTpwdw==", "Bearer " + "cdkd_" + "x" * 5000, "Token cdkd_x"],
)
def test_it_refuses_missing_and_wrong_tokens_with_json(world, header):
    client = Client(raise_request_exception=False)
    response = client.get("/api/v1/stacks", **({"HTTP_AUTHORIZATION": header} if header else {}))

    assert response.status_code == 401
    assert json.loads(response.content)["message"]


def test_it_never_takes_a_browser_session_for_a_token(world):
    """A session cookie alone does not authorise an API call: no cookie auth, so no CSRF."""
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(world["people"]["superuser"])

    assert client.get("/api/v1/stacks").status_code == 401
    response = client.post(f"/api/v1/operations/{world['awaiting'].pk}/approve", "{}", content_type="application/json")
    assert response.status_code == 401
    world["awaiting"].refresh_from_db()
    assert world["awaiting"].status == "awaiting-approval"


def test_it_needs_a_csrf_token_on_the_token_page(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["people"]["viewer"])

    response = client.post(reverse("api_tokens"), {"name": "ci", "expires_in": "30"})

    assert response.status_code == 403
    assert not ApiToken.objects.exists()


def test_it_notes_when_a_token_was_last_used(world):
    secret = token_for(world["people"]["viewer"])
    token = ApiToken.objects.get()
    assert token.last_used_at is None

    call("GET", "/api/v1/accounts", secret)

    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize(
    ("form", "says"),
    [({"name": "", "expires_in": "30"}, b"Name is required"), ({"name": "x", "expires_in": "9999"}, b"Expires in")],
)
def test_it_refuses_a_bad_token_form(world, form, says):
    client = Client()
    client.force_login(world["people"]["viewer"])

    response = client.post(reverse("api_tokens"), form)

    assert response.status_code == 400
    assert says in response.content
    assert not ApiToken.objects.exists()


def test_it_offers_the_token_page_under_the_persons_name(world):
    client = Client()
    client.force_login(world["people"]["viewer"])

    page = client.get(reverse("stacks")).content.decode()

    assert f'href="{reverse("api_tokens")}"' in page
