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
