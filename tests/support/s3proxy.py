"""A loopback HTTP proxy in front of the moto server, for tests and benchmarks.

It forwards every request as it came (method, path, query, headers, body) and on the way:
- sleeps `latency` seconds per request, to make round trips cost what they cost on AWS;
- counts requests by S3 (or STS) operation, classified from method, path and query;
- answers requests for denied buckets (or denied operations) with S3's own 403
  AccessDenied XML, and can fail a bucket with any status (e.g. 503 SlowDown);
- optionally (`serialize`) forwards one request at a time, because moto's conditional
  writes are check-then-write without a lock and race under concurrency;
- optionally (`add_hook`, `drop_response`, `fail_request`) answers chosen requests with an
  error, or forwards them and then drops the response (the write lands, the client sees a
  broken connection: a lost response), or forwards them and then answers an error (the
  write lands, the client sees e.g. a 500), for one API and optionally one key, from the
  Nth matching request on.

boto3 addresses buckets path-style when the endpoint is an IP address
(`http://127.0.0.1:port/bucket/key`), which is what makes the bucket visible here.
Each client connection gets its own thread (and upstream connection), and client
connections are kept alive, so 64+ concurrent clients work.
"""

from __future__ import annotations

import http.client
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

# Hop-by-hop headers: they describe one connection, not the message.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "expect"}
)

BUCKET_SUBRESOURCES = {
    "location": "BucketLocation",
    "versioning": "BucketVersioning",
    "policy": "BucketPolicy",
    "lifecycle": "BucketLifecycleConfiguration",
    "encryption": "BucketEncryption",
    "tagging": "BucketTagging",
    "object-lock": "ObjectLockConfiguration",
    "replication": "BucketReplication",
    "acl": "BucketAcl",
    "cors": "BucketCors",
}

OBJECT_SUBRESOURCES = {"tagging": "ObjectTagging", "retention": "ObjectRetention", "legal-hold": "ObjectLegalHold"}

DROP = "drop"  # a hook's answer: forward the request, then close without a response


class Committed(tuple):
    """A hook's answer: forward the request (it is applied upstream), then reply with this
    (status, code) S3 error instead of the real answer."""


# A hook sees (api, method, path, headers) and answers None (forward as usual), DROP,
# (status, code) for an S3 error reply without forwarding, or Committed((status, code)).
# Headers are keyed in lower case; `path` is `/bucket/key`, unquoted.
Hook = Callable[[str, str, str, Mapping[str, str]], "str | tuple[int, str] | None"]


def _matcher(api: str, key: str | None, nth: int, count: int) -> Callable[[str, str], bool]:
    """True for the `nth`..`nth+count-1` requests of `api` (on `key`, when given; a `key`
    ending in `*` is a prefix)."""
    seen = [0]

    def on_key(path: str) -> bool:
        got = path.lstrip("/").partition("/")[2]
        if key is None:
            return True
        return got.startswith(key[:-1]) if key.endswith("*") else got == key

    def matches(got_api: str, path: str) -> bool:
        if got_api != api or not on_key(path):
            return False
        seen[0] += 1
        return nth <= seen[0] < nth + count

    return matches


def classify(method: str, path: str, query: str, body: bytes = b"", headers: dict[str, str] | None = None) -> str:
    """The AWS API name of a path-style S3 request, or of an STS (query protocol) call."""
    params = parse_qs(query, keep_blank_values=True)
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    if not bucket:
        if method == "POST":  # STS and other query-protocol services post a form
            form = parse_qs(body.decode(errors="replace")) if body else {}
            action = (form.get("Action") or params.get("Action") or ["Unknown"])[0]
            return action
        return "ListBuckets" if method == "GET" else f"{method} /"
    if not key:
        if method == "HEAD":
            return "HeadBucket"
        if method == "GET":
            if params.get("list-type") == ["2"]:
                return "ListObjectsV2"
            if "versions" in params:
                return "ListObjectVersions"
            if "uploads" in params:
                return "ListMultipartUploads"
            for name, api in BUCKET_SUBRESOURCES.items():
                if name in params:
                    return f"Get{api}"
            return "ListObjects"
        if method == "POST" and "delete" in params:
            return "DeleteObjects"
        for name, api in BUCKET_SUBRESOURCES.items():
            if name in params:
                return {"PUT": "Put", "DELETE": "Delete"}.get(method, method) + api
        return {"PUT": "CreateBucket", "DELETE": "DeleteBucket"}.get(method, f"{method} bucket")
    if "uploadId" in params:
        return {
            "PUT": "UploadPart",
            "POST": "CompleteMultipartUpload",
            "DELETE": "AbortMultipartUpload",
            "GET": "ListParts",
        }.get(method, f"{method} upload")
    if method == "POST" and "uploads" in params:
        return "CreateMultipartUpload"
    for name, api in OBJECT_SUBRESOURCES.items():
        if name in params:
            return {"PUT": "Put", "DELETE": "Delete", "GET": "Get"}.get(method, method) + api
    if method == "PUT":
        return "CopyObject" if "x-amz-copy-source" in headers else "PutObject"
    return {"GET": "GetObject", "HEAD": "HeadObject", "DELETE": "DeleteObject"}.get(method, f"{method} object")


