"""Force-unlock (engine.locks.force_unlock and the engine.forceunlock operation) against
the moto server through the proxy."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import pytest

from engine import forceunlock
from engine.backend import StateBucket
from engine.keys import KeyLayout
from engine.locks import LockChanged, StackLock, force_unlock, read_lock
from engine.operations import Context, OperationRefused, Plan, spec_for

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
KEY = "cdkd/app/us-east-1/lock.json"
STATE_KEY = "cdkd/app/us-east-1/state.json"
STATE = b'{\n  "version": 11,\n  "stackName": "app",\n  "region": "us-east-1",\n  "resources": {}\n}'
MINUTE_MS = 60_000


def now_ms() -> int:
    return int(time.time() * 1000)


def cdkd_lock(owner: str = "goto@macbook:12345", *, age_min: int = 5, ttl_min: int = 30, operation="deploy") -> bytes:
    ts = now_ms() - age_min * MINUTE_MS
    body = {"owner": owner, "timestamp": ts, "expiresAt": ts + ttl_min * MINUTE_MS, "operation": operation}
    return json.dumps(body, separators=(",", ":")).encode()


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    aws.put(ACCOUNT, BUCKET, STATE_KEY, STATE)
    aws.put(ACCOUNT, BUCKET, STATE_KEY, STATE + b" ")  # state.json has history of its own
    opened = StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region="us-east-1")
    aws.reset_counts()
    return opened


def versions(aws, key: str) -> list[tuple[str, bool, bool]]:
    """(version id, is latest, is a delete marker) for every version of `key`, from moto."""
    listing = aws.s3(ACCOUNT).list_object_versions(Bucket=BUCKET, Prefix=key)
    found = [(v["VersionId"], v["IsLatest"], False) for v in listing.get("Versions", []) if v["Key"] == key]
    found += [(m["VersionId"], m["IsLatest"], True) for m in listing.get("DeleteMarkers", []) if m["Key"] == key]
    return found


def state_snapshot(aws) -> tuple[bytes, list[tuple[str, bool, bool]]]:
    return aws.get(ACCOUNT, BUCKET, STATE_KEY), sorted(versions(aws, STATE_KEY))


def context(bucket: StateBucket, **params: object) -> Context:
    return Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack="app",
        region="us-east-1",
        params=dict(params),
        operation_id="op-9",
        person="carol",
    )


def seed_lock_with_history(aws, body: bytes) -> str:
    """Two earlier lock cycles (bodies and markers), then `body` as the current lock."""
    for i in range(2):
        aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(f"old-{i}@host:1", age_min=90))
        aws.delete(ACCOUNT, BUCKET, KEY)
    return aws.put(ACCOUNT, BUCKET, KEY, body)["ETag"]


# --- force_unlock ------------------------------------------------------------------------


def test_it_deletes_the_lock_it_was_shown_and_purges_its_versions(aws, bucket):
    etag = seed_lock_with_history(aws, cdkd_lock())
    before = state_snapshot(aws)
    deletes: list[Mapping[str, str]] = []
    aws.proxy.add_hook(lambda api, m, p, h: deletes.append(dict(h)) if api == "DeleteObject" else None)

    result = force_unlock(bucket, KEY, expected_etag=etag)

    assert result.deleted and not result.already_gone and not result.unconditional
    assert [h.get("if-match") for h in deletes] == [etag]
    assert read_lock(bucket, KEY) is None
    lock_versions = versions(aws, KEY)
    assert len(lock_versions) == 1 and lock_versions[0][1:] == (True, True)  # only the current marker
    assert result.purged == 5  # 3 bodies, 2 older markers
    assert result.warnings == []
    assert state_snapshot(aws) == before


def test_it_refuses_a_lock_that_changed_and_names_the_new_holder(aws, bucket):
    shown = aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(age_min=40))["ETag"]
    newer = cdkd_lock("cdkd-admin:dave@worker-2:op-3", age_min=0, operation="orphan")
    aws.put(ACCOUNT, BUCKET, KEY, newer)  # taken over since the person looked
    before = state_snapshot(aws)

    with pytest.raises(LockChanged) as refused:
        force_unlock(bucket, KEY, expected_etag=shown)

    assert "changed since it was shown" in str(refused.value)
    assert "held by cdkd-admin:dave@worker-2:op-3, operation: orphan" in str(refused.value)
    assert refused.value.view.raw == newer and refused.value.view.etag != shown
    assert aws.get(ACCOUNT, BUCKET, KEY) == newer
    assert len(versions(aws, KEY)) == 2  # nothing deleted, nothing purged
    assert aws.requests["ListObjectVersions"] == 0
    assert state_snapshot(aws) == before


def test_a_missing_lock_is_reported_as_already_gone(aws, bucket):
    etag = aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock())["ETag"]
    aws.delete(ACCOUNT, BUCKET, KEY)  # released by its holder meanwhile

    result = force_unlock(bucket, KEY, expected_etag=etag)

    assert result.already_gone and not result.deleted
    assert "already gone" in result.summary
    assert [v[1:] for v in versions(aws, KEY)] == [(True, True)]  # the release's marker stays current


def test_it_deletes_an_unreadable_lock_unconditionally_only_when_asked(aws, bucket):
    etag = aws.put(ACCOUNT, BUCKET, KEY, b'{"owner":"goto@mac')["ETag"]
    deletes: list[Mapping[str, str]] = []
    aws.proxy.add_hook(lambda api, m, p, h: deletes.append(dict(h)) if api == "DeleteObject" else None)

    result = force_unlock(bucket, KEY, expected_etag=etag, unconditional=True)

    assert result.deleted and result.unconditional
    assert result.previous is not None and result.previous.raw == b'{"owner":"goto@mac'
    assert ["if-match" in h for h in deletes] == [False]
    assert read_lock(bucket, KEY) is None


def test_the_unconditional_path_still_refuses_a_lock_that_changed(aws, bucket):
    etag = aws.put(ACCOUNT, BUCKET, KEY, b"{trunc")["ETag"]
    newer = cdkd_lock("cdkd-admin:dave@worker-2:op-3", age_min=0)
    aws.put(ACCOUNT, BUCKET, KEY, newer)

    with pytest.raises(LockChanged, match="held by cdkd-admin:dave@worker-2:op-3"):
        force_unlock(bucket, KEY, expected_etag=etag, unconditional=True)

    assert aws.get(ACCOUNT, BUCKET, KEY) == newer


def test_a_denied_purge_is_a_warning_not_a_failure(aws, bucket):
    etag = seed_lock_with_history(aws, cdkd_lock())
    aws.proxy.deny_operation("DeleteObjects")

    result = force_unlock(bucket, KEY, expected_etag=etag)

    assert result.deleted and read_lock(bucket, KEY) is None
    assert len(result.warnings) == 1
    assert "Grant s3:ListBucketVersions and s3:DeleteObjectVersion" in result.warnings[0]
    assert result.warnings[0].endswith(f"Failures: {KEY} (AccessDenied: s3:DeleteObjectVersion)")


def test_it_never_deletes_anything_but_a_lock_key(aws, bucket):
    with pytest.raises(ValueError, match="only deletes lock.json"):
        force_unlock(bucket, STATE_KEY, expected_etag='"x"')

    assert aws.requests["DeleteObject"] == 0 and aws.get(ACCOUNT, BUCKET, STATE_KEY) == STATE + b" "


def test_a_force_unlocked_holder_finds_its_lock_lost(aws, bucket):
    lock = StackLock(bucket, KEY, owner="cdkd-admin:alice@w:op-1", operation="orphan")
    lock.acquire()

    force_unlock(bucket, KEY, expected_etag=lock.etag)
    successor = StackLock(bucket, KEY, owner="cdkd-admin:bob@w:op-2", operation="orphan").acquire()

    assert lock.renew() is False and lock.lost
    lock.release()
    assert aws.get(ACCOUNT, BUCKET, KEY) == successor.body


# --- the operation -----------------------------------------------------------------------


def test_the_operation_is_registered():
    spec = spec_for("force-unlock")

    assert spec is forceunlock.SPEC
    assert (spec.kind, spec.label, spec.cancellable) == ("force-unlock", "Force-unlock", False)


def test_the_plan_shows_the_lock_and_binds_to_its_etag(aws, bucket):
    body = cdkd_lock(age_min=5)
    etag = aws.put(ACCOUNT, BUCKET, KEY, body)["ETag"]
    info = json.loads(body)

    plan = forceunlock.SPEC.plan(context(bucket))

    assert plan.etag == etag
    assert plan.data == {"lock_key": KEY, "unreadable": False, "holder": "goto@macbook:12345"}
    assert plan.changes[:3] == [
        "holder: goto@macbook:12345",
        "operation: deploy",
        f"acquired: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(info['timestamp'] / 1000))}",
    ]
    assert plan.changes[3].startswith("deadline: ") and plan.changes[3].endswith("(in ~25m)")
    assert plan.changes[4] == "status: live"
    assert "may still be running" in plan.warnings[0]
    assert Plan.from_json(json.loads(json.dumps(plan.as_json()))).digest == plan.digest


def test_the_plan_says_expired_for_a_lapsed_lock(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(age_min=45))

    plan = forceunlock.SPEC.plan(context(bucket))

    assert plan.changes[-1] == "status: expired" and plan.warnings == []
    assert plan.changes[3].endswith("(already expired)")


def test_the_plan_refuses_when_there_is_no_lock(aws, bucket):
    with pytest.raises(OperationRefused, match=r"^no lock on app \(us-east-1\): nothing to unlock$"):
        forceunlock.SPEC.plan(context(bucket))


def test_executing_the_plan_deletes_the_lock_and_leaves_state_alone(aws, bucket):
    seed_lock_with_history(aws, cdkd_lock())
    ctx = context(bucket)
    plan = forceunlock.SPEC.plan(ctx)
    before = state_snapshot(aws)
    logged: list[tuple[str, str]] = []
    ctx.log = lambda level, message: logged.append((level, message))

    outcome = forceunlock.SPEC.execute(ctx, plan)

    assert outcome.status == "succeeded"
    assert (outcome.etag_before, outcome.etag_after) == (plan.etag, None)
    assert outcome.summary.startswith("Removed the lock held by goto@macbook:12345 on app (us-east-1)")
    assert outcome.details["deleted"] and outcome.details["purged_versions"] == 5
    assert read_lock(bucket, KEY) is None
    assert [v[1:] for v in versions(aws, KEY)] == [(True, True)]
    assert state_snapshot(aws) == before
    assert ("info", outcome.summary) in logged


def test_executing_a_stale_plan_refuses_and_shows_the_new_lock(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, cdkd_lock(age_min=45))
    ctx = context(bucket)
    plan = forceunlock.SPEC.plan(ctx)
    newer = cdkd_lock("cdkd-admin:dave@worker-2:op-3", age_min=0)
    aws.put(ACCOUNT, BUCKET, KEY, newer)

    with pytest.raises(LockChanged, match="held by cdkd-admin:dave@worker-2:op-3"):
        forceunlock.SPEC.execute(ctx, plan)

    assert aws.get(ACCOUNT, BUCKET, KEY) == newer


def test_an_unreadable_lock_needs_the_second_confirmation(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, b"\x00\x01 not json")
    before = state_snapshot(aws)
    plan = forceunlock.SPEC.plan(context(bucket))
    assert plan.data["unreadable"] is True
    assert plan.changes[0].startswith("lock: lock.json cannot be read")

    for params in ({}, {"confirm_unreadable": "yes"}, {"confirm_unreadable": 1}):
        with pytest.raises(OperationRefused, match="needs a second confirmation"):
            forceunlock.SPEC.execute(context(bucket, **params), plan)
        assert aws.get(ACCOUNT, BUCKET, KEY) == b"\x00\x01 not json"

    outcome = forceunlock.SPEC.execute(context(bucket, confirm_unreadable=True), plan)

    assert outcome.status == "succeeded" and outcome.details["unconditional"] is True
    assert read_lock(bucket, KEY) is None
    assert state_snapshot(aws) == before


def test_a_json_null_lock_is_treated_as_unreadable(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, b"null")

    plan = forceunlock.SPEC.plan(context(bucket))

    assert plan.data["unreadable"] is True
    assert "JSON null, not a lock object" in plan.changes[0]
