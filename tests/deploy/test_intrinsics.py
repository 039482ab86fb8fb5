"""Intrinsics, parameters, conditions and pseudo parameters as cdkd's diff resolves them."""

from __future__ import annotations

import pytest

from engine.deploy.intrinsics import (
    NO_VALUE,
    Context,
    KnownAfterApply,
    ParameterError,
    ResolveError,
    Resolver,
    bind_parameters,
    evaluate_conditions,
    parse_overrides,
    prune_resources,
)

QUEUE_ROW = {
    "physicalId": "https://sqs.us-east-1.amazonaws.com/123456789012/app-queue",
    "resourceType": "AWS::SQS::Queue",
    "properties": {},
    "attributes": {"Arn": "arn:aws:sqs:us-east-1:123456789012:app-queue", "Nested": {"Deep": "d"}},
}


def _resolver(template=None, *, resources=None, region="us-east-1", overrides=None, ssm=None, **kw):
    template = template or {}
    ctx = Context(
        template=template,
        stack_name="AppStack",
        region=region,
        account="123456789012",
        resources=resources if resources is not None else {"Queue": QUEUE_ROW},
        parameters=bind_parameters(template, overrides, ssm),
        ssm=ssm,
        **kw,
    )
    evaluate_conditions(ctx)
    return Resolver(ctx), ctx


def test_it_resolves_every_pseudo_parameter():
    r, _ = _resolver()
    got = {n: r.resolve({"Ref": n}) for n in ("AWS::Region", "AWS::AccountId", "AWS::Partition", "AWS::URLSuffix")}
    assert got == {
        "AWS::Region": "us-east-1",
        "AWS::AccountId": "123456789012",
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
    }
    assert r.resolve({"Ref": "AWS::StackName"}) == "AppStack"
    assert r.resolve({"Ref": "AWS::StackId"}) == "arn:aws:cloudformation:us-east-1:123456789012:stack/AppStack/cdkd"
    assert r.resolve({"Ref": "AWS::NotificationARNs"}) == ""
    assert r.resolve({"Ref": "AWS::NoValue"}) is NO_VALUE
    cn, _ = _resolver(region="cn-north-1")
    assert cn.resolve({"Fn::Sub": "${AWS::Partition}/${AWS::URLSuffix}"}) == "aws-cn/amazonaws.com.cn"


def test_it_reads_ref_and_getatt_from_the_record_and_says_known_after_apply_for_new_ones():
    template = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}, "New": {"Type": "AWS::SNS::Topic"}}}
    r, ctx = _resolver(template)
    assert r.resolve({"Ref": "Queue"}) == QUEUE_ROW["physicalId"]
    assert r.resolve({"Fn::GetAtt": ["Queue", "Arn"]}) == "arn:aws:sqs:us-east-1:123456789012:app-queue"
    assert r.resolve({"Fn::GetAtt": "Queue.Arn"}) == "arn:aws:sqs:us-east-1:123456789012:app-queue"
    assert r.resolve({"Fn::GetAtt": ["Queue", "Nested.Deep"]}) == "d"
    # not recorded, but cdkd builds it from the physical id
    assert r.resolve({"Fn::GetAtt": ["Queue", "QueueName"]}) == "app-queue"
    with pytest.raises(KnownAfterApply):
        r.resolve({"Ref": "New"})
    with pytest.raises(KnownAfterApply):
        r.resolve({"Fn::GetAtt": ["New", "TopicArn"]})
    with pytest.raises(ResolveError, match="Ref Nowhere not found"):
        r.resolve({"Ref": "Nowhere"})


def test_it_subs_both_forms_escapes_and_keeps_what_it_cannot_resolve():
    template = {"Resources": {"New": {"Type": "AWS::SNS::Topic"}}}
    r, ctx = _resolver(template)
    assert r.resolve({"Fn::Sub": "${AWS::Region}:${Queue}"}) == "us-east-1:" + QUEUE_ROW["physicalId"]
    assert r.resolve({"Fn::Sub": ["${A}-${Queue.Arn}", {"A": {"Ref": "AWS::AccountId"}}]}) == (
        "123456789012-arn:aws:sqs:us-east-1:123456789012:app-queue"
    )
    assert r.resolve({"Fn::Sub": "${!Literal}"}) == "${Literal}"
    assert r.resolve({"Fn::Sub": "x-${New}"}) == "x-${New}"
    assert ctx.kept_placeholders == 1
    assert any("placeholder ${New} kept" in w for w in ctx.warnings)


