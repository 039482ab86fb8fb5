"""The harness of the per-type lifecycle tests (test_lifecycle*.py): a cloud assembly written
to disk, deployed through the `deploy` operation spec exactly as `cdkd deploy` runs it (the
spec's plan, then its execute on the plan as stored), and the four steps of a type's case
checked against the stored record and moto.

A `Case` is one resource type: `resources(step)` gives the template's Resources for the
step ("deploy", "update", "replace"; the "remove" step drops the case's logical id), `live`
reads the one value of the AWS resource that the steps change, `expect` says what it must
read after each step, `gone` says whether a row's AWS resource no longer exists, and
`attributes` gives the attributes the record must hold, read from moto where AWS makes them
up (ids, ARNs with random parts)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import engine.deploy.operation  # noqa: F401 - registers the deploy and rollback specs
from engine.backend import StateBucket
from engine.keys import KeyLayout
from engine.operations import Context, Outcome, Plan, spec_for

ACCOUNT = "111111111111"
REGION = "us-east-1"
BUCKET = f"cdkd-state-{ACCOUNT}"
STACK = "LifeStack"
STATE = f"cdkd/{STACK}/{REGION}/state.json"
ASSETS = f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"
LID = "Target"  # the logical id of the resource under test in every case
STEPS = ("deploy", "update", "replace")


class Moto:
    """Clients of the deploying account straight to moto (not through the proxy)."""

    def __init__(self, aws: Any) -> None:
        self.session = aws.account_session(ACCOUNT)
        self.url = aws.moto.url
        self._cache: dict[str, Any] = {}

    def __call__(self, service: str) -> Any:
        if service not in self._cache:
            self._cache[service] = self.session.client(service, region_name=REGION, endpoint_url=self.url)
        return self._cache[service]


@dataclass(frozen=True)
class Case:
    id: str
    rtype: str
    resources: Callable[[str], dict[str, Any]]
    live: Callable[[Moto, dict[str, Any]], Any]
    expect: dict[str, Any]  # step -> what `live` reads after it
    gone: Callable[[Moto, dict[str, Any]], bool]
    attributes: Callable[[Moto, dict[str, Any]], dict[str, Any] | None]
    deps: tuple[str, ...] | Callable[[str], tuple[str, ...]] = ()  # the row's recorded dependencies
    # what the plan does at steps 2 and 3: "updated" | "replaced" | "collision" | "refused: <the
    # message>" (the deploy fails and is rolled back), or "n/a: <why>" when the type has no such step
    update: str = "updated"
    replace: str = "replaced"
    stateful: bool = False  # its replacement needs the approver's stateful consent
    retained: bool = False  # UpdateReplacePolicy Retain: the replaced resource stays
    assets: Callable[[str], dict[str, dict[str, bytes]]] = field(default=lambda step: {})


# --- the assembly on disk -------------------------------------------------------------------


def write_app(root: Path, resources: dict[str, Any], assets: dict[str, dict[str, bytes]] | None = None) -> Path:
    """A cdk.out for LifeStack in aws://ACCOUNT/REGION: the template, its asset manifest
    (the template itself plus one zip asset per `assets` entry: hash -> files) and the asset
    directories, as `cdk synth` lays them out."""
    root.mkdir(parents=True, exist_ok=True)
    template = {"Resources": resources}
    (root / f"{STACK}.template.json").write_text(json.dumps(template, indent=1))
    dest = {"bucketName": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}", "region": REGION}
    files: dict[str, Any] = {
        "template": {
            "source": {"path": f"{STACK}.template.json", "packaging": "file"},
            "destinations": {"d": dict(dest, objectKey="template.json")},
        }
    }
    for digest, entries in (assets or {}).items():
        for name, body in entries.items():
            path = root / f"asset.{digest}" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        files[digest] = {
            "source": {"path": f"asset.{digest}", "packaging": "zip"},
            "destinations": {"d": dict(dest, objectKey=f"{digest}.zip")},
        }
    (root / f"{STACK}.assets.json").write_text(json.dumps({"version": "48.0.0", "files": files, "dockerImages": {}}))
    manifest = {
        "version": "48.0.0",
        "artifacts": {
            f"{STACK}.assets": {"type": "cdk:asset-manifest", "properties": {"file": f"{STACK}.assets.json"}},
            STACK: {
                "type": "aws:cloudformation:stack",
                "environment": f"aws://{ACCOUNT}/{REGION}",
                "properties": {"templateFile": f"{STACK}.template.json"},
                "dependencies": [f"{STACK}.assets"],
                "displayName": STACK,
            },
        },
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def deploy(bucket: StateBucket, app: Path, *, consent: bool = False) -> Outcome:
    """What `cdkd deploy STACK --app APP --yes` runs, without the Operation row: the spec's
    plan, stored and read back as the row holds it, then the spec's execute on it."""
    spec = spec_for("deploy")
    params = {"account": ACCOUNT, "app": str(app), "parameters": {}, "stateful_consent": consent}

    def ctx(op: str) -> Context:
        return Context(
            bucket=bucket,
            layout=KeyLayout(),
            stack=STACK,
            region=REGION,
            params=params,
            operation_id=op,
            person="alice",
        )

    plan = spec.plan(ctx("plan"))
    stored = Plan.from_json(json.loads(json.dumps(plan.as_json())))
    return spec.execute(ctx("op-1"), stored)


# --- expectations ---------------------------------------------------------------------------


