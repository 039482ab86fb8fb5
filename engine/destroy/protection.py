"""`remove protection` (cdkd's `--remove-protection`, seed 004): turn deletion / termination
protection off right before the delete, on every protection-bearing type (all-or-nothing for
the run), read it first, and put it back when the delete fails.

The provider side is `engine.providers.PROTECTION_TYPES`, `read_protection(clients, ref) ->
bool | None` and `set_protection(clients, ref, enabled)`, reached with getattr so destroy runs
before they land (`Protection.from_providers()` is None then, and a plan asking for the option
is refused). A test passes its own object with the same three names.

Per row (`guarded_delete`):
- read the guard first; a read that fails or answers None leaves the delete running and
  compensates nothing (it is reported as an unverified guard);
- flip it off, whether or not it is on (idempotent); a failed flip is logged and the delete
  still runs and reports its own error;
- delete; when the delete ENDS in failure (the last attempt, not a resource timeout, not a
  delete AWS accepted: `exc.accepted`), re-enable the guard, only where the read saw it on.
  A failed re-enable is its own ERROR line naming the resource and how to restore it; a
  not-found one is a warning naming a check first (the resource may live elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Property values that say "protected" in a state row (the plan's count of what looks protected).
_FLAGS = (
    "DeletionProtection",
    "DeletionProtectionEnabled",
    "DisableApiTermination",
    "TerminationProtection",
    "EnableTerminationProtection",
)


def _truthy(value: Any) -> bool:
    if value is True:
        return True
    return isinstance(value, str) and value.strip().lower() in ("true", "active", "enabled")


def looks_protected(properties: Any) -> bool:
    """What the state row says (it may be stale: the run reads the live guard first)."""
    if not isinstance(properties, dict):
        return False
    if any(_truthy(properties.get(flag)) for flag in _FLAGS):
        return True
    attributes = properties.get("LoadBalancerAttributes")
    if isinstance(attributes, list):
        for item in attributes:
            if isinstance(item, dict) and item.get("Key") == "deletion_protection.enabled":
                return _truthy(item.get("Value"))
    return False


@dataclass(frozen=True)
class Protection:
    types: frozenset[str]
    read: Any  # (clients, ref) -> bool | None
    set: Any  # (clients, ref, enabled) -> None

    @classmethod
    def of(cls, source: Any) -> Protection | None:
        """From any object (a module, a test double) with the three names; None without them."""
        types = getattr(source, "PROTECTION_TYPES", None)
        read = getattr(source, "read_protection", None)
        write = getattr(source, "set_protection", None)
        if types is None or not callable(read) or not callable(write):
            return None
        return cls(frozenset(t for t in types if isinstance(t, str)), read, write)

    @classmethod
    def from_providers(cls) -> Protection | None:
        from engine.destroy.seams import _providers

        providers = _providers()
        return cls.of(providers) if providers is not None else None


def _not_found(exc: BaseException) -> bool:
    from engine.destroy.common import _reads_as_not_found

    return _reads_as_not_found(exc)


class GuardState:
    """What one row's guard went through: read (True/False/None), flipped off, restored."""

    def __init__(self) -> None:
        self.before: bool | None = None
        self.read_error: str | None = None
        self.flipped = False
        self.flip_error: str | None = None
        self.restored: bool | None = None  # None: not attempted

    @property
    def indeterminate(self) -> str | None:
        """The unverified guard's reason, when the read could not answer."""
        if self.before is None:
            why = self.read_error or "the read answered nothing"
            return (
                f"could not read the protection before turning it off ({why}); it is not restored if the delete fails"
            )
        return None


def disable(protection: Protection, clients: Any, ref: Any, log: Any) -> GuardState:
    state = GuardState()
    try:
        value = protection.read(clients, ref)
        state.before = value if isinstance(value, bool) else None
    except Exception as exc:  # noqa: BLE001 - a refused read leaves the delete running
        state.read_error = str(exc) or type(exc).__name__
    try:
        protection.set(clients, ref, False)
        state.flipped = True
        log("info", f"{ref.logical_id} ({ref.resource_type}): protection turned off for the delete")
    except Exception as exc:  # noqa: BLE001 - the delete runs and reports its own error
        state.flip_error = str(exc) or type(exc).__name__
        log("info", f"{ref.logical_id}: turning protection off failed ({state.flip_error}); deleting anyway")
    return state


def compensate(protection: Protection, clients: Any, ref: Any, state: GuardState, log: Any, mask: Any) -> None:
    """After a delete that ended in failure: re-enable a guard this run turned off."""
    if not (state.flipped and state.before is True):
        return
    try:
        protection.set(clients, ref, True)
        state.restored = True
        log(
            "warning",
            f"{ref.logical_id} ({ref.resource_type}): its delete failed, so its protection was turned on again",
        )
    except Exception as exc:  # noqa: BLE001 - best effort; the delete failure stays the outcome
        state.restored = False
        message = mask(str(exc) or type(exc).__name__)
        if _not_found(exc):
            log(
                "warning",
                f"{ref.logical_id} ({ref.resource_type}, {ref.physical_id}): re-enabling its protection answered "
                f"not found ({message}); check whether it still exists (describe it, or `aws cloudcontrol "
                f"get-resource`), and turn protection back on by hand if it does",
            )
        else:
            log(
                "error",
                f"{ref.logical_id} ({ref.resource_type}, {ref.physical_id}): its protection is still OFF after the "
                f"failed delete: re-enabling it failed ({message}); turn it back on by hand",
            )
