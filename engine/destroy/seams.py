"""The provider seams (`engine.providers`, reached with getattr so destroy runs before a
provider lands): delete, supports_snapshot, precheck, clients, and the error masker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.masking import Masker
from engine.operations import Context, OperationRefused

# --- the provider seam ----------------------------------------------------------------------


class Skip(Exception):  # noqa: N818 - the providers' name for it
    """Stand-in for `engine.providers.Skip` until that lands: the resource cannot be addressed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProviderError(Exception):
    """Stand-in for `engine.providers.ProviderError`: AWS refused; `aws_code`, `request_id`."""

    def __init__(self, message: str, aws_code: str | None = None, request_id: str | None = None) -> None:
        super().__init__(message)
        self.aws_code = aws_code
        self.request_id = request_id


@dataclass(frozen=True)
class ResourceRef:
    """Stand-in for `engine.providers.ResourceRef` (same fields, keyword-constructed)."""

    logical_id: str
    resource_type: str
    physical_id: str | None
    properties: dict[str, Any]
    attributes: dict[str, Any]
    region: str
    account_id: str
    provisioned_by: str | None


def _providers() -> Any:
    """engine.providers, or None while it does not exist yet."""
    try:
        import engine.providers as providers
    except ModuleNotFoundError as exc:
        if exc.name == "engine.providers":
            return None
        raise
    return providers


def _skip_types() -> tuple[type[BaseException], ...]:
    providers = _providers()
    other = getattr(providers, "Skip", None) if providers is not None else None
    return (Skip, other) if isinstance(other, type) and other is not Skip else (Skip,)


def _make_ref(**fields: Any) -> Any:
    providers = _providers()
    cls = getattr(providers, "ResourceRef", None) if providers is not None else None
    return (cls or ResourceRef)(**fields)


def _require_providers() -> Any:
    providers = _providers()
    if providers is None or not hasattr(providers, "delete_resource"):
        raise OperationRefused("the resource providers (engine.providers) are not installed; nothing can be deleted")
    return providers


def default_delete(clients: Any, ref: Any, snapshot: bool = False) -> Any:
    return _require_providers().delete_resource(clients, ref, snapshot=snapshot)


def default_supports_snapshot(ref: Any) -> bool:
    providers = _require_providers()
    try:
        provider = providers.provider_for(ref)
    except Exception:  # noqa: BLE001 - no provider: it cannot snapshot
        return False
    value = getattr(provider, "supports_snapshot", False)
    return bool(value(ref) if callable(value) else value)


class _DryRunStop(BaseException):  # noqa: N818 - not an error: the probe's stop signal
    """Raised by `DryClients` at the first AWS client a delete asks for. A BaseException, so
    no provider's `except Exception` can mistake it for an AWS failure."""


class DryClients:
    """Clients that make no AWS call: a delete that gets as far as asking for one has passed
    every check it makes before calling AWS, so the row is addressable."""

    session = None

    def __call__(self, service: str, region: str) -> Any:
        raise _DryRunStop()


def dry_precheck(delete: Callable[..., Any], ref: Any) -> str | None:
    """Run `delete` up to its first AWS client: the Skip it raises before then is exactly the
    skip the run would make (the same code decides both), else None."""
    try:
        delete(DryClients(), ref, snapshot=False)
    except _DryRunStop:
        return None
    except _skip_types() as exc:
        return str(getattr(exc, "reason", None) or exc) or "unspecified reason"
    except Exception:  # noqa: BLE001 - a failure before any AWS call: the run reports it
        return None
    return None


def default_precheck(ref: Any) -> str | None:
    """Why the run will skip this row without an AWS call, or None. A provider's own dry
    check when it offers one, then the provider's delete itself up to its first AWS call
    (`dry_precheck`), so the plan and the run cannot disagree about a skip."""
    providers = _require_providers()
    checks: list[Callable[[Any], Any]] = []
    for name in ("check_addressable", "precheck"):
        if callable(getattr(providers, name, None)):
            checks.append(getattr(providers, name))
    if not checks:
        try:
            provider = providers.provider_for(ref)
        except Exception:  # noqa: BLE001 - no SDK provider: Cloud Control takes it
            provider = None
        for name in ("check", "precheck", "addressable"):
            if callable(getattr(provider, name, None)):
                checks.append(getattr(provider, name))
                break
    for check in checks:
        try:
            check(ref)
        except _skip_types() as exc:
            return str(getattr(exc, "reason", None) or exc)
    return dry_precheck(default_delete, ref)


def default_clients(ctx: Context) -> Any:
    providers = _require_providers()
    return providers.Clients(ctx.bucket.session, state_bucket=ctx.bucket)


def default_masker(ctx: Context) -> Masker:
    """A masker loaded with the account's Secrets Manager and SSM SecureString values (read
    into memory only); without the permissions to read them, credential shapes only."""
    from engine.secrets import collect

    index = collect(ctx.bucket.session, ctx.bucket.account_id, {r for r in (ctx.region, ctx.bucket.region) if r})
    for warning in index.warnings:
        ctx.log("info", f"error messages are masked for credential shapes only here: {warning}")
    return index.masker()
