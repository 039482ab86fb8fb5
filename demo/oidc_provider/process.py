"""Start and drive the loopback OpenID provider (server.py) in its own process: from a
test (tests/sso, tests/browser) or from the demo (scripts/demo.py)."""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

SERVER = Path(__file__).with_name("server.py")
CLIENT_ID = "cdkd-admin"
REDIRECT_URI = "http://testserver/oidc/callback/"  # Django's test client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_rsa_key(path: Path) -> None:
    """A fresh RS256 signing key for this run (nothing checked in)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


class OidcProvider:
    """django-oauth-toolkit on 127.0.0.1:<port>; `issuer` is what its tokens say. Several
    instances may share one folder (database and key) with other token lifetimes.
    `fast_hash`: MD5 password hashes, for tests that make many people (never the demo)."""

    def __init__(
        self,
        folder: Path,
        *,
        id_token_seconds: int = 600,
        client_secret: str = "",
        port: int = 0,
        fast_hash: bool = True,
    ) -> None:
        self.folder = folder
        self.id_token_seconds = id_token_seconds
        self.client_secret = client_secret or "test-client-secret-" + os.urandom(8).hex()
        self.port = port
        self.fast_hash = fast_hash
        self.proc: subprocess.Popen | None = None
        self.log_file = None  # the server's stderr

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
            OIDC_PROVIDER_FAST_HASH="1" if self.fast_hash else "0",
        )
        return env

    def _run(self, *args: str) -> None:
        done = subprocess.run([sys.executable, str(SERVER), *args], env=self._env(), capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"provider {args[0]} failed: {done.stderr[-2000:]}")

    def setup(self, *redirect_uris: str) -> OidcProvider:
        """The database, the client (its secret and the redirect URIs it may send people
        back to: the test client's unless named) and the key (made once per folder)."""
        if not (self.folder / "rs256.pem").exists():
            new_rsa_key(self.folder / "rs256.pem")
        self._run("setup", self.client_secret, " ".join(redirect_uris or (REDIRECT_URI,)))
        return self

    def user(self, name: str, password: str, *groups: str) -> None:
        """Create the person, or set their password and groups (what the next token says)."""
        self._run("user", name, password, *groups)

    def start(self, *, log: Path | None = None) -> OidcProvider:
        """Serve on the port given (else a free one). `log`: the server's output appended
        there (else kept in a temporary file for the start-up error)."""
        self.port = self.port or free_port()
        # The file lives as long as the server.
        self.log_file = log.open("a+b") if log else tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "serve", str(self.port)],
            env=self._env(),
            stdout=subprocess.DEVNULL,
            stderr=self.log_file,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the demo's terminal reaches only the demo, which stops it
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"provider exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.issuer}/.well-known/openid-configuration", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        raise RuntimeError("the OpenID provider did not answer within 30 s")

    def log_tail(self) -> str:
        if self.log_file is None or self.log_file.closed:
            return ""
        self.log_file.flush()
        self.log_file.seek(0)
        return self.log_file.read().decode(errors="replace")[-2000:]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log_file is not None and not self.log_file.closed:
            self.log_file.close()
