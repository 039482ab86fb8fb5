"""Planning a deploy against the live state: what `manage.py cdkd diff` and the browser's
"Plan a deploy" both call, so the two print the same plan for the same inputs.

`plan_assembly` reads each selected stack's record (one GET; two for a stack with no
record yet: the region key, then the legacy key) and the exports index only when an
`Fn::ImportValue` needs it, through the engine backend; nothing is written. The browser's
side also keeps uploaded assemblies by content digest in the `assemblies` storage
(`store_assembly` / `load_stored`) and masks a plan document before it is stored or shown
(`mask_plan_document`).
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from engine.backend import StateBucket, StoredObject
from engine.deploy.assembly import Assembly, AssemblyError, StackArtifact, load_zip, read_assembly
from engine.deploy.intrinsics import ParameterError
from engine.deploy.plan import StackPlan, StateLocation, compute_plan, plan_stack_artifact
from engine.deploy.ssm import ssm_reader
from engine.errors import NotFound
from engine.keys import KeyLayout
from engine.masking import MASK, Masker
from engine.schema import ParsedRecord, parse_state
from engine.secrets import secret_name, secret_property
from stacks.models import Account
from stacks.models import Assembly as StoredAssembly
from stacks.records import open_bucket
from stacks.secretmask import mask_document

NESTED_STACK_TYPE = "AWS::CloudFormation::Stack"


@dataclass
class LiveState:
    obj: StoredObject
    parsed: ParsedRecord


def read_state(bucket: StateBucket, layout: KeyLayout, stack: str, region: str) -> LiveState | None:
    """The record as cdkd reads it (the region key, then a legacy key naming no other
    region), with one GET when the region key exists; None for a new stack."""
    for key, legacy in ((layout.state_key(stack, region), False), (layout.legacy_state_key(stack), True)):
        try:
            obj = bucket.get(key)
        except NotFound:
            continue
        parsed = parse_state(obj.body, key_region=None if legacy else region)
        body_region = parsed.data.get("region") if isinstance(parsed.data, dict) else None
        if legacy and isinstance(body_region, str) and body_region != region:
            continue
        return LiveState(obj, parsed)
    return None


def _location(bucket: StateBucket, live: LiveState | None, layout: KeyLayout, stack: str, region: str) -> StateLocation:
    if live is None:
        return StateLocation(bucket=bucket.name, prefix=layout.prefix, key=layout.state_key(stack, region))
    return StateLocation(
        bucket=bucket.name, prefix=layout.prefix, key=live.obj.key, etag=live.obj.etag, version_id=live.obj.version_id
    )


def plan_assembly(
    account: Account,
    assembly: Assembly,
    names: list[str] | None,
    *,
    actor: str,
    stack_region: str | None = None,
    overrides: dict[str, str] | None = None,
    recursive: bool = False,
    bucket: StateBucket | None = None,
) -> list[StackPlan]:
    """cdkd's plan of the named stacks (all when none named) against the account's live
    records. Raises AssemblyError (no such stack, another account), ParameterError (an
    override no stack declares, a region that contradicts the assembly) and EngineError
    (S3 refused or failed)."""
    overrides = overrides or {}
    selected = assembly.select(names or None, account.account_id)
    declared = {p for s in selected for p in (s.template.get("Parameters") or {})}
    unknown = sorted(set(overrides) - declared)
    if unknown:
        raise ParameterError(f"no selected stack declares a parameter named {', '.join(unknown)}")
    for stack in selected:
        pinned = stack.environment.region
        if pinned and stack_region and stack_region != pinned:
            raise ParameterError(f"stack {stack.stack_name} is synthesized for region {pinned}, not {stack_region}")
    layout = KeyLayout(account.prefix)
    bucket = bucket or open_bucket(account, actor)
    return [
        _plan_stack(account, bucket, stack, stack_region, overrides, recursive, assembly.digest, layout, actor)
        for stack in selected
    ]


def _plan_stack(
    account: Account,
    bucket: StateBucket,
    stack: StackArtifact,
    stack_region: str | None,
    overrides: dict[str, str],
    recursive: bool,
    digest: str,
    layout: KeyLayout,
    actor: str,
) -> StackPlan:
    region = stack.environment.region or stack_region or account.cli_region or "us-east-1"

    def exports() -> Any:
        try:
            return json.loads(bucket.get(layout.exports_index_key(region)).body)
        except NotFound:
            return None
        except ValueError:
            return None  # an unreadable index resolves no import

    ssm = _lazy(lambda: ssm_reader(account.access(), actor, region))
    live = read_state(bucket, layout, stack.stack_name, region)
    declared = stack.template.get("Parameters") or {}
    plan = plan_stack_artifact(
        stack,
        live.parsed if live else None,
        region=region,
        account=account.account_id,
        assembly_digest=digest,
        exports=exports,
        ssm=ssm,
        parameters={k: v for k, v in overrides.items() if k in declared},
        location=_location(bucket, live, layout, stack.stack_name, region),
    )
    if recursive:
        plan.children = _children(
            account, bucket, stack.stack_name, stack.nested_templates, plan, live, layout, region, digest, exports, ssm
        )
    return plan


def _lazy(make: Any) -> Any:
    """A callback that builds the real reader (an STS/SSM session) on first use only."""
    made: list[Any] = []

    def call(name: str) -> Any:
        if not made:
            made.append(make())
        return made[0](name)

    return call


def _children(account, bucket, parent_name, nested, parent, live, layout, region, digest, exports, ssm):
    """One node per nested stack, depth first: template-present children against their
    records, then children only the record still holds against an empty template."""
    out: list[StackPlan] = []
    rows = dict(live.parsed.resource_rows()) if live else {}
    names = list(nested) + [
        lid
        for lid, row in rows.items()
        if isinstance(row, dict) and row.get("resourceType") == NESTED_STACK_TYPE and lid not in nested
    ]
    for lid in names:
        child_name = f"{parent_name}~{lid}"
        node = nested.get(lid)
        template = node.template if node else {"Resources": {}}
        params = (parent.desired.get(lid) or {}).get("Parameters")
        supplied = {k: v for k, v in params.items() if isinstance(v, str)} if isinstance(params, dict) else {}
        declared = template.get("Parameters") or {}
        child_live = read_state(bucket, layout, child_name, region)
        child = compute_plan(
            template,
            child_live.parsed if child_live else None,
            stack_name=child_name,
            region=region,
            account=account.account_id,
            exports=exports,
            ssm=ssm,
            parameters={k: v for k, v in supplied.items() if k in declared},
            location=_location(bucket, child_live, layout, child_name, region),
            assembly_digest=digest,
            top_level=False,
        )
        child.children = _children(
            account,
            bucket,
            child_name,
            node.children if node else {},
            child,
            child_live,
            layout,
            region,
            digest,
            exports,
            ssm,
        )
        out.append(child)
    return out


# --- stored assemblies -----------------------------------------------------------------------

_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: the stored bytes depend on the files only


def assembly_storage():
    return storages["assemblies"]


def storage_name(digest: str) -> str:
    return f"{digest[:2]}/{digest}.zip"


def canonical_zip(files: dict[str, bytes]) -> bytes:
    """The assembly's files as a deterministic zip (sorted names, fixed dates): the same
    assembly is stored as the same bytes whichever zip it was uploaded in."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def read_upload(data: bytes, name: str = "assembly.zip") -> Assembly:
    """An uploaded zip, read with every refusal of `engine.deploy.assembly` under the
    site's size limit (the zip and what it expands to)."""
    limit = settings.CDKD_ASSEMBLY_MAX_BYTES
    return read_assembly(load_zip(data, max_bytes=limit, name=name))


