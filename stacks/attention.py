"""What needs attention: every stuck or unsafe stack (or bucket) of the accounts a person
can see, with the problem, since when, the evidence and the next step.

All from the mirror: no S3 call. One function per row kind, each one SQL query (the
board's total is a fixed number whatever the count of stacks); rows are small dataclasses,
built for every problem so the counts and the exports are whole, and the lock evidence
(which needs each holder's newest run and event) is filled in with two more queries.
The next step is a link into the operation request pages (`stacks.views.operations`),
which plan, ask for approval per the account's policy and check the role again.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from django.db.models import Count, Exists, Min, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.urls import reverse

from engine.schema import SUPPORTED_VERSION
from stacks import actions, lockcard
from stacks.attentionrows import (
    DEAD_LOCK,
    DRIFT,
    FAILED_RUN,
    JOURNAL,
    KINDS,
    POSTURE,
    RECORD,
    SECRETS,
    STALE_LOCK,
    Board,
    Context,
    Row,
    Step,
    cli_command,
    datetime_ms,
    has_journal_fields,
    lock_age_ms,
    min_schema,
    quote,
)
from stacks.models import (
    BucketSource,
    DeploymentEvent,
    DeploymentRun,
    Lock,
    Operation,
    OperationKind,
    OperationStatus,
    Role,
    SecretFinding,
    Stack,
)

# The columns a Stack row needs here (and `actions.why_not`): never the body.
_STACK_FIELDS = (
    "id",
    "account_id",
    "key",
    "stack_name",
    "region",
    "legacy",
    "schema_version",
    "read_only",
    "defects",
    "has_defects",
    "resource_count",
    "record_last_modified",
    "s3_last_modified",
)
_RUN_KINDS = (OperationKind.DEPLOY, OperationKind.DESTROY)
# A newer operation in one of these states settles (or is settling) a failed one.
_SETTLING = (
    OperationStatus.APPROVED,
    OperationStatus.QUEUED,
    OperationStatus.RUNNING,
    OperationStatus.SUCCEEDED,
    OperationStatus.FAILED,
    OperationStatus.PARTIAL,
)
_ORDER = {k: i for i, (k, _label) in enumerate(KINDS)}


def _stacks(ctx: Context):
    return Stack.objects.filter(account__in=ctx.ids).only(*_STACK_FIELDS)


def _attach(ctx: Context, stack: Stack) -> Stack:
    # The account objects are the context's: no query per row for `stack.account`.
    stack.account = ctx.accounts[stack.account_id]
    return stack


def _same_stack(model, **extra):
    """Rows of `model` for the outer query's stack (account, name, region): for Exists()."""
    return model.objects.filter(
        account=OuterRef("account"), stack_name=OuterRef("stack_name"), region=OuterRef("region"), **extra
    )


# --- locks -------------------------------------------------------------------------------------


