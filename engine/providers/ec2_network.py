"""The EC2 networking types a CDK `ec2.Vpc` synthesizes: delete through the EC2 SDK.

Cloud Control could delete them, but it is not reachable everywhere (moto has none) and the
runner would then skip every row of a VPC stack forever. Physical ids are cdkd's (seed 001,
"Composite physicalIds"):

| type | physical id | delete |
| --- | --- | --- |
| AWS::EC2::VPC | `vpc-…` | DeleteVpc |
| AWS::EC2::Subnet | `subnet-…` | DeleteSubnet |
| AWS::EC2::RouteTable | `rtb-…` | DeleteRouteTable |
| AWS::EC2::Route | `<routeTableId>|<destination>` (a CIDR, an IPv6 CIDR or a `pl-…` list) | DeleteRoute |
| AWS::EC2::SubnetRouteTableAssociation | `rtbassoc-…` | DisassociateRouteTable |
| AWS::EC2::InternetGateway | `igw-…` | DeleteInternetGateway |
| AWS::EC2::VPCGatewayAttachment | `<gatewayId>|<vpcId>` (gateway first; `igw-` or `vgw-`) | Detach… |
| AWS::EC2::SecurityGroup | `sg-…` (a bare group name for a legacy record) | DeleteSecurityGroup |
| AWS::EC2::EIP | `<publicIp>|<allocationId>` (a bare IP or allocation id is read too) | ReleaseAddress |
| AWS::EC2::NatGateway | `nat-…` | DeleteNatGateway, then waits for `deleted` |

A composite id that does not decode is skipped before any AWS call, with cdkd's reason and the
expected format, so the plan names the skip the run makes. AWS's "not found" codes (and a
detach of a gateway no longer attached, a NAT gateway already `deleting`/`deleted`) answer
"not-found", so a second delete of the same row is not an error. DependencyViolation is left
to the runner's retries (a Lambda ENI in a subnet or security group detaches late).
"""

from __future__ import annotations

import ipaddress
from typing import Any, ClassVar

from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    NOT_FOUND,
    Clients,
    NotFoundGone,
    ResourceRef,
    SdkProvider,
    Skip,
    region_of,
)
from engine.providers.snapshots import Waits

VPC = "AWS::EC2::VPC"
SUBNET = "AWS::EC2::Subnet"
ROUTE_TABLE = "AWS::EC2::RouteTable"
ROUTE = "AWS::EC2::Route"
SUBNET_ROUTE_TABLE_ASSOCIATION = "AWS::EC2::SubnetRouteTableAssociation"
INTERNET_GATEWAY = "AWS::EC2::InternetGateway"
GATEWAY_ATTACHMENT = "AWS::EC2::VPCGatewayAttachment"
SECURITY_GROUP = "AWS::EC2::SecurityGroup"
EIP = "AWS::EC2::EIP"
NAT_GATEWAY = "AWS::EC2::NatGateway"

TYPES = (
    VPC,
    SUBNET,
    ROUTE_TABLE,
    ROUTE,
    SUBNET_ROUTE_TABLE_ASSOCIATION,
    INTERNET_GATEWAY,
    GATEWAY_ATTACHMENT,
    SECURITY_GROUP,
    EIP,
    NAT_GATEWAY,
)


def malformed(expected: str) -> Skip:
    return Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected {expected})")


def route_target(physical_id: str) -> tuple[str, dict[str, str]]:
    """(route table id, DeleteRoute's destination parameter) from `<rtb>|<destination>`."""
    table, sep, destination = physical_id.partition("|")
    if not sep or not table.startswith("rtb-") or not destination or "|" in destination:
        raise malformed("<routeTableId>|<destination>")
    if destination.startswith("pl-"):
        return table, {"DestinationPrefixListId": destination}
    try:
        network = ipaddress.ip_network(destination, strict=False)
    except ValueError:
        raise malformed("<routeTableId>|<destination CIDR or prefix list id>") from None
    key = "DestinationIpv6CidrBlock" if network.version == 6 else "DestinationCidrBlock"
    return table, {key: destination}


