"""Start and drive the test OpenID provider (server.py) from a test, in its own process."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.motoserver import free_port

SERVER = Path(__file__).with_name("server.py")
CLIENT_ID = "cdkd-admin"
REDIRECT_URI = "http://testserver/oidc/callback/"


def new_rsa_key(path: Path) -> None:
    """A fresh RS256 signing key for this run (nothing checked in)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


class OidcProvider:
    """django-oauth-toolkit on 127.0.0.1:<free port>; `issuer` is what its tokens say.
    Several instances may share one folder (database and key) with other token lifetimes."""

    def __init__(self, folder: Path, *, id_token_seconds: int = 600, client_secret: str = "") -> None:
        self.folder = folder
        self.id_token_seconds = id_token_seconds
        self.client_secret = client_secret or "test-client-secret-" + os.urandom(8).hex()
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env.update(
            OIDC_PROVIDER_DB=str(self.folder / "provider.sqlite3"),
            OIDC_PROVIDER_KEY=str(self.folder / "rs256.pem"),
            OIDC_PROVIDER_ISSUER=self.issuer,
            OIDC_PROVIDER_ID_TOKEN_SECONDS=str(self.id_token_seconds),
        )
        return env

    def _run(self, *args: str) -> None:
        done = subprocess.run([sys.executable, str(SERVER), *args], env=self._env(), capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"provider {args[0]} failed: {done.stderr[-2000:]}")

    def setup(self) -> OidcProvider:
        """The database, the client and the key (first instance in a folder only)."""
        if not (self.folder / "rs256.pem").exists():
            new_rsa_key(self.folder / "rs256.pem")
        self._run("setup", self.client_secret, REDIRECT_URI)
        return self

    def user(self, name: str, password: str, *groups: str) -> None:
        """Create the person, or set their password and groups (what the next token says)."""
        self._run("user", name, password, *groups)

    def start(self) -> OidcProvider:
        self.port = free_port()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        self._proc = subprocess.Popen(
            [sys.executable, str(SERVER), "serve", str(self.port)],
            env=self._env(),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._log.seek(0)
                raise RuntimeError(f"provider exited: {self._log.read().decode(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.issuer}/.well-known/openid-configuration", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        raise RuntimeError("the test provider did not answer within 30 s")

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
