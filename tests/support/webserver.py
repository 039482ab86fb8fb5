"""The web app as production runs it: `collectstatic`, then gunicorn with DEBUG off, in a
child process that shares this test's database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.workers import ROOT, database_url, kill_tree


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gunicorn_server(static_root: Path, **env: str) -> Iterator[str]:
    """Collect the static files into `static_root`, start `gunicorn cdkd_site.wsgi` and
    yield its base URL; the server is killed on exit."""
    from django.conf import settings

    environment = {
        **os.environ,
        "DEBUG": "False",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "STATIC_ROOT": str(static_root),
        "CDKD_SYNC_INTERVAL": "0",
        **env,
    }
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=environment,
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = static_root.parent / "gunicorn.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "cdkd_site.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
            cwd=ROOT,
            env=environment,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if server.poll() is not None:
                    raise AssertionError(f"gunicorn exited with {server.returncode}: {log.read_text()[-2000:]}")
                try:
                    urllib.request.urlopen(base + "/login/", timeout=2).close()
                    break
                except urllib.error.HTTPError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise AssertionError("gunicorn did not answer within 30 s") from None
                    time.sleep(0.2)
            yield base
        finally:
            if server.poll() is None:
                kill_tree(server.pid)
            server.wait(timeout=10)
