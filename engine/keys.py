"""The key layout of a cdkd state bucket: parse any key into what it is, build any key.

Parsing copies cdkd's authoritative enumeration (`S3StateBackend.listStacks`, reference
§1.7a): strip `{prefix}/`, split the rest on `/`, and decide by the number of segments.
A stack name may hold any character S3 can hold except `/` (which would change the
depth), so nothing here escapes, normalises or pattern-matches stack names or regions.

Keys are plain `str` as S3 stores them (boto3 already URL-decodes listings).
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

DEFAULT_PREFIX = "cdkd"
NESTED_SEPARATOR = "~"

# Prefix-less families live at fixed top-level names, outside any state prefix.
BOOTSTRAP_PREFIX = "cdkd-bootstrap"
CR_RESPONSE_PREFIX = "custom-resource-responses"
MIGRATE_TMP_PREFIX = "cdkd-migrate-tmp"

EXPORTS_INDEX_DIR = "_index"
DEPLOYMENTS_DIR = "deployments"
STATE_FILE = "state.json"
LOCK_FILE = "lock.json"
ROLLBACK_JOURNAL_FILE = "rollback-journal.json"
CREATE_TOKENS_FILE = "create-tokens.json"
EVENT_INDEX_FILE = "index.json"
EVENT_STREAM_SUFFIX = ".jsonl"
EXPORTS_FILE = "exports.json"


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


# Region-scoped sibling files of one stack: {prefix}/{stack}/{region}/{file}.
_REGION_FILES = {
    STATE_FILE: KeyKind.STATE,
    LOCK_FILE: KeyKind.LOCK,
    ROLLBACK_JOURNAL_FILE: KeyKind.ROLLBACK_JOURNAL,
    CREATE_TOKENS_FILE: KeyKind.CREATE_TOKENS,
}
# Legacy (v1) files: {prefix}/{stack}/{file}.
_LEGACY_FILES = {STATE_FILE: KeyKind.LEGACY_STATE, LOCK_FILE: KeyKind.LEGACY_LOCK}

_REGION_RE = re.compile(r"(?:[a-z]{2}|eusc)(-[a-z]+)+-\d+", re.ASCII)
# cdkd's runIdTimestampMs matches a leading prefix only; the random suffix is not checked.
_RUN_ID_TS_RE = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\d{3})Z", re.ASCII)
_MIGRATE_FILE_RE = re.compile(r"(\d+)\.(json|yaml)", re.ASCII)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ParsedKey:
    kind: KeyKind
    key: str
    stack_name: str | None = None  # whole ~-joined name for nested children
    region: str | None = None  # None for legacy keys and prefix-less families without one
    run_id: str | None = None  # EVENT_STREAM only
    request_id: str | None = None  # CR_RESPONSE only
    epoch_ms: int | None = None  # MIGRATE_TMP only

    @property
    def lineage(self) -> list[str]:
        """`["Root", "Child", "Grandchild"]` for `Root~Child~Grandchild`.

        `[stack_name]` for a top-level stack, `[]` when the key names no stack. A name
        with an empty `~` part (`A~`, `~B`, `A~~B`) cannot have been built by cdkd from a
        parent and a logical id, so it is treated as one top-level name.
        """
        if self.stack_name is None:
            return []
        parts = self.stack_name.split(NESTED_SEPARATOR)
        if len(parts) > 1 and all(parts):
            return parts
        return [self.stack_name]

    @property
    def parent_name(self) -> str | None:
        """The immediate parent's whole name (`Root~Child` for a grandchild), or None."""
        lineage = self.lineage
        return NESTED_SEPARATOR.join(lineage[:-1]) if len(lineage) > 1 else None

    @property
    def child_logical_id(self) -> str | None:
        """The nested stack's logical id in its parent's template, or None at top level."""
        lineage = self.lineage
        return lineage[-1] if len(lineage) > 1 else None

    @property
    def is_nested(self) -> bool:
        return len(self.lineage) > 1


