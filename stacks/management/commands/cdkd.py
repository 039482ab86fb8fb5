"""`manage.py cdkd ...`: the cdkd CLI's state commands across accounts, plus the worker.

The person at the server's shell is trusted as an admin. Every subcommand exits non-zero
with one line naming what is wrong when an account, stack or bucket cannot be used.
"""

from __future__ import annotations

import getpass
import json
import sys
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q

from engine.errors import EngineError
from stacks import bucketcli
from stacks.attentioncli import add_attention_parser, run_attention
from stacks.deploycli import add_deploy_parsers, add_diff_parser, run_deploy, run_diff, run_rollback
from stacks.driftcli import add_drift_parsers, run_drift, run_refresh_observed
from stacks.models import Account, Stack
from stacks.records import read_record, record_versions

VALID_ACTIONS = {"accounts": ("add", "list"), "state": ("list", "show", "versions")}


def cli_actor() -> str:
    try:
        return f"cli-{getpass.getuser()}"
    except Exception:  # no user name in this environment (containers)
        return "cli-unknown"


def iso_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{ms} (not a valid time)"


def audit_json(e) -> dict[str, Any]:
    return {
        "id": e.pk,
        "at": e.created_at.isoformat(),
        "actor": e.actor,
        "action": e.action,
        "account": e.account_ref,
        "stack": e.stack_name,
        "region": e.region,
        "operation": e.operation_id,
        "operationKind": e.operation_kind,
        "planDigest": e.plan_digest,
        "etagBefore": e.etag_before,
        "etagAfter": e.etag_after,
        "result": e.result,
        "error": e.error,
        "clientAddress": e.client_address,
        "details": e.details,
        "prevHash": e.prev_hash,
        "hash": e.hash,
    }


