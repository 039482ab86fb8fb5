"""Plan parity: (record, template) pairs and the rows cdkd's rules give for them.

Each case spells out the `changes` / `outputChanges` a cdkd 0.284-era `diff --json` prints
(deploy-engine.md 1.6, 5.5, 6.2; seed 002), plus the admin plan fields where they matter.
"""

from __future__ import annotations

import json

import pytest

from engine.deploy.outputs import WITHHELD, skipped_output_digest
from engine.deploy.plan import StateLocation, compute_plan
from engine.deploy.render import exit_code, render_json, render_text

ACCOUNT = "123456789012"
QURL = "https://sqs.us-east-1.amazonaws.com/123456789012/app-queue"
QARN = "arn:aws:sqs:us-east-1:123456789012:app-queue"
TOPIC = "arn:aws:sns:us-east-1:123456789012:app-topic"


def row(rtype, props=None, pid="pid", attrs=None, **extra):
    out = {"physicalId": pid, "resourceType": rtype, "properties": props if props is not None else {}}
    out["attributes"] = attrs if attrs is not None else {}
    out.update(extra)
    return out


def record(resources, outputs=None, **extra):
    rec = {"version": 11, "stackName": "AppStack", "region": "us-east-1", "resources": resources}
    if outputs is not None:
        rec["outputs"] = outputs
    rec.update(extra)
    return rec


def res(rtype, props=None, **extra):
    out = {"Type": rtype}
    if props is not None:
        out["Properties"] = props
    out.update(extra)
    return out


def plan(template, rec, **kw):
    kw.setdefault("stack_name", "AppStack")
    kw.setdefault("region", "us-east-1")
    kw.setdefault("account", ACCOUNT)
    return compute_plan(template, rec, **kw)


QUEUE_ROW = row("AWS::SQS::Queue", {"VisibilityTimeout": 45}, pid=QURL, attrs={"Arn": QARN})


# --- change classes ----------------------------------------------------------------------------