def _lock_rows(ctx: Context) -> list[Row]:
    """Both lock kinds from one query: a live lock taken longer ago than
    CDKD_ATTENTION_LOCK_AGE, and an expired or unreadable one."""
    now = ctx.now_ms
    stale = Q(readable=True, expires_at_ms__gt=now, timestamp_ms__lt=now - lock_age_ms())
    dead = Q(readable=False) | Q(expires_at_ms__isnull=True) | Q(expires_at_ms__lte=now)
    locks = (
        Lock.objects.filter(account__in=ctx.ids)
        .filter(stale | dead)
        .select_related("stack")
        .defer("body", "stack__body", "stack__imports")
    )
    rows = []
    for lock in locks:
        account = ctx.accounts[lock.account_id]
        stack = _attach(ctx, lock.stack) if lock.stack else None
        state = lock.state(now)
        holder = lock.owner or "an unknown holder"
        if state == "live":
            kind, problem = STALE_LOCK, f"Locked by {holder} for {lockcard.humanize_ms(now - lock.timestamp_ms)}"
            since = datetime_ms(lock.timestamp_ms)
        elif state == "unreadable":
            kind, problem, since = DEAD_LOCK, "lock.json cannot be read", lock.s3_last_modified
        else:
            kind, problem = DEAD_LOCK, f"Expired lock left by {holder}"
            since = datetime_ms(lock.expires_at_ms) or datetime_ms(lock.timestamp_ms) or lock.s3_last_modified
        evidence = [f"lock operation: {lock.operation}"] if lock.operation else []
        if state == "unreadable" and lock.error:
            evidence.append(lock.error)
        elif state != "live":
            evidence.append(lockcard.time_left(lockcard.Evidence(now_ms=now, expires_at_ms=lock.expires_at_ms)))
        if stack is not None:
            step = ctx.operation_step(stack, OperationKind.FORCE_UNLOCK, lock=lock, lock_known=True)
        else:  # a first deploy's lock: no record to open a page on
            step = Step(
                "Force-unlock",
                kind=OperationKind.FORCE_UNLOCK,
                command=cli_command(OperationKind.FORCE_UNLOCK, account.account_id, lock.stack_name, lock.region),
                allowed=False,
                reason="No record beside the lock (a first deploy): force-unlock from the command line.",
            )
        rows.append(
            Row(
                kind,
                account,
                problem,
                since,
                step,
                lock.stack_name,
                lock.region,
                lock.region is None,
                evidence,
                stack,
                lock,
            )
        )
    return rows


def _lock_evidence(ctx: Context, rows: list[Row]) -> None:
    """The lock card's verdict for each held-too-long row: the stack's newest run and that
    run's newest event, for all of them in one query (a subquery picks the event)."""
    held = [r for r in rows if r.kind == STALE_LOCK]
    if not held:
        return
    newer = _same_stack(DeploymentRun, run_id__gt=OuterRef("run_id"))
    now = ctx.now_ms
    locked = _same_stack(Lock, readable=True, expires_at_ms__gt=now, timestamp_ms__lt=now - lock_age_ms())
    last = DeploymentEvent.objects.filter(run=OuterRef("pk")).order_by("-seq")
    runs = (
        DeploymentRun.objects.filter(account__in=ctx.ids)
        .filter(Exists(locked))
        .exclude(Exists(newer))
        .annotate(
            last_event_at=Subquery(last.values("timestamp")[:1]),
            last_event_type=Subquery(last.values("event_type")[:1]),
        )
        .only("account_id", "stack_name", "region", "run_id", "run_at", "finished_at_raw", "result")
    )
    newest = {(r.account_id, r.stack_name, r.region): r for r in runs}
    journals = has_journal_fields()
    for row in held:
        run = newest.get((row.account.pk, row.stack_name, row.region))
        stack, lock = row.stack, row.lock
        written = (
            [t for t in (stack.record_last_modified, _ms(stack.s3_last_modified)) if isinstance(t, int)]
            if stack
            else []
        )
        verdict = lockcard.judge(
            lockcard.Evidence(
                now_ms=now,
                readable=lock.readable,
                timestamp_ms=lock.timestamp_ms,
                expires_at_ms=lock.expires_at_ms,
                run_id=run.run_id if run else "",
                run_started_ms=_ms(run.run_at) if run else None,
                run_finished=bool(run and (run.finished_at_raw or run.result in ("SUCCEEDED", "FAILED"))),
                run_result=run.result if run else "",
                last_event_ms=_ms(run.last_event_at) if run else None,
                last_event_type=(run.last_event_type or "") if run else "",
                record_written_ms=max(written) if written else None,
                journal=(getattr(stack, "journal_modified", None) is not None) if journals and stack else None,
            )
        )
        row.evidence = [f"Verdict: {verdict.verdict}", *verdict.reasons, *row.evidence]


def _ms(value: datetime | None) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


# --- journals, runs ---------------------------------------------------------------------------


