"""`manage.py cdkd attention [--account ID] [--json]`: the attention board's rows, from the
mirror (run `cdkd sync` first for fresh ones). Exit 0 whatever the board holds; 1 with one
line for an unknown account. The shell's person is an admin, as for every cdkd command."""

from __future__ import annotations

import json
from typing import Any

from stacks import attention
from stacks.attentionrows import Context, board_json
from stacks.models import Account


def add_attention_parser(sub: Any) -> None:
    parser = sub.add_parser("attention", help="what needs attention: stuck or unsafe stacks and buckets")
    parser.add_argument("--account", help="account id or label (default: every account)")
    parser.add_argument("--json", action="store_true")


def run_attention(command: Any, o: dict[str, Any]) -> None:
    accounts = [command.account(o["account"])] if o["account"] else list(Account.objects.order_by("name", "account_id"))
    board = attention.build(Context.for_cli(accounts))
    if o["json"]:
        command.stdout.write(json.dumps(board_json(board), indent=2, ensure_ascii=False))
        return
    counts = ", ".join(f"{label}: {n}" for _k, label, n in board.by_kind if n)
    command.stdout.write(f"{board.total} problem(s){': ' + counts if counts else ''}")
    for row in board.rows:
        where = f"{row.stack_name} ({row.region or 'legacy'})" if row.stack_name else "bucket"
        since = row.since.strftime("%Y-%m-%d %H:%M UTC") if row.since else "-"
        command.stdout.write(f"{row.account.account_id}  {where}  [{row.kind}] {row.problem}  since {since}")
        for line in row.evidence:
            command.stdout.write(f"    {line}")
        step = row.step.command or row.step.label
        command.stdout.write(f"    next: {step}" + (f" ({row.step.reason})" if row.step.reason else ""))
