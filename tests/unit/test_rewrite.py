"""engine.rewrite: reference rewriting when resources are orphaned out of a record."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engine.rewrite import UnresolvedReferences, ref_value, rewrite_references


def row(rtype: str, physical_id: Any = None, properties: Any = None, **extra: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"physicalId": physical_id, "resourceType": rtype, "properties": properties or {}}
    if physical_id is None:
        del value["physicalId"]
    value.update(extra)
    return value


QUEUE = row(
    "AWS::SQS::Queue",
    "https://sqs.us-east-1.amazonaws.com/111111111111/jobs",
    attributes={"Arn": "arn:aws:sqs:us-east-1:111111111111:jobs", "QueueName": "jobs"},
)


def record(resources: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"version": 11, "stackName": "App", "region": "us-east-1", "resources": resources, **top}


def test_it_removes_the_orphans_and_replaces_a_ref_with_the_physical_id():
    fn = row(
        "AWS::Lambda::Function",
        "app-fn",
        {"Environment": {"Variables": {"QUEUE": {"Ref": "Queue"}, "OTHER": {"Ref": "Bucket"}}}},
        dependencies=["Queue", "Bucket"],
    )
    state = record({"Queue": QUEUE, "Fn": fn, "Bucket": row("AWS::S3::Bucket", "b")})
    before = copy.deepcopy(state)

    result = rewrite_references(state, ["Queue"])

    assert state == before  # the input is not modified
    assert list(result.state["resources"]) == ["Fn", "Bucket"]
    new_fn = result.state["resources"]["Fn"]
    assert new_fn["properties"]["Environment"]["Variables"] == {
        "QUEUE": "https://sqs.us-east-1.amazonaws.com/111111111111/jobs",
        "OTHER": {"Ref": "Bucket"},
    }
    assert new_fn["dependencies"] == ["Bucket"]
    assert result.rewrites == [
        {
            "kind": "ref",
            "logicalId": "Fn",
            "path": "Properties.Environment.Variables.QUEUE",
            "before": {"Ref": "Queue"},
            "after": "https://sqs.us-east-1.amazonaws.com/111111111111/jobs",
        },
        {
            "kind": "dependency",
            "logicalId": "Fn",
            "path": "Dependencies",
            "before": ["Queue", "Bucket"],
            "after": ["Bucket"],
        },
    ]
    assert result.lines()[0] == (
        'Fn.Properties.Environment.Variables.QUEUE: {"Ref": "Queue"} -> '
        '"https://sqs.us-east-1.amazonaws.com/111111111111/jobs"'
    )
    assert result.unresolved == []


@pytest.mark.parametrize(
    ("rtype", "physical_id", "properties", "attributes", "expected"),
    [
        ("AWS::EC2::EIP", "52.1.2.3|eipalloc-0abc", {}, None, "52.1.2.3"),
        ("AWS::Glue::Table", "my_database|my_table", {}, None, "my_table"),
        ("AWS::Glue::Table", "x|y|a|b", {"DatabaseName": "x|y"}, None, "a|b"),
        (
            "AWS::Route53::RecordSet",
            "Z1D633PJN98FT9|www.example.com.|A",
            {"Name": "www.example.com.", "Type": "A"},
            None,
            "www.example.com.",
        ),
        (
            "AWS::Route53::RecordSet",
            "Z1|a|b.example.com|A",
            {"Name": "a|b.example.com", "Type": "A"},
            None,
            "a|b.example.com",
        ),
        # An id that does not match the recorded Name/Type IS the record name (seed 000).
        ("AWS::Route53::RecordSet", "Z1|other|A", {"Name": "www.example.com", "Type": "A"}, None, "Z1|other|A"),
        ("AWS::S3Tables::Namespace", "arn:aws:s3tables:us-east-1:1:bucket/t|ns", {}, None, "ns"),
        ("AWS::S3Tables::Table", "arn:aws:s3tables:us-east-1:1:bucket/t|ns|orders", {}, None, "orders"),
        ("AWS::ApiGateway::Method", "a1b2c3d4e5|xy9z8w|GET", {}, None, "a1b2c3d4e5|xy9z8w|GET"),
        (
            "AWS::AppSync::ApiKey",
            "api1|key1",
            {},
            {"Arn": "arn:aws:appsync:::apis/api1/apikeys/key1"},
            "arn:aws:appsync:::apis/api1/apikeys/key1",
        ),
        ("AWS::AppSync::DataSource", "api1|ds", {}, {"DataSourceArn": "arn:ds"}, "arn:ds"),
        ("AWS::AppSync::Resolver", "api1|Query|get", {}, {"ResolverArn": "arn:resolver"}, "arn:resolver"),
        # Lacking the attribute, Ref falls back to the raw composite id (seed 001).
        ("AWS::AppSync::Resolver", "api1|Query|get", {}, {}, "api1|Query|get"),
        ("AWS::S3::Bucket", "my-bucket", {}, None, "my-bucket"),
    ],
)
def test_it_turns_a_ref_into_what_cloudformation_ref_returns(rtype, physical_id, properties, attributes, expected):
    target = row(rtype, physical_id, properties)
    if attributes is not None:
        target["attributes"] = attributes
    state = record({"X": target, "User": row("AWS::SSM::Parameter", "p", {"Value": {"Ref": "X"}})})

    result = rewrite_references(state, ["X"])

    assert result.state["resources"]["User"]["properties"]["Value"] == expected
    assert ref_value(target).value == expected


def test_it_lists_a_composite_id_of_a_type_the_table_does_not_name():
    target = row("AWS::EC2::SecurityGroupIngress", "sg-1|tcp|443|443")
    state = record({"Rule": target, "User": row("AWS::SSM::Parameter", "p", {"Value": {"Ref": "Rule"}})})

    with pytest.raises(UnresolvedReferences) as refused:
        rewrite_references(state, ["Rule"])

    assert refused.value.unresolved == [
        {
            "logicalId": "User",
            "path": "Properties.Value",
            "reference": "Ref Rule",
            "reason": (
                "composite physical id of AWS::EC2::SecurityGroupIngress, whose Ref value the seeds do not define"
            ),
        }
    ]
    assert "Properties.Value" in str(refused.value)


def test_it_replaces_getatt_in_list_and_dotted_forms_with_the_cached_attribute():
    user = row(
        "AWS::IAM::Policy",
        "pol",
        {"Resource": [{"Fn::GetAtt": ["Queue", "Arn"]}, {"Fn::GetAtt": "Queue.QueueName"}]},
        attributes={"Target": {"Fn::GetAtt": ["Queue", "Arn"]}},
    )
    state = record({"Queue": QUEUE, "Policy": user})

    result = rewrite_references(state, ["Queue"])

    new = result.state["resources"]["Policy"]
    assert new["properties"]["Resource"] == ["arn:aws:sqs:us-east-1:111111111111:jobs", "jobs"]
    assert new["attributes"]["Target"] == "arn:aws:sqs:us-east-1:111111111111:jobs"
    assert [(r["kind"], r["path"]) for r in result.rewrites] == [
        ("getAtt", "Properties.Resource[0]"),
        ("getAtt", "Properties.Resource[1]"),
        ("getAtt", "Attributes.Target"),
    ]


def test_it_substitutes_sub_placeholders_and_leaves_escapes_and_other_names():
    user = row(
        "AWS::SSM::Parameter",
        "p",
        {"Value": {"Fn::Sub": "${Queue}|${Queue.Arn}|${!Queue}|${AWS::Region}|${Other}"}},
    )
    state = record({"Queue": QUEUE, "User": user})

    result = rewrite_references(state, ["Queue"])

    assert result.state["resources"]["User"]["properties"]["Value"] == {
        "Fn::Sub": "https://sqs.us-east-1.amazonaws.com/111111111111/jobs|arn:aws:sqs:us-east-1:111111111111:jobs"
        "|${!Queue}|${AWS::Region}|${Other}"
    }
    assert result.rewrites[0]["kind"] == "sub"
    assert result.rewrites[0]["before"] == user["properties"]["Value"]


def test_it_keeps_sub_variables_that_shadow_and_rewrites_references_inside_them():
    value = {"Fn::Sub": ["${Queue}-${Queue.Arn}-${Name}", {"Queue": "literal", "Name": {"Ref": "Queue"}}]}
    state = record({"Queue": QUEUE, "User": row("AWS::SSM::Parameter", "p", {"Value": value})})

    result = rewrite_references(state, ["Queue"])

    assert result.state["resources"]["User"]["properties"]["Value"] == {
        "Fn::Sub": [
            "${Queue}-arn:aws:sqs:us-east-1:111111111111:jobs-${Name}",
            {"Queue": "literal", "Name": "https://sqs.us-east-1.amazonaws.com/111111111111/jobs"},
        ]
    }
    paths = [r["path"] for r in result.rewrites]
    assert paths == ["Properties.Value.Fn::Sub[1].Name", "Properties.Value"]


def test_it_escapes_a_substituted_value_that_looks_like_a_variable():
    target = row("AWS::SSM::Parameter", "name-${Tricky}")
    state = record({"T": target, "User": row("AWS::SSM::Parameter", "p", {"Value": {"Fn::Sub": "x-${T}"}})})

    result = rewrite_references(state, ["T"])

    assert result.state["resources"]["User"]["properties"]["Value"] == {"Fn::Sub": "x-name-${!Tricky}"}


def test_it_rewrites_references_nested_deep_in_lists_and_dicts():
    deep = {
        "Statement": [{"Effect": "Allow", "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": ["Queue", "Arn"]}, "/*"]]}}]
    }
    state = record({"Queue": QUEUE, "Role": row("AWS::IAM::Role", "r", {"Policies": [{"PolicyDocument": deep}]})})

    result = rewrite_references(state, ["Queue"])

    statement = result.state["resources"]["Role"]["properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]
    assert statement["Resource"] == {"Fn::Join": ["", ["arn:aws:sqs:us-east-1:111111111111:jobs", "/*"]]}
    assert result.rewrites[0]["path"] == "Properties.Policies[0].PolicyDocument.Statement[0].Resource.Fn::Join[1][0]"


def test_it_rewrites_outputs():
    state = record(
        {"Queue": QUEUE},
        outputs={"QueueUrl": {"Ref": "Queue"}, "Arn": {"Fn::Sub": "${Queue.Arn}"}, "Plain": "x"},
    )

    result = rewrite_references(state, ["Queue"])

    assert result.state["resources"] == {}
    assert result.state["outputs"] == {
        "QueueUrl": "https://sqs.us-east-1.amazonaws.com/111111111111/jobs",
        "Arn": {"Fn::Sub": "arn:aws:sqs:us-east-1:111111111111:jobs"},
        "Plain": "x",
    }
    assert [f"{r['logicalId']}.{r['path']}" for r in result.rewrites] == ["Outputs.QueueUrl", "Outputs.Arn"]


@pytest.mark.parametrize(
    ("target", "reference", "reason"),
    [
        (row("AWS::SQS::Queue", None, attributes={}), {"Ref": "Q"}, "the orphaned resource has no physical id"),
        (row("AWS::SQS::Queue", "q", attributes={}), {"Fn::GetAtt": ["Q", "Arn"]}, "no cached value of attribute Arn"),
        (row("AWS::SQS::Queue", "q"), {"Fn::GetAtt": "Q.Arn"}, "no cached value of attribute Arn"),
        (
            row("AWS::SQS::Queue", "q", attributes="torn"),
            {"Fn::GetAtt": ["Q", "Arn"]},
            "the orphaned resource's attributes cache is unreadable",
        ),
        (
            row("Custom::Secret", "c", attributes={"Password": "***"}),
            {"Fn::GetAtt": ["Q", "Password"]},
            "attribute Password is stored masked (***)",
        ),
        ("not a row", {"Ref": "Q"}, "the orphaned resource record is unreadable"),
        (row("AWS::SQS::Queue", "q", attributes={}), {"Fn::Sub": "a-${Q.Arn}"}, "no cached value of attribute Arn"),
    ],
)
def test_it_lists_unresolvable_references_and_refuses_unless_forced(target, reference, reason):
    state = record({"Q": target, "User": row("AWS::SSM::Parameter", "p", {"Value": reference, "Keep": {"Ref": "Q"}})})

    with pytest.raises(UnresolvedReferences) as refused:
        rewrite_references(state, ["Q"])
    assert reason in {u["reason"] for u in refused.value.unresolved}

    forced = rewrite_references(state, ["Q"], force=True)
    assert forced.state["resources"]["User"]["properties"]["Value"] == reference  # kept as it was
    assert reason in {u["reason"] for u in forced.unresolved}
    assert "Q" not in forced.state["resources"]


def test_it_keeps_unknown_fields_and_order_everywhere():
    fn = {
        "futureField": {"a": 1},
        "physicalId": "fn",
        "resourceType": "AWS::Lambda::Function",
        "properties": {"Q": {"Ref": "Queue"}},
        "observedProperties": {"Q": {"Ref": "Queue"}},  # AWS's readback: never rewritten
        "deletionPolicy": "Retain",
    }
    state = {
        "zeta": True,
        "version": 9,
        "resources": {"Queue": QUEUE, "Fn": fn},
        "orphans": [
            {"logicalId": "Old", "orphanedAt": 1, "state": row("AWS::S3::Bucket", "o", {"X": {"Ref": "Queue"}})}
        ],
        "skippedOutputs": {"A": "sha256:x"},
        "alpha": [1, 2],
    }

    result = rewrite_references(state, ["Queue"])

    assert list(result.state) == ["zeta", "version", "resources", "orphans", "skippedOutputs", "alpha"]
    new_fn = result.state["resources"]["Fn"]
    assert list(new_fn) == list(fn)
    assert new_fn["futureField"] == {"a": 1}
    assert new_fn["properties"] == {"Q": "https://sqs.us-east-1.amazonaws.com/111111111111/jobs"}
    assert new_fn["observedProperties"] == {"Q": {"Ref": "Queue"}}
    assert result.state["orphans"] == state["orphans"]
    assert result.state["alpha"] == [1, 2]


def test_it_raises_key_error_for_ids_not_in_the_record():
    with pytest.raises(KeyError, match="Nope"):
        rewrite_references(record({"Queue": QUEUE}), ["Queue", "Nope"])
