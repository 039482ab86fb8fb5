"""Personas and row helpers for the view tests.

alice is a viewer on two accounts (prod and dev), bob a viewer on dev only, charlie has no
role anywhere, and root is a superuser. Rows are created directly, with `body` holding JSON
bytes that agree with the row's fields (what the sync would have written).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from stacks.models import Account, Lock, Membership, Resource, Role, Stack, now_ms

T0 = 1_710_835_200_000  # 2024-03-19T08:00:00Z


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_user(username: str, **extra) -> User:
    return User.objects.create_user(username, f"{username}@example.com", "pw", **extra)


def make_account(account_id: str, name: str = "", **fields) -> Account:
    fields.setdefault("resolved_bucket", f"cdkd-state-{account_id}")
    fields.setdefault("bucket_source", "default")
    fields.setdefault("bucket_region", "us-east-1")
    fields.setdefault("bucket_status", "ok")
    return Account.objects.create(account_id=account_id, name=name, **fields)


def resource_row(rtype: str = "AWS::S3::Bucket", physical_id: str = "phys", **extra) -> dict:
    row = {"physicalId": physical_id, "resourceType": rtype, "properties": {}, "attributes": {}}
    row.update(extra)
    return row


def record(stack_name: str, region: str | None = "us-east-1", *, resources=None, outputs=None, **extra) -> dict:
    data = {"version": 11, "stackName": stack_name}
    if region:
        data["region"] = region
    data["resources"] = resources if resources is not None else {}
    data["outputs"] = outputs if outputs is not None else {}
    data.update(extra)
    data.setdefault("lastModified", T0)
    return data


def make_stack(
    account: Account,
    stack_name: str,
    region: str | None = "us-east-1",
    *,
    data=None,
    body: bytes | None = None,
    legacy: bool = False,
    parent: Stack | None = None,
    defects: list | None = None,
    **fields,
) -> Stack:
    """A mirrored record. `data` (a dict) is the record; `body` overrides the stored bytes."""
    if data is None:
        data = record(stack_name, region)
    if body is None:
        body = json.dumps(data, indent=2).encode()
    resources = data.get("resources") if isinstance(data, dict) else None
    resources = resources if isinstance(resources, dict) else {}
    prefix = account.prefix
    key = f"{prefix}/{stack_name}/state.json" if legacy else f"{prefix}/{stack_name}/{region}/state.json"
    stack = Stack.objects.create(
        account=account,
        key=key,
        stack_name=stack_name,
        region=region,
        legacy=legacy,
        etag=fields.pop("etag", '"etag-1"'),
        size=len(body),
        body=body,
        schema_version=data.get("version") if isinstance(data, dict) else None,
        record_last_modified=data.get("lastModified") if isinstance(data, dict) else None,
        defects=defects or [],
        has_defects=bool(defects),
        parent=parent,
        parent_stack_name=parent.stack_name if parent else "",
        root_name=parent.root_name if parent else stack_name,
        depth=parent.depth + 1 if parent else 0,
        resource_count=len(resources),
        output_count=len(data.get("outputs") or {}) if isinstance(data, dict) else 0,
        synced_at=timezone.now(),
        s3_last_modified=datetime(2024, 3, 19, 8, 0, tzinfo=UTC),
        **fields,
    )
    Resource.objects.bulk_create(
        Resource(
            stack=stack,
            logical_id=lid,
            resource_type=row.get("resourceType", "") if isinstance(row, dict) else "",
            physical_id=row.get("physicalId", "") if isinstance(row, dict) else "",
            provisioned_by=row.get("provisionedBy", "") if isinstance(row, dict) else "",
            deletion_policy=row.get("deletionPolicy", "") if isinstance(row, dict) else "",
            malformed=not isinstance(row, dict),
        )
        for lid, row in resources.items()
    )
    return stack


def make_lock(stack: Stack, *, expires_in_ms: int | None = 600_000, readable: bool = True, **fields) -> Lock:
    now = now_ms()
    return Lock.objects.create(
        account=stack.account,
        key=stack.key.replace("state.json", "lock.json"),
        stack_name=stack.stack_name,
        region=stack.region,
        stack=stack,
        etag='"lock-etag"',
        body=b"{}",
        readable=readable,
        owner=fields.pop("owner", "carol@build-host:4242"),
        operation=fields.pop("operation", "deploy"),
        timestamp_ms=now - 60_000,
        expires_at_ms=None if expires_in_ms is None else now + expires_in_ms,
        synced_at=timezone.now(),
        **fields,
    )


@pytest.fixture
def prod(db) -> Account:
    return make_account("111111111111", "prod")


@pytest.fixture
def dev(db) -> Account:
    return make_account("222222222222", "dev")


@pytest.fixture
def alice(prod, dev) -> User:
    user = make_user("alice")
    Membership.objects.create(user=user, account=prod, role=Role.VIEWER)
    Membership.objects.create(user=user, account=dev, role=Role.VIEWER)
    return user


@pytest.fixture
def bob(dev) -> User:
    user = make_user("bob")
    Membership.objects.create(user=user, account=dev, role=Role.VIEWER)
    return user


@pytest.fixture
def charlie(db) -> User:
    return make_user("charlie")


@pytest.fixture
def root(db) -> User:
    return make_user("root", is_superuser=True, is_staff=True)


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client
