"""Which strings are secrets: known values read from AWS, credential shapes, and property
names that carry secrets. Used by the scrub scanner (`engine.scrub`).

Contracts:
- SECRET VALUES NEVER LEAVE THIS MODULE. `SecretIndex` holds the values it matches in
  private memory for its own lifetime; everything it hands out (`SecretSource`, `Match`,
  `fingerprints()`, `repr()`, error and warning text) carries only where a secret came
  from, a keyed hash (HMAC-SHA256 under a random key made per index, so hashes cannot be
  compared across scans or brute-forced offline from a log) and a length. An index cannot
  be pickled, so it can never ride in an RQ job's arguments.
- `collect(session, account_id, regions)` reads, under the account's session, every
  Secrets Manager secret (the whole SecretString, and each value of a JSON object secret)
  and every SSM `SecureString` parameter in each region. Failures (a denied
  `secretsmanager:ListSecrets`, one unreadable secret) become warnings naming the action,
  the region and the secret's name; collection never raises for AWS errors.
- Matching rules (issue 5): `***` and a whole `{{resolve:...}}` value are never findings;
  text inside a `{{resolve:...}}` token is never matched; a whole-value match and a match
  embedded in a longer string are both findings; values shorter than `MIN_EMBEDDED` (4)
  characters match only whole values, never inside longer strings.
- Matching is built for bulk scans: `SecretIndex.candidates(raw_text)` does one C-speed
  substring pass per secret over a stored body and returns the (usually empty) subset that
  can match in it, so a body holding none of the secrets is never decoded or walked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from json.encoder import encode_basestring, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from engine import aws

MASK = "***"
MIN_EMBEDDED = 4  # cdkd's MIN_NEEDLE_LENGTH: shorter values only ever match whole

RESOLVE_TOKEN = re.compile(r"\{\{resolve:[^{}]*\}\}")

# JSON keys of a Secrets Manager secret that name, rather than hold, the credential.
# `username`/`user` still match WHOLE values (a `MasterUsername: admin` becomes the
# reference a CDK app writes) but never inside longer strings: `admin` embedded in every
# ARN and description would mask half a record to `***` and tell the reader nothing.
IDENTIFIER_KEYS = frozenset({"username", "user"})
# Connection metadata RDS, Redshift and DocumentDB put beside the password in a generated
# secret. They are not secret (DescribeDBInstances prints them) and they are everywhere in
# state: matching them would flag every `Port: "5432"` and rewrite endpoint attributes to
# references. They are not searched at all.
METADATA_KEYS = frozenset(
    {
        "engine",
        "host",
        "hostname",
        "port",
        "dbname",
        "database",
        "dbClusterIdentifier",
        "dbInstanceIdentifier",
        "masterarn",
        "proxyHost",
    }
)

# Property names that carry a secret whatever resource they sit in (CloudFormation names).
SECRET_PROPERTY_NAMES = frozenset(
    {
        "Password",
        "MasterUserPassword",
        "SecretString",
        "PrivateKey",
        "AuthToken",
        "SecretAccessKey",
        "ClientSecret",
    }
)
# Per resource type, the further names that carry a secret there (properties and
# attributes alike: an AccessKey's `SecretAccessKey` is a GetAtt attribute).
SECRET_PROPERTY_NAMES_BY_TYPE: dict[str, frozenset[str]] = {
    "AWS::IAM::AccessKey": frozenset({"SecretAccessKey"}),
    "AWS::AppSync::ApiKey": frozenset({"ApiKey"}),
    "AWS::ApiGateway::ApiKey": frozenset({"Value"}),
    "AWS::CodeBuild::SourceCredential": frozenset({"Token"}),
    "AWS::Amplify::App": frozenset({"AccessToken", "OauthToken"}),
    "AWS::Amplify::Branch": frozenset({"Password"}),
    "AWS::Events::Connection": frozenset({"ApiKeyValue"}),
    "AWS::DMS::Endpoint": frozenset({"Password"}),
    "AWS::Glue::Connection": frozenset({"PASSWORD"}),
    "AWS::ElastiCache::User": frozenset({"Passwords"}),
    "AWS::Transfer::Server": frozenset({"HostKey"}),
    "AWS::Lightsail::Database": frozenset({"MasterUserPassword"}),
}

# Words that, ending a property or output name, say it holds a secret ("DbPassword",
# "ApiKey", "GITHUB_TOKEN", "client_secret"). Used to mask for display before any scan (a
# wider net than the scan's names, which a scrub rewrites); names that END in another word
# ("SecretArn", "PasswordPolicy", "TokenUrl", "PasswordLength") name, not hold, a secret.
SECRET_NAME_WORDS = frozenset({"password", "passwd", "pwd", "passphrase", "secret", "token", "credentials"})
SECRET_NAME_WORDS |= {w + "s" for w in SECRET_NAME_WORDS if not w.endswith("s")}
SECRET_NAME_PAIRS = frozenset(
    {("api", "key"), ("private", "key"), ("secret", "key"), ("auth", "key"), ("access", "key")}
)
_NAME_WORDS = re.compile(r"[A-Z]{2,}(?=[A-Z][a-z]|[^A-Za-z]|$)|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
NAME_LENGTH_LIMIT = 256  # longer keys are data, not names; never split them


def secret_name(name: str) -> bool:
    """True when a property, attribute, variable or output called `name` holds a secret
    by its name alone (see SECRET_NAME_WORDS); `AccessKeyId`, `SecretArn` do not."""
    if not isinstance(name, str) or not name or len(name) > NAME_LENGTH_LIMIT:
        return False
    if name in SECRET_PROPERTY_NAMES:
        return True
    words = [w.lower() for w in _NAME_WORDS.findall(name)]
    if not words:
        return False
    if words[-1] in SECRET_NAME_WORDS:
        return True
    if words[-1] == "key" and len(words) >= 2 and (words[-2], "key") in SECRET_NAME_PAIRS:
        return True
    return words[-1] in ("apikey", "privatekey", "secretkey", "authkey")


# High-confidence credential shapes: (label, pattern). Each pattern is specific enough to
# be worth `***` on sight; none matches ordinary ids, ARNs or hashes.
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("credential shape: PEM private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("credential shape: PuTTY private key", re.compile(r"PuTTY-User-Key-File-\d+:")),
    ("credential shape: GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})")),
    ("credential shape: Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("credential shape: Stripe secret key", re.compile(r"\b[sr]k_live_[A-Za-z0-9]{20,}")),
    ("credential shape: Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("credential shape: npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
)
# Per shape, literals one of which every match holds: a shape runs only over a text
# holding one (a 1 MB string pays one pass per shape it can match, not one per shape).
_SHAPE_LITERALS: dict[str, tuple[str, ...]] = {
    "credential shape: PEM private key": ("PRIVATE KEY-----",),
    "credential shape: PuTTY private key": ("PuTTY-User-Key-File-",),
    "credential shape: GitHub token": ("gh", "github_pat_"),
    "credential shape: Slack token": ("xox",),
    "credential shape: Stripe secret key": ("k_live_",),
    "credential shape: Google API key": ("AIza",),
    "credential shape: npm token": ("npm_",),
}
ACCESS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")
# An AWS secret access key: 40 characters of base64 without padding. Alone this shape is
# too common (a sha1 hex is 40 characters too) to flag; beside an access key id (in the
# same string or a sibling value of the same object) it is a credential pair.
SECRET_ACCESS_KEY = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
SECRET_KEY_LABEL = "credential shape: AWS secret access key beside an access key id"
# Cheap literal prefilter for the shapes above, run over a whole stored body.
_SHAPE_PREFILTER = re.compile(
    r"PRIVATE KEY-----|PuTTY-User-Key|gh[pousr]_|github_pat_|xox[abposr]-|k_live_|AIza|npm_|A[KS]IA"
)


def is_masked(value: str) -> bool:
    """True for cdkd's mask and for a value that is a whole `{{resolve:...}}` reference."""
    return value == MASK or RESOLVE_TOKEN.fullmatch(value) is not None


