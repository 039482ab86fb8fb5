"""AWS::SQS::Queue: GetQueueUrl, then DeleteQueue.

The physical id is the queue URL cdkd recorded. Its host is not trusted: a record written
against a local moto server holds `http://127.0.0.1:PORT/ACCOUNT/NAME`, and an AWS one may use
the legacy `queue.amazonaws.com` host. So the queue's name and owner are read from the URL's
path and the URL to delete is asked of the endpoint in use (GetQueueUrl). An ARN or a bare
name is accepted too.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    Clients,
    ResourceRef,
    SdkProvider,
    Skip,
    parse_arn,
)

QUEUE_NAME = re.compile(r"^[\w-]{1,80}(\.fifo)?$")
ACCOUNT = re.compile(r"^\d{12}$")
# sqs.<region>.amazonaws.com[.cn] and the legacy <region>.queue.amazonaws.com
SQS_HOST = re.compile(r"^(?:sqs\.([a-z0-9-]+)|([a-z0-9-]+)\.queue)\.amazonaws\.com(?:\.cn)?$")


def parse_queue(physical_id: str, default_region: str) -> tuple[str, str | None, str]:
    """(queue name, owner account or None, region) of a queue URL, ARN or name; Skip when
    it decodes to none of them."""
    arn = parse_arn(physical_id)
    if arn is not None:
        if arn.service == "sqs" and QUEUE_NAME.match(arn.resource):
            return arn.resource, arn.account or None, arn.region or default_region
        raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected an SQS queue URL, got an ARN of another kind)")
    if "://" not in physical_id:
        if QUEUE_NAME.match(physical_id):
            return physical_id, None, default_region
        raise Skip(
            f"{COMPOSITE_ID_SKIP_REASON} (expected a queue URL https://sqs.<region>.amazonaws.com/<account>/<name>)"
        )
    parts = urlsplit(physical_id)
    segments = [s for s in parts.path.split("/") if s]
    if len(segments) != 2 or not ACCOUNT.match(segments[0]) or not QUEUE_NAME.match(segments[1]):
        raise Skip(
            f"{COMPOSITE_ID_SKIP_REASON} (expected a queue URL https://sqs.<region>.amazonaws.com/<account>/<name>)"
        )
    region = default_region
    match = SQS_HOST.match(parts.hostname or "")
    if match:
        region = match.group(1) or match.group(2) or default_region
    elif (parts.hostname or "") == "queue.amazonaws.com":
        region = "us-east-1"
    return segments[1], segments[0], region


class QueueProvider(SdkProvider):
    types = ("AWS::SQS::Queue",)
    # The JSON protocol answers QueueDoesNotExist; the query protocol the long form.
    not_found_codes = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
    action = "DeleteQueue"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        name, owner, region = parse_queue(physical_id, ref.region)
        sqs = clients("sqs", region)
        params = {"QueueName": name}
        if owner:
            params["QueueOwnerAWSAccountId"] = owner
        url = sqs.get_queue_url(**params)["QueueUrl"]
        sqs.delete_queue(QueueUrl=url)
        return DELETED


PROVIDERS = (QueueProvider(),)