def test_it_creates_everything_for_a_stack_without_a_record():
    template = {"Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})}}
    p = plan(template, None, location=StateLocation(bucket="b", key="cdkd/AppStack/us-east-1/state.json", etag='"e"'))
    assert p.node["changes"] == [{"logicalId": "Queue", "changeType": "CREATE", "resourceType": "AWS::SQS::Queue"}]
    assert p.plan["stateEtag"] is None and p.plan["stateVersionId"] is None
    assert p.plan["actions"] == [
        {"logicalId": "Queue", "resourceType": "AWS::SQS::Queue", "action": "create", "route": "sdk"}
    ]


def test_it_reports_no_change_when_the_resolved_template_matches_the_record():
    template = {
        "Resources": {
            "Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45}),
            "Param": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Fn::GetAtt": ["Queue", "Arn"]}}),
        }
    }
    rec = record({"Queue": QUEUE_ROW, "Param": row("AWS::SSM::Parameter", {"Type": "String", "Value": QARN})})
    p = plan(template, rec)
    assert p.node["changes"] == [] and not p.has_changes
    assert exit_code([p], fail=True) == 0


@pytest.mark.parametrize(
    ("template_props", "stored_props", "expected"),
    [
        # in place by hand rule
        (
            {"VisibilityTimeout": 60},
            {"VisibilityTimeout": 45},
            [{"path": "VisibilityTimeout", "oldValue": 45, "newValue": 60, "requiresReplacement": False}],
        ),
        # a key added and a key removed: the absent side is left out of the entry
        (
            {"VisibilityTimeout": 45, "DelaySeconds": 5},
            {"VisibilityTimeout": 45, "MessageRetentionPeriod": 60},
            [
                {"path": "DelaySeconds", "newValue": 5, "requiresReplacement": False},
                {"path": "MessageRetentionPeriod", "oldValue": 60, "requiresReplacement": False},
            ],
        ),
        # "45" is not 45, and true is not 1
        (
            {"VisibilityTimeout": "45"},
            {"VisibilityTimeout": 45},
            [{"path": "VisibilityTimeout", "oldValue": 45, "newValue": "45", "requiresReplacement": False}],
        ),
        # hand rule: QueueName replaces
        (
            {"QueueName": "b"},
            {"QueueName": "a"},
            [{"path": "QueueName", "oldValue": "a", "newValue": "b", "requiresReplacement": True}],
        ),
    ],
)
def test_it_classifies_top_level_properties(template_props, stored_props, expected):
    template = {"Resources": {"Queue": res("AWS::SQS::Queue", template_props)}}
    p = plan(template, record({"Queue": row("AWS::SQS::Queue", stored_props, pid=QURL)}))
    (change,) = p.node["changes"]
    assert change["changeType"] == "UPDATE"
    assert change["propertyChanges"] == expected


def test_it_deletes_what_the_template_no_longer_declares():
    p = plan({"Resources": {}}, record({"Old1": row("AWS::SNS::Topic", pid=TOPIC)}))
    assert p.node["changes"] == [{"logicalId": "Old1", "changeType": "DELETE", "resourceType": "AWS::SNS::Topic"}]
    assert p.plan["actions"][0]["action"] == "delete"


@pytest.mark.parametrize(
    ("rtype", "key", "old", "new", "replaces"),
    [
        ("AWS::SNS::Subscription", "Protocol", "sqs", "lambda", True),  # schema create-only, no hand rule
        ("AWS::IAM::Role", "Path", "/", "/x/", False),  # schema says create-only; cdkd's table wins
        (
            "AWS::DynamoDB::Table",
            "AttributeDefinitions",  # conditional: a shared attribute changes type
            [{"AttributeName": "pk", "AttributeType": "S"}],
            [{"AttributeName": "pk", "AttributeType": "N"}],
            True,
        ),
        (
            "AWS::DynamoDB::Table",
            "AttributeDefinitions",  # conditional: adding one is in place
            [{"AttributeName": "pk", "AttributeType": "S"}],
            [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            False,
        ),
        ("AWS::Lambda::Function", "PackageType", "Zip", "Image", True),  # schema addition on a ruled type
        (
            "AWS::BCMDataExports::Export",
            "Export",
            {"Name": "a", "Description": "x"},
            {"Name": "b", "Description": "x"},
            True,
        ),  # nested create-only path Export/Name differs
        (
            "AWS::BCMDataExports::Export",
            "Export",
            {"Name": "a", "Description": "x"},
            {"Name": "a", "Description": "y"},
            False,
        ),  # nested path unchanged
        (
            "AWS::BCMDataExports::Export",
            "Export",
            {"Name": "a"},
            {"Fn::Sub": "${AWS::NoSuch}"},
            True,
        ),  # a path that cannot be followed counts as changed
    ],
)
def test_it_decides_replacement_by_hand_rule_and_create_only_path(rtype, key, old, new, replaces):
    template = {"Resources": {"R": res(rtype, {key: new})}}
    p = plan(template, record({"R": row(rtype, {key: old})}))
    (change,) = p.node["changes"]
    assert change["propertyChanges"][0]["requiresReplacement"] is replaces
    assert p.plan["actions"][0]["action"] == ("replace" if replaces else "update")


def test_it_replaces_on_a_type_change_and_blocks_one_into_a_nested_stack():
    template = {"Resources": {"R": res("AWS::SNS::Topic"), "N": res("AWS::CloudFormation::Stack", {})}}
    rec = record({"R": row("AWS::SQS::Queue", pid=QURL), "N": row("AWS::SQS::Queue", pid=QURL)})
    p = plan(template, rec)
    assert p.node["changes"][0] == {
        "logicalId": "R",
        "changeType": "UPDATE",
        "resourceType": "AWS::SNS::Topic",
        "propertyChanges": [
            {"path": "Type", "oldValue": "AWS::SQS::Queue", "newValue": "AWS::SNS::Topic", "requiresReplacement": True}
        ],
    }
    (reason,) = p.cdkd_blocking
    assert "N changes type from AWS::SQS::Queue to AWS::CloudFormation::Stack" in reason
    assert exit_code([p], fail=False) == 3


def test_it_reports_a_deletion_policy_change_as_metadata_only():
    template = {"Resources": {"Bucket": res("AWS::S3::Bucket", {}, DeletionPolicy="Delete")}}
    p = plan(template, record({"Bucket": row("AWS::S3::Bucket", {}, pid="b", deletionPolicy="Retain")}))
    assert p.node["changes"] == [
        {
            "logicalId": "Bucket",
            "changeType": "UPDATE",
            "resourceType": "AWS::S3::Bucket",
            "attributeChanges": [{"attribute": "DeletionPolicy", "oldValue": "Retain", "newValue": "Delete"}],
        }
    ]
    assert p.plan["actions"][0]["action"] == "metadata"
    assert "(metadata only, no AWS API call)" in render_text([p])


# --- propagation -------------------------------------------------------------------------------


def _propagation_case():
    template = {
        "Resources": {
            "Queue": res("AWS::SQS::Queue", {"QueueName": "app-queue-2"}),
            "Policy": res("AWS::SQS::QueuePolicy", {"Queues": [{"Ref": "Queue"}], "PolicyDocument": {"V": 1}}),
            "Sub": res(
                "AWS::SNS::Subscription",
                {"Endpoint": {"Fn::GetAtt": ["Queue", "Arn"]}, "Protocol": "sqs", "TopicArn": TOPIC},
            ),
            "Log": res("AWS::Logs::LogGroup", {"LogGroupName": {"Fn::Sub": "/app/${Queue.QueueName}"}}),
            "Param": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Fn::Sub": "${Log}"}}),
        }
    }
    rec = record(
        {
            "Queue": row(
                "AWS::SQS::Queue", {"QueueName": "app-queue"}, pid=QURL, attrs={"Arn": QARN, "QueueName": "app-queue"}
            ),
            "Policy": row("AWS::SQS::QueuePolicy", {"Queues": [QURL], "PolicyDocument": {"V": 1}}, pid=QURL),
            "Sub": row("AWS::SNS::Subscription", {"Endpoint": QARN, "Protocol": "sqs", "TopicArn": TOPIC}),
            "Log": row("AWS::Logs::LogGroup", {"LogGroupName": "/app/app-queue"}, pid="/app/app-queue"),
            "Param": row("AWS::SSM::Parameter", {"Type": "String", "Value": "/app/app-queue"}),
        }
    )
    return template, rec


def test_it_propagates_a_replacement_to_readers_by_hand_rules_and_transitively():
    template, rec = _propagation_case()
    p = plan(template, rec)
    by_id = {c["logicalId"]: c for c in p.node["changes"]}
    assert by_id["Queue"]["propertyChanges"][0]["requiresReplacement"] is True
    assert by_id["Policy"]["propertyChanges"] == [
        {
            "path": "Queues",
            "oldValue": [QURL],
            "newValue": [{"Ref": "Queue"}],
            "requiresReplacement": False,
            "replacementPropagated": True,
        }
    ]
    # LogGroupName is a hand-rule replacement key: the log group is replaced, so its reader follows
    assert by_id["Log"]["propertyChanges"][0]["requiresReplacement"] is True
    assert by_id["Log"]["propertyChanges"][0]["replacementPropagated"] is True
    assert by_id["Param"]["propertyChanges"][0] == {
        "path": "Value",
        "oldValue": "/app/app-queue",
        "newValue": {"Fn::Sub": "${Log}"},
        "requiresReplacement": False,
        "replacementPropagated": True,
    }
    # no hand rule for subscriptions: cdkd shows an in-place update ...
    assert by_id["Sub"]["propertyChanges"][0]["requiresReplacement"] is False
    actions = {a["logicalId"]: a for a in p.plan["actions"]}
    # ... the admin's plan replaces it, Endpoint being create-only, and says so
    assert actions["Sub"]["action"] == "replace"
    assert any("Sub: its create-only property Endpoint reads Queue" in w for w in p.warnings)
    assert actions["Policy"]["action"] == "update"
    assert actions["Policy"]["knownAfterApply"] == ["Queues"]
    assert actions["Queue"]["action"] == "replace"


def test_it_propagates_an_in_place_change_to_getatt_readers_of_that_property():
    template = {
        "Resources": {
            "Param": res("AWS::SSM::Parameter", {"Type": "String", "Value": "v2"}),
            "Reader": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Fn::GetAtt": ["Param", "Value"]}}),
            "Other": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Fn::GetAtt": ["Param", "Type"]}}),
        }
    }
    rec = record(
        {
            "Param": row(
                "AWS::SSM::Parameter", {"Type": "String", "Value": "v1"}, attrs={"Value": "v1", "Type": "String"}
            ),
            "Reader": row("AWS::SSM::Parameter", {"Type": "String", "Value": "v1"}),
            "Other": row("AWS::SSM::Parameter", {"Type": "String", "Value": "String"}),
        }
    )
    p = plan(template, rec)
    ids = [c["logicalId"] for c in p.node["changes"]]
    assert ids == ["Param", "Reader"]  # Other reads Type, which did not change
    (pc,) = p.node["changes"][1]["propertyChanges"]
    assert pc["path"] == "Value" and pc["newValue"] == {"Fn::GetAtt": ["Param", "Value"]}
    assert "replacementPropagated" not in pc


# --- conditions and parameters -----------------------------------------------------------------


CONDITIONAL = {
    "Parameters": {"Env": {"Type": "String", "Default": "dev"}, "Retention": {"Type": "Number", "Default": 7}},
    "Conditions": {"IsProd": {"Fn::Equals": [{"Ref": "Env"}, "prod"]}},
    "Resources": {
        "Alarm": res("AWS::SNS::Topic", {}, Condition="IsProd"),
        "Log": res(
            "AWS::Logs::LogGroup",
            {"RetentionInDays": {"Fn::If": ["IsProd", 30, {"Ref": "Retention"}]}, "LogGroupName": "/app"},
        ),
    },
}


def test_it_prunes_condition_false_resources_and_picks_if_branches():
    rec = record(
        {
            "Alarm": row("AWS::SNS::Topic", pid=TOPIC),
            "Log": row("AWS::Logs::LogGroup", {"RetentionInDays": 7, "LogGroupName": "/app"}, pid="/app"),
        }
    )
    p = plan(CONDITIONAL, rec)
    assert p.node["changes"] == [{"logicalId": "Alarm", "changeType": "DELETE", "resourceType": "AWS::SNS::Topic"}]
    prod = plan(CONDITIONAL, rec, parameters={"Env": "prod"})
    assert prod.node["changes"] == [
        {
            "logicalId": "Log",
            "changeType": "UPDATE",
            "resourceType": "AWS::Logs::LogGroup",
            "propertyChanges": [
                {"path": "RetentionInDays", "oldValue": 7, "newValue": 30, "requiresReplacement": False}
            ],
        }
    ]
    # an override is coerced by Type, so Number 14 compares with the stored 14
    rec14 = record({"Log": row("AWS::Logs::LogGroup", {"RetentionInDays": 14, "LogGroupName": "/app"}, pid="/app")})
    assert plan(CONDITIONAL, rec14, parameters={"Retention": "14"}).node["changes"] == []


def test_it_reads_ssm_typed_parameters_and_plain_ssm_references_through_the_callback():
    template = {
        "Parameters": {"Ami": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/app/ami"}},
        "Resources": {
            "P": res(
                "AWS::SSM::Parameter",
                {"Type": "String", "Value": {"Ref": "Ami"}, "Description": "{{resolve:ssm:/app/desc}}"},
            ),
        },
    }
    values = {"/app/ami": "ami-2", "/app/desc": "d"}
    rec = record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "ami-1", "Description": "d"})})
    p = plan(template, rec, ssm=values.get)
    assert p.node["changes"][0]["propertyChanges"] == [
        {"path": "Value", "oldValue": "ami-1", "newValue": "ami-2", "requiresReplacement": False}
    ]


