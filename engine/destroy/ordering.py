"""cdkd's delete order: the record's own edges (`engine.graph`) plus its implicit ones.

cdkd adds two families of edges AWS enforces but no Ref shows (reference §8.2 step 6, E16;
`implicit-delete-deps.ts`):

- type pairs: every resource of type KEY is deleted after every resource of the listed types
  in the same record (an internet gateway cannot go while a VPC gateway attachment still
  attaches it; a subnet races a deleted Lambda function's ENI detach);
- per resource: a CloudWatch composite alarm before each alarm its AlarmRule names.

An implicit edge that would close a cycle with the record's own edges is left out (the
record's order wins) and reported, so a record cdkd can order is never refused here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.graph import DependencyGraph, build_graph

# KEY -> the types deleted BEFORE it (cdkd's IMPLICIT_DELETE_DEPENDENCIES).
IMPLICIT_DELETE_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    # detached first; a NAT gateway's EIP must release its mapped address before the IGW goes
    "AWS::EC2::InternetGateway": ("AWS::EC2::VPCGatewayAttachment", "AWS::EC2::NatGateway"),
    "AWS::EC2::VPCGatewayAttachment": ("AWS::EC2::NatGateway",),
    "AWS::Events::EventBus": ("AWS::Events::Rule",),
    "AWS::Athena::WorkGroup": ("AWS::Athena::NamedQuery",),
    "AWS::CloudFront::ResponseHeadersPolicy": ("AWS::CloudFront::Distribution",),
    "AWS::CloudFront::CachePolicy": ("AWS::CloudFront::Distribution",),
    "AWS::CloudFront::OriginAccessControl": ("AWS::CloudFront::Distribution",),
    "AWS::EC2::VPC": (
        "AWS::EC2::Subnet",
        "AWS::EC2::SecurityGroup",
        "AWS::EC2::InternetGateway",
        "AWS::EC2::EgressOnlyInternetGateway",
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::EC2::RouteTable",
    ),
    # a deleted function's ENI is detached asynchronously: DependencyViolation otherwise
    "AWS::EC2::Subnet": ("AWS::EC2::SubnetRouteTableAssociation", "AWS::Lambda::Function"),
    "AWS::EC2::RouteTable": ("AWS::EC2::Route", "AWS::EC2::SubnetRouteTableAssociation"),
    "AWS::EC2::SecurityGroup": (
        "AWS::EC2::SecurityGroupIngress",
        "AWS::EC2::SecurityGroupEgress",
        "AWS::Lambda::Function",
    ),
}

ALARM = "AWS::CloudWatch::Alarm"
COMPOSITE_ALARM = "AWS::CloudWatch::CompositeAlarm"
# ALARM(name), OK("name"), INSUFFICIENT_DATA('arn:...:alarm:name')
_ALARM_CALL = re.compile(r"\b(?:ALARM|OK|INSUFFICIENT_DATA)\(\s*(?:\"([^\"]*)\"|'([^']*)'|([^)\s]*))\s*\)")


def referenced_alarm_names(rule: Any) -> list[str]:
    """The alarm names an AlarmRule names, each once, an ARN reduced to its trailing name."""
    if not isinstance(rule, str):
        return []
    names: dict[str, None] = {}
    for match in _ALARM_CALL.finditer(rule[:100_000]):
        name = next((g for g in match.groups() if g), "")
        if ":alarm:" in name:
            name = name.rsplit(":alarm:", 1)[1]
        if name:
            names.setdefault(name, None)
    return list(names)


def _alarm_name(row: Mapping[str, Any]) -> str | None:
    properties = row.get("properties")
    name = properties.get("AlarmName") if isinstance(properties, dict) else None
    if isinstance(name, str) and name:
        return name
    physical_id = row.get("physicalId")
    return physical_id if isinstance(physical_id, str) and physical_id else None


def implicit_edges(rows: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(first, then): `first` is deleted before `then`; in record order, no self edge."""
    by_type: dict[str, list[str]] = {}
    for lid, row in rows.items():
        rtype = row.get("resourceType")
        if isinstance(rtype, str):
            by_type.setdefault(rtype, []).append(lid)
    edges: list[tuple[str, str]] = []
    for lid, row in rows.items():
        for before_type in IMPLICIT_DELETE_DEPENDENCIES.get(str(row.get("resourceType")), ()):
            edges += [(first, lid) for first in by_type.get(before_type, []) if first != lid]
    names: dict[str, str] = {}
    for lid in by_type.get(ALARM, []) + by_type.get(COMPOSITE_ALARM, []):
        name = _alarm_name(rows[lid])
        if name:
            names.setdefault(name, lid)
    for lid in by_type.get(COMPOSITE_ALARM, []):
        properties = rows[lid].get("properties")
        rule = properties.get("AlarmRule") if isinstance(properties, dict) else None
        for name in referenced_alarm_names(rule):
            target = names.get(name)
            if target and target != lid:
                edges.append((lid, target))
    return edges


def _reaches(graph: DependencyGraph, start: str, goal: str) -> bool:
    seen = {start}
    todo = [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in graph.depends_on[node]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def destroy_graph(rows: Mapping[str, Mapping[str, Any]]) -> tuple[DependencyGraph, list[tuple[str, str]]]:
    """The record's graph with cdkd's implicit delete edges added; and the implicit edges left
    out because they would close a cycle. Raises nothing itself (`levels()` may: CycleError)."""
    graph = build_graph(rows)
    dropped: list[tuple[str, str]] = []
    cyclic = graph.find_cycle() is not None  # the record's own cycle is refused by the caller
    for first, then in implicit_edges(rows):
        # "first is deleted before then" is "first depends on then" in graph terms
        if then in graph.depends_on[first]:
            continue
        if not cyclic and _reaches(graph, then, first):
            dropped.append((first, then))
            continue
        graph.depends_on[first].append(then)
    return graph, dropped
