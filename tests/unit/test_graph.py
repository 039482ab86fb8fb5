"""engine.graph: which references order a destroy, and the order they give."""

from __future__ import annotations

import pytest

from engine.graph import CycleError, build_graph, references, row_dependencies


def row(properties: object = None, dependencies: object = None, **extra: object) -> dict:
    value: dict = {"resourceType": "AWS::X::Y", "properties": properties if properties is not None else {}}
    if dependencies is not None:
        value["dependencies"] = dependencies
    value.update(extra)
    return value


# --- references ---------------------------------------------------------------------------------


def test_it_finds_refs_anywhere_in_properties():
    props = {"A": {"Ref": "Queue"}, "B": [{"X": {"Ref": "Topic"}}], "C": "Ref"}
    assert references(props) == ["Queue", "Topic"]


def test_it_ignores_pseudo_parameters():
    assert references({"Ref": "AWS::Region"}) == []
    assert references({"Fn::Sub": "arn:${AWS::Partition}:s3:::${AWS::AccountId}-x"}) == []


def test_it_finds_getatt_in_list_and_dotted_string_forms():
    assert references({"Fn::GetAtt": ["Role", "Arn"]}) == ["Role"]
    assert references({"Fn::GetAtt": "Bucket.DomainName"}) == ["Bucket"]
    # The attribute name may itself be an intrinsic.
    assert references({"Fn::GetAtt": ["Db", {"Ref": "AttrParam"}]}) == ["Db", "AttrParam"]


def test_it_finds_sub_variables_in_the_string_form():
    value = {"Fn::Sub": "arn:aws:sqs:${AWS::Region}:${Queue.Arn}/${Topic}/${!Literal}"}
    assert references(value) == ["Queue", "Topic"]


def test_it_excludes_a_sub_lists_own_variables_but_walks_their_values():
    value = {"Fn::Sub": ["${Name}-${Bucket}", {"Name": {"Fn::GetAtt": ["Fn", "Arn"]}}]}
    assert references(value) == ["Bucket", "Fn"]


def test_it_survives_damaged_intrinsics():
    assert references({"Ref": 5}) == []
    assert references({"Fn::GetAtt": []}) == []
    assert references({"Fn::Sub": None}) == []
    assert references({"Fn::Sub": [5, "x"]}) == []
    assert references("plain") == []


def test_it_treats_a_multi_key_object_as_plain_data():
    # {"Ref": ..., "Other": ...} is not an intrinsic, but what it holds is still walked.
    assert references({"Ref": "NotIntrinsic", "Other": {"Ref": "Real"}}) == ["Real"]


def test_it_combines_dependencies_and_references_in_first_seen_order():
    value = row({"Role": {"Fn::GetAtt": ["Role", "Arn"]}, "Q": {"Ref": "Queue"}}, dependencies=["Queue", 7, "Log"])
    assert row_dependencies(value) == ["Queue", "Log", "Role"]


# --- the graph ----------------------------------------------------------------------------------


def test_it_keeps_only_edges_between_resources_of_the_record():
    graph = build_graph(
        {
            "Fn": row({"Role": {"Fn::GetAtt": ["Role", "Arn"]}, "Gone": {"Ref": "Elsewhere"}}, ["Fn"]),
            "Role": row(),
        }
    )
    assert graph.depends_on == {"Fn": ["Role"], "Role": []}
    assert graph.unknown == {"Fn": ["Elsewhere"]}
    assert graph.dependents == {"Fn": [], "Role": ["Fn"]}


def test_it_deletes_dependents_before_what_they_depend_on():
    graph = build_graph(
        {
            "Role": row(),
            "Queue": row(),
            "Fn": row({"Role": {"Fn::GetAtt": ["Role", "Arn"]}, "Env": {"Fn::Sub": "${Queue}"}}),
            "Mapping": row({"FunctionName": {"Ref": "Fn"}, "Source": {"Fn::GetAtt": "Queue.Arn"}}),
            "Alone": row(),
        }
    )
    assert graph.levels() == [["Role", "Queue", "Alone"], ["Fn"], ["Mapping"]]
    assert graph.deletion_levels() == [["Mapping"], ["Fn"], ["Role", "Queue", "Alone"]]
    assert graph.deletion_order() == ["Mapping", "Fn", "Role", "Queue", "Alone"]


def test_it_orders_a_diamond_by_its_longest_path():
    graph = build_graph(
        {
            "A": row(dependencies=["B", "C"]),
            "B": row(dependencies=["D"]),
            "C": row(dependencies=["B"]),
            "D": row(),
        }
    )
    assert graph.deletion_levels() == [["A"], ["C"], ["B"], ["D"]]


def test_it_refuses_a_cycle_and_names_it():
    graph = build_graph(
        {
            "A": row({"X": {"Ref": "B"}}),
            "B": row(dependencies=["C"]),
            "C": row({"Y": {"Fn::GetAtt": "A.Arn"}}),
            "D": row(),
        }
    )
    with pytest.raises(CycleError) as caught:
        graph.levels()
    assert caught.value.cycle == ["A", "B", "C", "A"]
    assert "A -> B -> C -> A" in str(caught.value)
    assert graph.find_cycle() == ["A", "B", "C", "A"]


def test_it_ignores_self_references():
    graph = build_graph({"A": row({"X": {"Ref": "A"}}, ["A"])})
    assert graph.deletion_levels() == [["A"]]
    assert graph.find_cycle() is None


def test_it_handles_a_long_chain_without_recursion():
    rows = {f"R{i}": row(dependencies=[f"R{i + 1}"]) for i in range(3000)}
    rows["R3000"] = row()
    graph = build_graph(rows)
    assert graph.find_cycle() is None
    assert graph.deletion_order()[0] == "R0" and graph.deletion_order()[-1] == "R3000"


def test_it_takes_unreadable_dependencies_as_none():
    graph = build_graph({"A": {"resourceType": "T", "properties": {}, "dependencies": "B"}, "B": row()})
    assert graph.depends_on == {"A": [], "B": []}
