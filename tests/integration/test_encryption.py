"""Bodies at rest (records, locks, deployment events): synced over moto, read back through
raw SQL and the ORM, rotated from one key to another, migrated forward and back."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from stacks import crypto
from stacks.models import Account, DeploymentEvent, Lock, Stack
from stacks.sync import sync_account

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
STATE = "cdkd/Payments/us-east-1/state.json"
LOCK = "cdkd/Payments/us-east-1/lock.json"
SECRET = "Paym3nts-at-rest-9f8e7d6c5b4a"
OWNER = "ci@runner-owner-marker-42"
RUN = "20261129T122811123Z-f37f3ced"
STREAM = f"cdkd/Payments/us-east-1/deployments/{RUN}.jsonl"
REASON_SECRET = "r3ason-s3cret-aa11bb22"
ERROR_SECRET = "err0r-s3cret-cc33dd44"
KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()


def record(password: str = SECRET) -> bytes:
    body = {
        "version": 11,
        "stackName": "Payments",
        "region": "us-east-1",
        "resources": {
            "Db": {
                "physicalId": "payments-db",
                "resourceType": "AWS::RDS::DBInstance",
                "properties": {"MasterUserPassword": password, "DbUrl": f"postgres://payments:{password}@db:5432/p"},
                "attributes": {},
            }
        },
        "outputs": {"ApiKey": f"pk_live_{password}"},
        "lastModified": 1795955307315,
    }
    return json.dumps(body, indent=2).encode()


def lock_body() -> bytes:
    return json.dumps({"owner": OWNER, "timestamp": 1, "expiresAt": 4102444800000, "operation": "deploy"}).encode()


def stream() -> bytes:
    lines = [
        {"timestamp": "2026-11-29T12:28:11.123Z", "eventType": "RUN_STARTED", "stackName": "Payments",
         "command": "deploy", "region": "us-east-1", "cdkdVersion": "0.290.36"},
        {"timestamp": "2026-11-29T12:28:11.500Z", "eventType": "RESOURCE_SKIPPED", "stackName": "Payments",
         "logicalId": "Db", "resourceType": "AWS::RDS::DBInstance", "reason": f"password {REASON_SECRET} refused"},
        {"timestamp": "2026-11-29T12:28:12.000Z", "eventType": "RUN_FINISHED", "stackName": "Payments",
         "result": "FAILED", "error": {"name": "Error", "message": f"bad DbUrl postgres://u:{ERROR_SECRET}@db"}},
    ]  # fmt: skip
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def raw(table: str, column: str = "body") -> dict[int, bytes]:
    """The stored column as PostgreSQL (or SQLite) holds it, past every field."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {column} FROM {table} ORDER BY id")
        return {pk: bytes(value) for pk, value in cursor.fetchall() if value is not None}


def stored_bytes() -> dict[tuple[str, int], bytes]:
    """Every encrypted column of every row, by (table.column, id)."""
    out = {}
    for table, _pk, column in crypto.encrypted_columns():
        out.update({(f"{table}.{column}", pk): v for pk, v in raw(table, column).items()})
    return out


@pytest.fixture
def keys(settings):
    settings.CDKD_ENCRYPTION_KEYS = [KEY_A]
    return settings


@pytest.fixture
def synced(aws, keys):
    aws.make_bucket(A1, BUCKET)
    aws.put(A1, BUCKET, STATE, record())
    aws.put(A1, BUCKET, LOCK, lock_body())
    aws.put(A1, BUCKET, STREAM, stream())
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    sync_account(account)
    return account


def test_the_columns_hold_only_ciphertext_and_the_orm_the_verbatim_bytes(aws, synced):
    stacks, locks = raw("stacks_stack"), raw("stacks_lock")
    assert len(stacks) == 1 and len(locks) == 1
    for token in [*stacks.values(), *locks.values()]:
        assert token.startswith(b"gAAAAA")  # a Fernet token (version byte 0x80, base64)
        for plain in (SECRET.encode(), b"Paym3nts", OWNER.encode(), b"MasterUserPassword", b'"version"'):
            assert plain not in token
    assert Fernet(KEY_A).decrypt(next(iter(stacks.values()))) == record()

    events = {f"{c}": raw("stacks_deploymentevent", c) for c in ("reason", "error", "raw")}
    assert [len(v) for v in events.values()] == [3, 1, 3]  # error is NULL where a line has none
    for column in events.values():
        for token in column.values():
            assert token.startswith(b"gAAAAA")
            for plain in (REASON_SECRET.encode(), ERROR_SECRET.encode(), b"eventType", b"refused"):
                assert plain not in token

    stack = Stack.objects.get()
    assert stack.body == record() == aws.get(A1, BUCKET, STATE)
    skipped, finished = DeploymentEvent.objects.filter(event_type__in=["RESOURCE_SKIPPED", "RUN_FINISHED"])
    assert skipped.reason == f"password {REASON_SECRET} refused" and skipped.error is None
    assert skipped.raw == json.loads(stream().splitlines()[1])
    assert finished.error == {"name": "Error", "message": f"bad DbUrl postgres://u:{ERROR_SECRET}@db"}
    assert finished.reason == "" and finished.error_message.endswith("@db")
    assert Lock.objects.get().body == lock_body()
    assert Stack.objects.values_list("body", flat=True).get() == record()
    assert stack.size == len(record()) and stack.resource_count == 1


