"""The demo's webhook receiver: `python demo/receiver.py --port N` (scripts/demo.sh starts it).

It takes any POST, checks its `X-Cdkd-Signature` with the secret in CDKD_DEMO_WEBHOOK_SECRET
(the scheme the README documents), keeps the newest 200 in memory, and lists them at its
root URL (newest first; `/payloads.json` for the same as JSON). Standard library only: it
is what a team's own receiver could start from.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import html
import json
import os
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1024 * 1024
KEEP = 200
SECRET = os.environ.get("CDKD_DEMO_WEBHOOK_SECRET", "").encode()

received: deque[dict] = deque(maxlen=KEEP)
lock = threading.Lock()


def verify(secret: bytes, header: str, body: bytes, tolerance: int = 300) -> bool:
    """The README's snippet: HMAC-SHA256 over f"{t}." + body, compared in constant time."""
    try:
        parts = dict(p.strip().split("=", 1) for p in header.split(","))
        expected = hmac.new(secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
        fresh = abs(time.time() - int(parts["t"])) <= tolerance
    except (KeyError, ValueError):
        return False
    return fresh and hmac.compare_digest(expected, parts.get("v1", ""))


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>cdkd demo webhook receiver</title>
<meta http-equiv="refresh" content="5">
<style>body{{font:14px system-ui,sans-serif;margin:2em}}pre{{background:#f4f4f4;padding:.6em;overflow:auto}}
.ok{{color:#060}}.bad{{color:#a00}}</style></head><body>
<h1>Webhook receiver</h1><p>{count} payload(s) received (newest first; refreshes every 5 s).</p>{items}</body></html>"""


class Handler(BaseHTTPRequestHandler):
    server_version = "cdkd-demo-receiver"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.send_error(413, "too large")
            return
        body = self.rfile.read(length)
        signed = verify(SECRET, self.headers.get("X-Cdkd-Signature", ""), body) if SECRET else None
        try:
            document = json.loads(body)
        except ValueError:
            document = body.decode("utf-8", "replace")
        with lock:
            received.appendleft(
                {
                    "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "path": self.path,
                    "event": self.headers.get("X-Cdkd-Event", ""),
                    "delivery": self.headers.get("X-Cdkd-Delivery", ""),
                    "attempt": self.headers.get("X-Cdkd-Attempt", ""),
                    "signature_valid": signed,
                    "body": document,
                }
            )
        self._send(200, b"ok", "text/plain")

    def do_GET(self) -> None:  # noqa: N802
        with lock:
            items = list(received)
        if self.path.startswith("/payloads.json"):
            self._send(200, json.dumps(items, indent=2).encode(), "application/json")
            return
        rows = []
        for item in items:
            verdict = {True: '<b class="ok">signature valid</b>', False: '<b class="bad">signature INVALID</b>'}.get(
                item["signature_valid"], "signature not checked"
            )
            rows.append(
                f"<h3>{html.escape(item['at'])} · {html.escape(item['event'])} · {html.escape(item['path'])}</h3>"
                f"<p>{verdict} · payload {html.escape(item['delivery'])} · attempt {html.escape(item['attempt'])}</p>"
                f"<pre>{html.escape(json.dumps(item['body'], indent=2, ensure_ascii=False))}</pre>"
            )
        page = PAGE.format(count=len(items), items="".join(rows) or "<p>Nothing yet.</p>")
        self._send(200, page.encode(), "text/html; charset=utf-8")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's name)
        print(f"{self.address_string()} {format % args}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="The cdkd demo's webhook receiver.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    print(f"receiving webhooks at http://{args.host}:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