def test_it_compares_secret_references_as_expressions_without_fetching():
    secret = "{{resolve:secretsmanager:db:SecretString:pw::}}"
    template = {"Resources": {"P": res("AWS::SSM::Parameter", {"Type": "String", "Value": secret})}}
    asked = []
    p = plan(
        template,
        record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": secret})}),
        ssm=lambda n: asked.append(n),
    )
    assert p.node["changes"] == [] and asked == []


def test_it_keeps_the_raw_value_of_what_it_cannot_resolve_and_marks_it_known_after_apply():
    template = {
        "Resources": {
            "Topic": res("AWS::SNS::Topic", {}),
            "Param": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Ref": "Topic"}}),
        }
    }
    p = plan(template, record({"Param": row("AWS::SSM::Parameter", {"Type": "String", "Value": "old"})}))
    assert p.node["changes"][1]["propertyChanges"] == [
        {"path": "Value", "oldValue": "old", "newValue": {"Ref": "Topic"}, "requiresReplacement": False}
    ]
    assert p.plan["actions"][1]["knownAfterApply"] == ["Value"]


def test_it_imports_from_the_exports_index_and_records_it_in_the_plan():
    template = {
        "Resources": {"P": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Fn::ImportValue": "Shared-Arn"}})}
    }
    index = {"exports": {"Shared-Arn": {"value": "arn:1", "producerStack": "Shared", "producerRegion": "us-east-1"}}}
    p = plan(template, record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "arn:1"})}), exports=index)
    assert p.node["changes"] == []
    assert p.plan["imports"] == [{"exportName": "Shared-Arn", "sourceStack": "Shared", "sourceRegion": "us-east-1"}]