def _journal_rows(ctx: Context) -> list[Row]:
    """A rollback journal left beside the record: a failed deploy that was not rolled back.
    The next step is the rollback request page; the stack's lock comes in the same query."""
    if not has_journal_fields():
        return []
    found = (
        _stacks(ctx)
        .filter(journal_modified__isnull=False)
        .select_related("lock")
        .only(*_STACK_FIELDS, "journal_modified", "journal_key", "lock__owner", "lock__readable", "lock__expires_at_ms")
    )
    rows = []
    for stack in found:
        _attach(ctx, stack)
        try:
            lock = stack.lock
        except Lock.DoesNotExist:
            lock = None
        step = ctx.operation_step(stack, OperationKind.ROLLBACK, "Roll back", lock=lock, lock_known=True)
        evidence = [f"journal: {stack.journal_key}" if stack.journal_key else "journal beside the record"]
        rows.append(
            _stack_row(
                JOURNAL, stack, "A failed deploy left its rollback journal", stack.journal_modified, step, evidence
            )
        )
    return rows


def _stack_row(kind: str, stack: Stack, problem: str, since, step: Step, evidence: list[str]) -> Row:
    return Row(kind, stack.account, problem, since, step, stack.stack_name, stack.region, stack.legacy, evidence, stack)


def _failed_operation_rows(ctx: Context) -> list[Row]:
    """The admin's own deploys and destroys whose newest run ended failed or partial, with
    nothing newer (an admin operation or a cdkd run) since."""
    later_op = _same_stack(Operation, kind__in=_RUN_KINDS, status__in=_SETTLING, created_at__gt=OuterRef("created_at"))
    later_run = _same_stack(
        DeploymentRun, command__in=_RUN_KINDS, operation__isnull=True, run_at__gt=OuterRef("finished_at")
    )
    ops = (
        Operation.objects.filter(account__in=ctx.ids, kind__in=_RUN_KINDS)
        .filter(status__in=(OperationStatus.FAILED, OperationStatus.PARTIAL))
        .exclude(Exists(later_op))
        .exclude(Exists(later_run))
        .only(
            "id", "kind", "account_id", "stack_name", "region", "status", "error", "result", "finished_at", "created_at"
        )
    )
    rows = []
    for op in ops:
        account = ctx.accounts[op.account_id]
        abandoned = isinstance(op.result, dict) and bool(op.result.get("abandoned"))
        reason = ctx.may(account, Role.APPROVER if abandoned else Role.OPERATOR)
        step = Step(
            "Run again",
            kind=op.kind,
            url=reverse("operation_retry", args=[op.pk]),
            method="post",
            allowed=not reason,
            reason=reason,
            # Run again is approved anew only when its new plan differs (operation_retry).
            approval=ctx.approval(account, op.kind) + " if the plan changed",
        )
        evidence = [f"operation #{op.pk} ({op.get_kind_display()}) ended {op.status}"]
        if op.error:
            evidence.append(op.error[:300])
        problem = f"{op.get_kind_display()} ended {op.get_status_display().lower()}"
        rows.append(
            Row(
                FAILED_RUN,
                account,
                problem,
                op.finished_at or op.created_at,
                step,
                op.stack_name,
                op.region,
                op.region is None,
                evidence,
                operation_id=op.pk,
            )
        )
    return rows


def _failed_cdkd_runs(ctx: Context) -> tuple[list[DeploymentRun], dict[tuple, Stack]]:
    newer = _same_stack(DeploymentRun, command__in=_RUN_KINDS, run_id__gt=OuterRef("run_id"))
    later_op = _same_stack(Operation, kind__in=_RUN_KINDS, status__in=_SETTLING, created_at__gt=OuterRef("run_at"))
    failed = (
        DeploymentRun.objects.filter(
            account__in=ctx.ids, command__in=_RUN_KINDS, result="FAILED", operation__isnull=True
        )
        .exclude(Exists(newer))
        .exclude(Exists(later_op))
    )
    runs = list(
        failed.only("account_id", "stack_name", "region", "run_id", "command", "run_at", "finished_at", "cdkd_version")
    )
    if not runs:
        return runs, {}
    # Their records, for the destroy button's checks: one query whatever the count.
    matching = failed.filter(account=OuterRef("account"), stack_name=OuterRef("stack_name"), region=OuterRef("region"))
    stacks = _stacks(ctx).filter(legacy=False).filter(Exists(matching))
    return runs, {(s.account_id, s.stack_name, s.region): _attach(ctx, s) for s in stacks}


