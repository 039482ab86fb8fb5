"""The Cloud Control route: `provisionedBy: cc-api` rows and every type without an SDK provider.

DeleteResource(TypeName, Identifier=physical id), then GetResourceRequestStatus on its
request token until the operation ends (reference: deploy-engine.md §5.3):
- SUCCESS → "deleted";
- ResourceNotFoundException from DeleteResource, or FAILED with ErrorCode NotFound →
  "not-found";
- FAILED (any other code) or CANCEL_COMPLETE → ProviderError with the status message and code;
- still running at the deadline → ProviderError naming the request token (the delete may
  still finish; a re-run then sees "not-found").
Polling starts at `poll_interval` and grows by `backoff` up to `max_interval` (cdkd: 1 s,
×1.5, capped at 10 s; 15 min ceiling). Throttling answers are retried with the same backoff,
a bounded number of times, on top of the SDK's own retries.

Types Cloud Control cannot handle (cdkd's block list: IAM principals, Lambda layer versions,
bucket policies, nested stacks, wait conditions, custom resources, hosted zones) are skipped
with a reason and no AWS call: cdkd Admin has no provider that could delete them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine.aws import bounded
from engine.providers.base import (
    DELETED,
    NOT_FOUND,
    Clients,
    CreateResult,
    DeployTarget,
    ProviderError,
    ResourceRef,
    Skip,
    UpdateResult,
    describe,
    error_code,
    provider_error,
    require_physical_id,
)

log = logging.getLogger(__name__)

# Types the Cloud Control API cannot provision or delete (cdkd's provider-registry list).
NOT_CLOUD_CONTROL = frozenset(
    {
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
        "AWS::IAM::User",
        "AWS::IAM::Group",
        "AWS::IAM::InstanceProfile",
        "AWS::Lambda::LayerVersion",
        "AWS::S3::BucketPolicy",
        "AWS::CloudFormation::Stack",
        "AWS::CloudFormation::WaitCondition",
        "AWS::CloudFormation::WaitConditionHandle",
        "AWS::CloudFormation::CustomResource",
        "AWS::Route53::HostedZone",
    }
)
NOTHING_IN_AWS = frozenset({"AWS::CDK::Metadata"})  # a template marker; no AWS resource behind it
THROTTLE_CODES = frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException", "RequestLimitExceeded"})


def cloud_control_can_delete(resource_type: str) -> bool:
    return not (resource_type in NOT_CLOUD_CONTROL or resource_type.startswith("Custom::"))


class CloudControlProvider:
    types: tuple[str, ...] = ()  # the fallback: not registered for any type by name
    supports_snapshot = False  # Cloud Control cannot be told to take a final snapshot

    def __init__(
        self,
        *,
        poll_interval: float = 1.0,
        backoff: float = 1.5,
        max_interval: float = 10.0,
        timeout: float = 900.0,
        throttle_retries: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.poll_interval = poll_interval
        self.backoff = backoff
        self.max_interval = max_interval
        self.timeout = timeout
        self.throttle_retries = throttle_retries
        self.sleep = sleep
        self.clock = clock

    def delete(self, clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str:
        if ref.resource_type in NOTHING_IN_AWS:
            return NOT_FOUND
        physical_id = require_physical_id(ref)
        if not cloud_control_can_delete(ref.resource_type):
            raise Skip(
                f"no provider for {ref.resource_type} in cdkd Admin and Cloud Control cannot delete it: "
                f"delete it by hand, then orphan the row"
            )
        if snapshot:
            raise ProviderError(
                f"{describe(ref, physical_id)}: DeletionPolicy Snapshot cannot be honoured on the Cloud Control "
                f"route; the resource was not deleted"
            )
        cc = clients("cloudcontrol", ref.region)
        try:
            event = self._call(cc.delete_resource, TypeName=ref.resource_type, Identifier=physical_id)["ProgressEvent"]
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return NOT_FOUND
            raise provider_error(ref, "cloudcontrol:DeleteResource", exc) from None
        except BotoCoreError as exc:
            raise ProviderError(f"{describe(ref)}: cloudcontrol:DeleteResource failed: {bounded(str(exc))}") from None
        outcome = self._wait(cc, ref, event)
        log.info("%s: %s (Cloud Control)", describe(ref), outcome)
        return outcome

    def _wait(self, cc: Any, ref: ResourceRef, event: dict) -> str:
        event = self._poll(cc, ref, event, "delete", hint="; it may still finish: check it, then run the destroy again")
        status, token = event.get("OperationStatus"), event.get("RequestToken", "")
        if status == "SUCCESS":
            return DELETED
        if status == "FAILED":
            code = event.get("ErrorCode")
            if code == "NotFound":
                return NOT_FOUND
            raise ProviderError(
                f"{describe(ref)}: Cloud Control delete FAILED ({code or 'no error code'}): "
                f"{bounded(event.get('StatusMessage') or 'no status message')} (request token {token})",
                aws_code=code,
            )
        raise ProviderError(
            f"{describe(ref)}: Cloud Control delete was cancelled (CANCEL_COMPLETE): "
            f"{bounded(event.get('StatusMessage') or 'no status message')} (request token {token})",
            aws_code=event.get("ErrorCode"),
        )

    def _poll(self, cc: Any, ref: ResourceRef, event: dict, verb: str, *, hint: str = "") -> dict:
        """Poll the request until it ends (SUCCESS, FAILED or CANCEL_COMPLETE) and return
        that event; past the timeout, raise naming the request token."""
        token = event.get("RequestToken", "")
        deadline = self.clock() + self.timeout
        interval = self.poll_interval
        while True:
            status = event.get("OperationStatus")
            if status in ("SUCCESS", "FAILED", "CANCEL_COMPLETE"):
                return event
            if self.clock() >= deadline:
                raise ProviderError(
                    f"{describe(ref)}: Cloud Control {verb} still {status} after {self.timeout:.0f}s "
                    f"(request token {token}){hint}"
                )
            self.sleep(interval)
            interval = min(interval * self.backoff, self.max_interval)
            try:
                event = self._call(cc.get_resource_request_status, RequestToken=token)["ProgressEvent"]
            except (ClientError, BotoCoreError) as exc:
                raise provider_error(ref, "cloudcontrol:GetResourceRequestStatus", exc) from None

    def _call(self, method: Callable[..., Any], **params: Any) -> Any:
        """`method(**params)`, retrying throttling answers with backoff."""
        delay = self.poll_interval
        for attempt in range(self.throttle_retries + 1):
            try:
                return method(**params)
            except ClientError as exc:
                if error_code(exc) not in THROTTLE_CODES or attempt == self.throttle_retries:
                    raise
            self.sleep(delay)
            delay = min(delay * self.backoff, self.max_interval)
        raise AssertionError("unreachable")

    # -- deploy (reference 5.3) ----------------------------------------------------------

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        """CreateResource with the property bag (null values stripped), polled to the end;
        the physical id is the event's Identifier, the attributes the resource model."""
        ref = ResourceRef(logical_id, resource_type, None, region=target.region, account_id=target.account_id)
        desired = {k: v for k, v in properties.items() if v is not None}
        cc = clients("cloudcontrol", target.region)
        try:
            event = self._call(cc.create_resource, TypeName=resource_type, DesiredState=json.dumps(desired))[
                "ProgressEvent"
            ]
        except (ClientError, BotoCoreError) as exc:
            raise provider_error(ref, "cloudcontrol:CreateResource", exc) from None
        final = self._settle(cc, ref, event, "create")
        identifier = final.get("Identifier")
        if not identifier:
            raise ProviderError(f"{describe(ref)}: Cloud Control create succeeded without an identifier")
        model = _model(final.get("ResourceModel"))
        if not model:
            model = self._model(cc, resource_type, identifier) or {}
        return CreateResult(identifier, model)

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        """UpdateResource with an RFC 6902 patch of the top-level keys (add / replace /
        remove); an empty patch makes no call."""
        physical_id = require_physical_id(ref)
        patch = patch_document(ref.properties, properties)
        if not patch:
            return UpdateResult(physical_id, None)
        cc = clients("cloudcontrol", ref.region)
        try:
            event = self._call(
                cc.update_resource,
                TypeName=ref.resource_type,
                Identifier=physical_id,
                PatchDocument=json.dumps(patch),
            )["ProgressEvent"]
        except (ClientError, BotoCoreError) as exc:
            raise provider_error(ref, "cloudcontrol:UpdateResource", exc) from None
        final = self._settle(cc, ref, event, "update")
        model = _model(final.get("ResourceModel"))
        return UpdateResult(physical_id, model or None)

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        physical_id = require_physical_id(ref)
        try:
            return self._model(clients("cloudcontrol", ref.region), ref.resource_type, physical_id)
        except (ClientError, BotoCoreError):
            return None

    def get_attribute(self, clients: Clients, ref: ResourceRef, name: str) -> Any:
        try:
            model = self.read(clients, ref) or {}
        except Skip:
            return None
        return model.get(name)

    def _model(self, cc: Any, type_name: str, identifier: str) -> dict | None:
        answer = self._call(cc.get_resource, TypeName=type_name, Identifier=identifier)
        return _model(answer.get("ResourceDescription", {}).get("Properties"))

    def _settle(self, cc: Any, ref: ResourceRef, event: dict, verb: str) -> dict:
        event = self._poll(cc, ref, event, verb)
        status = event.get("OperationStatus")
        if status == "SUCCESS":
            return event
        raise ProviderError(
            f"{describe(ref)}: Cloud Control {verb} {status} ({event.get('ErrorCode') or 'no error code'}): "
            f"{event.get('StatusMessage') or 'no status message'} (request token {event.get('RequestToken', '')})",
            aws_code=event.get("ErrorCode"),
        )


def _model(raw: Any) -> dict:
    if not isinstance(raw, str) or not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def patch_document(old: dict, new: dict) -> list[dict[str, Any]]:
    """cdkd's json-patch-generator over top-level keys: add new keys, replace changed ones,
    remove dropped ones (in that order of the keys as they appear)."""
    ops: list[dict[str, Any]] = []

    def pointer(key: str) -> str:
        return "/" + key.replace("~", "~0").replace("/", "~1")

    for key, value in new.items():
        if key not in old:
            ops.append({"op": "add", "path": pointer(key), "value": value})
        elif old[key] != value:
            ops.append({"op": "replace", "path": pointer(key), "value": value})
    for key in old:
        if key not in new:
            ops.append({"op": "remove", "path": pointer(key)})
    return ops


PROVIDER = CloudControlProvider()