# --- outputs -----------------------------------------------------------------------------------


OUT_TEMPLATE = {
    "Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})},
    "Outputs": {
        "QueueUrl": {"Value": {"Ref": "Queue"}},
        "QueueArn": {"Value": {"Fn::GetAtt": ["Queue", "Arn"]}, "Export": {"Name": "AppStack-QueueArn"}},
    },
}


def test_it_previews_output_rows_with_export_aliases():
    rec = record({"Queue": QUEUE_ROW}, outputs={"QueueUrl": "old-url", "Gone": "g", "Old-Alias": "x"})
    p = plan(OUT_TEMPLATE, rec)
    assert p.node["outputChanges"] == [
        {"name": "QueueUrl", "changeType": "MODIFY", "oldValue": "old-url", "newValue": QURL, "export": False},
        {"name": "QueueArn", "changeType": "ADD", "newValue": QARN, "export": False},
        {"name": "AppStack-QueueArn", "changeType": "ADD", "newValue": QARN, "export": True},
        # no exportNames (pre-v9): a key that cannot be a logical id is an alias
        {"name": "Gone", "changeType": "REMOVE", "oldValue": "g", "export": False},
        {"name": "Old-Alias", "changeType": "REMOVE", "oldValue": "x", "export": True},
    ]
    text = render_text([p])
    assert "2 output(s) to add, 1 to change, 2 to remove" in text


def test_it_reads_the_export_flag_of_a_removed_key_from_export_names():
    rec = record(
        {"Queue": QUEUE_ROW},
        outputs={"QueueUrl": QURL, "QueueArn": QARN, "AppStack-QueueArn": QARN, "Legacy": "l"},
        exportNames=["Legacy", "AppStack-QueueArn"],
    )
    p = plan(OUT_TEMPLATE, rec)
    assert p.node["outputChanges"] == [{"name": "Legacy", "changeType": "REMOVE", "oldValue": "l", "export": True}]


def test_it_omits_the_outputs_section_when_an_output_waits_on_a_resource_change():
    template = {
        "Resources": {"Queue": res("AWS::SQS::Queue", {}), "Topic": res("AWS::SNS::Topic", {})},
        "Outputs": {"TopicArn": {"Value": {"Ref": "Topic"}}, "QueueUrl": {"Value": {"Ref": "Queue"}}},
    }
    rec = record({"Queue": row("AWS::SQS::Queue", {}, pid=QURL)}, outputs={"QueueUrl": "stale"})
    p = plan(template, rec)
    assert p.node["outputChanges"] == []
    assert any("Outputs section is omitted" in w and "TopicArn" in w for w in p.warnings)


def test_it_previews_the_merge_when_no_resource_changes_and_an_output_throws():
    template = {
        "Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})},
        "Outputs": {"Broken": {"Value": {"Fn::ImportValue": "Missing"}}, "QueueUrl": {"Value": {"Ref": "Queue"}}},
    }
    rec = record({"Queue": QUEUE_ROW}, outputs={"Broken": "b", "QueueUrl": "old-url"})
    p = plan(template, rec, exports={"exports": {}})
    assert p.node["outputChanges"] == [
        {
            "name": "QueueUrl",
            "changeType": "MODIFY",
            "oldValue": WITHHELD,
            "oldValueRedacted": True,
            "newValue": QURL,
            "export": False,
        }
    ]
    assert any("Broken" in w and "previous values are withheld" in w for w in p.warnings)