class Command(BaseCommand):
    help = "cdkd state across accounts: accounts, sync, state list/show/versions, worker"

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="group", required=True, parser_class=CommandParser)

        accounts = sub.add_parser("accounts", help="register and list AWS accounts")
        acc_sub = accounts.add_subparsers(dest="action", required=True, parser_class=CommandParser)
        add = acc_sub.add_parser("add", help="register an account")
        add.add_argument("--account-id", required=True)
        add.add_argument("--role-arn", default="")
        add.add_argument("--external-id", default="")
        add.add_argument("--bucket", default="", help="explicit state bucket (default: resolve as cdkd does)")
        add.add_argument("--prefix", default="cdkd")
        add.add_argument("--name", default="", help="a label people recognise")
        add.add_argument("--region", default="", help="cdkd's CLI region for the legacy bucket name")
        lst = acc_sub.add_parser("list", help="list registered accounts")
        lst.add_argument("--json", action="store_true")

        sync = sub.add_parser("sync", help="mirror the state buckets into the database")
        sync.add_argument("--account", help="account id or label (default: every account)")
        sync.add_argument("--json", action="store_true")

        state = sub.add_parser("state", help="read stack records")
        st_sub = state.add_subparsers(dest="action", required=True, parser_class=CommandParser)
        slist = st_sub.add_parser("list", help="list stacks (after an incremental sync)")
        slist.add_argument("--account")
        slist.add_argument("--long", action="store_true")
        slist.add_argument("--tree", action="store_true")
        slist.add_argument("--json", action="store_true")
        show = st_sub.add_parser("show", help="print one record as stored in S3")
        show.add_argument("stack")
        show.add_argument("--account", required=True)
        show.add_argument("--stack-region")
        show.add_argument("--show-nested", action="store_true")
        show.add_argument("--json", action="store_true")
        versions = st_sub.add_parser("versions", help="list the S3 versions of a record")
        versions.add_argument("stack")
        versions.add_argument("--account", required=True)
        versions.add_argument("--stack-region", required=True)
        versions.add_argument("--json", action="store_true")

        orphan = st_sub.add_parser("orphan", help="drop a record (or some of its resources); AWS is untouched")
        orphan.add_argument("stack")
        orphan.add_argument("--account", required=True)
        orphan.add_argument("--stack-region")
        orphan.add_argument("--resource", action="append", default=[], help="logical id (repeatable)")
        orphan.add_argument("--force", action="store_true")
        orphan.add_argument("--yes", action="store_true", help="do it (without: print the plan only)")
        destroy = st_sub.add_parser("destroy", help="delete a stack's AWS resources from its record (no CDK app)")
        destroy.add_argument("stack")
        destroy.add_argument("--account", required=True)
        destroy.add_argument("--stack-region", required=True)
        destroy.add_argument("--concurrency", type=int, default=8, help="deletes at once (default 8)")
        destroy.add_argument(
            "--skip-final-snapshot", action="store_true", help="delete DeletionPolicy Snapshot resources without one"
        )
        destroy.add_argument(
            "--remove-protection",
            action="store_true",
            help="turn deletion protection off before each delete (every protection-bearing type)",
        )
        destroy.add_argument(
            "--resource-timeout",
            action="append",
            default=[],
            metavar="DURATION|TYPE=DURATION",
            help="fail a delete still running after this (default: CDKD_DESTROY_RESOURCE_TIMEOUT_SECONDS, 30m)",
        )
        destroy.add_argument(
            "--resource-warn-after",
            action="append",
            default=[],
            metavar="DURATION|TYPE=DURATION",
            help="warn about a delete still running after this (default 5m)",
        )
        destroy.add_argument("--yes", action="store_true")
        destroy.add_argument("--json", action="store_true")
        restore = st_sub.add_parser("restore", help="make an earlier S3 version of the record current")
        restore.add_argument("stack")
        restore.add_argument("--account", required=True)
        restore.add_argument("--stack-region", required=True)
        restore.add_argument("--version-id", required=True)
        restore.add_argument("--yes", action="store_true")

        bucketcli.add_migrate_parser(st_sub)
        unlock = sub.add_parser("force-unlock", help="remove a stack's lock.json")
        unlock.add_argument("stack")
        unlock.add_argument("--account", required=True)
        unlock.add_argument("--stack-region")
        unlock.add_argument("--unreadable", action="store_true", help="second confirmation for an unreadable lock")
        unlock.add_argument("--yes", action="store_true")

        scrub = sub.add_parser("scrub", help="find secrets in the bucket and its history (--dry-run), or remove them")
        scrub.add_argument("stacks", nargs="*", metavar="STACK", help="stacks (default: the whole account)")
        scrub.add_argument("--account", required=True)
        scrub.add_argument("--stack-region")
        scrub_mode = scrub.add_mutually_exclusive_group()
        scrub_mode.add_argument("--dry-run", action="store_true", help="scan and print findings only (the default)")
        scrub_mode.add_argument("--yes", action="store_true", help="scrub the named stacks (audited operations)")
        scrub.add_argument("--app", help="a synthesized cdk.out (or a zip of one): rewrite as its templates say")
        scrub_history = scrub.add_mutually_exclusive_group()
        scrub_history.add_argument(
            "--keep-history",
            action="store_true",
            help="keep the noncurrent versions of each rewritten record (by default they are purged, as cdkd does)",
        )
        scrub_history.add_argument(
            "--purge-history",
            action="store_true",
            help="also purge the noncurrent versions of every other key that held a secret",
        )
        scrub.add_argument(
            "--allow-replacement",
            action="store_true",
            help="go ahead when cdkd's next diff would replace a resource because of the rewrite",
        )
        scrub.add_argument("--json", action="store_true")

        evs = sub.add_parser("events", help="a stack's runs, or one run's events, read from the bucket")
        evs.add_argument("stack")
        evs.add_argument("--account", required=True)
        evs.add_argument("--stack-region")
        evs.add_argument("--run", help="print this run's events")
        evs.add_argument("--json", action="store_true")
        bucketcli.add_prune_arguments(evs)
        bucketcli.add_posture_parser(sub)

        aud = sub.add_parser("audit", help="print or verify the audit log")
        aud.add_argument("--account")
        aud.add_argument("--verify", action="store_true")
        aud.add_argument("--json", action="store_true")
        aud.add_argument("--limit", type=int, default=200)

        encryption = sub.add_parser("encryption", help="record bodies encrypted at rest")
        enc_sub = encryption.add_subparsers(dest="action", required=True, parser_class=CommandParser)
        rotate = enc_sub.add_parser("rotate", help="re-encrypt every body with the first key of CDKD_ENCRYPTION_KEYS")
        rotate.add_argument("--batch-size", type=int, default=200)
        rotate.add_argument("--json", action="store_true")

        add_diff_parser(sub)
        add_deploy_parsers(sub)
        add_attention_parser(sub)
        add_drift_parsers(sub, st_sub)

        worker = sub.add_parser("worker", help="run the RQ worker (and the sync schedule)")
        worker.add_argument("--burst", action="store_true", help="exit when the queues are empty")

    # --- dispatch ----------------------------------------------------------------------

    def handle(self, *args: Any, **options: Any) -> None:
        group, action = options["group"], options.get("action")
        name = f"{group}_{action}" if action else group
        try:
            getattr(self, f"do_{name.replace('-', '_')}")(options)
        except EngineError as exc:
            raise CommandError(str(exc)) from None

    def emit(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, ensure_ascii=False))

    def account(self, ref: str) -> Account:
        account = Account.objects.filter(Q(account_id=ref) | Q(name=ref)).first()
        if account is None:
            raise CommandError(f"No account {ref!r} is registered; add it with `manage.py cdkd accounts add`")
        return account

    def accounts(self, ref: str | None) -> list[Account]:
        return [self.account(ref)] if ref else list(Account.objects.all())

    # --- accounts ------------------------------------------------------------------------

    def do_accounts_add(self, o: dict) -> None:
        account = Account(
            account_id=o["account_id"],
            role_arn=o["role_arn"],
            external_id=o["external_id"],
            bucket=o["bucket"],
            prefix=o["prefix"].strip("/") or "cdkd",
            name=o["name"],
            region=o["region"],
        )
        try:
            account.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            raise CommandError(f"Cannot add account {o['account_id']!r}: {problems}") from None
        account.save()
        self.stdout.write(
            f"Added account {account}. Run `manage.py cdkd sync --account {account.account_id}` to mirror it."
        )

    def do_accounts_list(self, o: dict) -> None:
        rows = [
            {
                "account": a.account_id,
                "name": a.name,
                "roleArn": a.role_arn,
                "bucket": a.resolved_bucket or a.bucket,
                "bucketSource": a.bucket_source,
                "bucketRegion": a.bucket_region,
                "prefix": a.prefix,
                "status": a.bucket_status,
                "message": a.bucket_message,
                "lastSyncedAt": a.last_synced_at.isoformat() if a.last_synced_at else None,
                "stacks": a.stacks.count(),
            }
            for a in Account.objects.all()
        ]
        if o["json"]:
            return self.emit(rows)
        if not rows:
            self.stdout.write("No accounts registered.")
        for r in rows:
            bucket = r["bucket"] or "(not resolved yet)"
            self.stdout.write(f"{r['account']}  {r['name'] or '-':20}  {bucket}  [{r['status']}]  {r['stacks']} stacks")
            if r["message"]:
                self.stdout.write(f"    {r['message']}")

    # --- sync ----------------------------------------------------------------------------

    def do_sync(self, o: dict) -> None:
        from stacks.sync import sync_accounts

        results = sync_accounts(self.accounts(o["account"]), actor=cli_actor())
        if o["json"]:
            self.emit({"accounts": [r.as_json() for r in results]})
        else:
            for r in results:
                self.stdout.write(
                    f"{r.account}  {r.bucket or '-'}: {r.listed} listed, {r.fetched} fetched, "
                    f"{r.unchanged} unchanged, {r.removed} removed"
                )
                for error in r.errors:
                    self.stderr.write(f"    error: {error}")
        failed = [r for r in results if r.errors]
        if failed:
            raise CommandError(f"{len(failed)} of {len(results)} accounts had errors")

    # --- state ---------------------------------------------------------------------------

    def do_state_list(self, o: dict) -> None:
        from stacks.sync import sync_accounts

        if o["tree"] and o["long"]:
            raise CommandError("--tree cannot be combined with --long")
        accounts = self.accounts(o["account"])
        for result in sync_accounts(accounts, actor=cli_actor()):
            for error in result.errors:
                self.stderr.write(f"warning: account {result.account}: {error} (showing the last mirrored state)")
        stacks = (
            Stack.objects.filter(account__in=accounts)
            .select_related("account", "lock")
            .order_by("account__account_id", "stack_name", "legacy", "region")
        )
        if o["json"]:
            rows = []
            for s in stacks:
                row: dict[str, Any] = {
                    "account": s.account.account_id,
                    "stackName": s.stack_name,
                    "region": s.region,
                    "legacy": s.legacy,
                }
                if o["long"]:
                    row.update(self._long_fields(s))
                rows.append(row)
            return self.emit(rows)
        if o["tree"]:
            return self._print_tree(list(stacks))
        for s in stacks:
            line = f"{s.account.account_id}  {s.stack_name}  {s.region or '(legacy, no region)'}"
            if s.legacy and s.region:
                line += "  (legacy)"
            if o["long"]:
                f = self._long_fields(s)
                line += f"  v{f['version'] or '?'}  {f['resources']} resources  lock: {f['lock']}"
                line += f"  modified {iso_ms(s.record_last_modified)}"
                if s.has_defects:
                    line += "  DAMAGED"
            self.stdout.write(line)

    def _long_fields(self, s: Stack) -> dict[str, Any]:
        lock = getattr(s, "lock", None)
        return {
            "version": s.schema_version,
            "resources": s.resource_count,
            "lastModified": s.record_last_modified,
            "lock": lock.state() if lock else "none",
            "defects": [d["code"] for d in s.defects],
        }

    def _print_tree(self, stacks: list[Stack]) -> None:
        children: dict[int | None, list[Stack]] = {}
        ids = {s.pk for s in stacks}
        for s in stacks:
            parent = s.parent_id if s.parent_id in ids else None  # an orphan child is promoted
            children.setdefault(parent, []).append(s)

        def walk(node: Stack, indent: str) -> None:
            for i, child in enumerate(children.get(node.pk, [])):
                last = i == len(children[node.pk]) - 1
                self.stdout.write(f"{indent}{'└─ ' if last else '├─ '}{child.stack_name.rsplit('~', 1)[-1]}")
                walk(child, indent + ("   " if last else "│  "))

        for root in children.get(None, []):
            self.stdout.write(f"{root.account.account_id}  {root.stack_name}  {root.region or '(legacy)'}")
            walk(root, "  ")

    def do_state_show(self, o: dict) -> None:
        account = self.account(o["account"])
        record = read_record(account, o["stack"], o["stack_region"], actor=cli_actor(), nested=o["show_nested"])
        if o["json"]:
            return self.emit(record.as_json(nested=o["show_nested"]))
        self._print_record(record, "")

    def _print_record(self, record, indent: str) -> None:
        p = record.parsed
        w = self.stdout.write
        w(f"{indent}Stack:         {record.stack_name}")
        w(f"{indent}Account:       {record.account.account_id}")
        w(f"{indent}Region:        {record.region or '(legacy, no region)'}")
        w(f"{indent}Key:           {record.key}{'  (legacy layout)' if record.legacy else ''}")
        w(f"{indent}Version:       {p.version if p.version is not None else '(none)'}")
        w(f"{indent}Last modified: {iso_ms(p.last_modified_ms())}")
        w(f"{indent}ETag:          {record.obj.etag}")
        lock = record.lock_json()
        if record.lock is None:
            w(f"{indent}Lock:          none")
        elif lock is None or lock.get("unreadable"):
            w(f"{indent}Lock:          present but unreadable ({record.lock_key})")
        else:
            holder = lock.get("owner") or "an unnamed holder"
            w(f"{indent}Lock:          held by {holder}, operation {lock.get('operation') or '-'}")
            expires = lock.get("expiresAt")
            deadline = iso_ms(expires) if isinstance(expires, int) else "unknown (counts as expired)"
            w(f"{indent}               deadline {deadline}")
        if p.newer_than_supported:
            w(f"{indent}warning: written by a newer cdkd (version {p.version}); read-only here")
        if p.region_mismatch:
            w(f"{indent}warning: the body's region ({p.body_region_kind}) disagrees with the key's {record.region}")
        for defect in p.defects:
            w(f"{indent}warning: {defect.message}")
        rows = p.resource_rows()
        w(f"{indent}Resources ({len(rows)}):")
        for logical_id, row in rows:
            if isinstance(row, dict):
                w(f"{indent}  {logical_id}  {row.get('resourceType', '?')}  {row.get('physicalId', '-')}")
            else:
                w(f"{indent}  {logical_id}  (malformed row)")
        outputs = p.outputs()
        w(f"{indent}Outputs ({len(outputs)}):")
        for name, value in outputs.items():
            w(f"{indent}  {name} = {value if isinstance(value, str) else json.dumps(value)}")
        for child in record.children:
            w(f"{indent}Nested:")
            self._print_record(child, indent + "    ")

    def do_state_versions(self, o: dict) -> None:
        account = self.account(o["account"])
        record = read_record(account, o["stack"], o["stack_region"], actor=cli_actor())
        versions = record_versions(account, record.key, actor=cli_actor())
        rows = [
            {
                "versionId": v.version_id,
                "lastModified": v.last_modified.isoformat(),
                "size": v.size,
                "isLatest": v.is_latest,
                "deleteMarker": v.delete_marker,
            }
            for v in versions
        ]
        if o["json"]:
            return self.emit(rows)
        for r in rows:
            kind = "delete marker" if r["deleteMarker"] else f"{r['size']} bytes"
            self.stdout.write(f"{r['versionId']}  {r['lastModified']}  {kind}{'  (current)' if r['isLatest'] else ''}")

    # --- operations ----------------------------------------------------------------------

    def _region(self, account: Account, stack: str, given: str | None, *, locks_too: bool = False) -> str | None:
        """--stack-region, or the only region the stack has; a legacy record is None."""
        if given:
            return given
        from engine.keys import KeyLayout
        from stacks.records import LOCK_KINDS, RECORD_KINDS, open_bucket, stack_regions

        bucket = open_bucket(account, cli_actor())
        kinds = RECORD_KINDS | LOCK_KINDS if locks_too else RECORD_KINDS
        regions = stack_regions(bucket, KeyLayout(account.prefix), stack, kinds)
        if not regions:
            raise CommandError(f"No stack {stack!r} in account {account.account_id} (bucket {bucket.name})")
        if len(regions) > 1:
            named = ", ".join(r or "legacy" for r in regions)
            raise CommandError(f"Stack {stack!r} exists in several regions ({named}): pass --stack-region")
        return regions[0]

    def _operate(
        self, kind: str, account: Account, stack: str, region: str | None, params: dict, yes: bool, *, as_json=False
    ) -> None:
        from engine.operations import OperationRefused
        from stacks.audit import cli_actor as audit_actor
        from stacks.operations import compute_plan, run_direct

        actor = audit_actor()
        try:
            plan = compute_plan(account, kind, stack, region, params, actor)
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None
        if as_json and not yes:
            return self.emit({"plan": plan.as_json(), "digest": plan.digest})
        if not as_json:
            self.stdout.write(f"Plan ({plan.digest}): {plan.summary}")
            for change in plan.changes:
                self.stdout.write(f"  {change if isinstance(change, str) else json.dumps(change, ensure_ascii=False)}")
            for warning in plan.warnings:
                self.stdout.write(f"  warning: {warning}")
            if not yes:
                self.stdout.write("Nothing changed: pass --yes to do it.")
                return
        op = run_direct(kind, account, stack, region, params, actor=actor, plan=plan)
        # an outcome with counts: the run happened (a refusal or a crash records none)
        self._destroy_ran = kind == "destroy" and bool(((op.result or {}).get("details") or {}).get("counts"))
        for entry in op.log:
            if entry.get("level") in ("warning", "error"):
                self.stderr.write(f"{entry['level']}: {entry['message']}")
        details = (op.result or {}).get("details") or {}
        if as_json:
            self.emit(
                {
                    "operation": op.pk,
                    "status": op.status,
                    "summary": (op.result or {}).get("summary", ""),
                    "error": op.error or None,
                    "counts": details.get("counts"),
                    "runId": details.get("run_id"),
                    "etagBefore": op.etag_before or None,
                    "etagAfter": op.etag_after or None,
                }
            )
        elif op.status in ("succeeded", "partial"):
            done = "Done" if op.status == "succeeded" else "Partly done"
            self.stdout.write(f"{done} (operation #{op.pk}): {op.result.get('summary', '')}")
        if op.status == "succeeded":
            return
        if op.status == "partial":
            raise CommandError(op.error or op.result.get("summary") or "partly done", returncode=2)
        raise CommandError(op.error or f"operation #{op.pk} {op.status}")

    def do_state_destroy(self, o: dict) -> None:
        from engine.destroy.retry import parse_deadline_flags
        from stacks.forms import destroy_deadline_params

        account = self.account(o["account"])
        if o["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1")
        params: dict[str, Any] = {"concurrency": o["concurrency"]}
        for option in ("skip_final_snapshot", "remove_protection"):
            if o[option]:
                params[option] = True
        params |= destroy_deadline_params()  # the settings, unless a flag says otherwise
        self._destroy_ran = False
        flags = (("--resource-timeout", "resource_timeout"), ("--resource-warn-after", "resource_warn_after"))
        for flag, name in flags:
            try:
                given = parse_deadline_flags(o[name], flag=flag)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            if given:
                base = params.get(name)
                params[name] = ({"default": base} if base is not None else {}) | given
        try:
            self._operate("destroy", account, o["stack"], o["stack_region"], params, o["yes"], as_json=o["json"])
        except CommandError as exc:
            # cdkd's exit codes: 2 whenever a run ended with errors or skips (a run that only
            # failed included), 1 for a refusal or a run that could not start.
            if exc.returncode == 1 and self._destroy_ran:
                raise CommandError(str(exc), returncode=2) from None
            raise

    def do_force_unlock(self, o: dict) -> None:
        account = self.account(o["account"])
        region = self._region(account, o["stack"], o["stack_region"], locks_too=True)
        params = {"confirm_unreadable": True} if o["unreadable"] else {}
        self._operate("force-unlock", account, o["stack"], region, params, o["yes"])

    def do_state_orphan(self, o: dict) -> None:
        account = self.account(o["account"])
        region = self._region(account, o["stack"], o["stack_region"])
        if o["resource"]:
            params = {"resources": o["resource"], "force": o["force"]}
            self._operate("orphan-resources", account, o["stack"], region, params, o["yes"])
        else:
            self._operate("orphan", account, o["stack"], region, {"force": o["force"]}, o["yes"])

    def do_state_restore(self, o: dict) -> None:
        account = self.account(o["account"])
        params = {"version_id": o["version_id"]}
        self._operate("restore", account, o["stack"], o["stack_region"], params, o["yes"])

    def do_audit(self, o: dict) -> None:
        from stacks import audit
        from stacks.models import AuditEvent

        ref = self.account(o["account"]).account_id if o["account"] else None
        if o["verify"]:
            checked, problems = audit.verify(ref)
            if o["json"]:
                self.emit({"checked": checked, "problems": [p.__dict__ for p in problems]})
            else:
                for p in problems:
                    self.stderr.write(f"account {p.account or '-'} event {p.event_id}: {p.message}")
                self.stdout.write(f"{checked} events checked, {len(problems)} problems")
            if problems:
                raise CommandError(f"the audit chain is broken in {len(problems)} places")
            return
        events = AuditEvent.objects.all()
        if ref:
            events = events.filter(account_ref=ref)
        rows = [audit_json(e) for e in events[: o["limit"]]]
        if o["json"]:
            return self.emit(rows)
        for r in rows:
            target = f"{r['account']} {r['stack']} {r['region']}".strip()
            self.stdout.write(f"{r['at']}  {r['actor']:16} {r['action']:28} {target} {r['result']} {r['error']}")

    # --- events --------------------------------------------------------------------------

    def do_events(self, o: dict) -> None:
        """`cdkd events`: read the bucket directly, not the mirror (reference §4.6)."""
        from engine.keys import KeyLayout
        from stacks.eventread import EventsError, event_line, list_runs, read_run, resolve_region
        from stacks.records import open_bucket

        if bucketcli.events(self, o):
            return
        account = self.account(o["account"])
        stack = o["stack"]
        bucket = open_bucket(account, cli_actor())
        layout = KeyLayout(account.prefix)
        try:
            if "/" in stack or not stack:
                raise EventsError("EVENTS_NOT_FOUND", f"no event history for {stack}")
            region = resolve_region(bucket, layout, stack, o["stack_region"])
            if o["run"]:
                run_events = read_run(bucket, layout, stack, region, o["run"])
                if o["json"]:
                    return self.emit(run_events)
                for event in run_events:
                    for line in event_line(event):
                        self.stdout.write(line)
                return
            runs, note = list_runs(bucket, layout, stack, region)
        except EventsError as exc:
            raise CommandError(f"{exc.code}: {exc}") from None
        if o["json"]:
            return self.emit({"stackName": stack, "region": region, "runs": [r.as_dict() for r in runs]})
        if note:
            self.stderr.write(f"note: {note}")
        if not runs:
            self.stdout.write(f"No runs recorded for {stack} in {region}.")
        for r in runs:
            self.stdout.write(
                f"{r.run_id}  {r.command or '-':8} {r.result or '-':9} {r.started_at or '-'} → {r.finished_at or '-'}"
                f"  {r.event_count} events  cdkd {r.cdkd_version or '?'}"
            )

    # --- scrub ---------------------------------------------------------------------------

    def do_scrub(self, o: dict) -> None:
        """Scan (default, `--dry-run`) or scrub (`--yes`, one audited operation per stack).
        Secret values never reach the output: findings carry paths and sources only."""
        account = self.account(o["account"])
        if not o["yes"]:
            return self._scrub_scan(account, o)
        if not o["stacks"]:
            raise CommandError("name the stack(s) to scrub; without STACK only a scan (--dry-run) is possible")
        self._scrub_run(account, o)

    def _scrub_scan(self, account: Account, o: dict) -> None:
        from engine.keys import KeyLayout
        from engine.scrub import scan
        from stacks.records import open_bucket

        for flag in ("purge_history", "keep_history", "allow_replacement", "app"):
            if o[flag]:
                raise CommandError(f"--{flag.replace('_', '-')} needs --yes (a scan changes nothing)")
        bucket = open_bucket(account, cli_actor())
        result = scan(bucket, KeyLayout(account.prefix), stacks=o["stacks"] or None, region=o["stack_region"])
        for warning in result.warnings:
            self.stderr.write(f"warning: {warning}")
        if o["json"]:
            return self.emit(result.as_json())
        for f in result.findings:
            where = f"{f.key}" + (f" (version {f.versionId})" if f.versionId else " (current)")
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in f.path).lstrip(".")
            self.stdout.write(f"{where}  {path or '(whole body)'}  {f.source}")
        self.stdout.write(
            f"{len(result.findings)} finding(s) in {result.objects_scanned} object version(s) of {result.keys} "
            f"key(s); {result.secrets} known secret value(s) searched in {', '.join(result.regions)}"
        )

    def _scrub_run(self, account: Account, o: dict) -> None:
        from engine.operations import OperationRefused
        from stacks.audit import cli_actor as audit_actor
        from stacks.operations import compute_plan, run_direct

        actor = audit_actor()
        params: dict[str, Any] = {
            "purge_history": bool(o["purge_history"]),
            "keep_history": bool(o["keep_history"]),
            "allow_replacement": bool(o["allow_replacement"]),
        }
        if o["app"]:
            import os

            params["app"] = os.path.abspath(o["app"])  # the operation records where its templates came from
        rows: list[dict[str, Any]] = []
        for stack in dict.fromkeys(o["stacks"]):
            row: dict[str, Any] = {"stackName": stack, "region": o["stack_region"], "operation": None}
            try:
                region = self._region(account, stack, o["stack_region"])
                row["region"] = region
                plan = compute_plan(account, "scrub", stack, region, params, actor)
                if not o["json"]:
                    self.stdout.write(f"Plan for {stack} ({region}) ({plan.digest}): {plan.summary}")
                    for change in plan.changes:
                        self.stdout.write(f"  {change}")
                    for warning in plan.warnings:
                        self.stdout.write(f"  warning: {warning}")
                op = run_direct("scrub", account, stack, region, params, actor=actor, plan=plan)
            except (CommandError, OperationRefused, EngineError) as exc:
                row.update(status="refused", summary=str(exc), warnings=[])
                rows.append(row)
                if not o["json"]:
                    self.stderr.write(f"{stack}: refused: {exc}")
                continue
            row.update(
                operation=op.pk,
                status=op.status,
                summary=op.result.get("summary") or op.error,
                warnings=op.result.get("warnings") or [],
            )
            rows.append(row)
            if not o["json"]:
                for warning in row["warnings"]:
                    self.stderr.write(f"warning: {warning}")
                self.stdout.write(f"{stack} ({row['region']}): {op.status} (operation #{op.pk}): {row['summary']}")
        if o["json"]:
            self.emit({"operations": rows})
        bad = [r for r in rows if r["status"] != "succeeded"]
        if bad:
            named = ", ".join(f"{r['stackName']} ({r['status']})" for r in bad)
            raise CommandError(
                f"scrub did not fully succeed for {len(bad)} of {len(rows)} stack(s): {named}", returncode=2
            )

    do_state_migrate, do_posture = bucketcli.run_state_migrate, bucketcli.run_posture

    def do_diff(self, o: dict) -> None:
        run_diff(self, o)

    def do_deploy(self, o: dict) -> None:
        run_deploy(self, o)

    def do_rollback(self, o: dict) -> None:
        run_rollback(self, o)

    def do_attention(self, o: dict) -> None:
        run_attention(self, o)

    do_drift, do_state_refresh_observed = run_drift, run_refresh_observed

    # --- worker --------------------------------------------------------------------------

    def do_worker(self, o: dict) -> None:
        from django.conf import settings

        from stacks.drift import schedule_next_drift
        from stacks.jobs import schedule_next_sync

        if settings.REDIS_URL.startswith("fakeredis://"):
            raise CommandError(
                "REDIS_URL is fakeredis://, which lives inside one process: a worker needs a Redis server"
            )
        if schedule_next_sync(0):
            self.stdout.write(f"Scheduled a sync of every account now and every {settings.CDKD_SYNC_INTERVAL} s.")
        if schedule_next_drift(settings.CDKD_DRIFT_INTERVAL):
            self.stdout.write(f"Scheduled drift checks of every account every {settings.CDKD_DRIFT_INTERVAL} s.")
        call_command("rqworker", "default", "sync", "notify", with_scheduler=True, burst=o["burst"])
        sys.stdout.flush()

    # --- encryption at rest -------------------------------------------------------------

    def do_encryption_rotate(self, o: dict) -> None:
        """New key first in CDKD_ENCRYPTION_KEYS, the old ones after it; run this; then the
        old keys can go. Safe to run again and while syncs run (see stacks.crypto)."""
        from stacks import crypto

        if o["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        results = crypto.rotate(batch_size=o["batch_size"])
        if o["json"]:
            self.emit({"columns": [r.as_json() for r in results]})
        else:
            for r in results:
                line = f"{r.table}.{r.column}: {r.rows} rows, {r.rewritten} re-encrypted, {r.unchanged} already current"
                if r.changed_meanwhile:
                    line += f", {r.changed_meanwhile} re-written by a sync meanwhile (left as written)"
                self.stdout.write(line)
        unreadable = [(r.table, pk) for r in results for pk in r.unreadable]
        if unreadable:
            where = ", ".join(f"{table} id {pk}" for table, pk in unreadable[:10])
            raise CommandError(
                f"{len(unreadable)} rows cannot be decrypted with any key of CDKD_ENCRYPTION_KEYS ({where}): "
                "put back the key they were encrypted with (anywhere in the list) and run this again"
            )
