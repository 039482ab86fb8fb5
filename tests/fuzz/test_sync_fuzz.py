"""Property-based fuzz (issue 8): damaged state.json, lock.json and event files, put where
cdkd keeps them, go through a real sync (moto server behind the S3 proxy) and then every
page of the damaged stacks. Whatever the damage: no failed account, no HTTP 500, the
account's healthy stack still mirrored, and not one S3 write caused by reading.

Each example puts a fresh stack `F<n>` (and sometimes its nested child `F<n>~Kid`) into
account 111111111111 ("prod"), beside the healthy `Good` that every sync must keep
mirroring. vera is a viewer on the account. The counts are printed at the end (`-s`).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stacks.models import Account, DeploymentRun, Membership, Resource, Stack
from stacks.sync import sync_accounts

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A1 = "111111111111"
BUCKET = f"cdkd-state-{A1}"
REGION = "us-east-1"

# JSON text fragments a damaged or hostile file may hold where a value belongs.
NASTY_VALUES = [
    b"2147483648",
    b"-2147483649",
    b"1.5e10",
    b"9223372036854775808",
    b"18446744073709551616",
    b"1e300",
    b"1e400",
    b"-1e400",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"-0",
    b"0.5",
    b"9" * 5000,
    b'"\\ud800"',
    b'"\\udc00x\\ud800"',
    b'"\\u0000"',
    b'"a\\u0000b"',
    b'"\\u202egnp.exe"',
    b'"<script>alert(1)</script>{{ x }}"',
    b'"' + b"a" * 5000 + b'"',
    b'"0001-01-01T00:00:00+01:00"',
    b'"9999-12-31T23:59:59-01:00"',
    b'"2026-13-45T99:99:99Z"',
    b"null",
    b"true",
    b"[]",
    b"{}",
    b'"x"',
    b'{"a": 1, "a": 2}',
    b"[" * 150 + b"]" * 150,
    b"[" * 300 + b"]" * 300,
    b"[" * 10_000 + b"]" * 10_000,
    b'{"a": ' * 250 + b"1" + b"}" * 250,
    b"[1, 2",
]
# Strings for places where JSON needs a key.
NASTY_KEYS = [
    b'"\\ud800"',
    b'"\\u0000"',
    b'"Q\\u0000"',
    b'"\\u202eQ"',
    b'"' + b"K" * 600 + b'"',
    b'"a b/c?d#e"',
    b'"<b>x</b>"',
    b'""',
]

STATE = (
    b'{"version": <version>, "stackName": <name>, "region": <region>, "lastModified": <lastModified>, '
    b'"resources": {"Q": {"physicalId": <physicalId>, "resourceType": <resourceType>, '
    b'"properties": <properties>, "attributes": <attributes>, "dependencies": <dependencies>, '
    b'"deletionPolicy": <deletionPolicy>, "provisionedBy": <provisionedBy>}, <key>: <row>}, '
    b'"outputs": {"Out": <output>}, "exportNames": <exportNames>, '
    b'"orphans": [{"logicalId": "Gone", "orphanedAt": <orphanedAt>, "state": {"physicalId": "p", '
    b'"resourceType": "AWS::SQS::Queue", "properties": {}}}], "imports": <imports>}'
)
STATE_DEFAULTS = {
    "version": b"11",
    "name": b'"Fx"',
    "region": b'"us-east-1"',
    "lastModified": b"1795955307315",
    "physicalId": b'"queue-1"',
    "resourceType": b'"AWS::SQS::Queue"',
    "properties": b'{"QueueName": "q"}',
    "attributes": b"{}",
    "dependencies": b'["T"]',
    "deletionPolicy": b'"Retain"',
    "provisionedBy": b'"sdk"',
    "key": b'"T"',
    "row": b'{"physicalId": "t", "resourceType": "AWS::SNS::Topic", "properties": {}}',
    "output": b'"v"',
    "exportNames": b'["Out"]',
    "orphanedAt": b"1795955307315",
    "imports": b"[]",
}
LOCK = b'{"owner": <owner>, "timestamp": <timestamp>, "expiresAt": <expiresAt>, "operation": <operation>}'
LOCK_DEFAULTS = {
    "owner": b'"ci@runner:42"',
    "timestamp": b"1795955307315",
    "expiresAt": b"4102444800000",
    "operation": b'"deploy"',
}
EVENT = (
    b'{"timestamp": <timestamp>, "eventType": <eventType>, "stackName": "Fx", "logicalId": <logicalId>, '
    b'"resourceType": "AWS::SQS::Queue", "physicalId": <physicalId>, "result": <result>, '
    b'"durationMs": <durationMs>, "reason": <reason>, "error": <error>, "counts": <counts>}'
)
EVENT_DEFAULTS = {
    "timestamp": b'"2026-11-29T12:28:11.123Z"',
    "eventType": b'"RESOURCE_SUCCEEDED"',
    "logicalId": b'"Q"',
    "physicalId": b'"queue-1"',
    "result": b'"SUCCEEDED"',
    "durationMs": b"1200",
    "reason": b'"created"',
    "error": b'{"message": "boom", "awsErrorCode": "X"}',
    "counts": b'{"created": 1}',
}
INDEX = (
    b'{"indexVersion": <indexVersion>, "stackName": "Fx", "region": "us-east-1", "runs": [{"runId": <runId>, '
    b'"command": <command>, "cdkdVersion": "0.290.36", "startedAt": <startedAt>, "finishedAt": <finishedAt>, '
    b'"result": <result>, "eventCount": <eventCount>}], "lastModified": <lastModified>}'
)
INDEX_DEFAULTS = {
    "indexVersion": b"1",
    "runId": b'"RUN"',
    "command": b'"deploy"',
    "startedAt": b'"2026-11-29T12:28:11.123Z"',
    "finishedAt": b'"2026-11-29T12:28:12.000Z"',
    "result": b'"SUCCEEDED"',
    "eventCount": b"2",
    "lastModified": b"1795955307315",
}
# Stack names hold any character S3 keys hold except `/` (not control characters: moto
# cannot list those).
NAME_SUFFIXES = ["", "", "", " spaced", "-\u00fcn\u00ef", "<b>x&amp;", "%41&q=1", "\u202egnp.exe", "#?", "~"]
RUN_IDS = ["20261129T122811123Z-f37f3ced", "20260230T000000000Z-x", "not-a-time", "99991231T235959999Z-ffffffff"]
KEY_SLOTS = {"key"}

WRITES = ("Put", "Delete", "Copy", "Create", "Complete", "Upload", "Restore", "Abort")


def fill(template: bytes, defaults: dict[str, bytes], chosen: dict[str, bytes]) -> bytes:
    """`template` with each <slot> replaced by its chosen fragment (else its default)."""
    out = template
    for slot, default in defaults.items():
        out = out.replace(b"<" + slot.encode() + b">", chosen.get(slot, default))
    return out


def filled(template: bytes, defaults: dict[str, bytes]) -> st.SearchStrategy[bytes]:
    """Some slots of `template` replaced by nasty fragments."""
    slots = sorted(defaults)

    def fragments(slot: str) -> st.SearchStrategy[bytes]:
        return st.sampled_from(NASTY_KEYS if slot in KEY_SLOTS else NASTY_VALUES + NASTY_KEYS)

    return st.dictionaries(st.sampled_from(slots), st.sampled_from(slots).flatmap(fragments), max_size=4).map(
        lambda chosen: fill(template, defaults, {k: v for k, v in chosen.items()})
    )


def damaged(body: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A body, sometimes damaged as bytes too: torn, prefixed with a BOM, an invalid byte
    inserted, or one byte flipped."""

    def damage(args: tuple[bytes, str, int]) -> bytes:
        raw, how, at = args
        at = at % (len(raw) + 1)
        return {
            "none": raw,
            "torn": raw[:at],
            "bom": b"\xef\xbb\xbf" + raw,
            "invalid-utf8": raw[:at] + b"\xff\xc3" + raw[at:],
            "flip": raw[:at] + bytes([raw[at] ^ 0x20]) + raw[at + 1 :] if at < len(raw) else raw,
            "doubled": raw + raw,
        }[how]

    hows = st.sampled_from(["none", "none", "none", "torn", "bom", "invalid-utf8", "flip", "doubled"])
    return st.tuples(body, hows, st.integers(0, 10_000)).map(damage)


