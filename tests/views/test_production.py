"""The production set-up as shipped: gunicorn + whitenoise with DEBUG off, DEBUG and
SECRET_KEY defaults, CDKD_HTTPS and `check --deploy`, the Content-Security-Policy, login
lockout (django-axes), the session idle timeout and the 403/404/500 pages.

Personas: alice (viewer on prod and dev, password "pw") from tests/views/conftest.py;
mallory is whoever guesses alice's password."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from cryptography.fernet import Fernet
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import include, path, reverse
from django.utils import timezone

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_ENV = {
    "DEBUG": "False",
    "SECRET_KEY": "",  # filled per run: a real, random one
    "ALLOWED_HOSTS": "cdkd.example.com",
    "CDKD_HTTPS": "True",
    "DATABASE_URL": "sqlite:///:memory:",
    "REDIS_URL": "redis://redis.internal:6379/0",  # never reached: check only reads settings
}


def child(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`manage.py ARGS` in a fresh process (settings read anew) with exactly `env` on top
    of PATH: nothing of this test run's environment leaks in."""
    # Production also needs a body-encryption key; a test that is about it passes its own.
    base = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "CDKD_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=60
    )


def setting_in_child(env: dict[str, str], expression: str) -> str:
    result = child(env, "shell", "-c", f"from django.conf import settings; print({expression})")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


# --- DEBUG, SECRET_KEY, CDKD_HTTPS --------------------------------------------------------


def test_it_runs_with_debug_off_unless_asked():
    env = {"SECRET_KEY": secrets.token_urlsafe(50), "DATABASE_URL": "sqlite:///:memory:"}
    assert setting_in_child(env, "settings.DEBUG") == "False"
    assert setting_in_child({**env, "DEBUG": "True"}, "settings.DEBUG") == "True"


def test_it_refuses_to_start_without_a_secret_key_unless_debug_is_on():
    result = child({"DATABASE_URL": "sqlite:///:memory:"}, "check")
    assert result.returncode != 0
    assert "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off" in result.stderr
    # The development key exists only when DEBUG is explicitly on.
    assert setting_in_child({"DEBUG": "True"}, "settings.SECRET_KEY").startswith("dev-only-insecure-key")


def test_it_passes_check_deploy_with_cdkd_https():
    env = {**DEPLOY_ENV, "SECRET_KEY": secrets.token_urlsafe(50)}
    result = child(env, "check", "--deploy", "--fail-level", "WARNING")
    print(result.stdout, result.stderr)  # the report quotes this output
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    values = setting_in_child(
        env,
        "settings.SECURE_SSL_REDIRECT, settings.SECURE_HSTS_SECONDS, settings.SECURE_HSTS_INCLUDE_SUBDOMAINS,"
        " settings.SECURE_HSTS_PRELOAD, settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE,"
        " settings.SECURE_PROXY_SSL_HEADER",
    )
    assert values == "True 31536000 True True True True ('HTTP_X_FORWARDED_PROTO', 'https')"


def test_it_names_each_missing_https_setting_without_cdkd_https():
    env = {**DEPLOY_ENV, "SECRET_KEY": secrets.token_urlsafe(50), "CDKD_HTTPS": "False"}
    result = child(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr, warning


# --- gunicorn + whitenoise ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_serves_the_app_and_its_static_files_from_gunicorn(tmp_path, alice):
    if connection.vendor != "postgresql":
        pytest.skip("the gunicorn process shares the test database only on PostgreSQL")
    from tests.support.webserver import gunicorn_server

    with gunicorn_server(tmp_path / "static") as base:
        login = urllib.request.urlopen(base + "/login/").read().decode()
        assert "Log in" in login
        css = re.search(r'href="(/static/stacks/app\.[0-9a-f]{12}\.css)"', login)
        js = re.search(r'src="(/static/django_htmx/htmx-2\.min\.[0-9a-f]{12}\.js)"', login)
        assert css and js, login
        for url, kind, needle in ((css[1], "text/css", b".topbar"), (js[1], "javascript", b"htmx")):
            response = urllib.request.urlopen(base + url)
            assert response.status == 200
            assert kind in response.headers["Content-Type"]
            assert "immutable" in response.headers["Cache-Control"]
            assert needle in response.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/no-such-page/")
        assert missing.value.code == 404
        page = missing.value.read().decode()
        assert 'class="topbar"' in page and "Back to the stacks" in page
        assert "urlpatterns" not in page and "URLconf" not in page


# --- Content-Security-Policy --------------------------------------------------------------

TEMPLATES = ROOT / "templates"
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\ssrc=)[^>]*>", re.IGNORECASE)
HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
HX_ON = re.compile(r"\shx-on[:\-]", re.IGNORECASE)
STYLE_ELEMENT = re.compile(r"<style[\s>]", re.IGNORECASE)
JS_VALUES = re.compile(r"hx-vals=['\"]\s*js:|hx-vars=", re.IGNORECASE)


