"""engine.aws against moto: sessions per account, bucket name resolution, bucket region."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine import aws as engine_aws
from engine.errors import AccessDenied, BucketNotFound

pytestmark = pytest.mark.integration

A1, A2, A3 = "111111111111", "222222222222", "333333333333"


def _caller(session) -> dict:
    return engine_aws.client(session, "sts", "us-east-1").get_caller_identity()


def test_it_resolves_three_accounts_default_legacy_and_explicit(aws):
    h = aws
    h.make_bucket(A1, f"cdkd-state-{A1}")
    h.put(A1, f"cdkd-state-{A1}", "cdkd/app/us-east-1/state.json", {"version": 11})
    h.make_bucket(A2, f"cdkd-state-{A2}-us-west-2", region="us-west-2")
    h.make_bucket(A3, "team-c-state", region="eu-west-1")

    results = {}
    for account, extra in ((A1, {}), (A2, {"region": "us-west-2"}), (A3, {"bucket": "team-c-state"})):
        access = h.access(account, **extra)
        session = engine_aws.session_for(access, "alice")
        assert _caller(session)["Account"] == account  # really inside that account
        results[account] = engine_aws.resolve_bucket(access, session)

    assert results[A1] == engine_aws.ResolvedBucket(name=f"cdkd-state-{A1}", source="default", region="us-east-1")
    legacy = results[A2]
    assert (legacy.name, legacy.source, legacy.region) == (f"cdkd-state-{A2}-us-west-2", "default-legacy", "us-west-2")
    assert "legacy region-suffixed name" in legacy.warning
    assert "cdkd state migrate --region us-west-2" in legacy.warning
    assert results[A3] == engine_aws.ResolvedBucket(name="team-c-state", source="explicit", region="eu-west-1")


def test_it_prefers_the_new_bucket_when_both_exist(aws):
    h = aws
    h.make_bucket(A1, f"cdkd-state-{A1}")
    h.make_bucket(A1, f"cdkd-state-{A1}-us-east-1")
    h.put(A1, f"cdkd-state-{A1}", "cdkd/app/us-east-1/state.json", "{}")
    h.put(A1, f"cdkd-state-{A1}-us-east-1", "cdkd/old/us-east-1/state.json", "{}")
    access = h.access(A1)

    resolved = engine_aws.resolve_bucket(access, engine_aws.session_for(access, "alice"))

    assert (resolved.name, resolved.source, resolved.warning) == (f"cdkd-state-{A1}", "default", "")


def test_it_picks_the_legacy_bucket_when_only_it_holds_state(aws):
    h = aws
    h.make_bucket(A1, f"cdkd-state-{A1}")
    h.make_bucket(A1, f"cdkd-state-{A1}-us-east-1")
    h.put(A1, f"cdkd-state-{A1}", "other/readme.txt", "not state")  # outside cdkd/
    h.put(A1, f"cdkd-state-{A1}-us-east-1", "cdkd/old/us-east-1/state.json", "{}")
    access = h.access(A1)

    resolved = engine_aws.resolve_bucket(access, engine_aws.session_for(access, "alice"))

    assert (resolved.name, resolved.source) == (f"cdkd-state-{A1}-us-east-1", "default-legacy")
    assert "cdkd state migrate --region us-east-1" in resolved.warning


def test_it_reports_a_missing_default_bucket(aws):
    access = aws.access(A1)

    with pytest.raises(BucketNotFound) as error:
        engine_aws.resolve_bucket(access, engine_aws.session_for(access, "alice"))

    message = str(error.value)
    assert f"cdkd-state-{A1}" in message
    assert f"cdkd-state-{A1}-us-east-1" in message
    assert A1 in message
    assert "cdkd bootstrap" in message


def test_it_reports_a_missing_explicit_bucket(aws):
    access = aws.access(A1, bucket="no-such-state-bucket")

    with pytest.raises(BucketNotFound) as error:
        engine_aws.resolve_bucket(access, engine_aws.session_for(access, "alice"))

    assert str(error.value) == f"State bucket no-such-state-bucket for account {A1} does not exist"


def test_it_reports_a_denied_explicit_bucket(aws):
    aws.make_bucket(A1, "locked-state")
    aws.deny("locked-state")
    access = aws.access(A1, bucket="locked-state")

    with pytest.raises(AccessDenied) as error:
        engine_aws.resolve_bucket(access, engine_aws.session_for(access, "alice"))

    assert "locked-state" in str(error.value)
    assert A1 in str(error.value)
    assert "s3:ListBucket" in str(error.value)


def test_it_counts_a_denied_default_bucket_as_existing_and_then_fails_on_its_region(aws):
    aws.deny(f"cdkd-state-{A1}")
    access = aws.access(A1)

    with pytest.raises(AccessDenied) as error:
        engine_aws.resolve_bucket(access, engine_aws.session_for(access, "alice"))

    assert f"s3:GetBucketLocation (GetBucketLocation) on bucket cdkd-state-{A1}" in str(error.value)


def test_it_caches_the_bucket_region_only_on_success(aws):
    h = aws
    h.make_bucket(A1, "regional-state", region="eu-west-1")
    session = engine_aws.session_for(h.access(A1), "alice")
    h.deny("regional-state")

    with pytest.raises(AccessDenied):
        engine_aws.bucket_region(session, "regional-state", A1)
    h.proxy.allow("regional-state")
    first = engine_aws.bucket_region(session, "regional-state", A1)
    second = engine_aws.bucket_region(session, "regional-state", A1)

    assert first == second == "eu-west-1"
    assert h.requests["GetBucketLocation"] == 2  # the denied one and one success, then cached


def test_it_reads_us_east_1_for_an_empty_location(aws):
    aws.make_bucket(A1, "virginia-state")
    session = engine_aws.session_for(aws.access(A1), "alice")

    assert engine_aws.bucket_region(session, "virginia-state", A1) == "us-east-1"


def test_it_names_the_role_session_after_the_actor(aws):
    access = aws.access(A1, external_id="ext-123")

    identity = _caller(engine_aws.session_for(access, "alice@example.com"))
    sync_identity = _caller(engine_aws.session_for(access, "sync"))

    assert identity["Arn"] == f"arn:aws:sts::{A1}:assumed-role/cdkd-admin/cdkd-admin-alice@example.com"
    assert sync_identity["Arn"].endswith("/cdkd-admin-sync")


def test_it_sanitises_role_session_names():
    assert engine_aws.role_session_name("Zoë Smith/ops") == "cdkd-admin-Zo--Smith-ops"
    assert len(engine_aws.role_session_name("x" * 200)) == 64


def test_it_caches_sessions_per_account_and_actor(aws):
    access = aws.access(A1)

    first = engine_aws.session_for(access, "alice")

    assert engine_aws.session_for(access, "alice") is first
    assert engine_aws.session_for(access, "bob") is not first
    assert aws.requests["AssumeRole"] == 2
    assert engine_aws.client(first, "s3", "us-east-1") is engine_aws.client(first, "s3", "us-east-1")


def test_it_uses_the_process_credentials_without_a_role(aws):
    session = engine_aws.session_for(engine_aws.AccountAccess(account_id="123456789012"), "alice")

    assert _caller(session)["Account"] == "123456789012"  # moto's default account
    assert aws.requests["AssumeRole"] == 0


def test_it_reports_a_refused_assume_role(aws):
    aws.proxy.deny_operation("AssumeRole")
    access = aws.access(A2)

    with pytest.raises(AccessDenied) as error:
        engine_aws.session_for(access, "alice")

    assert f"arn:aws:iam::{A2}:role/cdkd-admin" in str(error.value)
    assert f"account {A2}" in str(error.value)


def test_it_refreshes_credentials_before_they_expire(aws):
    access = aws.access(A1)
    session = engine_aws.session_for(access, "alice")
    credentials = session.get_credentials()
    first_key = credentials.get_frozen_credentials().access_key

    credentials._expiry_time = datetime.now(UTC) - timedelta(minutes=1)  # as if an hour had passed
    identity = _caller(session)

    assert aws.requests["AssumeRole"] == 2
    assert credentials.get_frozen_credentials().access_key != first_key
    assert identity["Account"] == A1


def test_it_builds_clients_with_the_house_config(aws):
    session = engine_aws.session_for(aws.access(A1), "alice")

    s3 = engine_aws.client(session, "s3", "eu-west-1")

    assert s3.meta.region_name == "eu-west-1"
    assert s3.meta.endpoint_url == aws.endpoint  # AWS_ENDPOINT_URL, read by boto3
    assert s3.meta.config.max_pool_connections == 64
    # botocore reads max_attempts=5 as five retries: six attempts in all.
    assert s3.meta.config.retries == {"mode": "standard", "total_max_attempts": 6}
    assert s3.meta.config.request_checksum_calculation == "when_required"
