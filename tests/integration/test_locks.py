"""engine.locks.StackLock against the moto server through the proxy.

The race tests set `proxy.serialize`: moto's conditional writes check and then write
without a lock, so concurrent requests could both "win" at moto even when the code under
test is right (reference: reliability.md §1.9). One request at a time is what S3 gives a
single key.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping

import pytest

from engine.backend import StateBucket, StoredObject
from engine.errors import EngineError
from engine.keys import KeyLayout
from engine.locks import LockContention, StackLock, read_lock
from engine.operations import Context, OperationRefused
from engine.schema import LockInfo, dump_lock

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
KEY = "cdkd/app/us-east-1/lock.json"
STATE_KEY = "cdkd/app/us-east-1/state.json"
CDKD_OWNER = "goto@macbook:12345"
MINUTE_MS = 60_000


def now_ms() -> int:
    return int(time.time() * 1000)


def cdkd_lock(owner: str = CDKD_OWNER, *, timestamp: int, expires_at: object, operation: str = "deploy") -> bytes:
    """A lock exactly as cdkd writes it: `JSON.stringify(lockInfo)`, compact, in field order."""
    return json.dumps(
        {"owner": owner, "timestamp": timestamp, "expiresAt": expires_at, "operation": operation},
        separators=(",", ":"),
    ).encode()


def owner(name: str, op: str = "op-1") -> str:
    return f"cdkd-admin:{name}@worker-1:{op}"


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    opened = StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region="us-east-1")
    aws.reset_counts()
    return opened


@pytest.fixture
def serialized(aws) -> Iterator[None]:
    aws.proxy.serialize = True
    yield
    aws.proxy.serialize = False


def versions(aws, key: str = KEY) -> list[dict]:
    """Every version and delete marker of `key`, straight from moto."""
    listing = aws.s3(ACCOUNT).list_object_versions(Bucket=BUCKET, Prefix=key)
    entries = [{"id": v["VersionId"], "latest": v["IsLatest"], "marker": False} for v in listing.get("Versions", [])]
    entries += [
        {"id": m["VersionId"], "latest": m["IsLatest"], "marker": True} for m in listing.get("DeleteMarkers", [])
    ]
    return entries


def record_headers(aws, api: str) -> list[Mapping[str, str]]:
    """The headers of every later `api` request through the proxy."""
    seen: list[Mapping[str, str]] = []

    def hook(name: str, method: str, path: str, headers: Mapping[str, str]) -> None:
        if name == api:
            seen.append(dict(headers))
        return None

    aws.proxy.add_hook(hook)
    return seen


# --- acquire ------------------------------------------------------------------------------


def test_it_writes_exactly_cdkds_lock_shape(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", clock=lambda: 1710835200.0)
    puts = record_headers(aws, "PutObject")

    lock.acquire()

    stored = aws.get(ACCOUNT, BUCKET, KEY)
    assert stored == (
        b'{"owner":"cdkd-admin:alice@worker-1:op-1","timestamp":1710835200000,'
        b'"expiresAt":1710837000000,"operation":"orphan"}'
    )
    assert list(json.loads(stored)) == ["owner", "timestamp", "expiresAt", "operation"]
    assert json.loads(stored)["expiresAt"] == json.loads(stored)["timestamp"] + 1_800_000
    assert puts[0]["if-none-match"] == "*"
    assert lock.held and lock.etag == aws.s3(ACCOUNT).head_object(Bucket=BUCKET, Key=KEY)["ETag"]


def test_it_omits_the_operation_when_none_is_given(aws, bucket):
    StackLock(bucket, KEY, owner=owner("alice"), operation=None, clock=lambda: 1710835200.0).acquire()

    assert aws.get(ACCOUNT, BUCKET, KEY) == (
        b'{"owner":"cdkd-admin:alice@worker-1:op-1","timestamp":1710835200000,"expiresAt":1710837000000}'
    )


@pytest.mark.parametrize("pretty", [False, True], ids=["compact", "pretty-printed"])
def test_it_is_blocked_by_a_lock_cdkd_wrote(aws, bucket, pretty):
    ts = now_ms() - 5 * MINUTE_MS
    body = cdkd_lock(timestamp=ts, expires_at=ts + 30 * MINUTE_MS)
    if pretty:  # the 0.284.40 snapshot's writer
        body = json.dumps(json.loads(body), indent=2).encode()
    aws.put(ACCOUNT, BUCKET, KEY, body)

    with pytest.raises(LockContention) as refused:
        StackLock(bucket, KEY, owner=owner("alice"), operation="orphan").acquire()

    message = str(refused.value)
    assert message.startswith(
        "Could not acquire the lock for stack app (us-east-1): held by goto@macbook:12345, operation: deploy, "
        "expires in ~25m. That process is still running: wait for it to finish"
    )
    assert message.endswith(
        f"To remove it: python manage.py cdkd force-unlock app --account {ACCOUNT} --stack-region us-east-1 --yes"
    )
    assert refused.value.view.owner == CDKD_OWNER
    assert aws.get(ACCOUNT, BUCKET, KEY) == body
    assert aws.requests["DeleteObject"] == 0


def test_it_says_under_a_minute_for_a_lock_about_to_expire(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(timestamp=now_ms() - 29 * MINUTE_MS, expires_at=now_ms() + 20_000))

    with pytest.raises(
        LockContention, match=r"held by goto@macbook:12345, operation: deploy, expires in under a minute"
    ):
        StackLock(bucket, KEY, owner=owner("alice"), operation="orphan").acquire()


def test_it_refuses_an_unreadable_lock_and_names_the_way_out(aws, bucket):
    truncated = cdkd_lock(timestamp=now_ms(), expires_at=now_ms() + 1)[:30]
    aws.put(ACCOUNT, BUCKET, KEY, truncated)

    with pytest.raises(LockContention) as refused:
        StackLock(bucket, KEY, owner=owner("alice"), operation="orphan").acquire()

    message = str(refused.value)
    assert "lock.json cannot be read" in message
    assert "needs a second confirmation" in message and "force-unlock" in message
    assert aws.get(ACCOUNT, BUCKET, KEY) == truncated


@pytest.mark.parametrize("body", [b"null", b"[]", b"42"])
def test_it_is_blocked_by_a_json_lock_that_is_not_an_object(aws, bucket, body):
    aws.put(ACCOUNT, BUCKET, KEY, body)

    with pytest.raises(LockContention, match="not a lock object, yet it still blocks every acquire"):
        StackLock(bucket, KEY, owner=owner("alice"), operation="orphan").acquire()

    assert aws.get(ACCOUNT, BUCKET, KEY) == body


def test_it_recognises_its_own_lock_after_a_lost_response(aws, bucket):
    # moto applies the PUT, the proxy drops the answer, botocore retries and the retry
    # meets our own lock: a 412 that must be read back, not taken as contention.
    aws.proxy.drop_response("PutObject", 1)
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")

    lock.acquire()

    stored = aws.get(ACCOUNT, BUCKET, KEY)
    assert lock.held and stored == lock.body
    assert json.loads(stored)["owner"] == owner("alice")
    assert aws.requests["PutObject"] == 2 and aws.requests["GetObject"] == 1
    assert lock.warnings == []
    assert len([v for v in versions(aws) if not v["marker"]]) == 1  # no second write


class LosingBucket:
    """A StateBucket whose next PUT is applied but answered with a connection error."""

    def __init__(self, bucket: StateBucket) -> None:
        self._bucket = bucket
        self.lose_next = True

    def __getattr__(self, name: str):
        return getattr(self._bucket, name)

    def put(self, key: str, body: bytes, **kwargs) -> StoredObject:
        stored = self._bucket.put(key, body, **kwargs)
        if self.lose_next:
            self.lose_next = False
            error = EngineError("s3:PutObject failed: Connection was closed before we received a valid response")
            error.code, error.status = "ConnectionClosedError", None  # type: ignore[attr-defined]
            raise error
        return stored


def test_it_reads_back_after_a_put_that_failed_without_an_answer(aws, bucket):
    lock = StackLock(LosingBucket(bucket), KEY, owner=owner("alice"), operation="orphan")

    lock.acquire()

    assert lock.held and aws.get(ACCOUNT, BUCKET, KEY) == lock.body
    assert aws.requests["PutObject"] == 1 and aws.requests["GetObject"] == 1


def test_it_adopts_the_lock_a_crashed_run_of_the_same_operation_left(aws, bucket):
    ts = now_ms() - 40 * MINUTE_MS
    left = cdkd_lock(owner("alice", "op-7"), timestamp=ts, expires_at=ts + 30 * MINUTE_MS, operation="orphan")
    aws.put(ACCOUNT, BUCKET, KEY, left)
    warnings: list[str] = []

    lock = StackLock(bucket, KEY, owner=owner("alice", "op-7"), operation="orphan", on_warning=warnings.append)
    lock.acquire()

    stored = json.loads(aws.get(ACCOUNT, BUCKET, KEY))
    assert stored["owner"] == owner("alice", "op-7") and stored["timestamp"] > ts
    assert stored["expiresAt"] == stored["timestamp"] + 1_800_000
    assert lock.held and lock.body == aws.get(ACCOUNT, BUCKET, KEY)
    assert len(warnings) == 1 and "earlier run of this operation" in warnings[0]
    assert aws.requests["DeleteObject"] == 0  # re-stamped with If-Match, never deleted


def test_another_operation_of_the_same_person_does_not_adopt(aws, bucket):
    StackLock(bucket, KEY, owner=owner("alice", "op-1"), operation="orphan").acquire()

    with pytest.raises(LockContention, match="held by cdkd-admin:alice@worker-1:op-1, operation: orphan"):
        StackLock(bucket, KEY, owner=owner("alice", "op-2"), operation="orphan").acquire()


@pytest.mark.parametrize("expires", [None, "soon", "NaN"], ids=["missing", "string", "nan-string"])
def test_it_takes_over_a_lock_whose_deadline_is_not_a_number(aws, bucket, expires):
    ts = now_ms()
    body = cdkd_lock(timestamp=ts, expires_at=expires)
    if expires is None:
        body = json.dumps({"owner": CDKD_OWNER, "timestamp": ts, "operation": "deploy"}, separators=(",", ":")).encode()
    aws.put(ACCOUNT, BUCKET, KEY, body)
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")

    lock.acquire()

    assert json.loads(aws.get(ACCOUNT, BUCKET, KEY))["owner"] == owner("alice")
    assert any("not a finite number" in w and CDKD_OWNER in w for w in lock.warnings)


def test_it_takes_over_an_expired_lock_and_purges_its_versions(aws, bucket):
    ts = now_ms() - 60 * MINUTE_MS
    aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(timestamp=ts - 1, expires_at=ts + 10))
    aws.delete(ACCOUNT, BUCKET, KEY)  # an earlier cycle: a noncurrent body and a marker
    expired = cdkd_lock(timestamp=ts, expires_at=ts + 30 * MINUTE_MS)
    aws.put(ACCOUNT, BUCKET, KEY, expired)
    deletes = record_headers(aws, "DeleteObject")
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")

    lock.acquire()

    assert lock.took_over is not None and lock.took_over.raw == expired
    assert deletes[0]["if-match"] == lock.took_over.etag
    assert [w for w in lock.warnings if w.startswith("Took over")] == [
        f"Took over the expired lock on stack app (us-east-1) held by {CDKD_OWNER} (operation: deploy): "
        f"it expired at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime((ts + 30 * MINUTE_MS) / 1000))}. "
        f"If that process is in fact still running, two writers are now operating on this stack."
    ]
    assert versions(aws) == [{"id": versions(aws)[0]["id"], "latest": True, "marker": False}]
    assert aws.get(ACCOUNT, BUCKET, KEY) == lock.body  # the current version survives the purge


def test_it_warns_when_the_takeover_purge_is_denied(aws, bucket):
    ts = now_ms() - 60 * MINUTE_MS
    aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(timestamp=ts, expires_at=ts + 1))
    aws.proxy.deny_operation("ListObjectVersions")
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")

    lock.acquire()

    assert lock.held
    purge = [w for w in lock.warnings if w.startswith("Could not purge")]
    assert len(purge) == 1
    assert "s3:ListBucketVersions and s3:DeleteObjectVersion" in purge[0]
    assert purge[0].endswith(f"Failures: {KEY} (AccessDenied: s3:ListBucketVersions)")


def test_exactly_one_of_two_workers_takes_over_an_expired_lock(aws, bucket, serialized):
    for round_no in range(15):
        ts = now_ms() - 60 * MINUTE_MS
        aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(f"ghost@old-host:{round_no}", timestamp=ts, expires_at=ts + 1))
        barrier = threading.Barrier(2)
        outcomes: dict[int, object] = {}
        locks = [StackLock(bucket, KEY, owner=owner(f"w{i}", f"r{round_no}"), operation="orphan") for i in range(2)]

        def race(i: int, locks=locks, barrier=barrier, outcomes=outcomes) -> None:
            barrier.wait()
            try:
                outcomes[i] = locks[i].acquire()
            except LockContention as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

        winners = [i for i in range(2) if isinstance(outcomes[i], StackLock)]
        assert len(winners) == 1, (round_no, outcomes)
        assert isinstance(outcomes[1 - winners[0]], LockContention)
        takeovers = [w for lock in locks for w in lock.warnings if w.startswith("Took over")]
        assert len(takeovers) == 1 and f"held by ghost@old-host:{round_no}" in takeovers[0]
        assert aws.get(ACCOUNT, BUCKET, KEY) == locks[winners[0]].body
        locks[winners[0]].release()


def winner_bodies(outcomes: list[list[object]]) -> list[bytes | None]:
    return [next((o.body for o in row if isinstance(o, StackLock)), None) for row in outcomes]


def test_eight_acquirers_give_exactly_one_holder_per_round(aws, bucket, serialized):
    rounds, workers = 200, 8
    barrier = threading.Barrier(workers)
    outcomes: list[list[object]] = [[None] * workers for _ in range(rounds)]
    stored_by_winner: list[bytes | None] = [None] * rounds
    failures: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for r in range(rounds):
                barrier.wait()
                lock = StackLock(bucket, KEY, owner=owner(f"w{i}", f"round-{r}"), operation="deploy")
                try:
                    outcomes[r][i] = lock.acquire()
                except LockContention as exc:
                    outcomes[r][i] = exc
                barrier.wait()  # every acquire of this round has ended
                if outcomes[r][i] is lock:
                    stored_by_winner[r] = aws.get(ACCOUNT, BUCKET, KEY)
                    lock.release()
                barrier.wait()  # released before the next round starts
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            failures.append(exc)
            barrier.abort()

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started

    assert not failures, failures[:1]
    assert all(
        stored == holder_body for stored, holder_body in zip(stored_by_winner, winner_bodies(outcomes), strict=True)
    )
    for r, row in enumerate(outcomes):
        holders = [o for o in row if isinstance(o, StackLock)]
        assert len(holders) == 1, f"round {r}: {len(holders)} holders"
        assert sum(isinstance(o, LockContention) for o in row) == workers - 1
        assert all("held by cdkd-admin:w" in str(o) for o in row if isinstance(o, LockContention))
    assert read_lock(bucket, KEY) is None  # the last winner released
    assert versions(aws) == [{"id": versions(aws)[0]["id"], "latest": True, "marker": True}]
    print(f"\n{rounds} rounds x {workers} acquirers: {elapsed:.1f}s, {sum(aws.requests.values())} requests")
    assert elapsed < 90


# --- renewal ------------------------------------------------------------------------------


def test_renewal_keeps_the_lock_past_its_ttl(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", ttl_ms=3000, renew_interval_ms=500)
    lock.acquire()
    first = json.loads(lock.body)
    lock.start_renewal()
    try:
        time.sleep(4.5)  # well past the 3 s TTL

        with pytest.raises(LockContention, match="held by cdkd-admin:alice@worker-1:op-1"):
            StackLock(bucket, KEY, owner=owner("bob"), operation="orphan").acquire()
        stored = json.loads(aws.get(ACCOUNT, BUCKET, KEY))
        assert stored["owner"] == first["owner"] and stored["timestamp"] == first["timestamp"]
        assert stored["expiresAt"] > now_ms() and stored["expiresAt"] > first["expiresAt"]
        assert list(stored) == ["owner", "timestamp", "expiresAt", "operation"]
        assert aws.requests["PutObject"] >= 1 + 6  # the acquire and one renewal per 500 ms
    finally:
        lock.release()
    assert not lock.lost and lock.warnings == []
    assert versions(aws) == [{"id": versions(aws)[0]["id"], "latest": True, "marker": True}]


def test_without_renewal_the_lock_lapses_and_is_taken_over(aws, bucket):
    clock = [1_000.0]
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", ttl_ms=3000, clock=lambda: clock[0])
    lock.acquire()
    clock[0] += 3.0

    other = StackLock(bucket, KEY, owner=owner("bob"), operation="orphan", clock=lambda: clock[0])
    other.acquire()

    assert any("held by cdkd-admin:alice@worker-1:op-1" in w for w in other.warnings)
    assert lock.renew() is False and lock.lost
    lock.release()
    assert json.loads(aws.get(ACCOUNT, BUCKET, KEY))["owner"] == owner("bob")


def test_renewal_puts_if_match_the_last_etag(aws, bucket):
    clock = [1_000.0]
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", clock=lambda: clock[0])
    lock.acquire()
    puts = record_headers(aws, "PutObject")
    etag = lock.etag

    clock[0] += 120.0
    assert lock.renew() is True

    assert puts[0]["if-match"] == etag
    assert aws.get(ACCOUNT, BUCKET, KEY) == dump_lock(
        LockInfo.new(owner=owner("alice"), timestamp=1_000_000, expires_at=1_120_000 + 1_800_000, operation="orphan")
    )
    assert lock.etag != etag and lock.etag == aws.s3(ACCOUNT).head_object(Bucket=BUCKET, Key=KEY)["ETag"]


def test_renewal_adopts_its_own_write_after_a_lost_response(aws, bucket):
    clock = [1_000.0]
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", clock=lambda: clock[0])
    lock.acquire()
    clock[0] += 60.0
    aws.proxy.drop_response("PutObject", 1)  # applied at moto; the retry gets a 412

    assert lock.renew() is True

    assert not lock.lost and lock.warnings == []
    assert aws.get(ACCOUNT, BUCKET, KEY) == lock.body
    assert json.loads(lock.body)["expiresAt"] == 1_060_000 + 1_800_000
    clock[0] += 60.0
    assert lock.renew() is True  # the adopted ETag is the right one to renew from
    lock.release()
    assert read_lock(bucket, KEY) is None


def test_a_renewal_that_meets_someone_elses_lock_marks_it_lost_and_never_deletes_it(aws, bucket):
    warnings: list[str] = []
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", on_warning=warnings.append)
    lock.acquire()
    foreign = cdkd_lock(timestamp=now_ms(), expires_at=now_ms() + 30 * MINUTE_MS)
    aws.put(ACCOUNT, BUCKET, KEY, foreign)  # e.g. a force-unlock and a cdkd deploy

    assert lock.renew() is False
    lock.release()

    assert lock.lost
    assert len(warnings) == 1 and warnings[0].startswith("Lost the lock on stack app (us-east-1): it is now held by")
    assert "another process may now be writing" in warnings[0].lower()
    assert aws.get(ACCOUNT, BUCKET, KEY) == foreign
    assert aws.requests["DeleteObject"] == 0


def test_a_renewal_after_the_lock_was_deleted_marks_it_lost(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    aws.delete(ACCOUNT, BUCKET, KEY)

    assert lock.renew() is False
    assert lock.lost and "gone (deleted by someone else)" in lock.warnings[0]


def test_a_transient_renewal_failure_retries_and_warns_once_past_the_deadline(aws, bucket):
    clock = [1_000.0]
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", ttl_ms=3000, clock=lambda: clock[0])
    lock.acquire()
    aws.proxy.fail(BUCKET, 400, "InvalidRequest")  # not retried by botocore: a fast failure

    clock[0] += 1.0
    assert lock.renew() is False and lock.warnings == []  # within the deadline: silent retry
    clock[0] += 3.0
    assert lock.renew() is False and lock.renew() is False
    assert len(lock.warnings) == 1 and "before its deadline" in lock.warnings[0]

    aws.proxy.clear_rules()
    assert lock.renew() is True and not lock.lost


# --- release ------------------------------------------------------------------------------


def test_release_deletes_if_match_and_purges_noncurrent_versions(aws, bucket):
    aws.put(ACCOUNT, BUCKET, STATE_KEY, b'{"version": 11}')
    clock = [1_000.0]
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", clock=lambda: clock[0])
    lock.acquire()
    for _ in range(3):
        clock[0] += 120
        lock.renew()
    assert len(versions(aws)) == 4
    deletes = record_headers(aws, "DeleteObject")
    held = lock.etag

    lock.release()

    assert deletes == [dict(deletes[0], **{"if-match": held})]
    assert read_lock(bucket, KEY) is None
    assert versions(aws) == [{"id": versions(aws)[0]["id"], "latest": True, "marker": True}]
    assert aws.get(ACCOUNT, BUCKET, STATE_KEY) == b'{"version": 11}'
    assert len(versions(aws, STATE_KEY)) == 1


def test_release_leaves_someone_elses_lock_on_a_412(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    foreign = cdkd_lock(timestamp=now_ms(), expires_at=now_ms() + 30 * MINUTE_MS)
    aws.put(ACCOUNT, BUCKET, KEY, foreign)

    lock.release()

    assert aws.get(ACCOUNT, BUCKET, KEY) == foreign
    assert len(lock.warnings) == 1 and "someone else's now; left in place" in lock.warnings[0]
    assert aws.requests["ListObjectVersions"] == 0  # not ours: no purge either


def test_release_of_a_lock_already_gone_is_fine(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    aws.delete(ACCOUNT, BUCKET, KEY)

    lock.release()

    assert lock.warnings == []
    assert read_lock(bucket, KEY) is None


def deny_conditional_deletes(aws, status: int = 403, code: str = "AccessDenied") -> None:
    """A policy (403) or endpoint (501) that will not evaluate If-Match on DeleteObject."""

    def hook(api: str, method: str, path: str, headers: Mapping[str, str]):
        return (status, code) if api == "DeleteObject" and "if-match" in headers else None

    aws.proxy.add_hook(hook)


@pytest.mark.parametrize(("status", "code"), [(403, "AccessDenied"), (501, "NotImplemented")])
def test_release_falls_back_to_an_unconditional_delete_when_the_lock_is_still_ours(aws, bucket, status, code):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    deletes = record_headers(aws, "DeleteObject")  # first: the first hook to answer wins
    deny_conditional_deletes(aws, status, code)

    lock.release()

    assert aws.requests["GetObject"] == 1  # the ownership re-read
    assert ["if-match" in h for h in deletes] == [True, False]
    assert read_lock(bucket, KEY) is None
    assert lock.warnings == []


def test_release_fallback_leaves_a_lock_that_is_no_longer_ours(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    foreign = cdkd_lock(timestamp=now_ms(), expires_at=now_ms() + 30 * MINUTE_MS)
    aws.put(ACCOUNT, BUCKET, KEY, foreign)
    deny_conditional_deletes(aws)  # a policy scoping GetObject away turns the 412 into a 403

    lock.release()

    assert aws.get(ACCOUNT, BUCKET, KEY) == foreign
    assert aws.requests["DeleteObject"] == 1
    assert "it is now held by goto@macbook:12345" in lock.warnings[0] and "left in place" in lock.warnings[0]


def test_release_fallback_refuses_when_the_reread_fails(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    deny_conditional_deletes(aws)
    aws.proxy.deny_operation("GetObject")

    lock.release()  # never raises

    assert aws.get(ACCOUNT, BUCKET, KEY) == lock.body
    assert aws.requests["DeleteObject"] == 1
    assert "re-reading the lock to confirm it is still ours failed" in lock.warnings[0]


def test_release_fallback_deletes_a_lock_that_became_unreadable(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    aws.put(ACCOUNT, BUCKET, KEY, b'{"owner":"cdkd-admin:al')
    deny_conditional_deletes(aws)

    lock.release()

    assert read_lock(bucket, KEY) is None


def test_release_never_raises_on_a_conflict_and_says_so(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    aws.proxy.fail(BUCKET, 409, "ConditionalRequestConflict")

    lock.release()

    aws.proxy.clear_rules()
    assert aws.get(ACCOUNT, BUCKET, KEY) == lock.body  # a 409 is not retried unconditionally: it lapses
    assert "Could not release the lock" in lock.warnings[0]
    assert aws.requests["DeleteObject"] == 1


def test_a_second_release_is_a_no_op(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    lock.release()
    other = StackLock(bucket, KEY, owner=owner("bob"), operation="orphan").acquire()
    aws.reset_counts()

    lock.release()

    assert sum(aws.requests.values()) == 0
    assert aws.get(ACCOUNT, BUCKET, KEY) == other.body


def test_a_release_purge_failure_is_silent(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan")
    lock.acquire()
    aws.proxy.deny_operation("ListObjectVersions")

    lock.release()

    assert read_lock(bucket, KEY) is None
    assert lock.warnings == []
    assert len(lock.purge_failures) == 1 and "s3:ListBucketVersions" in lock.purge_failures[0]


def test_release_stops_the_renewal_thread(aws, bucket):
    lock = StackLock(bucket, KEY, owner=owner("alice"), operation="orphan", ttl_ms=2000, renew_interval_ms=100)
    lock.acquire()
    lock.start_renewal()
    time.sleep(0.35)

    lock.release()
    aws.reset_counts()
    time.sleep(0.4)

    assert sum(aws.requests.values()) == 0
    assert read_lock(bucket, KEY) is None


# --- the operation context ------------------------------------------------------------------


def test_context_held_lock_holds_renews_and_releases(aws, bucket):
    ctx = Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack="app",
        region="us-east-1",
        params={},
        operation_id="op-42",
        person="alice",
    )

    with ctx.held_lock("orphan") as lock:
        stored = json.loads(aws.get(ACCOUNT, BUCKET, KEY))
        assert stored["owner"] == "cdkd-admin:alice@cdkd-admin:op-42" and stored["operation"] == "orphan"
        with pytest.raises(OperationRefused):
            StackLock(bucket, KEY, owner=owner("bob"), operation="deploy").acquire()
        assert lock.held

    assert read_lock(bucket, KEY) is None
