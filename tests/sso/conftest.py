"""Single sign-on tests against a real OpenID provider: django-oauth-toolkit in its own
process on loopback (demo/oidc_provider, which the demo runs too), with an RS256 key made at
start. The app side is driven with the Django test client; the provider side (its login
form, its redirects) with `requests`, exactly as a browser would follow them."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
import requests

from demo.oidc_provider.process import CLIENT_ID, OidcProvider
from stacks.sso import forget_discovery

PASSWORD = "provider-pw"


@pytest.fixture(scope="session")
def provider_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("oidc-provider")


@pytest.fixture(scope="session")
def provider(provider_folder):
    """The provider, up for the whole session (the app's database is per test; the
    provider's people are set by each test with `provider.user`)."""
    server = OidcProvider(provider_folder).setup().start()
    yield server
    server.stop()


def configure(settings, provider: OidcProvider, *, issuer: str | None = None, **more) -> None:
    """What CDKD_OIDC_ISSUER, CDKD_OIDC_CLIENT_ID and the secret file turn into."""
    settings.CDKD_OIDC_ENABLED = True
    settings.CDKD_OIDC_ISSUER = issuer or provider.issuer
    settings.CDKD_OIDC_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.CDKD_OIDC_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET = provider.client_secret
    if "stacks.sso.SsoBackend" not in settings.AUTHENTICATION_BACKENDS:
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "stacks.sso.SsoBackend"]
    for name, value in more.items():
        setattr(settings, name, value)
    forget_discovery()


@pytest.fixture
def sso(settings, provider):
    configure(settings, provider)
    yield provider
    forget_discovery()


def sso_login(
    client,
    username: str,
    password: str = PASSWORD,
    *,
    start: str = "/oidc/authenticate/",
    browser: requests.Session | None = None,
):
    """Click "Log in with single sign-on", sign in at the provider, come back. Returns the
    app's answer to the provider's redirect (or to the start, if it never left the app).
    `browser` keeps the provider's cookies (its session) for later requests."""
    response = client.get(start)
    if response.status_code != 302:
        return response
    return follow(client, response["Location"], username, password, browser=browser)


def follow(client, url: str, username: str = "", password: str = PASSWORD, *, browser=None):
    """Follow the provider's redirects (signing in if it asks) back to the app; the app's
    answer to the provider's last redirect."""
    browser = browser if browser is not None else requests.Session()
    for _hop in range(10):
        if url.startswith("http://testserver/"):
            parts = urlsplit(url)
            return client.get(f"{parts.path}?{parts.query}")
        page = browser.get(url, allow_redirects=False, timeout=10)
        if page.status_code in (301, 302, 303):
            url = requests.compat.urljoin(url, page.headers["Location"])
            continue
        assert page.status_code == 200, page.text[:500]
        assert 'id="provider-submit"' in page.text, page.text[:500]
        token = browser.cookies.get("provider_csrftoken")
        nxt = re.search(r'name="next" value="([^"]*)"', page.text).group(1).replace("&amp;", "&")
        page = browser.post(
            url,
            data={"username": username, "password": password, "next": nxt, "csrfmiddlewaretoken": token},
            allow_redirects=False,
            timeout=10,
        )
        assert page.status_code == 302, f"the provider refused {username}'s login: {page.text[:300]}"
        url = requests.compat.urljoin(url, page.headers["Location"])
    raise AssertionError("the provider never sent the browser back to the app")
