"""Lost answers to writes, through the fault proxy in front of moto: every state write tells
its own landed write (the SDK's retry meets it as a 412 or a 404) from someone else's, and
every operation's result, its audit event and the bucket's bytes agree."""

from __future__ import annotations

import pytest

from engine.backend import ABSENT_ETAG, StateBucket
from engine.errors import NotFound, PreconditionFailed, Throttled

pytestmark = pytest.mark.integration

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
KEY = "cdkd/App/us-east-1/state.json"


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(A1, BUCKET)
    return StateBucket.open(aws.access(A1), actor="alice", bucket=BUCKET, region="us-east-1")


# --- the backend ---------------------------------------------------------------------------


def test_it_recognises_its_own_conditional_put_after_a_lost_answer(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.drop_response("PutObject", key=KEY)

    written = bucket.put(KEY, b"v2", if_match=read["ETag"])

    assert aws.get(A1, BUCKET, KEY) == b"v2"
    assert written.recovered and written.etag == aws.etag(A1, BUCKET, KEY)
    assert aws.requests["PutObject"] == 2  # the SDK's retry met our own write as a 412


def test_it_still_reports_someone_elses_write_as_a_lost_condition(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.put(A1, BUCKET, KEY, b"theirs")

    with pytest.raises(PreconditionFailed):
        bucket.put(KEY, b"mine", if_match=read["ETag"])

    assert aws.get(A1, BUCKET, KEY) == b"theirs"
    assert aws.requests["GetObject"] == 0  # a first-attempt 412 is not read back


def test_it_recognises_its_own_conditional_delete_after_a_lost_answer(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.drop_response("DeleteObject", key=KEY)

    assert bucket.delete(KEY, if_match=read["ETag"]) is True

    assert aws.etag(A1, BUCKET, KEY) is None


def test_it_recognises_a_write_answered_500_after_it_landed(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.fail_request("PutObject", 500, "InternalError", key=KEY, commit=True)

    written = bucket.put(KEY, b"v2", if_match=read["ETag"])

    assert written.recovered and aws.get(A1, BUCKET, KEY) == b"v2"


def test_it_retries_a_slow_down_and_reports_throttling_truthfully(aws, bucket):
    read = aws.put(A1, BUCKET, KEY, b"v1")
    aws.proxy.fail_request("PutObject", 503, "SlowDown", key=KEY, nth=1, count=1)

    bucket.put(KEY, b"v2", if_match=read["ETag"])  # one 503, then the SDK's retry lands
    assert aws.get(A1, BUCKET, KEY) == b"v2"

    aws.proxy.fail_request("PutObject", 503, "SlowDown", key=KEY, count=99)
    with pytest.raises(Throttled, match="SlowDown"):
        bucket.put(KEY, b"v3", if_match=aws.etag(A1, BUCKET, KEY))
    assert aws.get(A1, BUCKET, KEY) == b"v2"  # it did not land, and it is not claimed to have


def test_it_deletes_an_absent_key_only_while_it_stays_absent(aws, bucket):
    with pytest.raises(NotFound):
        bucket.delete(KEY, if_match=ABSENT_ETAG)
    assert bucket.versions(KEY) == []  # no stray delete marker

    aws.put(A1, BUCKET, KEY, b"appeared")
    with pytest.raises(PreconditionFailed):
        bucket.delete(KEY, if_match=ABSENT_ETAG)
    assert aws.get(A1, BUCKET, KEY) == b"appeared"
