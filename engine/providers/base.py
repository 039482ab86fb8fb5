"""The provider contract: what the destroy runner hands a provider and what it gets back.

A provider deletes one AWS resource that a cdkd state record describes. It answers
`"deleted"` (the delete went through), `"not-found"` (AWS says it is already gone: the
runner counts that as deleted), raises `Skip` when the row cannot be addressed (no AWS call
is made, the row is kept) or `ProviderError` when AWS refused or failed the delete.

`SdkProvider` is the base of the per-service providers: it applies the checks every row
gets (a usable physical id, a redacted address, a snapshot the type cannot take) and maps
botocore errors to the outcomes above, so a service module only says which calls to make.
`create`/`update`/`read`/`get_attribute` join `delete` on the same classes for the types
the deploy engine provisions (reference: deploy-engine.md §5.1, `DeployProvider`); their
AWS failures come out as `ProviderError` too, with AWS's code in `aws_code` so the runner
can tell throttling (retry) and "already exists" (a name collision) from the rest.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from botocore.exceptions import BotoCoreError, ClientError

from engine import aws as engine_aws
from engine.errors import EngineError

log = logging.getLogger(__name__)

DELETED = "deleted"
NOT_FOUND = "not-found"

# Reasons, worded as cdkd words them (seed 004 "Every cause of a skip"; reference §8.2).
NO_PHYSICAL_ID_REASON = "state record has no physical id"
COMPOSITE_ID_SKIP_REASON = "malformed physicalId in state — no delete issued"
REDACTION_MASK = "***"

# An IAM user, role or group name (IAM's own pattern). Paths are not part of a name.
IAM_NAME = re.compile(r"^[\w+=,.@-]{1,128}$")


@dataclass(frozen=True)
class ResourceRef:
    """One row of a state record, as a provider needs it."""

    logical_id: str
    resource_type: str
    physical_id: str | None
    properties: dict = field(default_factory=dict)  # resolved properties ({} when unreadable)
    attributes: dict = field(default_factory=dict)  # cached Fn::GetAtt values ({} when absent)
    region: str = engine_aws.DEFAULT_REGION  # the stack's region (from the record's key)
    account_id: str = ""
    provisioned_by: str | None = None  # "sdk" | "cc-api" | None (legacy rows: sdk)


# Whether the caller has stopped waiting for this delete (its run cancelled, its resource
# timeout passed): set by the destroy runner around each row's delete, in the row's own
# thread. Only a provider that waits (a custom resource's answer) asks.
_stop_check: contextvars.ContextVar[Callable[[], bool]] = contextvars.ContextVar("stop_check", default=lambda: False)


@contextmanager
def stoppable(check: Callable[[], bool]) -> Iterator[None]:
    token = _stop_check.set(check)
    try:
        yield
    finally:
        _stop_check.reset(token)


def stop_requested() -> bool:
    return _stop_check.get()()


class Skip(Exception):
    """The row cannot be addressed; no AWS call was made. `str(exc)` is the reason."""


class NotFoundGone(Exception):
    """Raised inside a provider to say "already gone"; `SdkProvider.delete` turns it into
    `"not-found"`. Never escapes a provider."""


class ProviderError(EngineError):
    """The delete failed. The message names the logical id, type, physical id, the AWS
    action and AWS's error code; `aws_code` and `request_id` carry them for the event log."""

    def __init__(
        self, message: str, *, aws_code: str | None = None, request_id: str | None = None, accepted: bool = False
    ) -> None:
        super().__init__(message)
        self.aws_code = aws_code
        self.request_id = request_id
        # True when AWS had already accepted the delete (a wait gave up afterwards): the
        # runner must not turn protection back on then (seed 004, "Restoring a guard").
        self.accepted = accepted


