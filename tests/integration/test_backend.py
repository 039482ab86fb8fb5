"""engine.backend.StateBucket against moto through the proxy."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.config import Config

from engine.backend import ObjectInfo, StateBucket
from engine.errors import AccessDenied, BucketNotFound, NotFound, PreconditionFailed, Throttled

pytestmark = pytest.mark.integration

ACCOUNT = "111111111111"
BUCKET = f"cdkd-state-{ACCOUNT}"
KEY = "cdkd/app/us-east-1/state.json"


@pytest.fixture
def bucket(aws) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    opened = StateBucket.open(aws.access(ACCOUNT), actor="alice")
    aws.reset_counts()
    opened.requests.reset()
    return opened


def test_it_opens_the_resolved_bucket_and_counts_the_probes(aws):
    aws.make_bucket(ACCOUNT, BUCKET, region="eu-central-1")

    opened = StateBucket.open(aws.access(ACCOUNT), actor="alice")

    assert (opened.name, opened.region, opened.account_id) == (BUCKET, "eu-central-1", ACCOUNT)
    assert opened.resolved.source == "default"
    assert dict(opened.requests) == {"HeadBucket": 2, "GetBucketLocation": 1}
    assert aws.requests["HeadBucket"] == 2  # the new and the legacy name


def test_it_opens_a_known_bucket_without_probing(aws):
    aws.make_bucket(ACCOUNT, f"{BUCKET}-us-west-2", region="us-west-2")
    access = aws.access(ACCOUNT, region="us-west-2")

    opened = StateBucket.open(access, actor="sync", bucket=f"{BUCKET}-us-west-2", region="us-west-2")

    assert (opened.name, opened.region, opened.resolved.source) == (
        f"{BUCKET}-us-west-2",
        "us-west-2",
        "default-legacy",
    )
    assert "cdkd state migrate --region us-west-2" in opened.resolved.warning
    assert dict(opened.requests) == {}
    assert aws.requests["HeadBucket"] == aws.requests["GetBucketLocation"] == 0


def test_it_lists_every_page_of_a_large_prefix(aws, bucket):
    aws.put_many(ACCOUNT, BUCKET, {f"cdkd/s{i:04d}/us-east-1/state.json": "{}" for i in range(1005)})
    aws.put(ACCOUNT, BUCKET, "elsewhere/state.json", "{}")
    aws.reset_counts()

    listed = list(bucket.list_objects())

    assert len(listed) == 1005
    assert listed[0].key == "cdkd/s0000/us-east-1/state.json"
    assert listed[-1].key == "cdkd/s1004/us-east-1/state.json"
    assert listed[0].etag.startswith('"') and listed[0].etag.endswith('"')
    assert listed[0].size == 2
    assert bucket.requests["ListObjectsV2"] == 2
    assert aws.requests["ListObjectsV2"] == 2


def test_it_lists_another_prefix(aws, bucket):
    put = aws.put(ACCOUNT, BUCKET, "team/x/lock.json", b"{}")
    aws.put(ACCOUNT, BUCKET, KEY, b"{}")

    listed = list(bucket.list_objects("team/"))

    assert [(o.key, o.etag) for o in listed] == [("team/x/lock.json", put["ETag"])]
    assert isinstance(listed[0], ObjectInfo)


def test_it_gets_the_stored_bytes_and_version(aws, bucket):
    first = aws.put(ACCOUNT, BUCKET, KEY, {"version": 11, "serial": 1})
    aws.put(ACCOUNT, BUCKET, KEY, {"version": 11, "serial": 2})

    current = bucket.get(KEY)
    old = bucket.get(KEY, version_id=first["VersionId"])

    assert current.body == b'{\n  "version": 11,\n  "serial": 2\n}'
    assert old.body == b'{\n  "version": 11,\n  "serial": 1\n}'
    assert old.etag == first["ETag"]
    assert old.version_id == first["VersionId"]
    assert current.last_modified is not None
    assert dict(bucket.requests) == {"GetObject": 1, "GetObjectVersion": 1}


def test_it_writes_with_the_right_etag(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, b"v1")
    read = bucket.get(KEY)

    written = bucket.put(KEY, b"v2", if_match=read.etag)

    assert aws.get(ACCOUNT, BUCKET, KEY) == b"v2"
    assert written.etag != read.etag
    assert written.version_id
    assert bucket.get(KEY).etag == written.etag


def test_it_refuses_a_write_with_a_stale_etag(aws, bucket):
    stale = aws.put(ACCOUNT, BUCKET, KEY, b"v1")["ETag"]
    aws.put(ACCOUNT, BUCKET, KEY, b"someone else's v2")
    aws.reset_counts()

    with pytest.raises(PreconditionFailed) as error:
        bucket.put(KEY, b"my v2", if_match=stale)

    assert aws.get(ACCOUNT, BUCKET, KEY) == b"someone else's v2"
    assert aws.requests["PutObject"] == 1  # a 412 is never retried
    message = str(error.value)
    assert f"s3://{BUCKET}/{KEY}" in message
    assert f"If-Match {stale}" in message
    assert ACCOUNT in message
    assert error.value.status == 412


def test_it_refuses_to_create_an_existing_key(aws, bucket):
    aws.put(ACCOUNT, BUCKET, "cdkd/app/us-east-1/lock.json", b'{"owner": "bob"}')

    with pytest.raises(PreconditionFailed) as error:
        bucket.put("cdkd/app/us-east-1/lock.json", b'{"owner": "alice"}', if_none_match=True)

    assert aws.get(ACCOUNT, BUCKET, "cdkd/app/us-east-1/lock.json") == b'{"owner": "bob"}'
    assert "If-None-Match" in str(error.value)


def test_it_creates_a_new_key_with_if_none_match(aws, bucket):
    body = json.dumps({"owner": "alice"}, indent=2).encode()

    written = bucket.put("cdkd/app/us-east-1/lock.json", body, if_none_match=True)

    assert aws.get(ACCOUNT, BUCKET, "cdkd/app/us-east-1/lock.json") == body
    assert written.body == body


def test_it_reports_an_if_match_write_to_a_missing_key_as_not_found(bucket):
    with pytest.raises(NotFound) as error:
        bucket.put(KEY, b"v", if_match='"0123456789abcdef0123456789abcdef"')

    assert f"s3://{BUCKET}/{KEY}" in str(error.value)


def test_it_deletes_only_with_the_right_etag(aws, bucket):
    stale = aws.put(ACCOUNT, BUCKET, KEY, b"v1")["ETag"]
    current = aws.put(ACCOUNT, BUCKET, KEY, b"v2")["ETag"]

    with pytest.raises(PreconditionFailed):
        bucket.delete(KEY, if_match=stale)
    assert aws.get(ACCOUNT, BUCKET, KEY) == b"v2"

    bucket.delete(KEY, if_match=current)
    with pytest.raises(NotFound):
        bucket.get(KEY)
    assert bucket.versions(KEY)[0].delete_marker


def test_it_lists_versions_of_exactly_one_key_newest_first(aws, bucket):
    v1 = aws.put(ACCOUNT, BUCKET, KEY, b"one")
    v2 = aws.put(ACCOUNT, BUCKET, KEY, b"two!")
    marker = aws.delete(ACCOUNT, BUCKET, KEY)
    v3 = aws.put(ACCOUNT, BUCKET, KEY, b"three")
    aws.put(ACCOUNT, BUCKET, KEY + ".bak", b"sibling")  # shares the prefix, not the key

    versions = bucket.versions(KEY)

    assert [v.version_id for v in versions] == [v3["VersionId"], marker["VersionId"], v2["VersionId"], v1["VersionId"]]
    assert {v.key for v in versions} == {KEY}
    assert [v.is_latest for v in versions] == [True, False, False, False]
    assert [v.delete_marker for v in versions] == [False, True, False, False]
    assert (versions[0].size, versions[0].etag) == (5, v3["ETag"])
    assert (versions[1].size, versions[1].etag) == (0, None)


def test_it_reports_a_missing_key_naming_bucket_key_and_action(bucket):
    with pytest.raises(NotFound) as error:
        bucket.get("cdkd/nope/us-east-1/state.json")

    assert str(error.value) == (
        f"s3:GetObject (GetObject) on s3://{BUCKET}/cdkd/nope/us-east-1/state.json in account {ACCOUNT}: not found"
    )


def test_it_reports_a_missing_version(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, b"v1")

    with pytest.raises(NotFound) as error:
        bucket.get(KEY, version_id="no-such-version")

    assert "no-such-version" in str(error.value)
    assert "s3:GetObjectVersion" in str(error.value)


def test_it_reports_a_denied_read_naming_bucket_key_and_action(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, b"{}")
    aws.deny(BUCKET)

    with pytest.raises(AccessDenied) as error:
        bucket.get(KEY)
    with pytest.raises(AccessDenied) as list_error:
        list(bucket.list_objects())

    assert str(error.value) == (
        f"Access denied: s3:GetObject (GetObject) on s3://{BUCKET}/{KEY} in account {ACCOUNT}: Access Denied"
    )
    assert f"s3:ListBucket (ListObjectsV2) on bucket {BUCKET}" in str(list_error.value)


def test_it_reports_a_bucket_that_disappeared(aws):
    access = aws.access(ACCOUNT)
    gone = StateBucket.open(access, actor="sync", bucket="deleted-state-bucket", region="us-east-1")

    with pytest.raises(BucketNotFound) as error:
        gone.get(KEY)

    assert "deleted-state-bucket" in str(error.value)
    assert ACCOUNT in str(error.value)


def test_it_reports_throttling_once_retries_run_out(aws, bucket):
    # One attempt only, so the test does not sit through the SDK's backoff.
    bucket._s3 = bucket.session.client("s3", config=Config(retries={"mode": "standard", "total_max_attempts": 1}))
    aws.proxy.fail(BUCKET, 503, "SlowDown")

    with pytest.raises(Throttled) as error:
        bucket.get(KEY)

    assert f"s3://{BUCKET}/{KEY}" in str(error.value)
    assert "SlowDown" in str(error.value)


def test_it_sends_the_expected_bucket_owner_on_every_call(aws, bucket):
    owners: list[str | None] = []
    bucket._s3.meta.events.register(
        "before-send.s3", lambda request, **kw: owners.append(request.headers.get("x-amz-expected-bucket-owner"))
    )
    put = bucket.put(KEY, b"v1", if_none_match=True)
    bucket.get(KEY)
    bucket.get(KEY, version_id=put.version_id)
    list(bucket.list_objects())
    bucket.versions(KEY)
    bucket.delete(KEY, if_match=put.etag)

    assert owners == [ACCOUNT.encode()] * 6 or owners == [ACCOUNT] * 6


def test_it_counts_concurrent_requests_exactly(aws, bucket):
    aws.put_many(ACCOUNT, BUCKET, {f"cdkd/s{i}/us-east-1/state.json": f"{i}" for i in range(32)})

    with ThreadPoolExecutor(32) as pool:
        bodies = list(pool.map(lambda i: bucket.get(f"cdkd/s{i}/us-east-1/state.json").body, range(32)))

    assert bodies == [str(i).encode() for i in range(32)]
    assert bucket.requests["GetObject"] == 32
    assert aws.requests["GetObject"] == 32


def test_it_purges_noncurrent_versions(aws, bucket):
    aws.put(ACCOUNT, BUCKET, KEY, b"secret v1")
    aws.put(ACCOUNT, BUCKET, KEY, b"secret v2")
    latest = aws.put(ACCOUNT, BUCKET, KEY, b"clean v3")
    aws.put(ACCOUNT, BUCKET, KEY + ".bak", b"sibling")

    purged = bucket.purge_noncurrent([KEY])

    assert len(purged) == 2
    assert [(v.version_id, v.is_latest) for v in bucket.versions(KEY)] == [(latest["VersionId"], True)]
    assert aws.get(ACCOUNT, BUCKET, KEY) == b"clean v3"
    assert aws.get(ACCOUNT, BUCKET, KEY + ".bak") == b"sibling"
