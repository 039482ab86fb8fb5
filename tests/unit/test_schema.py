"""engine.schema: lenient read, exact write of cdkd's state.json and lock.json."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from engine import schema
from engine.errors import RecordRefused
from engine.schema import (
    SUPPORTED_VERSION,
    LockInfo,
    StackState,
    describe_region_value_kind,
    display_row,
    dump_lock,
    dump_state,
    parse_lock,
    parse_state,
)

RECORDS = Path(__file__).parent / "records"
SAMPLE = Path("/work/shared/samples/cdkd-0.284.40/deploy-written-DeployStack-state.json")


def js(value: Any) -> bytes:
    """Bytes as JSON.stringify(value, null, 2) writes them, for values where Python agrees."""
    return json.dumps(value, indent=2, ensure_ascii=False).encode()


def row(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"physicalId": "q-1", "resourceType": "AWS::SQS::Queue", "properties": {}}
    base.update(extra)
    return base


def good(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 11,
        "stackName": "S",
        "region": "us-east-1",
        "resources": {"Q": row()},
        "outputs": {},
        "lastModified": 1,
    }
    body.update(extra)
    return body


def parsed(body: Any, **kw: Any) -> schema.ParsedRecord:
    kw.setdefault("key_region", "us-east-1")
    return parse_state(json.dumps(body).encode(), **kw)


# --- every version parses ---------------------------------------------------------------

V1 = {
    "version": 1,
    "stackName": "Legacy",
    "region": "us-east-1",
    "resources": {
        "B": {
            "physicalId": "b",
            "resourceType": "AWS::S3::Bucket",
            "properties": {"BucketName": "b"},
            "attributes": {"Arn": "arn:aws:s3:::b"},
            "dependencies": [],
            "metadata": {"aws:cdk:path": "Legacy/B"},
        }
    },
    "outputs": {"BucketName": "b"},
    "lastModified": 1600000000000,
}


def _version(n: int) -> dict[str, Any]:
    """A representative record of schema `n`: the v1 shape plus every field added up to n."""
    body = copy.deepcopy(V1)
    body["version"] = n
    body["stackName"] = f"V{n}"
    r = body["resources"]["B"]
    if n >= 3:
        r["observedProperties"] = {"BucketName": "b", "Tags": []}
    if n >= 4:
        body["imports"] = [{"sourceStack": "Net", "sourceRegion": "us-east-1", "exportName": "VpcId"}]
    if n >= 5:
        r["deletionPolicy"] = "Retain"
        r["updateReplacePolicy"] = "Delete"
    if n >= 6:
        body.update(parentStack="Root", parentLogicalId="Child", parentRegion="us-east-1")
    if n >= 7:
        r["provisionedBy"] = "cc-api"
    if n >= 8:
        body["outputReads"] = [{"sourceStack": "Shared", "sourceRegion": "eu-west-1", "outputName": "Topic"}]
    if n >= 9:
        body["exportNames"] = ["BucketName"]
        body["skippedOutputs"] = {"Broken": "sha256:00"}
        body["orphans"] = [{"logicalId": "Old", "orphanedAt": 5, "state": row(physicalId="old")}]
        body["conditionVerdicts"] = {"IsProd": {"verdict": False, "fingerprint": "sha256:11"}}
    if n >= 10:
        r["observedBaselineRefused"] = True
        r["observedBaselineRefusalReason"] = "incomplete-resolution"
    if n >= 11:
        r["properties"]["Password"] = "***"
        r["noEchoLeaves"] = [["Password"], ["Tags", 0, "Value"]]
        r["noEchoAttributeNames"] = ["Secret"]
        r["noEchoExactEchoLeaves"] = [["Password"]]
        r["acceptedCreateOnlyDrops"] = ["KmsKeyId"]
        r["maskedPropertyFingerprints"] = {"UserData": "sha256:aa"}
        r["maskedPropertyInputFingerprints"] = {"UserData": "inputs-sha256:bb+sha256:aa"}
    return body


@pytest.mark.parametrize("n", range(1, 12))
def test_it_parses_every_version_and_writes_it_back_at_its_own_version(n: int) -> None:
    body = _version(n)
    rec = parsed(body)
    assert rec.defects == [] and rec.warnings == []
    assert rec.version == n and rec.writable and not rec.newer_than_supported
    assert rec.data == body and rec.state is not None
    out = dump_state(rec.state, stack_name=f"V{n}", region="us-east-1")
    kept = max(n, 2)  # a repair keeps the version; a legacy v1 body goes to a region key (v2)
    assert schema.write_version(rec.state) == kept
    assert json.loads(out) == {**body, "version": kept}
    assert out == js({**body, "version": kept})
    assert rec.resource_rows() == [("B", body["resources"]["B"])]


@pytest.mark.parametrize("n", range(1, 12))
def test_each_versions_fields_need_exactly_that_version(n: int) -> None:
    assert schema.fields_version(_version(n)) == max(n, 2)
    assert schema.fields_version({**_version(n), "version": 1}) == max(n, 2)


def test_a_repair_that_holds_a_newer_field_writes_the_lowest_version_that_knows_it() -> None:
    body = _version(8)
    rec = parsed(body)
    rec.state.resources["B"]["observedBaselineRefused"] = True  # a v10 field
    assert json.loads(dump_state(rec.state, stack_name="V8", region="us-east-1"))["version"] == 10
    body = _version(5)
    body["orphans"] = [{"logicalId": "Old", "orphanedAt": 5, "state": row(physicalId="o", noEchoLeaves=[["P"]])}]
    assert json.loads(dump_state(parsed(body).state, stack_name="V5", region="us-east-1"))["version"] == 11
    # Fields the seeds add without a bump do not raise it.
    body = _version(3)
    body.update(skippedOutputs={"X": "sha256:1"}, conditionVerdicts={})
    body["resources"]["B"].update(noEchoExactEchoLeaves=[["P"]], maskedPropertyFingerprints={"P": "sha256:2"})
    assert json.loads(dump_state(parsed(body).state, stack_name="V3", region="us-east-1"))["version"] == 3


def test_a_new_record_is_written_at_11() -> None:
    assert schema.write_version(StackState(resources={})) == SUPPORTED_VERSION == 11


def test_it_reads_the_fields_each_version_introduced() -> None:
    rec = parsed(_version(11))
    assert [(e.sourceStack, e.sourceRegion, e.exportName) for e in rec.imports()] == [("Net", "us-east-1", "VpcId")]
    assert [(e.sourceStack, e.outputName) for e in rec.output_reads()] == [("Shared", "Topic")]
    assert rec.parent() == ("Root", "Child", "us-east-1")
    assert rec.export_names() == {"BucketName"}
    assert rec.skipped_outputs() == {"Broken": "sha256:00"}
    assert rec.condition_verdicts() == {"IsProd": (False, "sha256:11")}
    assert [(o.logicalId, o.orphanedAt, o.resource_state().physicalId) for o in rec.orphans()] == [("Old", 5, "old")]
    res = rec.state.resource("B")
    assert res.provisionedBy == "cc-api" and res.is_retained() and res.observedBaselineRefused is True
    assert res.noEchoLeaves == [["Password"], ["Tags", 0, "Value"]]
    assert res.maskedPropertyInputFingerprints == {"UserData": "inputs-sha256:bb+sha256:aa"}
    assert rec.last_modified_ms() == 1600000000000
    # Pre-v9 records: exports not known, no parent, no orphans.
    old = parsed(_version(8))
    assert old.export_names() is None and old.importable_output_keys() == {"BucketName"}
    assert parsed(_version(5)).parent() is None and parsed(_version(5)).orphans() == []


def test_it_round_trips_the_cdkd_written_sample_byte_for_byte() -> None:
    raw = SAMPLE.read_bytes()
    rec = parse_state(raw, key_region="us-east-1", stack_name="DeployStack")
    assert rec.defects == [] and rec.version == 8
    out = dump_state(rec.state, stack_name="DeployStack", region="us-east-1")
    # cdkd 0.284 wrote it at version 8 and reads nothing newer: the write keeps 8 and the key order.
    assert out == raw
    assert out.startswith(b'{\n  "version": 8,\n  "region": "us-east-1",\n  "stackName": "DeployStack",')
    assert not out.endswith(b"\n")


def test_it_round_trips_a_full_v11_nested_child_byte_for_byte() -> None:
    raw = (RECORDS / "v11-nested-child.json").read_bytes()
    rec = parse_state(raw, key_region="eu-west-1", stack_name="Parent~Child")
    assert rec.defects == [] and rec.warnings == [] and rec.version == 11
    assert dump_state(rec.state, stack_name="Parent~Child", region="eu-west-1") == raw
    assert rec.state.futureTopLevelField == {"nested": [1, 2]}
    assert rec.importable_output_keys() == {"SecretArn"}


# --- unknown fields, key order, nothing invented ----------------------------------------


def test_it_keeps_unknown_fields_at_every_level_in_place() -> None:
    body = {
        "zFirst": 1,
        "version": 11,
        "stackName": "S",
        "region": "us-east-1",
        "resources": {"Q": {"custom": [1], "physicalId": "q", "resourceType": "T", "properties": {}, "z": None}},
        "orphans": [{"logicalId": "O", "extra": {"x": 1}, "state": row(physicalId="o", rowExtra=True)}],
        "middle": "kept",
        "lastModified": 2,
    }
    rec = parsed(body)
    assert rec.defects == []
    assert rec.state.get("zFirst") == 1 and rec.state.get("middle") == "kept"
    out = dump_state(rec.state, stack_name="S", region="us-east-1")
    assert out == js(body)
    assert list(json.loads(out)) == list(body)
    orphan = rec.orphans()[0]
    assert orphan.get("extra") == {"x": 1} and orphan.resource_state().get("rowExtra") is True


def test_it_invents_nothing_and_appends_the_stamped_keys_when_absent() -> None:
    body = {"resources": {}, "custom": 1}
    rec = parsed(body)
    out = dump_state(rec.state, stack_name="New", region="ap-south-1")
    assert out == js({"resources": {}, "custom": 1, "version": 11, "stackName": "New", "region": "ap-south-1"})


def test_it_stamps_the_keys_name_and_region_over_the_bodys_in_place() -> None:
    body = good(stackName="Wrong", region=7)
    out = dump_state(parsed(body).state, stack_name="Right", region="us-east-1")
    assert list(json.loads(out)) == list(body)
    assert json.loads(out)["stackName"] == "Right" and json.loads(out)["region"] == "us-east-1"


def test_it_edits_the_state_independently_of_the_stored_data() -> None:
    body = good(skippedOutputs={"X": "sha256:1"}, conditionVerdicts={})
    rec = parsed(body)
    rec.state.resources["New"] = row(physicalId="n")
    rec.state.discard("skippedOutputs")
    rec.state.set("added", [1])
    rec.state.outputs = {"O": 1}
    assert rec.data == body  # what was stored is untouched
    out = json.loads(dump_state(rec.state, stack_name="S", region="us-east-1"))
    assert "skippedOutputs" not in out and list(out)[-1] == "added"
    assert list(out["resources"]) == ["Q", "New"] and out["outputs"] == {"O": 1}
    assert list(out)[:5] == ["version", "stackName", "region", "resources", "outputs"]


def test_it_keeps_a_json_null_apart_from_an_absent_key() -> None:
    state = parsed({"resources": {}, "parentStack": None}).state
    assert state.has("parentStack") and not state.has("parentRegion")
    assert state.to_json_value() == {"resources": {}, "parentStack": None}


# --- JSON.stringify fidelity ------------------------------------------------------------


def test_it_prints_numbers_and_keys_as_javascript_does() -> None:
    raw = (
        b'{"resources": {}, "outputs": {"b": 1, "10": 2.0, "2": 1e-7, "a": 0.00001, "big": 1.5e300,'
        b' "huge": 123456789012345678901, "neg": -0.0, "f": 0.1, "e21": 1e21, "01": 3}}'
    )
    out = dump_state(parse_state(raw).state, stack_name="S", region="r")
    assert out == (
        b'{\n  "resources": {},\n  "outputs": {\n    "2": 1e-7,\n    "10": 2,\n    "b": 1,\n'
        b'    "a": 0.00001,\n    "big": 1.5e+300,\n    "huge": 123456789012345680000,\n    "neg": 0,\n'
        b'    "f": 0.1,\n    "e21": 1e+21,\n    "01": 3\n  },\n  "version": 11,\n  "stackName": "S",\n'
        b'  "region": "r"\n}'
    )


def test_it_escapes_strings_as_javascript_does() -> None:
    raw = b'{"resources": {}, "outputs": {"s": "\\ud800 \\u0001 \\t \\" \\u2028 \\u00e9 \\ud83d\\ude80"}}'
    out = dump_state(parse_state(raw).state, stack_name="S", region="r")
    assert '"s": "\\ud800 \\u0001 \\t \\" \u2028 é 🚀"'.encode() in out


# --- defects ----------------------------------------------------------------------------

ROW_CASES: list[tuple[str, Any, str, str]] = [
    ("row null", {"Q": None}, "resource-row-malformed", "resources.Q"),
    ("row string", {"Q": "abc"}, "resource-row-malformed", "resources.Q"),
    ("row list", {"Q": []}, "resource-row-malformed", "resources.Q"),
    ("no type", {"Q": {"physicalId": "q", "properties": {}}}, "resource-row-malformed", "resources.Q.resourceType"),
    ("type number", {"Q": row(resourceType=5)}, "resource-row-malformed", "resources.Q.resourceType"),
    (
        "no properties",
        {"Q": {"physicalId": "q", "resourceType": "T"}},
        "resource-properties-malformed",
        "resources.Q.properties",
    ),
    ("properties list", {"Q": row(properties=[])}, "resource-properties-malformed", "resources.Q.properties"),
    ("properties null", {"Q": row(properties=None)}, "resource-properties-malformed", "resources.Q.properties"),
    ("properties string", {"Q": row(properties="ab")}, "resource-properties-malformed", "resources.Q.properties"),
    ("attributes null", {"Q": row(attributes=None)}, "resource-attributes-malformed", "resources.Q.attributes"),
    ("attributes list", {"Q": row(attributes=[1])}, "resource-attributes-malformed", "resources.Q.attributes"),
]


@pytest.mark.parametrize(("case", "resources", "code", "path"), ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_it_names_each_damaged_row(case: str, resources: dict, code: str, path: str) -> None:
    rec = parsed(good(resources={"Ok": row(), **resources}), stack_name="Shop")
    assert [(d.code, d.path) for d in rec.defects] == [(code, path)]
    assert not rec.writable
    message = rec.defects[0].message
    assert path in message
    assert "cdkd state orphan Shop --stack-region us-east-1" in message
    assert "--resource Q" in message and "cdkd state show Shop --stack-region us-east-1 --json" in message
    with pytest.raises(RecordRefused, match=path.replace(".", r"\.")):
        dump_state(rec.state, stack_name="Shop", region="us-east-1")


def test_it_reports_a_typeless_row_once_and_keeps_healthy_optional_maps() -> None:
    rec = parsed(
        good(resources={"Q": {"properties": "torn"}, "R": row(), "P": {"resourceType": "T", "properties": {}}})
    )
    assert [(d.code, d.path) for d in rec.defects] == [("resource-row-malformed", "resources.Q.resourceType")]
    # No physicalId is readable; no attributes is healthy; {} properties is healthy.
    assert rec.resource_rows() == [("Q", None), ("R", row()), ("P", {"resourceType": "T", "properties": {}})]


CONTAINER_CASES: list[tuple[str, dict, str, str]] = [
    ("resources absent", {"resources": None}, "resources-missing", "resources"),
    ("resources list", {"resources": []}, "resources-malformed", "resources"),
    ("resources number", {"resources": 0}, "resources-malformed", "resources"),
    ("resources true", {"resources": True}, "resources-malformed", "resources"),
    ("resources null", {"resources": "NULL"}, "resources-malformed", "resources"),
    ("resources string", {"resources": "abcdef"}, "resources-malformed", "resources"),
    ("outputs string", {"outputs": "abcdef"}, "outputs-malformed", "outputs"),
    ("outputs null", {"outputs": "NULL"}, "outputs-malformed", "outputs"),
    ("outputs list", {"outputs": ["a"]}, "outputs-malformed", "outputs"),
    ("orphans string", {"orphans": "ab"}, "orphans-malformed", "orphans"),
    ("orphans object", {"orphans": {}}, "orphans-malformed", "orphans"),
    ("orphans null", {"orphans": "NULL"}, "orphans-malformed", "orphans"),
    ("version string", {"version": "11"}, "version-invalid", "version"),
    ("version bool", {"version": True}, "version-invalid", "version"),
    ("version zero", {"version": 0}, "version-invalid", "version"),
    ("version fraction", {"version": 2.5}, "version-invalid", "version"),
    ("version null", {"version": "NULL"}, "version-invalid", "version"),
    ("export names no string", {"exportNames": [1, None]}, "export-names-malformed", "exportNames"),
]


@pytest.mark.parametrize(("case", "change", "code", "path"), CONTAINER_CASES, ids=[c[0] for c in CONTAINER_CASES])
def test_it_names_each_damaged_container(case: str, change: dict, code: str, path: str) -> None:
    body = good()
    for key, value in change.items():
        if value is None:
            del body[key]
        else:
            body[key] = None if value == "NULL" else value
    rec = parsed(body, stack_name="Shop")
    assert [(d.code, d.path) for d in rec.defects] == [(code, path)]
    assert f"`{path}`" in rec.defects[0].message or path in rec.defects[0].message
    assert not rec.writable and rec.state is not None
    with pytest.raises(RecordRefused, match=code):
        dump_state(rec.state, stack_name="Shop", region="us-east-1")


def test_it_repairs_damaged_containers_for_display() -> None:
    rec = parsed(good(resources="abcdef", outputs="abcdef", orphans="ab", imports="x", skippedOutputs=[1]))
    assert rec.resource_rows() == [] and rec.outputs() == {} and rec.orphans() == []
    assert rec.imports() == [] and rec.skipped_outputs() == {}
    assert {d.path for d in rec.defects} == {"resources", "outputs", "orphans"}


def test_it_accepts_absent_optional_containers_and_empty_ones() -> None:
    body = good()
    del body["outputs"]
    for extra in ({}, {"orphans": []}, {"exportNames": []}, {"outputs": {}}, {"resources": {}}):
        rec = parsed({**body, **extra})
        assert rec.defects == [] and rec.writable
    assert parsed(body).outputs() == {}
    # Scrub round-trips a record with no outputs without materialising {}.
    assert "outputs" not in json.loads(dump_state(parsed(body).state, stack_name="S", region="us-east-1"))


ORPHAN_CASES: list[tuple[str, list, list[str]]] = [
    ("not an object", ["x"], ["orphans[1]"]),
    ("no logicalId", [{"state": row(physicalId="a")}], ["orphans[1].logicalId"]),
    ("state not object", [{"logicalId": "B", "state": None}], ["orphans[1].state"]),
    ("state typeless", [{"logicalId": "B", "state": {"physicalId": "b", "properties": {}}}], ["orphans[1].state"]),
    ("empty physicalId", [{"logicalId": "B", "state": row(physicalId="")}], ["orphans[1].state.physicalId"]),
    ("number physicalId", [{"logicalId": "B", "state": row(physicalId=5)}], ["orphans[1].state.physicalId"]),
    (
        "no properties",
        [{"logicalId": "B", "state": {"physicalId": "b", "resourceType": "T"}}],
        ["orphans[1].state.properties"],
    ),
    ("attributes torn", [{"logicalId": "B", "state": row(attributes="x")}], ["orphans[1].state.attributes"]),
    (
        "duplicate id",
        [{"logicalId": "A", "state": row(physicalId="a2")}],
        ["orphans[0].logicalId", "orphans[1].logicalId"],
    ),
]


@pytest.mark.parametrize(("case", "extra", "paths"), ORPHAN_CASES, ids=[c[0] for c in ORPHAN_CASES])
def test_it_names_each_unusable_orphan_record(case: str, extra: list, paths: list[str]) -> None:
    first = {"logicalId": "A", "orphanedAt": 1, "state": row(physicalId="a")}
    rec = parsed(good(orphans=[first, *extra]), stack_name="Shop")
    assert [(d.code, d.path) for d in rec.defects] == [("orphan-record-malformed", p) for p in paths]
    message = rec.defects[0].message
    assert "no command removes a single orphans row" in message or "Keep ONE record" in message
    assert "cdkd state show Shop --stack-region us-east-1 --json" in message
    usable = [o.logicalId for o in rec.orphans()]
    assert usable == ([] if case == "duplicate id" else ["A"])


def test_it_reads_export_names_fail_closed() -> None:
    outputs = {"VpcId": "vpc-1", "Exported": "x", "0": "zero"}
    assert parsed(good(outputs=outputs)).importable_output_keys() == set(outputs)  # absent: not known
    assert parsed(good(outputs=outputs, exportNames=[])).importable_output_keys() == set()
    mixed = parsed(good(outputs=outputs, exportNames=["Exported", 0]))
    assert mixed.export_names() == {"Exported"} and mixed.defects == []
    for damaged in ("Exported", None, {"Exported": 1}, 3):
        rec = parsed(good(outputs=outputs, exportNames=damaged))
        assert rec.export_names() == set() and rec.importable_output_keys() == set()
        assert rec.defects == [] and [w.code for w in rec.warnings] == ["export-names-not-list"]
        assert rec.writable


def test_it_marks_bodies_that_are_not_json_or_not_objects() -> None:
    for body in (b"\xff\xfe{}", b'{"resources": {', b"", b'{"resources": {}, "x": NaN}', b"\xef\xbb\xbf{}"):
        rec = parse_state(body, key_region="us-east-1", stack_name="Shop")
        assert [d.code for d in rec.defects] == ["not-json"] and rec.data is None and rec.state is None
        assert "cdkd state orphan Shop --stack-region us-east-1" in rec.defects[0].message
        assert rec.resource_rows() == [] and rec.outputs() == {} and rec.last_modified_ms() is None
    for body, kind in ((b"[]", "an array"), (b"null", "null"), (b'"x"', "a string"), (b"5", "a number")):
        rec = parse_state(body, key_region="us-east-1")
        assert [(d.code, d.path) for d in rec.defects] == [("root-not-object", "")]
        assert kind in rec.defects[0].message and rec.state is None and not rec.writable


def test_it_words_repairs_for_a_legacy_record_without_a_region_flag() -> None:
    rec = parse_state(b'{"version": 1, "stackName": "Old", "region": "us-east-1"}', key_region=None, stack_name="Old")
    assert [d.code for d in rec.defects] == ["resources-missing"]
    message = rec.defects[0].message
    assert "`cdkd state orphan Old`" in message and "--stack-region" not in message
    assert "from the state bucket directly" in message
    assert not rec.region_mismatch  # a legacy key has no region to disagree with


def test_it_shell_quotes_names_a_shell_would_act_on_and_leaves_holes_for_control_characters() -> None:
    rec = parsed({"version": 11}, stack_name="a;rm -rf", key_region="us-east-1")
    assert "cdkd state orphan 'a;rm -rf' --stack-region us-east-1" in rec.defects[0].message
    rec = parsed({"version": 11}, stack_name="a\nrm", key_region="us-east-1")
    assert "cdkd state orphan '<stack>' --stack-region us-east-1" in rec.defects[0].message


# --- versions ---------------------------------------------------------------------------


def test_it_reads_a_newer_record_but_refuses_to_write_it() -> None:
    body = good(version=12, resources={"Q": row(futureField=1)})
    rec = parsed(body)
    assert rec.version == 12 and rec.newer_than_supported and not rec.writable and rec.defects == []
    assert rec.resource_rows() == [("Q", body["resources"]["Q"])]
    with pytest.raises(RecordRefused, match="schema version 12"):
        dump_state(rec.state, stack_name="S", region="us-east-1")


def test_it_passes_a_record_without_a_version_and_accepts_integral_numbers() -> None:
    body = good()
    del body["version"]
    rec = parsed(body)
    assert rec.version is None and rec.writable
    assert parsed(good(version=3.0)).version == 3 and parsed(good(version=3.0)).defects == []
    assert parsed(good(version=1e3)).newer_than_supported


# --- region -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("eu-west-1", "a string"),
        (5, "a number"),
        (None, "null"),
        ([], "an array"),
        ({}, "an object"),
        (True, "a boolean"),
    ],
)
def test_it_describes_only_the_kind_of_a_disagreeing_region(value: Any, kind: str) -> None:
    rec = parsed(good(region=value))
    assert rec.region_mismatch and rec.body_region_kind == kind
    assert [w.code for w in rec.warnings] == ["region-mismatch"] and rec.defects == []
    if isinstance(value, str):
        assert value not in rec.warnings[0].message  # the body's value is never echoed
    assert describe_region_value_kind(value) == kind


def test_it_agrees_when_the_region_matches_or_is_absent() -> None:
    assert not parsed(good()).region_mismatch and parsed(good()).body_region_kind is None
    body = good()
    del body["region"]
    assert not parsed(body).region_mismatch


# --- accessors --------------------------------------------------------------------------


def test_it_reads_last_modified_defensively() -> None:
    cases = [(1710835200000, 1710835200000), (1.5e12, 1500000000000), ("2024", None), (None, None), (True, None)]
    for value, expected in cases:
        assert parsed(good(lastModified=value)).last_modified_ms() == expected
    body = good()
    del body["lastModified"]
    assert parsed(body).last_modified_ms() is None
    assert parse_state(b'{"resources": {}, "lastModified": 1e400}').last_modified_ms() is None


def test_it_reads_parent_links_and_verdicts_leniently() -> None:
    assert parsed(good(parentStack="P", parentLogicalId=5)).parent() is None
    assert parsed(good(parentStack="P", parentLogicalId="C")).parent() == ("P", "C", None)
    verdicts = {"A": {"verdict": True, "fingerprint": "f"}, "B": {"verdict": "yes", "fingerprint": "f"}, "C": 1}
    assert parsed(good(conditionVerdicts=verdicts)).condition_verdicts() == {"A": (True, "f")}
    assert parsed(good(conditionVerdicts=[1])).condition_verdicts() == {}
    reads = parsed(good(outputReads=[1, {"sourceStack": "S", "sourceRegion": "r", "outputName": "O", "x": 2}]))
    assert [(e.outputName, e.get("x")) for e in reads.output_reads()] == [("O", 2)]


def test_it_repairs_a_row_for_display_without_touching_the_stored_one() -> None:
    stored = row(properties="torn", attributes=None)
    rec = parsed(good(resources={"Q": stored}))
    ((lid, got),) = rec.resource_rows()
    assert got == stored  # rows are as stored
    assert display_row(got) == {**stored, "properties": {}, "attributes": {}}
    assert got["properties"] == "torn"


def test_it_reads_resource_helpers() -> None:
    state = parsed(good(resources={"Q": row(deletionPolicy="Snapshot", dependencies=["A", 1, "B"])})).state
    res = state.resource("Q")
    assert not res.is_retained() and res.dependency_ids() == ["A", "B"]
    assert state.resource("Missing") is None


# --- locks ------------------------------------------------------------------------------

CDKD_LOCK = b'{"owner":"goto@macbook:12345","timestamp":1710835200000,"expiresAt":1710837000000,"operation":"deploy"}'


def test_it_reads_and_writes_cdkds_exact_lock() -> None:
    lock = parse_lock(CDKD_LOCK)
    assert lock.error is None and not lock.present_but_empty
    assert (lock.info.owner, lock.info.timestamp, lock.info.operation) == (
        "goto@macbook:12345",
        1710835200000,
        "deploy",
    )
    assert lock.expires_at_ms() == 1710837000000
    assert not lock.is_expired(1710836999999) and lock.is_expired(1710837000000)
    assert dump_lock(lock.info) == CDKD_LOCK
    built = LockInfo.new(
        owner="goto@macbook:12345", timestamp=1710835200000, expires_at=1710837000000, operation="deploy"
    )
    assert dump_lock(built) == CDKD_LOCK
    assert dump_lock(LockInfo.new(owner="o", timestamp=1, expires_at=2)) == b'{"owner":"o","timestamp":1,"expiresAt":2}'


def test_it_keeps_unknown_lock_fields_after_the_known_ones() -> None:
    lock = parse_lock(b'{"future": [1], "expiresAt": 9, "owner": "o", "timestamp": 1}')
    assert lock.info.get("future") == [1]
    assert dump_lock(lock.info) == b'{"owner":"o","timestamp":1,"expiresAt":9,"future":[1]}'


@pytest.mark.parametrize("expires", [b'"1710837000000"', b"null", b"true", b"1e400", b"[1]"])
def test_it_counts_a_non_finite_expiry_as_expired(expires: bytes) -> None:
    lock = parse_lock(b'{"owner": "o", "timestamp": 1, "expiresAt": ' + expires + b"}")
    assert lock.info is not None and lock.expires_at_ms() is None and lock.is_expired(0)


def test_it_counts_a_missing_expiry_as_expired_and_rounds_fractions_up() -> None:
    assert parse_lock(b'{"owner": "o"}').is_expired(0)
    lock = parse_lock(b'{"expiresAt": 1000.5}')
    assert lock.expires_at_ms() == 1001 and not lock.is_expired(1000) and lock.is_expired(1001)


def test_it_reads_a_null_or_non_object_lock_as_no_lock_that_still_blocks() -> None:
    for body in (b"null", b"[]", b"5", b'"x"'):
        lock = parse_lock(body)
        assert lock.info is None and lock.error is None and lock.present_but_empty
        assert lock.expires_at_ms() is None


def test_it_reports_an_unreadable_lock() -> None:
    for body in (b'{"owner": "o", "timest', b"\xff", b'{"expiresAt": Infinity}'):
        lock = parse_lock(body)
        assert lock.info is None and not lock.present_but_empty
        assert lock.error is not None and "not valid JSON" in lock.error


def test_it_never_raises_on_arbitrary_bodies() -> None:
    bodies = [b"{" * 100000, b'{"resources": {"' + b"x" * 10 + b'": ' * 3, b"\x00", b'{"a":1,"a":2}']
    for body in bodies:
        rec = parse_state(body, key_region="r")
        assert rec.defects or rec.data == {"a": 2}
        parse_lock(body)


def test_it_accepts_a_state_model_built_in_code() -> None:
    state = StackState(resources={"Q": row()}, outputs={})
    out = dump_state(state, stack_name="S", region="r")
    assert out == js({"resources": {"Q": row()}, "outputs": {}, "version": 11, "stackName": "S", "region": "r"})


def test_it_writes_a_row_model_placed_in_a_container_in_its_read_order() -> None:
    state = StackState(resources={})
    state.resources["A"] = schema.ResourceState.model_validate({"resourceType": "T", "x": 1, "properties": {}})
    out = json.loads(dump_state(state, stack_name="S", region="r"))
    assert list(out["resources"]["A"].items()) == [("resourceType", "T"), ("x", 1), ("properties", {})]