def test_it_keeps_every_template_free_of_inline_script_and_handlers():
    offenders = []
    for template in sorted(TEMPLATES.rglob("*.html")):
        text = template.read_text()
        for pattern in (INLINE_SCRIPT, HANDLER, HX_ON, STYLE_ELEMENT, JS_VALUES):
            offenders += [f"{template.relative_to(ROOT)}: {m[0]}" for m in pattern.finditer(text)]
    assert offenders == []


@pytest.mark.django_db
def test_it_sends_a_policy_without_inline_script_or_eval(alice_client):
    response = alice_client.get(reverse("stacks"))
    policy = dict(
        part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";") if part.strip()
    )
    assert policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    page = response.content.decode()
    assert INLINE_SCRIPT.findall(page) == []
    config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", page)
    assert config and '"allowEval": false' in config[1] and '"includeIndicatorStyles": false' in config[1]


# --- login lockout (django-axes) ----------------------------------------------------------


def login(client: Client, password: str, username: str = "alice", **extra):
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


@pytest.mark.django_db
def test_it_refuses_the_right_password_after_six_wrong_ones(client, alice):
    for _ in range(6):
        assert login(client, "guess").status_code in (200, 429)
    response = login(client, "pw")
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed logins" in page and "paused for 15 minutes" in page and 'class="topbar"' in page
    assert "_auth_user_id" not in client.session
    assert client.get(reverse("stacks")).status_code == 302  # still logged out


@pytest.mark.django_db
def test_it_locks_at_the_limit_and_lets_the_right_password_in_before(client, alice, settings):
    for _ in range(4):
        assert login(client, "guess").status_code == 200  # the form again, with its error
    assert login(client, "pw").status_code == 302  # the fifth try, right: in, and the count resets
    client.post(reverse("logout"))
    for _ in range(4):
        assert login(client, "guess").status_code == 200
    assert login(client, "guess").status_code == 429  # the fifth wrong one locks


@pytest.mark.django_db
def test_it_locks_the_username_and_address_pair_only(client, alice, django_user_model):
    django_user_model.objects.create_user("bob2", password="pw2")
    for _ in range(6):
        login(client, "guess")
    assert login(client, "pw").status_code == 429
    assert login(client, "pw2", username="bob2").status_code == 302  # another person, same address
    other = Client(REMOTE_ADDR="198.51.100.7")
    assert login(other, "pw").status_code == 302  # alice herself, from another address


@pytest.mark.django_db
def test_it_ignores_a_forged_forwarded_for_without_a_proxy(client, alice):
    for n in range(6):
        login(client, "guess", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")
    assert login(client, "pw", HTTP_X_FORWARDED_FOR="203.0.113.99").status_code == 429


@pytest.mark.django_db
def test_it_lifts_the_lockout_after_the_cool_off(client, alice):
    for _ in range(6):
        login(client, "guess")
    assert login(client, "pw").status_code == 429
    with time_machine.travel(timezone.now() + timedelta(minutes=16)):
        assert login(client, "pw").status_code == 302


def test_it_takes_the_address_our_outermost_proxy_saw(settings):
    from cdkd_site.auth import client_ip

    request = HttpRequest()
    request.META = {"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 198.51.100.20, 10.0.0.9"}
    settings.CDKD_PROXY_COUNT = 0
    assert client_ip(request) == "10.0.0.5"
    settings.CDKD_PROXY_COUNT = 1
    assert client_ip(request) == "10.0.0.9"
    settings.CDKD_PROXY_COUNT = 2
    assert client_ip(request) == "198.51.100.20"
    settings.CDKD_PROXY_COUNT = 5  # fewer hops than proxies: the header is not ours
    assert client_ip(request) == "10.0.0.5"


@pytest.mark.django_db
def test_it_still_logs_test_clients_in(client, alice):
    assert client.login(username="alice", password="pw")
    assert client.get(reverse("stacks")).status_code == 200


# --- session idle timeout -----------------------------------------------------------------


@pytest.mark.django_db
def test_it_ends_a_session_after_the_idle_time_and_not_before(client, alice, settings):
    settings.SESSION_COOKIE_AGE = 600
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        assert login(client, "pw").status_code == 302
        for _ in range(3):  # 25 minutes in all, never 10 idle: still in
            clock.shift(timedelta(seconds=500))
            assert client.get(reverse("stacks")).status_code == 200
        clock.shift(timedelta(seconds=601))
        response = client.get(reverse("stacks"))
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))


