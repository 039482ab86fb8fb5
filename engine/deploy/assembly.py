"""Read a synthesized CDK cloud assembly (`cdk.out`): a directory or a zip of one.

An assembly is data: nothing in it is ever executed, and every byte is untrusted. Both
readers first load the files into memory (bounded by `max_bytes` and `max_files`), refusing
symlinks, absolute paths, `..` components and (in a zip) encrypted entries, so no path from
the archive ever touches the filesystem. `read_assembly` then parses the loaded files the
way cdkd's assembly reader does (deploy-engine.md 1.1):

* `manifest.json`: `aws:cloudformation:stack` artifacts become stacks (`templateFile`
  required, `stackName` falling back to the artifact id, `environment` `aws://acct/region`
  with `unknown-account` / `unknown-region` meaning "not pinned", `dependencies`);
  `cdk:cloud-assembly` artifacts (CDK Stages) are read recursively from `directoryName`;
  `cdk:asset-manifest` artifacts are mapped to their file.
* each stack's template (a JSON object with object-shaped sections), the nested templates
  named by `AWS::CloudFormation::Stack` resources' `aws:asset:path`, its asset manifest,
  and its metadata (construct paths, error annotations).

Every defect is an `AssemblyError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import EngineError

DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # total uncompressed size of an assembly
DEFAULT_MAX_FILES = 5000
MAX_NESTING = 8  # cdk:cloud-assembly depth (Stages inside Stages)

UNKNOWN_ACCOUNT = "unknown-account"
UNKNOWN_REGION = "unknown-region"

STACK_TYPE = "aws:cloudformation:stack"
NESTED_ASSEMBLY_TYPE = "cdk:cloud-assembly"
ASSET_MANIFEST_TYPE = "cdk:asset-manifest"

_ENV_RE = re.compile(r"^aws://([^/]+)/([^/]+)$")
_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_TEMPLATE_SECTIONS_OBJECTS = ("Parameters", "Resources", "Outputs", "Conditions", "Mappings", "Rules")


class AssemblyError(EngineError):
    """A cloud assembly that cannot be used; `file` names where, `problem` says what."""

    def __init__(self, file: str, problem: str) -> None:
        self.file = file
        self.problem = problem
        super().__init__(f"{file}: {problem}")


class AccountMismatch(AssemblyError):
    """The stack's environment pins another account than the one chosen."""


@dataclass(frozen=True)
class Environment:
    raw: str | None
    account: str | None  # None = not pinned (absent or unknown-account)
    region: str | None  # None = not pinned


@dataclass
class NestedTemplate:
    path: str  # relative to the assembly root
    template: dict[str, Any]
    children: dict[str, NestedTemplate] = field(default_factory=dict)


@dataclass
class StackArtifact:
    artifact_id: str
    stack_name: str
    display_name: str
    template_file: str  # relative to the assembly root
    template: dict[str, Any]
    environment: Environment
    dependency_ids: list[str] = field(default_factory=list)
    dependency_names: list[str] = field(default_factory=list)
    asset_manifest_file: str | None = None
    asset_manifest: dict[str, Any] | None = None
    termination_protection: bool = False
    construct_paths: dict[str, str] = field(default_factory=dict)  # logical id -> aws:cdk:path
    nested_templates: dict[str, NestedTemplate] = field(default_factory=dict)  # by logical id
    errors: list[str] = field(default_factory=list)  # aws:cdk:error annotations
    warnings: list[str] = field(default_factory=list)  # aws:cdk:warning annotations

    def region(self, default_region: str) -> str:
        """The stack region: the pinned one, else the caller's (cdkd's --region)."""
        return self.environment.region or default_region

    def check_account(self, account: str) -> None:
        pinned = self.environment.account
        if pinned is not None and pinned != account:
            raise AccountMismatch(
                self.template_file,
                f"stack {self.stack_name!r} is synthesized for account {pinned} "
                f"(environment {self.environment.raw}), not for the chosen account {account}; "
                "re-synthesize it for this account or choose account " + pinned,
            )


@dataclass
class Assembly:
    files: dict[str, bytes]
    digest: str
    version: str | None
    stacks: list[StackArtifact]

    def stack(self, name: str) -> StackArtifact:
        for s in self.stacks:
            if name in (s.stack_name, s.artifact_id, s.display_name):
                return s
        known = ", ".join(s.stack_name for s in self.stacks) or "none"
        raise AssemblyError("manifest.json", f"no stack named {name!r} (stacks: {known})")

    def select(self, names: list[str] | None, account: str) -> list[StackArtifact]:
        """The named stacks (all when none named), each checked against the account."""
        chosen = [self.stack(n) for n in names] if names else list(self.stacks)
        for s in chosen:
            s.check_account(account)
        return chosen


