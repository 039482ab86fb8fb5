"""engine.deploy.assets on moto: file and zip assets published to their destinations with
the placeholders substituted, HEAD-then-skip on a second run, the marker refusal."""

from __future__ import annotations

import io
import zipfile

import pytest

from engine.deploy.assembly import Assembly, Environment, StackArtifact
from engine.deploy.assets import asset_bytes, asset_mode_refusal, publish_file_assets
from engine.providers import Clients
from tests.deploy.test_run import ACCOUNT, BUCKET, REGION
from tests.deploy.test_run import bucket as bucket  # noqa: F401,PLC0414 - the fixture

pytestmark = pytest.mark.integration
ASSETS = f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"


def stack_with_assets() -> tuple[Assembly, StackArtifact]:
    dest = {"bucketName": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}", "region": "us-east-1"}
    manifest = {
        "version": "48.0.0",
        "files": {
            "aaa": {
                "source": {"path": "asset.aaa", "packaging": "zip"},
                "destinations": {"d": dict(dest, objectKey="aaa.zip")},
            },
            "bbb": {
                "source": {"path": "data.txt", "packaging": "file"},
                "destinations": {"d": dict(dest, objectKey="bbb.txt")},
            },
            "tpl": {
                "source": {"path": "S.template.json", "packaging": "file"},
                "destinations": {"d": dict(dest, objectKey="tpl.json")},
            },
        },
        "dockerImages": {},
    }
    files = {
        "asset.aaa/index.py": b"def handler(e, c):\n    return 1\n",
        "asset.aaa/lib/x.py": b"X = 1\n",
        "data.txt": b"hello",
        "S.template.json": b"{}",
    }
    stack = StackArtifact(
        artifact_id="S",
        stack_name="S",
        display_name="S",
        template_file="S.template.json",
        template={},
        environment=Environment(raw="aws://unknown-account/unknown-region", account=None, region=None),
        asset_manifest_file="S.assets.json",
        asset_manifest=manifest,
    )
    return Assembly(files=files, digest="d", version="48.0.0", stacks=[stack]), stack


def test_it_publishes_then_skips_what_exists(aws, bucket):  # noqa: F811
    aws.make_bucket(ACCOUNT, ASSETS, versioning=False)
    assembly, stack = stack_with_assets()
    clients = Clients(aws.account_session(ACCOUNT))
    first = publish_file_assets(clients, assembly, stack, account=ACCOUNT, region=REGION)
    assert [(p.asset_id, p.bucket, p.key, p.outcome) for p in first] == [
        ("aaa", ASSETS, "aaa.zip", "uploaded"),
        ("bbb", ASSETS, "bbb.txt", "uploaded"),
    ]  # the stack's own template is not an asset to publish
    assert aws.get(ACCOUNT, ASSETS, "bbb.txt") == b"hello"
    with zipfile.ZipFile(io.BytesIO(aws.get(ACCOUNT, ASSETS, "aaa.zip"))) as zf:
        assert sorted(zf.namelist()) == ["index.py", "lib/x.py"]
    aws.reset_counts()
    second = publish_file_assets(clients, assembly, stack, account=ACCOUNT, region=REGION)
    assert [p.outcome for p in second] == ["exists", "exists"]
    assert aws.requests.get("PutObject", 0) == 0


def test_zips_are_reproducible():
    files = {"d/b": b"2", "d/a": b"1"}
    assert asset_bytes(files, "d", "zip") == asset_bytes(dict(reversed(list(files.items()))), "d", "zip")


def test_it_refuses_the_cdkd_asset_storage_mode(aws, bucket):  # noqa: F811
    assert asset_mode_refusal(bucket, REGION) is None
    aws.put(ACCOUNT, BUCKET, f"cdkd-bootstrap/{REGION}.json", {"assetBucket": "cdkd-assets-x"})
    assert "cdkd-bootstrap/us-east-1.json" in asset_mode_refusal(bucket, REGION)