def test_it_previews_a_skipped_output_as_absent_while_its_digest_holds():
    template = {
        "Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})},
        "Outputs": {"Broken": {"Value": {"Fn::ImportValue": "Missing"}}, "QueueUrl": {"Value": {"Ref": "Queue"}}},
    }
    skipped = {"Broken": skipped_output_digest(template, "Broken")}
    rec = record({"Queue": QUEUE_ROW}, outputs={"QueueUrl": QURL}, skippedOutputs=skipped)
    p = plan(template, rec, exports={"exports": {}})
    assert p.node["outputChanges"] == [] and not any("Broken" in w for w in p.warnings)
    # a repaired Export.Name changes the digest: the key is back under the ordinary rules
    repaired = json.loads(json.dumps(template))
    repaired["Outputs"]["Broken"]["Export"] = {"Name": "X"}
    p2 = plan(repaired, rec, exports={"exports": {}})
    assert any("Broken" in w for w in p2.warnings)


def test_it_withholds_previous_values_a_pre_redaction_record_may_hold_in_plaintext():
    secret = "{{resolve:secretsmanager:db:SecretString:pw::}}"
    template = {
        "Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})},
        "Outputs": {"Pw": {"Value": secret}, "QueueUrl": {"Value": {"Ref": "Queue"}}},
    }
    rec = record({"Queue": QUEUE_ROW}, outputs={"Pw": "hunter2-plaintext", "QueueUrl": "old"})
    p = plan(template, rec)
    rows = {r["name"]: r for r in p.node["outputChanges"]}
    assert rows["Pw"]["oldValue"] == WITHHELD and rows["Pw"]["oldValueRedacted"] is True
    assert rows["Pw"]["newValue"] == secret
    assert rows["QueueUrl"]["oldValueRedacted"] is True
    assert "hunter2" not in render_json([p]) and "hunter2" not in render_text([p])


def test_it_masks_no_echo_values_in_outputs():
    template = {
        "Parameters": {"Token": {"Type": "String", "NoEcho": True, "Default": "s3cr3t-token"}},
        "Resources": {},
        "Outputs": {"Url": {"Value": {"Fn::Sub": "https://x/?t=${Token}"}}},
    }
    p = plan(template, record({}, outputs={"Url": "https://x/?t=old-s3cr3t-token"}))
    assert p.node["outputChanges"] == [
        {
            "name": "Url",
            "changeType": "MODIFY",
            "oldValue": "https://x/?t=old-***",
            "newValue": "https://x/?t=***",
            "export": False,
        }
    ]
    assert "s3cr3t" not in render_json([p])
    assert any("NoEcho parameters are not supported (Token)" in b for b in p.blocking)


# --- malformed records and the five blocking conditions ----------------------------------------


