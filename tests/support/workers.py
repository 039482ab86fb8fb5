"""Helpers for tests that run a real worker process beside the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The test database, as a URL a second process can use."""
    s = connection.settings_dict
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def wait_for(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (RQ's work-horse runs in its own session)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            children = (task / "children").read_text().split() if (task / "children").exists() else []
            todo.extend(int(c) for c in children)
    for victim in pids:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def worker_process(endpoint: str, **env: str) -> Iterator[subprocess.Popen]:
    """A real `rqworker` process on the default queue, sharing this test's database and
    Redis and reaching AWS through `endpoint`; SIGKILLed (with its work-horse) on exit
    if it is still there. Locks get a 4 s TTL so a killed run's lock lapses quickly."""
    from django.conf import settings

    environment = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "AWS_ENDPOINT_URL": endpoint,
        "CDKD_LOCK_TTL_SECONDS": "4",
        "CDKD_SYNC_INTERVAL": "0",
        **env,
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "rqworker", "default", "--burst"],
        cwd=ROOT,
        env=environment,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield worker
    finally:
        if worker.poll() is None:
            kill_tree(worker.pid)
        worker.wait(timeout=10)
