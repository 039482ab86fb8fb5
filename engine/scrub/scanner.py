"""The secret scan: every place a secret hides in a state bucket and its history (see
`engine.scrub`). Returns `Finding`s: where and what matched, never any part of a value.
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
from engine.backend import StateBucket
from engine.errors import EngineError, NotFound
from engine.keys import CR_RESPONSE_PREFIX, EXPORTS_INDEX_DIR, KeyKind, KeyLayout, ParsedKey
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
REDACTED_KEY = "***"  # a path element standing for an object key that holds a secret
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