def _failed_run_rows(ctx: Context) -> list[Row]:
    """A stack's last run (an admin operation, or a cdkd run from the event store) of
    deploy or destroy that ended failed or partial: run it again."""
    rows = _failed_operation_rows(ctx)
    runs, stacks = _failed_cdkd_runs(ctx)
    for run in runs:
        account = ctx.accounts[run.account_id]
        stack = stacks.get((run.account_id, run.stack_name, run.region))
        evidence = [
            f"cdkd {run.command} run {run.run_id} ended FAILED"
            + (f" (cdkd {run.cdkd_version})" if run.cdkd_version else "")
        ]
        if stack is not None and run.command == OperationKind.DESTROY:
            step = ctx.operation_step(stack, OperationKind.DESTROY, "Destroy again")
        elif stack is not None:
            # A cdkd deploy ran from a cdk.out the admin does not hold: plan one anew.
            reason = ctx.may(account)
            step = Step(
                "Plan a deploy",
                kind=OperationKind.DEPLOY,
                url=reverse("stack_plan_new", args=[account.account_id, stack.region_slug, stack.stack_name]),
                allowed=not reason,
                reason=reason,
                approval=ctx.approval(account, OperationKind.DEPLOY),
            )
        else:
            step = Step(
                "Run again",
                kind=run.command,
                allowed=False,
                reason="The stack has no record now: run cdkd again from its app.",
            )
        problem = f"cdkd {run.command} failed"
        row = Row(
            FAILED_RUN,
            account,
            problem,
            run.finished_at or run.run_at,
            step,
            run.stack_name,
            run.region,
            False,
            evidence,
            stack,
        )
        rows.append(row)
    return rows


def _drift_rows(ctx: Context) -> list[Row]:
    """The latest drift check of each stack where it found resources MODIFIED or DELETED
    (`stacks.drift.latest_drifted`: one indexed query), with accept as the next step and
    revert named beside it. The counts come from the check's summary, not its (encrypted)
    per-resource body."""
    from stacks.drift import latest_drifted  # the drift module imports the models this one does

    rows = []
    for check in latest_drifted(list(ctx.accounts.values())):
        stack = check.stack
        if stack is None:  # the record is gone since the check
            continue
        _attach(ctx, stack)
        counts = check.counts if isinstance(check.counts, dict) else {}
        modified, deleted = int(counts.get("MODIFIED") or 0), int(counts.get("DELETED") or 0)
        parts = [f"{modified} modified" if modified else "", f"{deleted} deleted" if deleted else ""]
        evidence = [", ".join(p for p in parts if p) or f"{check.drifted} drifted", f"checked by {check.trigger}"]
        step = ctx.operation_step(stack, OperationKind.DRIFT_ACCEPT)
        evidence.append("or revert: write the recorded values back (Revert drift on the stack page)")
        problem = f"Drift: {check.drifted} resource{'s' if check.drifted != 1 else ''} differ from the record"
        rows.append(_stack_row(DRIFT, stack, problem, check.checked_at, step, evidence))
    return rows


# --- records, secrets, buckets ------------------------------------------------------------------


