"""AWS::SNS::Topic and AWS::SNS::Subscription.

DeleteTopic and Unsubscribe both succeed on something that does not exist, so each delete
reads first (GetTopicAttributes / GetSubscriptionAttributes) to tell "deleted" from
"not-found" honestly.

A subscription still pending confirmation has no ARN to unsubscribe (the record may hold
the `PendingConfirmation` placeholder, or SNS refuses Unsubscribe with "pending
confirmation"). CloudFormation and cdkd count that as deleted: the pending subscription
expires by itself within 3 days and goes with its topic. Skipping it instead would leave
every destroy of such a stack partial for no recoverable reason.

Deploy (reference 5.7): a topic's physical id is its ARN, attributes `TopicArn` and
`TopicName`; CreateTopic is name-idempotent, so the create first reads the ARN the name
would have and refuses to adopt a topic this stack does not record. A subscription's id is
its ARN (`ReturnSubscriptionArn`), with no attributes. A topic policy's id is the
comma-joined topic ARNs, with no attributes; its delete puts back SNS's default policy.
"""

from __future__ import annotations

import json
import logging
from typing import Any

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
    describe,
    error_code,
    error_message,
    js_scalar,
    parse_arn,
    provider_error,
    region_of,
    tag_delta,
    tag_map,
)

log = logging.getLogger(__name__)

PENDING = frozenset({"PendingConfirmation", "pending confirmation"})


def _require_sns_arn(physical_id: str, what: str) -> None:
    arn = parse_arn(physical_id)
    if arn is None or arn.service != "sns":
        raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected an SNS {what} ARN)")


TOPIC = "AWS::SNS::Topic"
SUBSCRIPTION = "AWS::SNS::Subscription"
NOT_FOUND_CODES = frozenset({"NotFound", "NotFoundException"})
TOPIC_ATTRIBUTES = (
    "DisplayName",
    "KmsMasterKeyId",
    "TracingConfig",
    "SignatureVersion",
    "ContentBasedDeduplication",
    "ArchivePolicy",
    "FifoThroughputScope",
)
SUBSCRIPTION_ATTRIBUTES = (
    "RawMessageDelivery",
    "FilterPolicy",
    "FilterPolicyScope",
    "RedrivePolicy",
    "DeliveryPolicy",
    "SubscriptionRoleArn",
    "ReplayPolicy",
)


