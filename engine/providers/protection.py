"""Deletion/termination protection of the types whose delete lives elsewhere (seed 004, the
public `--remove-protection` table): read it from AWS, turn it on or off in place.

Each handler has `types`, `read_protection(clients, ref) -> bool` and `set_protection(clients,
ref, enabled)`. A resource that is gone reads as unprotected; AWS's refusal of a read or a flip
is a ProviderError naming the call and code. Which runs when (all-or-nothing, read first,
compensation after a failed delete) is the destroy runner's; these only make the calls.

- AWS::Logs::LogGroup: DescribeLogGroups / PutLogGroupDeletionProtection.
- AWS::EC2::Instance: DescribeInstanceAttribute / ModifyInstanceAttribute(DisableApiTermination).
- AWS::ElasticLoadBalancingV2::LoadBalancer (ARN): attribute `deletion_protection.enabled`.
- AWS::Cognito::UserPool: DescribeUserPool, then UpdateUserPool(DeletionProtection=...) with
  the pool's own settings sent back, since UpdateUserPool resets every setting a call leaves
  out (self sign-up, Lambda triggers, advanced security). No call when it already reads as
  asked. A refusal while a DEVELOPER (SES) email configuration is sent is retried without
  it, with a warning; a validation refusal of the settings then turns the guard alone, with
  a warning naming what the pool held.
- AWS::EMR::Cluster: DescribeCluster / SetTerminationProtection.
- AWS::AutoScaling::AutoScalingGroup: the group's `DeletionProtection` (none /
  prevent-force-deletion / prevent-all-deletion) and `DisableApiTermination` on each instance
  it holds. Turning it off remembers, per group, the level and the instances it found on, and
  turning it back on restores exactly those (prevent-all-deletion when this process never
  turned it off).
- The Cloud Control patch types (DSQL, NeptuneGraph, SMSVOICE, VerifiedPermissions, EKS, RDS
  and DocDB global clusters): not implemented; both calls raise ProviderError saying so.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from botocore.exceptions import ClientError

from engine.providers.base import (
    Clients,
    ProviderError,
    ResourceRef,
    describe,
    error_code,
    parse_arn,
    provider_error,
    region_of,
    require_physical_id,
)
from engine.providers.logs import log_group_name
from engine.providers.snapshots import guarded

log = logging.getLogger(__name__)


def _read(ref: ResourceRef, action: str, not_found: frozenset[str], call: Any, **params: Any) -> Any:
    """A protection read; None when the resource is gone."""
    try:
        return call(**params)
    except ClientError as exc:
        if error_code(exc) in not_found:
            return None
        raise provider_error(ref, action, exc) from None


class LogGroupProtection:
    types = ("AWS::Logs::LogGroup",)

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        pid = require_physical_id(ref)
        name = log_group_name(pid)
        logs = clients("logs", region_of(ref, pid))
        page = _read(
            ref,
            "DescribeLogGroups",
            frozenset({"ResourceNotFoundException"}),
            logs.describe_log_groups,
            logGroupNamePrefix=name,
        )
        group = next((g for g in (page or {}).get("logGroups", []) if g.get("logGroupName") == name), None)
        return bool(group and group.get("deletionProtectionEnabled"))

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        pid = require_physical_id(ref)
        logs = clients("logs", region_of(ref, pid))
        guarded(
            ref,
            "PutLogGroupDeletionProtection",
            logs.put_log_group_deletion_protection,
            logGroupIdentifier=log_group_name(pid),
            deletionProtectionEnabled=enabled,
        )


EC2_INSTANCE_NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})


def instance_guard(ec2: Any, ref: ResourceRef, instance_id: str) -> bool:
    answer = _read(
        ref,
        "DescribeInstanceAttribute",
        EC2_INSTANCE_NOT_FOUND,
        ec2.describe_instance_attribute,
        InstanceId=instance_id,
        Attribute="disableApiTermination",
    )
    return bool(answer and answer.get("DisableApiTermination", {}).get("Value"))


def set_instance_guard(ec2: Any, ref: ResourceRef, instance_id: str, enabled: bool) -> None:
    guarded(
        ref,
        "ModifyInstanceAttribute",
        ec2.modify_instance_attribute,
        InstanceId=instance_id,
        DisableApiTermination={"Value": enabled},
    )


class InstanceProtection:
    types = ("AWS::EC2::Instance",)

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        pid = require_physical_id(ref)
        return instance_guard(clients("ec2", ref.region), ref, pid)

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        pid = require_physical_id(ref)
        set_instance_guard(clients("ec2", ref.region), ref, pid, enabled)


LB_KEY = "deletion_protection.enabled"


class LoadBalancerProtection:
    types = ("AWS::ElasticLoadBalancingV2::LoadBalancer",)

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        pid = require_physical_id(ref)
        elb = clients("elbv2", region_of(ref, pid))
        answer = _read(
            ref,
            "DescribeLoadBalancerAttributes",
            frozenset({"LoadBalancerNotFound"}),
            elb.describe_load_balancer_attributes,
            LoadBalancerArn=pid,
        )
        attrs = {a["Key"]: a.get("Value") for a in (answer or {}).get("Attributes", [])}
        return attrs.get(LB_KEY) == "true"

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        pid = require_physical_id(ref)
        elb = clients("elbv2", region_of(ref, pid))
        guarded(
            ref,
            "ModifyLoadBalancerAttributes",
            elb.modify_load_balancer_attributes,
            LoadBalancerArn=pid,
            Attributes=[{"Key": LB_KEY, "Value": "true" if enabled else "false"}],
        )


class UserPoolProtection:
    types = ("AWS::Cognito::UserPool",)
    not_found = frozenset({"ResourceNotFoundException"})

    def _pool(self, cognito: Any, ref: ResourceRef, pool_id: str) -> dict[str, Any] | None:
        answer = _read(ref, "DescribeUserPool", self.not_found, cognito.describe_user_pool, UserPoolId=pool_id)
        return answer["UserPool"] if answer else None

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        pid = require_physical_id(ref)
        pool = self._pool(clients("cognito-idp", region_of(ref, pid)), ref, pid)
        return bool(pool and pool.get("DeletionProtection") == "ACTIVE")

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        pid = require_physical_id(ref)
        cognito = clients("cognito-idp", region_of(ref, pid))
        wanted = "ACTIVE" if enabled else "INACTIVE"
        pool = self._pool(cognito, ref, pid)
        if pool is None:
            raise ProviderError(
                f"{describe(ref)}: DescribeUserPool: the user pool is gone", aws_code="ResourceNotFoundException"
            )
        if pool.get("DeletionProtection", "INACTIVE") == wanted:
            return  # the one type whose flip is not blind: a write would reset its settings
        accepted = set(cognito.meta.service_model.operation_model("UpdateUserPool").input_shape.members)
        settings = {k: v for k, v in pool.items() if k in accepted and k not in ("UserPoolId", "DeletionProtection")}
        try:
            self._update(cognito, ref, pid, wanted, settings)
        except ClientError as exc:
            if error_code(exc) not in ("InvalidParameterException", "InvalidEmailRoleAccessPolicyException"):
                raise provider_error(ref, "UpdateUserPool", exc) from None
            email = settings.get("EmailConfiguration") or {}
            if email.get("EmailSendingAccount") == "DEVELOPER":
                log.warning(
                    "%s: UpdateUserPool refused with its SES email configuration; the pool's email "
                    "configuration may have been reset",
                    describe(ref),
                )
                settings.pop("EmailConfiguration")
                try:
                    self._update(cognito, ref, pid, wanted, settings)
                    return
                except ClientError:
                    pass
            log.warning(
                "%s: UpdateUserPool refused the pool's own settings; turning the guard alone, which resets: %s",
                describe(ref),
                ", ".join(sorted(settings)) or "nothing",
            )
            guarded(ref, "UpdateUserPool", cognito.update_user_pool, UserPoolId=pid, DeletionProtection=wanted)

    @staticmethod
    def _update(cognito: Any, ref: ResourceRef, pid: str, wanted: str, settings: dict[str, Any]) -> None:
        cognito.update_user_pool(UserPoolId=pid, DeletionProtection=wanted, **settings)


class EmrClusterProtection:
    types = ("AWS::EMR::Cluster",)

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        pid = require_physical_id(ref)
        emr = clients("emr", region_of(ref, pid))
        answer = _read(
            ref, "DescribeCluster", frozenset({"InvalidRequestException"}), emr.describe_cluster, ClusterId=pid
        )
        return bool(answer and answer["Cluster"].get("TerminationProtected"))

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        pid = require_physical_id(ref)
        emr = clients("emr", region_of(ref, pid))
        guarded(
            ref,
            "SetTerminationProtection",
            emr.set_termination_protection,
            JobFlowIds=[pid],
            TerminationProtected=enabled,
        )


class AutoScalingGroupProtection:
    types = ("AWS::AutoScaling::AutoScalingGroup",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flipped: dict[tuple[str, str], tuple[str, list[str]]] = {}  # what set(False) turned off

    @staticmethod
    def _name(pid: str) -> str:
        arn = parse_arn(pid)
        return arn.resource.rsplit("autoScalingGroupName/", 1)[-1] if arn else pid

    def _group(self, asg: Any, ref: ResourceRef, name: str) -> dict[str, Any] | None:
        answer = guarded(
            ref, "DescribeAutoScalingGroups", asg.describe_auto_scaling_groups, AutoScalingGroupNames=[name]
        )
        groups = answer.get("AutoScalingGroups", [])
        return groups[0] if groups else None

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        pid = require_physical_id(ref)
        group = self._group(clients("autoscaling", region_of(ref, pid)), ref, self._name(pid))
        if group is None:
            return False
        if group.get("DeletionProtection") not in (None, "none"):
            return True
        ec2 = clients("ec2", region_of(ref, pid))
        return any(instance_guard(ec2, ref, i["InstanceId"]) for i in group.get("Instances", []))

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        pid = require_physical_id(ref)
        region, name = region_of(ref, pid), self._name(pid)
        asg, ec2 = clients("autoscaling", region), clients("ec2", region)
        if enabled:
            with self._lock:
                level, instances = self._flipped.pop((region, name), ("prevent-all-deletion", []))
            guarded(
                ref,
                "UpdateAutoScalingGroup",
                asg.update_auto_scaling_group,
                AutoScalingGroupName=name,
                DeletionProtection=level,
            )
            for instance_id in instances:
                set_instance_guard(ec2, ref, instance_id, True)
            return
        group = self._group(asg, ref, name)
        if group is None:
            raise ProviderError(f"{describe(ref)}: DescribeAutoScalingGroups: the group is gone", aws_code="NotFound")
        level = group.get("DeletionProtection") or "none"
        guarded(
            ref,
            "UpdateAutoScalingGroup",
            asg.update_auto_scaling_group,
            AutoScalingGroupName=name,
            DeletionProtection="none",
        )
        guarded_on = [i["InstanceId"] for i in group.get("Instances", []) if instance_guard(ec2, ref, i["InstanceId"])]
        for instance_id in guarded_on:
            set_instance_guard(ec2, ref, instance_id, False)
        with self._lock:
            self._flipped[(region, name)] = (level if level != "none" else "prevent-all-deletion", guarded_on)


class CloudControlPatchProtection:
    """Seed 004 flips these with a Cloud Control GetResource + UpdateResource patch; cdkd Admin
    does not yet (moto has no Cloud Control to test it on)."""

    types = (
        "AWS::DSQL::Cluster",
        "AWS::NeptuneGraph::Graph",
        "AWS::SMSVOICE::ProtectConfiguration",
        "AWS::VerifiedPermissions::PolicyStore",
        "AWS::EKS::Cluster",
        "AWS::RDS::GlobalCluster",
        "AWS::DocDB::GlobalCluster",
    )

    def _refuse(self, ref: ResourceRef) -> ProviderError:
        return ProviderError(
            f"{describe(ref)}: reading or changing deletion protection of {ref.resource_type} (a Cloud Control "
            f"patch) is not supported by cdkd Admin; turn it off by hand (aws cloudcontrol update-resource), "
            f"then run the destroy again",
            aws_code="ProtectionNotSupported",
        )

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool:
        raise self._refuse(ref)

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None:
        raise self._refuse(ref)


PROTECTION = (
    LogGroupProtection(),
    InstanceProtection(),
    LoadBalancerProtection(),
    UserPoolProtection(),
    EmrClusterProtection(),
    AutoScalingGroupProtection(),
    CloudControlPatchProtection(),
)
