"""The stack lock, in cdkd's format: acquire, renew, release, read and force-unlock.

A lock is `lock.json` beside the record, written as cdkd writes it (`JSON.stringify` of
owner, timestamp, expiresAt and operation-if-given), so a cdkd CLI run and an admin
operation exclude each other. The protocol is the newer cdkd's (reference §10.4-10.6,
seeds 000/001 "Lock implementation"):

- Acquire: `PutObject If-None-Match: *`. A 412 or a response that may have been lost is
  followed by ONE read of the lock: our exact bytes or our operation's owner -> ours
  (adopted, also when a crashed earlier run of the same operation left it, on any host:
  `same_operation` matches person and operation id, not the host name); a foreign lock whose
  `expiresAt` has passed (or is not a finite number) -> taken over with a conditional
  delete on its ETag and a warning naming the holder; a live or unreadable foreign lock
  (or a JSON null / non-object, which still blocks `If-None-Match`) -> `LockContention`.
- Renewal: every `max(1 s, min(2 min, TTL/4))` a `PutObject If-Match: <ETag last written>`
  with a new `expiresAt`. A 412 reads once: the stored body byte-equal to one we sent
  (lost response) is adopted, anything else marks the lock LOST (never deleted by us
  afterwards). Other failures retry on the next tick; a deadline passed unrenewed warns once.
- Release: `DeleteObject If-Match: <held ETag>`; 412 leaves it (someone else's); gone is
  fine; 403/501 re-read and delete unconditionally only when still ours (or unreadable).
  Never raises. Then the key's noncurrent versions are purged (failures silent).
- Force-unlock (`force_unlock`): delete only the lock the person saw (`If-Match`), or,
  for an unreadable lock after a second confirmation, without the condition; then purge
  noncurrent versions, warning on failure. Never touches `state.json`.

Reading a stored lock and describing it for people (`LockView`, `read_lock`, the owner
strings) is `engine.lockview`; its names are importable from here as before.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.backend import StateBucket
from engine.errors import AccessDenied, EngineError, NotFound, PreconditionFailed
from engine.keys import LOCK_FILE, is_region_shaped
from engine.lockview import (  # noqa: F401 - re-exported: engine.locks named these before the split
    ADMIN_OWNER_PREFIX,
    LockState,
    LockView,
    _finite,
    _now_ms,
    display_safe,
    format_ms,
    owner_operation,
    read_lock,
    same_operation,
)
from engine.operations import OperationRefused
from engine.schema import LockInfo, dump_lock, parse_lock

TTL_MS = 30 * 60 * 1000  # cdkd's hard-coded default
MIN_RENEW_MS = 1_000
MAX_RENEW_MS = 120_000
ACQUIRE_ATTEMPTS = 4  # PUT, then at most a takeover / adoption / vanished-lock retry or three
PURGE_ATTEMPTS = 3  # a NoSuchVersion re-lists: the version is gone, which is what we wanted
JOIN_TIMEOUT_S = 30.0  # how long release waits for an in-flight renewal

WarningFn = Callable[[str], None]


def default_renew_interval_ms(ttl_ms: int) -> int:
    """cdkd's renewal interval: every quarter TTL, at least 1 s apart and at most 2 min."""
    return max(MIN_RENEW_MS, min(MAX_RENEW_MS, ttl_ms // 4))


# --- errors -------------------------------------------------------------------------------


class LockContention(OperationRefused):
    """Someone else holds the lock (or it cannot be read). `view` is what was read, if any."""

    def __init__(self, message: str, *, view: LockView | None = None) -> None:
        super().__init__(message)
        self.view = view


class LockChanged(OperationRefused):
    """Force-unlock refused: the lock is no longer the one the person saw. `view` is the new one."""

    def __init__(self, message: str, *, view: LockView | None) -> None:
        super().__init__(message)
        self.view = view


# --- noncurrent-version purge ---------------------------------------------------------------


def purge_lock_versions(bucket: StateBucket, key: str) -> tuple[int, str | None]:
    """Permanently delete the noncurrent versions and delete markers of the lock key (the
    current version, live lock or the marker hiding a released one, is never touched).
    Never raises: returns (versions deleted, a warning for people or None)."""
    deleted = 0
    for attempt in range(PURGE_ATTEMPTS):
        try:
            deleted += len(bucket.purge_noncurrent([key]))
            return deleted, None
        except EngineError as exc:
            # NoSuchVersion: someone (a concurrent release or reaper) purged it first. That
            # is the goal reached; re-list so any other version still gets removed.
            if getattr(exc, "code", "") == "NoSuchVersion":
                if attempt + 1 < PURGE_ATTEMPTS:
                    continue
                return deleted, None
            action = "s3:ListBucketVersions" if "ListBucketVersions" in str(exc) else "s3:DeleteObjectVersion"
            return deleted, (
                f"Could not purge noncurrent versions of 1 key(s) in s3://{bucket.name}. Their previous "
                f"versions survive and remain readable via GetObject with a VersionId (the lock, which "
                f"holds only owner, timestamp, expiresAt and operation). Grant s3:ListBucketVersions and "
                f"s3:DeleteObjectVersion on the state bucket, or purge the key(s) by hand. "
                f"Failures: {key} ({getattr(exc, 'code', '') or type(exc).__name__}: {action})"
            )
    return deleted, None  # pragma: no cover - the loop always returns


# --- the lock -------------------------------------------------------------------------------


class StackLock:
    """One operation's hold on a stack's cdkd lock.

    Contract: `acquire()` returns once the lock is ours or raises `LockContention` (someone
    else's live or unreadable lock) or an EngineError (S3 refused in another way).
    `start_renewal()` keeps it alive in a daemon thread; `renew()` is one synchronous
    renewal. `release()` never raises and is idempotent. `lost` turns True when renewal
    finds the lock is no longer ours; from then on nothing here writes or deletes it.
    Every warning goes to `on_warning` and is kept in `warnings`.
    """

    def __init__(
        self,
        bucket: StateBucket,
        key: str,
        *,
        owner: str,
        operation: str | None,
        ttl_ms: int = TTL_MS,
        clock: Callable[[], float] = time.time,
        on_warning: WarningFn | None = None,
        renew_interval_ms: int | None = None,
        stack: str | None = None,
        region: str | None = None,
        account_id: str | None = None,
    ) -> None:
        if not isinstance(ttl_ms, int | float) or not math.isfinite(ttl_ms) or ttl_ms <= 0:
            raise ValueError(f"lock TTL must be a positive finite number of ms, got {ttl_ms!r}")
        if not owner:
            raise ValueError("a lock needs an owner string")
        self.bucket = bucket
        self.key = key
        self.owner = owner
        self.operation = operation
        self.ttl_ms = int(ttl_ms)
        self.renew_interval_ms = renew_interval_ms or default_renew_interval_ms(self.ttl_ms)
        self.clock = clock
        self.on_warning = on_warning
        self.stack, self.region = _subject_of(key, stack, region)
        self.account_id = account_id or getattr(bucket, "account_id", None)
        self.lost = False
        self.warnings: list[str] = []
        self.purge_failures: list[str] = []  # release-path purge failures: silent, kept for tests/debug
        self.took_over: LockView | None = None  # the expired lock this acquire replaced, if any
        self._etag: str | None = None
        self._body: bytes | None = None
        self._info: LockInfo | None = None
        self._unconfirmed: list[bytes] = []  # renewal bodies sent whose outcome we did not see
        self._deadline_warned = False
        self._released = False
        self._mutex = threading.RLock()  # one S3 exchange about this lock at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        state = "lost" if self.lost else "held" if self.held else "released" if self._released else "not held"
        return f"<StackLock {self.key} owner={self.owner!r} {state}>"

    # -- what is held --------------------------------------------------------------------

    @property
    def held(self) -> bool:
        return self._etag is not None and not self.lost

    @property
    def etag(self) -> str | None:
        """The ETag this process last wrote (or adopted)."""
        return self._etag

    @property
    def body(self) -> bytes | None:
        """The exact bytes this process last wrote (or adopted)."""
        return self._body

    @property
    def expires_at_ms(self) -> int | None:
        value = self._info.get("expiresAt") if self._info is not None else None
        return int(value) if _finite(value) else None

    # -- acquire -------------------------------------------------------------------------

    def acquire(self) -> StackLock:
        """Take the lock (see the class contract). Returns self."""
        with self._mutex:
            if self.held:
                return self
            if self._released:
                raise EngineError(f"the lock on {self.key} was released; a StackLock is not reusable")
            took_over = False
            try:
                for _ in range(ACQUIRE_ATTEMPTS):
                    body = self._fresh_body()
                    try:
                        stored = self.bucket.put(self.key, body, if_none_match=True)
                    except PreconditionFailed:
                        pass  # a lock exists (maybe ours, if a retry of a landed PUT got the 412)
                    except EngineError as exc:
                        if not _maybe_applied(exc):
                            raise
                        # The PUT may have landed with its answer lost: the read-back decides.
                    else:
                        self._hold(stored.etag, body)
                        return self
                    view = read_lock(self.bucket, self.key)
                    if view is None:
                        continue  # released between our PUT and the read (or never written): again
                    if view.raw == body:
                        self._hold(view.etag, view.raw)  # our PUT landed; its answer did not
                        return self
                    if view.readable and same_operation(view.owner, self.owner):
                        if self._adopt(view):
                            return self
                        continue  # it changed under us: look again
                    if view.state(self._now()) != "expired":
                        raise LockContention(self.contention_message(view), view=view)
                    if not self._take_over(view):
                        continue  # someone else reaped it first: race for the empty key
                    took_over = True
                raise LockContention(
                    f"Could not acquire the lock for {self._subject()}: it kept changing under "
                    f"{ACQUIRE_ATTEMPTS} attempts (other processes are competing for it). Wait and try again.",
                    view=None,
                )
            finally:
                # After the PUT, not before it, so the takeover's window stays short.
                if took_over:
                    _, warning = purge_lock_versions(self.bucket, self.key)
                    if warning:
                        self._warn(warning)

    def _fresh_body(self) -> bytes:
        now = self._now()
        return dump_lock(
            LockInfo.new(owner=self.owner, timestamp=now, expires_at=now + self.ttl_ms, operation=self.operation)
        )

    def _hold(self, etag: str, body: bytes) -> None:
        self._etag = etag
        self._body = body
        self._info = parse_lock(body).info
        self._unconfirmed.clear()
        self._deadline_warned = False

    def _adopt(self, view: LockView) -> bool:
        """A lock of this same operation (`same_operation`) that we did not just write: left
        by a crashed earlier run of it, maybe on another worker host. Re-stamp it with our
        owner (If-Match its ETag) so it is fresh; False when it changed meanwhile."""
        body = self._fresh_body()
        try:
            stored = self.bucket.put(self.key, body, if_match=view.etag)
        except (PreconditionFailed, NotFound):
            return False
        self._hold(stored.etag, body)
        self._warn(
            f"Adopted the lock on {self._subject()} that an earlier run of this operation left behind "
            f"({view.describe(self._now())}); its deadline is renewed from now."
        )
        return True

    def _take_over(self, view: LockView) -> bool:
        """Delete an expired foreign lock, conditional on the ETag just read. A 412 means it
        was renewed or taken meanwhile -> contention. False when it is already gone."""
        try:
            self.bucket.delete(self.key, if_match=view.etag)
        except PreconditionFailed:
            current = read_lock(self.bucket, self.key)
            if current is None:
                return False
            raise LockContention(self.contention_message(current), view=current) from None
        except NotFound:
            return False
        self.took_over = view
        expired = (
            "its deadline is not a finite number (counts as expired)"
            if view.expires_at_ms is None
            else f"it expired at {format_ms(view.expires_at_ms)}"
        )
        operation = f" (operation: {display_safe(view.operation)})" if view.operation else ""
        self._warn(
            f"Took over the expired lock on {self._subject()} held by {view.holder()}{operation}: {expired}. "
            f"If that process is in fact still running, two writers are now operating on this stack."
        )
        return True

    # -- renewal -------------------------------------------------------------------------

    def start_renewal(self) -> None:
        """Renew in a daemon thread every `renew_interval_ms` until released or lost."""
        with self._mutex:
            if not self.held or self._released or (self._thread is not None and self._thread.is_alive()):
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._renew_loop, name=f"lock-renewal {self.key}", daemon=True)
            self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_interval_ms / 1000):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 - a dead renewal thread would fail silently
                self._warn(f"Renewing the lock on {self._subject()} failed unexpectedly: {exc}")
            if self.lost:
                return

    def stop_renewal(self) -> None:
        """Stop the renewal thread and wait for an in-flight renewal to finish."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)

    def renew(self) -> bool:
        """One renewal: PUT a new deadline `If-Match` the ETag last written. True when the
        lock is renewed (or a lost-response renewal adopted); False on a transient failure
        (retried next tick) or when the lock is not held or was found lost."""
        with self._mutex:
            if not self.held or self._released or self._info is None:
                return False
            now = self._now()
            info = LockInfo.model_validate(self._info.to_json_value())
            info.set("expiresAt", now + self.ttl_ms)  # same owner and timestamp, keys in place
            body = dump_lock(info)
            self._unconfirmed.append(body)
            try:
                stored = self.bucket.put(self.key, body, if_match=self._etag)
            except PreconditionFailed:
                return self._settle_conflict(now)
            except NotFound:
                # If-Match on a key that is gone: someone deleted our lock (a force-unlock).
                self._mark_lost(None)
                return False
            except EngineError as exc:
                self._transient(now, exc)
                return False
            self._hold(stored.etag, body)
            return True

    def _settle_conflict(self, now: int) -> bool:
        """A renewal got 412: ours with a lost answer (bytes we sent), or someone else's."""
        try:
            view = read_lock(self.bucket, self.key)
        except EngineError as exc:
            self._transient(now, exc)  # cannot tell yet: the next tick asks again
            return False
        if view is not None and view.raw in self._unconfirmed:
            self._hold(view.etag, view.raw)
            return True
        self._mark_lost(view)
        return False

    def _transient(self, now: int, exc: EngineError) -> None:
        deadline = self.expires_at_ms
        if deadline is not None and now >= deadline and not self._deadline_warned:
            self._deadline_warned = True
            self._warn(
                f"Could not renew the lock on {self._subject()} before its deadline "
                f"{format_ms(deadline)} ({exc}); another process may now take it over. Still retrying."
            )

    def _mark_lost(self, view: LockView | None) -> None:
        self.lost = True
        self._stop.set()
        now_held = view.describe(self._now()) if view is not None else "gone (deleted by someone else)"
        self._warn(
            f"Lost the lock on {self._subject()}: it is now {now_held}. Another process may now be "
            f"writing to this stack; this operation will not delete the current lock when it ends."
        )

    # -- release -------------------------------------------------------------------------

    def release(self) -> None:
        """Stop renewing and delete the lock if it is still ours; purge its noncurrent
        versions. Never raises; a second call does nothing."""
        with self._mutex:
            if self._released:
                return
            self._released = True  # tombstone: a second release is a no-op, never owner-blind
            self._stop.set()
        self.stop_renewal()
        with self._mutex:
            if not self.held:
                return  # never acquired, or lost (already warned): not ours to delete
            try:
                if self._delete_if_ours():
                    _, failure = purge_lock_versions(self.bucket, self.key)
                    if failure:
                        self.purge_failures.append(failure)  # release path: silent, as cdkd's debug
            except Exception as exc:  # noqa: BLE001 - release must never fail the operation
                self._warn(f"Could not release the lock on {self._subject()}: {exc}")
            finally:
                self._etag = None

    def _delete_if_ours(self) -> bool:
        """True when the lock is gone afterwards (deleted here or already)."""
        try:
            self.bucket.delete(self.key, if_match=self._etag)
            return True
        except PreconditionFailed:
            self._warn(
                f"Did not release the lock on {self._subject()}: it changed since this operation last wrote "
                f"it (ETag {self._etag}), so it is someone else's now; left in place."
            )
            return False
        except NotFound:
            return True
        except EngineError as exc:
            if not (isinstance(exc, AccessDenied) or getattr(exc, "status", None) in (403, 501)):
                self._warn(
                    f"Could not release the lock on {self._subject()}: {exc}. It lapses at its deadline "
                    f"{format_ms(self.expires_at_ms)}, or force-unlock it."
                )
                return False
            return self._delete_unconditionally_if_ours(exc)

    def _delete_unconditionally_if_ours(self, cause: EngineError) -> bool:
        """The endpoint or policy will not evaluate If-Match (403/501): re-read by hand and
        drop the condition only for a lock that is still ours or cannot be read."""
        try:
            view = read_lock(self.bucket, self.key)
        except EngineError as exc:
            self._warn(
                f"Did not release the lock on {self._subject()}: the conditional delete was refused ({cause}) "
                f"and re-reading the lock to confirm it is still ours failed ({exc}). It lapses at its "
                f"deadline {format_ms(self.expires_at_ms)}, or force-unlock it."
            )
            return False
        if view is None:
            return True
        ours = self._info is not None and (view.owner, view.timestamp_ms) == (
            self._info.get("owner"),
            self._info.get("timestamp"),
        )
        if view.readable and not ours:
            self._warn(
                f"Did not release the lock on {self._subject()}: it is now {view.describe(self._now())}; left in place."
            )
            return False
        try:
            self.bucket.delete(self.key)
        except EngineError as exc:
            self._warn(f"Could not release the lock on {self._subject()}: {exc}")
            return False
        return True

    # -- messages ------------------------------------------------------------------------

    def contention_message(self, view: LockView) -> str:
        """cdkd's contention message (reference §3.5), with this app's recovery command last."""
        now = self._now()
        problem = view.problem()
        if problem is not None:
            return (
                f"Could not acquire the lock for {self._subject()}: {problem}, so another process may hold it. "
                f"It will not expire on its own: wait, or if you are certain no other process is active, "
                f"force-unlock it; removing a lock that cannot be read needs a second confirmation. "
                f"{self._recovery()}"
            )
        operation = f", operation: {display_safe(view.operation)}" if view.operation else ""
        named = bool(display_safe(view.owner))
        advice = (
            "That process is still running: wait for it to finish, and force-unlock only if you are certain it is gone."
            if named
            else "Wait, or if you are certain no other process is active, force-unlock it."
        )
        return (
            f"Could not acquire the lock for {self._subject()}: held by {view.holder()}{operation}, "
            f"expires {view.expiry_phrase(now)}. {advice} {self._recovery()}"
        )

    def _subject(self) -> str:
        if self.stack is None:
            return f"s3://{self.bucket.name}/{self.key}"
        kind = "nested stack" if "~" in self.stack else "stack"
        where = f" ({self.region})" if self.region else " (legacy, no region)"
        return f"{kind} {display_safe(self.stack) or '<unrenderable>'}{where}"

    def _recovery(self) -> str:
        """The command that clears the lock, LAST and unwrapped; omitted when the names
        would not survive sanitising (cdkd does the same)."""
        if (
            self.stack is None
            or display_safe(self.stack) != self.stack
            or (self.region is not None and display_safe(self.region) != self.region)
        ):
            return f"Inspect the lock object s3://{self.bucket.name}/{self.key} directly."
        command = ["python", "manage.py", "cdkd", "force-unlock", _shell_quote(self.stack)]
        if self.account_id:
            command += ["--account", _shell_quote(self.account_id)]
        if self.region:
            command += ["--stack-region", _shell_quote(self.region)]
        return "To remove it: " + " ".join(command) + " --yes"

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        if self.on_warning is not None:
            try:
                self.on_warning(message)
            except Exception:  # noqa: BLE001, S110 - a broken log sink must not break the lock
                pass

    def _now(self) -> int:
        return _now_ms(self.clock)


