"""THE LEAK TEST: secrets in two accounts (Secrets Manager and SSM SecureString) planted in
records everywhere they hide (properties, observed properties, attributes, outputs whole and
embedded, an `orphans` record, an older version, the rollback journal, the exports index);
a full scan and a scrub with purge of every stack that held one, through the web pipeline
(Django test client requests, an approver's approval, an in-process RQ worker); every page
involved fetched; then every table of the database, the captured logs (DEBUG), every page
body, the audit log and every key and value in Redis are searched for each secret value.
None may hold one.

Logging: every logger is captured at DEBUG except those the project's LOGGING pins above
DEBUG (botocore and urllib3 print whole request and response bodies at DEBUG, secret values
included); the test asserts that the pin is there, so removing it fails here.

The mirror (`Stack.body`) holds each record as stored before the scrub until the re-sync
that ends the operation; the pages are fetched after it. The history pages must no longer
serve a purged version (404).
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.urls import reverse
from rq import SimpleWorker

from cdkd_site.queues import get_queue
from stacks.models import AuditEvent, Operation, OperationStatus, ScanRun, SecretFinding, Stack, SyncStatus
from stacks.sync import sync_account
from tests.secrets.world import (
    A1,
    A2,
    BUCKET1,
    BUCKET2,
    CLEAN,
    FAR,
    INDEX,
    JOURNAL,
    REGION,
    SECRET_VALUES,
    STATE,
    accounts,
    people,
    plant,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NEEDLES = [v.encode() for v in SECRET_VALUES]
# Forms a value can take in stored text: as is, JSON-escaped, base64 (sessions, pickles).
FORMS = [(v, v) for v in NEEDLES] + [(base64.b64encode(v), v) for v in NEEDLES]


def leaks_in(blob: bytes | str) -> list[str]:
    data = blob.encode("utf-8", "replace") if isinstance(blob, str) else bytes(blob)
    return sorted({needle.decode()[:4] + "..." for form, needle in FORMS if form in data})


def as_bytes(value: Any) -> bytes:
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, bytes):
        return value
    return json.dumps(value, default=str, ensure_ascii=False).encode()


def database_dump() -> dict[str, bytes]:
    """Every row of every model, every field (JSON and binary ones included), as bytes."""
    out: dict[str, bytes] = {}
    for model in apps.get_models():
        if not model._meta.managed:  # no table (django-rq's dashboard placeholder)
            continue
        label = model._meta.label
        rows = []
        for row in model._base_manager.all().values():
            rows.append(b"\n".join(k.encode() + b"=" + as_bytes(v) for k, v in row.items()))
        if model is Session:
            rows += [as_bytes(s.get_decoded()) for s in Session.objects.all()]
        out[label] = b"\n\n".join(rows)
    return out


def raw_database_dump() -> dict[str, bytes]:
    """Every column of every table as the database stores it (raw SQL, past every field's
    decryption): what a backup, a replica or a stolen disk holds."""
    out: dict[str, bytes] = {}
    tables = {m._meta.db_table for m in apps.get_models() if m._meta.managed}
    tables |= {f.m2m_db_table() for m in apps.get_models() for f in m._meta.local_many_to_many}
    with connection.cursor() as cursor:
        for table in sorted(tables & set(connection.introspection.table_names(cursor))):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            names = [c[0] for c in cursor.description]
            rows = []
            for row in cursor.fetchall():
                rows.append(b"\n".join(n.encode() + b"=" + _column_bytes(v) for n, v in zip(names, row, strict=True)))
            out[table] = b"\n\n".join(rows)
    return out


def _column_bytes(value: Any) -> bytes:
    if isinstance(value, memoryview | bytearray | bytes):
        return bytes(value)
    return str(value).encode("utf-8", "replace")


def _unpack(value: bytes) -> bytes:
    """RQ stores job data zlib-compressed: search the inflated bytes as well."""
    try:
        return value + b"\n" + zlib.decompress(value)
    except zlib.error:
        return value


def redis_dump(connection) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for key in connection.keys("*"):
        kind = connection.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        parts: list[bytes] = []
        if kind == "string":
            parts = [connection.get(key) or b""]
        elif kind == "hash":
            for field, value in connection.hgetall(key).items():
                parts += [field, value]
        elif kind == "list":
            parts = connection.lrange(key, 0, -1)
        elif kind == "set":
            parts = list(connection.smembers(key))
        elif kind == "zset":
            parts = [member for member, _ in connection.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for _id, fields in connection.xrange(key):
                for field, value in fields.items():
                    parts += [field, value]
        out[key] = key + b"\n" + b"\n".join(_unpack(p) for p in parts)
    return out


def work() -> None:
    default, sync = get_queue("default"), get_queue("sync")
    SimpleWorker([default, sync], connection=default.connection).work(burst=True)


@pytest.fixture
def redis():
    connection = get_queue("default").connection
    connection.flushdb()
    yield connection
    connection.flushdb()


@pytest.fixture
def every_logger_at_debug(caplog):
    """caplog at DEBUG on the root and on every logger the project does not pin."""
    pinned = {name for name, conf in settings.LOGGING.get("loggers", {}).items() if conf.get("level") != "DEBUG"}
    for name in pinned & {"botocore", "urllib3"}:
        level = logging.getLevelName(settings.LOGGING["loggers"][name]["level"])
        assert level >= logging.INFO, f"{name} must stay above DEBUG: it logs whole AWS bodies there"
    caplog.set_level(logging.DEBUG)
    changed = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and not any(name == p or name.startswith(p + ".") for p in pinned):
            changed.append((logger, logger.level))
            logger.setLevel(logging.DEBUG)
    yield caplog
    for logger, level in changed:
        logger.setLevel(level)


def test_no_secret_value_reaches_the_database_logs_pages_audit_or_redis(aws, redis, every_logger_at_debug):
    caplog = every_logger_at_debug
    planted = plant(aws)
    prod, dev = accounts()
    persons = people(prod, dev)
    for account in (prod, dev):
        sync_account(account)
    olivia, arthur = Client(), Client()
    olivia.force_login(persons["olivia"])
    arthur.force_login(persons["arthur"])
    pages: dict[str, bytes] = {}

    def fetch(client: Client, label: str, url: str, *, status: int = 200, **params: Any) -> Any:
        response = client.get(url, params)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        pages[f"{label} {url} {params}"] = body
        assert response.status_code == status, (label, url, response.status_code)
        return response

    # 1. A full scan of every account, from the secrets page.
    response = olivia.post(reverse("scan"), {})
    assert response.status_code == 302
    scan_run = ScanRun.objects.get()
    fetch(olivia, "scan queued", reverse("scan_status", args=[scan_run.pk]))
    work()
    scan_run.refresh_from_db()
    assert scan_run.status == SyncStatus.SUCCEEDED, scan_run.result
    assert SecretFinding.objects.filter(account=prod, stack_name="App").count() >= 8
    assert SecretFinding.objects.filter(account=dev, stack_name="Far").exists()
    fetch(olivia, "scan done", reverse("scan_status", args=[scan_run.pk]))
    fetch(olivia, "secrets", reverse("secrets"))
    fetch(olivia, "secrets json", reverse("secrets"), format="json")
    fetch(olivia, "secrets csv", reverse("secrets"), format="csv")

    # Controls: the search finds the values where they still are before the scrub (the
    # mirrored record, which is not part of what is judged); the download and the stack's
    # JSON page already mask what the scan flagged.
    assert leaks_in(database_dump()["stacks.Stack"])
    # ... while the stored columns hold only ciphertext (bodies are encrypted at rest).
    stored = raw_database_dump()
    assert stored["stacks_stack"].count(b"body=gAAAAA") == Stack.objects.count() == 3
    if hits := {table: leaks_in(blob) for table, blob in stored.items() if leaks_in(blob)}:
        raise AssertionError(f"secret values stored in plaintext before the scrub: {hits}")
    bodies = [aws.get(A1, BUCKET1, key) for key in (STATE, CLEAN)] + [aws.get(A2, BUCKET2, FAR)]
    assert all(body in as_bytes(database_dump()["stacks.Stack"]) for body in bodies)
    assert not [b for b in bodies if b in stored["stacks_stack"]]
    download = olivia.get(reverse("stack_download", args=[A1, REGION, "App"])).content
    assert b'"stackName": "App"' in download and not leaks_in(download)  # PW, TOKEN, API are in the record
    assert not leaks_in(olivia.get(reverse("stack_json", args=[A1, REGION, "App"])).content)
    assert leaks_in(json.dumps({"x": SECRET_VALUES[0]})) and leaks_in(_unpack(zlib.compress(NEEDLES[1])))

    # A sync as a job through RQ (the sync button), besides the direct one above.
    assert olivia.post(reverse("sync"), {}).status_code == 302
    work()

    # 2. Scrub with purge of every stack that held a secret, requested, approved, run.
    ops = []
    for account_id, stack in ((A1, "App"), (A2, "Far")):
        url = reverse("operation_new", args=[account_id, REGION, stack, "scrub"])
        preview = fetch(olivia, "scrub preview", url, purge_history="on")
        digest = preview.context["digest"]
        response = olivia.post(url, {"purge_history": "on", "confirm_purge": "on", "plan_digest": digest})
        assert response.status_code == 302
        op = Operation.objects.get(stack_name=stack)
        fetch(arthur, "operation awaiting", reverse("operation", args=[op.pk]))
        assert arthur.post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"}).status_code == 302
        ops.append(op)
    work()
    for op in ops:
        op.refresh_from_db()
        assert op.status == OperationStatus.SUCCEEDED, (op.stack_name, op.error, op.result)

    # The re-sync that ended each operation mirrored the scrubbed records.
    for account_id, stack in ((A1, "App"), (A2, "Far")):
        body = bytes(Stack.objects.get(account__account_id=account_id, stack_name=stack).body)
        assert not leaks_in(body), f"the mirror of {stack} still holds a secret after the scrub and re-sync"
    # The worker scanned both stacks again: nothing left, current or history.
    assert not SecretFinding.objects.filter(stack_name__in=["App", "Far"]).exists()

    # 3. Every page involved.
    fetch(olivia, "stacks", reverse("stacks"))
    fetch(olivia, "stacks tree", reverse("stacks_tree"))
    fetch(olivia, "accounts", reverse("accounts"))
    for account_id, stack in ((A1, "App"), (A2, "Far"), (A1, "Clean")):
        args = [account_id, REGION, stack]
        fetch(olivia, "stack", reverse("stack", args=args))
        fetch(olivia, "stack json", reverse("stack_json", args=args))
        fetch(olivia, "stack download", reverse("stack_download", args=args))
        history = fetch(olivia, "history", reverse("stack_history", args=args))
        version_ids = [v.version_id for v in history.context["versions"] if not v.delete_marker]
        for version_id in version_ids:
            fetch(olivia, "version", reverse("stack_version", args=[*args, version_id]))
            fetch(olivia, "diff", reverse("stack_diff", args=args), a=version_id, b="current")
    app_history = [
        v.version_id for v in fetch(olivia, "h", reverse("stack_history", args=[A1, REGION, "App"])).context["versions"]
    ]
    for key in (STATE, FAR):
        account_id, stack = (A1, "App") if key == STATE else (A2, "Far")
        old = planted["older"][key]
        if key == STATE:
            assert old not in app_history
        fetch(olivia, "purged version", reverse("stack_version", args=[account_id, REGION, stack, old]), status=404)
        fetch(
            olivia,
            "purged diff",
            reverse("stack_diff", args=[account_id, REGION, stack]),
            status=404,
            a=old,
            b="current",
        )
    for key in (JOURNAL, INDEX):
        with pytest.raises(Exception, match="NoSuchVersion|Not Found|404|does not exist"):
            aws.get(A1, f"cdkd-state-{A1}", key, version_id=planted["older"][key])
    fetch(olivia, "secrets after", reverse("secrets"))
    fetch(olivia, "secrets history", reverse("secrets"), version="history")
    for op in ops:
        fetch(olivia, "operation", reverse("operation", args=[op.pk]))
    fetch(olivia, "operations", reverse("operations"), tab="all")
    fetch(olivia, "audit", reverse("audit"))
    fetch(olivia, "audit csv", reverse("audit"), format="csv")
    fetch(olivia, "audit json", reverse("audit"), format="json")
    fetch(olivia, "events", reverse("events"))
    for run in ScanRun.objects.all():
        fetch(olivia, "scan", reverse("scan_status", args=[run.pk]))

    # 4. Search everything for every value, and the logs, Redis and the audit for every body.
    found: dict[str, list[str]] = {}
    for label, blob in raw_database_dump().items():
        if hits := leaks_in(blob):
            found[f"stored column of {label}"] = hits
    for label, body in pages.items():
        if hits := leaks_in(body):
            found[f"page {label}"] = hits
    for label, blob in database_dump().items():
        if hits := leaks_in(blob):
            found[f"table {label}"] = hits
    audit = b"\n".join(as_bytes(row) for row in AuditEvent.objects.values())
    if hits := leaks_in(audit):
        found["audit log"] = hits
    logs = "\n".join(f"{r.name} {r.levelname} {r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    if hits := leaks_in(logs):
        found["logs"] = hits
    for key, blob in redis_dump(redis).items():
        if hits := leaks_in(blob):
            found[f"redis {key!r}"] = hits
        if any(body in blob for body in bodies):
            found[f"redis {key!r}"] = ["a whole record body"]
    if any(body in audit or body in logs.encode() for body in bodies):
        found["audit or logs"] = ["a whole record body"]
    assert AuditEvent.objects.filter(action="operation.finished").count() == 2
    assert len(pages) > 30 and caplog.records and redis.keys("*")
    assert not found, f"secret values leaked: {found}"


def test_a_restore_plan_quotes_no_output_value():
    from engine.restore import diff_records

    lines = diff_records(
        {"resources": {}, "outputs": {"DbPassword": "old"}},
        {"resources": {}, "outputs": {"DbPassword": NEEDLES[0].decode()}},
    )
    assert not leaks_in("\n".join(lines))