# --- loading files ---------------------------------------------------------------------------


def assembly_digest(files: dict[str, bytes]) -> str:
    """sha256 over the sorted relative paths and their bytes (length-prefixed, so two
    different file sets can never feed the hash the same byte stream)."""
    h = hashlib.sha256()
    for path in sorted(files):
        name = path.encode("utf-8")
        h.update(len(name).to_bytes(8, "big") + name)
        body = files[path]
        h.update(len(body).to_bytes(8, "big") + body)
    return h.hexdigest()


def _clean_member(name: str, where: str) -> str:
    """A safe relative POSIX path for an archive member, or an AssemblyError."""
    if "\x00" in name:
        raise AssemblyError(where, f"entry {name!r} has a NUL character in its name")
    if "\\" in name:
        raise AssemblyError(where, f"entry {name!r} uses a backslash; only '/' separated relative paths are accepted")
    if name.startswith("/") or _DRIVE_RE.match(name):
        raise AssemblyError(where, f"entry {name!r} is an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise AssemblyError(where, f"entry {name!r} climbs out of the assembly ('..')")
    return "/".join(parts)


def load_directory(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES, max_files: int = DEFAULT_MAX_FILES
) -> dict[str, bytes]:
    root = Path(path)
    where = str(root)
    if root.is_symlink():
        raise AssemblyError(where, "the assembly directory is a symlink")
    if not root.is_dir():
        raise AssemblyError(where, "not a directory")
    files: dict[str, bytes] = {}
    total = 0
    stack = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = prefix + entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    raise AssemblyError(rel, "is a symlink; assemblies may not contain symlinks")
                if stat.S_ISDIR(st.st_mode):
                    stack.append((Path(entry.path), rel + "/"))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    raise AssemblyError(rel, "is not a regular file")
                total += st.st_size
                if total > max_bytes:
                    raise AssemblyError(where, f"the assembly is larger than the limit of {max_bytes} bytes")
                if len(files) >= max_files:
                    raise AssemblyError(where, f"the assembly has more than {max_files} files")
                with open(entry.path, "rb") as fh:
                    body = fh.read(max_bytes + 1)
                total += len(body) - st.st_size  # a file that grew since stat counts as read
                if total > max_bytes:
                    raise AssemblyError(where, f"the assembly is larger than the limit of {max_bytes} bytes")
                files[rel] = body
    return files


def load_zip(
    source: bytes | str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
    name: str = "assembly.zip",
) -> dict[str, bytes]:
    """The files of a zipped cdk.out. A single top-level folder holding manifest.json (a
    zip of the `cdk.out` folder itself) is stripped."""
    if isinstance(source, bytes | bytearray):
        data = bytes(source)
    else:
        name = str(source)
        if os.path.getsize(source) > max_bytes:
            raise AssemblyError(name, f"the zip is larger than the limit of {max_bytes} bytes")
        data = Path(source).read_bytes()
    if len(data) > max_bytes:
        raise AssemblyError(name, f"the zip is larger than the limit of {max_bytes} bytes")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise AssemblyError(name, f"not a readable zip archive ({exc})") from None
    files: dict[str, bytes] = {}
    total = 0
    with archive:
        infos = archive.infolist()
        if len(infos) > max_files:
            raise AssemblyError(name, f"the zip has more than {max_files} entries")
        declared = sum(i.file_size for i in infos)
        if declared > max_bytes:
            raise AssemblyError(name, f"the zip expands to {declared} bytes, over the limit of {max_bytes}")
        for info in infos:
            mode = (info.external_attr >> 16) & 0xFFFF
            if stat.S_ISLNK(mode):
                raise AssemblyError(name, f"entry {info.filename!r} is a symlink; assemblies may not contain symlinks")
            rel = _clean_member(info.filename, name)
            if info.is_dir() or not rel:
                continue
            if info.flag_bits & 0x1:
                raise AssemblyError(name, f"entry {info.filename!r} is encrypted")
            if rel in files:
                raise AssemblyError(name, f"entry {rel!r} appears twice")
            try:
                with archive.open(info) as fh:
                    body = fh.read(max_bytes - total + 1)
            except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError, ValueError) as exc:
                raise AssemblyError(name, f"entry {info.filename!r} cannot be read ({exc})") from None
            total += len(body)
            if total > max_bytes:  # a member that lied about its size
                raise AssemblyError(name, f"the zip expands past the limit of {max_bytes} bytes")
            files[rel] = body
    if "manifest.json" not in files:
        tops = {p.split("/", 1)[0] for p in files}
        if len(tops) == 1:
            top = tops.pop() + "/"
            if top + "manifest.json" in files:
                files = {p[len(top) :]: b for p, b in files.items()}
    return files


