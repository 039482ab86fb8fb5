"""Scrub as complete as cdkd's (issue 12), against moto (S3, Secrets Manager, SSM) through
the proxy: with an assembly the template's own expressions (stored bytes), NoEcho as `***`
with noEchoLeaves, nested children under their own locks; without one, cdkd's next diff
predicted with the plan engine and checked by running the real plan on the scrubbed
record; the replacement consent; SecureString references as cdkd writes them; the history
purge by default and the keep option."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from engine.deploy.plan import compute_plan
from engine.keys import KeyLayout
from engine.locks import StackLock
from engine.operations import OperationRefused, spec_for
from tests.integration.test_scrub import (
    A1,
    API,
    BUCKET1,
    DB_USER,
    PW,
    REGION,
    TOKEN,
    assert_no_secret,
    bucket_of,
    cdkd_json,
    context,
    make_secrets,
    ref,
    versions,
)

pytestmark = pytest.mark.integration

STATE = "cdkd/App/us-east-1/state.json"
CHILD = "cdkd/App~Child/us-east-1/state.json"
JOURNAL = "cdkd/App/us-east-1/rollback-journal.json"
ADMIN = "noecho-default-1234"  # the NoEcho parameter's Default, held in the clear by a v10 record


def join(*parts: Any) -> dict[str, Any]:
    return {"Fn::Join": ["", list(parts)]}


def write_app(root: Path, arn: str) -> Path:
    """A cdk.out as CDK synthesizes it: an RDS instance reading its generated secret, a
    function reading secrets three ways and a NoEcho parameter, a nested child."""
    app = root / "cdk.out"
    app.mkdir()
    secret = {"Ref": "DbSecret"}
    parent = {
        "Parameters": {"AdminToken": {"Type": "String", "NoEcho": True, "Default": ADMIN}},
        "Resources": {
            "DbSecret": {"Type": "AWS::SecretsManager::Secret", "Properties": {"Name": "prod/db"}},
            "Db": {
                "Type": "AWS::RDS::DBInstance",
                "Properties": {
                    "MasterUsername": join("{{resolve:secretsmanager:", secret, ":SecretString:username::}}"),
                    "MasterUserPassword": join("{{resolve:secretsmanager:", secret, ":SecretString:password::}}"),
                    "DBName": "app",
                },
            },
            "Fn": {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Environment": {
                        "Variables": {
                            # the template names the secret by name here, not by ARN: its own spelling is kept
                            "DB_URL": join(
                                "postgres://app:",
                                "{{resolve:secretsmanager:prod/db:SecretString:password::}}",
                                "@db/app",
                            ),
                            "API": "{{resolve:ssm:/prod/api-key}}",
                            "PLAIN": "{{resolve:ssm:/prod/plain}}",
                            "ADMIN": {"Ref": "AdminToken"},
                        }
                    }
                },
            },
            "Child": {
                "Type": "AWS::CloudFormation::Stack",
                "Properties": {
                    "TemplateURL": "https://x/child.json",
                    "Parameters": {"Pw": join("{{resolve:secretsmanager:", secret, ":SecretString:password::}}")},
                },
                "Metadata": {"aws:asset:path": "AppChild.nested.template.json"},
            },
        },
        "Outputs": {
            "DbUser": {"Value": join("{{resolve:secretsmanager:", secret, ":SecretString:username::}}")},
            "Admin": {"Value": {"Ref": "AdminToken"}},
        },
    }
    child = {
        "Parameters": {"Pw": {"Type": "String"}},
        "Resources": {"P": {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": {"Ref": "Pw"}}}},
    }
    manifest = {
        "version": "55.0.0",
        "artifacts": {
            "App": {
                "type": "aws:cloudformation:stack",
                "environment": f"aws://{A1}/{REGION}",
                "properties": {"templateFile": "App.template.json"},
            }
        },
    }
    (app / "manifest.json").write_text(json.dumps(manifest))
    (app / "App.template.json").write_text(json.dumps(parent))
    (app / "AppChild.nested.template.json").write_text(json.dumps(child))
    return app


def parent_record(arn: str) -> dict[str, Any]:
    """What an older cdkd (v10) stored: every secret resolved into plaintext."""
    return {
        "version": 10,
        "stackName": "App",
        "region": REGION,
        "resources": {
            "DbSecret": {
                "physicalId": arn,
                "resourceType": "AWS::SecretsManager::Secret",
                "properties": {"Name": "prod/db"},
            },
            "Db": {
                "physicalId": "app-db",
                "resourceType": "AWS::RDS::DBInstance",
                "properties": {"MasterUsername": DB_USER, "MasterUserPassword": PW, "DBName": "app"},
                "attributes": {"Endpoint.Address": "app-db.example.com"},
            },
            "Fn": {
                "physicalId": "app-fn",
                "resourceType": "AWS::Lambda::Function",
                "properties": {
                    "Environment": {
                        "Variables": {
                            "DB_URL": f"postgres://app:{PW}@db/app",
                            "API": API,
                            "PLAIN": "not-a-secret-value",
                            "ADMIN": ADMIN,
                        }
                    }
                },
                "attributes": {"Note": f"admin token {ADMIN}"},
            },
            "Child": {
                "physicalId": "arn:aws:cloudformation:us-east-1:111111111111:stack/App-Child/cdkd",
                "resourceType": "AWS::CloudFormation::Stack",
                "properties": {"TemplateURL": "https://x/child.json", "Parameters": {"Pw": PW}},
            },
        },
        "outputs": {"DbUser": DB_USER, "Admin": ADMIN},
        "lastModified": 1_700_000_000_000,
    }


def child_record() -> dict[str, Any]:
    row = {
        "physicalId": "/app/pw",
        "resourceType": "AWS::SSM::Parameter",
        "properties": {"Type": "String", "Value": PW},
    }
    return {"version": 11, "stackName": "App~Child", "region": REGION, "resources": {"P": row}, "outputs": {}}


@pytest.fixture
def secrets(aws) -> dict[str, str]:
    arns = make_secrets(aws)
    aws.make_bucket(A1, BUCKET1)
    return arns


def test_it_writes_exactly_the_templates_expressions_with_an_assembly(aws, secrets, tmp_path) -> None:
    arn = secrets["db"]
    app = write_app(tmp_path, arn)
    aws.put(A1, BUCKET1, STATE, cdkd_json(parent_record(arn)))
    aws.put(A1, BUCKET1, CHILD, cdkd_json(child_record()))
    spec = spec_for("scrub")
    ctx, lines = context(bucket_of(aws), app=str(app))
    plan = spec.plan(ctx)
    # The template's own references read back as no change: nothing to consent to, even for
    # the create-only MasterUsername.
    assert plan.data["replacements"] == []
    assert {(p.get("logicalId"), p.get("property"), p.get("output"), p["diff"]) for p in plan.data["predicted"]} == {
        ("Db", "MasterUsername", None, "no change"),
        ("Db", "MasterUserPassword", None, "no change"),
        ("Fn", "Environment", None, "no change"),
        ("Child", "Parameters", None, "no change"),
        (None, None, None, "no change"),  # attributes and noEchoLeaves: the diff does not compare them
        (None, None, "DbUser", "no change"),
        (None, None, "Admin", "no change"),
    }
    assert plan.data["assembly"] and plan.data["children"][0]["stack"] == "App~Child"
    outcome = spec.execute(ctx, plan)
    assert outcome.status == "succeeded", outcome.warnings

    stored = aws.get(A1, BUCKET1, STATE)
    written = json.loads(stored)
    expected = parent_record(arn)
    expected.update(version=11, lastModified=written["lastModified"])
    rows = expected["resources"]
    rows["Db"]["properties"]["MasterUsername"] = ref(arn, "username")
    rows["Db"]["properties"]["MasterUserPassword"] = ref(arn, "password")
    variables = rows["Fn"]["properties"]["Environment"]["Variables"]
    variables.update(
        DB_URL="postgres://app:{{resolve:secretsmanager:prod/db:SecretString:password::}}@db/app",
        API="{{resolve:ssm:/prod/api-key}}",
        ADMIN="***",
    )  # PLAIN is a String parameter: public configuration, stays resolved as cdkd keeps it
    rows["Fn"]["attributes"]["Note"] = "***"  # the NoEcho value held elsewhere in the same record
    rows["Fn"]["noEchoLeaves"] = [["Environment", "Variables", "ADMIN"]]
    rows["Child"]["properties"]["Parameters"]["Pw"] = ref(arn, "password")
    expected["outputs"] = {"DbUser": ref(arn, "username"), "Admin": "***"}
    assert stored == cdkd_json(expected)

    child = child_record()
    child["resources"]["P"]["properties"]["Value"] = ref(arn, "password")
    child["lastModified"] = json.loads(aws.get(A1, BUCKET1, CHILD))["lastModified"]
    assert aws.get(A1, BUCKET1, CHILD) == cdkd_json(child)
    assert outcome.details["children"] == [{"stack": "App~Child", "key": CHILD, "rewritten": 1, "result": "scrubbed"}]
    # Both rewritten records lost their pre-scrub bodies (the default purge).
    assert [v["IsLatest"] for v in versions(aws, STATE)] == [True]
    assert [v["IsLatest"] for v in versions(aws, CHILD)] == [True]
    assert_no_secret(plan.as_json(), outcome.details, outcome.warnings, lines)
    assert ADMIN not in json.dumps([plan.as_json(), outcome.details, outcome.warnings, lines])


def test_it_reports_a_nested_child_whose_lock_is_held_and_never_counts_it(aws, secrets, tmp_path) -> None:
    arn = secrets["db"]
    app = write_app(tmp_path, arn)
    aws.put(A1, BUCKET1, STATE, cdkd_json(parent_record(arn)))
    aws.put(A1, BUCKET1, CHILD, cdkd_json(child_record()))
    spec = spec_for("scrub")
    ctx, _ = context(bucket_of(aws), app=str(app))
    plan = spec.plan(ctx)
    other = StackLock(
        bucket_of(aws), KeyLayout().lock_key("App~Child", REGION), owner="cdkd:bob@ci:1", operation="deploy"
    )
    other.acquire()
    outcome = spec.execute(ctx, plan)

    assert outcome.status == "partial"
    (row,) = outcome.details["children"]
    assert row["result"].startswith("not scrubbed") and row["stack"] == "App~Child"
    assert aws.get(A1, BUCKET1, CHILD) == cdkd_json(child_record())  # untouched
    assert CHILD not in [p["key"] for p in outcome.details["purge"]]
    assert json.loads(aws.get(A1, BUCKET1, STATE))["resources"]["Db"]["properties"]["MasterUsername"] == ref(
        arn, "username"
    )


# --- without an assembly ------------------------------------------------------------------------


def plain_record() -> dict[str, Any]:
    return {
        "version": 11,
        "stackName": "App",
        "region": REGION,
        "resources": {
            "Db": {
                "physicalId": "app-db",
                "resourceType": "AWS::RDS::DBInstance",
                "properties": {"MasterUsername": DB_USER, "MasterUserPassword": PW, "DBName": "app"},
            },
            "Fn": {
                "physicalId": "app-fn",
                "resourceType": "AWS::Lambda::Function",
                "properties": {"Environment": {"Variables": {"TOKEN": TOKEN, "API": API}}, "Timeout": 3},
                "attributes": {"Arn": "arn:aws:lambda:us-east-1:111111111111:function:app-fn"},
            },
        },
        "outputs": {"Plain": "hello"},
        "lastModified": 1_700_000_000_000,
    }


def test_it_predicts_without_an_assembly_what_the_plan_engine_then_reports(aws, secrets) -> None:
    aws.put(A1, BUCKET1, STATE, cdkd_json(plain_record()))
    spec = spec_for("scrub")
    with pytest.raises(OperationRefused) as refused:
        spec.plan(context(bucket_of(aws))[0])
    assert "REPLACE 1 resource(s)" in str(refused.value)
    assert "App: Db (AWS::RDS::DBInstance: MasterUsername)" in str(refused.value)
    assert aws.get(A1, BUCKET1, STATE) == cdkd_json(plain_record())  # nothing written on a refusal

    ctx, _ = context(bucket_of(aws), allow_replacement=True)
    plan = spec.plan(ctx)
    predicted = {(p["logicalId"], p["property"]): p["diff"] for p in plan.data["predicted"]}
    assert predicted == {
        ("Db", "MasterUsername"): "replacement",
        ("Db", "MasterUserPassword"): "update",
        ("Fn", "Environment"): "update",
    }
    assert plan.data["replacements"] == [
        {"stack": "App", "logicalId": "Db", "resourceType": "AWS::RDS::DBInstance", "properties": ["MasterUsername"]}
    ]
    assert any(c.startswith("consented (allow replacement)") for c in plan.changes)
    spec.execute(ctx, plan)

    # The real plan: the template as the record was last deployed (its values as literals),
    # against the record the scrub wrote.
    scrubbed = json.loads(aws.get(A1, BUCKET1, STATE))
    template = {
        "Resources": {
            lid: {"Type": row["resourceType"], "Properties": row["properties"]}
            for lid, row in plain_record()["resources"].items()
        },
        "Outputs": {"Plain": {"Value": "hello"}},
    }
    real = compute_plan(template, scrubbed, stack_name="App", region=REGION, account=A1)
    reported = {
        (c["logicalId"], pc["path"]): "replacement" if pc["requiresReplacement"] else "update"
        for c in real.node["changes"]
        for pc in c.get("propertyChanges", [])
    }
    assert reported == predicted
    assert real.node["outputChanges"] == []
    # A SecureString parameter's value is written as cdkd writes it: a plain ssm reference.
    assert scrubbed["resources"]["Fn"]["properties"]["Environment"]["Variables"] == {
        "TOKEN": ref(secrets["token"]),
        "API": "{{resolve:ssm:/prod/api-key}}",
    }


def test_it_leaves_a_rewrite_the_diff_reads_as_no_change_without_consent(aws, secrets) -> None:
    record = plain_record()
    del record["resources"]["Db"]
    aws.put(A1, BUCKET1, STATE, cdkd_json(record))
    spec = spec_for("scrub")
    ctx, _ = context(bucket_of(aws))
    plan = spec.plan(ctx)  # an update in place needs no consent
    assert {p["diff"] for p in plan.data["predicted"]} == {"update"}
    assert plan.data["replacements"] == [] and plan.data["allow_replacement"] is False
    assert spec.execute(ctx, plan).status == "succeeded"


def test_it_purges_rewritten_history_by_default_and_keeps_it_when_asked(aws, secrets) -> None:
    record = plain_record()
    del record["resources"]["Db"]
    for _ in range(2):
        aws.put(A1, BUCKET1, STATE, cdkd_json(record))
    journal = {"journalVersion": 1, "segments": [{"failedOperations": [{"attemptedProperties": {"Password": PW}}]}]}
    aws.put(A1, BUCKET1, JOURNAL, journal)
    aws.put(A1, BUCKET1, JOURNAL, {"journalVersion": 1, "segments": []})
    spec = spec_for("scrub")

    kept, _ = context(bucket_of(aws), keep_history=True)
    plan = spec.plan(kept)
    assert plan.data["history"] == "keep" and plan.data["purge"] == []
    assert any(w.startswith("history is kept") for w in plan.warnings)
    spec.execute(kept, plan)
    assert len(versions(aws, STATE)) == 3  # two seeded, one scrubbed: all kept

    aws.put(A1, BUCKET1, STATE, cdkd_json(record))  # plaintext again, for the default run
    ctx, _ = context(bucket_of(aws))
    plan = spec.plan(ctx)
    assert plan.data["history"] == "purge-rewritten" and plan.data["purge"] == [STATE]
    assert f"{STATE}: delete every noncurrent version (the current one stays)" in plan.changes
    outcome = spec.execute(ctx, plan)
    assert outcome.status == "succeeded", outcome.warnings
    assert [v["IsLatest"] for v in versions(aws, STATE)] == [True]
    assert len(versions(aws, JOURNAL)) == 2  # only purge history reaches keys scrub does not rewrite
    with pytest.raises(OperationRefused, match="contradict"):
        spec.plan(context(bucket_of(aws), keep_history=True, purge_history=True)[0])


# --- the command line ----------------------------------------------------------------------------


def cdkd(*args: str) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("cdkd", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_it_refuses_a_replacement_on_the_cli_until_allowed_and_records_the_consent(aws, secrets, tmp_path) -> None:
    from django.core.management import CommandError

    from stacks.models import AuditEvent, Operation

    aws.put(A1, BUCKET1, STATE, cdkd_json(plain_record()))
    cdkd("accounts", "add", "--account-id", A1, "--role-arn", f"arn:aws:iam::{A1}:role/cdkd-admin")
    with pytest.raises(CommandError) as raised:
        cdkd("scrub", "App", "--account", A1, "--stack-region", REGION, "--yes", "--json")
    assert raised.value.returncode == 2
    assert not Operation.objects.exists()
    assert aws.get(A1, BUCKET1, STATE) == cdkd_json(plain_record())

    printed = json.loads(
        cdkd("scrub", "App", "--account", A1, "--stack-region", REGION, "--yes", "--allow-replacement", "--json")
    )
    op = Operation.objects.get(kind="scrub")
    assert printed["operations"][0]["status"] == "succeeded"
    assert op.params == {"purge_history": False, "keep_history": False, "allow_replacement": True}
    assert op.plan["data"]["replacements"][0]["properties"] == ["MasterUsername"]
    requested = AuditEvent.objects.get(action="operation.requested", operation=op)
    assert requested.details["allow_replacement"] == op.plan["data"]["replacements"]
    with pytest.raises(CommandError, match="--keep-history needs --yes"):
        cdkd("scrub", "App", "--account", A1, "--keep-history")
    rows = list(Operation.objects.values()) + list(AuditEvent.objects.values())
    assert_no_secret(rows, printed)

    app = write_app(tmp_path, secrets["db"])
    aws.put(A1, BUCKET1, STATE, cdkd_json(parent_record(secrets["db"])))
    printed = json.loads(
        cdkd("scrub", "App", "--account", A1, "--stack-region", REGION, "--yes", "--app", str(app), "--json")
    )
    assert printed["operations"][0]["status"] == "succeeded"
    assert json.loads(aws.get(A1, BUCKET1, STATE))["resources"]["Fn"]["noEchoLeaves"] == [
        ["Environment", "Variables", "ADMIN"]
    ]


# --- the web request ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_asks_for_consent_on_the_web_and_takes_a_stored_assembly(aws, secrets, tmp_path) -> None:
    from django.test import Client
    from django.urls import reverse

    from stacks.deployplan import read_upload, store_assembly
    from stacks.models import AuditEvent, Operation
    from stacks.sync import sync_account
    from tests.deploy.zips import zip_dir
    from tests.secrets.world import accounts, people

    aws.put(A1, BUCKET1, STATE, cdkd_json(plain_record()))
    prod, _dev = accounts()
    sync_account(prod)
    olivia = people(prod)["olivia"]
    web = Client()
    web.force_login(olivia)
    url = reverse("operation_new", args=[A1, REGION, "App", "scrub"])

    refused = web.get(url)
    page = refused.content.decode()
    assert refused.status_code == 409 and "REPLACE 1 resource(s)" in page and 'name="allow_replacement"' in page
    preview = web.get(url, {"allow_replacement": "on"})
    assert preview.status_code == 200 and 'id="allow-replacement"' in preview.content.decode()
    assert "MasterUsername" in preview.content.decode()
    digest = preview.context["digest"]
    response = web.post(url, {"allow_replacement": "on", "plan_digest": digest})
    assert response.status_code == 302
    op = Operation.objects.get()
    assert op.params == {"purge_history": False, "allow_replacement": True}
    requested = AuditEvent.objects.get(action="operation.requested", operation=op)
    assert requested.details["allow_replacement"][0]["logicalId"] == "Db"

    stored = store_assembly(read_upload(zip_dir(write_app(tmp_path, secrets["db"]))), user=olivia, name="app.zip")
    aws.put(A1, BUCKET1, STATE, cdkd_json(parent_record(secrets["db"])))  # its secret's row resolves the Ref
    driven = web.get(url, {"assembly": stored.digest})
    assert driven.status_code == 200
    assert driven.context["plan"]["data"]["assembly"] == stored.digest
    assert driven.context["plan"]["data"]["replacements"] == []  # the template's own references: no change
    assert web.get(url, {"assembly": "0" * 64}).status_code == 400
    assert_no_secret(op.plan, op.params, requested.details)
