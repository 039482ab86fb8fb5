"""engine.scrub against moto (S3, Secrets Manager, SSM) through the proxy, two accounts:
the scan, the scrub's stored bytes, purges, denials, replication, Object Lock, the CLI, and
no secret value anywhere in what comes back."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from engine.backend import StateBucket
from engine.keys import KeyLayout
from engine.operations import Context, OperationRefused, Plan, StalePlan, spec_for
from engine.schema import js_stringify
from engine.scrub import scan

pytestmark = pytest.mark.integration

A1, A2 = "111111111111", "222222222222"
BUCKET1, BUCKET2 = f"cdkd-state-{A1}", f"cdkd-state-{A2}"
REGION = "us-east-1"
STATE = "cdkd/App/us-east-1/state.json"
JOURNAL = "cdkd/App/us-east-1/rollback-journal.json"
EVENTS = "cdkd/App/us-east-1/deployments/20260101T000000000Z-abcd1234.jsonl"
INDEX = "cdkd/_index/us-east-1/exports.json"
CR = "custom-resource-responses/cdkd-1767225600000-abc123.json"
OTHER = "cdkd/Other/us-east-1/state.json"

PW = "Pw-db-0123456789abc"
DB_USER = "dbadmin"
TOKEN = "tok-plain-ABCDEFGHIJ"
API = "ssm-api-KEY-987654"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GENERATED = "generated-by-handler-42"
A2_SECRET = "a2-secret-value-XYZ"
ALL_VALUES = (PW, DB_USER, TOKEN, API, AWS_SECRET, GENERATED, A2_SECRET)


def cdkd_json(value: Any) -> bytes:
    return js_stringify(value, indent=2).encode()


def aws_client(aws, account: str, service: str, region: str = REGION) -> Any:
    return aws.account_session(account).client(service, region_name=region, endpoint_url=aws.moto.url)


def make_secrets(aws) -> dict[str, str]:
    sm = aws_client(aws, A1, "secretsmanager")
    # Generated RDS secrets carry connection metadata beside the credential: never searched.
    value = {"username": DB_USER, "password": PW, "host": "app-db.example.com", "port": 5432, "engine": "postgres"}
    db = sm.create_secret(Name="prod/db", SecretString=json.dumps(value))["ARN"]
    token = sm.create_secret(Name="prod/token", SecretString=TOKEN)["ARN"]
    aws_client(aws, A1, "ssm").put_parameter(Name="/prod/api-key", Value=API, Type="SecureString")
    aws_client(aws, A1, "ssm").put_parameter(Name="/prod/plain", Value="not-a-secret-value", Type="String")
    other = aws_client(aws, A2, "secretsmanager").create_secret(Name="other/secret", SecretString=A2_SECRET)["ARN"]
    return {"db": db, "token": token, "other": other}


def ref(arn: str, key: str = "") -> str:
    return f"{{{{resolve:secretsmanager:{arn}:SecretString:{key}::}}}}"


def app_record(**over: Any) -> dict[str, Any]:
    record = {
        "version": 11,
        "stackName": "App",
        "region": REGION,
        "resources": {
            "Db": {
                "physicalId": "app-db",
                "resourceType": "AWS::RDS::DBInstance",
                "properties": {"MasterUsername": DB_USER, "MasterUserPassword": PW, "DBName": "app"},
                "observedProperties": {"MasterUserPassword": PW, "Port": "5432"},
                "attributes": {"Endpoint.Address": "app-db.example.com"},
                "dependencies": [],
                "futureRowField": {"kept": True},
            },
            "Fn": {
                "physicalId": "app-fn",
                "resourceType": "AWS::Lambda::Function",
                "properties": {
                    "Environment": {
                        "Variables": {
                            "DB_URL": f"postgres://{DB_USER}:{PW}@app-db:5432/app",
                            "TOKEN": TOKEN,
                            "API": API,
                            "MASKED": "***",
                            "REF": "{{resolve:secretsmanager:prod/db:SecretString:password::}}",
                            "PLAIN": "not-a-secret-value",
                        }
                    }
                },
                "attributes": {"Arn": "arn:aws:lambda:us-east-1:111111111111:function:app-fn"},
            },
            "Key": {
                "physicalId": "AKIAIOSFODNN7EXAMPLE",
                "resourceType": "AWS::IAM::AccessKey",
                "properties": {"UserName": "ci"},
                "attributes": {"SecretAccessKey": AWS_SECRET},
            },
        },
        "outputs": {"DbPassword": PW, "ConnString": f"api={API};db=app", "Plain": "hello"},
        "orphans": [
            {
                "logicalId": "OldDb",
                "orphanedAt": 1_700_000_000_000,
                "state": {
                    "physicalId": "old-db",
                    "resourceType": "AWS::RDS::DBInstance",
                    "properties": {"MasterUserPassword": PW},
                    "attributes": {},
                },
            }
        ],
        "skippedOutputs": {"Broken": "sha256:abc"},
        "lastModified": 1_700_000_000_000,
        "futureTopField": ["kept"],
    }
    record.update(over)
    return record


def index_body(db_value: Any = PW) -> dict[str, Any]:
    return {
        "indexVersion": 1,
        "region": REGION,
        "exports": {
            "DbPassword": {"value": db_value, "producerStack": "App", "producerRegion": REGION},
            "ConnString": {"value": f"api={API};db=app", "producerStack": "App", "producerRegion": REGION},
            "OtherOut": {"value": "fine", "producerStack": "Other", "producerRegion": REGION},
        },
        "lastModified": 1_700_000_000_000,
    }


@pytest.fixture
def world(aws) -> dict[str, Any]:
    arns = make_secrets(aws)
    aws.make_bucket(A1, BUCKET1)
    aws.make_bucket(A2, BUCKET2)
    older = aws.put(A1, BUCKET1, STATE, app_record(outputs={"DbPassword": PW}))
    aws.put(A1, BUCKET1, STATE, cdkd_json(app_record()))
    journal = {
        "journalVersion": 1,
        "stackName": "App",
        "region": REGION,
        "segments": [
            {
                "timestamp": 1,
                "reason": "interrupted",
                "initialDeploy": False,
                "operations": [],
                "failedOperations": [
                    {
                        "logicalId": "Db",
                        "changeType": "UPDATE",
                        "resourceType": "AWS::RDS::DBInstance",
                        "attemptedProperties": {"MasterUserPassword": PW},
                    }
                ],
            }
        ],
    }
    aws.put(A1, BUCKET1, JOURNAL, journal)
    aws.put(A1, BUCKET1, JOURNAL, {**journal, "segments": []})  # the current journal is clean
    aws.put(A1, BUCKET1, INDEX, index_body())
    aws.put(A1, BUCKET1, INDEX, index_body())
    events = [{"type": "RUN_STARTED"}, {"type": "RESOURCE_FAILED", "message": f"token {TOKEN} was refused"}]
    aws.put(A1, BUCKET1, EVENTS, "\n".join(json.dumps(e) for e in events) + "\n")
    aws.put(A1, BUCKET1, EVENTS, json.dumps(events[0]) + "\n")
    cr = {
        "Status": "SUCCESS",
        "StackId": "arn:aws:cloudformation:us-east-1:111111111111:stack/App/cdkd",
        "LogicalResourceId": "Gen",
        "Data": {"Password": GENERATED},
    }
    aws.put(A1, BUCKET1, CR, cr)
    aws.put(A1, BUCKET1, CR, "")  # a later empty placeholder: the secret is history only
    other = {"version": 11, "stackName": "Other", "region": REGION, "resources": {}, "outputs": {"OtherOut": "fine"}}
    aws.put(A1, BUCKET1, OTHER, cdkd_json(other))
    aws.put(A2, BUCKET2, "cdkd/Far/us-east-1/state.json", app_record(stackName="Far", outputs={"S": A2_SECRET}))
    return {"arns": arns, "older": older["VersionId"]}


def bucket_of(aws, account: str = A1, name: str = BUCKET1) -> StateBucket:
    return StateBucket.open(aws.access(account), actor="alice", bucket=name, region=REGION)


def context(bucket: StateBucket, stack: str = "App", **params: Any) -> tuple[Context, list[str]]:
    lines: list[str] = []
    ctx = Context(
        bucket=bucket,
        layout=KeyLayout(),
        stack=stack,
        region=REGION,
        params=params,
        operation_id="op-1",
        person="alice",
        log=lambda level, message: lines.append(f"{level}: {message}"),
    )
    return ctx, lines


def versions(aws, key: str, bucket: str = BUCKET1) -> list[dict[str, Any]]:
    answer = aws.s3(A1).list_object_versions(Bucket=bucket, Prefix=key)
    return [v for v in answer.get("Versions", []) + answer.get("DeleteMarkers", []) if v["Key"] == key]


def assert_no_secret(*things: Any) -> None:
    text = json.dumps(things, default=str)
    for value in ALL_VALUES:
        assert value not in text, f"a secret value leaked: {value[:3]}..."


def test_it_finds_secrets_everywhere_in_the_account_and_its_history(aws, world) -> None:
    result = scan(bucket_of(aws), KeyLayout())
    found = {(f.key, f.versionId is None, tuple(f.path), f.source, f.whole) for f in result.findings}
    db = "Secrets Manager secret prod/db"
    current_state = {
        (("resources", "Db", "properties", "MasterUsername"), f"{db}, key username", True),
        (
            ("resources", "Db", "properties", "MasterUserPassword"),
            f"{db}, key password; property MasterUserPassword of AWS::RDS::DBInstance",
            True,
        ),
        (("resources", "Fn", "properties", "Environment", "Variables", "DB_URL"), f"{db}, key password", False),
        (
            ("resources", "Fn", "properties", "Environment", "Variables", "TOKEN"),
            "Secrets Manager secret prod/token",
            True,
        ),
        (
            ("resources", "Fn", "properties", "Environment", "Variables", "API"),
            "SSM SecureString parameter /prod/api-key",
            True,
        ),
        (
            ("resources", "Key", "attributes", "SecretAccessKey"),
            "property SecretAccessKey of AWS::IAM::AccessKey",
            True,
        ),
        (("outputs", "DbPassword"), f"{db}, key password", True),
        (("outputs", "ConnString"), "SSM SecureString parameter /prod/api-key", False),
        (
            ("orphans", 0, "state", "properties", "MasterUserPassword"),
            f"{db}, key password; property MasterUserPassword of AWS::RDS::DBInstance",
            True,
        ),
    }
    assert {(p, s, w) for k, cur, p, s, w in found if k == STATE and cur} == current_state | {
        (
            ("resources", "Db", "observedProperties", "MasterUserPassword"),
            f"{db}, key password; property MasterUserPassword of AWS::RDS::DBInstance",
            True,
        )
    }
    assert (STATE, False, ("outputs", "DbPassword"), f"{db}, key password", True) in found  # the older version
    assert (
        JOURNAL,
        False,
        ("segments", 0, "failedOperations", 0, "attemptedProperties", "MasterUserPassword"),
        f"{db}, key password; property MasterUserPassword of AWS::RDS::DBInstance",
        True,
    ) in found
    assert (EVENTS, False, (1, "message"), "Secrets Manager secret prod/token", False) in found
    assert (CR, False, ("Data", "Password"), "property Password", True) in found
    assert {(k, cur) for k, cur, *_ in found if k == INDEX} == {(INDEX, True), (INDEX, False)}
    assert not [f for f in result.findings if f.key == OTHER]
    assert {f.stackName for f in result.findings} == {"App"}
    assert {f.account for f in result.findings} == {A1}
    assert_no_secret([f.as_json(whole=True) for f in result.findings], result.warnings)
    assert result.secrets == 5  # prod/db whole + 2 keys, prod/token, /prod/api-key; not A2's

    other = scan(bucket_of(aws, A2, BUCKET2), KeyLayout())
    known = [(f.key, f.path, f.source) for f in other.findings if not f.source.startswith("property ")]
    # A2 is searched for A2's secrets only; its property-name hits are found all the same.
    assert known == [("cdkd/Far/us-east-1/state.json", ("outputs", "S"), "Secrets Manager secret other/secret")]


def test_it_scrubs_the_current_record_to_exact_bytes_and_patches_the_index(aws, world) -> None:
    arns = world["arns"]
    bucket = bucket_of(aws)
    spec = spec_for("scrub")
    # MasterUsername is create-only on an RDS instance: rewritten, cdkd's next diff replaces it.
    with pytest.raises(
        OperationRefused, match=r"REPLACE 1 resource\(s\).*App: Db \(AWS::RDS::DBInstance: MasterUsername\)"
    ):
        spec.plan(context(bucket)[0])
    ctx, lines = context(bucket, allow_replacement=True, keep_history=True)
    plan = spec.plan(ctx)
    assert plan.etag == aws.etag(A1, BUCKET1, STATE)
    assert f"{STATE}: resources.Db.properties.MasterUserPassword -> {ref(arns['db'], 'password')}" in "\n".join(
        plan.changes
    )
    outcome = spec.execute(ctx, Plan.from_json(json.loads(json.dumps(plan.as_json()))))

    stored = aws.get(A1, BUCKET1, STATE)
    written = json.loads(stored)
    assert written["lastModified"] > 1_700_000_000_000
    expected = app_record(lastModified=written["lastModified"])
    del expected["skippedOutputs"]
    db, fn, key = (expected["resources"][k] for k in ("Db", "Fn", "Key"))
    db["properties"]["MasterUsername"] = ref(arns["db"], "username")
    db["properties"]["MasterUserPassword"] = ref(arns["db"], "password")
    db["observedProperties"]["MasterUserPassword"] = ref(arns["db"], "password")
    variables = fn["properties"]["Environment"]["Variables"]
    variables.update(DB_URL="***", TOKEN=ref(arns["token"]), API="{{resolve:ssm:/prod/api-key}}")
    key["attributes"]["SecretAccessKey"] = "***"
    expected["outputs"] = {"DbPassword": ref(arns["db"], "password"), "ConnString": "***", "Plain": "hello"}
    expected["orphans"][0]["state"]["properties"]["MasterUserPassword"] = ref(arns["db"], "password")
    assert stored == cdkd_json(expected)

    index = json.loads(aws.get(A1, BUCKET1, INDEX))
    want = index_body(ref(arns["db"], "password"))
    want["exports"]["ConnString"]["value"] = "***"
    want["lastModified"] = index["lastModified"]
    assert aws.get(A1, BUCKET1, INDEX) == cdkd_json(want)
    assert json.loads(aws.get(A1, BUCKET1, OTHER))["outputs"] == {"OtherOut": "fine"}

    # The current journal, stream and placeholder are clean; the history was not purged.
    assert outcome.status == "succeeded", outcome.warnings
    assert outcome.etag_after == aws.etag(A1, BUCKET1, STATE)
    assert "ROTATE every secret" in outcome.summary
    assert any("ROTATE" in w for w in outcome.warnings)
    assert len(versions(aws, STATE)) == 3
    assert_no_secret(plan.as_json(), outcome.summary, outcome.details, outcome.warnings, lines)

    again = scan(bucket_of(aws), KeyLayout(), stacks=["App"], region=REGION)
    assert not [f for f in again.findings if f.versionId is None and f.key in (STATE, INDEX)]


def test_it_purges_the_history_of_every_key_that_held_a_finding(aws, world) -> None:
    bucket = bucket_of(aws)
    spec = spec_for("scrub")
    ctx, lines = context(bucket, purge_history=True, allow_replacement=True)
    plan = spec.plan(ctx)
    assert plan.data["purge"] == sorted([CR, STATE, JOURNAL, EVENTS, INDEX])
    outcome = spec.execute(ctx, plan)

    assert outcome.status == "succeeded", outcome.warnings
    for key in (STATE, JOURNAL, EVENTS, INDEX, CR):
        remaining = versions(aws, key)
        assert [v["IsLatest"] for v in remaining] == [True], key  # only the current version is left
    assert json.loads(aws.get(A1, BUCKET1, JOURNAL))["segments"] == []
    assert len(versions(aws, OTHER)) == 1
    assert {row["key"]: row["result"] for row in outcome.details["purge"]} == dict.fromkeys(
        plan.data["purge"], "purged"
    )
    assert outcome.details["replication"] == []
    assert_no_secret(plan.as_json(), outcome.summary, outcome.details, outcome.warnings, lines)

    after = scan(bucket_of(aws), KeyLayout(), stacks=["App"], region=REGION)
    assert after.findings == []


def test_it_reports_a_denied_purge_per_key_and_fails_nothing_else(aws, world) -> None:
    bucket = bucket_of(aws)
    spec = spec_for("scrub")
    ctx, _ = context(bucket, purge_history=True, allow_replacement=True)
    plan = spec.plan(ctx)
    aws.proxy.deny_operation("DeleteObjects")
    outcome = spec.execute(ctx, plan)

    assert outcome.status == "partial"
    assert {row["key"]: row["result"] for row in outcome.details["purge"]} == dict.fromkeys(
        plan.data["purge"], "failed: AccessDenied: s3:DeleteObjectVersion"
    )
    warning = next(w for w in outcome.warnings if w.startswith("Could not purge"))
    assert "Could not purge noncurrent versions of 5 key(s)" in warning
    assert "Grant s3:ListBucketVersions and s3:DeleteObjectVersion" in warning
    assert json.loads(aws.get(A1, BUCKET1, STATE))["outputs"]["ConnString"] == "***"  # the rewrite stands
    assert len(versions(aws, STATE)) == 3


def test_it_reports_a_denied_listing_per_key(aws, world) -> None:
    bucket = bucket_of(aws)
    spec = spec_for("scrub")
    ctx, _ = context(bucket, purge_history=True, allow_replacement=True)
    plan = spec.plan(ctx)
    aws.proxy.deny_operation("ListObjectVersions")
    outcome = spec.execute(ctx, plan)

    assert outcome.status == "partial"
    assert {row["result"] for row in outcome.details["purge"]} == {"failed: AccessDenied: s3:ListBucketVersions"}
    assert aws.requests["DeleteObjects"] == 0


def test_it_names_replication_destinations_that_keep_copies(aws, world) -> None:
    aws.make_bucket(A1, "cdkd-state-replica")
    aws.s3(A1).put_bucket_replication(
        Bucket=BUCKET1,
        ReplicationConfiguration={
            "Role": f"arn:aws:iam::{A1}:role/replication",
            "Rules": [
                {
                    "ID": "all",
                    "Priority": 1,
                    "Status": "Enabled",
                    "Filter": {"Prefix": "cdkd/"},
                    "DeleteMarkerReplication": {"Status": "Disabled"},
                    "Destination": {"Bucket": "arn:aws:s3:::cdkd-state-replica"},
                }
            ],
        },
    )
    spec = spec_for("scrub")
    ctx, _ = context(bucket_of(aws), purge_history=True, allow_replacement=True)
    outcome = spec.execute(ctx, spec.plan(ctx))

    assert outcome.details["replication"] == ["cdkd-state-replica"]
    assert outcome.status == "partial"
    assert any("Destination(s): cdkd-state-replica" in w and "NEVER replicates" in w for w in outcome.warnings)


def test_it_reports_an_object_lock_bucket_as_not_purgeable(aws, world) -> None:
    locked = "cdkd-state-locked"
    aws.s3(A1).create_bucket(Bucket=locked, ObjectLockEnabledForBucket=True)
    aws.put(A1, locked, STATE, app_record())
    aws.put(A1, locked, STATE, cdkd_json(app_record()))
    spec = spec_for("scrub")
    ctx, _ = context(bucket_of(aws, A1, locked), purge_history=True, allow_replacement=True)
    plan = spec.plan(ctx)
    outcome = spec.execute(ctx, plan)

    assert outcome.status == "partial"
    assert outcome.details["purge"] == [{"key": STATE, "result": "not purgeable (Object Lock)"}]
    assert any("Object Lock" in w for w in outcome.warnings)
    assert len(versions(aws, STATE, locked)) == 3  # two seeded, one scrubbed: nothing purged


def test_it_refuses_malformed_and_newer_records_and_stale_plans(aws, world) -> None:
    aws.put(A1, BUCKET1, "cdkd/Bad/us-east-1/state.json", b'{"version": 11, "resources": []}')
    aws.put(A1, BUCKET1, "cdkd/New/us-east-1/state.json", {"version": 12, "resources": {}, "outputs": {"P": PW}})
    spec = spec_for("scrub")
    with pytest.raises(OperationRefused, match=r"cdkd/Bad/us-east-1/state.json is malformed"):
        spec.plan(context(bucket_of(aws), "Bad")[0])
    with pytest.raises(OperationRefused, match=r"cdkd/New/us-east-1/state.json has schema version 12"):
        spec.plan(context(bucket_of(aws), "New")[0])
    ctx, _ = context(bucket_of(aws), allow_replacement=True)
    plan = spec.plan(ctx)
    aws.put(A1, BUCKET1, STATE, cdkd_json(app_record(lastModified=2)))
    with pytest.raises(StalePlan):
        spec.execute(ctx, plan)


def test_it_refuses_when_the_secrets_changed_since_the_plan(aws, world) -> None:
    spec = spec_for("scrub")
    ctx, _ = context(bucket_of(aws), allow_replacement=True)
    plan = spec.plan(ctx)
    aws_client(aws, A1, "secretsmanager").delete_secret(SecretId="prod/token", ForceDeleteWithoutRecovery=True)
    with pytest.raises(OperationRefused, match="differs from the plan"):
        spec.execute(ctx, plan)


# --- the management command ---------------------------------------------------------------------


def cdkd(*args: str) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("cdkd", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_it_prints_findings_and_scrubs_through_the_cli(aws, world) -> None:
    from django.core.management import CommandError

    from stacks.models import AuditEvent, Operation

    cdkd("accounts", "add", "--account-id", A1, "--role-arn", f"arn:aws:iam::{A1}:role/cdkd-admin")
    printed = json.loads(cdkd("scrub", "--account", A1, "--dry-run", "--json"))
    assert set(printed) == {"findings"}
    assert printed["findings"]
    for row in printed["findings"]:
        assert set(row) == {"account", "stackName", "region", "key", "versionId", "path", "source"}
    assert {
        "account": A1,
        "stackName": "App",
        "region": REGION,
        "key": STATE,
        "versionId": None,
        "path": ["outputs", "DbPassword"],
        "source": "Secrets Manager secret prod/db, key password",
    } in printed["findings"]
    named = json.loads(cdkd("scrub", "App", "--account", A1, "--stack-region", REGION, "--json"))
    assert {r["stackName"] for r in named["findings"]} == {"App"}

    # A journal whose CURRENT version holds a secret is left (scrub never rewrites it): non-zero.
    aws.put(A1, BUCKET1, JOURNAL, {"journalVersion": 1, "segments": [{"attemptedProperties": {"Password": PW}}]})
    with pytest.raises(CommandError) as raised:
        cdkd(
            "scrub", "App", "--account", A1, "--stack-region", REGION, "--yes", "--purge-history", "--allow-replacement"
        )
    assert raised.value.returncode == 2
    op = Operation.objects.get(kind="scrub")
    assert op.status == "partial" and op.via == "cli"
    assert json.loads(aws.get(A1, BUCKET1, STATE))["outputs"]["ConnString"] == "***"
    assert AuditEvent.objects.filter(action="operation.finished", result="partial").count() == 1
    rows = list(Operation.objects.values()) + list(AuditEvent.objects.values())
    assert_no_secret(rows, printed, named)
