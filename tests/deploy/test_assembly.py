"""Reading a cloud assembly: the real cdk synth output, zips, and every refusal."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import pytest

from engine.deploy.assembly import (
    AccountMismatch,
    AssemblyError,
    assembly_digest,
    load_directory,
    load_zip,
    open_assembly,
    read_assembly,
)

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "cdkd-0.284.40" / "assembly"


def _zip(entries: dict[str, bytes], *, symlinks: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in entries.items():
            info = zipfile.ZipInfo(name)
            if name in symlinks:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, body)
    return buf.getvalue()


def _files(manifest: dict, **others: object) -> dict[str, bytes]:
    out = {"manifest.json": json.dumps(manifest).encode()}
    for name, body in others.items():
        out[name.replace("__", "/")] = body if isinstance(body, bytes) else json.dumps(body).encode()
    return out


def _stack_manifest(env: str = "aws://111111111111/us-east-1", **props: object) -> dict:
    return {
        "version": "55.0.0",
        "artifacts": {
            "App": {
                "type": "aws:cloudformation:stack",
                "environment": env,
                "properties": {"templateFile": "App.template.json", **props},
            }
        },
    }


TEMPLATE = {"Resources": {"Q": {"Type": "AWS::SQS::Queue", "Metadata": {"aws:cdk:path": "App/Q/Resource"}}}}


def test_it_reads_the_real_cdk_synth_output():
    asm = open_assembly(SAMPLE)
    (stack,) = asm.stacks
    assert stack.stack_name == "GoldenCdkStack"
    assert (stack.environment.account, stack.environment.region) == ("111111111111", "us-east-1")
    assert stack.template_file == "GoldenCdkStack.template.json"
    assert stack.asset_manifest_file == "GoldenCdkStack.assets.json"
    assert stack.construct_paths["Queue4A7E3555"] == "GoldenCdkStack/Queue/Resource"
    assert set(stack.template["Resources"]) >= {"Queue4A7E3555", "TopicBFC7AF6E", "CDKMetadata"}
    assert asm.version == "55.0.0"


def test_it_digests_paths_and_bytes_and_a_zip_digests_like_its_directory():
    files = load_directory(SAMPLE)
    digest = assembly_digest(files)
    assert digest == open_assembly(SAMPLE).digest
    # a zip of the cdk.out folder itself (one top folder) reads as the same assembly
    zipped = _zip({f"cdk.out/{k}": v for k, v in files.items()})
    assert read_assembly(load_zip(zipped)).digest == digest
    changed = dict(files)
    changed["tree.json"] = files["tree.json"] + b" "
    assert assembly_digest(changed) != digest
    renamed = {("x" + k if k == "tree.json" else k): v for k, v in files.items()}
    assert assembly_digest(renamed) != digest


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../evil.json", "climbs out"),
        ("a/../../evil.json", "climbs out"),
        ("/etc/passwd", "absolute path"),
        ("C:/x.json", "absolute path"),
        ("a\\b.json", "backslash"),
    ],
)
def test_it_refuses_zip_slip_and_absolute_paths(name, problem):
    with pytest.raises(AssemblyError, match=problem):
        load_zip(_zip({"manifest.json": b"{}", name: b"x"}))


def test_it_refuses_a_symlink_in_a_zip():
    data = _zip({"manifest.json": b"{}", "link": b"/etc/passwd"}, symlinks=("link",))
    with pytest.raises(AssemblyError, match="symlink"):
        load_zip(data)


def test_it_refuses_a_symlink_in_a_directory(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "cdk.out")
    os.symlink("/etc/passwd", tmp_path / "cdk.out" / "passwd")
    with pytest.raises(AssemblyError, match="passwd: is a symlink"):
        open_assembly(tmp_path / "cdk.out")


def test_it_refuses_an_assembly_over_the_size_limit(tmp_path):
    data = _zip({"manifest.json": b"{}", "big.bin": b"0" * 5000})
    with pytest.raises(AssemblyError, match="limit of 4000 bytes"):
        load_zip(data, max_bytes=4000)
    with pytest.raises(AssemblyError, match="larger than the limit of 1000 bytes"):
        open_assembly(SAMPLE, max_bytes=1000)


def test_it_refuses_what_is_not_a_zip():
    with pytest.raises(AssemblyError, match="assembly.zip: not a readable zip archive"):
        load_zip(b"PK-but-not-really")


def test_it_refuses_a_stack_for_another_account():
    asm = read_assembly(_files(_stack_manifest(), **{"App.template.json": TEMPLATE}))
    with pytest.raises(AccountMismatch) as exc:
        asm.select(None, "222222222222")
    assert "synthesized for account 111111111111" in str(exc.value)
    assert "not for the chosen account 222222222222" in str(exc.value)
    assert asm.select(["App"], "111111111111")[0].stack_name == "App"


def test_it_accepts_an_environment_agnostic_stack_for_any_account():
    asm = read_assembly(
        _files(_stack_manifest("aws://unknown-account/unknown-region"), **{"App.template.json": TEMPLATE})
    )
    (stack,) = asm.select(None, "222222222222")
    assert stack.environment.account is None
    assert stack.region("eu-west-1") == "eu-west-1"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"manifest.json": b"{not json"}, "manifest.json: is not valid JSON: Expecting property name"),
        ({"manifest.json": b"[]"}, "manifest.json: a manifest must be a JSON object, not a list"),
        ({"manifest.json": b'{"artifacts": {"A": {"type": 1}}}'}, "manifest.json: artifact 'A' has no type"),
        (_files({"artifacts": {"A": {"type": "aws:cloudformation:stack"}}}), "has no properties.templateFile"),
        (_files(_stack_manifest()), "App.template.json: missing (named by manifest.json (artifact 'App'))"),
        (_files(_stack_manifest(), **{"App.template.json": []}), "App.template.json: a template must be a JSON object"),
        (
            _files(_stack_manifest(), **{"App.template.json": {"Resources": {"Q": {"Properties": {}}}}}),
            "App.template.json: resource 'Q' has no Type",
        ),
        (
            _files(_stack_manifest(), **{"App.template.json": {"Resources": []}}),
            "App.template.json: Resources must be an object, not a list",
        ),
        (
            _files(_stack_manifest(templateFile="/abs/App.template.json")),
            "templateFile '/abs/App.template.json' is an absolute path",
        ),
        (_files(_stack_manifest(templateFile="../App.template.json")), "points outside the assembly"),
        (
            _files(_stack_manifest("aws://1234"), **{"App.template.json": TEMPLATE}),
            "environment 'aws://1234' is not of the form aws://account/region",
        ),
        (_files({"missing": [{"key": "vpc-provider:x"}], "artifacts": {}}), "lists missing context (vpc-provider:x)"),
        ({"manifest.json": b'{"a": NaN}'}, "manifest.json: is not valid JSON: NaN is not JSON"),
        ({"manifest.json": b"\xff\xfe"}, "manifest.json: is not UTF-8 text"),
    ],
)
def test_it_names_the_file_and_the_defect(files, message):
    with pytest.raises(AssemblyError) as exc:
        read_assembly(files)
    assert message in str(exc.value)


def test_it_reads_nested_assemblies_and_nested_templates():
    inner = {
        "artifacts": {
            "Prod-App": {
                "type": "aws:cloudformation:stack",
                "environment": "aws://111111111111/eu-west-1",
                "properties": {"templateFile": "Prod-App.template.json", "stackName": "Prod-App"},
                "dependencies": ["Prod-App.assets"],
            },
            "Prod-App.assets": {"type": "cdk:asset-manifest", "properties": {"file": "Prod-App.assets.json"}},
        }
    }
    outer = {
        "artifacts": {"assembly-Prod": {"type": "cdk:cloud-assembly", "properties": {"directoryName": "assembly-Prod"}}}
    }
    parent = {
        "Resources": {
            "Child": {
                "Type": "AWS::CloudFormation::Stack",
                "Metadata": {"aws:asset:path": "ProdAppChild.nested.template.json"},
            }
        }
    }
    assets = {"version": "55.0.0", "files": {"h": {"source": {"path": "asset.h", "packaging": "zip"}}}}
    files = {
        "manifest.json": json.dumps(outer).encode(),
        "assembly-Prod/manifest.json": json.dumps(inner).encode(),
        "assembly-Prod/Prod-App.template.json": json.dumps(parent).encode(),
        "assembly-Prod/Prod-App.assets.json": json.dumps(assets).encode(),
        "assembly-Prod/ProdAppChild.nested.template.json": json.dumps(TEMPLATE).encode(),
    }
    (stack,) = read_assembly(files).stacks
    assert stack.template_file == "assembly-Prod/Prod-App.template.json"
    assert stack.asset_manifest_file == "assembly-Prod/Prod-App.assets.json"
    assert stack.nested_templates["Child"].path == "assembly-Prod/ProdAppChild.nested.template.json"
    assert stack.nested_templates["Child"].template == TEMPLATE
    assert stack.region("us-east-1") == "eu-west-1"


def test_it_refuses_an_asset_path_outside_the_assembly():
    assets = {"files": {"h": {"source": {"path": "/etc/passwd"}, "destinations": {}}}}
    manifest = _stack_manifest()
    manifest["artifacts"]["App"]["dependencies"] = ["App.assets"]
    manifest["artifacts"]["App.assets"] = {"type": "cdk:asset-manifest", "properties": {"file": "App.assets.json"}}
    files = _files(manifest, **{"App.template.json": TEMPLATE, "App.assets.json": assets})
    with pytest.raises(AssemblyError, match=r"App.assets.json: files\['h'\].source.path '/etc/passwd' is an absolute"):
        read_assembly(files)


def test_it_collects_error_annotations():
    manifest = _stack_manifest()
    manifest["artifacts"]["App"]["metadata"] = {"/App/Q": [{"type": "aws:cdk:error", "data": "bad queue"}]}
    (stack,) = read_assembly(_files(manifest, **{"App.template.json": TEMPLATE})).stacks
    assert stack.errors == ["/App/Q: bad queue"]


def test_it_refuses_a_template_nested_past_the_limit():
    deep: object = 1
    for _ in range(150):
        deep = [deep]
    files = _files(_stack_manifest(), **{"App.template.json": {"Resources": {}, "Metadata": deep}})
    with pytest.raises(AssemblyError, match="App.template.json: nests deeper than 100 levels"):
        read_assembly(files)


def test_it_refuses_a_nested_template_that_names_its_parent():
    loop = {
        "Resources": {"Me": {"Type": "AWS::CloudFormation::Stack", "Metadata": {"aws:asset:path": "App.template.json"}}}
    }
    with pytest.raises(AssemblyError, match="nested stack Me names App.template.json, which contains it"):
        read_assembly(_files(_stack_manifest(), **{"App.template.json": loop}))
