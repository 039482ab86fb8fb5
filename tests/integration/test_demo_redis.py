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


WRITER = (
    "import signal, sys, time, redis\n"
    "conn = redis.Redis.from_url(sys.argv[1])\n"
    "stop = []\n"
    "signal.signal(signal.SIGTERM, lambda *a: stop.append(1))\n"
    "conn.set('demo:worker:ready', '1')\n"
    "while not stop:\n"
    "    conn.rpush('rq:queue:default', 'job')\n"
    "    time.sleep(0.01)\n"
    "conn.set('rq:worker:last-words', 'finished its job')  # as an RQ worker does on SIGTERM\n"
)


def test_it_stops_its_children_before_emptying_redis_so_nothing_is_left(test_redis_url, monkeypatch, tmp_path):
    """The stop path main() runs: a child still writing to Redis (as the worker finishing
    its job does) is stopped first, then the database is emptied: it ends empty."""
    script = load_demo_script()
    monkeypatch.setattr(script, "DEMO_REDIS_URL", test_redis_url)
    conn = redis.Redis.from_url(test_redis_url)
    conn.flushdb()
    children = script.Children()
    children.start("worker", [script.PY, "-c", WRITER, test_redis_url], tmp_path / "worker.log", dict(os.environ))
    proc = children.procs[0][1]
    while not conn.exists("demo:worker:ready"):  # the child is writing (no timing asserted)
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()
    script.shutdown(children, test_redis_url, None)
    assert children.procs == []
    assert conn.dbsize() == 0


def test_it_takes_the_port_it_is_given(monkeypatch):
    """`scripts/demo.sh --port N` hands its arguments to demo.py, which serves on N when N is free."""
    import socket

    script = load_demo_script()
    assert script.parse_args(["--port", "8347"]).port == 8347
    assert script.parse_args([]).port == 8000
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert script.pick_port(free) == free
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert script.pick_port(taken) != taken  # busy: another is picked, as the help says
    sh = (SCRIPT.parent / "demo.sh").read_text()
    assert '.venv/bin/python scripts/demo.py "$@"' in sh  # its arguments, --port included, reach demo.py