stream_lines = st.lists(damaged(filled(EVENT, EVENT_DEFAULTS)), min_size=1, max_size=4)

world = st.fixed_dictionaries(
    {
        "state": damaged(filled(STATE, STATE_DEFAULTS)),
        "child": st.none() | damaged(filled(STATE, STATE_DEFAULTS)),
        "lock": st.none() | damaged(filled(LOCK, LOCK_DEFAULTS)) | st.sampled_from(NASTY_VALUES),
        "index": st.none() | damaged(filled(INDEX, INDEX_DEFAULTS)),
        "stream": st.none() | stream_lines.map(lambda lines: b"\n".join(lines) + b"\n"),
        "run_id": st.sampled_from(RUN_IDS),
        "suffix": st.sampled_from(NAME_SUFFIXES),
    }
)

TOTALS: Counter[str] = Counter()
COUNTER = itertools.count()


@pytest.fixture
def prod(aws, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    aws.make_bucket(A1, BUCKET)
    good = {
        "version": 11,
        "stackName": "Good",
        "region": REGION,
        "resources": {"Q": {"physicalId": "q", "resourceType": "AWS::SQS::Queue", "properties": {}}},
        "outputs": {},
    }
    aws.put(A1, BUCKET, f"cdkd/Good/{REGION}/state.json", json.dumps(good).encode())
    account = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    user = User.objects.create_user("vera", password="pw")
    Membership.objects.create(user=user, account=account, role="viewer")
    client = Client()
    client.force_login(user)
    return account, client


def writes(counts: Counter[str]) -> int:
    return sum(n for api, n in counts.items() if api.startswith(WRITES))


def pages(account: Account, stack: Stack) -> list[str]:
    base = f"/stacks/{A1}/{quote(stack.region_slug, safe='')}/{quote(stack.stack_name, safe='')}/"
    urls = [base, base + "resources/", base + "resources/?page=2", base + "resources/?q=Q", base + "outputs/"]
    urls += [base + "events/", base + "json/", base + "download/", base + "history/"]  # the tabs, then the rest
    for logical_id in Resource.objects.filter(stack=stack).values_list("logical_id", flat=True)[:3]:
        urls.append(base + f"resources/{quote(logical_id, safe='')}/")
    urls.append(f"/events/?account={A1}&stack={quote(stack.stack_name)}")
    urls += [f"/stacks/?q={quote(stack.stack_name)}", "/stacks/tree/?defects=yes", f"/events/?account={A1}"]
    for run in DeploymentRun.objects.filter(account=account, stack_name=stack.stack_name):
        run_url = f"/events/{A1}/{run.region}/{quote(run.stack_name, safe='')}/{quote(run.run_id, safe='')}/"
        urls += [run_url, run_url + "?format=csv", run_url + "?format=json"]
    return urls


@settings(
    max_examples=int(os.environ.get("CDKD_FUZZ_EXAMPLES", "40")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(files=world)
def test_it_survives_any_damaged_file_through_sync_and_every_page(aws, prod, files):
    account, client = prod
    name = f"F{next(COUNTER)}{files['suffix']}"
    base = f"cdkd/{name}/{REGION}"
    objects = {f"{base}/state.json": files["state"]}
    if files["child"] is not None:
        objects[f"cdkd/{name}~Kid/{REGION}/state.json"] = files["child"]
    if files["lock"] is not None:
        objects[f"{base}/lock.json"] = files["lock"]
    if files["index"] is not None:
        objects[f"{base}/deployments/index.json"] = files["index"].replace(
            b'"RUN"', json.dumps(files["run_id"]).encode()
        )
    if files["stream"] is not None:
        objects[f"{base}/deployments/{files['run_id']}.jsonl"] = files["stream"]
    for key, body in objects.items():
        aws.put(A1, BUCKET, key, body)
    before = aws.proxy.snapshot()
    started = time.monotonic()

    [result] = sync_accounts([Account.objects.get(pk=account.pk)])

    TOTALS["sync ms"] += int((time.monotonic() - started) * 1000)

    TOTALS["examples"] += 1
    TOTALS["accounts failed"] += bool(result.errors)
    assert result.errors == [], result.errors
    assert list(
        Resource.objects.filter(stack__account=account, stack__stack_name="Good").values_list("logical_id", flat=True)
    ) == ["Q"]
    stack = Stack.objects.get(account=account, key=f"{base}/state.json")
    assert bytes(stack.body) == files["state"]  # verbatim, however damaged
    stacks = list(Stack.objects.filter(account=account, stack_name__in=[name, f"{name}~Kid"]))
    for each in stacks:
        for url in pages(account, each):
            started = time.monotonic()
            try:
                response = client.get(url)
            except Exception:
                TOTALS["HTTP 500"] += 1  # the test client re-raises what the view raised
                print(f"\nserver error on {url!r} with {files!r}"[:3000])
                raise
            TOTALS["page ms"] += int((time.monotonic() - started) * 1000)
            TOTALS["pages"] += 1
            TOTALS["HTTP 500"] += response.status_code >= 500
            assert response.status_code in (200, 400, 404), (url, response.status_code)
    after = aws.proxy.snapshot()
    made = writes(after - before)
    TOTALS["S3 writes"] += made
    assert made == 0, after - before
    TOTALS["defects"] += len(stack.defects)


def test_it_reports_the_fuzz_counts():
    """Runs after the fuzz (file order): prints what it measured."""
    print(f"\nfuzz: {dict(TOTALS)}")
    if TOTALS["examples"]:
        assert TOTALS["accounts failed"] == TOTALS["HTTP 500"] == TOTALS["S3 writes"] == 0