def test_a_changed_record_is_re_encrypted_on_the_next_sync(aws, synced):
    before = raw("stacks_stack")
    aws.put(A1, BUCKET, STATE, record("N3w-pa55word-0123"))
    sync_account(synced)
    after = raw("stacks_stack")
    assert after.keys() == before.keys() and after != before
    token = next(iter(after.values()))
    assert b"N3w-pa55word" not in token and SECRET.encode() not in token
    assert Stack.objects.get().body == record("N3w-pa55word-0123")


def test_the_pages_read_the_plaintext_through_the_field(aws, synced, django_user_model):
    root = django_user_model.objects.create_user("root", password="pw", is_superuser=True)
    client = Client()
    client.force_login(root)
    # The download is masked for display; the audited reveal serves the verbatim bytes.
    download = client.get(reverse("stack_download", args=[A1, "us-east-1", "Payments"]))
    assert download.status_code == 200
    assert download.content != record()
    revealed = client.post(reverse("stack_reveal", args=[A1, "us-east-1", "Payments"]))
    assert revealed.status_code == 200
    assert revealed.content == record()
    assert client.get(reverse("stack", args=[A1, "us-east-1", "Payments"])).status_code == 200


def test_a_wrong_key_is_a_clear_error_not_garbage(aws, synced, settings):
    settings.CDKD_ENCRYPTION_KEYS = [KEY_B]
    with pytest.raises(crypto.EncryptionKeyError, match="CDKD_ENCRYPTION_KEYS"):
        Stack.objects.get()
    with pytest.raises(crypto.EncryptionKeyError, match="CDKD_ENCRYPTION_KEYS"):
        Lock.objects.get()
    with pytest.raises(crypto.EncryptionKeyError, match="CDKD_ENCRYPTION_KEYS"):
        list(DeploymentEvent.objects.values_list("raw", flat=True))
    # The columns that are not encrypted stay readable without the key.
    assert Stack.objects.defer("body").get().stack_name == "Payments"


def test_rotation_moves_every_row_to_the_new_key(aws, synced, settings):
    aws.put(A1, BUCKET, "cdkd/Other/us-east-1/state.json", record("0ther-secret-77"))
    sync_account(synced)
    before = stored_bytes()
    assert len(before) == 2 + 1 + 3 + 1 + 3  # bodies, the lock, reasons, the one error, raws

    settings.CDKD_ENCRYPTION_KEYS = [KEY_B, KEY_A]
    call_command("cdkd", "encryption", "rotate", "--batch-size", "1", stdout=(out := _Out()))
    assert "stacks_stack.body: 2 rows, 2 re-encrypted, 0 already current" in out.text
    assert "stacks_lock.body: 1 rows, 1 re-encrypted, 0 already current" in out.text
    assert "stacks_deploymentevent.error: 3 rows, 1 re-encrypted, 2 already current" in out.text  # NULLs
    assert "stacks_deploymentevent.raw: 3 rows, 3 re-encrypted, 0 already current" in out.text
    after = stored_bytes()
    assert after.keys() == before.keys()
    assert all(after[k] != before[k] for k in before)
    for k, token in after.items():
        assert Fernet(KEY_B).decrypt(token) == Fernet(KEY_A).decrypt(before[k])
        with pytest.raises(InvalidToken):
            Fernet(KEY_A).decrypt(token)

    settings.CDKD_ENCRYPTION_KEYS = [KEY_B]
    bodies = {s.stack_name: s.body for s in Stack.objects.all()}
    assert bodies == {"Payments": record(), "Other": record("0ther-secret-77")}
    assert Lock.objects.get().body == lock_body()
    assert [e.raw for e in DeploymentEvent.objects.order_by("seq")] == [json.loads(x) for x in stream().splitlines()]

    # Run again: nothing left to do, nothing re-written.
    call_command("cdkd", "encryption", "rotate", "--json", stdout=(again := _Out()))
    columns = json.loads(again.text)["columns"]
    assert sum(c["rewritten"] for c in columns) == 0
    assert sum(c["unchanged"] for c in columns) == sum(c["rows"] for c in columns) == 2 + 1 + 3 * 3
    assert stored_bytes() == after