# --- force-unlock ---------------------------------------------------------------------------


@dataclass
class ForceUnlockResult:
    """What `force_unlock` did. `deleted` False with `already_gone` True: there was no lock."""

    key: str
    deleted: bool
    already_gone: bool
    unconditional: bool
    purged: int = 0  # noncurrent versions and delete markers permanently removed
    previous: LockView | None = None  # the lock deleted, when it was read (unconditional path)
    warnings: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        if self.already_gone:
            return f"no lock at {self.key} any more (already gone): nothing deleted"
        how = "unconditionally" if self.unconditional else "conditional on the ETag shown"
        purged = f"; {self.purged} noncurrent version(s) purged" if self.purged else ""
        return f"deleted the lock at {self.key} ({how}){purged}"


def force_unlock(
    bucket: StateBucket, key: str, *, expected_etag: str | None, unconditional: bool = False
) -> ForceUnlockResult:
    """Delete the lock at `key` only if it is still the one the person saw (`If-Match`
    `expected_etag`); raise `LockChanged` (carrying the new `LockView`) when it is not. A
    missing lock is `already_gone`. `unconditional=True` is the second confirmation for an
    unreadable lock: it drops the If-Match (after a best-effort check that the ETag is
    still the one shown). Then purges the key's noncurrent versions, warning on failure.
    Only ever touches `key`, which must be a lock.json key (never state.json)."""
    if key.rsplit("/", 1)[-1] != LOCK_FILE:
        raise ValueError(f"force_unlock only deletes {LOCK_FILE} keys, not {key!r}")
    if not unconditional and not expected_etag:
        raise ValueError("force_unlock needs the ETag of the lock the person saw (or unconditional=True)")
    result = ForceUnlockResult(key=key, deleted=False, already_gone=False, unconditional=unconditional)
    if unconditional:
        try:
            current = read_lock(bucket, key)
        except EngineError:
            current = None  # unreadable by policy too: the confirmation covers deleting blind
            seen_nothing = False
        else:
            seen_nothing = current is None
        if current is not None and expected_etag and current.etag != expected_etag:
            raise LockChanged(_changed_message(key, current), view=current)
        if seen_nothing:
            result.already_gone = True
        else:
            bucket.delete(key)
            result.deleted = True
            result.previous = current
    else:
        try:
            bucket.delete(key, if_match=expected_etag)
            result.deleted = True
        except NotFound:
            result.already_gone = True
        except PreconditionFailed:
            current = read_lock(bucket, key)
            if current is None:
                result.already_gone = True  # changed, then released: nothing left to unlock
            else:
                raise LockChanged(_changed_message(key, current), view=current) from None
    result.purged, warning = purge_lock_versions(bucket, key)
    if warning:
        result.warnings.append(warning)
    return result


