"""The key layout of a cdkd state bucket: parse any key into what it is, build any key.

INTERFACE STUB: implemented by the keys helper. Names and signatures below are fixed;
other modules (stacks.sync, engine.backend) rely on them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

DEFAULT_PREFIX = "cdkd"
NESTED_SEPARATOR = "~"


class KeyKind(enum.StrEnum):
    STATE = "state"  # {prefix}/{stack}/{region}/state.json
    LEGACY_STATE = "legacy-state"  # {prefix}/{stack}/state.json
    LOCK = "lock"  # {prefix}/{stack}/{region}/lock.json
    LEGACY_LOCK = "legacy-lock"  # {prefix}/{stack}/lock.json
    ROLLBACK_JOURNAL = "rollback-journal"  # {prefix}/{stack}/{region}/rollback-journal.json
    CREATE_TOKENS = "create-tokens"  # {prefix}/{stack}/{region}/create-tokens.json
    EVENT_STREAM = "event-stream"  # {prefix}/{stack}/{region}/deployments/{runId}.jsonl
    EVENT_INDEX = "event-index"  # {prefix}/{stack}/{region}/deployments/index.json
    EXPORTS_INDEX = "exports-index"  # {prefix}/_index/{region}/exports.json
    BOOTSTRAP_MARKER = "bootstrap-marker"  # cdkd-bootstrap/{region}.json (no prefix)
    CR_RESPONSE = "custom-resource-response"  # custom-resource-responses/{requestId}.json (no prefix)
    MIGRATE_TMP = "migrate-tmp"  # cdkd-migrate-tmp/{stackName}/{epochMs}.{json|yaml} (no prefix)


@dataclass(frozen=True)
class ParsedKey:
    kind: KeyKind
    key: str
    stack_name: str | None = None  # whole ~-joined name for nested children
    region: str | None = None  # None for legacy keys and prefix-less families without one
    run_id: str | None = None  # EVENT_STREAM only
    request_id: str | None = None  # CR_RESPONSE only

    @property
    def lineage(self) -> list[str]:
        """`["Root", "Child", "Grandchild"]` for `Root~Child~Grandchild`."""
        raise NotImplementedError

    @property
    def parent_name(self) -> str | None:
        raise NotImplementedError

    @property
    def child_logical_id(self) -> str | None:
        raise NotImplementedError


class KeyLayout:
    """Keys under one prefix (default `cdkd`; may contain `/`, e.g. `teams/platform`)."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        raise NotImplementedError

    prefix: str

    @property
    def list_prefix(self) -> str:
        """`{prefix}/`: what to list to enumerate every record under this prefix."""
        raise NotImplementedError

    def state_key(self, stack: str, region: str) -> str: ...
    def legacy_state_key(self, stack: str) -> str: ...
    def lock_key(self, stack: str, region: str | None) -> str: ...
    def rollback_journal_key(self, stack: str, region: str) -> str: ...
    def create_tokens_key(self, stack: str, region: str) -> str: ...
    def events_prefix(self, stack: str, region: str) -> str: ...
    def event_index_key(self, stack: str, region: str) -> str: ...
    def event_stream_key(self, stack: str, region: str, run_id: str) -> str: ...
    def exports_index_key(self, region: str) -> str: ...

    def parse(self, key: str) -> ParsedKey | None:
        """What `key` is under this prefix, or None when it is not one of cdkd's keys here."""
        raise NotImplementedError


def child_stack_name(parent: str, logical_id: str) -> str: ...
def bootstrap_marker_key(region: str) -> str: ...
def cr_response_key(request_id: str) -> str: ...
def parse_global(key: str) -> ParsedKey | None:
    """Prefix-less families: bootstrap markers, custom-resource responses, migrate temp files."""
    raise NotImplementedError
def is_region_shaped(value: str) -> bool: ...