def open_assembly(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES, max_files: int = DEFAULT_MAX_FILES
) -> Assembly:
    """A cdk.out directory or a .zip of one."""
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        return read_assembly(load_directory(p, max_bytes=max_bytes, max_files=max_files))
    if p.is_file():
        return read_assembly(load_zip(p, max_bytes=max_bytes, max_files=max_files))
    raise AssemblyError(str(p), "no such directory or zip file")


# --- parsing ---------------------------------------------------------------------------------


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not JSON")


MAX_JSON_DEPTH = 100  # deeper than any real template; keeps every later walk far from recursion limits


def json_depth(value: Any) -> int:
    """How deeply `value` nests (iteratively, so the check itself cannot overflow)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _json(files: dict[str, bytes], rel: str, named_by: str) -> Any:
    value = _decode_json(files, rel, named_by)
    if json_depth(value) > MAX_JSON_DEPTH:
        raise AssemblyError(rel, f"nests deeper than {MAX_JSON_DEPTH} levels")
    return value


def _decode_json(files: dict[str, bytes], rel: str, named_by: str) -> Any:
    if rel not in files:
        raise AssemblyError(rel, f"missing (named by {named_by})")
    try:
        text = files[rel].decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AssemblyError(rel, f"is not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise AssemblyError(rel, f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        raise AssemblyError(rel, f"is not valid JSON: {exc}") from None
    except RecursionError:
        raise AssemblyError(rel, "is nested too deeply to read") from None


def _join(base: str, rel: Any, where: str, what: str) -> str:
    """`rel` (from a manifest) under the directory `base`, refusing escapes."""
    if not isinstance(rel, str) or not rel:
        raise AssemblyError(where, f"{what} must be a non-empty string, not {kind_phrase(rel)}")
    if rel.startswith("/") or _DRIVE_RE.match(rel) or "\\" in rel:
        raise AssemblyError(where, f"{what} {rel!r} is an absolute path; only relative paths are accepted")
    joined = posixpath.normpath(posixpath.join(base, rel)) if base else posixpath.normpath(rel)
    if joined == ".." or joined.startswith("../") or ".." in rel.split("/"):
        raise AssemblyError(where, f"{what} {rel!r} points outside the assembly")
    return joined


def kind_phrase(value: Any) -> str:
    """How a message names a JSON value's kind ("a string", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def parse_environment(raw: Any, where: str) -> Environment:
    if raw is None:
        return Environment(None, None, None)
    if not isinstance(raw, str):
        raise AssemblyError(where, f"environment must be a string 'aws://account/region', not {kind_phrase(raw)}")
    m = _ENV_RE.match(raw)
    if not m:
        raise AssemblyError(where, f"environment {raw!r} is not of the form aws://account/region")
    account, region = m.group(1), m.group(2)
    return Environment(
        raw, None if account == UNKNOWN_ACCOUNT else account, None if region == UNKNOWN_REGION else region
    )


def check_template(template: Any, rel: str) -> dict[str, Any]:
    if not isinstance(template, dict):
        raise AssemblyError(rel, f"a template must be a JSON object, not {kind_phrase(template)}")
    for section in _TEMPLATE_SECTIONS_OBJECTS:
        if section in template and not isinstance(template[section], dict):
            raise AssemblyError(rel, f"{section} must be an object, not {kind_phrase(template[section])}")
    for lid, res in (template.get("Resources") or {}).items():
        if not isinstance(res, dict):
            raise AssemblyError(rel, f"resource {lid!r} must be an object, not {kind_phrase(res)}")
        if not isinstance(res.get("Type"), str) or not res["Type"]:
            raise AssemblyError(rel, f"resource {lid!r} has no Type")
        if "Properties" in res and not isinstance(res["Properties"], dict):
            raise AssemblyError(
                rel, f"resource {lid!r}: Properties must be an object, not {kind_phrase(res['Properties'])}"
            )
    for name, out in (template.get("Outputs") or {}).items():
        if not isinstance(out, dict) or "Value" not in out:
            raise AssemblyError(rel, f"output {name!r} must be an object with a Value")
    return template


