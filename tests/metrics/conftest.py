"""Fixtures for /healthz and /metrics: a real Redis (the test's REDIS_URL database, emptied
before and after) and RQ workers registered in it by RQ's own code."""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta

import pytest
from django.conf import settings


@pytest.fixture
def redis_db():
    """The test's real Redis database. Skipped on fakeredis: these tests are about what a
    Redis server answers, and a stand-in of it would prove nothing."""
    if not settings.REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
        pytest.skip("needs a Redis server (run with REDIS_URL=redis://..., as scripts/test.sh does)")
    from stacks.health import redis_connection

    connection = redis_connection()
    connection.flushdb()
    yield connection
    connection.flushdb()


@pytest.fixture
def register_worker(redis_db):
    """Registers an RQ worker the way a starting worker does (Worker.register_birth: its
    hash with last_heartbeat, in RQ's worker sets), optionally with an older heartbeat."""
    from rq import Worker
    from rq.utils import now, utcformat

    def register(queues=("default", "sync", "notify"), *, age_seconds: float = 0) -> Worker:
        worker = Worker(list(queues), connection=redis_db, name=f"test-{uuid.uuid4().hex[:8]}")
        worker.register_birth()
        if age_seconds:
            redis_db.hset(worker.key, "last_heartbeat", utcformat(now() - timedelta(seconds=age_seconds)))
        return worker

    return register


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
