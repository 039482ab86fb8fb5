"""AWS::IAM::Role, AWS::IAM::Policy (inline) and AWS::IAM::ManagedPolicy.

IAM refuses to delete a role or managed policy that something still hangs on
(DeleteConflict), so each delete first takes those off:
- Role: detach every managed policy, delete every inline policy, remove the role from every
  instance profile (the profiles themselves are their own resources), then DeleteRole.
- ManagedPolicy (ARN): detach it from every role, user and group, delete its non-default
  versions, then DeletePolicy.
- Policy (inline): an inline policy exists only as an attachment, so it is deleted from each
  role, user and group the record names. The name comes from `PolicyName`, else from the
  physical id (cdkd records the policy name). Per seed 004 the row is skipped, no AWS call,
  when neither gives a name, when no principal is named, or when a principal list is not a
  list of IAM names (a string, an ARN, the *** mask, a secret {{resolve:...}} reference —
  cdkd resolves the latter; this admin does not, and says so in the reason).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from engine.deploy.names import physical_name
from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    IAM_NAME,
    NOT_FOUND,
    Clients,
    CreateResult,
    DeployCalls,
    DeployTarget,
    NotFoundGone,
    ProviderError,
    ResourceRef,
    SdkProvider,
    Skip,
    UpdateResult,
    already_exists,
    error_code,
    is_redacted,
    parse_arn,
    provider_error,
    tag_delta,
    tag_map,
)

NO_SUCH_ENTITY = frozenset({"NoSuchEntity", "NoSuchEntityException"})
IAM_REGION = "us-east-1"  # IAM is global; its endpoint lives in us-east-1


def _ignore_missing(call: Any, **params: Any) -> bool:
    """Run an IAM call that removes something; False when it was already gone."""
    try:
        call(**params)
    except ClientError as exc:
        if error_code(exc) in NO_SUCH_ENTITY:
            return False
        raise
    return True


def _pages(call: Any, key: str, **params: Any) -> list[Any]:
    """Every item of a paged IAM listing (IAM pages with Marker/IsTruncated)."""
    items: list[Any] = []
    while True:
        page = call(**params)
        items.extend(page.get(key, []))
        if not page.get("IsTruncated"):
            return items
        params["Marker"] = page["Marker"]


def role_name(physical_id: str) -> str:
    """A role name, also from a role ARN (`arn:aws:iam::a:role/path/NAME`)."""
    arn = parse_arn(physical_id)
    if arn is not None:
        if arn.service != "iam" or not arn.resource.startswith("role/"):
            raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected an IAM role name)")
        return arn.resource.rsplit("/", 1)[1]
    return physical_id


ROLE = "AWS::IAM::Role"
POLICY = "AWS::IAM::Policy"


def _doc(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _decoded(value: Any) -> Any:
    """IAM answers policy documents URL-encoded (boto3 decodes most of them to a dict)."""
    if isinstance(value, str):
        try:
            return json.loads(unquote(value))
        except ValueError:
            return value
    return value


def _inline(policies: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in policies if isinstance(policies, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("PolicyName"), str):
            out[entry["PolicyName"]] = entry.get("PolicyDocument")
    return out


class RoleProvider(SdkProvider, DeployCalls):
    """Delete as before; deploy (reference 5.7): the role name is the physical id (Pattern B:
    a supplied RoleName is sanitized, no stack prefix), attributes `Arn` and `RoleId`; inline
    `Policies` and `ManagedPolicyArns` are applied after CreateRole, and a failure there
    deletes the role again (the engine would never learn its id)."""

    types = (ROLE,)
    handled = frozenset(
        {
            "RoleName",
            "AssumeRolePolicyDocument",
            "Description",
            "ManagedPolicyArns",
            "MaxSessionDuration",
            "Path",
            "PermissionsBoundary",
            "Policies",
            "Tags",
        }
    )
    not_found_codes = NO_SUCH_ENTITY
    action = "DeleteRole"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name = role_name(physical_id)
        iam = clients("iam", IAM_REGION)
        iam.get_role(RoleName=name)  # NoSuchEntity → "not-found" before touching anything
        for policy in _pages(iam.list_attached_role_policies, "AttachedPolicies", RoleName=name):
            _ignore_missing(iam.detach_role_policy, RoleName=name, PolicyArn=policy["PolicyArn"])
        for policy_name in _pages(iam.list_role_policies, "PolicyNames", RoleName=name):
            _ignore_missing(iam.delete_role_policy, RoleName=name, PolicyName=policy_name)
        for profile in _pages(iam.list_instance_profiles_for_role, "InstanceProfiles", RoleName=name):
            _ignore_missing(
                iam.remove_role_from_instance_profile, InstanceProfileName=profile["InstanceProfileName"], RoleName=name
            )
        iam.delete_role(RoleName=name)
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(ROLE, logical_id, properties, stack_name=target.stack_name)
        iam = clients("iam", IAM_REGION)
        params: dict[str, Any] = {
            "RoleName": name,
            "AssumeRolePolicyDocument": _doc(properties.get("AssumeRolePolicyDocument")),
        }
        for key in ("Path", "Description", "MaxSessionDuration", "PermissionsBoundary"):
            if key in properties:
                params[key] = properties[key]
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
        try:
            role = iam.create_role(**params)["Role"]
        except ClientError as exc:
            if error_code(exc) == "EntityAlreadyExists":
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, ROLE, name), "CreateRole", exc) from None
        try:
            for policy_name, document in _inline(properties.get("Policies")).items():
                iam.put_role_policy(RoleName=name, PolicyName=policy_name, PolicyDocument=_doc(document))
            for arn in properties.get("ManagedPolicyArns") or []:
                iam.attach_role_policy(RoleName=name, PolicyArn=arn)
        except ClientError as exc:
            self.delete(clients, ResourceRef(logical_id, ROLE, name, region=target.region))
            raise provider_error(ResourceRef(logical_id, ROLE, name), "PutRolePolicy/AttachRolePolicy", exc) from None
        return CreateResult(name, {"Arn": role["Arn"], "RoleId": role["RoleId"]})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        name = role_name(ref.physical_id or "")
        iam = clients("iam", IAM_REGION)
        old = ref.properties
        lid = ref.logical_id

        def call(action: str, fn: Any, **kw: Any) -> Any:
            return self._guarded(lid, ROLE, name, action, fn, **kw)

        if old.get("AssumeRolePolicyDocument") != properties.get("AssumeRolePolicyDocument"):
            call(
                "UpdateAssumeRolePolicy",
                iam.update_assume_role_policy,
                RoleName=name,
                PolicyDocument=_doc(properties.get("AssumeRolePolicyDocument")),
            )
        if old.get("Description") != properties.get("Description") or old.get("MaxSessionDuration") != properties.get(
            "MaxSessionDuration"
        ):
            call(
                "UpdateRole",
                iam.update_role,
                RoleName=name,
                Description=properties.get("Description", ""),
                MaxSessionDuration=int(properties.get("MaxSessionDuration", 3600)),
            )
        if old.get("PermissionsBoundary") != properties.get("PermissionsBoundary"):
            if properties.get("PermissionsBoundary"):
                call(
                    "PutRolePermissionsBoundary",
                    iam.put_role_permissions_boundary,
                    RoleName=name,
                    PermissionsBoundary=properties["PermissionsBoundary"],
                )
            else:
                call("DeleteRolePermissionsBoundary", iam.delete_role_permissions_boundary, RoleName=name)
        before, after = _inline(old.get("Policies")), _inline(properties.get("Policies"))
        for policy_name, document in after.items():
            if before.get(policy_name) != document or policy_name not in before:
                call(
                    "PutRolePolicy",
                    iam.put_role_policy,
                    RoleName=name,
                    PolicyName=policy_name,
                    PolicyDocument=_doc(document),
                )
        for policy_name in before:
            if policy_name not in after:
                _ignore_missing(iam.delete_role_policy, RoleName=name, PolicyName=policy_name)
        old_arns, new_arns = list(old.get("ManagedPolicyArns") or []), list(properties.get("ManagedPolicyArns") or [])
        for arn in new_arns:
            if arn not in old_arns:
                call("AttachRolePolicy", iam.attach_role_policy, RoleName=name, PolicyArn=arn)
        for arn in old_arns:
            if arn not in new_arns:
                _ignore_missing(iam.detach_role_policy, RoleName=name, PolicyArn=arn)
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        if remove:
            call("UntagRole", iam.untag_role, RoleName=name, TagKeys=remove)
        if add:
            call("TagRole", iam.tag_role, RoleName=name, Tags=[{"Key": k, "Value": v} for k, v in add.items()])
        role = call("GetRole", iam.get_role, RoleName=name)["Role"]
        return UpdateResult(name, {"Arn": role["Arn"], "RoleId": role["RoleId"]})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        name = role_name(ref.physical_id or "")
        iam = clients("iam", IAM_REGION)
        try:
            role = iam.get_role(RoleName=name)["Role"]
            attached = _pages(iam.list_attached_role_policies, "AttachedPolicies", RoleName=name)
            inline = _pages(iam.list_role_policies, "PolicyNames", RoleName=name)
            policies = [
                {
                    "PolicyName": n,
                    "PolicyDocument": _decoded(iam.get_role_policy(RoleName=name, PolicyName=n)["PolicyDocument"]),
                }
                for n in inline
            ]
        except ClientError:
            return None
        return {
            "RoleName": name,
            "AssumeRolePolicyDocument": _decoded(role.get("AssumeRolePolicyDocument")),
            "Description": role.get("Description", ""),
            "MaxSessionDuration": role.get("MaxSessionDuration", 3600),
            "Path": role.get("Path", "/"),
            "ManagedPolicyArns": [p["PolicyArn"] for p in attached],
            "Policies": policies,
            "Tags": [{"Key": t["Key"], "Value": t["Value"]} for t in role.get("Tags", [])],
        }

    def _attributes(self, clients: Clients, ref: ResourceRef) -> dict[str, Any]:
        role = clients("iam", IAM_REGION).get_role(RoleName=role_name(ref.physical_id or ""))["Role"]
        return {"Arn": role["Arn"], "RoleId": role["RoleId"]}


PRINCIPALS = (
    ("Roles", "delete_role_policy", "RoleName"),
    ("Users", "delete_user_policy", "UserName"),
    ("Groups", "delete_group_policy", "GroupName"),
)


PUT_POLICY = {
    "Roles": ("put_role_policy", "RoleName"),
    "Users": ("put_user_policy", "UserName"),
    "Groups": ("put_group_policy", "GroupName"),
}


class PolicyProvider(SdkProvider, DeployCalls):
    """Delete as before; deploy (reference 5.7): the physical id is the policy name
    (`PolicyName`, else generated, max 64), recorded attribute `PolicyName`;
    PutRolePolicy / PutUserPolicy / PutGroupPolicy for each principal, at least one."""

    types = (POLICY,)
    handled = frozenset({"PolicyName", "PolicyDocument", "Roles", "Users", "Groups"})
    not_found_codes = NO_SUCH_ENTITY
    action = "DeleteRolePolicy/DeleteUserPolicy/DeleteGroupPolicy"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name = self._policy_name(ref, physical_id)
        targets = self._targets(ref)  # validated in full before the first call
        iam = clients("iam", IAM_REGION)
        removed = False
        for method, param, principal in targets:
            removed |= _ignore_missing(getattr(iam, method), **{param: principal, "PolicyName": name})
        return DELETED if removed else NOT_FOUND

    def _put_all(self, clients: Clients, lid: str, name: str, properties: dict) -> None:
        iam = clients("iam", IAM_REGION)
        document = _doc(properties.get("PolicyDocument"))
        count = 0
        for prop, (method, param) in PUT_POLICY.items():
            for principal in properties.get(prop) or []:
                self._guarded(
                    lid,
                    POLICY,
                    name,
                    method,
                    getattr(iam, method),
                    **{param: principal, "PolicyName": name, "PolicyDocument": document},
                )
                count += 1
        if not count:
            raise ProviderError(f"{lid} ({POLICY} {name}): at least one of Roles, Users or Groups is required")

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(POLICY, logical_id, properties, stack_name=target.stack_name)
        self._put_all(clients, logical_id, name, properties)
        return CreateResult(name, {"PolicyName": name})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        """A new document or principals in place; a new PolicyName (no create-only property
        on this type) puts the policy under the new name and takes the old one off every
        principal it was on, so the physical id moves to the new name."""
        old_name = ref.physical_id or ""
        name = old_name
        if properties.get("PolicyName") != ref.properties.get("PolicyName"):
            name = physical_name(POLICY, ref.logical_id, properties, stack_name=target.stack_name)
        self._put_all(clients, ref.logical_id, name, properties)
        iam = clients("iam", IAM_REGION)
        for prop, method, param in PRINCIPALS:
            kept = set(properties.get(prop) or []) if name == old_name else set()
            for principal in ref.properties.get(prop) or []:
                if principal not in kept:
                    _ignore_missing(getattr(iam, method), **{param: principal, "PolicyName": old_name})
        return UpdateResult(name, {"PolicyName": name})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        name = ref.physical_id or ""
        iam = clients("iam", IAM_REGION)
        roles = [r for r in ref.properties.get("Roles") or [] if isinstance(r, str)]
        if not roles:
            return None
        try:
            doc = iam.get_role_policy(RoleName=roles[0], PolicyName=name)["PolicyDocument"]
        except ClientError:
            return None
        out: dict[str, Any] = {"PolicyName": name, "PolicyDocument": _decoded(doc)}
        for prop in ("Roles", "Users", "Groups"):
            if prop in ref.properties:
                out[prop] = ref.properties[prop]
        return out

    @staticmethod
    def _policy_name(ref: ResourceRef, physical_id: str) -> str:
        prop = ref.properties.get("PolicyName")
        if isinstance(prop, str) and prop.strip() and not is_redacted(prop):
            return prop
        if IAM_NAME.match(physical_id):
            return physical_id
        raise Skip(
            "neither a policy name in the physical id nor a PolicyName property: the inline policy stays "
            "attached wherever it is; repair PolicyName in state.json and run the destroy again"
        )

    @staticmethod
    def _targets(ref: ResourceRef) -> list[tuple[str, str, str]]:
        targets: list[tuple[str, str, str]] = []
        for prop, method, param in PRINCIPALS:
            value = ref.properties.get(prop)
            if value is None:
                continue
            if not isinstance(value, list):
                raise Skip(f"{prop} is not a list of IAM names: the inline policy stays attached wherever it is")
            for entry in value:
                if is_redacted(entry):
                    raise Skip(
                        f"{prop} holds a redacted or secret-derived name ({entry!r} is not resolved by cdkd Admin): "
                        f"remove the policy by hand, then orphan the row"
                    )
                if not isinstance(entry, str) or not IAM_NAME.match(entry):
                    raise Skip(f"{prop} is not a list of IAM names: the inline policy stays attached wherever it is")
                targets.append((method, param, entry))
        if not targets:
            raise Skip(
                "the record names no Roles / Groups / Users: an inline policy exists only as an attachment, "
                "so it cannot be deleted without one"
            )
        return targets


MANAGED = "AWS::IAM::ManagedPolicy"
ATTACH = {
    "Roles": ("attach_role_policy", "detach_role_policy", "RoleName"),
    "Users": ("attach_user_policy", "detach_user_policy", "UserName"),
    "Groups": ("attach_group_policy", "detach_group_policy", "GroupName"),
}


class ManagedPolicyProvider(SdkProvider, DeployCalls):
    """Delete as before; deploy (reference 5.7): the ARN is the physical id (Pattern B name,
    max 128), attribute `PolicyArn`; a new document is a new default version (the oldest
    non-default one is deleted when IAM's five are used); attachments are diffed."""

    types = (MANAGED,)
    handled = frozenset({"ManagedPolicyName", "PolicyDocument", "Path", "Description", "Roles", "Users", "Groups"})
    not_found_codes = NO_SUCH_ENTITY
    action = "DeletePolicy"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        arn = parse_arn(physical_id)
        if arn is None or arn.service != "iam" or not arn.resource.startswith("policy/"):
            raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected a managed policy ARN arn:aws:iam::<account>:policy/...)")
        iam = clients("iam", IAM_REGION)
        try:
            iam.get_policy(PolicyArn=physical_id)
        except ClientError as exc:
            if error_code(exc) in NO_SUCH_ENTITY:
                raise NotFoundGone from None
            raise
        detach = {
            "PolicyRoles": ("detach_role_policy", "RoleName"),
            "PolicyUsers": ("detach_user_policy", "UserName"),
            "PolicyGroups": ("detach_group_policy", "GroupName"),
        }
        params: dict[str, Any] = {"PolicyArn": physical_id}
        while True:  # one listing returns roles, users and groups together
            page = iam.list_entities_for_policy(**params)
            for kind, (method, param) in detach.items():
                for entity in page.get(kind, []):
                    _ignore_missing(getattr(iam, method), **{param: entity[param], "PolicyArn": physical_id})
            if not page.get("IsTruncated"):
                break
            params["Marker"] = page["Marker"]
        for version in _pages(iam.list_policy_versions, "Versions", PolicyArn=physical_id):
            if not version.get("IsDefaultVersion"):
                _ignore_missing(iam.delete_policy_version, PolicyArn=physical_id, VersionId=version["VersionId"])
        iam.delete_policy(PolicyArn=physical_id)
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(MANAGED, logical_id, properties, stack_name=target.stack_name)
        iam = clients("iam", IAM_REGION)
        params: dict[str, Any] = {"PolicyName": name, "PolicyDocument": _doc(properties.get("PolicyDocument"))}
        for key in ("Path", "Description"):
            if isinstance(properties.get(key), str):
                params[key] = properties[key]
        try:
            arn = iam.create_policy(**params)["Policy"]["Arn"]
        except ClientError as exc:
            if error_code(exc) == "EntityAlreadyExists":
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, MANAGED, name), "CreatePolicy", exc) from None
        try:
            self._attach(iam, logical_id, arn, {}, properties)
        except ProviderError:
            self.delete(clients, ResourceRef(logical_id, MANAGED, arn, region=target.region))
            raise
        return CreateResult(arn, {"PolicyArn": arn})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        arn = ref.physical_id or ""
        iam = clients("iam", IAM_REGION)
        if ref.properties.get("PolicyDocument") != properties.get("PolicyDocument"):
            versions = _pages(iam.list_policy_versions, "Versions", PolicyArn=arn)
            if len(versions) >= 5:
                oldest = min((v for v in versions if not v.get("IsDefaultVersion")), key=lambda v: v["CreateDate"])
                _ignore_missing(iam.delete_policy_version, PolicyArn=arn, VersionId=oldest["VersionId"])
            self._guarded(
                ref.logical_id,
                MANAGED,
                arn,
                "CreatePolicyVersion",
                iam.create_policy_version,
                PolicyArn=arn,
                PolicyDocument=_doc(properties.get("PolicyDocument")),
                SetAsDefault=True,
            )
        self._attach(iam, ref.logical_id, arn, ref.properties, properties)
        return UpdateResult(arn, {"PolicyArn": arn})

    def _attach(self, iam: Any, lid: str, arn: str, old: dict, new: dict) -> None:
        for prop, (attach, detach, param) in ATTACH.items():
            before, after = list(old.get(prop) or []), list(new.get(prop) or [])
            for principal in after:
                if principal not in before:
                    self._guarded(
                        lid, MANAGED, arn, attach, getattr(iam, attach), **{param: principal, "PolicyArn": arn}
                    )
            for principal in before:
                if principal not in after:
                    _ignore_missing(getattr(iam, detach), **{param: principal, "PolicyArn": arn})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        arn = ref.physical_id or ""
        iam = clients("iam", IAM_REGION)
        try:
            policy = iam.get_policy(PolicyArn=arn)["Policy"]
            version = iam.get_policy_version(PolicyArn=arn, VersionId=policy["DefaultVersionId"])["PolicyVersion"]
        except ClientError:
            return None
        out: dict[str, Any] = {
            "ManagedPolicyName": policy["PolicyName"],
            "PolicyDocument": _decoded(version.get("Document")),
            "Path": policy.get("Path", "/"),
            "Description": policy.get("Description", ""),
        }
        for prop in ("Roles", "Users", "Groups"):
            if prop in ref.properties:
                out[prop] = ref.properties[prop]
        return out


PROVIDERS = (RoleProvider(), PolicyProvider(), ManagedPolicyProvider())
