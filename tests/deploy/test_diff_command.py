"""`manage.py cdkd diff` against a moto server holding the record cdkd 0.284.40 wrote."""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "cdkd-0.284.40"
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"


def cdkd(*args: str) -> str:
    out = io.StringIO()
    call_command("cdkd", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def diff_exit(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("cdkd", "diff", *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def world(aws):
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, KEY, (SAMPLE / "state.json").read_bytes())
    aws.put(A1, BUCKET, "cdkd/_index/us-east-1/exports.json", (SAMPLE / "exports.json").read_bytes())
    cdkd("accounts", "add", "--account-id", A1, "--role-arn", f"arn:aws:iam::{A1}:role/cdkd-admin", "--name", "prod")
    return aws


def test_it_prints_cdkds_no_change_diff_and_the_plan_bound_to_the_record(world):
    world.reset_counts()
    code, out = diff_exit("--account", A1, "--app", str(SAMPLE / "assembly"), "--json", "--fail")
    assert code == 0
    (node,) = json.loads(out)
    plan = node.pop("plan")
    assert [node] == json.loads((SAMPLE / "diff-nochange.json").read_text())
    assert plan["stateKey"] == KEY and plan["stateBucket"] == BUCKET
    assert plan["stateEtag"] == world.etag(A1, BUCKET, KEY)
    assert plan["blocking"] == [] and len(plan["digest"]) == 64
    # one GET of the record; no ImportValue, so the exports index is never read
    assert world.requests["GetObject"] == 1


def test_it_creates_everything_for_a_new_stack_and_fails_with_fail(world, tmp_path):
    world.delete(A1, BUCKET, KEY)
    code, out = diff_exit("GoldenCdkStack", "--account", "prod", "--app", str(SAMPLE / "assembly"), "--fail")
    assert code == 1
    assert "  [+] Queue4A7E3555 (AWS::SQS::Queue)" in out
    assert "5 to create, 0 to update, 0 to delete" in out
    code, out = diff_exit("--account", "prod", "--app", str(SAMPLE / "assembly"), "--json")
    assert code == 0 and json.loads(out)[0]["plan"]["stateEtag"] is None


def test_it_exits_3_after_printing_the_preview_of_a_malformed_record(world):
    record = json.loads((SAMPLE / "state.json").read_bytes())
    record["outputs"] = "abc"
    world.put(A1, BUCKET, KEY, record)
    code, out = diff_exit("--account", A1, "--app", str(SAMPLE / "assembly"))
    assert code == 3
    with pytest.raises(CommandError, match="the deploy would refuse to start: 2 blocking condition"):
        cdkd("diff", "--account", A1, "--app", str(SAMPLE / "assembly"))
    assert out.splitlines()[0] == "Stack GoldenCdkStack (us-east-1): no changes"
    assert "Blocking (cdkd deploy will refuse):" in out and "the outputs bag is unreadable" in out


def test_it_refuses_an_assembly_for_another_account_and_bad_parameters(world, tmp_path):
    app = tmp_path / "cdk.out"
    shutil.copytree(SAMPLE / "assembly", app)
    manifest = json.loads((app / "manifest.json").read_text())
    other = copy.deepcopy(manifest)
    other["artifacts"]["GoldenCdkStack"]["environment"] = "aws://999999999999/us-east-1"
    (app / "manifest.json").write_text(json.dumps(other))
    with pytest.raises(CommandError, match="synthesized for account 999999999999") as exc:
        cdkd("diff", "--account", A1, "--app", str(app))
    assert exc.value.returncode == 2
    with pytest.raises(CommandError, match="declares a parameter named Nope") as exc:
        cdkd("diff", "--account", A1, "--app", str(SAMPLE / "assembly"), "--parameters", "Nope=1")
    assert exc.value.returncode == 2


def test_it_descends_into_nested_stacks_with_recursive(world, tmp_path):
    app = tmp_path / "cdk.out"
    app.mkdir()
    parent = {
        "Resources": {
            "Child": {
                "Type": "AWS::CloudFormation::Stack",
                "Properties": {"TemplateURL": "https://x/child.json", "Parameters": {"Size": "3"}},
                "Metadata": {"aws:asset:path": "AppChild.nested.template.json"},
            }
        }
    }
    child = {
        "Parameters": {"Size": {"Type": "String"}},
        "Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"DelaySeconds": {"Ref": "Size"}}}},
    }
    manifest = {
        "version": "55.0.0",
        "artifacts": {
            "App": {
                "type": "aws:cloudformation:stack",
                "environment": f"aws://{A1}/us-east-1",
                "properties": {"templateFile": "App.template.json"},
            }
        },
    }
    (app / "manifest.json").write_text(json.dumps(manifest))
    (app / "App.template.json").write_text(json.dumps(parent))
    (app / "AppChild.nested.template.json").write_text(json.dumps(child))
    child_row = {
        "physicalId": "arn:aws:cloudformation:us-east-1:111111111111:stack/App-Child/cdkd",
        "resourceType": "AWS::CloudFormation::Stack",
        "properties": {"TemplateURL": "https://x/child.json", "Parameters": {"Size": "3"}},
    }
    gone_row = {**child_row, "properties": {}}
    world.put(
        A1,
        BUCKET,
        "cdkd/App/us-east-1/state.json",
        {"version": 11, "resources": {"Child": child_row, "Gone": gone_row}},
    )
    world.put(
        A1,
        BUCKET,
        "cdkd/App~Gone/us-east-1/state.json",
        {
            "version": 11,
            "resources": {
                "T": {
                    "physicalId": "arn:aws:sns:us-east-1:111111111111:t",
                    "resourceType": "AWS::SNS::Topic",
                    "properties": {},
                }
            },
        },
    )
    queue = {"physicalId": "https://q", "resourceType": "AWS::SQS::Queue", "properties": {"DelaySeconds": "2"}}
    world.put(A1, BUCKET, "cdkd/App~Child/us-east-1/state.json", {"version": 11, "resources": {"Q": queue}})

    code, out = diff_exit("--account", A1, "--app", str(app), "--recursive", "--json", "--fail")
    (node,) = json.loads(out)
    assert [c["logicalId"] for c in node["changes"]] == ["Gone"]
    kid, gone = node["children"]
    # a child only the record still holds is planned against an empty template
    assert gone["stack"] == "App~Gone"
    assert gone["changes"] == [{"logicalId": "T", "changeType": "DELETE", "resourceType": "AWS::SNS::Topic"}]
    assert kid["stack"] == "App~Child"
    assert kid["changes"][0]["propertyChanges"] == [
        {"path": "DelaySeconds", "oldValue": "2", "newValue": "3", "requiresReplacement": False}
    ]
    assert kid["plan"]["stateKey"] == "cdkd/App~Child/us-east-1/state.json"
    assert code == 3  # the parent deletes a nested stack: the first deploy engine refuses nested stacks
    code, out = diff_exit("--account", A1, "--app", str(app), "--json")
    assert json.loads(out)[0]["children"] == []


def test_it_reads_ssm_parameters_with_the_accounts_role_and_never_decrypts_a_secure_string(world, tmp_path):
    ssm = world.account_session(A1).client("ssm", region_name="us-east-1", endpoint_url=world.moto.url)
    ssm.put_parameter(Name="/app/ami", Value="ami-2", Type="String")
    ssm.put_parameter(Name="/app/pw", Value="hunter2-plain", Type="SecureString")
    app = tmp_path / "cdk.out"
    app.mkdir()
    template = {
        "Parameters": {"Ami": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/app/ami"}},
        "Resources": {
            "P": {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": {"Ref": "Ami"}}},
            "S": {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": "{{resolve:ssm:/app/pw}}"}},
        },
    }
    manifest = {
        "artifacts": {
            "Ssm": {
                "type": "aws:cloudformation:stack",
                "environment": f"aws://{A1}/us-east-1",
                "properties": {"templateFile": "Ssm.template.json"},
            }
        }
    }
    (app / "manifest.json").write_text(json.dumps(manifest))
    (app / "Ssm.template.json").write_text(json.dumps(template))
    rows = {
        "P": {
            "physicalId": "p",
            "resourceType": "AWS::SSM::Parameter",
            "properties": {"Type": "String", "Value": "ami-1"},
        },
        "S": {"physicalId": "s", "resourceType": "AWS::SSM::Parameter", "properties": {"Type": "String", "Value": "x"}},
    }
    world.put(A1, BUCKET, "cdkd/Ssm/us-east-1/state.json", {"version": 11, "resources": rows})
    code, out = diff_exit("--account", A1, "--app", str(app), "--json")
    (node,) = json.loads(out)
    by_id = {c["logicalId"]: c["propertyChanges"][0] for c in node["changes"]}
    assert by_id["P"]["newValue"] == "ami-2"
    assert by_id["S"]["newValue"] == "{{resolve:ssm:/app/pw}}"  # a SecureString stays the reference
    assert "hunter2" not in out


def test_it_reads_the_exports_index_only_for_an_import_and_records_it(world, tmp_path):
    app = tmp_path / "cdk.out"
    app.mkdir()
    template = {
        "Resources": {
            "P": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Type": "String", "Value": {"Fn::ImportValue": "GoldenCdkStack-TopicArn"}},
            }
        }
    }
    manifest = {
        "artifacts": {
            "Consumer": {
                "type": "aws:cloudformation:stack",
                "environment": f"aws://{A1}/us-east-1",
                "properties": {"templateFile": "Consumer.template.json"},
            }
        }
    }
    (app / "manifest.json").write_text(json.dumps(manifest))
    (app / "Consumer.template.json").write_text(json.dumps(template))
    world.reset_counts()
    code, out = diff_exit("--account", A1, "--app", str(app), "--json")
    (node,) = json.loads(out)
    assert node["changes"] == [{"logicalId": "P", "changeType": "CREATE", "resourceType": "AWS::SSM::Parameter"}]
    assert node["plan"]["imports"] == [
        {"exportName": "GoldenCdkStack-TopicArn", "sourceStack": "GoldenCdkStack", "sourceRegion": "us-east-1"}
    ]
    # the region key and the legacy key of the new stack, then the exports index once
    assert world.requests["GetObject"] == 3