@pytest.mark.parametrize(
    ("rec", "code", "dropped", "blocks"),
    [
        (record("abcdef"), "resources-not-object", ["(resources map)"], True),
        (record({"Queue": "junk", "Q2": {"properties": {}}}), "resource-entry-dropped", ["Queue", "Q2"], True),
        (record({"Queue": {**QUEUE_ROW, "properties": [1]}}), "properties-repaired", [], True),
        (record({"Queue": QUEUE_ROW}, outputs="abc"), "outputs-not-object", [], True),
        (record({"Queue": QUEUE_ROW}, orphans="x"), "orphans-not-list", ["(orphans container)"], True),
        (
            record({"Queue": QUEUE_ROW}, orphans=[5, {"logicalId": "O"}]),
            "orphan-record-dropped",
            ["orphans[0]", "O"],
            True,
        ),
        (
            record(
                {"Queue": QUEUE_ROW},
                orphans=[{"logicalId": "O", "resourceType": "AWS::SQS::Queue", "properties": "torn"}],
            ),
            "orphan-row-malformed",
            [],
            True,
        ),
        (record({"Queue": QUEUE_ROW}, exportNames="QueueUrl"), "export-names-not-list", [], False),
    ],
)
def test_it_repairs_a_malformed_record_for_the_preview_and_names_each_repair(rec, code, dropped, blocks):
    template = {"Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})}}
    p = plan(template, rec)
    assert code in [r["code"] for r in p.plan["repairs"]]
    assert p.dropped == dropped
    assert bool(p.cdkd_blocking) is blocks
    if blocks:
        assert exit_code([p], fail=False) == 3
        assert "Blocking (cdkd deploy will refuse):" in render_text([p])
    # a nested node warns but does not raise cdkd's container conditions
    assert plan(template, rec, top_level=False).cdkd_blocking == []


def test_it_reads_an_unreadable_resources_map_as_empty_so_everything_is_created():
    template = {"Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})}}
    p = plan(template, record("abcdef"))
    assert [c["changeType"] for c in p.node["changes"]] == ["CREATE"]
    assert "dropped from the record: (resources map)" in render_text([p])


def test_it_renders_an_emptied_properties_map_as_additions_and_create_only_replacements():
    template = {"Resources": {"Queue": res("AWS::SQS::Queue", {"QueueName": "q", "VisibilityTimeout": 45})}}
    p = plan(template, record({"Queue": {**QUEUE_ROW, "properties": "torn"}}))
    assert p.node["changes"][0]["propertyChanges"] == [
        {"path": "QueueName", "newValue": "q", "requiresReplacement": True},
        {"path": "VisibilityTimeout", "newValue": 45, "requiresReplacement": False},
    ]


def test_it_reads_export_names_that_are_not_a_list_as_no_exports():
    rec = record({"Queue": QUEUE_ROW}, outputs={"Alias-X": "x"}, exportNames={"a": 1})
    p = plan({"Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})}}, rec)
    assert p.node["outputChanges"] == [{"name": "Alias-X", "changeType": "REMOVE", "oldValue": "x", "export": False}]
    assert any("exportNames of stack AppStack in us-east-1" in w for w in p.warnings)


def test_it_blocks_a_changed_custom_resource_service_token():
    template = {"Resources": {"Cr": res("Custom::Thing", {"ServiceToken": "arn:new", "Timestamp": "2"})}}
    rec = record({"Cr": row("Custom::Thing", {"ServiceToken": "arn:old", "Timestamp": "1"})})
    p = plan(template, rec)
    assert [pc["path"] for pc in p.node["changes"][0]["propertyChanges"]] == ["ServiceToken"]  # Timestamp ignored
    (reason,) = p.cdkd_blocking
    assert 'ServiceToken of custom resource Cr changes to "arn:new"' in reason
    masked = plan(template, record({"Cr": row("Custom::Thing", {"ServiceToken": "***"})}))
    assert "cannot compare the ServiceToken" in masked.cdkd_blocking[0]


def test_it_only_warns_when_the_service_token_reads_a_resource_being_created():
    template = {
        "Resources": {
            "Fn": res("AWS::Lambda::Function", {}),
            "Cr": res("Custom::Thing", {"ServiceToken": {"Fn::GetAtt": ["Fn", "Arn"]}}),
        }
    }
    p = plan(template, record({"Cr": row("Custom::Thing", {"ServiceToken": "arn:old"})}))
    assert p.cdkd_blocking == []
    assert any("ServiceToken of custom resource Cr is known only once" in w for w in p.warnings)


def test_it_blocks_adopting_a_rollback_orphan_another_stack_claims():
    template = {"Resources": {"Bucket": res("AWS::S3::Bucket", {})}}
    rec = record(
        {}, orphans=[{"logicalId": "Bucket", "physicalId": "b1", "resourceType": "AWS::S3::Bucket", "properties": {}}]
    )
    p = plan(template, rec, orphan_claimed_by={"b1": "OtherStack"}.get)
    assert any("stack OtherStack already claims" in b for b in p.cdkd_blocking)


# --- the plan document, digest and renderings --------------------------------------------------


def test_it_binds_the_plan_to_the_record_and_the_assembly_with_a_digest():
    template, rec = _propagation_case()
    loc = StateLocation(
        bucket="state-b", prefix="cdkd", key="cdkd/AppStack/us-east-1/state.json", etag='"e1"', version_id="v1"
    )
    a = plan(template, rec, location=loc, assembly_digest="d1")
    b = plan(template, rec, location=loc, assembly_digest="d1")
    assert a.plan["digest"] == b.plan["digest"] and len(a.plan["digest"]) == 64
    assert a.plan["stateEtag"] == '"e1"' and a.plan["stateVersionId"] == "v1" and a.plan["stateBucket"] == "state-b"
    moved = plan(template, rec, location=StateLocation(**{**loc.__dict__, "etag": '"e2"'}), assembly_digest="d1")
    assert moved.plan["digest"] != a.plan["digest"]
    other_input = plan(template, rec, location=loc, assembly_digest="d2")
    assert other_input.plan["digest"] != a.plan["digest"]


def test_it_marks_a_stateful_replacement_and_blocks_it_without_consent():
    template = {"Resources": {"Table": res("AWS::DynamoDB::Table", {"TableName": "t2"})}}
    p = plan(template, record({"Table": row("AWS::DynamoDB::Table", {"TableName": "t1"}, pid="t1")}))
    assert p.plan["actions"][0]["stateful"] is True
    assert any("stateful replacement needs explicit consent" in b for b in p.blocking)
    assert "[stateful replacement]" in render_text([p])
    retained = plan(
        template,
        record({"Table": row("AWS::DynamoDB::Table", {"TableName": "t1"}, pid="t1", updateReplacePolicy="Retain")}),
    )
    assert retained.plan["actions"][0]["stateful"] is False


def test_it_routes_a_cloud_control_row_and_blocks_its_update():
    template = {"Resources": {"Q": res("AWS::SQS::Queue", {"VisibilityTimeout": 60})}}
    p = plan(template, record({"Q": row("AWS::SQS::Queue", {"VisibilityTimeout": 45}, provisionedBy="cc-api")}))
    assert p.plan["actions"][0]["route"] == "cc-api"
    assert "[via CC API]" in render_text([p])
    assert any("provisioned through Cloud Control" in b for b in p.blocking)


def test_it_prints_the_text_form_with_marks_and_counts():
    template, rec = _propagation_case()
    template["Resources"]["New"] = res("AWS::SNS::Topic", {})
    rec["resources"]["Old"] = row("AWS::SNS::Topic", pid=TOPIC)
    text = render_text([plan(template, rec)])
    assert "  [+] New (AWS::SNS::Topic)" in text
    assert "  [-] Old (AWS::SNS::Topic)" in text
    assert "  [~] Queue (AWS::SQS::Queue) [replacement]" in text
    assert "      - QueueName: [requires replacement]" in text
    assert "      - Queues: [replacement propagated]" in text
    assert '          old: "app-queue"' not in text and "          old: app-queue" in text
    assert "  1 to create, 5 to update, 1 to delete" in text


def test_it_prints_one_line_for_a_stack_with_nothing_to_change():
    rec = record({"Queue": QUEUE_ROW})
    text = render_text([plan({"Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})}}, rec)])
    assert text.splitlines()[0] == "Stack AppStack (us-east-1): no changes"


def test_it_escapes_control_and_bidi_characters_in_json_and_strips_them_in_text():
    template = {"Resources": {"P": res("AWS::SSM::Parameter", {"Type": "String", "Value": "a\u202eb\x1bc\u2028"})}}
    p = plan(template, None)
    p.node["changes"][0]["propertyChanges"] = [
        {"path": "Value", "newValue": "a\u202eb\x1bc\u2028", "requiresReplacement": False}
    ]
    out = render_json([p], with_plan=False)
    assert "\\u202e" in out and "\\u001b" in out and "\\u2028" in out
    assert "\u202e" not in out and "\x1b" not in out
    assert json.loads(out)[0]["changes"][0]["propertyChanges"][0]["newValue"] == "a\u202eb\x1bc\u2028"


def test_it_exits_1_with_fail_when_something_changes():
    template = {"Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 60})}}
    p = plan(template, record({"Queue": QUEUE_ROW}))
    assert exit_code([p], fail=True) == 1
    assert exit_code([p], fail=False) == 0


NO_ECHO = {
    "Parameters": {"DbPass": {"Type": "String", "NoEcho": True, "Default": "correct-horse"}},
    "Resources": {"P": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Fn::Sub": "pw=${DbPass}"}})},
}


def test_it_compares_a_no_echo_value_masked_against_a_v11_record_and_says_so_in_one_line():
    p = plan(NO_ECHO, record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "pw=***"})}))
    assert p.node["changes"] == [] and not p.has_changes
    text = render_text([p])
    assert "1 unchanged resource(s) read a NoEcho parameter" in text
    assert exit_code([p], fail=True) == 3  # the first deploy engine refuses NoEcho parameters


def test_it_compares_a_pre_v11_record_at_the_clear_value_and_prints_neither_side():
    same = record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "pw=correct-horse"})}, version=10)
    assert plan(NO_ECHO, same).node["changes"] == []
    moved = record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "pw=old-battery"})}, version=10)
    p = plan(NO_ECHO, moved)
    assert p.node["changes"][0]["propertyChanges"] == [
        {"path": "Value", "oldValue": "(previous NoEcho value)", "newValue": "pw=***", "requiresReplacement": False}
    ]
    out = render_json([p]) + render_text([p])
    assert "correct-horse" not in out and "old-battery" not in out


