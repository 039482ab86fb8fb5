"""Destroy: delete a stack's AWS resources from its state record alone (cdkd's `state destroy`).

Registered as operation kind `destroy` (`engine.operations`). The authority is seed 004
(destroy internals) and seeds 000/001 ("State writes during deploy and destroy"); the
reference's §8 describes the older snapshot, §10.9 what changed.

plan(ctx) -- pure reads, no lock. Refuses (`OperationRefused`, one line) when:
  the record is missing or legacy (no region); it has any defect (`parse_state`); its
  version is newer than 11; its body region disagrees with its key while it lists
  resources; another record of the bucket (any stack, any region, under the prefix)
  has an `imports` entry whose sourceStack/sourceRegion name this stack -- checked, as
  cdkd does, when the outputs bag holds anything (unreadable consumer records are skipped,
  as cdkd skips them, but named in the plan's warnings); the dependency graph has a cycle;
  the resource providers cannot be loaded; an option is malformed; `remove_protection` is
  asked while the providers cannot read and turn off protection.
  Params: `concurrency`, `skip_final_snapshot`, `remove_protection` (booleans, cdkd's
  `--skip-final-snapshot` / `--remove-protection`), `resource_timeout` / `resource_warn_after`
  (seconds, or {"default"|TYPE: seconds}; cdkd's 30 and 5 minutes). `data.options` holds
  them as planned (shown to the approver, audited), `data.deadlines` the deadlines.
  Otherwise `data` holds, per stack (nested children recursively under their row):
  `rows` {logicalId: {action, resourceType, physicalId, provisionedBy, deletionPolicy,
  reason?, digest, child?, removeProtection?, looksProtected?, noRetry?}}, `order` /
  `levels` (deletion order: the record's edges plus cdkd's implicit type pairs and
  composite-alarm edges, `engine.destroy.ordering`), `journal` {key, etag, rows, order}
  (resources only the rollback journal records, `engine.destroy.journal`: deleted FIRST on
  their journaled policy), the digests that let a re-run accept a trimmed record, and
  whether the import check applies. Every skip the run will make without an AWS call is on
  the plan: the precheck runs the provider's own delete up to its first AWS client
  (`seams.dry_precheck`). Actions:
    delete         provider delete
    snapshot       DeletionPolicy Snapshot and the provider can take the final snapshot
    fail-snapshot  DeletionPolicy Snapshot and it cannot: the resource FAILS, as
                   CloudFormation fails it (seed 004); `skip_final_snapshot` opts out
    retain         Retain / RetainExceptOnCreate: no AWS call; the row stays in every
                   snapshot and is dropped only with the record on full success
    skip           cannot be addressed (no physical id, the redaction mask, a provider's
                   dry `Skip`): no AWS call, the row is KEPT, the reason recorded
    nested         AWS::CloudFormation::Stack: the child `{parent}~{logicalId}` is
                   destroyed first, recursively, under its own lock
    gone           nested row whose child record is already missing: counts as deleted
    fail           nested row whose child record is refused (damaged, newer, imported,
                   ...): the row FAILS; the parent finishes its other deletes (seed 004)

execute(ctx, plan) -- under `ctx.held_lock("destroy")` (each child under its own):
  re-read; the record must be at `plan.etag`, OR be a trimmed subset of the plan: only
  rows removed, each remaining row byte-for-byte as planned (digest), everything else as
  planned except what a destroy snapshot changes (outputs cleared, imports/outputReads
  dropped, lastModified, version). That is exactly what this operation's own incremental
  writes leave behind, so a re-run of the SAME approved operation after a crash (SIGKILL)
  resumes: rows already gone are not deleted again, and nothing outside the approved plan
  is touched. Anything else raises `StalePlan`. The import check runs again under the lock.
  The journal must be as planned (`StalePlan` otherwise); its rows go first, and none of the
  record's rows starts before they end (a failed one does not hold them back, but keeps the
  journal and the record for a re-run).
  Deletes run in reverse dependency order (`engine.destroy.ordering`): a resource starts only once
  every resource depending on it is deleted (or retained, or skipped: seed 004 relies on a
  parent's delete removing a skipped child); independent deletes run concurrently
  (`concurrency`, default 8). A row whose dependent FAILED is not attempted: it is reported
  skipped with the reason. "Not found" counts as deleted. A transient failure is retried 3
  times after 5, 10, 20 s (`engine.destroy.retry`; not nested stacks or custom resources); a
  delete still running after its warn-after is logged once, after its resource timeout it
  FAILS and the run stops waiting for it (`engine.destroy.work`). With `remove_protection`
  each protection-bearing row's guard is read, turned off, and turned on again when the
  delete ends in failure (`engine.destroy.protection`); a guard that could not be read
  counts as `unverified` (a RESOURCE_GUARD_INDETERMINATE event), as do the guards a
  provider reports, a nested child's included. After each delete the trimmed
  record is written with `If-Match` on the ETag last written (outputs `{}`, imports and
  outputReads dropped, lastModified refreshed; retained, skipped and failed rows kept); a
  failed incremental write is logged and the final write decides. The writes run on one
  serial writer thread (cdkd chains them the same way), newest snapshot first, so deletes
  keep starting while a write is on the wire; a snapshot may lag the newest deletes (a
  re-run then finds those "not found"), never lead them.
  Full success: `create-tokens.json` (always issued, `If-Match` on the ledger as read or
  "only while absent"; a failure leaves the record and the run partial), then
  `state.json` (`If-Match`), then the rollback journal and its
  noncurrent versions, then this stack's entries of `{prefix}/_index/{region}/exports.json`
  (If-Match, 5 attempts with backoff, soft). Otherwise the trimmed record is written once
  more and stays.
  Cancel (`ctx.cancelled()`, or the lock found lost): no new deletes start, in-flight ones
  finish, the record is persisted, the lock released; status `partial`, reason `cancelled`.
  Every run writes cdkd's event store through `engine.events.EventRecorder` (children's
  events carry the child's stackName), including runs refused under the lock.
  Outcome: status `succeeded` (record gone), `partial` (some left), `failed` (nothing
  deleted and something failed); `details`: `counts` {deleted, retained, skipped, failed,
  unverified} of the top-level stack, `stacks` (per stack incl. children), `left`,
  `already_gone`, `run_id`, `reason`.

The providers (`engine.providers`) are reached through seams a test may replace:
`Destroy(delete=..., supports_snapshot=..., precheck=..., clients=..., protection=...)`;
`retry_delays` and `sleep` set the retry waits.

The modules, one concern each: `seams` (the provider seams, `default_clients` among them),
`common` (actions, outcomes, helpers), `consumers` (the import scan), `exports` (the exports
index), `plan` (planning), `run` (executing), `writer` (the trimmed record's writes),
`operation` (the `Destroy` spec that joins them), `ordering` (the delete order), `journal`
(journal-only resources), `retry` (retries, deadlines), `work` (one row's delete),
`protection` (remove protection).
"""

from __future__ import annotations

from engine.destroy.consumers import scan_consumers
from engine.destroy.exports import remove_stack_exports
from engine.destroy.operation import Destroy
from engine.destroy.seams import (
    ProviderError,
    ResourceRef,
    Skip,
    default_clients,
    default_delete,
    default_masker,
    default_precheck,
    default_supports_snapshot,
)
from engine.operations import register

register(Destroy())

__all__ = [
    "Destroy",
    "ProviderError",
    "ResourceRef",
    "Skip",
    "default_clients",
    "default_delete",
    "default_masker",
    "default_precheck",
    "default_supports_snapshot",
    "remove_stack_exports",
    "scan_consumers",
]
