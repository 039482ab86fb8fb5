"""The lock card's verdict rules (stacks.lockcard.judge), without a database."""

from __future__ import annotations

from stacks.lockcard import ABANDONED, ALIVE, QUIET_MS, UNSURE, Evidence, humanize_ms, judge

NOW = 1_800_000_000_000
MIN = 60_000


def lock(**fields) -> Evidence:
    base = {"now_ms": NOW, "timestamp_ms": NOW - 5 * MIN, "expires_at_ms": NOW + 55 * MIN}
    base.update(fields)
    return Evidence(**base)


def test_it_humanizes_durations() -> None:
    assert humanize_ms(0) == "0 seconds"
    assert humanize_ms(1000) == "1 second"
    assert humanize_ms(90 * MIN) == "1 hour"
    assert humanize_ms(3 * 86_400_000) == "3 days"


def test_it_says_time_left_and_how_long_ago_it_expired() -> None:
    assert judge(lock()).time_left == "55 minutes left"
    assert judge(lock(expires_at_ms=NOW - 2 * 3_600_000)).time_left == "expired 2 hours ago"
    assert judge(lock(expires_at_ms=None)).time_left.startswith("no deadline")


def test_a_holder_writing_events_now_is_likely_alive() -> None:
    verdict = judge(
        lock(run_id="r1", run_started_ms=NOW - 4 * MIN, last_event_ms=NOW - 20_000, last_event_type="RESOURCE_STARTED")
    )
    assert verdict.verdict == ALIVE
    assert any("RESOURCE_STARTED 20 seconds ago" in r for r in verdict.reasons)


def test_a_holder_whose_run_finished_is_likely_abandoned() -> None:
    verdict = judge(
        lock(run_id="r1", run_started_ms=NOW - 4 * MIN, run_finished=True, run_result="FAILED", last_event_ms=NOW)
    )
    assert verdict.verdict == ABANDONED
    assert any("has finished (FAILED), yet the lock is still there" in r for r in verdict.reasons)


def test_a_quiet_holder_is_likely_abandoned() -> None:
    verdict = judge(
        lock(
            timestamp_ms=NOW - 50 * MIN,
            run_id="r1",
            run_started_ms=NOW - 50 * MIN,
            last_event_ms=NOW - QUIET_MS - MIN,
            last_event_type="RESOURCE_STARTED",
        )
    )
    assert verdict.verdict == ABANDONED
    assert any("quiet for 16 minutes" in r for r in verdict.reasons)


def test_an_expired_lock_with_no_activity_is_likely_abandoned() -> None:
    verdict = judge(lock(timestamp_ms=NOW - 3 * 3_600_000, expires_at_ms=NOW - 2 * 3_600_000))
    assert verdict.verdict == ABANDONED
    assert "The deadline has passed (expired 2 hours ago)" in verdict.reasons[0]


def test_an_expired_lock_whose_holder_still_writes_is_likely_alive() -> None:
    verdict = judge(
        lock(
            timestamp_ms=NOW - 70 * MIN,
            expires_at_ms=NOW - 10 * MIN,
            run_id="r1",
            run_started_ms=NOW - 70 * MIN,
            last_event_ms=NOW - MIN,
        )
    )
    assert verdict.verdict == ALIVE


def test_a_fresh_lock_with_no_run_yet_is_likely_alive_and_an_old_one_abandoned() -> None:
    assert judge(lock(timestamp_ms=NOW - MIN)).verdict == ALIVE
    old = judge(lock(timestamp_ms=NOW - 40 * MIN))
    assert old.verdict == ABANDONED
    assert any("Nothing was heard from the holder in the 40 minutes" in r for r in old.reasons)


def test_a_run_older_than_the_lock_is_not_the_holders() -> None:
    verdict = judge(
        lock(
            timestamp_ms=NOW - 40 * MIN,
            run_id="old",
            run_started_ms=NOW - 5 * 3_600_000,
            run_finished=True,
            last_event_ms=NOW - 5 * 3_600_000,
        )
    )
    assert any("No run started since the lock was taken" in r for r in verdict.reasons)
    assert not any("has finished" in r for r in verdict.reasons)


def test_it_sets_the_records_last_write_against_the_lock() -> None:
    after = judge(lock(record_written_ms=NOW - 2 * MIN))
    assert after.verdict == ALIVE
    assert any("written after the lock was taken, 2 minutes ago" in r for r in after.reasons)
    before = judge(lock(record_written_ms=NOW - 65 * MIN))
    assert any("last written 1 hour before the lock" in r for r in before.reasons)


def test_it_says_the_journal_is_unknown_or_counts_a_leftover_one() -> None:
    assert any("Rollback journal: unknown" in r for r in judge(lock()).reasons)
    leftover = judge(lock(timestamp_ms=NOW - 20 * MIN, journal=True))
    assert leftover.verdict == ABANDONED
    assert any("rollback journal is left over" in r for r in leftover.reasons)
    assert any("No rollback journal" in r for r in judge(lock(journal=False)).reasons)


def test_it_calls_a_journal_written_under_the_lock_and_left_likely_abandoned() -> None:
    verdict = judge(lock(timestamp_ms=NOW - 50 * MIN, journal=True, journal_modified_ms=NOW - 40 * MIN))
    assert verdict.verdict == ABANDONED
    assert any("written under this lock 40 minutes ago and left" in r for r in verdict.reasons)


def test_it_calls_a_journal_the_holder_just_wrote_likely_alive() -> None:
    # Written before an automatic rollback: the holder is rolling back now.
    verdict = judge(lock(timestamp_ms=NOW - 20 * MIN, journal=True, journal_modified_ms=NOW - 2 * MIN))
    assert verdict.verdict == ALIVE
    assert any("wrote a rollback journal 2 minutes ago" in r for r in verdict.reasons)


def test_it_takes_a_journal_older_than_the_lock_as_no_evidence() -> None:
    fresh = judge(lock(timestamp_ms=NOW - MIN, journal=True, journal_modified_ms=NOW - 3 * 3_600_000))
    assert fresh.verdict == ALIVE  # the fresh lock decides, not the earlier deploy's journal
    assert any("from 2 hours before this lock" in r and "nothing of this holder" in r for r in fresh.reasons)
    without = judge(lock(timestamp_ms=NOW - MIN, journal=False))
    assert without.verdict == fresh.verdict


def test_an_unreadable_lock_with_no_other_evidence_is_unsure() -> None:
    verdict = judge(lock(readable=False, timestamp_ms=None, expires_at_ms=None))
    assert verdict.verdict == UNSURE
    assert verdict.time_left == ""
    assert "cannot be read" in verdict.reasons[0]
