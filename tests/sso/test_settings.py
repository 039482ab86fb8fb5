"""The single sign-on settings as the environment gives them (a fresh interpreter each)."""

from __future__ import annotations

import os
import subprocess
import sys

PRINT = (
    "from django.conf import settings as s; "
    "print(s.CDKD_OIDC_ENABLED, s.OIDC_RP_CLIENT_SECRET == 'from-the-file', "
    "s.CDKD_LOCAL_LOGIN, s.AUTHENTICATION_BACKENDS)"
)


def run(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CDKD_OIDC") and k != "CDKD_LOCAL_LOGIN"}
    clean.update(DEBUG="True", DJANGO_SETTINGS_MODULE="cdkd_site.settings", **env)
    return subprocess.run([sys.executable, "-c", PRINT], env=clean, capture_output=True, text=True)


def test_it_reads_the_client_secret_from_a_file_and_switches_passwords_off(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-the-file\n")
    done = run(
        CDKD_OIDC_ISSUER="https://idp.example.test",
        CDKD_OIDC_CLIENT_ID="cdkd",
        CDKD_OIDC_CLIENT_SECRET_FILE=str(secret),
        CDKD_LOCAL_LOGIN="False",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True True False ['stacks.sso.SsoBackend']"


def test_it_keeps_passwords_and_axes_when_sso_is_off():
    done = run()
    assert done.returncode == 0, done.stderr
    assert "False False True ['cdkd_site.auth.LoginThrottleBackend'" in done.stdout


def test_it_refuses_to_start_with_a_half_setup():
    assert "needs both CDKD_OIDC_ISSUER and CDKD_OIDC_CLIENT_ID" in run(CDKD_OIDC_ISSUER="https://x").stderr
    assert "CDKD_LOCAL_LOGIN=False needs single sign-on" in run(CDKD_LOCAL_LOGIN="False").stderr
    missing = run(CDKD_OIDC_ISSUER="https://x", CDKD_OIDC_CLIENT_ID="c", CDKD_OIDC_CLIENT_SECRET_FILE="/nonexistent")
    assert missing.returncode != 0 and "CDKD_OIDC_CLIENT_SECRET_FILE='/nonexistent' cannot be read" in missing.stderr
