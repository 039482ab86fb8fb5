"""Secret scan and scrub: find secret values everywhere they hide in a state bucket and its
history, and remove them as an operation (issue 5; reference §7, §9, §10.1, §10.5, §10.8,
E12, E20).

Scan (`scan`)
  Looks at every current `state.json` under the prefix (or of the named stacks) and every
  noncurrent version of it, the rollback journal, the exports index files
  (`_index/{region}/exports.json`), the event streams (`deployments/*.jsonl`) and the
  custom-resource response placeholders (`custom-resource-responses/*.json`), each with
  its versions. What counts as a secret is `engine.secrets`' business (values read from
  Secrets Manager and SSM under the account's role, credential shapes, property names).
  Returns `Finding`s: where (account, stack, region, key, version, JSON path) and what
  matched (`source`), never any part of a value.
  Speed: objects are listed per prefix with `ListObjectVersions` (1,000 a page, not one
  call per key), fetched and scanned in a bounded thread pool, and a body in which no
  secret, shape or secret-bearing property name occurs as text is never decoded.

Scrub (operation kind `scrub`, registered with `engine.operations`)
  Rewrites the stack's current record: a whole value equal to a known secret becomes the
  reference a deploy resolves again (`{{resolve:secretsmanager:<arn>:SecretString:<key>::}}`,
  `{{resolve:ssm-secure:<name>}}` for a SecureString parameter of the record's region);
  anything else (shapes, property-name hits, strings that merely contain a secret) becomes
  `***` whole. Covered: resources' and orphan records' `properties`,
  `observedProperties`, `attributes`, and `outputs`. `skippedOutputs` is dropped, every
  other field stays; written through cdkd's writer (`dump_state`) with `If-Match`. The
  exports index entries the stack owns are patched to the new output values (`If-Match`,
  retried on 412). With `params["purge_history"]` the noncurrent versions of every key
  that held a finding are deleted (IsLatest false only), unless the bucket has Object Lock.
  Nothing secret is stored in the plan: `execute` reads the secrets again and re-derives.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine import aws
from engine.backend import StateBucket, StoredObject
from engine.errors import EngineError, NotFound, PreconditionFailed, RecordRefused
from engine.keys import CR_RESPONSE_PREFIX, EXPORTS_INDEX_DIR, KeyKind, KeyLayout, ParsedKey
from engine.operations import Context, OperationRefused, Outcome, Plan, StalePlan, register
from engine.schema import (
    SUPPORTED_VERSION,
    StackState,
    dump_state,
    js_stringify,
    parse_state,
    version_line,
    write_version,
)
from engine.secrets import (
    SECRET_KEY_LABEL,
    Candidates,
    Match,
    SecretIndex,
    collect,
    has_access_key_id,
    is_masked,
    is_secret_key_shape,
    property_label,
    property_names_in,
    secret_property,
    shape_hits,
    shape_labels,
)

SCANNED_KINDS = frozenset(
    {
        KeyKind.STATE,
        KeyKind.LEGACY_STATE,
        KeyKind.ROLLBACK_JOURNAL,
        KeyKind.EVENT_STREAM,
        KeyKind.EXPORTS_INDEX,
        KeyKind.CR_RESPONSE,
    }
)
COVERED_ROW_FIELDS = ("properties", "observedProperties", "attributes")
REDACTED_KEY = "***"  # a path element standing for an object key that holds a secret
INDEX_VERSION = 1  # ExportIndexFile.indexVersion this app writes
INDEX_ATTEMPTS = 5  # cdkd's exports-index update: up to 5 attempts on 412
MAX_NAMED_KEYS = 5  # the purge warning names up to five keys, then "(and N more)"
ROTATE = (
    "ROTATE every secret that was found: scrubbing removes the copies from the state bucket, but anyone who "
    "could read it may already hold the values."
)
_STACK_ID = re.compile(r"arn:[^:]+:cloudformation:([^:]*):[^:]*:stack/([^/]+)/")


# --- findings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One place a secret was found. `versionId` None = the current version; `path` is the
    JSON path (keys and list indexes; for `.jsonl`, `[lineIndex, ...]`); `source` says what
    matched (never any part of the value); `whole` is True when the whole value is the
    secret (False: the secret is embedded in a longer string)."""

    account: str
    stackName: str | None
    region: str | None
    key: str
    versionId: str | None
    path: tuple[str | int, ...]
    source: str
    whole: bool

    def as_json(self, *, whole: bool = False) -> dict[str, Any]:
        """The CLI's finding shape (`whole` added on request)."""
        row: dict[str, Any] = {
            "account": self.account,
            "stackName": self.stackName,
            "region": self.region,
            "key": self.key,
            "versionId": self.versionId,
            "path": list(self.path),
            "source": self.source,
        }
        if whole:
            row["whole"] = self.whole
        return row


@dataclass
class ScanResult:
    account: str
    bucket: str
    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    objects_scanned: int = 0  # object versions read
    keys: int = 0
    secrets: int = 0  # known secret values searched for
    regions: list[str] = field(default_factory=list)
    seconds: float = 0.0
    match_seconds: float = 0.0  # time spent matching (summed over threads), the rest is S3

    def as_json(self) -> dict[str, Any]:
        return {"findings": [f.as_json() for f in self.findings]}


