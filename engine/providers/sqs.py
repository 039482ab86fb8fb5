"""AWS::SQS::Queue (create, update, read, delete) and AWS::SQS::QueuePolicy (deploy only).

Delete: GetQueueUrl, then DeleteQueue.

The physical id is the queue URL cdkd recorded. Its host is not trusted: a record written
against a local moto server holds `http://127.0.0.1:PORT/ACCOUNT/NAME`, and an AWS one may use
the legacy `queue.amazonaws.com` host. So the queue's name and owner are read from the URL's
path and the URL to delete is asked of the endpoint in use (GetQueueUrl). An ARN or a bare
name is accepted too.

Create (cdkd's SQS provider, reference 5.7): the queue URL is the physical id, attributes
`Arn`, `QueueUrl`, `QueueName`; every property but the name and Tags is sent as a string
attribute (`RedrivePolicy`/`RedriveAllowPolicy` JSON-encoded). CreateQueue is
name-idempotent, so the create first asks whether the name is taken and refuses to adopt a
queue this stack does not record. Update sends only what changed, resets a removed
property to its CloudFormation default, never sends `FifoQueue`, and diffs the tags.

The queue policy (no delete of its own in destroy: destroy routes it as before) records
the first queue's URL as its physical id and no attributes.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from engine.deploy.names import physical_name
from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    NOT_FOUND,
    Clients,
    CreateResult,
    DeployCalls,
    DeployTarget,
    ProviderError,
    ResourceRef,
    SdkProvider,
    Skip,
    UpdateResult,
    already_exists,
    error_code,
    js_scalar,
    parse_arn,
    provider_error,
    tag_delta,
    tag_map,
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


QUEUE = "AWS::SQS::Queue"
# property -> the value a removed property is reset to (CloudFormation's defaults)
RESETS = {
    "DelaySeconds": "0",
    "MaximumMessageSize": "262144",
    "MessageRetentionPeriod": "345600",
    "ReceiveMessageWaitTimeSeconds": "0",
    "VisibilityTimeout": "30",
    "RedrivePolicy": "",
    "RedriveAllowPolicy": "",
    "KmsMasterKeyId": "",
    "KmsDataKeyReusePeriodSeconds": "300",
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "queue",
    "FifoThroughputLimit": "perQueue",
    "SqsManagedSseEnabled": "true",
}
ATTRIBUTE_PROPS = frozenset(RESETS) | {"FifoQueue"}
JSON_PROPS = frozenset({"RedrivePolicy", "RedriveAllowPolicy"})
NOT_EXIST = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})


def _attribute_value(key: str, value: Any) -> str:
    if key in JSON_PROPS and isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return js_scalar(value)


def queue_name(resource_type: str, logical_id: str, properties: dict, stack_name: str) -> str:
    name = physical_name(resource_type, logical_id, properties, stack_name=stack_name)
    if properties.get("FifoQueue") in (True, "true") and not name.endswith(".fifo"):
        name = name[:75] + ".fifo"
    return name


def _int_or(value: Any, default: Any) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class QueueProvider(SdkProvider, DeployCalls):
    types = (QUEUE,)
    handled = ATTRIBUTE_PROPS | {"QueueName", "Tags"}
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

    # -- deploy ------------------------------------------------------------------------

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = queue_name(resource_type, logical_id, properties, target.stack_name)
        sqs = clients("sqs", target.region)
        try:
            sqs.get_queue_url(QueueName=name)
        except ClientError as exc:
            if error_code(exc) not in NOT_EXIST:
                raise self._error(logical_id, name, "GetQueueUrl", exc) from None
        else:
            raise already_exists(logical_id, resource_type, name)
        params: dict[str, Any] = {"QueueName": name}
        attrs = {k: _attribute_value(k, v) for k, v in properties.items() if k in ATTRIBUTE_PROPS}
        if attrs:
            params["Attributes"] = attrs
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["tags"] = tags
        url = self._guarded(logical_id, resource_type, name, "CreateQueue", sqs.create_queue, **params)["QueueUrl"]
        return CreateResult(url, self._derived(url, name, target))

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        url = ref.physical_id or ""
        name, _owner, region = parse_queue(url, ref.region)
        sqs = clients("sqs", region)
        live_url = self._guarded(ref.logical_id, QUEUE, url, "GetQueueUrl", sqs.get_queue_url, QueueName=name)[
            "QueueUrl"
        ]
        old = ref.properties
        changed = {
            k: _attribute_value(k, v)
            for k, v in properties.items()
            if k in ATTRIBUTE_PROPS and k != "FifoQueue" and old.get(k) != v
        }
        for k in old:
            if k in RESETS and k not in properties:
                changed[k] = RESETS[k]
        if changed:
            self._guarded(
                ref.logical_id,
                QUEUE,
                url,
                "SetQueueAttributes",
                sqs.set_queue_attributes,
                QueueUrl=live_url,
                Attributes=changed,
            )
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        if remove:
            self._guarded(ref.logical_id, QUEUE, url, "UntagQueue", sqs.untag_queue, QueueUrl=live_url, TagKeys=remove)
        if add:
            self._guarded(ref.logical_id, QUEUE, url, "TagQueue", sqs.tag_queue, QueueUrl=live_url, Tags=add)
        return UpdateResult(url, self._derived(url, name, target))

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        """observedProperties in cdkd's shape (the sample record's SQS entry)."""
        try:
            name, _owner, region = parse_queue(ref.physical_id or "", ref.region)
            sqs = clients("sqs", region)
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]).get("Attributes", {})
            tags = sqs.list_queue_tags(QueueUrl=url).get("Tags", {})
        except (ClientError, Skip):
            return None
        redrive = attrs.get("RedrivePolicy")
        out = {
            "QueueName": name,
            "VisibilityTimeout": _int_or(attrs.get("VisibilityTimeout"), 30),
            "MaximumMessageSize": _int_or(attrs.get("MaximumMessageSize"), 262144),
            "MessageRetentionPeriod": _int_or(attrs.get("MessageRetentionPeriod"), 345600),
            "DelaySeconds": _int_or(attrs.get("DelaySeconds"), 0),
            "ReceiveMessageWaitTimeSeconds": _int_or(attrs.get("ReceiveMessageWaitTimeSeconds"), 0),
            "SqsManagedSseEnabled": attrs.get("SqsManagedSseEnabled", "false") == "true",
            "KmsMasterKeyId": attrs.get("KmsMasterKeyId", ""),
            "RedrivePolicy": json.loads(redrive) if redrive else {},
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        }
        if attrs.get("FifoQueue") == "true":
            out["FifoQueue"] = True
        return out

    def _attributes(self, clients: Clients, ref: ResourceRef) -> dict[str, Any]:
        name, owner, region = parse_queue(ref.physical_id or "", ref.region)
        sqs = clients("sqs", region)
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return {"Arn": arn, "QueueUrl": ref.physical_id, "QueueName": name}

    @staticmethod
    def _derived(url: str, name: str, target: DeployTarget) -> dict[str, Any]:
        # derived from the URL, as cdkd records them (no extra read)
        arn = f"arn:{target.partition}:sqs:{target.region}:{target.account_id}:{name}"
        return {"Arn": arn, "QueueUrl": url, "QueueName": name}

    def _error(self, logical_id: str, name: str, action: str, exc: ClientError) -> Exception:
        return provider_error(ResourceRef(logical_id, QUEUE, name), action, exc)


class QueuePolicyProvider(SdkProvider, DeployCalls):
    """AWS::SQS::QueuePolicy: the `Policy` attribute of each queue in `Queues`."""

    types = ("AWS::SQS::QueuePolicy",)
    handled = frozenset({"PolicyDocument", "Queues"})
    not_found_codes = NOT_EXIST
    action = "SetQueueAttributes"

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        queues = self._queues(logical_id, properties)
        self._apply(clients, logical_id, queues, properties.get("PolicyDocument"), target.region)
        return CreateResult(queues[0], {})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        queues = self._queues(ref.logical_id, properties)
        self._apply(clients, ref.logical_id, queues, properties.get("PolicyDocument"), ref.region)
        for queue in self._queues_or_empty(ref.properties):
            if queue in queues:
                continue
            try:  # a queue the policy no longer names loses it; one that is gone needs nothing
                self._apply(clients, ref.logical_id, [queue], None, ref.region)
            except ProviderError as exc:
                if exc.aws_code not in NOT_EXIST:
                    raise
        return UpdateResult(queues[0], {})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        queues = self._queues_or_empty(ref.properties)
        if not queues:
            return None
        try:
            name, _o, region = parse_queue(queues[0], ref.region)
            sqs = clients("sqs", region)
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
            policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {})
        except (ClientError, Skip):
            return None
        doc = policy.get("Policy")
        return {"Queues": queues, "PolicyDocument": json.loads(doc) if doc else {}}

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        queues = self._queues_or_empty(ref.properties) or [physical_id]
        found = False
        for queue in queues:
            name, _o, region = parse_queue(queue, ref.region)
            sqs = clients("sqs", region)
            try:
                url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
            except ClientError as exc:
                if error_code(exc) in NOT_EXIST:
                    continue
                raise
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
            found = True
        return DELETED if found else NOT_FOUND

    @staticmethod
    def _queues_or_empty(properties: dict) -> list[str]:
        queues = properties.get("Queues")
        return [q for q in queues if isinstance(q, str)] if isinstance(queues, list) else []

    def _queues(self, logical_id: str, properties: dict) -> list[str]:
        queues = self._queues_or_empty(properties)
        if not queues:
            raise ProviderError(f"{logical_id} (AWS::SQS::QueuePolicy): Queues must list at least one queue URL")
        return queues

    def _apply(self, clients: Clients, logical_id: str, queues: list[str], document: Any, region: str) -> None:
        value = "" if document is None else json.dumps(document, separators=(",", ":"))
        for queue in queues:
            name, _o, q_region = parse_queue(queue, region)
            sqs = clients("sqs", q_region)
            rtype = "AWS::SQS::QueuePolicy"
            url = self._guarded(logical_id, rtype, queue, "GetQueueUrl", sqs.get_queue_url, QueueName=name)["QueueUrl"]
            self._guarded(
                logical_id,
                rtype,
                queue,
                "SetQueueAttributes",
                sqs.set_queue_attributes,
                QueueUrl=url,
                Attributes={"Policy": value},
            )


PROVIDERS = (QueueProvider(),)
DEPLOY_ONLY = (QueuePolicyProvider(),)  # not in the destroy registry: destroy keeps its routing
