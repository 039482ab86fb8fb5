"""The demo leaves nothing behind in Redis: when a local Redis answers it uses its own
database, empties it on start, and empties it again on stop (after its worker has stopped).
A REDIS_URL the person gave is never emptied. Against the real Redis, on the tests' database."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import redis
from rq import Queue

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"


def load_demo_script():
    spec = importlib.util.spec_from_file_location("demo_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def test_redis_url() -> str:
    url = os.environ.get("REDIS_URL", "")
    if not url.startswith("redis://"):
        pytest.skip("needs a Redis server (REDIS_URL=redis://...)")
    return url


def test_it_empties_its_own_redis_database_when_it_stops(test_redis_url, monkeypatch):
    script = load_demo_script()
    monkeypatch.setattr(script, "DEMO_REDIS_URL", test_redis_url)  # not the demo's real db 15
    monkeypatch.delenv("REDIS_URL")
    url, note, server = script.choose_redis()
    assert (url, server) == (test_redis_url, None) and "emptied when the demo stops" in note

    conn = redis.Redis.from_url(url)
    Queue("default", connection=conn).enqueue("builtins.print", "left by the demo's web app")
    conn.set("rq:scheduler:sync", "1")
    assert conn.dbsize() > 0

    assert script.release_redis(url) is True
    assert conn.dbsize() == 0


def test_it_leaves_a_redis_the_person_gave_alone(test_redis_url, monkeypatch):
    script = load_demo_script()
    conn = redis.Redis.from_url(test_redis_url)
    conn.set("someone-elses-key", "1")
    try:
        assert script.release_redis(test_redis_url) is False  # DEMO_REDIS_URL is db 15
        assert conn.get("someone-elses-key") == b"1"
    finally:
        conn.delete("someone-elses-key")