def attachment_target(physical_id: str) -> tuple[str, str]:
    """(gateway id, vpc id) from cdkd's `<gatewayId>|<vpcId>`. CloudFormation's own order
    (VPC first) is read too: the prefixes leave no doubt which segment is which."""
    parts = physical_id.split("|")
    if len(parts) == 2 and parts[0].startswith("vpc-"):
        parts.reverse()
    if len(parts) != 2 or not parts[1].startswith("vpc-") or not parts[0].startswith(("igw-", "vgw-")):
        raise malformed("<internetGatewayId>|<vpcId>")
    return parts[0], parts[1]


def eip_target(physical_id: str) -> tuple[str | None, str | None]:
    """(public ip, allocation id) from `<publicIp>|<allocationId>`, a bare allocation id or a
    bare IP (a record older than the composite form)."""
    parts = physical_id.split("|")
    if len(parts) == 2 and parts[1].startswith("eipalloc-") and _is_ip(parts[0]):
        return parts[0], parts[1]
    if len(parts) == 1 and parts[0].startswith("eipalloc-"):
        return None, parts[0]
    if len(parts) == 1 and _is_ip(parts[0]):
        return parts[0], None
    raise malformed("<publicIp>|<allocationId>")


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


class _Ec2(SdkProvider):
    """One EC2 type: `_call(ec2, ref, physical_id)` issues the delete. `decode` reads the id
    (raising Skip) before any client is asked for, so the plan's dry run sees the skip.
    Delete only: a deploy still creates and updates these through Cloud Control."""

    deploy_via_cloud_control: ClassVar[bool] = True

    def decode(self, ref: ResourceRef, physical_id: str) -> Any:
        return physical_id

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        target = self.decode(ref, physical_id)
        ec2 = clients("ec2", region_of(ref, physical_id))
        return self._call(ec2, ref, target) or DELETED

    def _call(self, ec2: Any, ref: ResourceRef, target: Any) -> str | None:
        raise NotImplementedError


class VpcProvider(_Ec2):
    types = (VPC,)
    not_found_codes = frozenset({"InvalidVpcID.NotFound"})
    action = "DeleteVpc"

    def _call(self, ec2: Any, ref: ResourceRef, target: str) -> None:
        ec2.delete_vpc(VpcId=target)


class SubnetProvider(_Ec2):
    types = (SUBNET,)
    not_found_codes = frozenset({"InvalidSubnetID.NotFound"})
    action = "DeleteSubnet"

    def _call(self, ec2: Any, ref: ResourceRef, target: str) -> None:
        ec2.delete_subnet(SubnetId=target)


class RouteTableProvider(_Ec2):
    types = (ROUTE_TABLE,)
    not_found_codes = frozenset({"InvalidRouteTableID.NotFound"})
    action = "DeleteRouteTable"

    def _call(self, ec2: Any, ref: ResourceRef, target: str) -> None:
        ec2.delete_route_table(RouteTableId=target)


class RouteProvider(_Ec2):
    types = (ROUTE,)
    # the table gone takes its routes with it
    not_found_codes = frozenset({"InvalidRoute.NotFound", "InvalidRouteTableID.NotFound"})
    action = "DeleteRoute"

    def decode(self, ref: ResourceRef, physical_id: str) -> tuple[str, dict[str, str]]:
        return route_target(physical_id)

    def _call(self, ec2: Any, ref: ResourceRef, target: tuple[str, dict[str, str]]) -> None:
        table, destination = target
        ec2.delete_route(RouteTableId=table, **destination)


class SubnetRouteTableAssociationProvider(_Ec2):
    types = (SUBNET_ROUTE_TABLE_ASSOCIATION,)
    not_found_codes = frozenset({"InvalidAssociationID.NotFound"})
    action = "DisassociateRouteTable"

    def decode(self, ref: ResourceRef, physical_id: str) -> str:
        if not physical_id.startswith("rtbassoc-"):
            raise malformed("rtbassoc-<id>")
        return physical_id

    def _call(self, ec2: Any, ref: ResourceRef, target: str) -> None:
        ec2.disassociate_route_table(AssociationId=target)