def _record_rows(ctx: Context) -> list[Row]:
    """Damaged, newer-than-known, old-schema and legacy-key records, one row each, with the
    advice for the first problem found; and one bucket row per account whose records are
    in a legacy `cdkd-state-{account}-{region}` bucket."""
    low = min_schema()
    found = _stacks(ctx).filter(
        Q(has_defects=True)
        | Q(read_only=True)
        | Q(legacy=True)
        | Q(schema_version__lt=low)
        | Q(schema_version__isnull=True)
    )
    rows = []
    for stack in found:
        _attach(ctx, stack)
        history = reverse("stack_history", args=[stack.account.account_id, stack.region_slug, stack.stack_name])
        damaged = actions._damage(stack)
        if stack.has_defects or stack.schema_version is None:
            first = damaged[0] if damaged else {}
            problem = "Damaged record"
            evidence = [f"{d.get('path') or 'root'}: {d.get('code')}" for d in damaged[:5]] or ["no schema version"]
            step = Step(
                "Restore an earlier version",
                url=history,
                allowed=True,
                advice=f"Or orphan the record from its page ({first.get('code') or 'defect'}).",
            )
        elif stack.read_only:
            problem = f"Written by a newer cdkd (version {stack.schema_version})"
            evidence = [actions._newer(stack)]
            step = Step("Use the newer cdkd", allowed=False, reason="This app does not write it.")
        elif stack.legacy:
            problem = "Legacy record (no region in its key)"
            evidence = [f"key: {stack.key}"]
            step = Step(
                "State migrate",
                command=f"cdkd deploy {quote(stack.stack_name)}",
                allowed=False,
                reason="A cdkd deploy moves a legacy key to the region-scoped one; the admin does not.",
            )
        else:
            problem = f"Old schema version {stack.schema_version}"
            evidence = [
                f"version {stack.schema_version} < {low} (CDKD_ATTENTION_MIN_SCHEMA); this app writes "
                f"{SUPPORTED_VERSION}"
            ]
            step = Step(
                "State migrate",
                command=f"cdkd deploy {quote(stack.stack_name)}",
                allowed=False,
                reason=f"Only a cdkd deploy rewrites a record at version {SUPPORTED_VERSION}.",
            )
        rows.append(_stack_row(RECORD, stack, problem, stack.s3_last_modified, step, evidence))
    legacy = [a for a in ctx.accounts.values() if a.bucket_source == BucketSource.DEFAULT_LEGACY]
    locks: dict[int, list[str]] = {}
    if legacy:  # one query for every legacy bucket's locks (the migration refuses while one is there)
        for account_pk, key in Lock.objects.filter(account__in=legacy).values_list("account_id", "key"):
            locks.setdefault(account_pk, []).append(key)
    for account in legacy:
        region = actions.migrate_region(account)
        reason = ctx.may(account) or actions.migrate_why_not(account, lock_keys=locks.get(account.pk, [])) or ""
        step = Step(
            "State migrate",
            kind=OperationKind.STATE_MIGRATE,
            url=reverse("state_migrate_new", args=[account.account_id]) + f"?region={region}",
            command=(f"python manage.py cdkd state migrate --account {account.account_id} --region {region} --dry-run"),
            allowed=not reason,
            reason=reason,
            approval=ctx.approval(account, OperationKind.STATE_MIGRATE),
        )
        evidence = (
            [f"bucket: {account.resolved_bucket}", account.bucket_message]
            if account.bucket_message
            else [f"bucket: {account.resolved_bucket}"]
        )
        rows.append(
            Row(
                RECORD,
                account,
                "State in the legacy region-suffixed bucket",
                account.bucket_checked_at,
                step,
                evidence=evidence,
            )
        )
    return rows


