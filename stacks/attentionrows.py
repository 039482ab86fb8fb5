"""The attention board's row objects: the kinds of problem, a row (a stack or a bucket,
the problem, since when, the evidence, the next step), and the context every row is built
with (the accounts, the person's role on each, the approval policies: read once).

`stacks.attention` holds the queries that make the rows.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.urls import reverse

from stacks import actions
from stacks.access import accounts_for
from stacks.models import Account, ApprovalPolicy, Lock, Membership, OperationKind, Role, Stack, min_approvers, now_ms

# Row kinds, in the order the board lists them (the most urgent first).
STALE_LOCK = "stale-lock"
DEAD_LOCK = "dead-lock"
JOURNAL = "journal"
FAILED_RUN = "failed-run"
DRIFT = "drift"
RECORD = "record"
SECRETS = "secrets"
POSTURE = "posture"
KINDS = [
    (STALE_LOCK, "Lock held too long"),
    (DEAD_LOCK, "Expired or unreadable lock"),
    (JOURNAL, "Leftover rollback journal"),
    (FAILED_RUN, "Last run failed"),
    (DRIFT, "Drift"),
    (RECORD, "Record needs migrating or repair"),
    (SECRETS, "Open secret findings"),
    (POSTURE, "Bucket posture"),
]
KIND_LABELS = dict(KINDS)


def lock_age_ms() -> int:
    return int(getattr(settings, "CDKD_ATTENTION_LOCK_AGE", 3600)) * 1000


def min_schema() -> int:
    return int(getattr(settings, "CDKD_ATTENTION_MIN_SCHEMA", 7))


def has_journal_fields() -> bool:
    """The sync mirrors rollback journals (Stack.journal_modified) only from migration 0015
    of the journal work on; before that the board has no journal rows."""
    return any(f.name == "journal_modified" for f in Stack._meta.get_fields())


@dataclass
class Step:
    """The next step: an operation to request (a link to its confirmation page, or a POST
    for run again), a page to go to, or a command to run; `allowed` False says why not."""

    label: str
    kind: str = ""  # the operation kind, when the step is one
    url: str = ""
    method: str = "get"
    command: str = ""
    allowed: bool = True
    reason: str = ""
    approval: str = ""  # "needs 1 approval", "no approval needed"
    advice: str = ""  # one line more, when the step is not the only way


@dataclass
class Row:
    kind: str
    account: Account
    problem: str
    since: datetime | None
    step: Step
    stack_name: str = ""  # "" for a bucket row
    region: str | None = None
    legacy: bool = False
    evidence: list[str] = field(default_factory=list)
    stack: Stack | None = None
    lock: Lock | None = None
    operation_id: int | None = None

    @property
    def kind_label(self) -> str:
        return KIND_LABELS[self.kind]

    @property
    def target(self) -> str:
        return "stack" if self.stack_name else "bucket"

    @property
    def stack_url(self) -> str:
        if self.stack is None:
            return ""
        return reverse("stack", args=[self.account.account_id, self.stack.region_slug, self.stack.stack_name])

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "problem": self.problem,
            "account": self.account.account_id,
            "accountName": self.account.name,
            "target": self.target,
            "stack": self.stack_name,
            "region": self.region,
            "legacy": self.legacy,
            "since": self.since.isoformat() if self.since else None,
            "evidence": self.evidence,
            "nextStep": {
                "label": self.step.label,
                "operation": self.step.kind,
                "url": self.step.url,
                "method": self.step.method,
                "command": self.step.command,
                "allowed": self.step.allowed,
                "reason": self.step.reason,
                "approval": self.step.approval,
                "advice": self.step.advice,
            },
        }


class Context:
    """What every row builder shares: the accounts, the person's role on each, the
    approval policies (two queries, made once)."""

    def __init__(self, accounts: list[Account], roles: dict[int, str], *, cli: bool = False):
        self.accounts = {a.pk: a for a in accounts}
        self.roles = roles
        self.cli = cli
        self.now_ms = now_ms()
        rows = ApprovalPolicy.objects.filter(account__in=list(self.accounts)).values_list(
            "account_id", "kind", "approval_required", "approvers_needed"
        )
        self.policies = {(a, k): (req, need) for a, k, req, need in rows}

    @classmethod
    def for_user(cls, user, account_id: str | None = None) -> Context:
        accounts = accounts_for(user)
        if account_id:
            accounts = accounts.filter(account_id=account_id)
        accounts = list(accounts.order_by("name", "account_id"))
        if user.is_superuser:
            roles = {a.pk: Role.ADMIN for a in accounts}
        else:
            found = Membership.objects.filter(user=user, account__in=[a.pk for a in accounts])
            roles = dict(found.values_list("account_id", "role"))
        return cls(accounts, roles)

    @classmethod
    def for_cli(cls, accounts: list[Account]) -> Context:
        # The person at the server's shell is trusted as an admin (as every cdkd command).
        return cls(accounts, {a.pk: Role.ADMIN for a in accounts}, cli=True)

    @property
    def ids(self) -> list[int]:
        return list(self.accounts)

    def approval(self, account: Account, kind: str) -> str:
        """`stacks.operations.policy_for`'s answer, from the rows read once."""
        required, needed = self.policies.get((account.pk, kind), (True, 1))
        needed = max(needed, 1)
        floor = min_approvers(kind)
        if floor:
            needed, required = (max(needed, floor) if required else floor), True
        return f"needs {needed} approval{'s' if needed > 1 else ''}" if required else "no approval needed"

    def may(self, account: Account, minimum: str = Role.OPERATOR) -> str:
        """ "" when the person holds `minimum` on the account, else the one-line reason."""
        role = self.roles.get(account.pk)
        if role is not None and Role.rank(role) >= Role.rank(minimum):
            return ""
        return f"You need the {minimum} role on {account} to request this."

    def operation_step(self, stack: Stack, kind: str, label: str = "", **why: Any) -> Step:
        """A step through the operation request page: allowed only where the stack page's
        button would be (`actions.why_not`) and the person may request it."""
        reason = self.may(stack.account) or actions.why_not(stack, kind, **why) or ""
        url = reverse("operation_new", args=[stack.account.account_id, stack.region_slug, stack.stack_name, kind])
        return Step(
            label or OperationKind(kind).label,
            kind=kind,
            url=url,
            command=cli_command(kind, stack.account.account_id, stack.stack_name, stack.region),
            allowed=not reason,
            reason=reason,
            approval=self.approval(stack.account, kind),
        )