def test_it_prints_a_no_echo_parameter_fed_a_secret_reference_as_the_expression():
    secret = "{{resolve:secretsmanager:db:SecretString:pw::}}"
    template = {
        "Parameters": {"DbPass": {"Type": "String", "NoEcho": True, "Default": secret}},
        "Resources": {"P": res("AWS::SSM::Parameter", {"Type": "String", "Value": {"Ref": "DbPass"}})},
    }
    p = plan(template, record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "x"})}))
    assert p.node["changes"][0]["propertyChanges"][0]["newValue"] == secret


def test_it_masks_the_part_of_a_stored_export_name_a_secret_covers():
    secret = "{{resolve:secretsmanager:tenant:SecretString:id::}}"
    template = {
        "Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})},
        "Outputs": {"Arn": {"Value": {"Ref": "Queue"}, "Export": {"Name": f"app-{secret}"}}},
    }
    # a pre-redaction cdkd stored the alias under the resolved secret
    rec = record({"Queue": QUEUE_ROW}, outputs={"Arn": QURL, "app-tenant-4711": QURL})
    p = plan(template, rec)
    removed = [r for r in p.node["outputChanges"] if r["changeType"] == "REMOVE"]
    assert removed == [
        {
            "name": "app-***",
            "changeType": "REMOVE",
            "oldValue": WITHHELD,
            "oldValueRedacted": True,
            "export": True,
            "nameRedacted": True,
        }
    ]
    out = render_json([p]) + render_text([p])
    assert "4711" not in out
    assert "app-*** (name masked: it contains a secret)" in render_text([p])


