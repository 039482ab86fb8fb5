from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection


@pytest.fixture
def shared_queue(queue):
    """The operations queue, when a worker PROCESS can share it and the database with the test."""
    if connection.vendor != "postgresql" or not settings.REDIS_URL.startswith("redis://"):
        pytest.skip("needs PostgreSQL and a Redis server shared with a worker process (run scripts/test.sh)")
    return queue