@dataclass(frozen=True)
class Hit:
    """A match at a path inside one decoded document (no value)."""

    path: tuple[str | int, ...]
    match: Match
    in_key: bool = False  # the secret is in an object KEY (never rewritten)
    redacted_path: bool = False  # a key along the path held a secret (path not addressable)


# --- matching inside one document ------------------------------------------------------------


def _names_a_user(key_name: str | None) -> bool:
    return key_name is not None and "user" in key_name.lower()


class _Walker:
    """Walks a decoded JSON value and reports every string leaf (and object key) that
    matches. `resourceType` of the nearest enclosing object selects type-specific names."""

    def __init__(self, cands: Candidates, *, shapes: bool, props: bool) -> None:
        self.cands = cands
        self.shapes = shapes
        self.props = props
        self.hits: list[Hit] = []

    def match(self, text: str, key_name: str | None, rtype: str | None, sibling_key_id: bool) -> Match | None:
        if not text or is_masked(text):
            return None
        labels: list[str] = []
        known: list[Any] = []
        embedded = False
        if self.cands:
            known = self.cands.whole(text)
            # A secret's user name ("payments", "admin") is a common word: it counts only
            # where the record names a user (MasterUsername, DbUser), not in every
            # service name or tag that happens to spell it.
            known = [s for s in known if s.embeddable or _names_a_user(key_name)]
            if known:
                labels += [s.label for s in known]
            else:
                inside = self.cands.embedded(text)
                if inside:
                    labels += [s.label for s in inside]
                    embedded = True
        shape_whole = False
        if self.shapes:
            found, shape_whole = shape_labels(text)
            labels += found
            if sibling_key_id and SECRET_KEY_LABEL not in labels and is_secret_key_shape(text):
                labels.append(SECRET_KEY_LABEL)
                shape_whole = True
        prop = self.props and key_name is not None and secret_property(key_name, rtype)
        if prop:
            labels.append(property_label(key_name or "", rtype))
        if not labels:
            return None
        whole = bool(known) or (not embedded and (prop or shape_whole))
        return Match(tuple(dict.fromkeys(labels)), whole, tuple(known))

    def walk(
        self,
        value: Any,
        path: tuple[str | int, ...] = (),
        rtype: str | None = None,
        key_name: str | None = None,
        redacted: bool = False,
    ) -> None:
        if isinstance(value, str):
            m = self.match(value, key_name, rtype, False)
            if m is not None:
                self.hits.append(Hit(path, m, redacted_path=redacted))
        elif isinstance(value, dict):
            declared = value.get("resourceType")
            if isinstance(declared, str):
                rtype = declared
            sibling = self.shapes and any(isinstance(v, str) and has_access_key_id(v) for v in value.values())
            for k, v in value.items():
                element: str = k
                child_redacted = redacted
                if self.cands and isinstance(k, str) and k:
                    in_key = self.cands.whole(k) or self.cands.embedded(k)
                    if in_key:
                        # The key itself holds a secret: never print it, not even in a path.
                        element, child_redacted = REDACTED_KEY, True
                        labels = tuple(dict.fromkeys(f"{s.label} (in an object key)" for s in in_key))
                        self.hits.append(Hit(path + (element,), Match(labels, False), in_key=True, redacted_path=True))
                if isinstance(v, str):
                    m = self.match(v, k, rtype, sibling)
                    if m is not None:
                        self.hits.append(Hit(path + (element,), m, redacted_path=child_redacted))
                else:
                    self.walk(v, path + (element,), rtype, k, child_redacted)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.walk(item, path + (i,), rtype, key_name, redacted)


def _prefilter(index: SecretIndex, text: str) -> tuple[Candidates, bool, bool] | None:
    """(candidates, shapes possible, property names present), or None when the body can
    hold no finding at all (the common case: then it is never decoded)."""
    cands = index.candidates(text)
    shapes = shape_hits(text)
    props = property_names_in(text)
    if not cands and not shapes and not props:
        return None
    return cands, shapes, props


