"""Demo stacks for the attention board and drift (issue 13): each problem made for real.

`plant_attention` (the AWS side, called once the world is seeded) writes three records to
the Production bucket, their SQS queues created in moto through the engine's own SQS
provider (the `create` and `read` a cdkd deploy uses, so each row's physical id, attributes
and `observedProperties` are what a deploy would have recorded):

- `Prod-NightlyBilling`: a live `lock.json` held by `someone@ci` since three hours ago, by a
  deploy that finished (SUCCEEDED) a minute after taking it and never let go (a CI job hung
  on its way out, its renewal thread still running: the deadline is hours ahead, so the
  row stays for the demo's life). The lock card's verdict: likely abandoned.
- `Prod-InvoiceQueues`: a cdkd deploy with `--no-rollback` that created one queue and failed
  on the next: the run ended FAILED in the event store, and its `rollback-journal.json`
  (engine/deploy/rollback.py's shape) sits beside the record, which holds the new queue.
  `cdkd rollback` of it deletes that queue for real.
- `Prod-WebhookQueues`: three queues in sync with the record, then one changed out of band
  (VisibilityTimeout) and one deleted out of band.

`check_attention` (the Django side, after the first sync) runs a real drift check of
`Prod-WebhookQueues` through `stacks.drift` (a stored DriftCheck: MODIFIED and DELETED)
and a secret scan of the stack `plant_leaked_secrets` wrote, as the admin, so the board's
"Open secret findings" row is there at once.

The other rows come from the world as seeded: expired and unreadable locks (showcase), the
damaged and old-schema records, and Prod-ShippingFiles' earlier leftovers. None of these
stacks is offered as a clean destroy (they are not in `DemoWorld.destroyable`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import boto3

from demo.accounts import DAY_MS, HOUR_MS, NDJSON_TYPE, PRODUCTION, SEED, DemoWorld, StackRef
from demo.formats import cdkd_json, cdkd_jsonl
from demo.records import StackBuilder
from demo.runs import RunRecorder, run_index
from demo.world import LEAK_ACCOUNT, LEAK_REGION, LEAK_STACK, _s3

REGION = "us-east-1"
LOCK_STACK = "Prod-NightlyBilling"
LOCK_OWNER = "someone@ci"
JOURNAL_STACK = "Prod-InvoiceQueues"
DRIFT_STACK = "Prod-WebhookQueues"
QUEUE = "AWS::SQS::Queue"


class _Stack:
    """One planted stack: its builder, the queues made through the engine, its S3 writes."""

    def __init__(self, session: boto3.Session, stack: str, now_ms: int) -> None:
        from engine.providers import deploy_provider_for
        from engine.providers.base import Clients

        self.b = StackBuilder(PRODUCTION, stack, REGION, version=11)
        self.rng = random.Random(f"{SEED}:attention:{stack}")
        self.now = now_ms
        self.clients = Clients(session)
        self.sqs = session.client("sqs", region_name=REGION)
        self.provider = deploy_provider_for(QUEUE, "sdk")
        self.puts: list[tuple[str, bytes, str]] = []
        self.moto_urls: dict[str, str] = {}

    def queue(self, path: str, **props: Any) -> str:
        """A queue as a cdkd deploy records it: created by the engine's provider, read back
        into observedProperties."""
        from engine.providers.base import DeployTarget, ResourceRef

        lid = self.b.queue(path)
        row = self.b.resources[lid]
        row["properties"].update(props)
        made = self.provider.create(
            self.clients, lid, QUEUE, row["properties"], DeployTarget(self.b.stack, REGION, PRODUCTION.account_id)
        )
        # moto answers with its own endpoint in the URL; AWS (and so a record) has sqs.{region}.
        url = f"https://sqs.{REGION}.amazonaws.com/" + made.physical_id.split("/", 3)[3]
        attributes = {**(made.attributes or {}), "QueueUrl": url}
        row["physicalId"], row["attributes"] = url, attributes
        ref = ResourceRef(lid, QUEUE, url, row["properties"], attributes, REGION)
        row["observedProperties"] = self.provider.read(self.clients, ref)
        self.moto_urls[lid] = made.physical_id
        return lid

    def url(self, lid: str) -> str:
        return self.b.resources[lid]["physicalId"]

    def put(self, leaf: str, body: bytes, content_type: str = "application/json") -> None:
        self.puts.append((f"{PRODUCTION.prefix}/{self.b.stack}/{REGION}/{leaf}", body, content_type))

    def runs(self, runs: list[RunRecorder], *, indexed: bool = True) -> None:
        for r in runs:
            self.put(f"deployments/{r.run_id}.jsonl", cdkd_jsonl(r.events), NDJSON_TYPE)
        finished = [r for r in runs if r.finished_ms is not None]
        if indexed and finished:  # cdkd writes the index only when a run finalizes
            self.put("deployments/index.json", cdkd_json(run_index(self.b.stack, REGION, finished)))

    def created(self, r: RunRecorder, lids: list[str]) -> None:
        for lid in lids:
            r.resource("CREATE", lid, QUEUE, self.url(lid))


def _nightly_billing(session: boto3.Session, now: int) -> _Stack:
    """A live lock held far too long: taken 3 h ago by a deploy that finished a minute later
    (SUCCEEDED, record saved) and never released it: the CI job hung on its way out, its
    renewal thread still running."""
    s = _Stack(session, LOCK_STACK, now)
    first = RunRecorder(LOCK_STACK, REGION, "deploy", now - 9 * DAY_MS, s.rng)
    s.created(first, [s.queue("InvoiceRunQueue", VisibilityTimeout=900)])
    first.finish()
    taken = now - 3 * HOUR_MS - s.rng.randint(0, 59_999)
    held = RunRecorder(LOCK_STACK, REGION, "deploy", taken + 1_500, s.rng)
    s.created(held, [s.queue("LedgerExportQueue")])
    s.put("state.json", cdkd_json(s.b.state(held.finish())))
    s.runs([first, held])
    # Renewal would move expiresAt on every two minutes; nothing renews in the demo, so the
    # deadline is set far enough ahead to stay live while the demo runs.
    lock = {"owner": LOCK_OWNER, "timestamp": taken, "expiresAt": now + 12 * HOUR_MS, "operation": "deploy"}
    s.put("lock.json", cdkd_json(lock))
    return s


def _invoice_queues(session: boto3.Session, now: int) -> tuple[_Stack, str]:
    """A `--no-rollback` deploy that created a queue, then failed: FAILED run, journal left."""
    s = _Stack(session, JOURNAL_STACK, now)
    inbox = s.queue("InvoiceInbox")
    first = RunRecorder(JOURNAL_STACK, REGION, "deploy", now - 14 * DAY_MS, s.rng)
    s.created(first, [inbox])
    first.finish()
    failed = RunRecorder(JOURNAL_STACK, REGION, "deploy", now - 5 * HOUR_MS, s.rng)
    retry = s.queue("InvoiceRetry", VisibilityTimeout=120)
    s.created(failed, [retry])
    archive = s.b.lid("InvoiceArchive")
    attempted = {"VisibilityTimeout": 300, "MessageRetentionPeriod": 2000000}
    failed.resource(
        "CREATE",
        archive,
        QUEUE,
        outcome="fail",
        error={
            "name": "ProvisioningError",
            "message": f"Failed to create {archive}: InvalidAttributeValue: Invalid value for the parameter "
            "MessageRetentionPeriod.",
            "awsErrorCode": "InvalidAttributeValue",
        },
    )
    ended = failed.finish()
    # With --no-rollback cdkd saves what it created before the failure, and journals it.
    s.put("state.json", cdkd_json(s.b.state(ended)))
    row = s.b.resources[retry]
    journal = {
        "journalVersion": 1,
        "stackName": JOURNAL_STACK,
        "region": REGION,
        "segments": [
            {
                "runId": failed.run_id,
                "timestamp": ended,
                "reason": "no-rollback-failure",
                "initialDeploy": False,
                "cdkdVersion": failed.version,
                "operations": [
                    {
                        "logicalId": retry,
                        "changeType": "CREATE",
                        "resourceType": QUEUE,
                        "provisionedBy": "sdk",
                        "physicalId": row["physicalId"],
                        "properties": row["properties"],
                    }
                ],
                "failedOperations": [
                    {
                        "logicalId": archive,
                        "changeType": "CREATE",
                        "resourceType": QUEUE,
                        "provisionedBy": "sdk",
                        "attemptedProperties": attempted,
                    }
                ],
            }
        ],
    }
    s.runs([first, failed])
    s.put("rollback-journal.json", cdkd_json(journal))
    return s, failed.run_id


def _webhook_queues(session: boto3.Session, now: int) -> tuple[_Stack, str, str]:
    """Three queues deployed in sync; then one changed and one deleted out of band."""
    s = _Stack(session, DRIFT_STACK, now)
    lids = [s.queue("WebhookInbox"), s.queue("WebhookRetry", VisibilityTimeout=60), s.queue("WebhookDeadLetter")]
    r = RunRecorder(DRIFT_STACK, REGION, "deploy", now - 6 * DAY_MS, s.rng)
    s.created(r, lids)
    s.put("state.json", cdkd_json(s.b.state(r.finish())))
    s.runs([r])
    _inbox, changed, deleted = lids
    # Out of band: someone shortens a timeout in the console, someone deletes a queue.
    s.sqs.set_queue_attributes(QueueUrl=s.moto_urls[changed], Attributes={"VisibilityTimeout": "5"})
    s.sqs.delete_queue(QueueUrl=s.moto_urls[deleted])
    return s, changed, deleted


def plant_attention(world: DemoWorld, sessions: Callable[[str], boto3.Session], now_ms: int | None = None) -> None:
    """Write the attention stacks (see the module docstring) and count them into the
    world's summary and `interesting` (stale_lock, journal, failed_run, drift)."""
    import time

    now = now_ms if now_ms is not None else int(time.time() * 1000)
    session = sessions(PRODUCTION.account_id)
    billing = _nightly_billing(session, now)
    invoices, run_id = _invoice_queues(session, now)
    webhooks, changed, deleted = _webhook_queues(session, now)
    s3 = _s3(session, PRODUCTION.bucket_region)
    for planted in (billing, invoices, webhooks):
        for key, body, content_type in planted.puts:
            s3.put_object(Bucket=PRODUCTION.bucket, Key=key, Body=body, ContentType=content_type)
        state_key = next(k for k, _b, _c in planted.puts if k.endswith("/state.json"))
        world.count_planted(StackRef(PRODUCTION.account_id, planted.b.stack, REGION, state_key), len(planted.puts))
    prefix = f"{PRODUCTION.prefix}/{{}}/{REGION}/"
    notes = {
        "stale_lock": (LOCK_STACK, "lock.json", f"held by {LOCK_OWNER} for 3 hours"),
        "journal": (JOURNAL_STACK, "rollback-journal.json", "left by a --no-rollback deploy"),
        "failed_run": (JOURNAL_STACK, f"deployments/{run_id}.jsonl", "cdkd deploy ended FAILED"),
        "drift": (DRIFT_STACK, "state.json", f"{changed} modified, {deleted} deleted out of band"),
    }
    for name, (stack, leaf, note) in notes.items():
        world.interesting[name] = StackRef(PRODUCTION.account_id, stack, REGION, prefix.format(stack) + leaf, note)
    world.resources += sum(len(p.b.resources) for p in (billing, invoices, webhooks)) - 1  # one deleted


