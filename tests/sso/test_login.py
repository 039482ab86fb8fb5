"""OpenID Connect login against the real test provider (tests/sso/conftest.py): the flow,
group rules giving and taking roles, and the refusals (wrong issuer, expired token,
password login switched off)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from demo.oidc_provider.process import OidcProvider
from stacks.access import role_on
from stacks.models import AuditEvent, GroupRoleRule, Membership, SsoIdentity
from tests.sso.conftest import PASSWORD, configure, sso_login
from tests.views.conftest import make_account

pytestmark = pytest.mark.django_db


@pytest.fixture
def accounts(db):
    return {
        "prod-pay": make_account("111111111111", "prod-payments"),
        "prod-web": make_account("222222222222", "prod-web"),
        "dev": make_account("333333333333", "dev-sandbox"),
    }


def test_it_logs_in_through_the_provider_and_gives_the_roles_of_the_groups(client, sso, accounts):
    GroupRoleRule.objects.create(group="platform-leads", account_pattern="prod-*", role="approver")
    GroupRoleRule.objects.create(group="deployers", account=accounts["dev"], role="operator")
    GroupRoleRule.objects.create(group="someone-else", account=accounts["dev"], role="admin")
    sso.user("alice", PASSWORD, "platform-leads", "deployers")

    response = sso_login(client, "alice")

    assert response.status_code == 302 and response["Location"] == "/stacks/"
    alice = User.objects.get(username="alice")
    assert client.session["_auth_user_id"] == str(alice.pk)
    assert not alice.has_usable_password()
    identity = SsoIdentity.objects.get(user=alice)
    assert (identity.issuer, identity.groups) == (sso.issuer, ["deployers", "platform-leads"])
    roles = {a: role_on(alice, account) for a, account in accounts.items()}
    assert roles == {"prod-pay": "approver", "prod-web": "approver", "dev": "operator"}
    assert set(Membership.objects.filter(user=alice).values_list("source", flat=True)) == {"rule"}
    changes = AuditEvent.objects.filter(action="membership.changed", actor="group-rules")
    assert sorted(e.details["change"] for e in changes) == ["alice: none->approver"] * 2 + ["alice: none->operator"]
    assert client.get("/stacks/").status_code == 200


def test_it_takes_a_role_away_at_the_next_login_and_keeps_a_manual_grant(client, sso, accounts):
    GroupRoleRule.objects.create(group="platform-leads", account_pattern="prod-*", role="approver")
    sso.user("alice", PASSWORD, "platform-leads")
    sso_login(client, "alice")
    alice = User.objects.get(username="alice")
    # An admin also granted her viewer on prod-web: rules raise it, never remove it.
    grant = Membership.objects.get(user=alice, account=accounts["prod-web"])
    grant.combine("viewer", grant.rule_role)
    grant.save()
    assert role_on(alice, accounts["prod-web"]) == "approver"

    sso.user("alice", PASSWORD)  # removed from platform-leads at the provider
    client.logout()
    response = sso_login(client, "alice")

    assert response.status_code == 302
    assert role_on(alice, accounts["prod-pay"]) is None
    assert not Membership.objects.filter(user=alice, account=accounts["prod-pay"]).exists()
    kept = Membership.objects.get(user=alice, account=accounts["prod-web"])
    assert (kept.role, kept.source, kept.rule_role) == ("viewer", "manual", "")
    assert SsoIdentity.objects.get(user=alice).groups == []
    assert AuditEvent.objects.filter(details__change="alice: approver->none", account=accounts["prod-pay"]).exists()


def test_it_matches_the_same_person_by_subject_on_every_login(client, sso, accounts):
    sso.user("carol", PASSWORD)
    sso_login(client, "carol")
    client.logout()
    User.objects.filter(username="carol").update(username="carol-renamed")
    sso_login(client, "carol")
    assert User.objects.filter(username__startswith="carol").count() == 1
    assert SsoIdentity.objects.count() == 1


def test_it_refuses_a_discovery_document_of_another_issuer(client, settings, sso):
    # The same provider reached by another name: its document names 127.0.0.1, not localhost.
    configure(settings, sso, issuer=sso.issuer.replace("127.0.0.1", "localhost"))
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 503
    assert "names the issuer" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_it_refuses_a_token_from_another_issuer(client, settings, sso, accounts):
    sso.user("alice", PASSWORD, "platform-leads")
    GroupRoleRule.objects.create(group="platform-leads", account_pattern="*", role="admin")
    configure(
        settings,
        sso,
        issuer="https://idp.example.test",
        CDKD_OIDC_AUTHORIZATION_ENDPOINT=f"{sso.issuer}/authorize/",
        CDKD_OIDC_TOKEN_ENDPOINT=f"{sso.issuer}/token/",
        CDKD_OIDC_USERINFO_ENDPOINT=f"{sso.issuer}/userinfo/",
        CDKD_OIDC_JWKS_ENDPOINT=f"{sso.issuer}/.well-known/jwks.json",
    )
    response = sso_login(client, "alice")
    page = response.content.decode()
    assert response.status_code == 403
    assert f"was issued by &#x27;{sso.issuer}&#x27;, not by &#x27;https://idp.example.test&#x27;" in page
    assert "_auth_user_id" not in client.session
    assert not User.objects.filter(username="alice").exists() and not Membership.objects.exists()


def test_it_refuses_an_expired_identity_token(client, settings, provider_folder, sso, accounts):
    # A second provider process on the same database and key whose tokens are born expired.
    expired = OidcProvider(provider_folder, id_token_seconds=-300, client_secret=sso.client_secret).start()
    try:
        sso.user("alice", PASSWORD, "platform-leads")
        configure(settings, expired)
        response = sso_login(client, "alice")
    finally:
        expired.stop()
    assert response.status_code == 403
    assert "the identity token has expired" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert not User.objects.filter(username="alice").exists()


def test_it_refuses_a_callback_it_did_not_start(client, sso):
    response = client.get("/oidc/callback/?code=abc&state=forged")
    assert response.status_code == 403
    assert "was not started here" in response.content.decode()


def test_it_shows_both_ways_in_by_default(client, sso):
    page = client.get("/login/").content.decode()
    assert 'id="sso-login"' in page and 'name="password"' in page


def test_it_hides_the_password_form_and_refuses_passwords_when_local_login_is_off(client, settings, sso):
    User.objects.create_superuser("root", password="root-pw")
    settings.CDKD_LOCAL_LOGIN = False
    settings.AUTHENTICATION_BACKENDS = ["stacks.sso.SsoBackend"]
    page = client.get("/login/").content.decode()
    assert 'id="sso-login"' in page and 'name="password"' not in page

    response = client.post("/login/", {"username": "root", "password": "root-pw"})
    assert response.status_code == 403
    assert "Password login is switched off" in response.content.decode()
    client.post("/admin/login/", {"username": "root", "password": "root-pw"})
    assert "_auth_user_id" not in client.session

    sso.user("alice", PASSWORD)
    assert sso_login(client, "alice").status_code == 302  # single sign-on still lets people in


def test_it_keeps_the_login_lockout_for_passwords_beside_sso(client, sso):
    User.objects.create_user("alice", password="pw")
    for _ in range(6):
        client.post("/login/", {"username": "alice", "password": "guess"})
    response = client.post("/login/", {"username": "alice", "password": "pw"})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
