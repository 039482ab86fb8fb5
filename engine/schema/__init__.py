"""cdkd's state.json and lock.json: lenient read, exact write.

Representation (the contract stacks.sync, the views and the operations rely on):

* A model stores every value EXACTLY as decoded from JSON. Declared fields are annotated
  `Stored` (= `Any`): the cdkd type of each is in its comment, but a hand-edited or torn
  record may hold anything there, and validation must neither fail nor coerce. That is
  what makes both promises true at once: `parse_state` never raises, and `dump_state` of
  an undamaged parsed record gives back the same JSON value (bytes too, for a record cdkd
  wrote, apart from the version it stamps).
* Unknown keys are kept at every level: at the top level and in locks through
  `extra='allow'`, inside rows, orphan records and entries because those stay plain JSON
  dicts inside the stored containers.
* Key order is kept, and nothing is invented: a model dumps only the keys it was given or
  was assigned, in the order read, new keys appended (a `model_dump(exclude_unset=True)`
  that also keeps order).
* Shape checks live in `state_defects` (blocking, per the seeds' malformed-container
  rules) and typed reads in the accessors of `ParsedRecord`, which repair for display the
  way `cdkd diff` does: an unreadable container reads as empty, an unreadable entry is
  dropped, `exportNames` that is not a list reads as an empty set.

Writers emit what cdkd's `saveState` emits: `{...state, version: 11, stackName, region}`
through `JSON.stringify(x, null, 2)`, with no trailing newline; locks through
`JSON.stringify(lockInfo)` (seeds 000/001, "Lock Acquisition").

Layout: `decode` (bounded JSON decoding), `models` (the pydantic records and Defect),
`versions` (schema versions), `defects` (the malformed-container rules and their
messages), `parse` (parse_state, ParsedRecord), `dump` (dump_state, js_stringify) and
`lock` (lock.json). Everything is importable from `engine.schema` as before.
"""

from __future__ import annotations

from engine.schema.decode import (
    BIGINT_MAX,
    INT_MAX,
    MAX_BODY_BYTES,
    MAX_DEPTH,
    Decoded,
    decode_json,
    describe_region_value_kind,
    in_range,
    nesting_depth,
)
from engine.schema.defects import (
    state_defects,
)
from engine.schema.dump import (
    dump_state,
    js_stringify,
)
from engine.schema.lock import (
    ParsedLock,
    dump_lock,
    parse_lock,
)
from engine.schema.models import (
    RETAIN_POLICIES,
    Defect,
    LockInfo,
    OrderedModel,
    ResourceState,
    StackOrphanRecord,
    StackState,
    StateImportEntry,
    StateOutputReadEntry,
    Stored,
)
from engine.schema.parse import (
    ParsedRecord,
    display_row,
    parse_state,
)
from engine.schema.versions import (
    SUPPORTED_VERSION,
    fields_version,
    version_line,
    write_version,
)

__all__ = [
    "BIGINT_MAX",
    "Decoded",
    "Defect",
    "INT_MAX",
    "LockInfo",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "OrderedModel",
    "ParsedLock",
    "ParsedRecord",
    "RETAIN_POLICIES",
    "ResourceState",
    "SUPPORTED_VERSION",
    "StackOrphanRecord",
    "StackState",
    "StateImportEntry",
    "StateOutputReadEntry",
    "Stored",
    "decode_json",
    "describe_region_value_kind",
    "display_row",
    "dump_lock",
    "dump_state",
    "fields_version",
    "in_range",
    "js_stringify",
    "nesting_depth",
    "parse_lock",
    "parse_state",
    "state_defects",
    "version_line",
    "write_version",
]
