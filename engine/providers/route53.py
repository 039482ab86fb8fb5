"""AWS::Route53::HostedZone: empty the zone, then DeleteHostedZone.

The physical id is the zone id (`Z123...`, also accepted as `/hostedzone/Z123...`). Route 53
refuses to delete a zone holding records other than its apex NS and SOA (HostedZoneNotEmpty),
so every other record set is deleted first, in batches (a delegation NS below the apex is
such a record too). The records of a zone are what the zone serves: a zone this stack owns
goes with them, as CloudFormation's delete of an emptied zone would.
"""

from __future__ import annotations

from typing import Any

from engine.providers.base import DELETED, Clients, ResourceRef, SdkProvider

HOSTED_ZONE = "AWS::Route53::HostedZone"
BATCH = 100  # well under Route 53's 1000-change / 32000-character limits


def zone_id(physical_id: str) -> str:
    return physical_id.rsplit("/", 1)[-1]


def _record_sets(r53: Any, zone: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    params: dict[str, Any] = {"HostedZoneId": zone}
    while True:
        page = r53.list_resource_record_sets(**params)
        records.extend(page.get("ResourceRecordSets", []))
        if not page.get("IsTruncated"):
            return records
        params["StartRecordName"] = page["NextRecordName"]
        params["StartRecordType"] = page["NextRecordType"]
        if page.get("NextRecordIdentifier"):
            params["StartRecordIdentifier"] = page["NextRecordIdentifier"]
        else:
            params.pop("StartRecordIdentifier", None)


class HostedZoneProvider(SdkProvider):
    types = (HOSTED_ZONE,)
    not_found_codes = frozenset({"NoSuchHostedZone"})
    action = "DeleteHostedZone"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        zone = zone_id(physical_id)
        r53 = clients("route53", "us-east-1")  # Route 53 is global
        apex = r53.get_hosted_zone(Id=zone)["HostedZone"]["Name"]  # NoSuchHostedZone → "not-found"
        doomed = [r for r in _record_sets(r53, zone) if not (r["Name"] == apex and r["Type"] in ("NS", "SOA"))]
        for start in range(0, len(doomed), BATCH):
            changes = [{"Action": "DELETE", "ResourceRecordSet": r} for r in doomed[start : start + BATCH]]
            r53.change_resource_record_sets(HostedZoneId=zone, ChangeBatch={"Changes": changes})
        r53.delete_hosted_zone(Id=zone)
        return DELETED


PROVIDERS = (HostedZoneProvider(),)
