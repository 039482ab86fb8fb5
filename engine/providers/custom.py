"""Custom resources (`Custom::*`, `AWS::CloudFormation::CustomResource`): the Delete request.

A custom resource's teardown lives in its handler, so a delete is CloudFormation's protocol
as cdkd speaks it (its `CustomResourceProvider`; seed 000 "Custom-resource response
placeholders", seed 004 "Every cause of a skip"):

1. Dry checks, no AWS call (`check`, also run by the destroy plan): no properties, no
   `ServiceToken`, a token that is the `***` mask or a `{{resolve:...}}` reference, or
   properties holding `***` (no template here to re-resolve a NoEcho value) -> Skip.
2. A Lambda token: `GetFunction` first; "not found" -> Skip (the handler can never run).
3. An empty placeholder at `custom-resource-responses/{requestId}.json` in the STATE
   bucket (fixed top-level prefix, not under the state prefix), and a pre-signed PUT URL
   for it (2 h) as `ResponseURL`.
4. The request to the token: Lambda `Invoke` (RequestResponse, LogType Tail, as cdkd) or
   SNS `Publish`. `invoke` is the seam tests replace: moto cannot run Lambda code.
5. The answer: a cfn-response in the invoke's own payload, else polling the placeholder.
   cdkd's timings: a Lambda that returned nothing (the provider framework's async shape)
   is polled from 2 s, x1.5 up to 30 s, for the `CDKD_CUSTOM_RESOURCE_TIMEOUT_SECONDS`
   setting (1 h, CDK's totalTimeout); SNS, or a payload that was not a response, every
   2 s for 30 s.
6. The placeholder is deleted and its noncurrent versions purged: the handler's response
   may carry a minted secret in `Data`. A purge refused is a warning, never a failure.

SUCCESS -> "deleted". FAILED, an invoke that failed, or no answer in time -> Skip with
cdkd's "resource unproven" reasons: the record is kept and the run ends partial. A cancel
(or the row's resource timeout) stops the wait within a second (`stop_requested`): the
Delete was sent, so the row is kept as unproven and a re-run sends it again.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from engine.errors import EngineError, NotFound
from engine.providers.base import (
    DELETED,
    REDACTION_MASK,
    Clients,
    ProviderError,
    ResourceRef,
    Skip,
    describe,
    error_code,
    parse_arn,
    require_physical_id,
    stop_requested,
)

log = logging.getLogger(__name__)

CUSTOM_RESOURCE = "AWS::CloudFormation::CustomResource"
RESPONSE_PREFIX = "custom-resource-responses"  # cdkd's fixed key family in the state bucket

# Skip reasons, worded as cdkd's destroy prints them (seed 004). The four cdkd spells out
# are verbatim; the token and property masks follow the same "— Delete handler not invoked".
NO_PROPERTIES = "no properties in state — Delete handler not invoked"
NO_SERVICE_TOKEN = "no ServiceToken in state — Delete handler not invoked"
MASKED_TOKEN = "ServiceToken in state is the redaction mask *** — Delete handler not invoked"
RESOLVE_TOKEN = (
    "ServiceToken in state is a {{resolve:...}} reference, which is not resolved on delete — Delete handler not invoked"
)
MASKED_PROPERTIES = (
    "properties in state hold the *** mask of a NoEcho value and no template is at hand to re-resolve it — "
    "Delete handler not invoked"
)
LAMBDA_GONE = "backing Lambda function is gone — Delete handler not invoked"
HANDLER_FAILED = "Delete handler reported FAILED — resource unproven"
INVOKE_FAILED = "Delete request to the handler did not complete — resource unproven"
# The run was cancelled (or the row's resource timeout passed) while the answer was awaited.
STOPPED_WAITING = "stopped waiting for the Delete handler's answer (the run was stopped) — resource unproven"

# cdkd's timings (CustomResourceProvider): seconds.
SYNC_TIMEOUT = 30.0
DEFAULT_ASYNC_TIMEOUT = 3600.0  # CDK's provider-framework totalTimeout
INITIAL_POLL_INTERVAL = 2.0
MAX_POLL_INTERVAL = 30.0
BACKOFF = 1.5
URL_EXPIRES = 7200  # outlives the async timeout
STOPPED: dict[str, Any] = {}  # `_poll`'s answer when the runner stopped waiting (compared by identity)

_CAVEAT = (
    "The record is kept and the run ends partial. The same destroy usually deletes the handler's Lambda too, "
    "so a re-run finds it gone and skips again: tear down what the handler manages by hand, then orphan the row."
)


def is_custom_type(resource_type: Any) -> bool:
    return isinstance(resource_type, str) and (resource_type.startswith("Custom::") or resource_type == CUSTOM_RESOURCE)


def configured_timeout() -> float:
    """The async response timeout: the CDKD_CUSTOM_RESOURCE_TIMEOUT_SECONDS setting when
    Django is configured (the web app, workers, commands), else cdkd's 1 h."""
    try:
        from django.conf import settings
    except ImportError:  # the engine used on its own
        return DEFAULT_ASYNC_TIMEOUT
    if not settings.configured:
        return DEFAULT_ASYNC_TIMEOUT
    return float(getattr(settings, "CDKD_CUSTOM_RESOURCE_TIMEOUT_SECONDS", DEFAULT_ASYNC_TIMEOUT))