def resolved(value: Any, rows: dict[str, Any]) -> Any:
    """The template value with Ref / Fn::GetAtt read from the stored rows and the pseudo
    parameters of an Fn::Sub filled in: what the record's `properties` must hold. (The test
    templates use nothing else.)"""
    if isinstance(value, dict):
        if list(value) == ["Ref"]:
            return rows[value["Ref"]]["physicalId"]
        if list(value) == ["Fn::GetAtt"]:
            lid, name = value["Fn::GetAtt"]
            return rows[lid]["attributes"][name]
        if list(value) == ["Fn::Sub"]:
            return value["Fn::Sub"].replace("${AWS::AccountId}", ACCOUNT).replace("${AWS::Region}", REGION)
        return {k: resolved(v, rows) for k, v in value.items()}
    if isinstance(value, list):
        return [resolved(v, rows) for v in value]
    return value


def sha256_b64(body: bytes) -> str:
    return base64.b64encode(hashlib.sha256(body).digest()).decode()


def zip_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in files.items():
            zf.writestr(name, body)
    return buf.getvalue()


def record(aws: Any) -> dict[str, Any]:
    return json.loads(aws.get(ACCOUNT, BUCKET, STATE))


def check_row(case: Case, m: Moto, doc: dict[str, Any], template: dict[str, Any], step: str) -> dict[str, Any]:
    """The case's row as cdkd records it: type, properties resolved from the rows it reads,
    the attributes AWS has, the dependencies, the template's policies, provisionedBy sdk."""
    assert doc["version"] == 11
    rows = doc["resources"]
    row = rows[LID]
    resource = template[LID]
    assert row["resourceType"] == case.rtype
    assert row["properties"] == resolved(resource.get("Properties") or {}, rows)
    assert row.get("attributes") == case.attributes(m, row)
    assert tuple(row.get("dependencies") or ()) == (case.deps(step) if callable(case.deps) else case.deps)
    assert row.get("deletionPolicy") == resource.get("DeletionPolicy")
    assert row.get("updateReplacePolicy") == resource.get("UpdateReplacePolicy")
    assert row["provisionedBy"] == "sdk"
    return row


def run_lifecycle(case: Case, aws: Any, bucket: StateBucket, tmp_path: Path) -> None:
    """Deploy, update in place, replace, remove: the record and moto checked after each."""
    m = Moto(aws)

    def app(step: str, resources: dict[str, Any], assets_of: str | None = None) -> Path:
        return write_app(tmp_path / step, resources, case.assets(assets_of or step))

    # 1. deploy
    template = last = case.resources("deploy")
    last_step = "deploy"
    out = deploy(bucket, app("deploy", template))
    assert out.status == "succeeded", out.summary
    assert LID in out.details["result"]["created"]
    row = check_row(case, m, record(aws), template, "deploy")
    assert case.live(m, row) == case.expect["deploy"]

    # 2. update in place
    if not case.update.startswith("n/a:"):
        template = case.resources("update")
        out = deploy(bucket, app("update", template))
        assert out.status == "succeeded", out.summary
        assert out.details["result"]["updated"] == [LID] and out.details["result"]["replaced"] == []
        before = row
        row, last, last_step = check_row(case, m, record(aws), template, "update"), template, "update"
        assert row["physicalId"] == before["physicalId"]
        assert case.live(m, row) == case.expect["update"]

    # 3. replace (or what a change of identity means for the type)
    if not case.replace.startswith("n/a:"):
        template = case.resources("replace")
        etag = aws.etag(ACCOUNT, BUCKET, STATE)
        out = deploy(bucket, app("replace", template), consent=case.stateful)
        before = row
        if case.replace == "collision" or case.replace.startswith("refused"):
            # the deploy fails on the resource and is rolled back: record and AWS as they were
            assert out.status == "failed"
            expected = "NAMED_REPLACEMENT_COLLISION" if case.replace == "collision" else case.replace[len("refused:") :]
            assert expected.strip() in out.summary, out.summary
            assert record(aws)["resources"][LID] == before
            assert case.live(m, before) == case.expect["replace"]
            assert not case.gone(m, before)
            assert aws.etag(ACCOUNT, BUCKET, STATE) != etag  # the pre- and post-rollback saves
        else:
            assert out.status == "succeeded", out.summary
            assert out.details["result"][case.replace] == [LID], out.details["result"]
            row, last, last_step = check_row(case, m, record(aws), template, "replace"), template, "replace"
            assert row["physicalId"] != before["physicalId"]
            assert case.live(m, row) == case.expect["replace"]
            assert not case.gone(m, row)
            assert case.gone(m, before) is not case.retained

    # 4. remove it from the template
    template = {k: v for k, v in last.items() if k != LID}
    out = deploy(bucket, app("remove", template, last_step))
    assert out.status == "succeeded", out.summary
    assert out.details["result"]["deleted"] == [LID]
    doc = record(aws)
    assert LID not in doc["resources"] and doc["version"] == 11
    assert sorted(doc["resources"]) == sorted(template)
    assert case.gone(m, row)


@pytest.fixture
def bucket(aws: Any) -> StateBucket:
    aws.make_bucket(ACCOUNT, BUCKET)
    aws.make_bucket(ACCOUNT, ASSETS, versioning=False)
    return StateBucket.open(aws.access(ACCOUNT), actor="alice", bucket=BUCKET, region=REGION)