def _check_asset_manifest(doc: Any, rel: str, base: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise AssemblyError(rel, f"an asset manifest must be a JSON object, not {kind_phrase(doc)}")
    for section in ("files", "dockerImages"):
        entries = doc.get(section, {})
        if not isinstance(entries, dict):
            raise AssemblyError(rel, f"{section} must be an object, not {kind_phrase(entries)}")
        for asset_id, asset in entries.items():
            if not isinstance(asset, dict) or not isinstance(asset.get("source"), dict):
                raise AssemblyError(rel, f"{section}[{asset_id!r}] has no source object")
            if not isinstance(asset.get("destinations", {}), dict):
                raise AssemblyError(rel, f"{section}[{asset_id!r}].destinations must be an object")
            src = asset["source"]
            if section == "files":
                _join(base, src.get("path"), rel, f"files[{asset_id!r}].source.path")
                if src.get("packaging", "file") not in ("file", "zip"):
                    raise AssemblyError(rel, f"files[{asset_id!r}].source.packaging must be 'file' or 'zip'")
            elif "directory" in src:
                _join(base, src["directory"], rel, f"dockerImages[{asset_id!r}].source.directory")
    return doc


def _metadata_entries(artifact: dict[str, Any], files: dict[str, bytes], base: str, where: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    inline = artifact.get("metadata", {})
    if not isinstance(inline, dict):
        raise AssemblyError(where, f"metadata must be an object, not {kind_phrase(inline)}")
    meta.update(inline)
    extra = artifact.get("additionalMetadataFile")
    if extra is not None:
        rel = _join(base, extra, where, "additionalMetadataFile")
        doc = _json(files, rel, where)
        if not isinstance(doc, dict):
            raise AssemblyError(rel, f"a metadata file must be a JSON object, not {kind_phrase(doc)}")
        meta.update(doc)
    return meta


def read_assembly(files: dict[str, bytes]) -> Assembly:
    stacks: list[StackArtifact] = []
    version = _read_manifest(files, "", stacks, depth=0, seen=set())
    names: dict[str, str] = {}
    for s in stacks:
        if s.stack_name in names:
            raise AssemblyError(s.template_file, f"stack name {s.stack_name!r} is used by two artifacts")
        names[s.stack_name] = s.artifact_id
    return Assembly(files=files, digest=assembly_digest(files), version=version, stacks=stacks)


def _read_manifest(
    files: dict[str, bytes], base: str, out: list[StackArtifact], *, depth: int, seen: set[str]
) -> str | None:
    rel = posixpath.join(base, "manifest.json") if base else "manifest.json"
    if rel in seen:
        raise AssemblyError(rel, "is read twice (a nested assembly names itself)")
    seen.add(rel)
    manifest = _json(files, rel, "the assembly root" if not base else "a cdk:cloud-assembly artifact")
    if not isinstance(manifest, dict):
        raise AssemblyError(rel, f"a manifest must be a JSON object, not {kind_phrase(manifest)}")
    version = manifest.get("version")
    if version is not None and not isinstance(version, str):
        raise AssemblyError(rel, f"version must be a string, not {kind_phrase(version)}")
    missing = manifest.get("missing")
    if missing:
        keys = [m.get("key") for m in missing if isinstance(m, dict)] if isinstance(missing, list) else []
        raise AssemblyError(
            rel, f"lists missing context ({', '.join(map(str, keys)) or 'unnamed'}); synthesize again with lookups done"
        )
    artifacts = manifest.get("artifacts", {})
    if not isinstance(artifacts, dict):
        raise AssemblyError(rel, f"artifacts must be an object, not {kind_phrase(artifacts)}")
    for aid, art in artifacts.items():
        if not isinstance(art, dict):
            raise AssemblyError(rel, f"artifact {aid!r} must be an object, not {kind_phrase(art)}")
        if not isinstance(art.get("type"), str):
            raise AssemblyError(rel, f"artifact {aid!r} has no type")
        props = art.get("properties", {})
        if not isinstance(props, dict):
            raise AssemblyError(rel, f"artifact {aid!r}: properties must be an object")
        deps = art.get("dependencies", [])
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            raise AssemblyError(rel, f"artifact {aid!r}: dependencies must be a list of artifact ids")
    for aid, art in artifacts.items():
        props = art.get("properties", {})
        if art["type"] == NESTED_ASSEMBLY_TYPE:
            if depth + 1 > MAX_NESTING:
                raise AssemblyError(rel, f"artifact {aid!r}: nested assemblies deeper than {MAX_NESTING} levels")
            sub = _join(base, props.get("directoryName"), rel, f"artifact {aid!r} directoryName")
            _read_manifest(files, sub, out, depth=depth + 1, seen=seen)
        elif art["type"] == STACK_TYPE:
            out.append(_read_stack(files, base, rel, aid, art, artifacts))
    return version


def _nested_templates(
    files: dict[str, bytes], template_rel: str, template: dict[str, Any], chain: tuple[str, ...]
) -> dict[str, NestedTemplate]:
    """The templates `AWS::CloudFormation::Stack` resources name by `aws:asset:path`
    (relative to the naming template), recursively; a template that names one of its
    ancestors is refused."""
    out: dict[str, NestedTemplate] = {}
    for lid, res in (template.get("Resources") or {}).items():
        rmeta = res.get("Metadata")
        if res["Type"] != "AWS::CloudFormation::Stack" or not isinstance(rmeta, dict) or "aws:asset:path" not in rmeta:
            continue
        child_rel = _join(
            posixpath.dirname(template_rel), rmeta["aws:asset:path"], template_rel, f"{lid} aws:asset:path"
        )
        if child_rel in chain:
            raise AssemblyError(template_rel, f"nested stack {lid} names {child_rel}, which contains it")
        if len(chain) > MAX_NESTING:
            raise AssemblyError(template_rel, f"nested stacks deeper than {MAX_NESTING} levels")
        child = check_template(_json(files, child_rel, template_rel), child_rel)
        out[lid] = NestedTemplate(child_rel, child, _nested_templates(files, child_rel, child, (*chain, child_rel)))
    return out


def _read_stack(
    files: dict[str, bytes], base: str, manifest_rel: str, aid: str, art: dict[str, Any], artifacts: dict[str, Any]
) -> StackArtifact:
    where = f"{manifest_rel} (artifact {aid!r})"
    props = art.get("properties", {})
    if "templateFile" not in props:
        raise AssemblyError(where, "has no properties.templateFile")
    template_rel = _join(base, props["templateFile"], where, "templateFile")
    template = check_template(_json(files, template_rel, where), template_rel)
    stack_name = props.get("stackName", aid)
    if not isinstance(stack_name, str) or not stack_name:
        raise AssemblyError(where, "stackName must be a non-empty string")
    display = art.get("displayName", aid)
    env = parse_environment(art.get("environment"), where)
    dep_ids = list(art.get("dependencies", []))
    asset_file = None
    dep_names: list[str] = []
    for dep in dep_ids:
        target = artifacts.get(dep)
        if not isinstance(target, dict):
            continue
        if target.get("type") == ASSET_MANIFEST_TYPE and asset_file is None:
            asset_file = _join(
                base, (target.get("properties") or {}).get("file"), where, f"asset manifest {dep!r} file"
            )
        elif target.get("type") == STACK_TYPE and dep != aid:
            dep_names.append((target.get("properties") or {}).get("stackName", dep))
    asset_manifest = None
    if asset_file is not None:
        asset_manifest = _check_asset_manifest(
            _json(files, asset_file, where), asset_file, posixpath.dirname(asset_file)
        )
    meta = _metadata_entries(art, files, base, where)
    paths: dict[str, str] = {}
    errors: list[str] = []
    warnings: list[str] = []
    for path, entries in meta.items():
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            kind, data = entry.get("type"), entry.get("data")
            if kind == "aws:cdk:logicalId" and isinstance(data, str):
                paths.setdefault(data, str(path).lstrip("/"))
            elif kind == "aws:cdk:error":
                errors.append(f"{path}: {data}")
            elif kind == "aws:cdk:warning":
                warnings.append(f"{path}: {data}")
    for lid, res in (template.get("Resources") or {}).items():
        rmeta = res.get("Metadata")
        if isinstance(rmeta, dict) and isinstance(rmeta.get("aws:cdk:path"), str):
            paths[lid] = rmeta["aws:cdk:path"]
    nested = _nested_templates(files, template_rel, template, (template_rel,))
    return StackArtifact(
        artifact_id=aid,
        stack_name=stack_name,
        display_name=display if isinstance(display, str) else aid,
        template_file=template_rel,
        template=template,
        environment=env,
        dependency_ids=dep_ids,
        dependency_names=dep_names,
        asset_manifest_file=asset_file,
        asset_manifest=asset_manifest,
        termination_protection=props.get("terminationProtection") is True,
        construct_paths=paths,
        nested_templates=nested,
        errors=errors,
        warnings=warnings,
    )