def _check_segment(value: str, what: str) -> str:
    """`value` unchanged if it can be one key segment; ValueError otherwise."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    if "/" in value:
        # A `/` changes the key's depth, so cdkd would read the key as something else.
        raise ValueError(f"{what} must not contain '/': {value!r}")
    return value


def normalize_prefix(prefix: str) -> str:
    """`prefix` without leading/trailing `/`; ValueError if empty or with an empty segment."""
    if not isinstance(prefix, str):
        raise ValueError("state prefix must be a string")
    normalized = prefix.strip("/")
    if not normalized:
        raise ValueError(f"state prefix must not be empty: {prefix!r}")
    if "" in normalized.split("/"):
        raise ValueError(f"state prefix must not contain an empty segment ('//'): {prefix!r}")
    return normalized


class KeyLayout:
    """Keys under one prefix (default `cdkd`; may contain `/`, e.g. `teams/platform`)."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix: str = normalize_prefix(prefix)

    prefix: str

    def __repr__(self) -> str:
        return f"KeyLayout({self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyLayout) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)

    @property
    def list_prefix(self) -> str:
        """`{prefix}/`: what to list to enumerate every record under this prefix."""
        return f"{self.prefix}/"

    def stack_prefix(self, stack: str) -> str:
        """`{prefix}/{stack}/`: every key of one stack, all regions (cdkd's `listRegions`)."""
        return f"{self.prefix}/{_check_segment(stack, 'stack name')}/"

    def _region_key(self, stack: str, region: str, file: str) -> str:
        return f"{self.stack_prefix(stack)}{_check_segment(region, 'region')}/{file}"

    def state_key(self, stack: str, region: str) -> str:
        return self._region_key(stack, region, STATE_FILE)

    def legacy_state_key(self, stack: str) -> str:
        return f"{self.stack_prefix(stack)}{STATE_FILE}"

    def lock_key(self, stack: str, region: str | None) -> str:
        """The region-scoped lock, or the legacy one when `region` is None (legacy record)."""
        if region is None:
            return f"{self.stack_prefix(stack)}{LOCK_FILE}"
        return self._region_key(stack, region, LOCK_FILE)

    def rollback_journal_key(self, stack: str, region: str) -> str:
        return self._region_key(stack, region, ROLLBACK_JOURNAL_FILE)

    def create_tokens_key(self, stack: str, region: str) -> str:
        return self._region_key(stack, region, CREATE_TOKENS_FILE)

    def events_prefix(self, stack: str, region: str) -> str:
        """`{prefix}/{stack}/{region}/deployments/`, ending in `/`."""
        return self._region_key(stack, region, f"{DEPLOYMENTS_DIR}/")

    def event_index_key(self, stack: str, region: str) -> str:
        return f"{self.events_prefix(stack, region)}{EVENT_INDEX_FILE}"

    def event_stream_key(self, stack: str, region: str, run_id: str) -> str:
        return f"{self.events_prefix(stack, region)}{_check_segment(run_id, 'run id')}{EVENT_STREAM_SUFFIX}"

    def exports_index_key(self, region: str) -> str:
        return f"{self.prefix}/{EXPORTS_INDEX_DIR}/{_check_segment(region, 'region')}/{EXPORTS_FILE}"

    def parse(self, key: str) -> ParsedKey | None:
        """What `key` is under this prefix, or None when it is not one of cdkd's keys here.

        Depth decides, as in cdkd: 2 segments are legacy, 3 are region-scoped (or the
        exports index), 4 are `deployments/` files. Deeper keys (a nested custom prefix
        such as `cdkd/team-a/...` under a `cdkd` listing) are not records of this prefix.
        Like cdkd, a 3-segment key of a nested prefix (`cdkd/team-a/S/state.json`) does
        read as stack `team-a` in region `S`; the layout cannot tell the two apart.
        """
        if not isinstance(key, str) or not key.startswith(self.list_prefix):
            return None
        segments = key[len(self.list_prefix) :].split("/")
        if "" in segments:
            return None
        if len(segments) == 2:
            stack, file = segments
            kind = _LEGACY_FILES.get(file)
            return ParsedKey(kind=kind, key=key, stack_name=stack) if kind else None
        if len(segments) == 3:
            first, region, file = segments
            if first == EXPORTS_INDEX_DIR and file == EXPORTS_FILE:
                return ParsedKey(kind=KeyKind.EXPORTS_INDEX, key=key, region=region)
            kind = _REGION_FILES.get(file)
            return ParsedKey(kind=kind, key=key, stack_name=first, region=region) if kind else None
        if len(segments) == 4:
            stack, region, directory, file = segments
            if directory != DEPLOYMENTS_DIR:
                return None
            if file == EVENT_INDEX_FILE:
                return ParsedKey(kind=KeyKind.EVENT_INDEX, key=key, stack_name=stack, region=region)
            if file.endswith(EVENT_STREAM_SUFFIX) and len(file) > len(EVENT_STREAM_SUFFIX):
                run_id = file[: -len(EVENT_STREAM_SUFFIX)]
                return ParsedKey(kind=KeyKind.EVENT_STREAM, key=key, stack_name=stack, region=region, run_id=run_id)
        return None

    def classify(self, key: str) -> ParsedKey | None:
        """`parse(key)`, else `parse_global(key)`: any cdkd key of a whole-bucket listing."""
        return self.parse(key) or parse_global(key)


