"""The real thing: the assembly aws-cdk-lib 2.275 synthesized, the record cdkd 0.284.40
wrote after deploying it, and the `cdkd diff --json` it printed right after."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from pathlib import Path

from engine.deploy.assembly import load_directory, load_zip, open_assembly, read_assembly
from engine.deploy.plan import compute_plan
from engine.deploy.render import exit_code, render_json, render_text
from engine.schema import parse_state

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "cdkd-0.284.40"
ACCOUNT = "111111111111"


def _plan(assembly, record, **kw):
    stack = assembly.stack("GoldenCdkStack")
    stack.check_account(ACCOUNT)
    return compute_plan(
        stack.template,
        record,
        stack_name=stack.stack_name,
        region=stack.region("eu-west-1"),
        account=ACCOUNT,
        assembly_digest=assembly.digest,
        construct_paths=stack.construct_paths,
        **kw,
    )


def _record():
    return json.loads((SAMPLE / "state.json").read_bytes())


def test_it_prints_cdkds_no_change_diff_byte_for_byte():
    p = _plan(open_assembly(SAMPLE / "assembly"), _record())
    assert render_json([p], with_plan=False) == (SAMPLE / "diff-nochange.json").read_text()
    assert exit_code([p], fail=True) == 0
    assert p.plan["blocking"] == [] and p.plan["warnings"] == []
    assert render_text([p]).splitlines()[0] == "Stack GoldenCdkStack (us-east-1): no changes"


def test_it_gives_the_same_diff_from_a_zip_and_from_a_parsed_record():
    files = load_directory(SAMPLE / "assembly")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in files.items():
            zf.writestr(name, body)
    zipped = read_assembly(load_zip(buf.getvalue()))
    parsed = parse_state((SAMPLE / "state.json").read_bytes(), key_region="us-east-1")
    p = _plan(zipped, parsed)
    assert render_json([p], with_plan=False) == (SAMPLE / "diff-nochange.json").read_text()
    assert p.plan["assemblyDigest"] == open_assembly(SAMPLE / "assembly").digest


def test_it_reports_an_edit_to_the_real_template_as_cdkd_would():
    assembly = open_assembly(SAMPLE / "assembly")
    stack = assembly.stack("GoldenCdkStack")
    template = copy.deepcopy(stack.template)
    template["Resources"]["Queue4A7E3555"]["Properties"]["VisibilityTimeout"] = 60
    template["Resources"]["TopicBFC7AF6E"]["Properties"]["TopicName"] = "golden-renamed"
    p = compute_plan(
        template,
        _record(),
        stack_name=stack.stack_name,
        region="us-east-1",
        account=ACCOUNT,
        construct_paths=stack.construct_paths,
    )
    by_id = {c["logicalId"]: c for c in p.node["changes"]}
    assert by_id["Queue4A7E3555"]["propertyChanges"] == [
        {"path": "VisibilityTimeout", "oldValue": 45, "newValue": 60, "requiresReplacement": False}
    ]
    assert by_id["TopicBFC7AF6E"]["propertyChanges"] == [
        {"path": "TopicName", "newValue": "golden-renamed", "requiresReplacement": True}
    ]
    # the topic's replacement reaches its three readers through Ref
    for reader, key in (
        ("QueuePolicy25439813", "PolicyDocument"),
        ("QueueGoldenCdkStackTopic1060F492172D006E", "TopicArn"),
        ("Param165332EC", "Value"),
    ):
        (pc,) = [pc for pc in by_id[reader]["propertyChanges"] if pc["path"] == key]
        assert pc["replacementPropagated"] is True and pc["requiresReplacement"] is False
    actions = {a["logicalId"]: a for a in p.plan["actions"]}
    assert actions["QueueGoldenCdkStackTopic1060F492172D006E"]["action"] == "replace"  # TopicArn is create-only
    assert actions["TopicBFC7AF6E"]["constructPath"] == "GoldenCdkStack/Topic/Resource"
    # outputs read a resource being replaced: the Ref still resolves to the recorded id
    assert p.node["outputChanges"] == []
    assert exit_code([p], fail=True) == 1