def _sns_value(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else js_scalar(value)


def topic_name(logical_id: str, properties: dict, stack_name: str) -> str:
    name = physical_name(TOPIC, logical_id, properties, stack_name=stack_name)
    if properties.get("FifoTopic") in (True, "true") and not name.endswith(".fifo"):
        name = name[:251] + ".fifo"
    return name


class TopicProvider(SdkProvider, DeployCalls):
    types = (TOPIC,)
    handled = frozenset(TOPIC_ATTRIBUTES) | {"TopicName", "FifoTopic", "Tags"}
    not_found_codes = frozenset({"NotFound", "NotFoundException"})
    action = "DeleteTopic"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        _require_sns_arn(physical_id, "topic")
        sns = clients("sns", region_of(ref, physical_id))
        sns.get_topic_attributes(TopicArn=physical_id)  # NotFound → "not-found"
        sns.delete_topic(TopicArn=physical_id)
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = topic_name(logical_id, properties, target.stack_name)
        arn = f"arn:{target.partition}:sns:{target.region}:{target.account_id}:{name}"
        sns = clients("sns", target.region)
        try:
            sns.get_topic_attributes(TopicArn=arn)
        except ClientError as exc:
            if error_code(exc) not in NOT_FOUND_CODES:
                raise self._fail(logical_id, arn, "GetTopicAttributes", exc) from None
        else:
            raise already_exists(logical_id, resource_type, name)
        attrs = {k: _sns_value(properties[k]) for k in TOPIC_ATTRIBUTES if k in properties}
        if properties.get("FifoTopic") in (True, "true"):
            attrs["FifoTopic"] = "true"
        params: dict[str, Any] = {"Name": name}
        if attrs:
            params["Attributes"] = attrs
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
        made = self._guarded(logical_id, resource_type, name, "CreateTopic", sns.create_topic, **params)["TopicArn"]
        return CreateResult(made, {"TopicArn": made, "TopicName": name})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        arn = ref.physical_id or ""
        sns = clients("sns", region_of(ref, arn))
        old = ref.properties
        for key in TOPIC_ATTRIBUTES:
            if key in properties and old.get(key) != properties[key]:
                value = _sns_value(properties[key])
            elif key in old and key not in properties:
                value = ""  # removed: back to SNS's default
            else:
                continue
            self._guarded(
                ref.logical_id,
                TOPIC,
                arn,
                "SetTopicAttributes",
                sns.set_topic_attributes,
                TopicArn=arn,
                AttributeName=key,
                AttributeValue=value,
            )
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        if remove:
            self._guarded(
                ref.logical_id, TOPIC, arn, "UntagResource", sns.untag_resource, ResourceArn=arn, TagKeys=remove
            )
        if add:
            tags = [{"Key": k, "Value": v} for k, v in add.items()]
            self._guarded(ref.logical_id, TOPIC, arn, "TagResource", sns.tag_resource, ResourceArn=arn, Tags=tags)
        return UpdateResult(arn, {"TopicArn": arn, "TopicName": arn.rsplit(":", 1)[-1]})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        """observedProperties in cdkd's shape (the sample record's SNS entry)."""
        arn = ref.physical_id or ""
        try:
            sns = clients("sns", region_of(ref, arn))
            attrs = sns.get_topic_attributes(TopicArn=arn).get("Attributes", {})
            tags = sns.list_tags_for_resource(ResourceArn=arn).get("Tags", [])
        except ClientError:
            return None
        return {
            "TopicName": arn.rsplit(":", 1)[-1],
            "DisplayName": attrs.get("DisplayName", ""),
            "KmsMasterKeyId": attrs.get("KmsMasterKeyId", ""),
            "TracingConfig": attrs.get("TracingConfig", ""),
            "SignatureVersion": attrs.get("SignatureVersion", ""),
            "DeliveryStatusLogging": [],
            "Tags": [{"Key": t["Key"], "Value": t["Value"]} for t in tags],
        }

    def _attributes(self, clients: Clients, ref: ResourceRef) -> dict[str, Any]:
        arn = ref.physical_id or ""
        clients("sns", region_of(ref, arn)).get_topic_attributes(TopicArn=arn)
        return {"TopicArn": arn, "TopicName": arn.rsplit(":", 1)[-1]}

    @staticmethod
    def _fail(logical_id: str, arn: str, action: str, exc: ClientError) -> ProviderError:
        return provider_error(ResourceRef(logical_id, TOPIC, arn), action, exc)


class SubscriptionProvider(SdkProvider, DeployCalls):
    types = (SUBSCRIPTION,)
    handled = frozenset(SUBSCRIPTION_ATTRIBUTES) | {"TopicArn", "Protocol", "Endpoint", "Region"}
    not_found_codes = frozenset({"NotFound", "NotFoundException"})
    action = "Unsubscribe"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        if physical_id in PENDING:
            self._pending(ref, physical_id)
            return DELETED
        _require_sns_arn(physical_id, "subscription")
        sns = clients("sns", region_of(ref, physical_id))
        try:
            sns.get_subscription_attributes(SubscriptionArn=physical_id)  # NotFound → "not-found"
            sns.unsubscribe(SubscriptionArn=physical_id)
        except ClientError as exc:
            if error_code(exc) in ("InvalidParameter", "InvalidParameterException") and (
                "pending confirmation" in error_message(exc).lower()
            ):
                self._pending(ref, physical_id)
                return DELETED
            raise
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        topic = properties.get("TopicArn")
        if not isinstance(topic, str):
            raise ProviderError(f"{logical_id} ({SUBSCRIPTION}): TopicArn must be a topic ARN")
        region = properties.get("Region") if isinstance(properties.get("Region"), str) else None
        arn = parse_arn(topic)
        sns = clients("sns", region or (arn.region if arn else "") or target.region)
        params: dict[str, Any] = {
            "TopicArn": topic,
            "Protocol": properties.get("Protocol"),
            "ReturnSubscriptionArn": True,
        }
        if "Endpoint" in properties:
            params["Endpoint"] = properties["Endpoint"]
        attrs = {k: _sns_value(properties[k]) for k in SUBSCRIPTION_ATTRIBUTES if k in properties}
        if attrs:
            params["Attributes"] = attrs
        made = self._guarded(logical_id, resource_type, topic, "Subscribe", sns.subscribe, **params)["SubscriptionArn"]
        return CreateResult(made, {})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        arn = ref.physical_id or ""
        sns = clients("sns", region_of(ref, arn))
        old = ref.properties
        for key in SUBSCRIPTION_ATTRIBUTES:
            if key in properties and old.get(key) != properties[key]:
                value = _sns_value(properties[key])
            elif key in old and key not in properties:
                value = "false" if key == "RawMessageDelivery" else ""
            else:
                continue
            self._guarded(
                ref.logical_id,
                SUBSCRIPTION,
                arn,
                "SetSubscriptionAttributes",
                sns.set_subscription_attributes,
                SubscriptionArn=arn,
                AttributeName=key,
                AttributeValue=value,
            )
        return UpdateResult(arn, {})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        arn = ref.physical_id or ""
        try:
            attrs = clients("sns", region_of(ref, arn)).get_subscription_attributes(SubscriptionArn=arn)["Attributes"]
        except (ClientError, Skip):
            return None
        out: dict[str, Any] = {
            "TopicArn": attrs.get("TopicArn"),
            "Protocol": attrs.get("Protocol"),
            "Endpoint": attrs.get("Endpoint"),
            "RawMessageDelivery": attrs.get("RawMessageDelivery", "false") == "true",
        }
        if attrs.get("FilterPolicy"):
            out["FilterPolicy"] = json.loads(attrs["FilterPolicy"])
        return out

    @staticmethod
    def _pending(ref: ResourceRef, physical_id: str) -> None:
        log.warning(
            "%s is pending confirmation and cannot be unsubscribed; counted as deleted as CloudFormation "
            "does (the pending subscription expires within 3 days, or with its topic)",
            describe(ref, physical_id),
        )


def default_topic_policy(topic_arn: str) -> dict[str, Any]:
    """The policy SNS gives a new topic (what a deleted AWS::SNS::TopicPolicy leaves)."""
    arn = parse_arn(topic_arn)
    owner = arn.account if arn else ""
    return {
        "Version": "2008-10-17",
        "Id": "__default_policy_ID",
        "Statement": [
            {
                "Sid": "__default_statement_ID",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": [
                    "SNS:GetTopicAttributes",
                    "SNS:SetTopicAttributes",
                    "SNS:AddPermission",
                    "SNS:RemovePermission",
                    "SNS:DeleteTopic",
                    "SNS:Subscribe",
                    "SNS:ListSubscriptionsByTopic",
                    "SNS:Publish",
                ],
                "Resource": topic_arn,
                "Condition": {"StringEquals": {"AWS:SourceOwner": owner}},
            }
        ],
    }