def child_stack_name(parent: str, logical_id: str) -> str:
    """The stack name of nested stack `logical_id` inside `parent` (`{parent}~{logicalId}`).

    `parent` may itself be nested (grandchildren chain). ValueError when either part is
    empty or holds `/`, or when `logical_id` holds `~` (it would read as another level).
    """
    _check_segment(parent, "parent stack name")
    _check_segment(logical_id, "nested stack logical id")
    if NESTED_SEPARATOR in logical_id:
        raise ValueError(f"nested stack logical id must not contain {NESTED_SEPARATOR!r}: {logical_id!r}")
    return f"{parent}{NESTED_SEPARATOR}{logical_id}"


def bootstrap_marker_key(region: str) -> str:
    return f"{BOOTSTRAP_PREFIX}/{_check_segment(region, 'region')}.json"


def cr_response_key(request_id: str) -> str:
    return f"{CR_RESPONSE_PREFIX}/{_check_segment(request_id, 'request id')}.json"


def migrate_tmp_key(stack: str, epoch_ms: int, extension: str = "json") -> str:
    """`cdkd-migrate-tmp/{stackName}/{epochMs}.{json|yaml}`."""
    if extension not in ("json", "yaml"):
        raise ValueError(f"extension must be 'json' or 'yaml': {extension!r}")
    if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int) or epoch_ms < 0:
        raise ValueError(f"epoch_ms must be a non-negative int: {epoch_ms!r}")
    return f"{MIGRATE_TMP_PREFIX}/{_check_segment(stack, 'stack name')}/{epoch_ms}.{extension}"


def parse_global(key: str) -> ParsedKey | None:
    """Prefix-less families: bootstrap markers, custom-resource responses, migrate temp files."""
    if not isinstance(key, str):
        return None
    segments = key.split("/")
    if "" in segments:
        return None
    if len(segments) == 2:
        family, file = segments
        if not file.endswith(".json") or file == ".json":
            return None
        name = file[: -len(".json")]
        if family == BOOTSTRAP_PREFIX:
            return ParsedKey(kind=KeyKind.BOOTSTRAP_MARKER, key=key, region=name)
        if family == CR_RESPONSE_PREFIX:
            return ParsedKey(kind=KeyKind.CR_RESPONSE, key=key, request_id=name)
        return None
    if len(segments) == 3 and segments[0] == MIGRATE_TMP_PREFIX:
        match = _MIGRATE_FILE_RE.fullmatch(segments[2])
        if match:
            return ParsedKey(kind=KeyKind.MIGRATE_TMP, key=key, stack_name=segments[1], epoch_ms=int(match[1]))
    return None


def is_region_shaped(value: str) -> bool:
    """True when `value` looks like an AWS region (cdkd's `describeStateKey` heuristic)."""
    return isinstance(value, str) and _REGION_RE.fullmatch(value) is not None


def run_id_timestamp_ms(run_id: str) -> int | None:
    """Epoch ms from a run id's leading `YYYYMMDDTHHMMSSmmmZ`, or None when it has none.

    None is the safe answer: age-based pruning keeps runs it cannot date.
    """
    match = _RUN_ID_TS_RE.match(run_id) if isinstance(run_id, str) else None
    if match is None:
        return None
    year, month, day, hour, minute, second, millis = (int(g) for g in match.groups())
    try:
        moment = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=UTC)
    except ValueError:  # e.g. month 13 or 30 February
        return None
    # Integer arithmetic: float timestamps would round, and int() truncates pre-1970 ids.
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def new_run_id(now: datetime | None = None) -> str:
    """A time-sortable run id in cdkd's format, e.g. `20260613T012345678Z-1a2b3c4d`.

    A naive `now` is taken as UTC. Lexicographic order of ids is chronological order.
    """
    moment = now or datetime.now(UTC)
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    compact = f"{moment:%Y%m%dT%H%M%S}{moment.microsecond // 1000:03d}Z"
    return f"{compact}-{uuid.uuid4().hex[:8]}"
