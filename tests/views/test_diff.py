"""stacks.diff on parsed records, without views."""

from __future__ import annotations

import json

from engine.schema import parse_state
from stacks.diff import diff_records, json_changes
from tests.views.conftest import record, resource_row


def parse(data) -> object:
    return parse_state(json.dumps(data).encode(), key_region="us-east-1")


def test_it_finds_nothing_between_equal_records():
    data = record("web", resources={"B": resource_row()})
    assert diff_records(parse(data), parse(data)).identical


def test_it_reports_added_removed_and_changed_resources_with_paths():
    before = record(
        "web",
        resources={
            "Keep": resource_row(properties={"Tags": [{"Key": "a", "Value": "1"}]}, observedProperties={"X": 1}),
            "Old": resource_row("AWS::SQS::Queue"),
        },
    )
    after = record(
        "web",
        resources={
            "Keep": resource_row(
                "AWS::S3::Bucket",
                "phys-2",
                properties={"Tags": [{"Key": "a", "Value": "2"}, {"Key": "b", "Value": "3"}]},
                observedProperties={"X": 1, "Y": True},
                attributes={"Arn": "arn"},
                deletionPolicy="Retain",
            ),
            "New": resource_row("AWS::SNS::Topic"),
        },
    )
    diff = diff_records(parse(before), parse(after))
    assert [r.logical_id for r in diff.resources_added] == ["New"]
    assert [(r.logical_id, r.resource_type) for r in diff.resources_removed] == [("Old", "AWS::SQS::Queue")]
    [changed] = diff.resources_changed
    paths = {c.path: (c.kind, c.before, c.after) for c in changed.changes}
    assert paths == {
        "physicalId": ("changed", "phys", "phys-2"),
        "properties.Tags[0].Value": ("changed", "1", "2"),
        "properties.Tags[1]": ("added", None, {"Key": "b", "Value": "3"}),
        "observedProperties.Y": ("added", None, True),
        "attributes.Arn": ("added", None, "arn"),
        "deletionPolicy": ("added", None, "Retain"),
    }


def test_it_reports_output_changes():
    before = record("web", outputs={"A": "1", "Gone": "x", "List": ["a"]})
    after = record("web", outputs={"A": "2", "List": ["a", "b"], "New": {"k": 1}})
    diff = diff_records(parse(before), parse(after))
    assert [(c.path, c.kind) for c in diff.outputs] == [
        ("A", "changed"),
        ("Gone", "removed"),
        ("List", "changed"),
        ("New", "added"),
    ]
    assert diff.outputs[3].after_json == '{"k": 1}'


def test_it_reports_top_level_field_changes():
    before = record("web", version=8)
    after = record("web", version=11, exportNames=["A"], lastModified=2)
    changes = {c.path: c for c in diff_records(parse(before), parse(after)).fields}
    assert changes["version"].before == 8 and changes["version"].after == 11
    assert changes["exportNames"].kind == "added"
    assert changes["lastModified"].after == 2


def test_it_reports_a_container_turning_unreadable():
    before = record("web", outputs={"A": "1"})
    after = record("web", outputs="garbage")
    diff = diff_records(parse(before), parse(after))
    assert [(c.path, c.after) for c in diff.fields] == [("outputs", "garbage")]
    assert [(c.path, c.kind) for c in diff.outputs] == [("A", "removed")]


def test_it_compares_a_body_that_is_not_json():
    diff = diff_records(parse_state(b"{broken"), parse(record("web")))
    assert diff.fields[0].path == "(record)"
    assert diff.fields[0].before == "{broken"


def test_it_tells_true_from_1():
    assert json_changes({"a": 1}, {"a": True})[0].path == "a"
    assert json_changes([1, 2], [1, 2]) == []
