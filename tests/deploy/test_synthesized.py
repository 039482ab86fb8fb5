"""Assemblies the real aws-cdk-lib 2.275 synthesized (tests/fixtures/deploy/synth/app.js),
planned against the record cdkd 0.284.40 wrote; the expected rows are what cdkd's rules give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.deploy.assembly import AccountMismatch, open_assembly
from engine.deploy.plan import compute_plan
from engine.deploy.render import exit_code, render_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deploy"
SYNTH = FIXTURES / "synth"
RECORD = json.loads((FIXTURES / "cdkd-0.284.40" / "state.json").read_bytes())
TOPIC_ARN = "arn:aws:sns:us-east-1:111111111111:GoldenCdkStack-TopicBFC7AF6E"


def test_it_plans_the_edited_golden_app_as_cdkd_would():
    asm = open_assembly(SYNTH / "golden-changed.out")
    (stack,) = asm.select(None, "111111111111")
    raw = stack.template["Resources"]
    p = compute_plan(
        stack.template,
        RECORD,
        stack_name=stack.stack_name,
        region=stack.region("eu-west-1"),
        account="111111111111",
        construct_paths=stack.construct_paths,
        assembly_digest=asm.digest,
    )
    stored = RECORD["resources"]
    assert p.node == {
        "stack": "GoldenCdkStack",
        "region": "us-east-1",
        "changes": [
            {
                "logicalId": "Queue4A7E3555",
                "changeType": "UPDATE",
                "resourceType": "AWS::SQS::Queue",
                "propertyChanges": [
                    {"path": "VisibilityTimeout", "oldValue": 45, "newValue": 60, "requiresReplacement": False}
                ],
            },
            {
                "logicalId": "QueuePolicy25439813",
                "changeType": "UPDATE",
                "resourceType": "AWS::SQS::QueuePolicy",
                "propertyChanges": [
                    {
                        "path": "PolicyDocument",
                        "oldValue": stored["QueuePolicy25439813"]["properties"]["PolicyDocument"],
                        "newValue": raw["QueuePolicy25439813"]["Properties"]["PolicyDocument"],
                        "requiresReplacement": False,
                        "replacementPropagated": True,
                    }
                ],
            },
            {
                "logicalId": "QueueGoldenCdkStackTopic1060F492172D006E",
                "changeType": "UPDATE",
                "resourceType": "AWS::SNS::Subscription",
                "propertyChanges": [
                    {
                        "path": "TopicArn",
                        "oldValue": TOPIC_ARN,
                        "newValue": {"Ref": "TopicBFC7AF6E"},
                        "requiresReplacement": False,
                        "replacementPropagated": True,
                    }
                ],
            },
            {
                "logicalId": "TopicBFC7AF6E",
                "changeType": "UPDATE",
                "resourceType": "AWS::SNS::Topic",
                "propertyChanges": [{"path": "TopicName", "newValue": "golden-renamed", "requiresReplacement": True}],
            },
            {
                "logicalId": "Param165332EC",
                "changeType": "UPDATE",
                "resourceType": "AWS::SSM::Parameter",
                "propertyChanges": [
                    {
                        "path": "Value",
                        "oldValue": f"us-east-1/{TOPIC_ARN}",
                        "newValue": raw["Param165332EC"]["Properties"]["Value"],
                        "requiresReplacement": False,
                        "replacementPropagated": True,
                    }
                ],
            },
        ],
        # the outputs read the topic's recorded id: unchanged until the deploy replaces it
        "outputChanges": [],
        "children": [],
    }
    actions = {a["logicalId"]: a["action"] for a in p.plan["actions"]}
    assert actions == {
        "Queue4A7E3555": "update",
        "QueuePolicy25439813": "update",
        "QueueGoldenCdkStackTopic1060F492172D006E": "replace",  # TopicArn is create-only
        "TopicBFC7AF6E": "replace",
        "Param165332EC": "update",
    }
    assert p.plan["blocking"] == []
    assert exit_code([p], fail=True) == 1
    text = render_text([p])
    assert "  [~] TopicBFC7AF6E (AWS::SNS::Topic) [replacement]" in text
    assert "  0 to create, 5 to update, 0 to delete" in text


def test_it_refuses_the_edited_golden_app_for_another_account():
    with pytest.raises(AccountMismatch, match="not for the chosen account 222222222222"):
        open_assembly(SYNTH / "golden-changed.out").select(None, "222222222222")


def test_it_plans_an_environment_agnostic_app_with_a_nested_stack_and_a_custom_resource():
    asm = open_assembly(SYNTH / "nested-app.out")
    (stack,) = asm.select(["NestedApp"], "222222222222")  # unknown-account fits any account
    assert stack.environment.account is None and stack.region("eu-west-1") == "eu-west-1"
    (child,) = stack.nested_templates.values()
    assert child.path == "NestedAppChild3F866D2B.nested.template.json"
    assert stack.asset_manifest["files"]  # the Lambda zip asset and the nested template

    def plan(**kw):
        return compute_plan(
            stack.template,
            None,
            stack_name="NestedApp",
            region="eu-west-1",
            account="222222222222",
            asset_manifest=stack.asset_manifest,
            **kw,
        )

    p = plan()
    created = [c["logicalId"] for c in p.node["changes"]]
    # IsProd is false for the default Env: the conditional queue is pruned; CDKMetadata is never planned
    assert created == [
        "ChildNestedStackChildNestedStackResourceC40294CA",
        "Data666C94C7",
        "DataPolicyB80589C3",
        "DataAutoDeleteObjectsCustomResource914CE2FD",
        "CustomS3AutoDeleteObjectsCustomResourceProviderRole3B1BD092",
        "CustomS3AutoDeleteObjectsCustomResourceProviderHandler9D90184F",
    ]
    assert {c["changeType"] for c in p.node["changes"]} == {"CREATE"}
    assert p.node["outputChanges"] == [{"name": "EnvName", "changeType": "ADD", "newValue": "dev", "export": False}]
    assert any("custom resources are not supported" in b for b in p.blocking)
    assert any("nested stacks are not supported" in b for b in p.blocking)
    assert p.cdkd_blocking == []
    assert exit_code([p], fail=False) == 3
    prod = plan(parameters={"Env": "prod"})
    assert prod.node["changes"][0]["logicalId"] == "ProdOnlyQueue"
    assert prod.node["outputChanges"][0]["newValue"] == "prod"

    kid = compute_plan(
        child.template, None, stack_name="NestedApp~Child", region="eu-west-1", account="222222222222", top_level=False
    )
    assert [c["resourceType"] for c in kid.node["changes"]] == ["AWS::SNS::Topic"]
