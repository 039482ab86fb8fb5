"""What /healthz checks: the database, Redis and the RQ workers' heartbeats.

Each check answers ok or a fixed sentence, never an exception's text: that may name a host
or carry a URL with its password, and /healthz answers anyone. The exception goes to the
log instead (its class and message, no traceback).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connections

logger = logging.getLogger(__name__)


@dataclass
class Check:
    ok: bool
    detail: str = ""
    extra: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        out = {"ok": self.ok, **self.extra}
        if self.detail:
            out["detail"] = self.detail
        return out


def redis_connection():
    """A client for REDIS_URL that gives up quickly (a health check or a scrape must not
    hang on a dead Redis); with fakeredis:// the queues' in-memory one."""
    if settings.REDIS_URL.startswith("fakeredis://"):
        from cdkd_site.queues import get_connection

        return get_connection()
    return _client(settings.REDIS_URL, settings.CDKD_HEALTH_TIMEOUT_SECONDS)


@functools.lru_cache(maxsize=4)
def _client(url: str, timeout: int):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # No retries: redis-py's default retries a refused connection three times with backoff.
    no_retry = Retry(NoBackoff(), 0)
    return redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=no_retry)


def _failed(what: str, exc: Exception) -> None:
    logger.warning("health: %s check failed: %s: %s", what, type(exc).__name__, exc)


def check_database() -> Check:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any failure is "down"; the reason goes to the log only
        _failed("database", exc)
        return Check(False, "the database did not answer")
    return Check(True)


def check_redis(connection) -> Check:
    try:
        connection.ping()
    except Exception as exc:
        _failed("redis", exc)
        return Check(False, "Redis did not answer")
    return Check(True)


def live_workers(connection) -> dict[str, int]:
    """How many workers listen on each configured queue with an RQ heartbeat at most
    CDKD_HEALTH_WORKER_SECONDS old. RQ's own registry: each worker's hash holds its last
    heartbeat and expires when the worker stops renewing it; a SIGKILLed worker's hash
    lingers until then, so its heartbeat's age is what tells."""
    from rq import Worker
    from rq.utils import now

    cutoff = now() - timedelta(seconds=settings.CDKD_HEALTH_WORKER_SECONDS)
    counts = dict.fromkeys(settings.RQ_QUEUES, 0)
    for worker in Worker.all(connection=connection):
        if worker.last_heartbeat is None or worker.last_heartbeat < cutoff:
            continue
        for name in worker.queue_names():
            if name in counts:
                counts[name] += 1
    return counts


def check_workers(connection) -> Check:
    try:
        counts = live_workers(connection)
    except Exception as exc:
        _failed("worker", exc)
        return Check(False, "the worker registry in Redis could not be read")
    missing = [name for name, n in counts.items() if n == 0]
    extra = {"workers": counts}
    if missing:
        seconds = settings.CDKD_HEALTH_WORKER_SECONDS
        return Check(False, f"no worker with a heartbeat in the last {seconds} s on: {', '.join(missing)}", extra)
    return Check(True, extra=extra)


def run_checks() -> tuple[bool, dict]:
    """(healthy, the JSON body). Redis down means no worker can be seen either."""
    database = check_database()
    connection = redis_connection()
    redis = check_redis(connection)
    workers = check_workers(connection) if redis.ok else Check(False, "not checked: Redis did not answer")
    checks = {"database": database, "redis": redis, "worker": workers}
    healthy = all(c.ok for c in checks.values())
    return healthy, {"status": "ok" if healthy else "failing", "checks": {k: c.as_json() for k, c in checks.items()}}