def test_it_joins_selects_splits_like_javascript():
    r, _ = _resolver()
    assert r.resolve({"Fn::Join": ["-", ["a", 1, True, {"Ref": "AWS::Region"}]]}) == "a-1-true-us-east-1"
    assert r.resolve({"Fn::Select": ["1", {"Fn::Split": [",", "a,b,c"]}]}) == "b"
    assert r.resolve({"Fn::Split": ["", "ab"]}) == ["a", "b"]
    with pytest.raises(ResolveError, match="out of range"):
        r.resolve({"Fn::Select": [5, ["a"]]})
    with pytest.raises(ResolveError, match="string source"):
        r.resolve({"Fn::Split": [",", ["a"]]})


def test_it_drops_no_value_from_lists_and_objects():
    r, _ = _resolver()
    assert r.resolve({"A": {"Ref": "AWS::NoValue"}, "B": [1, {"Ref": "AWS::NoValue"}, 2]}) == {"B": [1, 2]}


def test_it_finds_in_maps_with_a_default_and_encodes_base64():
    template = {"Mappings": {"Env": {"prod": {"Size": 3}}}}
    r, _ = _resolver(template)
    assert r.resolve({"Fn::FindInMap": ["Env", "prod", "Size"]}) == 3
    assert r.resolve({"Fn::FindInMap": ["Env", "dev", "Size", {"DefaultValue": 1}]}) == 1
    with pytest.raises(ResolveError, match="not in Mappings"):
        r.resolve({"Fn::FindInMap": ["Env", "dev", "Size"]})
    assert r.resolve({"Fn::Base64": "hi"}) == "aGk="


def test_it_asks_the_caller_for_azs_and_builds_cidrs():
    r, _ = _resolver(azs=lambda region: [region + "a", region + "b"])
    assert r.resolve({"Fn::Select": [0, {"Fn::GetAZs": ""}]}) == "us-east-1a"
    bare, _ = _resolver()
    with pytest.raises(KnownAfterApply):
        bare.resolve({"Fn::GetAZs": ""})
    assert r.resolve({"Fn::Cidr": ["10.0.0.0/16", 2, 8]}) == ["10.0.0.0/24", "10.0.1.0/24"]


def test_it_compares_equals_as_json_and_evaluates_conditions():
    template = {
        "Parameters": {"Env": {"Type": "String", "Default": "dev"}, "Count": {"Type": "Number", "Default": "1"}},
        "Conditions": {
            "IsProd": {"Fn::Equals": [{"Ref": "Env"}, "prod"]},
            "NotProd": {"Fn::Not": [{"Condition": "IsProd"}]},
            "Both": {"Fn::And": [{"Condition": "NotProd"}, {"Fn::Equals": ["1", {"Ref": "Count"}]}]},
            "Either": {"Fn::Or": [{"Condition": "IsProd"}, {"Condition": "Missing"}]},
            "Broken": {"Fn::Equals": [{"Ref": "Nope"}, "x"]},
        },
        "Resources": {
            "Always": {"Type": "AWS::SQS::Queue"},
            "ProdOnly": {"Type": "AWS::SQS::Queue", "Condition": "IsProd"},
            "Ghost": {"Type": "AWS::SQS::Queue", "Condition": "Undefined"},
        },
    }
    r, ctx = _resolver(template)
    # the Default "1" is used as written: a string equals the string "1"
    assert ctx.conditions == {"IsProd": False, "NotProd": True, "Both": True, "Either": False, "Broken": False}
    assert ctx.undecided_conditions == {"Broken"}
    assert r.resolve({"Fn::If": ["NotProd", "small", "big"]}) == "small"
    assert set(prune_resources(template, ctx)) == {"Always"}
    r2, ctx2 = _resolver(template, overrides={"Env": "prod", "Count": "1"})
    # an override is coerced by Type: Number 1 is not the string "1"
    assert ctx2.conditions["IsProd"] is True and ctx2.conditions["Both"] is False
    assert set(prune_resources(template, ctx2)) == {"Always", "ProdOnly"}