@dataclass(frozen=True)
class SecretSource:
    """Where a known secret came from. Never holds any part of the value.

    `label` is for people ("Secrets Manager secret prod/db, key password"); `reference`
    is the `{{resolve:...}}` a deploy would resolve again (None: no reference exists);
    `region` is where the secret lives (an `ssm` reference resolves only there).
    """

    kind: str  # "secretsmanager" | "ssm"
    label: str
    name: str  # the secret's or parameter's name (for the rotate advice)
    region: str
    reference: str | None = None
    embeddable: bool = True  # False: matches whole values only (IDENTIFIER_KEYS)

    def reference_for(self, region: str | None) -> str | None:
        """The reference to store in a record of `region`, or None (store `***`)."""
        if self.reference is None:
            return None
        if self.kind == "ssm" and region != self.region:
            return None  # {{resolve:ssm:name}} resolves in the deploying region only
        return self.reference

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "name": self.name, "region": self.region}


def _rank(source: SecretSource) -> tuple[int, str]:
    # Deterministic preference when one value has several sources: a Secrets Manager JSON
    # key (the usual CDK-generated credential) or whole secret before an SSM parameter.
    order = {"secretsmanager": 0, "ssm": 1}.get(source.kind, 2)
    return order, source.label


@dataclass
class _Entry:
    digest: str
    length: int
    sources: list[SecretSource] = field(default_factory=list)
    embeddable: bool = False
    forms: tuple[str, ...] = ()  # how the value can appear in a stored JSON body