def _secret_rows(ctx: Context) -> list[Row]:
    """Stacks with findings from the last scan (current record or its history): scrub. One
    query with the counts as subqueries; findings of no stack are one bucket row per account."""
    mine = SecretFinding.objects.filter(
        # A legacy record's findings carry region "" where the Stack row has None.
        account=OuterRef("account"),
        stack_name=OuterRef("stack_name"),
        region=Coalesce(OuterRef("region"), Value("")),
    )

    def counted(qs):
        return Subquery(qs.order_by().values("account").annotate(n=Count("pk")).values("n")[:1])

    found = (
        _stacks(ctx)
        .filter(Exists(mine))
        .annotate(
            current=counted(mine.filter(version_id__isnull=True)),
            history=counted(mine.filter(version_id__isnull=False)),
            first_found=Subquery(mine.order_by().values("account").annotate(t=Min("found_at")).values("t")[:1]),
        )
    )
    rows = []
    for stack in found:
        _attach(ctx, stack)
        current, history = stack.current or 0, stack.history or 0
        step = ctx.operation_step(stack, OperationKind.SCRUB)
        evidence = [f"{current} in the current record", f"{history} in older versions"]
        problem = f"{current + history} secret finding{'s' if current + history != 1 else ''}"
        rows.append(_stack_row(SECRETS, stack, problem, stack.first_found, step, evidence))
    loose = (
        SecretFinding.objects.filter(account__in=ctx.ids, stack_name="")
        .values("account")
        .annotate(n=Count("pk"), first=Min("found_at"))
    )
    for entry in loose:
        account = ctx.accounts[entry["account"]]
        step = Step("Review findings", url=reverse("secrets") + f"?account={account.account_id}")
        rows.append(
            Row(
                SECRETS,
                account,
                f"{entry['n']} secret finding(s) outside any stack",
                entry["first"],
                step,
                evidence=["keys of no stack (exports index, placeholders, other)"],
            )
        )
    return rows


def _posture_rows(ctx: Context) -> list[Row]:
    """Bucket posture problems, from `stacks.posture.posture_problems(account_ids)` when that
    module is installed (it is built alongside); without it, none."""
    try:
        from stacks.posture import posture_problems  # type: ignore[import-not-found]
    except ImportError:
        return []
    by_id = {a.account_id: a for a in ctx.accounts.values()}
    rows = []
    for problem in posture_problems([a.account_id for a in ctx.accounts.values()]) or []:
        get = problem.get if isinstance(problem, dict) else lambda k, d=None, p=problem: getattr(p, k, d)
        ref = get("account_id") or get("account")
        account = by_id.get(getattr(ref, "account_id", ref)) or ctx.accounts.get(getattr(ref, "pk", ref))
        if account is None:
            continue  # never show a bucket of an account the person cannot see
        check = str(get("check") or get("name") or "posture")
        found = str(get("found") or get("message") or "")
        change = str(get("change") or get("fix") or get("advice") or "")
        step = Step(change or "Fix the bucket setting", allowed=False, reason="Changed in the account, not here.")
        rows.append(
            Row(
                POSTURE,
                account,
                f"{check}: {found}" if found else check,
                get("since") or get("checked_at"),
                step,
                evidence=[e for e in (get("bucket"), found) if e],
            )
        )
    return rows


BUILDERS = (_lock_rows, _journal_rows, _failed_run_rows, _drift_rows, _record_rows, _secret_rows, _posture_rows)


def _sort_key(row: Row):
    since = row.since.timestamp() if row.since else float("inf")
    return (_ORDER[row.kind], since, row.account.account_id, row.stack_name, row.region or "")


def build(ctx: Context, *, account_id: str | None = None, kind: str | None = None) -> Board:
    """Every row of the context's accounts; counts of all, rows filtered by account and kind."""
    rows: list[Row] = []
    for builder in BUILDERS:
        rows += builder(ctx)
    _lock_evidence(ctx, rows)
    rows.sort(key=_sort_key)
    per_account = Counter(r.account.pk for r in rows)
    per_kind = Counter(r.kind for r in rows)
    shown = [r for r in rows if (not account_id or r.account.account_id == account_id) and (not kind or r.kind == kind)]
    return Board(
        rows=shown,
        by_account=[(a, per_account[a.pk]) for a in ctx.accounts.values()],
        by_kind=[(k, label, per_kind[k]) for k, label in KINDS],
        total=len(rows),
    )
