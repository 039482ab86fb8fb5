"""AWS::SNS::Topic and AWS::SNS::Subscription.

DeleteTopic and Unsubscribe both succeed on something that does not exist, so each delete
reads first (GetTopicAttributes / GetSubscriptionAttributes) to tell "deleted" from
"not-found" honestly.

A subscription still pending confirmation has no ARN to unsubscribe (the record may hold
the `PendingConfirmation` placeholder, or SNS refuses Unsubscribe with "pending
confirmation"). CloudFormation and cdkd count that as deleted: the pending subscription
expires by itself within 3 days and goes with its topic. Skipping it instead would leave
every destroy of such a stack partial for no recoverable reason.
"""

from __future__ import annotations

import logging

from botocore.exceptions import ClientError

from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    Clients,
    ResourceRef,
    SdkProvider,
    Skip,
    describe,
    error_code,
    error_message,
    parse_arn,
    region_of,
)

log = logging.getLogger(__name__)

PENDING = frozenset({"PendingConfirmation", "pending confirmation"})


def _require_sns_arn(physical_id: str, what: str) -> None:
    arn = parse_arn(physical_id)
    if arn is None or arn.service != "sns":
        raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected an SNS {what} ARN)")


class TopicProvider(SdkProvider):
    types = ("AWS::SNS::Topic",)
    not_found_codes = frozenset({"NotFound", "NotFoundException"})
    action = "DeleteTopic"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        _require_sns_arn(physical_id, "topic")
        sns = clients("sns", region_of(ref, physical_id))
        sns.get_topic_attributes(TopicArn=physical_id)  # NotFound → "not-found"
        sns.delete_topic(TopicArn=physical_id)
        return DELETED


class SubscriptionProvider(SdkProvider):
    types = ("AWS::SNS::Subscription",)
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

    @staticmethod
    def _pending(ref: ResourceRef, physical_id: str) -> None:
        log.warning(
            "%s is pending confirmation and cannot be unsubscribed; counted as deleted as CloudFormation "
            "does (the pending subscription expires within 3 days, or with its topic)",
            describe(ref, physical_id),
        )


PROVIDERS = (TopicProvider(), SubscriptionProvider())
