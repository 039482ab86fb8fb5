"""The silent re-check of a single-sign-on session (stacks.sso.ProviderRecheck) against the
real test provider: once the session is older than CDKD_OIDC_RECHECK_SECONDS, a page GET
goes to the provider with `prompt=none`; its answer refreshes the groups (a group removed
at the provider takes the role away without a new login), and its refusal logs out."""

from __future__ import annotations

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from stacks.access import role_on
from stacks.models import GroupRoleRule, SsoIdentity
from tests.sso.conftest import PASSWORD, follow, sso_login
from tests.views.conftest import make_account

pytestmark = pytest.mark.django_db


@pytest.fixture
def prod(db):
    return make_account("111111111111", "prod-payments")


@pytest.fixture
def alice(client, sso, prod):
    """alice, signed in through the provider as a platform lead (approver on prod-*); the
    browser keeps her provider session."""
    GroupRoleRule.objects.create(group="platform-leads", account_pattern="prod-*", role="approver")
    sso.user("alice", PASSWORD, "platform-leads")
    browser = requests.Session()
    assert sso_login(client, "alice", browser=browser).status_code == 302
    person = User.objects.get(username="alice")
    assert role_on(person, prod) == "approver"
    return person, browser


def due(client) -> None:
    """The session's re-check is due (its time has passed)."""
    session = client.session
    session["oidc_id_token_expiration"] = 0
    session.save()


def test_it_leaves_the_session_alone_until_the_recheck_is_due(client, alice):
    assert client.get("/stacks/").status_code == 200


def test_it_rechecks_silently_and_takes_away_a_removed_groups_role(client, sso, alice, prod):
    person, browser = alice
    sso.user("alice", PASSWORD)  # taken out of platform-leads at the provider, still signed in there
    due(client)

    response = client.get("/stacks/?q=pay")

    assert response.status_code == 302
    to_provider = response["Location"]
    assert to_provider.startswith(sso.issuer) and "prompt=none" in to_provider
    back = follow(client, to_provider, browser=browser)  # no login form: the provider answers at once
    assert back.status_code == 302 and back["Location"] == "/stacks/?q=pay"
    assert client.session["_auth_user_id"] == str(person.pk)  # still signed in, as the same person
    assert SsoIdentity.objects.get(user=person).groups == []
    assert role_on(person, prod) is None
    assert client.get("/stacks/").status_code == 200  # the next re-check is 15 minutes away


def test_it_logs_out_when_the_provider_says_the_person_must_sign_in_again(client, sso, alice):
    due(client)
    to_provider = client.get("/stacks/")["Location"]

    back = follow(client, to_provider, browser=requests.Session())  # no provider session any more

    assert back.status_code == 403 and b"login_required" in back.content
    assert "_auth_user_id" not in client.session
    assert client.get("/stacks/").status_code == 302  # to the login page


def test_it_never_redirects_an_htmx_fragment_or_the_api(client, alice):
    due(client)
    assert client.get("/stacks/", headers={"HX-Request": "true"}).status_code == 200
    assert client.get("/api/v1/accounts").status_code == 401  # a token, never the session, authorises


def test_it_can_be_switched_off(client, alice, settings):
    settings.CDKD_OIDC_RECHECK_SECONDS = 0
    due(client)
    assert client.get("/stacks/").status_code == 200


def test_it_never_rechecks_a_password_session(sso, prod, make_user):
    client = Client()
    client.force_login(make_user("paula", a111111111111="viewer"))
    session = client.session
    session["oidc_id_token_expiration"] = 0
    session.save()
    assert client.get("/stacks/").status_code == 200