def is_sns_token(token: str) -> bool:
    arn = parse_arn(token)
    return arn is not None and arn.service == "sns"


def _holds_mask(value: Any) -> bool:
    if isinstance(value, str):
        return value == REDACTION_MASK
    if isinstance(value, dict):
        return any(_holds_mask(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_mask(v) for v in value)
    return False


def stringify(properties: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation hands handlers strings: booleans and numbers as JS String() spells
    them, nested objects likewise; lists are left as they are (cdkd's stringifyProperties)."""
    out: dict[str, Any] = {}
    for key, value in properties.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, int | float):
            out[key] = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
        elif isinstance(value, dict):
            out[key] = stringify(value)
        else:
            out[key] = value
    return out


def _bounded(text: Any, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


class InvokeFailed(Exception):
    """The request did not reach the handler, or the handler crashed (Lambda FunctionError)."""


def default_invoke(clients: Clients, token: str, request: dict[str, Any]) -> Any:
    """Send `request` to the handler; return the Lambda's own payload (parsed JSON, or None
    when empty or not JSON; always None for SNS)."""
    arn = parse_arn(token)
    region = (arn.region if arn else "") or "us-east-1"
    body = json.dumps(request)
    if is_sns_token(token):
        clients("sns", region).publish(TopicArn=token, Message=body)
        return None
    answer = clients("lambda", region).invoke(
        FunctionName=token, InvocationType="RequestResponse", LogType="Tail", Payload=body.encode()
    )
    raw = answer["Payload"].read() if answer.get("Payload") is not None else b""
    if answer.get("FunctionError"):
        # The payload is the handler's error, which may echo its properties: not in the message.
        raise InvokeFailed(f"the handler crashed (Lambda FunctionError {answer['FunctionError']})")
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        return None


class CustomResourceProvider:
    # Routed by `provider_for` (every Custom::* by prefix), not by name: kept out of the
    # registry so deploy routing stays as it was (its plan refuses custom resources).
    types: tuple[str, ...] = ()
    supports_snapshot = False

    def __init__(
        self,
        *,
        invoke: Callable[[Clients, str, dict[str, Any]], Any] = default_invoke,
        timeout: float | None = None,  # None: the setting, read per delete
        sleep: Callable[[float], None] | None = None,  # None: a real wait that a stop cuts short
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.invoke = invoke
        self.timeout = timeout
        self.sleep = sleep
        self.clock = clock

    # -- the dry checks ------------------------------------------------------------------

    def check(self, ref: ResourceRef) -> None:
        """Seed 004's record-only skips; raises Skip, makes no AWS call."""
        properties = ref.properties
        if not properties:
            raise Skip(NO_PROPERTIES)
        token = properties.get("ServiceToken")
        if token is None or token == "":
            raise Skip(NO_SERVICE_TOKEN)
        if isinstance(token, str) and REDACTION_MASK in token:
            raise Skip(MASKED_TOKEN)
        if isinstance(token, str) and "{{resolve:" in token:
            raise Skip(RESOLVE_TOKEN)
        if _holds_mask(properties):
            raise Skip(MASKED_PROPERTIES)

    # -- the delete ----------------------------------------------------------------------

    def delete(self, clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str:
        physical_id = require_physical_id(ref)
        if snapshot:
            raise ProviderError(
                f"{describe(ref)}: DeletionPolicy Snapshot cannot be honoured: a custom resource has no final "
                f"snapshot; the resource was not deleted"
            )
        self.check(ref)
        token = ref.properties["ServiceToken"]
        if not isinstance(token, str):
            raise ProviderError(
                f"{describe(ref)}: ServiceToken is not a resolved string ARN (got {type(token).__name__}); "
                f"repair it in state.json, or orphan the row"
            )
        bucket = getattr(clients, "state_bucket", None)
        if bucket is None:
            raise ProviderError(f"{describe(ref)}: no state bucket to receive the handler's response; nothing was sent")
        if not is_sns_token(token) and self._lambda_gone(clients, token):
            log.warning(
                "%s: the backing Lambda %s no longer exists, so its Delete handler can never run and what it "
                "manages may still be live. %s",
                describe(ref),
                token,
                _CAVEAT,
            )
            raise Skip(LAMBDA_GONE)

        request_id = f"cdkd-{int(time.time() * 1000)}-{_base36(secrets.randbits(32))}"
        key = f"{RESPONSE_PREFIX}/{request_id}.json"
        try:
            url = self._placeholder(clients, bucket, key)
        except (EngineError, ClientError, BotoCoreError) as exc:
            raise ProviderError(
                f"{describe(ref)}: could not write the response placeholder s3://{bucket.name}/{key}: {exc}; "
                f"nothing was sent to the handler"
            ) from None
        try:
            response = self._exchange(clients, ref, token, physical_id, request_id, url, bucket, key)
        finally:
            self._cleanup(bucket, key)

        if response is STOPPED:
            log.warning("%s: stopped waiting for the Delete handler's answer. %s", describe(ref), _CAVEAT)
            raise Skip(STOPPED_WAITING)
        if response is None:
            raise Skip(INVOKE_FAILED)
        if response.get("Status") == "FAILED":
            log.warning(
                "%s: the Delete handler reported FAILED: %s. %s",
                describe(ref),
                _bounded(response.get("Reason") or "no reason given"),
                _CAVEAT,
            )
            raise Skip(HANDLER_FAILED)
        log.info("%s: deleted (the handler answered SUCCESS)", describe(ref))
        return DELETED

    def _lambda_gone(self, clients: Clients, token: str) -> bool:
        """True only on a definite "not found"; anything else lets the invoke try."""
        arn = parse_arn(token)
        try:
            clients("lambda", (arn.region if arn else "") or "us-east-1").get_function(FunctionName=token)
        except ClientError as exc:
            return error_code(exc) == "ResourceNotFoundException"
        except BotoCoreError:
            return False
        return False

    def _placeholder(self, clients: Clients, bucket: Any, key: str) -> str:
        """The empty placeholder (so the key exists to clean up) and the URL to PUT to.
        The URL names no content type: cfn-response senders differ in what they send."""
        bucket.put(key, b"", if_none_match=True)
        return _presigner(clients.session, bucket.region).generate_presigned_url(
            "put_object", Params={"Bucket": bucket.name, "Key": key}, ExpiresIn=URL_EXPIRES
        )

    def _exchange(
        self,
        clients: Clients,
        ref: ResourceRef,
        token: str,
        physical_id: str,
        request_id: str,
        url: str,
        bucket: Any,
        key: str,
    ) -> dict[str, Any] | None:
        """Send the Delete and wait for the answer: the response, or None when the request
        did not complete (the reason is logged, never the request: it carries properties)."""
        arn = parse_arn(token)
        partition = arn.partition if arn else "aws"
        request = {
            "RequestType": "Delete",
            "RequestId": request_id,
            "ResponseURL": url,
            "ResourceType": ref.resource_type,
            "LogicalResourceId": ref.logical_id,
            "PhysicalResourceId": physical_id,
            "StackId": f"arn:{partition}:cloudformation:{ref.region}:{ref.account_id}:stack/cdkd-{ref.logical_id}/cdkd",
            "ResourceProperties": stringify(ref.properties),
        }
        try:
            payload = self.invoke(clients, token, request)
        except (InvokeFailed, ClientError, BotoCoreError, EngineError) as exc:
            log.warning("%s: the Delete request to %s failed: %s. %s", describe(ref), token, _bounded(exc), _CAVEAT)
            return None
        direct = _direct_response(payload)
        if direct is not None:
            return direct
        if is_sns_token(token) or (isinstance(payload, dict) and payload):
            timeout, backoff = SYNC_TIMEOUT, False  # cdkd: a handler that answered, just not here
        else:
            timeout = self.timeout if self.timeout is not None else configured_timeout()
            backoff = True  # the provider framework's async shape: nothing came back
        response = self._poll(bucket, key, timeout, backoff)
        if response is STOPPED:
            return response
        if response is None:
            log.warning(
                "%s: no response from the Delete handler at %s within %.0f s. %s",
                describe(ref),
                token,
                timeout,
                _CAVEAT,
            )
        return response

    def _poll(self, bucket: Any, key: str, timeout: float, backoff: bool) -> dict[str, Any] | None:
        """The handler's answer, None after `timeout`, or STOPPED as soon as the runner
        stops waiting (a cancel must not sit out an hour's timeout)."""
        start = self.clock()
        interval = INITIAL_POLL_INTERVAL
        while self.clock() - start < timeout:
            if stop_requested():
                return STOPPED
            try:
                body = bucket.get(key).body
            except NotFound:
                body = b""
            except EngineError as exc:
                log.debug("reading the custom-resource response %s failed: %s", key, exc)
                body = b""
            if body:
                try:
                    answer = json.loads(body)
                except ValueError:
                    answer = None  # not yet a whole document
                if isinstance(answer, dict) and answer.get("Status") in ("SUCCESS", "FAILED"):
                    return answer
            self._pause(interval)
            if backoff:
                interval = min(interval * BACKOFF, MAX_POLL_INTERVAL)
        return None

    def _pause(self, seconds: float) -> None:
        """The poll interval (up to 30 s), in slices of a second so a stop is seen soon;
        an injected `sleep` (the tests' clock) gets the interval whole."""
        if self.sleep is not None:
            self.sleep(seconds)
            return
        end = time.monotonic() + seconds
        while not stop_requested() and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 1.0))

    def _cleanup(self, bucket: Any, key: str) -> None:
        """Delete the placeholder and purge its earlier versions: the handler's response
        (Data included, maybe a minted secret) must not stay readable by VersionId."""
        try:
            bucket.delete(key)
        except EngineError as exc:
            log.warning("could not delete the custom-resource response s3://%s/%s: %s", bucket.name, key, exc)
            return
        try:
            bucket.purge_noncurrent([key])
        except EngineError as exc:
            log.warning(
                "could not purge the earlier versions of s3://%s/%s (needs s3:ListBucketVersions and "
                "s3:DeleteObjectVersion on the state bucket); the handler's response stays readable by "
                "VersionId: %s",
                bucket.name,
                key,
                exc,
            )


_presigners: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_presigners_lock = threading.Lock()


def _presigner(session: Any, region: str) -> Any:
    """An S3 client that signs URLs with SigV4, as cdkd's getSignedUrl does (boto3's S3
    default is SigV2 query auth, which newer regions refuse), signed for the bucket's region.
    Cached per session, and gone with it."""
    with _presigners_lock:  # Session.client is not thread-safe
        per_region = _presigners.setdefault(session, {})
        if region not in per_region:
            per_region[region] = session.client("s3", region_name=region, config=Config(signature_version="s3v4"))
        return per_region[region]


def _direct_response(payload: Any) -> dict[str, Any] | None:
    """A response the Lambda returned itself: a whole cfn-response, or a simple handler's
    {PhysicalResourceId|Data} (cdkd reads that as SUCCESS)."""
    if not isinstance(payload, dict):
        return None
    if payload.get("Status") in ("SUCCESS", "FAILED"):
        return payload
    if payload.get("PhysicalResourceId") or payload.get("Data"):
        return {"Status": "SUCCESS"}
    return None


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while number:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
    return out or "0"


PROVIDER = CustomResourceProvider()
PROVIDERS = (PROVIDER,)
