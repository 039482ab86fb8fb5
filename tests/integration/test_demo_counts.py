"""What the demo prints when it has seeded is what the app shows once it has synced: per
account, the records its summary names are the records the sync lists and mirrors."""

from __future__ import annotations

import pytest

from demo import DEMO_ACCOUNTS, LEAK_ACCOUNT, build_demo_world, plant_leaked_secrets
from stacks.models import Account, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_it_syncs_the_counts_the_seed_summary_printed(aws):
    world = build_demo_world(aws.account_session, big_stack_resources=20, resources=False)
    world.count_planted(plant_leaked_secrets(aws.account_session(LEAK_ACCOUNT)))
    summaries = {a.account_id: a for a in world.accounts}

    for spec in DEMO_ACCOUNTS:
        account = Account.objects.create(
            account_id=spec.account_id,
            name=spec.name,
            role_arn=spec.role_arn,
            external_id=spec.external_id,
            prefix=spec.prefix,
            bucket=spec.bucket if spec.explicit_bucket else "",
        )
        result = sync_account(account)
        printed = summaries[spec.account_id]
        line = next(line for line in world.describe() if line.startswith(spec.account_id))
        assert f" {printed.state_records} records in " in line
        assert not result.errors, result.errors
        assert result.listed == printed.state_records, spec.name
        assert Stack.objects.filter(account=account).count() == printed.state_records, spec.name
        regions = set(
            Stack.objects.filter(account=account)
            .exclude(region="")
            .exclude(region__isnull=True)
            .values_list("region", flat=True)
        )
        assert regions == printed.regions, spec.name
