"""stacks.crypto and the CDKD_ENCRYPTION_KEYS setting, without a database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.db import connection

from stacks import crypto
from stacks.models import Lock, Stack

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
BODY = b'{"version": 11, "resources": {"Db": {"properties": {"Password": "Paym3nts-s3cret"}}}}'
ROOT = Path(__file__).resolve().parents[2]


def test_it_encrypts_with_the_first_key_and_decrypts_with_any(settings):
    settings.CDKD_ENCRYPTION_KEYS = [KEY_A]
    token = crypto.encrypt(BODY)
    assert BODY not in token and b"Paym3nts" not in token
    assert Fernet(KEY_A).decrypt(token) == BODY
    settings.CDKD_ENCRYPTION_KEYS = [KEY_B, KEY_A]
    assert crypto.decrypt(token) == BODY
    assert Fernet(KEY_B).decrypt(crypto.encrypt(BODY)) == BODY


def test_it_refuses_a_wrong_key_with_a_clear_error(settings):
    settings.CDKD_ENCRYPTION_KEYS = [KEY_A]
    token = crypto.encrypt(BODY)
    settings.CDKD_ENCRYPTION_KEYS = [KEY_B]
    with pytest.raises(crypto.EncryptionKeyError, match="cannot be decrypted with any key of CDKD_ENCRYPTION_KEYS"):
        crypto.decrypt(token)


def test_it_refuses_an_altered_token(settings):
    settings.CDKD_ENCRYPTION_KEYS = [KEY_A]
    token = bytearray(crypto.encrypt(BODY))
    token[40] = ord("A") if token[40] != ord("A") else ord("B")
    with pytest.raises(crypto.EncryptionKeyError):
        crypto.decrypt(bytes(token))


def test_the_field_stores_a_token_and_returns_the_bytes(settings):
    settings.CDKD_ENCRYPTION_KEYS = [KEY_A]
    field = Stack._meta.get_field("body")
    assert isinstance(field, crypto.EncryptedBinaryField)
    assert isinstance(Lock._meta.get_field("body"), crypto.EncryptedBinaryField)
    stored = field.get_prep_value(memoryview(BODY))
    assert BODY not in stored and Fernet(KEY_A).decrypt(stored) == BODY
    assert field.from_db_value(memoryview(stored), None, connection) == BODY
    assert field.get_db_prep_save(None, connection) is None
    assert field.from_db_value(None, None, connection) is None
    with pytest.raises(TypeError):
        field.get_prep_value("text is not bytes")
    # An empty body is a body too: still a token, still b"" back.
    empty = field.get_prep_value(b"")
    assert empty and field.from_db_value(empty, None, connection) == b""


def test_the_field_refuses_lookups_that_could_never_match():
    from django.core.exceptions import FieldError

    with pytest.raises(FieldError):
        str(Stack.objects.filter(body=BODY).query)
    assert "IS NULL" in str(Stack.objects.filter(body__isnull=True).query)


def settings_import(**env: str) -> subprocess.CompletedProcess:
    """Import the settings in a fresh interpreter (not under pytest) with `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CDKD_ENCRYPTION", "DEBUG", "SECRET_KEY"))}
    return subprocess.run(
        [sys.executable, "-c", "import cdkd_site.settings as s; print(len(s.CDKD_ENCRYPTION_KEYS))"],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_refuses_to_start_without_a_key_when_debug_is_off():
    result = settings_import(DEBUG="False", SECRET_KEY="a-real-secret-key-for-this-test")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "CDKD_ENCRYPTION_KEYS (or CDKD_ENCRYPTION_KEYS_FILE) must be set when DEBUG is off" in result.stderr


def test_it_derives_a_development_key_when_debug_is_on():
    on = settings_import(DEBUG="True", SECRET_KEY="one")
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip() == "1"


def test_it_reads_the_keys_from_the_environment_or_a_file(tmp_path):
    listed = settings_import(DEBUG="False", SECRET_KEY="x", CDKD_ENCRYPTION_KEYS=f"{KEY_B}, {KEY_A}")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "2"
    path = tmp_path / "keys"
    path.write_text(f"{KEY_A}\n")
    filed = settings_import(DEBUG="False", SECRET_KEY="x", CDKD_ENCRYPTION_KEYS_FILE=str(path))
    assert filed.returncode == 0, filed.stderr
    assert filed.stdout.strip() == "1"


def test_it_names_a_malformed_key_without_printing_it():
    bad = "not-a-fernet-key-but-maybe-a-password"
    result = settings_import(DEBUG="False", SECRET_KEY="x", CDKD_ENCRYPTION_KEYS=f"{KEY_A},{bad}")
    assert result.returncode != 0
    assert "CDKD_ENCRYPTION_KEYS: key 2 of the list is not a Fernet key" in result.stderr
    assert bad not in result.stderr and KEY_A not in result.stderr


def test_the_development_key_follows_secret_key(settings):
    """Two checkouts with different SECRET_KEYs do not share a body key."""
    import base64
    import hashlib

    def derived(secret: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(b"cdkd-body-encryption:" + secret.encode()).digest()).decode()

    if os.environ.get("CDKD_ENCRYPTION_KEYS") or os.environ.get("CDKD_ENCRYPTION_KEYS_FILE"):
        pytest.skip("the run sets its own keys")
    assert [derived(settings.SECRET_KEY)] == settings.CDKD_ENCRYPTION_KEYS
    assert derived("one") != derived("two")