def test_it_withholds_a_removed_alias_name_while_the_template_references_a_secret():
    template = {
        "Resources": {"P": res("AWS::SSM::Parameter", {"Type": "String", "Value": "{{resolve:ssm-secure:/db/pw:1}}"})},
    }
    rec = record(
        {"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "{{resolve:ssm-secure:/db/pw:1}}"})},
        outputs={"Old-Alias-s3cret": "v", "PlainOutput": "w"},
        exportNames=["Old-Alias-s3cret"],
    )
    names = [r["name"] for r in plan(template, rec).node["outputChanges"]]
    assert names == ["<name withheld: contains a secret>", "PlainOutput"]


def test_it_escapes_characters_outside_the_basic_plane_as_surrogate_pairs():
    template = {"Resources": {"P": res("AWS::SSM::Parameter", {"Type": "String", "Value": "tag\U000e0041"})}}
    rec = record({"P": row("AWS::SSM::Parameter", {"Type": "String", "Value": "old"})})
    out = render_json([plan(template, rec)], with_plan=False)
    assert "\\udb40\\udc41" in out
    assert json.loads(out)[0]["changes"][0]["propertyChanges"][0]["newValue"] == "tag\U000e0041"


def test_it_warns_that_update_and_creation_policies_are_ignored():
    template = {"Resources": {"Q": res("AWS::SQS::Queue", {}, UpdatePolicy={"x": 1})}}
    p = plan(template, None)
    assert any("UpdatePolicy is ignored" in w for w in p.warnings)


def test_it_reads_a_record_nested_past_the_limit_as_unreadable_rather_than_crashing():
    deep: object = "x"
    for _ in range(2000):
        deep = {"a": deep}
    rec = record({"Queue": {**QUEUE_ROW, "properties": {"VisibilityTimeout": deep}}})
    p = plan({"Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})}}, rec)
    assert [r["code"] for r in p.plan["repairs"]] == ["record-too-deep"]
    assert p.node["changes"][0]["changeType"] == "CREATE"
    assert exit_code([p], fail=False) == 3
    render_json([p]), render_text([p])


def test_it_lists_cdkds_refusals_apart_from_the_admins():
    template = {"Resources": {"N": res("AWS::CloudFormation::Stack", {}), "F": res("AWS::Lambda::Function", {})}}
    rec = record({"N": row("AWS::SQS::Queue", pid=QURL)}, outputs="torn")
    text = render_text([plan(template, rec)])
    cdkd_part, admin_part = text.split("Blocking (the admin's deploy will refuse):")
    assert "Blocking (cdkd deploy will refuse):" in cdkd_part and "the outputs bag is unreadable" in cdkd_part
    assert "N changes type" in cdkd_part
    assert "nested stacks are not supported" in admin_part and "the outputs bag" not in admin_part


def test_it_keeps_cdkd_0_284s_28_hand_rules():
    from engine.deploy.replacement import HAND_RULES

    assert len(HAND_RULES) == 28 and "AWS::Glue::Table" not in HAND_RULES


def test_it_asks_a_conditional_rule_about_no_phantom_delta_for_a_propagated_change():
    # DurableConfig replaces only when added or removed; a propagated change must not read
    # the stored value against nothing (cdkd passes undefined on both sides)
    template = {
        "Resources": {
            "Role": res("AWS::IAM::Role", {"RoleName": "r2"}),
            "Fn": res("AWS::Lambda::Function", {"DurableConfig": {"Role": {"Fn::GetAtt": ["Role", "Arn"]}}}),
        }
    }
    rec = record(
        {
            "Role": row("AWS::IAM::Role", {"RoleName": "r1"}, pid="r1", attrs={"Arn": "arn:aws:iam::1:role/r1"}),
            "Fn": row("AWS::Lambda::Function", {"DurableConfig": {"Role": "arn:aws:iam::1:role/r1"}}, pid="fn"),
        }
    )
    p = plan(template, rec)
    (fn,) = [c for c in p.node["changes"] if c["logicalId"] == "Fn"]
    assert fn["propertyChanges"][0]["requiresReplacement"] is False
    assert fn["propertyChanges"][0]["replacementPropagated"] is True


def test_it_orders_a_propagated_change_as_cdkd_prints_it():
    template, rec = _propagation_case()
    out = render_json([plan(template, rec)], with_plan=False)
    policy = json.loads(out)[0]["changes"][1]["propertyChanges"][0]
    assert list(policy) == ["path", "oldValue", "newValue", "replacementPropagated", "requiresReplacement"]
    queue = json.loads(out)[0]["changes"][0]["propertyChanges"][0]
    assert list(queue) == ["path", "oldValue", "newValue", "requiresReplacement"]


def test_it_shows_previous_values_in_the_merge_when_every_carried_value_is_a_whole_secret_reference():
    secret = "{{resolve:secretsmanager:db:SecretString:pw::}}"
    template = {
        "Resources": {"Queue": res("AWS::SQS::Queue", {"VisibilityTimeout": 45})},
        "Outputs": {
            "Broken": {"Value": {"Fn::ImportValue": "Missing"}, "Export": {"Name": "Broken-Alias"}},
            "QueueUrl": {"Value": {"Ref": "Queue"}},
        },
    }
    carried = {"Broken": secret, "Broken-Alias": secret, "QueueUrl": "old-url"}
    p = plan(template, record({"Queue": QUEUE_ROW}, outputs=carried), exports={"exports": {}})
    # the alias is kept with its output, not removed; QueueUrl's previous value can be shown
    assert p.node["outputChanges"] == [
        {"name": "QueueUrl", "changeType": "MODIFY", "oldValue": "old-url", "newValue": QURL, "export": False}
    ]
    leaked = dict(carried, **{"Broken-Alias": "plaintext"})
    p2 = plan(template, record({"Queue": QUEUE_ROW}, outputs=leaked), exports={"exports": {}})
    assert p2.node["outputChanges"][0]["oldValueRedacted"] is True