def store_assembly(assembly: Assembly, *, user: Any, name: str = "") -> StoredAssembly:
    """The `Assembly` row for this content digest, writing its canonical zip to the
    storage the first time the digest is seen."""
    row = StoredAssembly.objects.filter(digest=assembly.digest).first()
    storage = assembly_storage()
    body = None
    if row is None or not storage.exists(storage_name(assembly.digest)):
        body = canonical_zip(assembly.files)
        if not storage.exists(storage_name(assembly.digest)):
            storage.save(storage_name(assembly.digest), ContentFile(body))
    if row is None:
        row, _created = StoredAssembly.objects.get_or_create(
            digest=assembly.digest,
            defaults={
                "size": len(body or b""),
                "file_count": len(assembly.files),
                "stack_names": [s.stack_name for s in assembly.stacks],
                "original_name": name[:255],
                "uploaded_by": user if getattr(user, "is_authenticated", False) else None,
            },
        )
    return row


def load_stored(row: StoredAssembly) -> Assembly:
    """A stored assembly, read again (and checked against its digest)."""
    try:
        with assembly_storage().open(storage_name(row.digest), "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise AssemblyError(row.digest[:12], f"the stored assembly cannot be read ({exc})") from None
    assembly = read_assembly(load_zip(data, max_bytes=max(settings.CDKD_ASSEMBLY_MAX_BYTES, len(data))))
    if assembly.digest != row.digest:
        raise AssemblyError(row.digest[:12], "the stored assembly's content no longer matches its digest")
    return assembly


# --- masking ---------------------------------------------------------------------------------


def _secret_key(key: Any, rtype: Any) -> bool:
    return isinstance(key, str) and (
        secret_property(key, rtype if isinstance(rtype, str) else None) or secret_name(key)
    )


def _values_at(document: Any, paths: list[list[Any]]) -> list[str]:
    """The strings a secret scan flagged in the record (every string under each path)."""
    found: list[str] = []
    for path in paths:
        node = document
        for step in path:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        todo = [node]
        while todo:
            leaf = todo.pop()
            if isinstance(leaf, str):
                found.append(leaf)
            elif isinstance(leaf, dict | list):
                todo.extend(leaf.values() if isinstance(leaf, dict) else leaf)
    return found


def mask_plan_document(document: Any, *, known: list[str] = ()) -> Any:  # type: ignore[assignment]
    """A plan document (cdkd's node with `plan` and `children`) as every page shows it: a
    property change under a secret-bearing name (`MasterUserPassword`) masked on both
    sides, the detectors run over every old/new value as over a record's properties,
    `known` values (what a scan flagged in the record) masked wherever they appear, and
    credential shapes masked in every other string. Never raises: fails closed."""
    try:
        copy = json.loads(json.dumps(document, default=str))
        nodes = [copy]
        while nodes:
            node = nodes.pop()
            if not isinstance(node, dict):
                continue
            nodes.extend(node.get("children") or [])
            for change in node.get("changes") or []:
                rtype = change.get("resourceType")
                for pc in change.get("propertyChanges") or []:
                    leaf = str(pc.get("path", "")).rsplit(".", 1)[-1]
                    for side in ("oldValue", "newValue"):
                        if side not in pc:
                            continue
                        if _secret_key(leaf, rtype):
                            pc[side] = MASK
                        else:
                            holder = {"resourceType": rtype, leaf: pc[side]}
                            pc[side] = mask_document(holder)[0][leaf]
            for row in node.get("outputChanges") or []:
                if isinstance(row, dict) and _secret_key(row.get("name"), None):
                    row.update({side: MASK for side in ("oldValue", "newValue") if side in row})
        masked, _changed = mask_document(copy, names=False)
        if known:
            masker = Masker(known, shapes=False)
            todo = [masked]
            while todo:
                item = todo.pop()
                pairs = item.items() if isinstance(item, dict) else enumerate(item)
                for key, value in pairs:
                    if isinstance(value, str):
                        item[key] = masker(value)
                    elif isinstance(value, dict | list):
                        todo.append(value)
        return masked
    except Exception:  # noqa: BLE001 - a page shows `***`, never an unmasked plan
        return {"stack": MASK, "region": "", "changes": [], "outputChanges": [], "children": [], "plan": {}}


def flagged_values(record: Any, paths: list[list[Any]]) -> list[str]:
    return _values_at(record, paths)
