"""Bucket posture (engine.posture, stacks.posture) against moto buckets through the proxy.

moto implements every bucket-configuration read the checks make (versioning, encryption,
public access block, policy, Object Lock, replication, lifecycle), so each check fails and
passes on real moto buckets. A missing read permission is shown two ways: the proxy's 403
for one API, and botocore's Stubber answering AccessDenied for every read (moto has no IAM
evaluation of bucket reads, so the Stubber stands in for the denials only; the checks
themselves are the code under test)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from engine import aws as engine_aws
from engine import bucketops
from engine.backend import StateBucket
from engine.keys import KeyLayout
from engine.posture import CHECKS, SecretHistory, check_bucket

pytestmark = pytest.mark.integration

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
MARKER = {
    "assetBucket": f"cdkd-assets-{A1}-us-east-1",
    "containerRepo": f"cdkd-container-assets-{A1}-us-east-1",
    "assetSupportVersion": 1,
    "createdAt": "2026-11-01T10:00:00.000Z",
}
CLEAN = SecretHistory(scanned=True, flagged_versions=0)


def hardened(aws, name: str = BUCKET, *, policy: bool = True) -> StateBucket:
    """A bucket set up as cdkd bootstrap sets it up (engine.bucketops.create_hardened).
    moto denies every object read and write under the account-only policy (it has no
    aws:PrincipalAccount to compare), so tests that store objects leave the policy off."""
    bucket = StateBucket.open(aws.access(A1), actor="posture-test", bucket=name, region="us-east-1")
    bucketops.create_hardened(bucket, policy=policy)
    return bucket


def run(bucket: StateBucket, *, retention: int = 90, secrets: SecretHistory = CLEAN) -> dict[str, tuple[str, str]]:
    s3 = engine_aws.client(bucket.session, "s3", bucket.region)
    results = check_bucket(s3, bucket.name, A1, layout=KeyLayout(), retention_days=retention, secrets=secrets)
    assert [r.key for r in results] == list(CHECKS)
    return {r.key: (r.status, r.found) for r in results}


def test_it_passes_every_check_on_a_bucket_as_cdkd_bootstrap_makes_it(aws):
    bucket = hardened(aws)

    found = run(bucket)

    assert {k: s for k, (s, _) in found.items()} == dict.fromkeys(CHECKS, "ok")
    assert found["encryption"][1] == "AES256"
    assert found["policy"][1] == "statement 'DenyExternalAccess' denies other accounts"
    assert found["bootstrap-marker"][1].startswith("no marker")


def test_it_passes_a_valid_marker_whose_asset_bucket_exists(aws):
    bucket = hardened(aws, policy=False)
    aws.make_bucket(A1, MARKER["assetBucket"])
    aws.put(A1, BUCKET, "cdkd-bootstrap/us-east-1.json", MARKER)

    assert run(bucket)["bootstrap-marker"] == ("ok", "cdkd asset storage in us-east-1")


def test_it_fails_versioning_encryption_access_block_and_policy_on_a_bare_bucket(aws):
    aws.make_bucket(A1, BUCKET, versioning=False)
    bucket = StateBucket.open(aws.access(A1), actor="t", bucket=BUCKET, region="us-east-1")

    found = run(bucket)

    assert found["versioning"] == ("problem", "never enabled: a bad write or delete of a record cannot be undone")
    assert found["encryption"] == ("problem", "no default encryption configured")
    assert found["public-access-block"] == ("problem", "no public access block on the bucket")
    assert found["policy"][0] == "problem" and found["policy"][1].startswith("no bucket policy")


def test_it_fails_suspended_versioning_and_a_partial_public_access_block(aws):
    bucket = hardened(aws)
    s3 = aws.s3(A1)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Suspended"})
    s3.put_public_access_block(
        Bucket=BUCKET,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": False,
            "RestrictPublicBuckets": False,
        },
    )

    found = run(bucket)

    assert found["versioning"][0] == "problem" and found["versioning"][1].startswith("suspended")
    assert found["public-access-block"] == ("problem", "off: BlockPublicPolicy, RestrictPublicBuckets")


def test_it_fails_a_policy_that_does_not_deny_other_accounts(aws):
    bucket = hardened(aws)
    allow_only = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{A1}:root"},
                "Action": "s3:*",
                "Resource": [f"arn:aws:s3:::{BUCKET}/*"],
            },
            # A deny for another account than ours protects nothing.
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [f"arn:aws:s3:::{BUCKET}/*"],
                "Condition": {"StringNotEquals": {"aws:PrincipalAccount": "999999999999"}},
            },
        ],
    }
    aws.s3(A1).put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(allow_only))

    assert run(bucket)["policy"] == (
        "problem",
        "the bucket policy has no statement denying access from outside the account",
    )


def test_it_fails_object_lock_with_a_default_retention_and_passes_without_one(aws):
    s3 = aws.s3(A1)
    s3.create_bucket(Bucket=BUCKET, ObjectLockEnabledForBucket=True)
    bucket = StateBucket.open(aws.access(A1), actor="t", bucket=BUCKET, region="us-east-1")
    s3.put_object_lock_configuration(Bucket=BUCKET, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    assert run(bucket)["object-lock"][0] == "ok"

    s3.put_object_lock_configuration(
        Bucket=BUCKET,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 30}},
        },
    )
    status, found = run(bucket)["object-lock"]
    assert status == "problem" and found.startswith("default retention GOVERNANCE for 30 day(s)")


def test_it_fails_replication_naming_the_destination(aws):
    bucket = hardened(aws)
    aws.make_bucket(A1, "cdkd-state-replica")
    aws.s3(A1).put_bucket_replication(
        Bucket=BUCKET,
        ReplicationConfiguration={
            "Role": f"arn:aws:iam::{A1}:role/replication",
            "Rules": [
                {
                    "ID": "all",
                    "Status": "Enabled",
                    "Priority": 1,
                    "Filter": {"Prefix": ""},
                    "DeleteMarkerReplication": {"Status": "Disabled"},
                    "Destination": {"Bucket": "arn:aws:s3:::cdkd-state-replica"},
                }
            ],
        },
    )

    status, found = run(bucket)["replication"]

    assert status == "problem"
    assert found.startswith("replicated to cdkd-state-replica: S3 never replicates a version-id delete")


def _lifecycle(aws, **action) -> None:
    aws.s3(A1).put_bucket_lifecycle_configuration(
        Bucket=BUCKET,
        LifecycleConfiguration={"Rules": [{"ID": "r1", "Status": "Enabled", "Filter": {"Prefix": ""}, **action}]},
    )


def test_it_judges_noncurrent_expiration_against_the_audit_retention(aws):
    bucket = hardened(aws)
    _lifecycle(aws, NoncurrentVersionExpiration={"NoncurrentDays": 30})

    short = run(bucket, retention=90)["lifecycle"]
    long_enough = run(bucket, retention=30)["lifecycle"]

    assert short[0] == "problem" and "after 30 day(s), sooner than the audit retention (90 days)" in short[1]
    assert long_enough == ("ok", "noncurrent versions expire after 30 day(s) (audit retention 30)")


def test_it_fails_keeping_versions_forever_while_old_versions_hold_flagged_secrets(aws):
    bucket = hardened(aws)

    flagged = run(bucket, secrets=SecretHistory(scanned=True, flagged_versions=3))["lifecycle"]
    unscanned = run(bucket, secrets=SecretHistory(scanned=False))["lifecycle"]
    clean = run(bucket)["lifecycle"]

    assert flagged == ("problem", "noncurrent versions are kept forever and 3 old version(s) hold flagged secrets")
    assert unscanned[0] == "unknown"
    assert clean[0] == "ok"


def test_it_fails_a_rule_that_expires_current_state(aws):
    bucket = hardened(aws)
    _lifecycle(aws, Expiration={"Days": 400}, NoncurrentVersionExpiration={"NoncurrentDays": 400})

    status, found = run(bucket)["lifecycle"]

    assert status == "problem" and "expires CURRENT objects under cdkd/" in found


def test_it_fails_a_malformed_marker_and_one_whose_asset_bucket_is_gone(aws):
    bucket = hardened(aws, policy=False)
    aws.put(A1, BUCKET, "cdkd-bootstrap/eu-west-1.json", b'{"assetBucket": ')
    aws.put(A1, BUCKET, "cdkd-bootstrap/us-east-1.json", MARKER)  # its asset bucket was never made

    status, found = run(bucket)["bootstrap-marker"]

    assert status == "problem"
    assert found == (
        "cdkd-bootstrap/eu-west-1.json: not valid JSON (INVALID_BOOTSTRAP_MARKER); "
        f"cdkd-bootstrap/us-east-1.json: its asset bucket {MARKER['assetBucket']} does not exist: deploys there fail"
    )


def test_it_shows_a_denied_read_as_unknown_naming_the_action(aws):
    bucket = hardened(aws)
    aws.proxy.deny_operation("GetBucketPolicy")

    assert run(bucket)["policy"] == ("unknown", "unknown: no permission for s3:GetBucketPolicy")


def test_it_shows_every_check_unknown_when_every_read_is_denied():
    """botocore's Stubber answers AccessDenied for each read (stand-in for IAM, which moto
    does not evaluate): no check may come out ok."""
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    stubber = Stubber(s3)
    for api in (
        "get_bucket_versioning",
        "get_bucket_encryption",
        "get_public_access_block",
        "get_bucket_policy",
        "get_object_lock_configuration",
        "get_bucket_replication",
        "get_bucket_lifecycle_configuration",
        "list_objects_v2",
    ):
        stubber.add_client_error(api, service_error_code="AccessDenied", http_status_code=403)
    with stubber:
        results = check_bucket(s3, BUCKET, A1, layout=KeyLayout(), retention_days=90, secrets=CLEAN)
    stubber.assert_no_pending_responses()

    assert [(r.key, r.status, r.found) for r in results] == [
        ("versioning", "unknown", "unknown: no permission for s3:GetBucketVersioning"),
        ("encryption", "unknown", "unknown: no permission for s3:GetEncryptionConfiguration"),
        ("public-access-block", "unknown", "unknown: no permission for s3:GetBucketPublicAccessBlock"),
        ("policy", "unknown", "unknown: no permission for s3:GetBucketPolicy"),
        ("object-lock", "unknown", "unknown: no permission for s3:GetBucketObjectLockConfiguration"),
        ("replication", "unknown", "unknown: no permission for s3:GetReplicationConfiguration"),
        ("lifecycle", "unknown", "unknown: no permission for s3:GetLifecycleConfiguration"),
        ("bootstrap-marker", "unknown", "unknown: no permission for s3:ListBucket"),
    ]


# --- stored per account, and the board's entry point ----------------------------------------


@pytest.mark.django_db
def test_it_stores_the_checks_and_hands_the_problems_to_the_board(aws, django_assert_max_num_queries):
    from stacks.models import Account, BucketPosture
    from stacks.posture import check_account, posture_problems

    hardened(aws)
    bare = "cdkd-state-222222222222"
    aws.make_bucket("222222222222", bare, versioning=False)
    good = Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin", bucket=BUCKET)
    bad = Account.objects.create(
        account_id="222222222222", role_arn="arn:aws:iam::222222222222:role/cdkd-admin", bucket=bare
    )

    check_account(good)
    first = check_account(bad)
    since = {r["key"]: r["since"] for r in first.results}
    again = check_account(bad)

    assert BucketPosture.objects.get(account=good).problem_count == 0
    assert again.problem_count == first.problem_count == 4
    assert {r["key"]: r["since"] for r in again.results} == since  # same status: since when it was first seen
    with django_assert_max_num_queries(1):
        problems = posture_problems([A1, "222222222222"])
    assert [(p["account_id"], p["key"], p["bucket"]) for p in problems] == [
        ("222222222222", "versioning", bare),
        ("222222222222", "encryption", bare),
        ("222222222222", "public-access-block", bare),
        ("222222222222", "policy", bare),
    ]
    assert problems[0]["check"] == "Versioning" and problems[0]["change"].startswith("aws s3api put-bucket-versioning")
    assert posture_problems([A1]) == []


@pytest.mark.django_db
def test_it_shows_the_checks_on_the_account_page(aws, client, django_user_model):
    from stacks.models import Account, Membership
    from stacks.posture import check_account

    aws.make_bucket(A1, BUCKET, versioning=False)
    account = Account.objects.create(account_id=A1, role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin", bucket=BUCKET)
    admin = django_user_model.objects.create_user("ada", password="pw")
    Membership.objects.create(user=admin, account=account, role="admin")
    client.force_login(admin)
    before = client.get(f"/accounts/{A1}/settings/").content.decode()

    check_account(account)
    page = client.get(f"/accounts/{A1}/settings/").content.decode()

    assert "Not checked yet" in before
    assert 'id="posture-versioning"' in page and "never enabled" in page
    assert "put-bucket-versioning" in page
