"""The demo's notifications: a signed JSON webhook on every account and a Slack-format one on
the first, all pointing at the receiver scripts/demo.sh starts (demo/receiver.py), and email
addresses for the demo's people (the demo's mail backend prints emails to the worker log).

Run inside Django once the accounts and people exist (scripts/demo.py does):
    manage.py shell -c "from demo.notifications import seed; seed()"
It reads CDKD_DEMO_RECEIVER_URL and CDKD_DEMO_WEBHOOK_SECRET; without a receiver URL it
does nothing. Safe to run again: the demo's webhooks are updated, not duplicated.
"""

from __future__ import annotations

import os

from django.contrib.auth import get_user_model

from stacks import webhooks
from stacks.models import Account, EventKind, Webhook

ALL_EVENTS = [k.value for k in EventKind]


def seed() -> list[str]:
    url = os.environ.get("CDKD_DEMO_RECEIVER_URL", "").rstrip("/")
    secret = os.environ.get("CDKD_DEMO_WEBHOOK_SECRET", "")
    if not url or len(secret) < 16:
        print("  webhooks   no demo receiver (run scripts/demo.sh to start one)")
        return []
    people = get_user_model().objects
    admin = people.get(username="admin")
    for user in people.filter(username__in=["admin", "olivia", "arthur"]):
        if not user.email:
            user.email = f"{user.username}@demo.example"
            user.save(update_fields=["email"])
    made = []
    accounts = list(Account.objects.order_by("name", "account_id"))
    for number, account in enumerate(accounts):
        hooks = [("demo receiver (JSON)", f"{url}/json/{account.account_id}", "json")]
        if number == 0:
            hooks.append(("demo receiver (Slack text)", f"{url}/slack/{account.account_id}", "slack"))
        for name, hook_url, fmt in hooks:
            data = {"name": name, "url": hook_url, "secret": secret, "events": ALL_EVENTS, "format": fmt}
            data["active"] = True
            existing = Webhook.objects.filter(account=account, name=name).first()
            webhooks.save_webhook(admin, account, data, webhook=existing)
            made.append(f"{account.label}: {name}")
    print(f"  webhooks   {len(made)} demo webhooks -> {url}/ (every event, signed with the demo's secret)")
    return made