@pytest.mark.django_db
def test_it_writes_the_session_at_most_once_a_minute_while_polled(client, alice, settings):
    settings.SESSION_COOKIE_AGE = 600
    with time_machine.travel(timezone.now(), tick=False) as clock:
        assert login(client, "pw").status_code == 302
        writes = []
        for _ in range(30):  # a page polling every second for half a minute
            clock.shift(timedelta(seconds=1))
            with CaptureQueriesContext(connection) as queries:
                assert client.get(reverse("stacks")).status_code == 200
            writes += [q["sql"] for q in queries if "django_session" in q["sql"] and "UPDATE" in q["sql"]]
        assert writes == []
        clock.shift(timedelta(seconds=31))
        with CaptureQueriesContext(connection) as queries:
            client.get(reverse("stacks"))
        assert [q for q in queries if "django_session" in q["sql"] and "UPDATE" in q["sql"]]


@pytest.mark.django_db
def test_it_keeps_force_login_sessions_quiet_on_the_first_request(alice_client):
    with CaptureQueriesContext(connection) as queries:
        assert alice_client.get(reverse("stacks")).status_code == 200
    assert not [q for q in queries if "django_session" in q["sql"] and "UPDATE" in q["sql"]]


def test_it_reads_the_idle_time_from_the_environment():
    env = {"DEBUG": "True", "CDKD_SESSION_IDLE_SECONDS": "900", "DATABASE_URL": "sqlite:///:memory:"}
    assert setting_in_child(env, "settings.SESSION_COOKIE_AGE") == "900"


# --- 403 / 404 / 500 pages ----------------------------------------------------------------


def denied(request):
    raise PermissionDenied("not yours")


def boom(request):
    raise RuntimeError("kaboom: internal detail")


urlpatterns = [path("test-denied/", denied), path("test-boom/", boom), path("", include("cdkd_site.urls"))]


def assert_app_layout(page: str) -> None:
    assert 'class="topbar"' in page and "stacks/app." in page
    assert "Back to the stacks" in page or "Back to the login page" in page


@pytest.mark.django_db
def test_it_renders_404_in_the_app_layout_without_url_patterns(client, alice_client):
    for who in (client, alice_client):  # anonymous and logged in
        response = who.get("/no-such-page/")
        assert response.status_code == 404
        page = response.content.decode()
        assert_app_layout(page)
        assert "There is nothing here" in page
        assert "URLconf" not in page and "admin/" not in page


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_it_renders_403_in_the_app_layout(alice_client):
    response = alice_client.get("/test-denied/")
    assert response.status_code == 403
    page = response.content.decode()
    assert_app_layout(page)
    assert "You may not do this" in page


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_it_renders_500_in_the_app_layout_without_the_error(alice):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get("/test-boom/")
    assert response.status_code == 500
    page = response.content.decode()
    assert_app_layout(page)
    assert "Something went wrong" in page
    assert "kaboom" not in page and "Traceback" not in page


@pytest.mark.django_db
def test_it_renders_a_csrf_failure_in_the_app_layout(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(reverse("logout"))
    assert response.status_code == 403
    page = response.content.decode()
    assert_app_layout(page)
    assert "This form could not be accepted" in page


@override_settings(DEBUG=False)
def test_it_renders_the_500_page_with_no_request_at_all():
    from django.template.loader import get_template

    page = get_template("500.html").render()
    assert_app_layout(page)
