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
  With the app's assembly (`params["app"]`, a cdk.out path, or `params["assembly_digest"]`,
  a stored one) the rewrite is template-driven as cdkd's (engine.scrub.template): each value
  a template secret reference resolved to goes back to that exact expression, NoEcho
  positions become `***` with `noEchoLeaves` recorded, and each nested child record is
  scrubbed with its own template, under its own lock. What the template does not position,
  and every record without an assembly, gets the value-driven rewrite: a whole value equal
  to a known secret becomes the reference a deploy resolves again
  (`{{resolve:secretsmanager:<arn>:SecretString:<key>::}}`, `{{resolve:ssm:<name>}}` for a
  SecureString parameter of the record's region, as cdkd stores it); anything else (shapes,
  property-name hits, strings that merely contain a secret) becomes `***` whole. Covered:
  resources' and orphan records' `properties`, `observedProperties`, `attributes`, and
  `outputs`. `skippedOutputs` is dropped, every other field stays; written through cdkd's
  writer (`dump_state`) with `If-Match`. The exports index entries the stack owns are
  patched to the new output values (`If-Match`, retried on 412).
  The plan says, for each rewritten property, what cdkd's next diff reports for it
  (engine.scrub.predict, the plan engine): no change, update or replacement. A replacement
  is refused unless `params["allow_replacement"]`.
  History: as cdkd, the noncurrent versions of each state.json rewritten (and of each
  exports index key patched) are purged by default; `params["keep_history"]` keeps them;
  `params["purge_history"]` extends the purge to every key that held a finding. Never with
  Object Lock. Nothing secret is stored in the plan: `execute` reads the secrets again and
  re-derives.

Modules: `scanner` (the scan), `rewrite` (the value-driven rewrite), `template` (the
template-driven rewrite), `predict` (cdkd's next diff), `tree` (a stack and its nested
children), `exports` (the exports index), `history` (purges), `operation` (the kind).
"""

from engine.scrub.exports import INDEX_ATTEMPTS, INDEX_VERSION, _index_keys, _index_patch
from engine.scrub.history import (
    MAX_NAMED_KEYS,
    PurgeReport,
    object_lock_enabled,
    purge_noncurrent,
    replication_destinations,
)
from engine.scrub.operation import ROTATE, Scrub
from engine.scrub.rewrite import COVERED_ROW_FIELDS, Derivation, derive
from engine.scrub.scanner import (
    REDACTED_KEY,
    SCANNED_KINDS,
    Finding,
    Hit,
    ScanResult,
    Target,
    findings_in,
    list_versions,
    scan,
    scan_document,
    secret_regions,
)
from engine.secrets import Match

__all__ = [
    "COVERED_ROW_FIELDS",
    "INDEX_ATTEMPTS",
    "INDEX_VERSION",
    "MAX_NAMED_KEYS",
    "REDACTED_KEY",
    "ROTATE",
    "SCANNED_KINDS",
    "Derivation",
    "Finding",
    "Hit",
    "Match",
    "PurgeReport",
    "ScanResult",
    "Scrub",
    "Target",
    "_index_keys",
    "_index_patch",
    "derive",
    "findings_in",
    "list_versions",
    "object_lock_enabled",
    "purge_noncurrent",
    "replication_destinations",
    "scan",
    "scan_document",
    "secret_regions",
]