class TopicPolicyProvider(SdkProvider, DeployCalls):
    """AWS::SNS::TopicPolicy: the `Policy` attribute of each topic in `Topics`."""

    types = ("AWS::SNS::TopicPolicy",)
    handled = frozenset({"PolicyDocument", "Topics"})
    not_found_codes = NOT_FOUND_CODES
    action = "SetTopicAttributes"

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        topics = self._topics(logical_id, properties)
        for topic in topics:
            self._set(clients, logical_id, topic, properties.get("PolicyDocument"), target.region)
        return CreateResult(",".join(topics), {})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        topics = self._topics(ref.logical_id, properties)
        for topic in topics:
            self._set(clients, ref.logical_id, topic, properties.get("PolicyDocument"), ref.region)
        for topic in self._listed(ref.properties):
            if topic not in topics:
                self._set(clients, ref.logical_id, topic, default_topic_policy(topic), ref.region)
        return UpdateResult(",".join(topics), {})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        topics = self._listed(ref.properties)
        if not topics:
            return None
        try:
            arn = parse_arn(topics[0])
            attrs = clients("sns", (arn.region if arn else "") or ref.region).get_topic_attributes(TopicArn=topics[0])
        except ClientError:
            return None
        policy = attrs.get("Attributes", {}).get("Policy")
        return {"Topics": topics, "PolicyDocument": json.loads(policy) if policy else {}}

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        topics = self._listed(ref.properties) or [t for t in physical_id.split(",") if t]
        found = False
        for topic in topics:
            arn = parse_arn(topic)
            sns = clients("sns", (arn.region if arn else "") or ref.region)
            try:
                sns.set_topic_attributes(
                    TopicArn=topic, AttributeName="Policy", AttributeValue=json.dumps(default_topic_policy(topic))
                )
                found = True
            except ClientError as exc:
                if error_code(exc) not in NOT_FOUND_CODES:
                    raise
        return DELETED if found else NOT_FOUND

    @staticmethod
    def _listed(properties: dict) -> list[str]:
        topics = properties.get("Topics")
        return [t for t in topics if isinstance(t, str)] if isinstance(topics, list) else []

    def _topics(self, logical_id: str, properties: dict) -> list[str]:
        topics = self._listed(properties)
        if not topics:
            raise ProviderError(f"{logical_id} (AWS::SNS::TopicPolicy): Topics must list at least one topic ARN")
        return topics

    def _set(self, clients: Clients, logical_id: str, topic: str, document: Any, region: str) -> None:
        arn = parse_arn(topic)
        sns = clients("sns", (arn.region if arn else "") or region)
        self._guarded(
            logical_id,
            "AWS::SNS::TopicPolicy",
            topic,
            "SetTopicAttributes",
            sns.set_topic_attributes,
            TopicArn=topic,
            AttributeName="Policy",
            AttributeValue=json.dumps(document, separators=(",", ":")),
        )


PROVIDERS = (TopicProvider(), SubscriptionProvider())
DEPLOY_ONLY = (TopicPolicyProvider(),)  # not in the destroy registry: destroy keeps its routing
