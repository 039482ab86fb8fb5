"""Damaged records and odd templates never crash the plan: every input gives a plan (or a
named AssemblyError for a template of the wrong shape), and both renderings print."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.deploy.assembly import AssemblyError
from engine.deploy.plan import compute_plan
from engine.deploy.render import exit_code, render_json, render_text

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(["", "a", "Q", "***", "x\u202e"]))
ids = st.sampled_from(["Q", "T", "AWS::Region", "AWS::NoValue", "P", "Missing", "C"])
intrinsic_names = st.sampled_from(
    [
        "Ref",
        "Fn::GetAtt",
        "Fn::Sub",
        "Fn::Join",
        "Fn::Select",
        "Fn::Split",
        "Fn::If",
        "Fn::Equals",
        "Fn::And",
        "Fn::Or",
        "Fn::Not",
        "Fn::FindInMap",
        "Fn::Base64",
        "Fn::GetAZs",
        "Fn::ImportValue",
        "Fn::Cidr",
        "Fn::Nope",
        "Condition",
    ]
)


def values(leaves):
    return st.recursive(
        st.one_of(leaves, ids),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(st.one_of(ids, st.sampled_from(["A", "B"])), children, max_size=3),
            st.builds(lambda k, v: {k: v}, intrinsic_names, children),
        ),
        max_leaves=12,
    )


props = st.dictionaries(
    st.sampled_from(["QueueName", "VisibilityTimeout", "Value", "ServiceToken", "Tags"]), values(scalars), max_size=3
)
types = st.sampled_from(
    [
        "AWS::SQS::Queue",
        "AWS::SSM::Parameter",
        "Custom::X",
        "AWS::CloudFormation::Stack",
        "AWS::CDK::Metadata",
        "AWS::Made::Up",
    ]
)
resource = st.builds(
    lambda t, p, c, d: {
        "Type": t,
        "Properties": p,
        **({"Condition": c} if c else {}),
        **({"DeletionPolicy": d} if d else {}),
    },
    types,
    props,
    st.sampled_from([None, "C", "Missing"]),
    st.sampled_from([None, "Retain", 1]),
)
template = st.builds(
    lambda r, o, c, p: {"Resources": r, "Outputs": o, "Conditions": c, "Parameters": p},
    st.dictionaries(st.sampled_from(["Q", "T", "P"]), resource, max_size=3),
    st.dictionaries(
        st.sampled_from(["O1", "O2"]),
        st.builds(
            lambda v, e: {"Value": v, **e},
            values(scalars),
            st.sampled_from([{}, {"Export": {"Name": "E"}}, {"Export": {"Name": {"Ref": "Q"}}}]),
        ),
        max_size=2,
    ),
    st.dictionaries(st.just("C"), values(scalars), max_size=1),
    st.dictionaries(
        st.just("P"),
        st.sampled_from(
            [
                {"Type": "String", "Default": "d"},
                {"Type": "Number"},
                {"Type": "String", "NoEcho": True, "Default": "secret"},
                "junk",
            ]
        ),
        max_size=1,
    ),
)
row = st.one_of(
    values(scalars),
    st.builds(
        lambda t, p, a, pid: {"resourceType": t, "properties": p, "attributes": a, "physicalId": pid},
        types,
        st.one_of(props, values(scalars)),
        st.one_of(st.dictionaries(st.sampled_from(["Arn"]), scalars), values(scalars)),
        st.one_of(scalars, st.just("id")),
    ),
)
record = st.one_of(
    st.none(),
    values(scalars),
    st.builds(
        lambda r, o, orphans, en, v: {
            "version": v,
            "resources": r,
            "outputs": o,
            "orphans": orphans,
            "exportNames": en,
        },
        st.one_of(st.dictionaries(st.sampled_from(["Q", "T", "Old"]), row, max_size=3), values(scalars)),
        st.one_of(
            st.dictionaries(st.sampled_from(["O1", "E", "Gone-1"]), values(scalars), max_size=3), values(scalars)
        ),
        st.one_of(st.lists(row, max_size=2), values(scalars)),
        st.one_of(st.lists(st.sampled_from(["E", 1]), max_size=2), values(scalars)),
        st.one_of(st.integers(0, 12), scalars),
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=template, record=record)
def test_it_plans_any_record_against_any_template_without_crashing(template, record):
    try:
        p = compute_plan(
            template,
            record,
            stack_name="S",
            region="us-east-1",
            account="123456789012",
            exports={"exports": {}},
            ssm=lambda name: None,
        )
    except AssemblyError:
        return
    render_json([p])
    render_text([p])
    assert exit_code([p], fail=True) in (0, 1, 3)