class InternetGatewayProvider(_Ec2):
    types = (INTERNET_GATEWAY,)
    not_found_codes = frozenset({"InvalidInternetGatewayID.NotFound"})
    action = "DeleteInternetGateway"

    def _call(self, ec2: Any, ref: ResourceRef, target: str) -> None:
        ec2.delete_internet_gateway(InternetGatewayId=target)


class GatewayAttachmentProvider(_Ec2):
    types = (GATEWAY_ATTACHMENT,)
    # a gateway or VPC that is gone, or a gateway no longer attached: nothing left to detach
    not_found_codes = frozenset(
        {
            "Gateway.NotAttached",
            "InvalidInternetGatewayID.NotFound",
            "InvalidVpnGatewayID.NotFound",
            "InvalidVpnGatewayAttachment.NotFound",
            "InvalidVpcID.NotFound",
        }
    )
    action = "DetachInternetGateway"

    def decode(self, ref: ResourceRef, physical_id: str) -> tuple[str, str]:
        return attachment_target(physical_id)

    def _call(self, ec2: Any, ref: ResourceRef, target: tuple[str, str]) -> None:
        gateway, vpc = target
        if gateway.startswith("vgw-"):
            ec2.detach_vpn_gateway(VpnGatewayId=gateway, VpcId=vpc)
        else:
            ec2.detach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)


class SecurityGroupProvider(_Ec2):
    types = (SECURITY_GROUP,)
    not_found_codes = frozenset({"InvalidGroup.NotFound", "InvalidGroupId.NotFound"})
    action = "DeleteSecurityGroup"

    def _call(self, ec2: Any, ref: ResourceRef, target: str) -> None:
        if target.startswith("sg-"):
            ec2.delete_security_group(GroupId=target)
        else:
            ec2.delete_security_group(GroupName=target)


class EipProvider(_Ec2):
    types = (EIP,)
    not_found_codes = frozenset({"InvalidAllocationID.NotFound", "InvalidAddress.NotFound"})
    action = "ReleaseAddress"

    def decode(self, ref: ResourceRef, physical_id: str) -> tuple[str | None, str | None]:
        return eip_target(physical_id)

    def _call(self, ec2: Any, ref: ResourceRef, target: tuple[str | None, str | None]) -> None:
        public_ip, allocation_id = target
        if allocation_id is None:
            # a bare IP: a VPC address is released by its allocation id only
            found = ec2.describe_addresses(PublicIps=[public_ip]).get("Addresses", [])
            if not found:
                raise NotFoundGone()
            allocation_id = found[0].get("AllocationId")
            if not allocation_id:
                ec2.release_address(PublicIp=public_ip)
                return
        ec2.release_address(AllocationId=allocation_id)


class NatGatewayProvider(_Ec2, Waits):
    types = (NAT_GATEWAY,)
    not_found_codes = frozenset({"NatGatewayNotFound", "InvalidNatGatewayID.NotFound"})
    action = "DeleteNatGateway"
    GONE: ClassVar[frozenset[str]] = frozenset({"deleting", "deleted"})

    def __init__(self, **waits: Any) -> None:
        Waits.__init__(self, **waits)

    def _state(self, ec2: Any, nat_id: str) -> str | None:
        found = ec2.describe_nat_gateways(NatGatewayIds=[nat_id]).get("NatGateways", [])
        return found[0].get("State") if found else None

    def _call(self, ec2: Any, ref: ResourceRef, target: str) -> str:
        state = self._state(ec2, target)
        if state is None or state in self.GONE:
            return NOT_FOUND  # someone else's delete (or an earlier attempt's) is under way
        ec2.delete_nat_gateway(NatGatewayId=target)
        # Its EIP and subnet, deleted after it, stay in use until the gateway is `deleted`.
        self.wait_for(
            ref,
            "the NAT gateway to be deleted",
            lambda: self._state(ec2, target) in (None, "deleted"),
            accepted=True,
        )
        return DELETED


PROVIDERS = (
    VpcProvider(),
    SubnetProvider(),
    RouteTableProvider(),
    RouteProvider(),
    SubnetRouteTableAssociationProvider(),
    InternetGatewayProvider(),
    GatewayAttachmentProvider(),
    SecurityGroupProvider(),
    EipProvider(),
    NatGatewayProvider(),
)
