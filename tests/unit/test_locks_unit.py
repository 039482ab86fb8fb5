"""engine.locks without S3: reading and describing locks, messages, and the StackLock
decisions against an in-memory bucket with S3's conditional semantics."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from engine import locks
from engine.errors import AccessDenied, EngineError, NotFound, PreconditionFailed
from engine.locks import LockContention, LockView, StackLock, default_renew_interval_ms, display_safe
from engine.schema import parse_lock

KEY = "cdkd/app/us-east-1/lock.json"
NOW = 1_710_835_200_000


def view(body: bytes, key: str = KEY) -> LockView:
    return LockView(key=key, etag='"e"', raw=body, parsed=parse_lock(body))


def lock_body(**fields: object) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


class MemoryBucket:
    """One key's current object with S3's If-Match / If-None-Match answers (no versions)."""

    name = "cdkd-state-111111111111"
    account_id = "111111111111"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.calls: list[tuple[str, dict]] = []
        self.purged = 0

    @staticmethod
    def etag(body: bytes) -> str:
        return f'"{hashlib.md5(body).hexdigest()}"'  # noqa: S324 - S3's ETag is an MD5

    def get(self, key: str):
        self.calls.append(("get", {}))
        if key not in self.objects:
            raise NotFound("missing")
        body = self.objects[key]
        return type("Stored", (), {"body": body, "etag": self.etag(body), "version_id": None, "last_modified": None})

    def put(self, key: str, body: bytes, *, if_match: str | None = None, if_none_match: bool = False):
        self.calls.append(("put", {"if_match": if_match, "if_none_match": if_none_match}))
        current = self.objects.get(key)
        if if_none_match and current is not None:
            raise PreconditionFailed("exists")
        if if_match is not None:
            if current is None:
                raise NotFound("missing")
            if self.etag(current) != if_match:
                raise PreconditionFailed("changed")
        self.objects[key] = body
        return type("Stored", (), {"etag": self.etag(body)})

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        self.calls.append(("delete", {"if_match": if_match}))
        current = self.objects.get(key)
        if if_match is not None:
            if current is None:
                raise NotFound("missing")
            if self.etag(current) != if_match:
                raise PreconditionFailed("changed")
        self.objects.pop(key, None)

    def purge_noncurrent(self, keys):
        self.calls.append(("purge", {}))
        return []


# --- reading and describing -----------------------------------------------------------------


def test_it_phrases_expiry_like_cdkd():
    live = view(lock_body(owner="a@b:1", timestamp=NOW, expiresAt=NOW + 25 * 60_000 + 10))

    assert live.expiry_phrase(NOW) == "in ~25m"
    assert live.expiry_phrase(NOW + 25 * 60_000 - 30_000) == "in under a minute"
    assert live.expiry_phrase(NOW + 25 * 60_000 + 10) == "already expired"
    assert view(lock_body(owner="a", expiresAt="x")).expiry_phrase(NOW) == "at an unknown time"


@pytest.mark.parametrize(
    ("body", "state"),
    [
        (lock_body(owner="a", timestamp=NOW, expiresAt=NOW + 1), "live"),
        (lock_body(owner="a", timestamp=NOW, expiresAt=NOW), "expired"),
        (lock_body(owner="a", timestamp=NOW), "expired"),
        (lock_body(owner="a", timestamp=NOW, expiresAt=None), "expired"),
        (lock_body(owner="a", timestamp=NOW, expiresAt="2030-01-01"), "expired"),
        (b'{"owner":"a","expiresAt":1e999}', "expired"),  # Infinity in JavaScript
        (b'{"owner":"a","expiresAt":NaN}', "unreadable"),  # not JSON at all
        (b"null", "unreadable"),
        (b"[]", "unreadable"),
        (b'{"owner":"a"', "unreadable"),
    ],
)
def test_it_decides_expiry_by_expires_at_only(body, state):
    assert view(body).state(NOW) == state


def test_it_describes_a_lock_in_one_line():
    described = view(lock_body(owner="goto@mac:1", timestamp=NOW, expiresAt=NOW + 1_800_000, operation="deploy"))

    assert described.describe(NOW + 60_000) == (
        "held by goto@mac:1, operation: deploy, acquired 2024-03-19 08:00:00 UTC, "
        "deadline 2024-03-19 08:30:00 UTC (in ~29m) - live"
    )
    assert view(b"{bad").describe(NOW).startswith("unreadable lock (lock.json cannot be read: ")
    assert view(lock_body(timestamp=NOW, expiresAt=NOW)).holder() == "an unnamed holder"


def test_it_sanitises_what_it_shows():
    assert display_safe("evil\x1b[31m@host\n") == "evil?[31m@host?"
    assert display_safe("   ") is None and display_safe(42) is None
    assert len(display_safe("x" * 500)) == 200


def test_the_renewal_interval_is_a_quarter_ttl_between_one_second_and_two_minutes():
    assert default_renew_interval_ms(30 * 60_000) == 120_000
    assert default_renew_interval_ms(3_000) == 1_000
    assert default_renew_interval_ms(8_000) == 2_000
    with pytest.raises(ValueError):
        StackLock(MemoryBucket(), KEY, owner="o", operation=None, ttl_ms=0)
    with pytest.raises(ValueError):
        StackLock(MemoryBucket(), KEY, owner="o", operation=None, ttl_ms=float("inf"))


def test_it_names_the_stack_from_the_key():
    bucket = MemoryBucket()

    assert StackLock(bucket, KEY, owner="o", operation=None)._subject() == "stack app (us-east-1)"
    assert StackLock(bucket, "cdkd/A~B/eu-west-1/lock.json", owner="o", operation=None)._subject() == (
        "nested stack A~B (eu-west-1)"
    )
    assert StackLock(bucket, "cdkd/Legacy/lock.json", owner="o", operation=None)._subject() == (
        "stack Legacy (legacy, no region)"
    )


def test_the_recovery_command_is_quoted_and_omitted_when_names_do_not_survive():
    bucket = MemoryBucket()
    legacy = StackLock(bucket, "team a/My Stack/lock.json", owner="o", operation=None)
    odd = StackLock(bucket, "cdkd/caf\u00e9/us-east-1/lock.json", owner="o", operation=None)

    assert legacy._recovery() == (
        "To remove it: python manage.py cdkd force-unlock 'My Stack' --account 111111111111 --yes"
    )
    assert odd._recovery().startswith("Inspect the lock object s3://")


def test_an_unnamed_holder_gets_the_milder_advice():
    bucket = MemoryBucket()
    bucket.objects[KEY] = lock_body(timestamp=NOW, expiresAt=NOW + 600_000)
    lock = StackLock(bucket, KEY, owner="me", operation=None, clock=lambda: NOW / 1000)

    with pytest.raises(LockContention) as refused:
        lock.acquire()

    assert "held by an unnamed holder, expires in ~10m. Wait, or if you are certain" in str(refused.value)


# --- decisions against the in-memory bucket ----------------------------------------------------


def test_a_put_that_may_have_landed_is_read_back_and_a_refusal_is_not():
    bucket = MemoryBucket()
    denied = AccessDenied("denied")
    denied.status = 403  # type: ignore[attr-defined]

    def refuse(*args, **kwargs):
        raise denied

    bucket.put = refuse  # type: ignore[method-assign]

    with pytest.raises(AccessDenied):
        StackLock(bucket, KEY, owner="me", operation=None).acquire()
    assert ("get", {}) not in bucket.calls  # a 403 is a definite answer: nothing to read back


def test_a_lock_that_vanishes_between_put_and_read_is_retried():
    bucket = MemoryBucket()
    bucket.objects[KEY] = lock_body(owner="other", timestamp=NOW, expiresAt=NOW + 600_000)
    real_get = bucket.get

    def get_after_release(key):
        bucket.objects.pop(KEY, None)  # the holder released just before our read
        return real_get(key)

    bucket.get = get_after_release  # type: ignore[method-assign]
    lock = StackLock(bucket, KEY, owner="me", operation=None)

    lock.acquire()

    assert json.loads(bucket.objects[KEY])["owner"] == "me"
    assert [c[0] for c in bucket.calls] == ["put", "get", "put"]


def test_the_renewal_thread_renews_and_stops_on_release():
    bucket = MemoryBucket()
    clock = [NOW / 1000]
    lock = StackLock(bucket, KEY, owner="me", operation="x", clock=lambda: clock[0], renew_interval_ms=20)
    lock.acquire()
    clock[0] += 5

    lock.start_renewal()
    deadline = time.monotonic() + 5
    while json.loads(bucket.objects[KEY])["expiresAt"] == NOW + 1_800_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    lock.release()
    calls = len(bucket.calls)
    time.sleep(0.1)

    assert KEY not in bucket.objects
    assert len(bucket.calls) == calls
    assert lock._thread is not None and not lock._thread.is_alive()


def test_an_unexpected_error_in_the_renewal_thread_is_reported_not_swallowed():
    bucket = MemoryBucket()
    lock = StackLock(bucket, KEY, owner="me", operation="x", renew_interval_ms=10)
    lock.acquire()

    def boom() -> bool:
        raise RuntimeError("kaboom")

    lock.renew = boom  # type: ignore[method-assign]
    lock.start_renewal()
    deadline = time.monotonic() + 5
    while not lock.warnings and time.monotonic() < deadline:
        time.sleep(0.01)
    lock.release()

    assert "failed unexpectedly: kaboom" in lock.warnings[0]


def test_a_release_that_is_not_fallback_worthy_warns_and_keeps_the_lock():
    bucket = MemoryBucket()
    lock = StackLock(bucket, KEY, owner="me", operation="x")
    lock.acquire()
    body = bucket.objects[KEY]

    def throttled(key, *, if_match=None):
        error = EngineError("SlowDown")
        error.status = 503  # type: ignore[attr-defined]
        raise error

    bucket.delete = throttled  # type: ignore[method-assign]
    lock.release()

    assert bucket.objects[KEY] == body
    assert "Could not release the lock on stack app (us-east-1): SlowDown" in lock.warnings[0]


def test_maybe_applied_separates_definite_answers_from_lost_ones():
    def err(status):
        e = EngineError("x")
        e.status = status  # type: ignore[attr-defined]
        return e

    assert [locks._maybe_applied(err(s)) for s in (None, 500, 503, 409, 400, 403, 404)] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