def cli_command(kind: str, account_id: str, stack_name: str, region: str | None) -> str:
    region_arg = f" --stack-region {region}" if region else ""
    base = f"python manage.py cdkd {{}} {quote(stack_name)} --account {account_id}{region_arg}"
    return {
        OperationKind.FORCE_UNLOCK: base.format("force-unlock") + " --yes",
        OperationKind.ROLLBACK: base.format("rollback") + " --yes",
        OperationKind.SCRUB: base.format("scrub") + " --dry-run",
        OperationKind.DESTROY: base.format("state destroy") + " --yes",
    }.get(kind, "")


def quote(text: str) -> str:
    return shlex.quote(text)


def datetime_ms(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


# --- the board and its exports ---------------------------------------------------------------------------------


@dataclass
class Board:
    rows: list[Row]  # filtered, in board order
    by_account: list[tuple[Account, int]]  # every row, per account (before the filters)
    by_kind: list[tuple[str, str, int]]  # (kind, label, count) before the filters
    total: int


def board_json(board: Board) -> dict[str, Any]:
    return {
        "counts": {
            "total": board.total,
            "byAccount": {a.account_id: n for a, n in board.by_account},
            "byKind": {k: n for k, _label, n in board.by_kind},
        },
        "rows": [r.as_json() for r in board.rows],
    }


EXPORT_FIELDS = [
    "kind",
    "problem",
    "account",
    "accountName",
    "target",
    "stack",
    "region",
    "since",
    "evidence",
    "nextStep",
    "operation",
    "approval",
    "command",
    "advice",
    "url",
    "allowed",
    "reason",
]


def export_row(row: Row) -> dict[str, Any]:
    data = row.as_json()
    step = data.pop("nextStep")
    data.update(
        evidence=" | ".join(row.evidence),
        nextStep=step["label"],
        operation=step["operation"],
        approval=step["approval"],
        command=step["command"],
        advice=step["advice"],
        url=step["url"],
        allowed=step["allowed"],
        reason=step["reason"],
    )
    return data