class S3Proxy:
    """`start()` serves on a free loopback port (`url`); `stop()` shuts it down.

    Knobs (all safe to change while it runs): `latency` seconds per request; `deny(bucket)`
    and `deny_operation(api)` for 403 AccessDenied; `fail(bucket, status, code)` for other
    errors; `add_hook(fn)` for a targeted answer per request (see `Hook`) and
    `drop_response(api, count)` for lost responses; `clear_rules()` undoes them all.
    `serialize = True` forwards one request at a time (off by default; not a rule, so
    `clear_rules()` leaves it). `counts` (also `requests`) is a Counter of requests by API
    name, `reset_counts()` empties it.
    """

    def __init__(
        self, upstream: str, *, latency: float = 0.0, host: str = "127.0.0.1", serialize: bool = False
    ) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.latency = latency
        self.host = host
        self.counts: Counter[str] = Counter()
        self.denied_buckets: set[str] = set()
        self.denied_operations: set[str] = set()
        self.failing_buckets: dict[str, tuple[int, str]] = {}
        self.serialize = serialize
        self.hooks: list[Hook] = []
        self._serial = threading.Lock()  # held around each upstream exchange when serializing
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def requests(self) -> Counter[str]:
        return self.counts

    @property
    def url(self) -> str:
        assert self._server is not None, "proxy not started"
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> S3Proxy:
        handler = type("Handler", (_Handler,), {"proxy": self})
        self._server = _Server((self.host, 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- knobs ---------------------------------------------------------------------------

    def deny(self, bucket: str) -> None:
        with self._lock:
            self.denied_buckets.add(bucket)

    def allow(self, bucket: str) -> None:
        with self._lock:
            self.denied_buckets.discard(bucket)
            self.failing_buckets.pop(bucket, None)

    def deny_operation(self, api: str) -> None:
        """Answer every `api` call (e.g. "AssumeRole", "PutObject") with 403 AccessDenied."""
        with self._lock:
            self.denied_operations.add(api)

    def fail(self, bucket: str, status: int = 503, code: str = "SlowDown") -> None:
        with self._lock:
            self.failing_buckets[bucket] = (status, code)

    def add_hook(self, hook: Hook) -> None:
        """Ask `hook` about every later request (first non-None answer wins)."""
        with self._lock:
            self.hooks.append(hook)

    def drop_response(self, api: str, count: int = 1, *, key: str | None = None, nth: int = 1) -> None:
        """Forward `count` `api` requests (on `key` when given; from the `nth` such request
        on), then drop their responses: the client sees the connection close, the request
        has been applied upstream (commit, then lose the answer)."""
        matches = _matcher(api, key, nth, count)

        def hook(seen: str, method: str, path: str, headers: Mapping[str, str]) -> str | None:
            return DROP if matches(seen, path) else None

        self.add_hook(hook)

    def fail_request(
        self,
        api: str,
        status: int = 503,
        code: str = "SlowDown",
        *,
        key: str | None = None,
        nth: int = 1,
        count: int = 1,
        commit: bool = False,
    ) -> None:
        """Answer `count` `api` requests (on `key` when given; from the `nth` on) with an S3
        error: not forwarded (S3 refused it, e.g. 503 SlowDown), or with `commit` forwarded
        first (applied upstream, then e.g. a 500 InternalError)."""
        matches = _matcher(api, key, nth, count)
        answer: tuple[int, str] = Committed((status, code)) if commit else (status, code)

        def hook(seen: str, method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
            return answer if matches(seen, path) else None

        self.add_hook(hook)

    def clear_rules(self) -> None:
        with self._lock:
            self.denied_buckets.clear()
            self.denied_operations.clear()
            self.failing_buckets.clear()
            self.hooks.clear()

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    # -- used by the handler -------------------------------------------------------------

    def _record(self, api: str, bucket: str) -> tuple[int, str] | None:
        with self._lock:
            self.counts[api] += 1
            if bucket in self.denied_buckets or api in self.denied_operations:
                return (403, "AccessDenied")
            return self.failing_buckets.get(bucket)

    def _hook_answer(
        self, api: str, method: str, path: str, headers: Mapping[str, str]
    ) -> str | tuple[int, str] | None:
        with self._lock:  # hooks may keep counters: one request at a time asks them
            for hook in self.hooks:
                answer = hook(api, method, path, headers)
                if answer is not None:
                    return answer
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog: benchmarks open dozens of connections at once
    allow_reuse_address = True


class _Handler(BaseHTTPRequestHandler):
    proxy: S3Proxy
    protocol_version = "HTTP/1.1"  # keep client connections alive
    # Headers and body go out in two writes; with Nagle on, the second waits for the
    # client's delayed ACK (40 ms on Linux) and every request would look that much slower.
    disable_nagle_algorithm = True
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def finish(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None
        super().finish()

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        body = self._read_body()
        parts = urlsplit(self.path)
        api = classify(self.command, parts.path, parts.query, body, dict(self.headers.items()))
        bucket = unquote(parts.path).lstrip("/").partition("/")[0]
        rule = self.proxy._record(api, bucket)
        answer = None
        if rule is None and self.proxy.hooks:
            lowered = {k.lower(): v for k, v in self.headers.items()}
            answer = self.proxy._hook_answer(api, self.command, unquote(parts.path), lowered)
            if isinstance(answer, tuple) and not isinstance(answer, Committed):
                rule = answer
        if self.proxy.latency:
            time.sleep(self.proxy.latency)
        if rule is not None:
            self._send_error(api, bucket, *rule)
            return
        if self.proxy.serialize:
            with self.proxy._serial:
                status, reason, headers, payload = self._forward(body)
        else:
            status, reason, headers, payload = self._forward(body)
        if answer == DROP:
            # Applied upstream, never answered: the client's view of a lost response.
            self.close_connection = True
            return
        if isinstance(answer, Committed):
            self._send_error(api, bucket, *answer)  # applied upstream, answered as failed
            return
        self.send_response_only(status, reason)
        for name, value in headers:
            if name.lower() not in HOP_BY_HOP and not (name.lower() == "content-length" and self.command != "HEAD"):
                self.send_header(name, value)
        if self.command != "HEAD" and status not in (204, 304) and status >= 200:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]
        if body or self.command in ("PUT", "POST"):
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(body))))
        for attempt in range(2):
            if self._upstream is None:
                proxy = self.proxy
                self._upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
            conn = self._upstream
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    conn.putheader(name, value)
                conn.endheaders(body or None)
                response = conn.getresponse()
                payload = response.read()
                if response.will_close:
                    conn.close()
                    self._upstream = None
                return response.status, response.reason, response.getheaders(), payload
            except (http.client.HTTPException, ConnectionError, OSError):
                # A kept-alive upstream connection may have been closed under us: retry once.
                conn.close()
                self._upstream = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _send_error(self, api: str, bucket: str, status: int, code: str) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        messages = {
            "AccessDenied": "Access Denied",
            "SlowDown": "Please reduce your request rate.",
            "InternalError": "We encountered an internal error. Please try again.",
        }
        message = messages.get(code, code)
        if bucket:
            payload = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message>"
                f"<RequestId>{request_id}</RequestId><HostId>s3proxy</HostId></Error>"
            ).encode()
        else:  # query-protocol services (STS) wrap the error differently
            payload = (
                '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                f"<Error><Type>Sender</Type><Code>{code}</Code><Message>{message} (s3proxy)</Message></Error>"
                f"<RequestId>{request_id}</RequestId></ErrorResponse>"
            ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", request_id)
        if self.command == "HEAD":
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle
