"""AWS::IAM::User, AWS::IAM::Group, AWS::IAM::InstanceProfile, AWS::IAM::UserToGroupAddition.

Cloud Control cannot delete these (cdkd's block list), so without a provider a destroy skipped
them forever. IAM refuses to delete a principal something still hangs on (DeleteConflict), so
each delete first takes that off, as CloudFormation does:
- User (physical id: the user name, or its ARN): leave every group, detach every managed
  policy, delete every inline policy, access key, login profile, signing certificate, SSH
  key and MFA device (deactivated; a virtual one deleted), then DeleteUser. (Service-specific
  credentials, which CloudFormation never creates, still make IAM answer DeleteConflict.)
- Group (the group name): remove its remaining members, detach managed policies, delete
  inline policies, then DeleteGroup.
- InstanceProfile (the profile name): remove its roles, then DeleteInstanceProfile.
- UserToGroupAddition: the memberships themselves, addressed by `GroupName` and `Users` (the
  physical id names nothing in IAM). Per seed 004 the row is skipped with no AWS call when
  either is missing, or `Users` is not a list of IAM user names (a string, an ARN, the ***
  mask, a secret {{resolve:...}} reference: cdkd resolves the latter; this admin does not).
  "not-found" when the group is gone or none of the users is still in it.
"""

from __future__ import annotations

from typing import Any

from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    IAM_NAME,
    NOT_FOUND,
    Clients,
    ResourceRef,
    SdkProvider,
    Skip,
    is_redacted,
    parse_arn,
)
from engine.providers.iam import IAM_REGION, NO_SUCH_ENTITY, _ignore_missing, _pages

USER = "AWS::IAM::User"
GROUP = "AWS::IAM::Group"
INSTANCE_PROFILE = "AWS::IAM::InstanceProfile"
USER_TO_GROUP = "AWS::IAM::UserToGroupAddition"

MEMBERSHIP_NO_PROPERTIES = "no properties in state — group membership not removed"
MEMBERSHIP_MISSING_FIELDS = "GroupName/Users missing from state — membership not removed"


def iam_name(physical_id: str, kind: str) -> str:
    """A user/group/instance-profile name, also from its ARN (`arn:aws:iam::a:KIND/path/NAME`)."""
    arn = parse_arn(physical_id)
    if arn is not None:
        if arn.service != "iam" or not arn.resource.startswith(f"{kind}/"):
            raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected an IAM {kind} name or ARN)")
        return arn.resource.rsplit("/", 1)[1]
    return physical_id


class UserProvider(SdkProvider):
    types = (USER,)
    not_found_codes = NO_SUCH_ENTITY
    action = "DeleteUser"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name = iam_name(physical_id, "user")
        iam = clients("iam", IAM_REGION)
        iam.get_user(UserName=name)  # NoSuchEntity → "not-found" before touching anything
        for group in _pages(iam.list_groups_for_user, "Groups", UserName=name):
            _ignore_missing(iam.remove_user_from_group, GroupName=group["GroupName"], UserName=name)
        for policy in _pages(iam.list_attached_user_policies, "AttachedPolicies", UserName=name):
            _ignore_missing(iam.detach_user_policy, UserName=name, PolicyArn=policy["PolicyArn"])
        for policy_name in _pages(iam.list_user_policies, "PolicyNames", UserName=name):
            _ignore_missing(iam.delete_user_policy, UserName=name, PolicyName=policy_name)
        for key in _pages(iam.list_access_keys, "AccessKeyMetadata", UserName=name):
            _ignore_missing(iam.delete_access_key, UserName=name, AccessKeyId=key["AccessKeyId"])
        _ignore_missing(iam.delete_login_profile, UserName=name)
        for cert in _pages(iam.list_signing_certificates, "Certificates", UserName=name):
            _ignore_missing(iam.delete_signing_certificate, UserName=name, CertificateId=cert["CertificateId"])
        for key in _pages(iam.list_ssh_public_keys, "SSHPublicKeys", UserName=name):
            _ignore_missing(iam.delete_ssh_public_key, UserName=name, SSHPublicKeyId=key["SSHPublicKeyId"])
        for device in _pages(iam.list_mfa_devices, "MFADevices", UserName=name):
            serial = device["SerialNumber"]
            _ignore_missing(iam.deactivate_mfa_device, UserName=name, SerialNumber=serial)
            if ":mfa/" in serial:  # a virtual device is an IAM entity of its own
                _ignore_missing(iam.delete_virtual_mfa_device, SerialNumber=serial)
        iam.delete_user(UserName=name)
        return DELETED


