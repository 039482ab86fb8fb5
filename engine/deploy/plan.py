"""cdkd's diff of a template against a state record, and the admin's plan document.

`compute_plan` classifies like cdkd's DiffCalculator (deploy-engine.md 1.6): CREATE / UPDATE
/ DELETE / NO_CHANGE over top-level properties, each differing key a `propertyChanges`
entry whose `requiresReplacement` comes from `engine.deploy.replacement`; a type change is a
replacement; DeletionPolicy / UpdateReplacePolicy differences are `attributeChanges`
(metadata only); replacement propagation and in-place attribute propagation add synthetic
changes to the readers. Then the Outputs preview (engine.deploy.outputs), seed 002's five
"Blocking (cdkd deploy will refuse)" conditions, and the plan document of reference 6.3
with its digest (rendering lives in engine.deploy.render).

Pure: the caller passes the decoded record, the exports index (or a loader) and an SSM
reader; nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.deploy import replacement
from engine.deploy.assembly import StackArtifact, check_template
from engine.deploy.intrinsics import (
    NO_VALUE,
    Context,
    ResolveError,
    Resolver,
    SSMCallback,
    bind_parameters,
    evaluate_conditions,
    has_secret_reference,
    json_equal,
    prune_resources,
)
from engine.deploy.outputs import MASK, mask_no_echo, preview_outputs
from engine.deploy.record import RepairedRecord, repair_record

METADATA_TYPE = "AWS::CDK::Metadata"
NESTED_STACK_TYPE = "AWS::CloudFormation::Stack"

# the first deploy engine's resource set (deploy-engine.md 7.2)
SUPPORTED_TYPES = frozenset(
    [
        "AWS::SQS::Queue",
        "AWS::SNS::Topic",
        "AWS::SSM::Parameter",
        "AWS::Logs::LogGroup",
        "AWS::S3::Bucket",
        "AWS::S3::BucketPolicy",
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
        "AWS::IAM::ManagedPolicy",
        "AWS::Lambda::Function",
        "AWS::Lambda::Permission",
        "AWS::DynamoDB::Table",
        "AWS::SNS::Subscription",
        "AWS::SQS::QueuePolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::SecretsManager::Secret",
        "AWS::KMS::Key",
        "AWS::KMS::Alias",
    ]
)
# bucket properties the first engine writes; others would route to Cloud Control in cdkd
S3_BUCKET_HANDLED = frozenset(
    [
        "BucketName",
        "VersioningConfiguration",
        "BucketEncryption",
        "PublicAccessBlockConfiguration",
        "OwnershipControls",
        "LifecycleConfiguration",
        "CorsConfiguration",
        "Tags",
    ]
)
# cdkd's stateful guard (deploy-engine.md 4.5): a property-driven replacement destroys data
STATEFUL_TYPES = frozenset(
    [
        "AWS::DynamoDB::Table",
        "AWS::DynamoDB::GlobalTable",
        "AWS::SecretsManager::Secret",
        "AWS::SSM::Parameter",
        "AWS::Kinesis::Stream",
        "AWS::RDS::DBInstance",
        "AWS::RDS::DBCluster",
        "AWS::DocDB::DBCluster",
        "AWS::DocDB::DBInstance",
        "AWS::Neptune::DBCluster",
        "AWS::Neptune::DBInstance",
        "AWS::EFS::FileSystem",
        "AWS::FSx::FileSystem",
        "AWS::ECR::Repository",
        "AWS::Cognito::UserPool",
        "AWS::EC2::Volume",
        "AWS::S3::Bucket",
    ]
)
# in-place updates of these types move derived attributes (cdkd's in-place propagation)
DERIVED_ATTRIBUTES = {"AWS::EC2::LaunchTemplate": frozenset({"LatestVersionNumber", "DefaultVersionNumber"})}
DERIVED_PREFIXES = {NESTED_STACK_TYPE: ("Outputs.",)}

_SUB_RE = re.compile(r"\$\{([^}]*)\}")
PREVIOUS_NO_ECHO = "(previous NoEcho value)"


def is_custom_resource(resource_type: str) -> bool:
    return resource_type.startswith("Custom::") or resource_type == "AWS::CloudFormation::CustomResource"


@dataclass
class StateLocation:
    """Where the record came from; binds the plan to the exact bytes it was computed from."""

    bucket: str | None = None
    prefix: str | None = None
    key: str | None = None
    etag: str | None = None
    version_id: str | None = None


@dataclass
class _Change:
    logical_id: str
    change_type: str  # CREATE / UPDATE / DELETE / NO_CHANGE
    resource_type: str
    property_changes: list[dict[str, Any]] = field(default_factory=list)
    attribute_changes: list[dict[str, Any]] = field(default_factory=list)
    known_after_apply: list[str] = field(default_factory=list)
    desired: dict[str, Any] = field(default_factory=dict)  # resolved (or raw) per top-level key
    raw: dict[str, Any] = field(default_factory=dict)  # template properties
    current: dict[str, Any] = field(default_factory=dict)
    old_type: str | None = None

    @property
    def replaces(self) -> bool:
        return any(pc.get("requiresReplacement") for pc in self.property_changes)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "logicalId": self.logical_id,
            "changeType": self.change_type,
            "resourceType": self.resource_type,
        }
        if self.property_changes:
            out["propertyChanges"] = self.property_changes
        if self.attribute_changes:
            out["attributeChanges"] = self.attribute_changes
        return out


@dataclass
class StackPlan:
    stack: str
    region: str
    node: dict[str, Any]  # cdkd's --json node
    plan: dict[str, Any]  # the admin's plan document (with digest)
    warnings: list[str]
    cdkd_blocking: list[str]  # seed 002's five conditions
    dropped: list[str]
    no_echo_unchanged: int = 0
    replacements: set[str] = field(default_factory=set)
    construct_paths: dict[str, str] = field(default_factory=dict)
    desired: dict[str, dict[str, Any]] = field(default_factory=dict)  # resolved properties, by logical id

    @property
    def blocking(self) -> list[str]:
        return self.plan["blocking"]

    @property
    def has_changes(self) -> bool:
        return bool(self.node["changes"] or self.node["outputChanges"] or self.dropped) or any(
            c.has_changes for c in self.children
        )

    children: list[StackPlan] = field(default_factory=list)

    def json_node(self, *, with_plan: bool = True) -> dict[str, Any]:
        node = dict(self.node)
        node["children"] = [c.json_node(with_plan=with_plan) for c in self.children]
        if with_plan:
            node["plan"] = self.plan
        return node


# --- references (TemplateParser.extractDependencies, per top-level key) ----------------------


def references(value: Any, sub_vars: frozenset[str] = frozenset()) -> set[tuple[str, str | None]]:
    """(logicalId, attribute or None for a Ref) read by `value`: Ref, the array form of
    Fn::GetAtt, and Fn::Sub placeholders (both branches of an Fn::If count)."""
    out: set[tuple[str, str | None]] = set()
    if isinstance(value, dict):
        if len(value) == 1:
            key, arg = next(iter(value.items()))
            if key == "Ref" and isinstance(arg, str) and not arg.startswith("AWS::"):
                out.add((arg, None))
                return out
            if key == "Fn::GetAtt" and isinstance(arg, list) and arg and isinstance(arg[0], str):
                out.add((arg[0], arg[1] if len(arg) > 1 and isinstance(arg[1], str) else None))
                return out
            if key == "Fn::Sub":
                body, variables = (
                    (arg, {})
                    if isinstance(arg, str)
                    else (arg[0], arg[1])
                    if (isinstance(arg, list) and len(arg) == 2 and isinstance(arg[1], dict))
                    else (None, {})
                )
                if isinstance(body, str):
                    for m in _SUB_RE.finditer(body):
                        name = m.group(1)
                        if name.startswith("!") or name.startswith("AWS::") or name in variables:
                            continue
                        head, _, tail = name.partition(".")
                        out.add((head, tail or None))
                for v in variables.values():
                    out |= references(v)
                return out
        for v in value.values():
            out |= references(v)
    elif isinstance(value, list):
        for v in value:
            out |= references(v)
    return out


# --- the diff --------------------------------------------------------------------------------


def _resolve_properties(resolver: Resolver, ctx: Context, raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Each top-level property resolved on its own; one that fails keeps its raw value."""
    desired: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in raw.items():
        before = ctx.kept_placeholders
        try:
            resolved = resolver.resolve(value)
        except ResolveError:
            desired[key] = value
            unknown.append(key)
            continue
        except RecursionError:
            desired[key] = value
            unknown.append(key)
            continue
        if ctx.kept_placeholders != before:
            unknown.append(key)
        if resolved is NO_VALUE:
            continue
        desired[key] = resolved
    return desired, unknown