@dataclass(frozen=True)
class Match:
    """What one string leaf (or object key) matched. `whole` is True when the whole value
    is the secret (a known value, a property that carries one, or a shape spanning it)."""

    labels: tuple[str, ...]
    whole: bool
    known: tuple[SecretSource, ...] = ()  # the known secrets that matched WHOLE (references)

    @property
    def source(self) -> str:
        return "; ".join(self.labels)

    def replacement(self, region: str | None) -> str:
        """What a scrub stores instead: the reference a deploy would resolve again for a
        whole match of a known secret that has one, else `***` (whole string)."""
        for source in sorted(self.known, key=_rank):
            reference = source.reference_for(region)
            if reference is not None:
                return reference
        return MASK


class SecretIndex:
    """Known secret values of one account, matched by keyed hash and substring search.

    `add(value, source)` registers a value; `whole(text)` and `embedded(text)` match one
    string. `candidates(raw)` narrows the values to those present in a stored body (run it
    once per body, then pass the result to `match`). The values live only in this object;
    nothing it returns contains one.
    """

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._values: dict[str, _Entry] = {}  # value -> entry; private to this object
        self._by_digest: dict[str, _Entry] = {}
        self.warnings: list[str] = []  # collection problems, for people (no values)
        self.regions: list[str] = []

    # -- safety -------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"<SecretIndex {len(self._values)} value(s)>"

    def __reduce__(self) -> Any:
        raise TypeError("a SecretIndex holds secret values and is never serialised")

    def __len__(self) -> int:
        return len(self._values)

    def digest(self, value: str) -> str:
        """HMAC-SHA256 of `value` under this index's random key (hex)."""
        return hmac.new(self._key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def fingerprints(self) -> list[dict[str, Any]]:
        """One row per known value: keyed hash, length and sources. Safe to show."""
        rows = [
            {"hash": e.digest, "length": e.length, "sources": [s.as_json() for s in sorted(e.sources, key=_rank)]}
            for e in self._values.values()
        ]
        return sorted(rows, key=lambda r: r["sources"][0]["label"] if r["sources"] else "")

    # -- building -----------------------------------------------------------------------

    def add(self, value: str, source: SecretSource) -> None:
        """Register `value` (ignored when empty, already masked or a reference)."""
        if not isinstance(value, str) or not value or is_masked(value):
            return
        entry = self._values.get(value)
        if entry is None:
            entry = _Entry(digest=self.digest(value), length=len(value), forms=_forms(value))
            self._values[value] = entry
            self._by_digest[entry.digest] = entry
        if source not in entry.sources:
            entry.sources.append(source)
        entry.embeddable = entry.embeddable or (source.embeddable and len(value) >= MIN_EMBEDDED)

    def mask(self, text: str) -> str:
        """`text` with every known value of at least MIN_EMBEDDED characters (and a text
        that IS a shorter known value) replaced by `***`: for messages built from AWS
        errors or record content before they reach a log or a page."""
        if not isinstance(text, str) or not text or not self._values:
            return text
        if text in self._values:
            return MASK
        found = [v for v in self._values if len(v) >= MIN_EMBEDDED and v in text]
        for value in sorted(found, key=len, reverse=True):
            text = text.replace(value, MASK)
        return text

    def masker(self) -> Any:
        """An `engine.masking.Masker` loaded with these values (plus its credential shapes),
        for a caller that masks many messages (an operation's log, event lines)."""
        from engine.masking import Masker

        return Masker(self._values)

    # -- matching -----------------------------------------------------------------------

    def candidates(self, raw: str) -> Candidates:
        """The known values that occur anywhere in `raw` (a stored body as text)."""
        found = [v for v, e in self._values.items() if any(form in raw for form in e.forms)]
        return Candidates(self, found)

    def all(self) -> Candidates:
        return Candidates(self, list(self._values))

    def _entry(self, value: str) -> _Entry | None:
        return self._by_digest.get(self.digest(value))


class Candidates:
    """A subset of an index's values that can match in one body; matches strings."""

    def __init__(self, index: SecretIndex, values: list[str]) -> None:
        self._index = index
        self._lengths = {len(v) for v in values}
        embeddable = [v for v in values if index._values[v].embeddable]
        # Longest first, so the alternation reports the longest secret at a position.
        embeddable.sort(key=len, reverse=True)
        self._regex = re.compile("|".join(map(re.escape, embeddable))) if embeddable else None

    def __repr__(self) -> str:
        return f"<Candidates {len(self._lengths)} length(s)>"

    def __reduce__(self) -> Any:
        raise TypeError("Candidates hold secret values and are never serialised")

    def __bool__(self) -> bool:
        return bool(self._lengths)

    def whole(self, text: str) -> list[SecretSource]:
        """The sources of `text` when it IS a known secret value; [] otherwise."""
        if len(text) not in self._lengths:
            return []
        entry = self._index._entry(text)
        return list(entry.sources) if entry is not None else []

    def embedded(self, text: str) -> list[SecretSource]:
        """Sources of known secrets (>= MIN_EMBEDDED characters) found inside `text`,
        outside any `{{resolve:...}}` token."""
        if self._regex is None:
            return []
        stripped = RESOLVE_TOKEN.sub("\0", text) if "{{resolve:" in text else text
        found: list[SecretSource] = []
        for m in self._regex.finditer(stripped):
            entry = self._index._entry(m.group(0))
            if entry is not None:
                found += [s for s in entry.sources if s not in found]
        return found


def _forms(value: str) -> tuple[str, ...]:
    """How `value` can appear in a stored JSON body: raw, JSON-escaped (cdkd writes UTF-8
    as is) and ASCII-escaped (other writers escape non-ASCII)."""
    forms = [value, encode_basestring(value)[1:-1], encode_basestring_ascii(value)[1:-1]]
    return tuple(dict.fromkeys(forms))


def shape_hits(raw: str) -> bool:
    """Cheap body-level check: could any credential shape occur in `raw`?"""
    return _SHAPE_PREFILTER.search(raw) is not None


def shape_labels(text: str) -> tuple[list[str], bool]:
    """(labels of the credential shapes found in `text`, True when one spans the whole
    string). The AWS secret-key shape counts only beside an access key id in `text`."""
    labels: list[str] = []
    whole = False
    for label, pattern in SHAPES:
        if not any(literal in text for literal in _SHAPE_LITERALS[label]):
            continue
        m = pattern.search(text)
        if m:
            labels.append(label)
            whole = whole or (m.start() == 0 and m.end() == len(text))
    if (
        ("AKIA" in text or "ASIA" in text)
        and ACCESS_KEY_ID.search(text)
        and SECRET_ACCESS_KEY.search(ACCESS_KEY_ID.sub(" ", text))
    ):
        labels.append(SECRET_KEY_LABEL)
    return labels, whole


def is_secret_key_shape(text: str) -> bool:
    """True when `text` is exactly an AWS secret access key's shape (for the sibling rule)."""
    return SECRET_ACCESS_KEY.fullmatch(text) is not None


def has_access_key_id(text: str) -> bool:
    return ("AKIA" in text or "ASIA" in text) and ACCESS_KEY_ID.search(text) is not None


def secret_property(name: str, resource_type: str | None) -> bool:
    """True when a property (or attribute) called `name` carries a secret for the type."""
    if name in SECRET_PROPERTY_NAMES:
        return True
    return resource_type is not None and name in SECRET_PROPERTY_NAMES_BY_TYPE.get(resource_type, ())


def property_label(name: str, resource_type: str | None) -> str:
    return f"property {name} of {resource_type}" if resource_type else f"property {name}"


def property_names_in(raw: str) -> bool:
    """Cheap body-level check: does any secret-carrying property name occur in `raw`?"""
    if any(f'"{n}"' in raw for n in SECRET_PROPERTY_NAMES):
        return True
    return any(f'"{n}"' in raw for names in SECRET_PROPERTY_NAMES_BY_TYPE.values() for n in names)


# --- collecting from AWS --------------------------------------------------------------------


def sm_reference(arn: str, json_key: str | None) -> str:
    """The dynamic reference CloudFormation (and cdkd) resolve to the secret (or one key)."""
    return f"{{{{resolve:secretsmanager:{arn}:SecretString:{json_key or ''}::}}}}"


def ssm_reference(name: str) -> str:
    """The reference cdkd stores for a SecureString parameter: a plain `{{resolve:ssm:...}}`
    (reference §7.1: cdkd classifies `ssm` as secret when the parameter is a SecureString and
    keeps the expression in state; it never resolves `ssm-secure`)."""
    return f"{{{{resolve:ssm:{name}}}}}"


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return str(error.get("Code") or "error")
    return type(exc).__name__


def collect(
    session: Any, account_id: str, regions: Iterable[str], *, concurrency: int = 8, index: SecretIndex | None = None
) -> SecretIndex:
    """Every Secrets Manager secret and SSM SecureString parameter of the account in
    `regions`, read under `session`, registered in a new (or the given) index. Never raises
    for an AWS failure: each becomes one line in `index.warnings` naming the action."""
    index = index or SecretIndex()
    for region in sorted(set(regions)):
        if region in index.regions:
            continue
        index.regions.append(region)
        _collect_secretsmanager(session, account_id, region, index, concurrency)
        _collect_ssm(session, account_id, region, index)
    return index


def _collect_secretsmanager(session: Any, account_id: str, region: str, index: SecretIndex, concurrency: int) -> None:
    client = aws.client(session, "secretsmanager", region)
    listed: list[dict[str, Any]] = []
    try:
        for page in client.get_paginator("list_secrets").paginate():
            listed += page.get("SecretList", [])
    except (ClientError, BotoCoreError) as exc:
        index.warnings.append(
            f"Could not list Secrets Manager secrets in {region} of account {account_id} "
            f"(secretsmanager:ListSecrets: {_error_text(exc)}); their values are not searched"
        )
        return

    def fetch(item: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
        try:
            response = client.get_secret_value(SecretId=item["ARN"])
        except (ClientError, BotoCoreError) as exc:
            return item, None, _error_text(exc)
        text = response.get("SecretString")
        if text is None and response.get("SecretBinary") is not None:
            try:
                text = bytes(response["SecretBinary"]).decode("utf-8")
            except UnicodeDecodeError:
                text = None  # a binary secret cannot sit in a JSON record as text
        return item, text, None

    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        results = list(pool.map(fetch, listed))
    for item, text, error in results:
        name = item.get("Name") or item["ARN"]
        if error is not None:
            if error not in ("ResourceNotFoundException", "InvalidRequestException"):  # deleted meanwhile
                index.warnings.append(
                    f"Could not read Secrets Manager secret {name} in {region} of account {account_id} "
                    f"(secretsmanager:GetSecretValue: {error}); its value is not searched"
                )
            continue
        if text is None:
            continue
        arn = item["ARN"]
        index.add(
            text,
            SecretSource("secretsmanager", f"Secrets Manager secret {name}", name, region, sm_reference(arn, None)),
        )
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            for json_key, value in decoded.items():
                if isinstance(value, bool) or not isinstance(value, str | int | float) or json_key in METADATA_KEYS:
                    continue
                index.add(
                    value if isinstance(value, str) else json.dumps(value),
                    SecretSource(
                        "secretsmanager",
                        f"Secrets Manager secret {name}, key {json_key}",
                        name,
                        region,
                        sm_reference(arn, json_key),
                        embeddable=json_key not in IDENTIFIER_KEYS,
                    ),
                )


def _collect_ssm(session: Any, account_id: str, region: str, index: SecretIndex) -> None:
    client = aws.client(session, "ssm", region)
    names: list[str] = []
    try:
        paginator = client.get_paginator("describe_parameters")
        for page in paginator.paginate(ParameterFilters=[{"Key": "Type", "Values": ["SecureString"]}]):
            names += [p["Name"] for p in page.get("Parameters", []) if p.get("Type") == "SecureString"]
    except (ClientError, BotoCoreError) as exc:
        index.warnings.append(
            f"Could not list SSM parameters in {region} of account {account_id} "
            f"(ssm:DescribeParameters: {_error_text(exc)}); SecureString values are not searched"
        )
        return
    for start in range(0, len(names), 10):  # GetParameters takes at most 10 names
        batch = names[start : start + 10]
        try:
            response = client.get_parameters(Names=batch, WithDecryption=True)
        except (ClientError, BotoCoreError) as exc:
            index.warnings.append(
                f"Could not read SSM SecureString parameters {', '.join(batch)} in {region} of account "
                f"{account_id} (ssm:GetParameters/kms:Decrypt: {_error_text(exc)}); their values are not searched"
            )
            continue
        for parameter in response.get("Parameters", []):
            name = parameter["Name"]
            index.add(
                parameter.get("Value", ""),
                SecretSource("ssm", f"SSM SecureString parameter {name}", name, region, ssm_reference(name)),
            )
