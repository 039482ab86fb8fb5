"""Shared fixtures: the moto server and proxy (tests.support.fixtures), the people the
tests act as, the RQ queues (emptied around each test) and the assembly storage."""

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


def _emptied(name: str):
    from cdkd_site.queues import get_queue

    queue = get_queue(name)
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


@pytest.fixture
def queue():
    """The operations queue ("default"), emptied before and after the test."""
    yield from _emptied("default")


@pytest.fixture
def sync_queue():
    """The sync queue (syncs, scans, drift checks), emptied before and after the test."""
    yield from _emptied("sync")


@pytest.fixture
def assembly_storage(settings, tmp_path):
    """Uploaded assemblies kept in the test's own folder, never in var/."""
    location = tmp_path / "assemblies"
    settings.STORAGES = {
        **settings.STORAGES,
        "assemblies": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(location)},
        },
    }
    return location


# Fuzz tests run the same examples on every run (CI must not go red on a new random draw);
# HYPOTHESIS_PROFILE=explore draws new ones to look for more.
from hypothesis import settings as hypothesis_settings  # noqa: E402

hypothesis_settings.register_profile("repeatable", derandomize=True, database=None)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "repeatable"))