def _decode_json(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def scan_document(index: SecretIndex, body: bytes, *, jsonl: bool = False) -> list[Hit]:
    """Every hit in one stored body (JSON, or JSON Lines with `jsonl`). A body that is
    not JSON is scanned as one string (path []); a torn JSONL line as one (path [i])."""
    text = body.decode("utf-8", errors="replace")
    gate = _prefilter(index, text)
    if gate is None:
        return []
    walker = _Walker(*gate[:1], shapes=gate[1], props=gate[2])
    if jsonl:
        for i, line in enumerate(text.split("\n")):
            if not line.strip():
                continue
            ok, value = _decode_json(line)
            walker.walk(value if ok else line, (i,))
    else:
        ok, value = _decode_json(text)
        walker.walk(value if ok else text, ())
    return walker.hits


def _hits_in_value(cands: Candidates, value: Any, path: tuple[str | int, ...] = ()) -> list[Hit]:
    walker = _Walker(cands, shapes=True, props=True)
    walker.walk(value, path)
    return walker.hits


# --- listing what to scan --------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    key: str
    version_id: str | None  # the S3 version id to read (None: unversioned bucket)
    latest: bool
    parsed: ParsedKey


def _s3(bucket: StateBucket) -> Any:
    return aws.client(bucket.session, "s3", bucket.region)


def _call(bucket: StateBucket, api: str, method: Callable[..., Any], key: str | None = None, **params: Any) -> Any:
    """One S3 call through the bucket's client, counted, errors as engine errors."""
    bucket.requests.add(api)
    try:
        return method(Bucket=bucket.name, ExpectedBucketOwner=bucket.account_id, **params)
    except (ClientError, BotoCoreError) as exc:
        raise aws.s3_error(exc, api=api, account_id=bucket.account_id, bucket=bucket.name, key=key) from None


def list_versions(bucket: StateBucket, prefix: str) -> Iterator[dict[str, Any]]:
    """Every version and delete marker under `prefix`, one ListObjectVersions page at a
    time (each row has Key, VersionId, IsLatest and `DeleteMarker`)."""
    s3 = _s3(bucket)
    params: dict[str, Any] = {"Prefix": prefix}
    while True:
        page = _call(bucket, "ListObjectVersions", s3.list_object_versions, key=prefix, **params)
        for item in page.get("Versions", []):
            yield {**item, "DeleteMarker": False}
        for item in page.get("DeleteMarkers", []):
            yield {**item, "DeleteMarker": True}
        if not page.get("IsTruncated"):
            return
        params["KeyMarker"] = page.get("NextKeyMarker")
        params["VersionIdMarker"] = page.get("NextVersionIdMarker")


def _targets(bucket: StateBucket, layout: KeyLayout, prefixes: Iterable[str], *, history: bool) -> list[Target]:
    targets: list[Target] = []
    seen: set[tuple[str, str | None]] = set()
    for prefix in prefixes:
        if history:
            rows: Iterable[dict[str, Any]] = (r for r in list_versions(bucket, prefix) if not r["DeleteMarker"])
        else:
            rows = ({"Key": o.key, "VersionId": None, "IsLatest": True} for o in bucket.list_objects(prefix))
        for row in rows:
            parsed = layout.classify(row["Key"])
            if parsed is None or parsed.kind not in SCANNED_KINDS:
                continue
            version_id = row.get("VersionId")
            if version_id == "null":
                version_id = None  # written before versioning was enabled: read as current
            ident = (row["Key"], version_id)
            if ident in seen:
                continue
            seen.add(ident)
            targets.append(Target(row["Key"], version_id, bool(row.get("IsLatest")), parsed))
    return targets


def _prefixes(layout: KeyLayout, stacks: list[str] | None) -> list[str]:
    if not stacks:
        return [layout.list_prefix, f"{CR_RESPONSE_PREFIX}/"]
    return [
        *(layout.stack_prefix(s) for s in dict.fromkeys(stacks)),
        f"{layout.prefix}/{EXPORTS_INDEX_DIR}/",
        f"{CR_RESPONSE_PREFIX}/",
    ]


# --- attributing a hit to a stack --------------------------------------------------------------


def _owner(target: Target, hit: Hit, document: Any) -> tuple[str | None, str | None]:
    """(stackName, region) a hit belongs to: the key's for stack keys, the entry's
    producer in an exports index, the request's StackId in a custom-resource response."""
    parsed = target.parsed
    if parsed.kind == KeyKind.EXPORTS_INDEX:
        if len(hit.path) >= 2 and hit.path[0] == "exports" and isinstance(document, dict):
            entry = (
                (document.get("exports") or {}).get(hit.path[1]) if isinstance(document.get("exports"), dict) else None
            )
            if isinstance(entry, dict):
                stack = entry.get("producerStack")
                region = entry.get("producerRegion")
                return (stack if isinstance(stack, str) else None, region if isinstance(region, str) else parsed.region)
        return None, parsed.region
    if parsed.kind == KeyKind.CR_RESPONSE:
        stack_id = document.get("StackId") if isinstance(document, dict) else None
        m = _STACK_ID.match(stack_id) if isinstance(stack_id, str) else None
        return (m.group(2), m.group(1) or None) if m else (None, None)
    return parsed.stack_name, parsed.region


# --- the scan --------------------------------------------------------------------------------


def secret_regions(bucket: StateBucket, regions: Iterable[str | None]) -> list[str]:
    """The regions whose secrets are searched: those given plus the bucket's own."""
    return sorted({r for r in regions if r} | {bucket.region})


def scan(
    bucket: StateBucket,
    layout: KeyLayout,
    *,
    stacks: list[str] | None = None,
    region: str | None = None,
    index: SecretIndex | None = None,
    history: bool = True,
    concurrency: int = 16,
    log: Callable[[str, str], None] | None = None,
) -> ScanResult:
    """Find secrets in the bucket: every stack under the prefix, or only `stacks` (and
    only `region` when given). With `history` every noncurrent version is read too.

    `index` defaults to the account's secrets (`engine.secrets.collect`) in every region
    the scanned keys name plus the bucket's. Never puts a secret value in its result.
    Raises EngineError when a listing fails (AccessDenied names the action); an object
    that cannot be read becomes a warning.
    """
    started = time.monotonic()
    result = ScanResult(account=bucket.account_id, bucket=bucket.name)
    targets = _targets(bucket, layout, _prefixes(layout, stacks), history=history)
    wanted = set(stacks or [])
    if stacks:
        # Keys of other stacks that share a listing prefix never count (E7: by (stack, region)).
        targets = [
            t
            for t in targets
            if t.parsed.kind in (KeyKind.EXPORTS_INDEX, KeyKind.CR_RESPONSE)
            or (t.parsed.stack_name in wanted and (region is None or t.parsed.region == region))
        ]
    if index is None:
        regions = secret_regions(bucket, (t.parsed.region for t in targets))
        index = collect(bucket.session, bucket.account_id, regions)
    result.regions = list(index.regions)
    result.secrets = len(index)
    result.warnings += index.warnings
    result.keys = len({t.key for t in targets})
    lock = threading.Lock()

    def one(target: Target) -> list[Finding]:
        try:
            stored = bucket.get(target.key, version_id=target.version_id)
        except NotFound:
            return []  # deleted (or purged) since the listing
        except EngineError as exc:
            with lock:
                result.warnings.append(index.mask(f"could not read {target.key} (version {target.version_id}): {exc}"))
            return []
        began = time.perf_counter()
        findings = findings_in(index, target, stored.body, bucket.account_id)
        spent = time.perf_counter() - began
        with lock:
            result.objects_scanned += 1
            result.match_seconds += spent
        return findings

    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        for found in pool.map(one, targets):
            for f in found:
                if stacks and (f.stackName not in wanted or (region is not None and f.region != region)):
                    continue
                result.findings.append(f)
    result.findings.sort(key=lambda f: (f.key, f.versionId is not None, f.versionId or "", [str(p) for p in f.path]))
    result.seconds = time.monotonic() - started
    if log is not None:
        log(
            "info",
            f"scanned {result.objects_scanned} object version(s) of {result.keys} key(s) in s3://{bucket.name} for "
            f"{result.secrets} known secret value(s) in {', '.join(result.regions)}: {len(result.findings)} finding(s)",
        )
    return result


def findings_in(index: SecretIndex, target: Target, body: bytes, account: str) -> list[Finding]:
    """The findings in one stored object version (attributed to their stack)."""
    jsonl = target.parsed.kind == KeyKind.EVENT_STREAM
    hits = scan_document(index, body, jsonl=jsonl)
    if not hits:
        return []
    document: Any = None
    if target.parsed.kind in (KeyKind.EXPORTS_INDEX, KeyKind.CR_RESPONSE):
        _, document = _decode_json(body.decode("utf-8", errors="replace"))
    version = None if target.latest else target.version_id
    out = []
    for hit in hits:
        stack, region = _owner(target, hit, document)
        out.append(Finding(account, stack, region, target.key, version, hit.path, hit.match.source, hit.match.whole))
    return out


# --- the scrub: deriving the rewrite ----------------------------------------------------------


def _render(path: Iterable[str | int]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _covered(path: tuple[str | int, ...]) -> bool:
    """True for paths scrub rewrites: rows' and orphan records' properties,
    observedProperties and attributes, and outputs."""
    if len(path) >= 2 and path[0] == "outputs":
        return True
    if len(path) >= 4 and path[0] == "resources" and path[2] in COVERED_ROW_FIELDS:
        return True
    return (
        len(path) >= 5
        and path[0] == "orphans"
        and isinstance(path[1], int)
        and path[2] == "state"
        and path[3] in COVERED_ROW_FIELDS
    )


@dataclass
class Derivation:
    rewrites: list[dict[str, Any]]  # {"path", "to", "source", "whole"}: no values
    left: list[dict[str, Any]]  # hits in the record scrub does not rewrite (keys, other fields)
    state: StackState | None
    outputs: dict[str, Any]


def derive(index: SecretIndex, stored: StoredObject, stack: str, region: str) -> Derivation:
    """What scrub changes in the current record. Refuses (OperationRefused) a record that
    is newer than SUPPORTED_VERSION or damaged, naming it."""
    parsed = parse_state(stored.body, key_region=region, stack_name=stack)
    if parsed.newer_than_supported:
        raise OperationRefused(
            f"{stored.key} has schema version {parsed.version}, newer than the {SUPPORTED_VERSION} this app "
            f"writes; it is read-only here and left alone. Scrub it with that cdkd's `cdkd scrub`."
        )
    if parsed.defects or parsed.state is None:
        listed = "; ".join(f"{d.path or '(root)'}: {d.code}" for d in parsed.defects)
        raise OperationRefused(f"{stored.key} is malformed ({listed}); it is refused and left alone")
    text = stored.body.decode("utf-8", errors="replace")
    gate = _prefilter(index, text)
    hits: list[Hit] = []
    if gate is not None:
        walker = _Walker(gate[0], shapes=gate[1], props=gate[2])
        walker.walk(parsed.data)
        hits = walker.hits
    rewrites: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    data = json.loads(stored.body.decode("utf-8"))
    for hit in hits:
        if hit.in_key or hit.redacted_path or not _covered(hit.path):
            why = "a secret in an object key cannot be rewritten" if hit.in_key else "outside what scrub rewrites"
            left.append({"path": list(hit.path), "source": hit.match.source, "why": why})
            continue
        to = hit.match.replacement(region)
        rewrites.append({"path": list(hit.path), "to": to, "source": hit.match.source, "whole": hit.match.whole})
        _set(data, hit.path, to)
    state = StackState.model_validate(data)
    outputs = data.get("outputs") if isinstance(data.get("outputs"), dict) else {}
    return Derivation(rewrites, left, state, outputs)


def _set(document: Any, path: tuple[str | int, ...], value: Any) -> None:
    node = document
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


# --- the exports index --------------------------------------------------------------------------


def _index_patch(
    index: SecretIndex, stored: StoredObject, stack: str, region: str, outputs: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """(the patched document or None, entry names changed, why it is left alone)."""
    ok, document = _decode_json(stored.body.decode("utf-8", errors="replace"))
    if not ok or not isinstance(document, dict) or not isinstance(document.get("exports"), dict):
        return None, [], "it is not a readable exports index"
    version = document.get("indexVersion")
    if isinstance(version, int | float) and not isinstance(version, bool) and version > INDEX_VERSION:
        return None, [], f"indexVersion {version} is newer than this app knows"
    cands = index.all()
    changed: list[str] = []
    for name, entry in document["exports"].items():
        if not isinstance(entry, dict) or entry.get("producerStack") != stack:
            continue
        if entry.get("producerRegion") != region:
            continue
        value = entry.get("value")
        hits = _hits_in_value(cands, value)
        if name in outputs:
            target = outputs[name]
            converge = target != value and "{{resolve:" in json.dumps(target)  # cdkd's own repair rule
            if (hits or converge) and target != value:
                entry["value"] = target
                changed.append(name)
        elif hits:
            patched: Any = {"v": value}
            for hit in hits:
                if not hit.in_key and not hit.redacted_path:
                    _set(patched, ("v", *hit.path), hit.match.replacement(region))
            if patched["v"] != value:
                entry["value"] = patched["v"]
                changed.append(name)
    if changed:
        document["lastModified"] = int(time.time() * 1000)
    return (document if changed else None), changed, None


def _index_keys(bucket: StateBucket, layout: KeyLayout) -> list[str]:
    prefix = f"{layout.prefix}/{EXPORTS_INDEX_DIR}/"
    return [o.key for o in bucket.list_objects(prefix) if layout.parse(o.key) is not None]


# --- purging history ------------------------------------------------------------------------------


@dataclass
class PurgeReport:
    """Per-key results of a noncurrent-version purge. Never raised: failures are data."""

    deleted: dict[str, int] = field(default_factory=dict)  # key -> versions removed
    failures: dict[str, str] = field(default_factory=dict)  # key -> "Code: s3:Action"
    body_purged: bool = False  # a body (not only markers) was removed, or it is unknown

    def warning(self, bucket: str) -> str | None:
        """cdkd's one warning for every key that could not be purged (None: all purged)."""
        if not self.failures:
            return None
        keys = sorted(self.failures)
        named = ", ".join(f"{k} ({self.failures[k]})" for k in keys[:MAX_NAMED_KEYS])
        more = f" (and {len(keys) - MAX_NAMED_KEYS} more)" if len(keys) > MAX_NAMED_KEYS else ""
        return (
            f"Could not purge noncurrent versions of {len(keys)} key(s) in s3://{bucket}. Their previous versions "
            f"survive and remain readable via GetObject with a VersionId (state records, journals, exports index "
            f"bodies or custom-resource responses that held a secret). Grant s3:ListBucketVersions and "
            f"s3:DeleteObjectVersion on the state bucket, or purge the key(s) by hand. Failures: {named}{more}"
        )


def purge_noncurrent(bucket: StateBucket, keys: Iterable[str]) -> PurgeReport:
    """Delete every noncurrent version and delete marker (IsLatest false) of each key in
    the set; the current version is never touched. `DeleteObjects` in batches of 1,000;
    its per-key `Errors` are read (a missing s3:DeleteObjectVersion shows up there), a
    per-key NoSuchVersion counts as done, and a denied listing or call fails only the keys
    concerned. Never raises."""
    report = PurgeReport()
    doomed: list[tuple[str, str, bool]] = []  # (key, version id, is a body)
    for key in dict.fromkeys(keys):
        try:
            versions = bucket.versions(key)  # exactly this key: membership is the safety filter
        except EngineError as exc:
            report.failures[key] = f"{getattr(exc, 'code', '') or type(exc).__name__}: s3:ListBucketVersions"
            report.body_purged = True  # unknown what survives: the replication check must run
            continue
        report.deleted.setdefault(key, 0)
        doomed += [(v.key, v.version_id, not v.delete_marker) for v in versions if not v.is_latest]
    s3 = _s3(bucket)
    for start in range(0, len(doomed), 1000):
        batch = doomed[start : start + 1000]
        objects = [{"Key": k, "VersionId": v} for k, v, _ in batch]
        try:
            response = _call(bucket, "DeleteObjects", s3.delete_objects, Delete={"Objects": objects, "Quiet": True})
        except EngineError as exc:
            for k, _, _ in batch:
                report.failures.setdefault(
                    k, f"{getattr(exc, 'code', '') or type(exc).__name__}: s3:DeleteObjectVersion"
                )
            report.body_purged = True
            continue
        failed: set[tuple[str, str]] = set()
        for error in response.get("Errors") or []:
            k, v, code = error.get("Key", ""), error.get("VersionId", ""), error.get("Code", "")
            if code == "NoSuchVersion":
                continue  # already gone: the state the purge exists to produce
            failed.add((k, v))
            report.failures.setdefault(k, f"{code or 'Error'}: s3:DeleteObjectVersion")
        for k, v, body in batch:
            if (k, v) not in failed:
                report.deleted[k] = report.deleted.get(k, 0) + 1
                report.body_purged = report.body_purged or body
            else:
                report.body_purged = True
    return report


def object_lock_enabled(bucket: StateBucket) -> bool | None:
    """True when the bucket has Object Lock enabled, False when not, None when unknown."""
    s3 = _s3(bucket)
    try:
        response = _call(bucket, "GetObjectLockConfiguration", s3.get_object_lock_configuration)
    except EngineError as exc:
        if getattr(exc, "code", "") in ("ObjectLockConfigurationNotFoundError", "NoSuchObjectLockConfiguration"):
            return False
        return None
    return (response.get("ObjectLockConfiguration") or {}).get("ObjectLockEnabled") == "Enabled"


def replication_destinations(bucket: StateBucket, keys: Iterable[str]) -> tuple[list[str], str | None]:
    """(destination buckets of replication rules covering any of `keys`, a note when the
    configuration could not be read). Tag-filtered rules are assumed to match; disabled
    rules still count (they stop future copies, not what was already copied)."""
    s3 = _s3(bucket)
    try:
        response = _call(bucket, "GetBucketReplication", s3.get_bucket_replication)
    except EngineError as exc:
        if getattr(exc, "code", "") == "ReplicationConfigurationNotFoundError":
            return [], None
        return [], f"replication could not be checked (s3:GetReplicationConfiguration: {getattr(exc, 'code', '')})"
    keys = list(keys)
    found: list[str] = []
    for rule in (response.get("ReplicationConfiguration") or {}).get("Rules", []):
        prefix = _rule_prefix(rule)
        if prefix is not None and not any(k.startswith(prefix) for k in keys):
            continue
        destination = (rule.get("Destination") or {}).get("Bucket", "")
        name = destination.rsplit(":", 1)[-1] if destination else "(unknown)"
        if rule.get("Status") == "Disabled":
            name += " (rule disabled)"
        if name not in found:
            found.append(name)
    return found, None


def _rule_prefix(rule: dict[str, Any]) -> str | None:
    """The key prefix a replication rule is limited to; None when it may cover any key."""
    if "Prefix" in rule:
        return rule["Prefix"] or None
    flt = rule.get("Filter") or {}
    if "Prefix" in flt:
        return flt["Prefix"] or None
    return (flt.get("And") or {}).get("Prefix") or None


# --- the operation --------------------------------------------------------------------------------


def _index_for(ctx: Context, regions: list[str]) -> SecretIndex:
    return collect(ctx.bucket.session, ctx.bucket.account_id, regions)


class Scrub:
    kind = "scrub"
    label = "Scrub secrets"
    cancellable = False

    def _key(self, ctx: Context) -> str:
        if ctx.region is None:
            raise OperationRefused(
                "scrub needs a region-scoped record; a legacy record must be migrated by a cdkd deploy first"
            )
        return ctx.layout.state_key(ctx.stack, ctx.region)

    def _survey(self, ctx: Context) -> tuple[StoredObject, SecretIndex, ScanResult, list[str]]:
        """The current record, the secrets, a scan of every key of the stack with history
        and the exports index keys."""
        key = self._key(ctx)
        try:
            stored = ctx.bucket.get(key)
        except NotFound:
            raise OperationRefused(f"no state record at {key}: nothing to scrub") from None
        index_keys = _index_keys(ctx.bucket, ctx.layout)
        regions = secret_regions(
            ctx.bucket,
            [ctx.region, *(ctx.layout.parse(k).region for k in index_keys)],  # type: ignore[union-attr]
        )
        index = _index_for(ctx, regions)
        result = scan(ctx.bucket, ctx.layout, stacks=[ctx.stack], region=ctx.region, index=index, history=True)
        return stored, index, result, index_keys

    def plan(self, ctx: Context) -> Plan:
        stored, index, result, index_keys = self._survey(ctx)
        key = stored.key
        derived = derive(index, stored, ctx.stack, ctx.region or "")
        purge = bool(ctx.params.get("purge_history"))
        changes: list[str] = []
        for r in derived.rewrites:
            changes.append(f"{key}: {_render(r['path'])} -> {r['to']} ({r['source']})")
        index_changes = self._index_changes(ctx, index, index_keys, derived.outputs)
        for item in index_changes:
            changes.append(f"{item['key']}: exports {', '.join(item['entries'])} -> the new output value(s)")
        if derived.state is not None and derived.state.has("skippedOutputs") and (derived.rewrites or index_changes):
            changes.append(f"{key}: drop skippedOutputs (every save outside a deploy does)")
        version = write_version(derived.state) if derived.state is not None and derived.rewrites else None
        if version is not None:
            changes.append(f"{key}: {version_line(derived.state.version, version)}")
        # Every key that held a finding of this stack (the scan kept only those), the record
        # itself when rewritten (its old body becomes noncurrent), and each index patched.
        purge_keys = sorted(
            {f.key for f in result.findings}
            | ({key} if derived.rewrites else set())
            | {i["key"] for i in index_changes}
        )
        warnings = list(index.warnings)
        left = self._left(result, derived, key)
        history = [f for f in result.findings if f.versionId is not None]
        if purge:
            for k in purge_keys:
                changes.append(f"{k}: delete every noncurrent version (the current one stays)")
        elif history:
            warnings.append(
                f"{len(history)} finding(s) in {len({(f.key, f.versionId) for f in history})} noncurrent version(s) "
                f"stay readable by version id unless history is purged (purge_history)"
            )
        warnings += [f"left as is: {line}" for line in left]
        if not derived.rewrites and not index_changes and not (purge and purge_keys):
            summary = f"No secret to scrub in the current record of {ctx.stack} ({ctx.region})."
        else:
            summary = (
                f"Scrub {len(derived.rewrites)} secret value(s) from the current record of {ctx.stack} "
                f"({ctx.region}), patch {sum(len(i['entries']) for i in index_changes)} exports index entr(y/ies)"
                + (f" and purge the noncurrent versions of {len(purge_keys)} key(s)" if purge else "")
                + f". {ROTATE}"
            )
        return Plan(
            kind=self.kind,
            stack=ctx.stack,
            region=ctx.region,
            etag=stored.etag,
            summary=summary,
            changes=changes,
            warnings=warnings,
            data={
                "key": key,
                "rewrites": derived.rewrites,
                "index": index_changes,
                "purge_history": purge,
                "purge": purge_keys if purge else [],
                "regions": list(index.regions),
                "left": left,
                "sources": sorted({f.source for f in result.findings}),
                "history_findings": len(history),
                "schema_version": version,
            },
        )

    def _index_changes(
        self, ctx: Context, index: SecretIndex, index_keys: list[str], outputs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        changes = []
        for k in index_keys:
            try:
                stored = ctx.bucket.get(k)
            except NotFound:
                continue
            _, names, _ = _index_patch(index, stored, ctx.stack, ctx.region or "", outputs)
            if names:
                changes.append({"key": k, "entries": names})
        return changes

    def _left(self, result: ScanResult, derived: Derivation, key: str) -> list[str]:
        """Lines for findings in CURRENT objects that scrub does not rewrite."""
        lines = [f"{key}: {_render(item['path'])} ({item['source']}; {item['why']})" for item in derived.left]
        for f in result.findings:
            if f.versionId is not None or f.key == key:
                continue
            kind = "exports index" if f"/{EXPORTS_INDEX_DIR}/" in f.key else "current object"
            if kind == "exports index":
                continue  # patched from the outputs (owned entries) or reported by the index step
            lines.append(f"{f.key}: {_render(f.path)} ({f.source}; the current version is not rewritten by scrub)")
        return lines

    def execute(self, ctx: Context, plan: Plan) -> Outcome:
        key = self._key(ctx)
        warnings: list[str] = []
        details: dict[str, Any] = {"key": key}
        status = "succeeded"
        with ctx.held_lock("scrub"):
            try:
                stored = ctx.bucket.get(key)
            except NotFound:
                raise StalePlan(key, plan.etag, None) from None
            if stored.etag != plan.etag:
                raise StalePlan(key, plan.etag, stored.etag)
            # The secrets are read again: nothing secret was kept in the plan.
            index = _index_for(ctx, list(plan.data.get("regions") or secret_regions(ctx.bucket, [ctx.region])))
            derived = derive(index, stored, ctx.stack, ctx.region or "")
            if derived.rewrites != plan.data.get("rewrites"):
                raise OperationRefused(
                    "the rewrite computed now differs from the plan (a secret was added, rotated or removed since); "
                    "compute a new plan"
                )
            etag_after = stored.etag
            if derived.rewrites:
                state = derived.state
                assert state is not None
                state.discard("skippedOutputs")
                state.set("lastModified", int(time.time() * 1000))
                try:
                    body = dump_state(state, stack_name=ctx.stack, region=ctx.region or "")
                except RecordRefused as exc:
                    raise OperationRefused(str(exc)) from None
                try:
                    written = ctx.bucket.put(key, body, if_match=plan.etag)
                except (PreconditionFailed, NotFound):
                    raise StalePlan(key, plan.etag, _etag_now(ctx, key)) from None
                etag_after = written.etag
                ctx.log("info", f"rewrote {len(derived.rewrites)} value(s) in {key}")
            details["rewritten"] = [{"path": r["path"], "to": r["to"], "source": r["source"]} for r in derived.rewrites]
            index_results = self._patch_indexes(ctx, index, derived.outputs)
            details["index"] = index_results
            if any(r["result"] not in ("patched", "unchanged") for r in index_results):
                status = "partial"
                warnings += [
                    f"exports index {r['key']}: {r['result']}"
                    for r in index_results
                    if r["result"] not in ("patched", "unchanged")
                ]
            if plan.data.get("purge_history"):
                # Still under the lock: no cdkd run of this stack writes a journal or a
                # record between our rewrite and the purge of what it replaced.
                purge_keys = list(
                    dict.fromkeys(
                        [*plan.data.get("purge", []), *(r["key"] for r in index_results if r["result"] == "patched")]
                    )
                )
                purge_status, purge_details, purge_warnings = self._purge(ctx, purge_keys)
                details.update(purge_details)
                warnings += purge_warnings
                if purge_status != "succeeded":
                    status = "partial"
            elif plan.data.get("history_findings"):
                warnings.append(
                    f"{plan.data['history_findings']} finding(s) in noncurrent versions were not purged (purge "
                    f"history was not asked for): they stay readable by version id"
                )
        left = list(plan.data.get("left") or [])
        if left:
            status = "partial"
            details["left"] = left
            warnings.append(f"{len(left)} finding(s) in current objects were left as they are; see details")
        sources = plan.data.get("sources") or []
        details["sources"] = sources
        details["rotate"] = ROTATE if sources else ""
        if sources:
            warnings.append(f"{ROTATE} Found: {'; '.join(sources)}")
        summary = (
            f"Scrubbed {len(derived.rewrites)} value(s) in {ctx.stack} ({ctx.region})"
            + (", purged history" if plan.data.get("purge_history") else "")
            + (" (partly: see warnings)" if status == "partial" else "")
            + (f". {ROTATE}" if sources else ".")
        )
        return Outcome(
            status=status,
            summary=summary,
            etag_before=plan.etag,
            etag_after=etag_after,
            details=details,
            warnings=warnings,
        )

    def _patch_indexes(self, ctx: Context, index: SecretIndex, outputs: dict[str, Any]) -> list[dict[str, Any]]:
        """Patch every exports index entry the stack owns; If-Match, up to 5 attempts."""
        results = []
        for k in _index_keys(ctx.bucket, ctx.layout):
            result = "unchanged"
            names: list[str] = []
            for attempt in range(INDEX_ATTEMPTS):
                try:
                    stored = ctx.bucket.get(k)
                except NotFound:
                    break
                document, names, why = _index_patch(index, stored, ctx.stack, ctx.region or "", outputs)
                if why is not None:
                    result = f"left alone: {why}"
                    break
                if document is None:
                    break
                try:
                    ctx.bucket.put(k, js_stringify(document, indent=2).encode("utf-8"), if_match=stored.etag)
                    result = "patched"
                    ctx.log("info", f"patched {len(names)} entr(y/ies) of {k}")
                    break
                except PreconditionFailed:
                    time.sleep(min(0.1 * 2**attempt, 1.0))  # another writer: read again and redo
                    result = f"not patched: it kept changing ({INDEX_ATTEMPTS} attempts)"
                except EngineError as exc:
                    result = index.mask(f"not patched: {exc}")
                    break
            if result != "unchanged" or names:
                results.append({"key": k, "entries": names, "result": result})
        return results

    def _purge(self, ctx: Context, keys: list[str]) -> tuple[str, dict[str, Any], list[str]]:
        bucket = ctx.bucket
        if not keys:
            return "succeeded", {"purge": []}, []
        locked = object_lock_enabled(bucket)
        if locked:
            line = (
                f"s3://{bucket.name} has Object Lock enabled: its object versions cannot be purged by this app "
                f"(retention decides when S3 lets them go), so nothing was purged. Not purgeable: {', '.join(keys)}"
            )
            ctx.log("warning", line)
            return "partial", {"purge": [{"key": k, "result": "not purgeable (Object Lock)"} for k in keys]}, [line]
        report = purge_noncurrent(bucket, keys)
        rows = []
        for k in keys:
            if k in report.failures:
                rows.append({"key": k, "result": f"failed: {report.failures[k]}", "deleted": report.deleted.get(k, 0)})
            else:
                rows.append({"key": k, "result": "purged", "deleted": report.deleted.get(k, 0)})
        ctx.log("info", f"purged {sum(report.deleted.values())} noncurrent version(s) of {len(keys)} key(s)")
        warnings = []
        status = "succeeded"
        warning = report.warning(bucket.name)
        if warning:
            warnings.append(warning)
            status = "partial"
        details: dict[str, Any] = {"purge": rows}
        if report.body_purged:
            destinations, note = replication_destinations(bucket, keys)
            details["replication"] = destinations
            if note:
                details["replication_note"] = note
            if destinations:
                warnings.append(
                    f"S3 replication is enabled on s3://{bucket.name} and covers the key(s) just purged. S3 NEVER "
                    f"replicates a version-id delete, so the purge removed those versions from THIS bucket only: the "
                    f"copies in the destination bucket(s) survive and stay readable there via GetObject with a "
                    f"VersionId. Remove them there yourself, or narrow the replication rule. "
                    f"Destination(s): {', '.join(destinations)}"
                )
                status = "partial"
        return status, details, warnings


def _etag_now(ctx: Context, key: str) -> str | None:
    try:
        return ctx.bucket.get(key).etag
    except NotFound:
        return None


register(Scrub())