def check_attention(username: str = "admin") -> list[str]:
    """After the first sync: a drift check of the drift stack (stored, so the board and the
    stack's Resources tab show it) and a secret scan of the leaked stack, requested as
    `username` (an admin). Returns lines for the demo's start-up output."""
    from django.contrib.auth import get_user_model

    from stacks.drift import run_check
    from stacks.models import Account
    from stacks.scans import execute_scan_run, request_scan

    account = Account.objects.get(account_id=PRODUCTION.account_id)
    check, report = run_check(account, DRIFT_STACK, REGION, actor=username, trigger="cli")
    counts = check.counts or {}
    lines = [
        f"drift      {DRIFT_STACK}: {counts.get('MODIFIED', 0)} modified, {counts.get('DELETED', 0)} deleted, "
        f"{counts.get('IN_SYNC', 0)} in sync (its Resources tab; `cdkd drift` checks again)"
        + (f"; error: {check.error}" if report is None else "")
    ]
    user = get_user_model().objects.get(username=username)
    leak = Account.objects.get(account_id=LEAK_ACCOUNT)
    scan = execute_scan_run(request_scan(user, leak, [LEAK_STACK], region=LEAK_REGION).pk)
    found = scan.finding_count if scan is not None else 0
    lines.append(f"secrets    scanned {LEAK_STACK}: {found} open findings")
    return lines