def _changed_message(key: str, current: LockView) -> str:
    return (
        f"the lock at {key} changed since it was shown: it is now {current.describe()} (ETag {current.etag}); "
        f"nothing was deleted. Review the new lock and force-unlock again if it is still abandoned."
    )


# --- helpers --------------------------------------------------------------------------------


def _maybe_applied(exc: EngineError) -> bool:
    """True when a failed conditional PUT may still have been applied: no answer at all
    (timeout, dropped connection), a 5xx, or a 409 conflict. 4xx refusals were not."""
    status = getattr(exc, "status", None)
    return status is None or status >= 500 or status == 409


def _subject_of(key: str, stack: str | None, region: str | None) -> tuple[str | None, str | None]:
    """(stack, region) named by a lock key, unless given. `{prefix}/{stack}/{region}/lock.json`
    or the legacy `{prefix}/{stack}/lock.json` (told apart by the region's shape)."""
    if stack is not None:
        return stack, region
    parts = key.split("/")
    if len(parts) >= 4 and is_region_shaped(parts[-2]):
        return parts[-3], parts[-2]
    if len(parts) >= 3:
        return parts[-2], None
    return None, None


def _shell_quote(value: str) -> str:
    """cdkd's quoting: bare when only `[A-Za-z0-9._/@:+-]`, else single-quoted."""
    if value and all(c.isascii() and (c.isalnum() or c in "._/@:+-") for c in value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"