def test_it_binds_parameters_from_defaults_overrides_and_ssm():
    template = {
        "Parameters": {
            "Name": {"Type": "String", "Default": "a"},
            "Sizes": {"Type": "List<Number>", "Default": "1,2"},
            "Ami": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/app/ami"},
            "BootstrapVersion": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/cdk-bootstrap/v"},
            "Required": {"Type": "String"},
        },
        "Resources": {"R": {"Type": "AWS::SSM::Parameter", "Properties": {"Value": {"Ref": "Ami"}}}},
    }
    asked = []

    def ssm(name):
        asked.append(name)
        return {"/app/ami": "ami-123"}.get(name)

    bound = bind_parameters(template, parse_overrides(["Sizes=3, 4", "Name=x=y"]), ssm)
    assert bound.values == {"Name": "x=y", "Sizes": [3, 4], "Ami": "ami-123"}
    assert asked == ["/app/ami"]  # BootstrapVersion is read by Rules only: never looked up
    assert "Required" in bound.unbound
    with pytest.raises(ParameterError, match="declares no parameter named Typo"):
        bind_parameters(template, {"Typo": "1"})
    with pytest.raises(ParameterError, match="not of the form KEY=VALUE"):
        parse_overrides(["novalue"])


def test_it_reads_plain_ssm_references_and_never_fetches_secrets():
    asked = []

    def ssm(name):
        asked.append(name)
        return "v1"

    r, _ = _resolver(ssm=ssm)
    assert r.resolve("pre-{{resolve:ssm:/app/flag}}") == "pre-v1"
    secret = "{{resolve:secretsmanager:db:SecretString:password::}}"
    assert r.resolve(secret) == secret
    assert r.resolve("{{resolve:ssm-secure:/app/pw:1}}") == "{{resolve:ssm-secure:/app/pw:1}}"
    assert asked == ["/app/flag"]


def test_it_imports_from_the_exports_index_once_and_records_the_import():
    loads = []

    def exports():
        loads.append(1)
        return {"exports": {"Shared-Arn": {"value": "arn:x", "producerStack": "Shared", "producerRegion": "us-east-1"}}}

    r, ctx = _resolver(exports=exports)
    assert r.resolve({"Ref": "AWS::Region"}) == "us-east-1"
    assert loads == []  # no import, no read of the index
    assert r.resolve({"Fn::ImportValue": "Shared-Arn"}) == "arn:x"
    assert r.resolve({"Fn::ImportValue": "Shared-Arn"}) == "arn:x"
    assert loads == [1]
    assert ctx.imports == [{"exportName": "Shared-Arn", "sourceStack": "Shared", "sourceRegion": "us-east-1"}]
    with pytest.raises(ResolveError, match="no stack exports it"):
        r.resolve({"Fn::ImportValue": "Other"})


def test_it_refuses_unknown_intrinsics():
    r, _ = _resolver()
    with pytest.raises(ResolveError, match="unknown intrinsic function Fn::Nope"):
        r.resolve({"Fn::Nope": 1})
    # Condition is an intrinsic only inside conditions: elsewhere it is a plain key
    assert r.resolve({"Condition": {"StringEquals": {"a": "b"}}}) == {"Condition": {"StringEquals": {"a": "b"}}}


@pytest.mark.parametrize(
    ("rtype", "pid", "expected"),
    [
        ("AWS::ApiGateway::Stage", "restapi|prod", "prod"),
        ("AWS::EC2::EIP", "1.2.3.4|eipalloc-1", "1.2.3.4"),
        ("AWS::Events::Rule", "arn:aws:events:us-east-1:1:rule/my-rule", "my-rule"),
        ("AWS::Route53::RecordSet", "Z1|www.example.com|A", "www.example.com"),
        ("AWS::SQS::Queue", "https://sqs/1/q", "https://sqs/1/q"),
    ],
)
def test_it_translates_composite_physical_ids_for_ref(rtype, pid, expected):
    r, _ = _resolver(resources={"R": {"physicalId": pid, "resourceType": rtype, "properties": {}}})
    assert r.resolve({"Ref": "R"}) == expected


def test_it_refuses_an_arn_attribute_it_cannot_build_and_warns_on_a_physical_id_stand_in():
    rows = {"T": {"physicalId": "plain-id", "resourceType": "AWS::Some::Thing", "attributes": {}}}
    r, ctx = _resolver(resources=rows)
    with pytest.raises(KnownAfterApply, match="not recorded and not buildable"):
        r.resolve({"Fn::GetAtt": ["T", "ThingArn"]})
    assert r.resolve({"Fn::GetAtt": ["T", "Name"]}) == "plain-id"
    assert any("physical id stands in" in w for w in ctx.warnings)
    built, _ = _resolver(resources={"B": {"physicalId": "bkt", "resourceType": "AWS::S3::Bucket"}}, region="cn-north-1")
    assert built.resolve({"Fn::GetAtt": ["B", "Arn"]}) == "arn:aws-cn:s3:::bkt"
    assert built.resolve({"Fn::GetAtt": ["B", "RegionalDomainName"]}) == "bkt.s3.cn-north-1.amazonaws.com.cn"
