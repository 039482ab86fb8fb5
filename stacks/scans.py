"""Secret scans from the web: request (a ScanRun queued on commit, its id the job's only
argument), run (`engine.scrub.scan` per account through `open_bucket`), store the findings.

Scanning reads Secrets Manager and SSM SecureString values into the worker's memory, so
it needs the operator role on every account it covers. The values never leave
`engine.scrub`: a ScanRun holds counts and warnings, a SecretFinding holds where a secret is
(key, version, JSON path) and what matched (`source`), never the value.

A whole-account scan replaces that account's findings; a stack scan (`stacks`, optionally
one `region`) replaces the findings of those stacks only.
"""

from __future__ import annotations

import json
import logging
import time

from django.core.exceptions import PermissionDenied
from django.db import close_old_connections, transaction
from django.utils import timezone

from engine.errors import EngineError
from engine.keys import KeyKind, KeyLayout
from stacks import audit, notify
from stacks.access import accounts_for, has_role
from stacks.models import Account, Role, ScanRun, SecretFinding, SyncStatus
from stacks.records import open_bucket

logger = logging.getLogger(__name__)

QUEUE = "sync"  # read-only background work, beside the mirror's syncs
BATCH = 1000
MAX_WARNINGS = 200

KEY_KINDS = {
    KeyKind.STATE: "record",
    KeyKind.LEGACY_STATE: "record",
    KeyKind.ROLLBACK_JOURNAL: "journal",
    KeyKind.EXPORTS_INDEX: "exports-index",
    KeyKind.EVENT_STREAM: "events",
    KeyKind.CR_RESPONSE: "placeholder",
}


def key_kind(layout: KeyLayout, key: str) -> str:
    parsed = layout.classify(key)
    return KEY_KINDS.get(parsed.kind, "other") if parsed is not None else "other"


def _enqueue(run: ScanRun) -> None:
    from cdkd_site.queues import get_queue

    # Inside the caller's transaction: django-rq sends it on commit.
    get_queue(QUEUE).enqueue("stacks.jobs.run_scan", run.pk, job_id=f"scan-{run.pk}")


def request_scan(
    user,
    account: Account | None = None,
    stacks: list[str] | None = None,
    *,
    region: str | None = None,
    history: bool = True,
    client_address: str | None = None,
) -> ScanRun:
    """Create a ScanRun and queue it on commit. `account=None` scans every account on which
    the person is an operator (PermissionDenied when there is none); `stacks` limits the scan
    to those stacks of `account` (and to `region` when given). Raises PermissionDenied
    without the operator role on the account. Each account's audit log records who asked
    (a scan reads the account's secret values)."""
    stacks = [s for s in dict.fromkeys(stacks or []) if s]
    if account is not None:
        if not has_role(user, account, Role.OPERATOR):
            raise PermissionDenied(
                f"You need the operator role on {account} to scan it: a scan reads its secrets' values"
            )
        ids = [account.pk]
    else:
        if stacks:
            raise ValueError("a stack scan names its account")
        ids = list(accounts_for(user, Role.OPERATOR).order_by("pk").values_list("pk", flat=True))
        if not ids:
            raise PermissionDenied("You need the operator role on an account to scan it")
    with transaction.atomic():
        run = ScanRun.objects.create(
            account=account,
            account_ids=ids,
            requested_by=user if getattr(user, "is_authenticated", False) else None,
            stacks=stacks,
            region=region or "",
            history=history,
            total=len(ids),
        )
        actor = user.get_username() if getattr(user, "is_authenticated", False) else "anonymous"
        for covered in Account.objects.filter(pk__in=ids).order_by("pk"):
            audit.record(
                "secrets.scan-requested",
                actor=actor,
                actor_user=user,
                account=covered,
                stack_name=", ".join(stacks)[:1024],
                region=region or "",
                client_address=client_address,
                details={"scan": run.pk, "history": history},
            )
        _enqueue(run)
    return run


def queue_stack_rescan(account: Account, stack_name: str, region: str | None) -> ScanRun:
    """A scan of one stack the app itself asks for (after a scrub), so the findings page
    shows what is left. No person: the operation that caused it was approved already."""
    with transaction.atomic():
        run = ScanRun.objects.create(
            account=account,
            account_ids=[account.pk],
            stacks=[stack_name],
            region=region or "",
            total=1,
        )
        _enqueue(run)
    return run


