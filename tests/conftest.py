"""Shared fixtures: the moto server and proxy (tests.support.fixtures), and the people
the tests act as."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, *, superuser: bool = False, **roles: str):
        """A person with `roles` given as account_id=role (e.g. `make_user("bob", a111="viewer")`)."""
        from stacks.models import Account, Membership

        user = django_user_model.objects.create_user(username, password="password", is_superuser=superuser)
        for account_ref, role in roles.items():
            account = Account.objects.get(account_id=account_ref.lstrip("a"))
            Membership.objects.create(user=user, account=account, role=role)
        return user

    return make


@pytest.fixture(autouse=True)
def _queues_off_the_default_redis(settings):
    """scripts/test.sh points REDIS_URL at a test database; a bare `pytest` gets an in-memory
    Redis so a test run never flushes the Redis a demo or a developer is using."""
    import os

    if "REDIS_URL" not in os.environ:
        settings.REDIS_URL = "fakeredis://"


# Fuzz tests run the same examples on every run (CI must not go red on a new random draw);
# HYPOTHESIS_PROFILE=explore draws new ones to look for more.
from hypothesis import settings as hypothesis_settings  # noqa: E402

hypothesis_settings.register_profile("repeatable", derandomize=True, database=None)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "repeatable"))
