"""The notification tests' real parts: an HTTP receiver on loopback (http.server in a
thread) that records what it is sent, the notify queue on the test Redis, and RQ's
SimpleWorker to run its jobs in this process."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rq import SimpleWorker

from cdkd_site.queues import get_queue


def verify(secret: bytes, header: str, body: bytes, tolerance: int = 300) -> bool:
    """The README's verification snippet, copied as a receiver would: not the app's code."""
    parts = dict(p.strip().split("=", 1) for p in header.split(","))
    expected = hmac.new(secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(parts["t"])) <= tolerance
    return fresh and hmac.compare_digest(expected, parts.get("v1", ""))


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    fail_first: int = 0  # answer 500 to this many requests first
    status: int = 200  # then this
    location: str = ""  # sent with a 3xx

    @property
    def bodies(self) -> list[bytes]:
        return [r.body for r in self.requests]


@pytest.fixture
def receiver():
    state: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            rec: Receiver = state["receiver"]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            rec.requests.append(Received(self.path, {k: v for k, v in self.headers.items()}, body))
            status = 500 if len(rec.requests) <= rec.fail_first else rec.status
            self.send_response(status)
            if rec.location:
                self.send_header("Location", rec.location)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["receiver"] = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook")
    thread = threading.Thread(target=server.serve_forever, name="test-receiver", daemon=True)
    thread.start()
    yield state["receiver"]
    server.shutdown()
    server.server_close()


@pytest.fixture
def notify_queue(settings):
    """The notifications queue, emptied before and after; retries without waiting."""
    settings.CDKD_WEBHOOK_BACKOFF_SECONDS = 0
    queue = get_queue("notify")
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


def work(*queues) -> None:
    SimpleWorker(list(queues), connection=queues[0].connection).work(burst=True)
