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

from typing import Any

from botocore.exceptions import ClientError

from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    IAM_NAME,
    NOT_FOUND,
    Clients,
    NotFoundGone,
    ResourceRef,
    SdkProvider,
    Skip,
    error_code,
    is_redacted,
    parse_arn,
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


class RoleProvider(SdkProvider):
    types = ("AWS::IAM::Role",)
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


PRINCIPALS = (
    ("Roles", "delete_role_policy", "RoleName"),
    ("Users", "delete_user_policy", "UserName"),
    ("Groups", "delete_group_policy", "GroupName"),
)


class PolicyProvider(SdkProvider):
    types = ("AWS::IAM::Policy",)
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


class ManagedPolicyProvider(SdkProvider):
    types = ("AWS::IAM::ManagedPolicy",)
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


PROVIDERS = (RoleProvider(), PolicyProvider(), ManagedPolicyProvider())