def _attribute_changes(template_res: dict[str, Any], row: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for attribute, stored_key in (("DeletionPolicy", "deletionPolicy"), ("UpdateReplacePolicy", "updateReplacePolicy")):
        new, old = template_res.get(attribute), row.get(stored_key)
        if not json_equal(new, old):
            change: dict[str, Any] = {"attribute": attribute}
            if old is not None:
                change["oldValue"] = old
            if new is not None:
                change["newValue"] = new
            out.append(change)
    return out


def _property_change(path: str, present_old: bool, old: Any, present_new: bool, new: Any, rr: bool) -> dict[str, Any]:
    pc: dict[str, Any] = {"path": path}
    if present_old:
        pc["oldValue"] = old
    if present_new:
        pc["newValue"] = new
    pc["requiresReplacement"] = rr
    return pc


def compute_plan(
    template: dict[str, Any],
    record: Any,
    *,
    stack_name: str,
    region: str,
    account: str,
    exports: dict[str, Any] | Callable[[], dict[str, Any] | None] | None = None,
    ssm: SSMCallback | None = None,
    parameters: dict[str, str] | None = None,
    location: StateLocation | None = None,
    assembly_digest: str | None = None,
    construct_paths: dict[str, str] | None = None,
    annotations: list[str] | None = None,
    asset_manifest: dict[str, Any] | None = None,
    orphan_claimed_by: Callable[[str], str | None] | None = None,
    top_level: bool = True,
    azs: Callable[[str], list[str]] | None = None,
) -> StackPlan:
    """`record` is the decoded state record (a dict as stored, a ParsedRecord, or None for a
    stack with no record). Raises intrinsics.ParameterError for unusable overrides."""
    check_template(template, f"template of {stack_name}")  # the shape every step below relies on
    data = getattr(record, "data", record)
    location = location or StateLocation()
    rec = repair_record(data, stack=stack_name, region=region)
    warnings: list[str] = [r.message for r in rec.repairs]
    cdkd_blocking: list[str] = list(rec.blocking) if top_level else []
    admin_blocking: list[str] = []

    bound = bind_parameters(template, parameters, ssm)
    warnings.extend(bound.warnings)
    ctx = Context(
        template=template,
        stack_name=stack_name,
        region=region,
        account=account,
        resources=rec.resources,
        parameters=bound,
        exports=exports,
        ssm=ssm,
        azs=azs,
    )
    evaluate_conditions(ctx)
    # resources and outputs compare a NoEcho value masked, as a v11 record stores it
    # (a NoEcho parameter fed a secret reference stays that expression, like every secret)
    no_echo_values = [
        str(bound.values[n]) for n in bound.no_echo if n in bound.values and not has_secret_reference(bound.values[n])
    ]
    real_values = dict(bound.values)
    for name in bound.no_echo:
        if name in bound.values and not has_secret_reference(bound.values[name]):
            bound.values[name] = MASK
    resources = prune_resources(template, ctx)
    resolver = Resolver(ctx)
    # a record older than v11 holds the NoEcho value it last sent in the clear
    pre_v11 = isinstance(rec.version, int) and not isinstance(rec.version, bool) and rec.version < 11
    real_resolver = None
    if no_echo_values and pre_v11:
        real_params = dataclasses.replace(bound, values=real_values)
        real_resolver = Resolver(dataclasses.replace(ctx, parameters=real_params))
    no_echo_unchanged = 0

    changes: dict[str, _Change] = {}
    for lid, res in resources.items():
        rtype = res["Type"]
        if rtype == METADATA_TYPE:
            continue
        raw = res.get("Properties") or {}
        row = rec.resources.get(lid)
        desired, unknown = _resolve_properties(resolver, ctx, raw)
        if row is None:
            changes[lid] = _Change(lid, "CREATE", rtype, desired=desired, raw=raw, known_after_apply=unknown)
            continue
        current = row.get("properties") or {}
        change = _Change(lid, "NO_CHANGE", rtype, desired=desired, raw=raw, current=current, known_after_apply=[])
        changes[lid] = change
        if row["resourceType"] != rtype:
            change.old_type = row["resourceType"]
            change.property_changes.append(_property_change("Type", True, row["resourceType"], True, rtype, True))
            change.change_type = "UPDATE"
            if NESTED_STACK_TYPE in (rtype, row["resourceType"]):
                cdkd_blocking.append(
                    f"{stack_name}: {lid} changes type from {row['resourceType']} to {rtype}; cdkd does not replace "
                    "a resource by a nested stack or a nested stack by a resource. Give the new resource a different "
                    "logical id, or remove it in one deploy and add its replacement in the next"
                )
            continue
        ignore = {"Timestamp"} if is_custom_resource(rtype) else set()
        no_echo_keys = {k for k, v in raw.items() if any(t in bound.no_echo for t, _ in references(v))}
        if real_resolver is not None and no_echo_keys:
            real_desired, _ = _resolve_properties(real_resolver, real_resolver.ctx, raw)
        else:
            real_desired = None
        for key in list(desired) + [k for k in current if k not in desired]:
            if key in ignore:
                continue
            has_new, has_old = key in desired, key in current
            new, old = desired.get(key), current.get(key)
            if real_desired is not None and key in no_echo_keys:
                if has_old and json_equal(real_desired.get(key), old):
                    continue  # the previous NoEcho value, unchanged
                if has_old:
                    old = PREVIOUS_NO_ECHO
            elif has_new and has_old and json_equal(new, old):
                continue
            rr = replacement.requires_replacement(
                rtype, key, old if has_old else None, new if has_new else None, region
            )
            change.property_changes.append(_property_change(key, has_old, old, has_new, new, rr))
            if key in unknown:
                change.known_after_apply.append(key)
        change.attribute_changes = _attribute_changes(res, row)
        if change.property_changes or change.attribute_changes:
            change.change_type = "UPDATE"
        elif no_echo_keys:
            no_echo_unchanged += 1
        if is_custom_resource(rtype):
            _check_service_token(stack_name, lid, current, desired, unknown, cdkd_blocking, warnings)

    for lid, row in rec.resources.items():
        if (lid not in resources or resources[lid]["Type"] == METADATA_TYPE) and lid not in changes:
            changes[lid] = _Change(lid, "DELETE", row["resourceType"], current=row.get("properties") or {})

    replaced = _propagate(changes, resources)
    admin_replaced = _admin_replacements(changes, resources, replaced, region, warnings)

    # rollback orphans: the deploy verifies and adopts them; the preview needs AWS for that
    for orphan in rec.orphans:
        lid = orphan.get("logicalId")
        pid = orphan.get("physicalId")
        if orphan_claimed_by is not None and isinstance(pid, str) and isinstance(lid, str) and lid in changes:
            owner = orphan_claimed_by(pid)
            if owner and owner != stack_name:
                cdkd_blocking.append(
                    f"{stack_name}: adopting rollback orphan {lid} ({pid}) is refused: stack {owner} already claims "
                    "that physical id. Remove the resource from whichever stack should not own it"
                )

    ordered = [c for c in changes.values() if c.change_type != "NO_CHANGE"]
    changing_ids = {c.logical_id for c in ordered}
    preview = preview_outputs(
        template,
        ctx,
        stored=rec.outputs,
        stored_readable=rec.outputs_readable,
        export_names=rec.export_names,
        skipped=rec.skipped_outputs,
        changing_ids=changing_ids,
        resource_changes_pending=bool(ordered),
        no_echo_values=no_echo_values,
    )
    warnings.extend(preview.warnings)
    for c in ordered:
        for pc in c.property_changes:
            for side in ("oldValue", "newValue"):
                if side in pc:
                    pc[side] = mask_no_echo(pc[side], no_echo_values)

    node = {
        "stack": stack_name,
        "region": region,
        "changes": [c.as_json() for c in ordered],
        "outputChanges": preview.rows,
        "children": [],
    }
    admin_blocking = _admin_blocking(
        template, rec, ordered, changes, admin_replaced, bound, stack_name, annotations, asset_manifest, ctx
    )
    warnings.extend(w for w in ctx.warnings if w not in warnings)
    paths = dict(construct_paths or {})
    actions = [_action(c, admin_replaced, rec, paths) for c in ordered]
    blocking = list(dict.fromkeys(cdkd_blocking + admin_blocking))
    plan: dict[str, Any] = {
        "account": account,
        "stateBucket": location.bucket,
        "statePrefix": location.prefix,
        "stateKey": location.key,
        "stateEtag": location.etag if rec.present else None,
        "stateVersionId": location.version_id if rec.present else None,
        "assemblyDigest": assembly_digest,
        "actions": actions,
        "imports": list(ctx.imports),
        "repairs": [r.as_dict() for r in rec.repairs],
        "dropped": list(rec.dropped),
        "blocking": blocking,
        "warnings": list(dict.fromkeys(warnings)),
    }
    plan["digest"] = plan_digest(node, plan)
    return StackPlan(
        stack=stack_name,
        region=region,
        node=node,
        plan=plan,
        warnings=plan["warnings"],
        cdkd_blocking=list(dict.fromkeys(cdkd_blocking)),
        dropped=list(rec.dropped),
        replacements=admin_replaced,
        construct_paths=paths,
        desired={lid: c.desired for lid, c in changes.items()},
        no_echo_unchanged=0 if pre_v11 else no_echo_unchanged,
    )


def plan_stack_artifact(
    stack: StackArtifact,
    record: Any,
    *,
    region: str,
    account: str,
    assembly_digest: str,
    **kw: Any,
) -> StackPlan:
    """`compute_plan` for a stack of a read assembly: its template, construct paths, error
    annotations and asset manifest, bound to the assembly digest (what the CLI and the
    browser both call, so their plans are the same document)."""
    return compute_plan(
        stack.template,
        record,
        stack_name=stack.stack_name,
        region=region,
        account=account,
        assembly_digest=assembly_digest,
        construct_paths=stack.construct_paths,
        annotations=stack.errors,
        asset_manifest=stack.asset_manifest,
        **kw,
    )


def _check_service_token(
    stack: str,
    lid: str,
    current: dict[str, Any],
    desired: dict[str, Any],
    unknown: list[str],
    blocking: list[str],
    warnings: list[str],
) -> None:
    old, new = current.get("ServiceToken"), desired.get("ServiceToken")
    if json_equal(old, new):
        return
    if "ServiceToken" in unknown:
        warnings.append(
            f"{stack}: the ServiceToken of custom resource {lid} is known only once the resource it reads exists; "
            "the deploy refuses a changed token before invoking any handler"
        )
        return
    if old is None or old == MASK or (isinstance(old, str) and "{{resolve:" in old):
        blocking.append(
            f"{stack}: cdkd cannot compare the ServiceToken of custom resource {lid} (the recorded token is missing, "
            "masked or a reference) and the template moves it; give the custom resource a new logical id"
        )
        return
    blocking.append(
        f"{stack}: the ServiceToken of custom resource {lid} changes to {json.dumps(new)}; CloudFormation and cdkd "
        "refuse it (Modifying service token is not allowed). Give the custom resource a new logical id"
    )


def _propagate(changes: dict[str, _Change], resources: dict[str, Any]) -> set[str]:
    """cdkd's replacement propagation (hand rules only) and in-place attribute propagation."""
    refs = {
        lid: {k: references(v) for k, v in (resources[lid].get("Properties") or {}).items()}
        for lid, c in changes.items()
        if c.change_type in ("UPDATE", "NO_CHANGE") and lid in resources
    }
    replaced = {lid for lid, c in changes.items() if c.change_type == "UPDATE" and c.replaces}
    queue = sorted(replaced)
    while queue:
        upstream = queue.pop(0)
        for lid, by_key in refs.items():
            if lid == upstream:
                continue
            change = changes[lid]
            for key, read in by_key.items():
                if not any(target == upstream for target, _ in read):
                    continue
                if any(pc["path"] == key for pc in change.property_changes):
                    continue
                rr = replacement.hand_rule_verdict(change.resource_type, key, None, None) is True
                pc = _property_change(key, key in change.current, change.current.get(key), True, change.raw[key], rr)
                # cdkd's synthetic change carries replacementPropagated before requiresReplacement
                pc["replacementPropagated"] = True
                pc["requiresReplacement"] = pc.pop("requiresReplacement")
                change.property_changes.append(pc)
                change.known_after_apply.append(key)
                change.change_type = "UPDATE"
                if rr and lid not in replaced:
                    replaced.add(lid)
                    queue.append(lid)
    # in-place: a reader of Fn::GetAtt [U, A] where A is a property U changes (or derived)
    for _ in range(len(changes) + 1):
        moved = False
        updated = {
            lid: {pc["path"] for pc in c.property_changes}
            for lid, c in changes.items()
            if c.change_type == "UPDATE" and lid not in replaced
        }
        for lid, by_key in refs.items():
            change = changes[lid]
            for key, read in by_key.items():
                if any(pc["path"] == key for pc in change.property_changes):
                    continue
                for target, attr in read:
                    if target == lid or target not in updated or attr is None:
                        continue
                    ttype = changes[target].resource_type
                    if not (
                        attr in updated[target]
                        or attr in DERIVED_ATTRIBUTES.get(ttype, ())
                        or any(attr.startswith(p) for p in DERIVED_PREFIXES.get(ttype, ()))
                    ):
                        continue
                    rr = replacement.hand_rule_verdict(change.resource_type, key, None, None) is True
                    pc = _property_change(
                        key, key in change.current, change.current.get(key), True, change.raw[key], rr
                    )
                    change.property_changes.append(pc)
                    change.known_after_apply.append(key)
                    change.change_type = "UPDATE"
                    moved = True
                    break
        if not moved:
            break
    return replaced


def _admin_replacements(
    changes: dict[str, _Change], resources: dict[str, Any], replaced: set[str], region: str, warnings: list[str]
) -> set[str]:
    """The admin's engine also replaces a reader whose create-only property reads a
    replaced resource (cdkd uses its hand rules only there and would try an update)."""
    out = set(replaced)
    queue = sorted(out)
    while queue:
        upstream = queue.pop(0)
        for lid, change in changes.items():
            if lid in out or change.change_type != "UPDATE" or lid not in resources:
                continue
            for key, value in (resources[lid].get("Properties") or {}).items():
                if any(t == upstream for t, _ in references(value)) and replacement.is_create_only(
                    change.resource_type, key, region
                ):
                    out.add(lid)
                    queue.append(lid)
                    warnings.append(
                        f"{lid}: its create-only property {key} reads {upstream}, which is replaced; the plan "
                        "replaces it too (cdkd's diff shows an in-place update there)"
                    )
                    break
    return out


def _route(change: _Change, rec: RepairedRecord) -> str:
    row = rec.resources.get(change.logical_id)
    if change.change_type in ("UPDATE", "DELETE") and row is not None and row.get("provisionedBy") == "cc-api":
        return "cc-api"
    rtype = change.resource_type
    if is_custom_resource(rtype) or rtype in SUPPORTED_TYPES or rtype == NESTED_STACK_TYPE:
        return "sdk"
    return "cc-api"


def _is_stateful(change: _Change) -> bool:
    rtype = change.resource_type
    if rtype not in STATEFUL_TYPES and rtype != "AWS::Logs::LogGroup":
        return False
    if rtype == "AWS::Logs::LogGroup":
        retention = change.current.get("RetentionInDays")
        return isinstance(retention, int | float) and retention > 0
    return True


def _action(change: _Change, admin_replaced: set[str], rec: RepairedRecord, paths: dict[str, str]) -> dict[str, Any]:
    if change.change_type == "CREATE":
        action = "create"
    elif change.change_type == "DELETE":
        action = "delete"
    elif change.logical_id in admin_replaced or change.replaces:
        action = "replace"
    elif not change.property_changes:
        action = "metadata"
    else:
        action = "update"
    out: dict[str, Any] = {
        "logicalId": change.logical_id,
        "resourceType": change.resource_type,
        "action": action,
        "route": _route(change, rec),
    }
    if change.logical_id in paths:
        out["constructPath"] = paths[change.logical_id]
    if action == "replace":
        retained = (rec.resources.get(change.logical_id) or {}).get("updateReplacePolicy") == "Retain"
        out["stateful"] = _is_stateful(change) and not retained
    if change.known_after_apply:
        out["knownAfterApply"] = list(dict.fromkeys(change.known_after_apply))
    return out


def _admin_blocking(
    template: dict[str, Any],
    rec: RepairedRecord,
    ordered: list[_Change],
    changes: dict[str, _Change],
    admin_replaced: set[str],
    bound: Any,
    stack: str,
    annotations: list[str] | None,
    asset_manifest: dict[str, Any] | None,
    ctx: Context,
) -> list[str]:
    """Everything the first deploy engine refuses (issue 10 lists it; deploy-engine.md 6.3, 7.4)."""
    out: list[str] = []
    if rec.newer_than_supported:
        out.append(f"{stack}: the record's schema version {rec.version} is newer than this admin supports")
    if rec.repairs and any(r.code != "export-names-not-list" for r in rec.repairs):
        out.append(f"{stack}: the state record is malformed ({', '.join(r.code for r in rec.repairs)})")
    if rec.orphans:
        out.append(f"{stack}: the record holds rollback orphans; adopting them is not supported yet")
    if "Transform" in template:
        out.append(f"{stack}: the template declares a Transform (macros are not expanded)")
    for msg in annotations or []:
        out.append(f"{stack}: error annotation {msg}")
    if asset_manifest and asset_manifest.get("dockerImages"):
        out.append(f"{stack}: Docker image assets are not supported")
    referenced_no_echo = sorted(
        n
        for n in bound.no_echo
        if any(_reads(template.get(s) or {}, n) for s in ("Resources", "Outputs", "Conditions"))
    )
    if referenced_no_echo:
        out.append(f"{stack}: NoEcho parameters are not supported ({', '.join(referenced_no_echo)})")
    for c in ordered:
        rtype = c.resource_type
        label = f"{stack}: {c.logical_id} ({rtype})"
        if is_custom_resource(rtype):
            out.append(f"{label}: custom resources are not supported")
        elif rtype == NESTED_STACK_TYPE:
            out.append(f"{label}: nested stacks are not supported")
        elif rtype not in SUPPORTED_TYPES:
            out.append(f"{label}: this resource type is not supported yet")
        row = rec.resources.get(c.logical_id)
        if c.change_type == "UPDATE" and row is not None and row.get("provisionedBy") == "cc-api":
            out.append(f"{label}: the row was provisioned through Cloud Control, which is not supported yet")
        if rtype == "AWS::S3::Bucket" and c.change_type in ("CREATE", "UPDATE"):
            extra = sorted(set(c.raw) - S3_BUCKET_HANDLED)
            if extra:
                out.append(f"{label}: bucket properties {', '.join(extra)} are not supported")
        if c.logical_id in admin_replaced and c.change_type == "UPDATE":
            row = row or {}
            if _is_stateful(c) and row.get("updateReplacePolicy") != "Retain":
                out.append(f"{label}: replacing it destroys its data; a stateful replacement needs explicit consent")
        if c.change_type in ("CREATE", "UPDATE"):
            if has_secret_reference(c.raw):
                out.append(
                    f"{label}: secret references ({{{{resolve:secretsmanager}}}} / ssm-secure) are not supported"
                )
            if _uses(c.raw, "Fn::Cidr"):
                out.append(f"{label}: Fn::Cidr is not supported yet")
            res = (template.get("Resources") or {}).get(c.logical_id) or {}
            if res.get("DeletionPolicy") == "Snapshot" or res.get("UpdateReplacePolicy") == "Snapshot":
                out.append(f"{label}: the Snapshot deletion policy is not supported")
            for attribute in ("UpdatePolicy", "CreationPolicy"):
                if attribute in res:
                    ctx.warn(f"{label}: {attribute} is ignored (cdkd ignores it too)")
    return out


def _reads(value: Any, name: str) -> bool:
    return any(t == name for t, _ in references(value))


def _uses(value: Any, fn: str) -> bool:
    if isinstance(value, dict):
        return fn in value or any(_uses(v, fn) for v in value.values())
    if isinstance(value, list):
        return any(_uses(v, fn) for v in value)
    return False


# --- digest and rendering --------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def plan_digest(node: dict[str, Any], plan: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of the node (without children) and the plan (without
    its digest): what an approval binds to."""
    body = {
        "node": {k: v for k, v in node.items() if k != "children"},
        "plan": {k: v for k, v in plan.items() if k != "digest"},
    }
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()