class GroupProvider(SdkProvider):
    types = (GROUP,)
    not_found_codes = NO_SUCH_ENTITY
    action = "DeleteGroup"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name = iam_name(physical_id, "group")
        iam = clients("iam", IAM_REGION)
        for user in _pages(iam.get_group, "Users", GroupName=name):  # NoSuchEntity → "not-found"
            _ignore_missing(iam.remove_user_from_group, GroupName=name, UserName=user["UserName"])
        for policy in _pages(iam.list_attached_group_policies, "AttachedPolicies", GroupName=name):
            _ignore_missing(iam.detach_group_policy, GroupName=name, PolicyArn=policy["PolicyArn"])
        for policy_name in _pages(iam.list_group_policies, "PolicyNames", GroupName=name):
            _ignore_missing(iam.delete_group_policy, GroupName=name, PolicyName=policy_name)
        iam.delete_group(GroupName=name)
        return DELETED


class InstanceProfileProvider(SdkProvider):
    types = (INSTANCE_PROFILE,)
    not_found_codes = NO_SUCH_ENTITY
    action = "DeleteInstanceProfile"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name = iam_name(physical_id, "instance-profile")
        iam = clients("iam", IAM_REGION)
        profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        for role in profile.get("Roles", []):
            _ignore_missing(iam.remove_role_from_instance_profile, InstanceProfileName=name, RoleName=role["RoleName"])
        iam.delete_instance_profile(InstanceProfileName=name)
        return DELETED


def _membership(ref: ResourceRef) -> tuple[str, list[str]]:
    """(group, users) of a UserToGroupAddition record, or Skip naming what is wrong."""
    props = ref.properties
    if not props:
        raise Skip(MEMBERSHIP_NO_PROPERTIES)
    group, users = props.get("GroupName"), props.get("Users")
    if group is None or users is None:
        raise Skip(MEMBERSHIP_MISSING_FIELDS)
    if not isinstance(group, str) or is_redacted(group) or not IAM_NAME.match(group):
        raise Skip("GroupName in state is not an IAM group name — membership not removed")
    if not isinstance(users, list) or not all(isinstance(u, str) and IAM_NAME.match(u) for u in users):
        secret = isinstance(users, list) and any(is_redacted(u) for u in users)
        raise Skip(
            "Users in state is not a list of IAM user names"
            + (" (secret-derived or masked: cdkd Admin does not resolve it)" if secret else "")
            + " — membership not removed"
        )
    return group, users


class UserToGroupAdditionProvider(SdkProvider):
    types = (USER_TO_GROUP,)
    not_found_codes = NO_SUCH_ENTITY
    action = "RemoveUserFromGroup"

    def delete(self, clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str:
        _membership(ref)  # the address is the properties: check them before the physical id
        return super().delete(clients, ref, snapshot=snapshot)

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        group, users = _membership(ref)
        iam = clients("iam", IAM_REGION)
        members = {u["UserName"] for u in _pages(iam.get_group, "Users", GroupName=group)}
        present = [u for u in users if u in members]
        if not present:
            return NOT_FOUND
        removed: list[Any] = [_ignore_missing(iam.remove_user_from_group, GroupName=group, UserName=u) for u in present]
        return DELETED if any(removed) else NOT_FOUND


PROVIDERS = (UserProvider(), GroupProvider(), InstanceProfileProvider(), UserToGroupAdditionProvider())