@runtime_checkable
class Provider(Protocol):
    types: tuple[str, ...]
    supports_snapshot: bool

    def delete(self, clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str: ...


@runtime_checkable
class ProtectionProvider(Protocol):
    """The optional protection half (seed 004 "--remove-protection"): a type whose resources
    can carry a deletion/termination guard. `read_protection` asks AWS whether it is on now
    (False for a resource that is gone); `set_protection` turns it on or off in place (an
    idempotent call); both raise ProviderError when AWS refuses."""

    types: tuple[str, ...]

    def read_protection(self, clients: Clients, ref: ResourceRef) -> bool: ...

    def set_protection(self, clients: Clients, ref: ResourceRef, enabled: bool) -> None: ...


@dataclass(frozen=True)
class DeployTarget:
    """Where a create runs: the stack (for generated names), its region and account."""

    stack_name: str
    region: str
    account_id: str
    partition: str = "aws"


@dataclass
class CreateResult:
    physical_id: str
    attributes: dict[str, Any] | None = None  # what cdkd records (reference 5.7); None: key omitted


@dataclass
class UpdateResult:
    physical_id: str
    attributes: dict[str, Any] | None = None  # None: the previous attributes are carried over


class UpdateNeedsReplacement(EngineError):
    """The provider cannot change this property in place (cdkd's ResourceUpdateNotSupportedError)."""


class DeployProvider(Protocol):
    """The deploy half of the contract (reference 5.1), beside `delete`: `handled` names the
    top-level properties the provider writes; a property outside it is never silently
    dropped (the runner refuses it before any AWS call)."""

    types: tuple[str, ...]
    handled: ClassVar[frozenset[str]]

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult: ...

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult: ...

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None: ...

    def get_attribute(self, clients: Clients, ref: ResourceRef, name: str) -> Any: ...


class Clients:
    """boto3 clients of one session, built on first use and cached per (service, region).

    Built through `engine.aws.client`, so they carry the house config (standard retries)
    and the endpoint from `AWS_ENDPOINT_URL`. Safe to share between the runner's threads.
    `state_bucket` (an engine.backend.StateBucket) is where custom resources' handlers PUT
    their responses; None where nothing needs it.
    """

    def __init__(self, session: Any, state_bucket: Any = None) -> None:
        self.session = session
        self.state_bucket = state_bucket
        self._cache: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def __call__(self, service: str, region: str) -> Any:
        key = (service, region or engine_aws.DEFAULT_REGION)
        with self._lock:
            cached = self._cache.get(key)
            if cached is None:
                cached = self._cache[key] = engine_aws.client(self.session, service, key[1])
            return cached


# -- helpers shared by the service modules ------------------------------------------------


def error_code(exc: BaseException) -> str:
    """AWS's error code of a ClientError ("" for anything else, and when the body named none)."""
    return engine_aws.error_code(exc)


def error_message(exc: BaseException, service: str = "") -> str:
    """AWS's message, one bounded line, never an HTML page (see `engine.aws.error_message`)."""
    return engine_aws.error_message(exc, service)


def service_of(ref: ResourceRef, action: str) -> str:
    """The endpoint a call went to, for messages: `cloudcontrol:...` names it, else the type's
    service (`AWS::SQS::Queue` -> sqs)."""
    if ":" in action:
        return action.split(":", 1)[0]
    parts = ref.resource_type.split("::")
    return parts[1].lower() if len(parts) == 3 else ""


def request_id(exc: BaseException) -> str | None:
    if isinstance(exc, ClientError):
        meta = exc.response.get("ResponseMetadata", {})
        return meta.get("RequestId") or meta.get("HTTPHeaders", {}).get("x-amzn-requestid")
    return None


def describe(ref: ResourceRef, physical_id: str | None = None) -> str:
    """`Logical (AWS::Type physical-id)`: how every message names the resource."""
    return f"{ref.logical_id} ({ref.resource_type} {physical_id if physical_id is not None else ref.physical_id})"


def provider_error(ref: ResourceRef, action: str, exc: BaseException, *, what: str = "") -> ProviderError:
    """The ProviderError for a failed AWS call: who, which action, AWS's code and message."""
    code = engine_aws.named_error_code(exc) or ("" if isinstance(exc, ClientError) else type(exc).__name__)
    detail = what or error_message(exc, service_of(ref, action))
    message = f"{describe(ref)}: {action} failed" + (f" ({code})" if code else "")
    if detail:
        message += f": {detail}"
    return ProviderError(message, aws_code=engine_aws.named_error_code(exc) or None, request_id=request_id(exc))


def is_redacted(value: Any) -> bool:
    """A value that names nothing in AWS: the NoEcho mask or a secret dynamic reference
    (seed 004: an address property cdkd redacted)."""
    return isinstance(value, str) and (REDACTION_MASK in value or "{{resolve:" in value)


def require_physical_id(ref: ResourceRef) -> str:
    """The row's physical id, or Skip when it is missing, not a string, blank or redacted."""
    pid = ref.physical_id
    if not isinstance(pid, str) or not pid.strip():
        raise Skip(NO_PHYSICAL_ID_REASON)
    if is_redacted(pid):
        raise Skip(f"the physical id is redacted ({REDACTION_MASK} or a secret reference) and names nothing in AWS")
    return pid.strip()


@dataclass(frozen=True)
class Arn:
    partition: str
    service: str
    region: str
    account: str
    resource: str


def parse_arn(value: str) -> Arn | None:
    """The parts of an ARN, or None when `value` is not one."""
    parts = value.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or not parts[2] or not parts[5]:
        return None
    return Arn(parts[1], parts[2], parts[3], parts[4], parts[5])


def region_of(ref: ResourceRef, physical_id: str) -> str:
    """Where to send the call: an ARN's own region when it has one, else the stack's."""
    arn = parse_arn(physical_id)
    return (arn.region if arn and arn.region else "") or ref.region or engine_aws.DEFAULT_REGION


# -- the base class of SDK providers ---------------------------------------------------------


class SdkProvider:
    """Common checks and error mapping around a service module's `_delete`.

    Subclasses set `types`, `not_found_codes` (AWS's codes for "no such resource", turned
    into "not-found") and implement `_delete(clients, ref, physical_id, snapshot)`.
    """

    types: ClassVar[tuple[str, ...]] = ()
    supports_snapshot: ClassVar[bool] = False
    not_found_codes: ClassVar[frozenset[str]] = frozenset()
    action: ClassVar[str] = "delete"  # the main AWS action, for messages

    def delete(self, clients: Clients, ref: ResourceRef, *, snapshot: bool = False) -> str:
        physical_id = require_physical_id(ref)
        if snapshot and not self.supports_snapshot:
            # The runner refuses first (seed 004: a type cdkd cannot snapshot fails the
            # resource); this keeps a direct caller from losing the data anyway.
            raise ProviderError(
                f"{describe(ref, physical_id)}: DeletionPolicy Snapshot cannot be honoured: "
                f"this type has no final snapshot; the resource was not deleted"
            )
        try:
            outcome = self._delete(clients, ref, physical_id, snapshot)
        except NotFoundGone:
            outcome = NOT_FOUND
        except ClientError as exc:
            if error_code(exc) in self.not_found_codes:
                outcome = NOT_FOUND
            else:
                raise provider_error(ref, self.action, exc) from None
        except BotoCoreError as exc:
            raise ProviderError(f"{describe(ref, physical_id)}: {self.action} failed: {error_message(exc)}") from None
        log.info("%s: %s", describe(ref, physical_id), outcome)
        return outcome

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        raise NotImplementedError


# -- the deploy half -----------------------------------------------------------------------

ALREADY_EXISTS_CODE = "AlreadyExists"  # what a provider's own pre-check says, in cdkd's words


def already_exists(ref_or_id: ResourceRef | str, resource_type: str, name: str) -> ProviderError:
    """A create that found its name taken: it fails loudly and never adopts."""
    who = ref_or_id.logical_id if isinstance(ref_or_id, ResourceRef) else ref_or_id
    return ProviderError(
        f"{who} ({resource_type} {name}): a resource named {name} already exists and this stack's record does "
        f"not hold it; refusing to adopt it (delete or rename it, or import it with cdkd import)",
        aws_code=ALREADY_EXISTS_CODE,
    )


class DeployCalls:
    """Mixin for SDK providers that also create/update: `_guarded` maps botocore errors of
    a create/update/read to ProviderError naming the resource, the action and AWS's code."""

    handled: ClassVar[frozenset[str]] = frozenset()

    @staticmethod
    def _guarded(logical_id: str, resource_type: str, name: str, action: str, call: Any, *args: Any, **kw: Any) -> Any:
        try:
            return call(*args, **kw)
        except ProviderError:
            raise
        except ClientError as exc:
            target = ResourceRef(logical_id=logical_id, resource_type=resource_type, physical_id=name)
            raise provider_error(target, action, exc) from None
        except BotoCoreError as exc:
            raise ProviderError(f"{logical_id} ({resource_type} {name}): {action} failed: {exc}") from None

    def get_attribute(self, clients: Clients, ref: ResourceRef, name: str) -> Any:
        """A live attribute; None for an unknown name or a resource that is gone (never raises)."""
        try:
            return self._attributes(clients, ref).get(name)
        except (ClientError, BotoCoreError, ProviderError, Skip):
            return None

    def _attributes(self, clients: Clients, ref: ResourceRef) -> dict[str, Any]:
        return dict(ref.attributes)


def tag_map(tags: Any) -> dict[str, str]:
    """CloudFormation's `[{Key, Value}]` (or an SSM-style map) as a dict of strings."""
    if isinstance(tags, dict):
        items = list(tags.items())
    elif isinstance(tags, list):
        items = [(t.get("Key"), t.get("Value")) for t in tags if isinstance(t, dict)]
    else:
        items = []
    return {str(k): "" if v is None else str(v) for k, v in items if isinstance(k, str) and k}


def tag_delta(old: Any, new: Any) -> tuple[dict[str, str], list[str]]:
    """(tags to set, keys to remove) between two Tags values."""
    before, after = tag_map(old), tag_map(new)
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    removed = [k for k in before if k not in after]
    return changed, removed


def js_scalar(value: Any) -> str:
    """An attribute value as the string AWS's string-typed attribute APIs take (JS String())."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