def test_rotation_without_the_old_key_reports_the_rows_and_fails(aws, synced, settings):
    before = raw("stacks_stack")
    settings.CDKD_ENCRYPTION_KEYS = [KEY_B]
    with pytest.raises(CommandError, match=r"9 rows cannot be decrypted .*stacks_stack id \d+.*stacks_lock id \d+"):
        call_command("cdkd", "encryption", "rotate", stdout=_Out())
    assert raw("stacks_stack") == before  # left alone, still readable with the right key


def test_a_row_written_during_the_rotation_keeps_the_writers_bytes(aws, synced, settings):
    """The rotation writes a row only if it still holds what it read: a sync that wrote in
    between wins."""
    pk = Stack.objects.get().pk
    newer = crypto.encrypt(record("written-by-sync-1"))

    def transform(token: bytes) -> bytes:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE stacks_stack SET body = %s WHERE id = %s", [newer, pk])
        return crypto.keyring().rotate(token)

    counts = crypto.rewrite_column(connection, "stacks_stack", "id", "body", transform)
    assert (counts.rows, counts.rewritten, counts.changed_meanwhile) == (1, 0, 1)
    assert raw("stacks_stack")[pk] == newer


def test_the_migration_encrypts_existing_rows_and_reverses(keys):
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes("stacks")
    before, target = [("stacks", "0009_stack_imports")], [("stacks", "0010_encrypt_bodies")]
    try:
        executor.migrate(before)
        old = MigrationExecutor(connection).loader.project_state(before).apps
        account = old.get_model("stacks", "Account").objects.create(account_id=A1)
        fields = {"account": account, "etag": '"e"', "synced_at": "2026-01-01T00:00:00Z"}
        old.get_model("stacks", "Stack").objects.create(
            key=STATE, stack_name="Payments", root_name="Payments", body=record(), **fields
        )
        old.get_model("stacks", "Lock").objects.create(key=LOCK, stack_name="Payments", body=lock_body(), **fields)
        run = old.get_model("stacks", "DeploymentRun").objects.create(
            account=account, stack_name="Payments", region="us-east-1", run_id=RUN
        )
        lines = [json.loads(x) for x in stream().splitlines()]
        Event = old.get_model("stacks", "DeploymentEvent")
        for seq, line in enumerate(lines):
            Event.objects.create(
                run=run,
                seq=seq,
                event_type=line["eventType"],
                reason=line.get("reason", ""),
                error=line.get("error"),
                raw=line,
            )
        assert list(raw("stacks_stack").values()) == [record()]

        MigrationExecutor(connection).migrate(target)
        token = next(iter(raw("stacks_stack").values()))
        assert SECRET.encode() not in token and Fernet(KEY_A).decrypt(token) == record()
        assert OWNER.encode() not in next(iter(raw("stacks_lock").values()))
        # The models as of the migration (today's Stack has columns added later).
        new = MigrationExecutor(connection).loader.project_state(target).apps
        assert new.get_model("stacks", "Stack").objects.get().body == record()
        assert new.get_model("stacks", "Lock").objects.get().body == lock_body()
        for column in ("reason", "error", "raw"):
            for token in raw("stacks_deploymentevent", column).values():
                assert REASON_SECRET.encode() not in token and ERROR_SECRET.encode() not in token
                Fernet(KEY_A).decrypt(token)  # a token of the key (an empty reason is b"")
        events = list(new.get_model("stacks", "DeploymentEvent").objects.order_by("seq"))
        assert [e.raw for e in events] == lines
        assert [e.reason for e in events] == ["", f"password {REASON_SECRET} refused", ""]
        assert [e.error for e in events] == [None, None, lines[2]["error"]]

        MigrationExecutor(connection).migrate(before)
        assert list(raw("stacks_stack").values()) == [record()]
        assert list(raw("stacks_lock").values()) == [lock_body()]
        events = list(MigrationExecutor(connection).loader.project_state(before).apps.get_model(
            "stacks", "DeploymentEvent").objects.order_by("seq"))  # fmt: skip
        assert [e.raw for e in events] == lines
        assert [e.reason for e in events] == ["", f"password {REASON_SECRET} refused", ""]
        assert [e.error for e in events] == [None, None, lines[2]["error"]]
    finally:
        MigrationExecutor(connection).migrate(leaves)


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass
