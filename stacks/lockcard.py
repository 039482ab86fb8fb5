"""The lock card's verdict: is the lock's holder likely still at work, or gone?

A pure function over what the mirror knows (the lock, the holder's newest run and event in
the event store, the record's last write, whether a rollback journal is left over), so the
rules are unit-tested without a database. It is advice before a force-unlock, never a
decision: every verdict comes with its reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALIVE = "likely alive"
ABANDONED = "likely abandoned"
UNSURE = "unsure"

# A holder with no event and no write for this long is taken to be gone (cdkd writes an
# event per resource step, so a working run is rarely quiet this long).
QUIET_MS = 15 * 60 * 1000


@dataclass(frozen=True)
class Evidence:
    now_ms: int
    readable: bool = True
    timestamp_ms: int | None = None  # when the lock was taken
    expires_at_ms: int | None = None
    run_id: str = ""  # the stack's newest run
    run_started_ms: int | None = None
    run_finished: bool = False  # the run's stream has RUN_FINISHED (or the index a finishedAt)
    run_result: str = ""
    last_event_ms: int | None = None  # the newest event of that run
    last_event_type: str = ""
    record_written_ms: int | None = None  # newest of the record's lastModified and S3's
    journal: bool | None = None  # None: the mirror does not know (not synced since it records journals)
    journal_modified_ms: int | None = None  # the leftover journal's S3 LastModified


@dataclass
class Verdict:
    verdict: str
    reasons: list[str] = field(default_factory=list)
    time_left: str = ""  # "12 minutes", "expired 3 hours ago", "no deadline"


def humanize_ms(ms: int) -> str:
    seconds = max(0, ms) // 1000
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


def time_left(e: Evidence) -> str:
    if e.expires_at_ms is None:
        return "no deadline (cdkd counts it as expired)"
    left = e.expires_at_ms - e.now_ms
    return humanize_ms(left) + " left" if left > 0 else f"expired {humanize_ms(-left)} ago"


def _journal(e: Evidence, taken: int | None) -> tuple[int, str]:
    """What a leftover rollback journal says of the holder: +1 alive, -1 abandoned, 0 nothing.
    cdkd writes the journal when a deploy fails or is interrupted, and before an automatic
    rollback; the run that wrote it deletes it (a success) or settles it, then unlocks."""
    if e.journal is None:
        return 0, "Rollback journal: unknown (the stack has not been synced since the mirror records journals)."
    if not e.journal:
        return 0, "No rollback journal is left over."
    modified = e.journal_modified_ms
    if modified is None or taken is None:
        return -1, "A rollback journal is left over: a deploy failed or was interrupted; a rollback replays it."
    if modified < taken:
        return 0, (
            f"A rollback journal from {humanize_ms(taken - modified)} before this lock is left over from an earlier "
            f"deploy; it says nothing of this holder."
        )
    since = e.now_ms - modified
    if since <= QUIET_MS:
        return 1, (
            f"The holder wrote a rollback journal {humanize_ms(since)} ago: its deploy failed or was interrupted, "
            f"and it may be rolling back now."
        )
    return -1, (
        f"A rollback journal was written under this lock {humanize_ms(since)} ago and left: the holder's deploy "
        f"failed or was interrupted and did not finish; a rollback replays it once the lock is gone."
    )


def judge(e: Evidence) -> Verdict:
    """The verdict and why. Rules, first match wins for the verdict; every reason is kept."""
    reasons: list[str] = []
    alive = abandoned = 0
    expired = e.expires_at_ms is None or e.now_ms >= e.expires_at_ms
    if not e.readable:
        reasons.append("lock.json cannot be read, so neither its holder nor its deadline is known.")
    elif expired:
        abandoned += 1
        reasons.append(f"The deadline has passed ({time_left(e)}); cdkd lets the next run take the lock.")
    else:
        reasons.append(f"The deadline is still ahead ({time_left(e)}).")

    taken = e.timestamp_ms
    run_is_holders = bool(e.run_id) and (taken is None or (e.run_started_ms or 0) >= taken - 60_000)
    if not e.run_id:
        reasons.append("The event store holds no run of this stack.")
    elif not run_is_holders:
        reasons.append(f"No run started since the lock was taken (the newest, {e.run_id}, is older).")
    elif e.run_finished:
        abandoned += 2
        result = f" ({e.run_result})" if e.run_result else ""
        reasons.append(f"The holder's run {e.run_id} has finished{result}, yet the lock is still there.")
    if run_is_holders and not e.run_finished and e.last_event_ms is not None:
        quiet = e.now_ms - e.last_event_ms
        if quiet <= QUIET_MS:
            alive += 2
            reasons.append(f"The holder's run wrote {e.last_event_type or 'an event'} {humanize_ms(quiet)} ago.")
        else:
            abandoned += 1
            reasons.append(
                f"The holder's run has been quiet for {humanize_ms(quiet)} (last: {e.last_event_type or 'an event'})."
            )

    if e.record_written_ms is not None and taken is not None:
        if e.record_written_ms >= taken:
            since = e.now_ms - e.record_written_ms
            if since <= QUIET_MS:
                alive += 1
            reasons.append(f"The record was written after the lock was taken, {humanize_ms(since)} ago.")
        else:
            reasons.append(f"The record was last written {humanize_ms(taken - e.record_written_ms)} before the lock.")
    elif taken is None:
        reasons.append("The lock gives no timestamp, so writes cannot be set against it.")

    weight, reason = _journal(e, taken)
    if weight > 0:
        alive += 1
    elif weight < 0:
        abandoned += 1
    reasons.append(reason)

    if alive and alive >= abandoned:
        verdict = ALIVE
    elif abandoned:
        verdict = ABANDONED
    elif taken is not None and e.now_ms - taken > QUIET_MS and e.readable:
        verdict = ABANDONED
        reasons.append(
            f"Nothing was heard from the holder in the {humanize_ms(e.now_ms - taken)} since it took the lock."
        )
    elif e.readable and taken is not None:
        verdict = ALIVE
        reasons.append(f"The lock was taken only {humanize_ms(e.now_ms - taken)} ago.")
    else:
        verdict = UNSURE
    return Verdict(verdict, reasons, time_left(e) if e.readable else "")