def _store(run: ScanRun, account: Account, findings: list) -> list[SecretFinding]:
    """Replace the scope's findings with these, in one transaction. Returns the ones the
    scope did not hold before (new findings)."""
    layout = KeyLayout(account.prefix)
    now = timezone.now()
    rows = [
        SecretFinding(
            scan_id=run.pk,
            account=account,
            stack_name=(f.stackName or "")[:1024],
            region=(f.region or "")[:64],
            key=f.key[:1024],
            key_kind=key_kind(layout, f.key),
            version_id=f.versionId,
            path=list(f.path),
            source=f.source,
            whole=bool(f.whole),
            found_at=now,
        )
        for f in findings
    ]
    with transaction.atomic():
        old = SecretFinding.objects.filter(account=account)
        if run.stacks:
            old = old.filter(stack_name__in=run.stacks)
            if run.region:
                old = old.filter(region=run.region)
        known = {(k, v, json.dumps(p), src) for k, v, p, src in old.values_list("key", "version_id", "path", "source")}
        old.delete()
        SecretFinding.objects.bulk_create(rows, batch_size=BATCH)
    return [r for r in rows if (r.key, r.version_id, json.dumps(r.path), r.source) not in known]


def _scan_account(run: ScanRun, account: Account) -> dict:
    started = time.monotonic()
    out: dict = {"account": account.account_id, "errors": []}
    from engine.scrub import scan

    try:
        bucket = open_bucket(account, f"scan-{run.pk}")
        result = scan(
            bucket,
            KeyLayout(account.prefix),
            stacks=run.stacks or None,
            region=run.region or None,
            history=run.history,
            log=lambda level, message: logger.info("scan %s of %s: %s", run.pk, account.account_id, message),
        )
    except EngineError as exc:
        out["errors"].append(str(exc))
        out["seconds"] = round(time.monotonic() - started, 3)
        return out
    new = _store(run, account, result.findings)
    if new:
        stacks = sorted({f.stack_name for f in new if f.stack_name})
        notify.emit(
            "secrets.found", account, scan=run, new_findings=len(new), findings=len(result.findings), stacks=stacks
        )
    out.update(
        bucket=result.bucket,
        objects_scanned=result.objects_scanned,
        keys=result.keys,
        secrets=result.secrets,
        findings=len(result.findings),
        regions=list(result.regions),
        warnings=list(result.warnings)[:MAX_WARNINGS],
        seconds=round(time.monotonic() - started, 3),
    )
    return out


def execute_scan_run(run_id: int) -> ScanRun | None:
    """Run a queued ScanRun. Safe to call twice: only the call that claims it runs it."""
    claimed = ScanRun.objects.filter(pk=run_id, status=SyncStatus.QUEUED).update(
        status=SyncStatus.RUNNING, started_at=timezone.now(), phase="starting"
    )
    if not claimed:
        return ScanRun.objects.filter(pk=run_id).first()
    run = ScanRun.objects.get(pk=run_id)
    accounts = list(Account.objects.filter(pk__in=run.account_ids).order_by("name", "account_id"))
    results: list[dict] = []
    try:
        for done, account in enumerate(accounts):
            ScanRun.objects.filter(pk=run_id).update(done=done, phase=f"scanning {account.label}")
            try:
                results.append(_scan_account(run, account))
            except Exception as exc:  # a bug must not take the other accounts down with it
                logger.exception("scan %s of account %s failed", run_id, account.account_id)
                results.append({"account": account.account_id, "errors": [f"Scan failed ({type(exc).__name__})"]})
    finally:
        close_old_connections()
    failed = [r for r in results if r["errors"]]
    missing = len(run.account_ids) - len(accounts)  # removed since the request
    status = (
        SyncStatus.SUCCEEDED
        if not failed and not missing
        else (SyncStatus.FAILED if len(failed) == len(results) else SyncStatus.PARTIAL)
    )
    warnings = [f"{r['account']}: {w}" for r in results for w in r.get("warnings", [])]
    warnings += [f"{r['account']}: {e}" for r in results for e in r["errors"]]
    ScanRun.objects.filter(pk=run_id).update(
        status=status,
        finished_at=timezone.now(),
        done=len(accounts),
        phase="",
        objects_scanned=sum(r.get("objects_scanned", 0) for r in results),
        keys=sum(r.get("keys", 0) for r in results),
        secrets=sum(r.get("secrets", 0) for r in results),
        finding_count=sum(r.get("findings", 0) for r in results),
        warnings=warnings[:MAX_WARNINGS],
        result={"accounts": results},
    )
    return ScanRun.objects.get(pk=run_id)
