"""`stacks.secretmask`'s detectors, the display's secret-bearing names, the shape
prefilter, and the bounds: huge, deep and damaged bodies mask in linear time, never raise."""

from __future__ import annotations

import json
import time

import pytest

from engine import masking, secrets
from engine.masking import MASK, might_hold_shape
from engine.schema import js_stringify
from engine.secrets import secret_name
from stacks.secretmask import mask_bytes, mask_document, mask_string, mask_text


@pytest.mark.parametrize(
    "name",
    ["DbPassword", "MasterUserPassword", "ApiKey", "API_KEY", "api-key", "TOKEN", "GITHUB_TOKEN", "client_secret",
     "SessionToken", "PrivateKey", "SSHPrivateKey", "Passwords", "SecretString", "Credentials", "SECRET"],
)  # fmt: skip
def test_it_names_secret_bearing_names(name):
    assert secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["SecretArn", "PasswordPolicy", "TokenUrl", "PasswordLength", "AccessKeyId", "KmsKeyId", "PublicKey", "DbUrl",
     "Endpoint.Address", "Port", "DBName", "MasterUsername", "", "x" * 300 + "Password"],
)  # fmt: skip
def test_it_leaves_names_that_name_rather_than_hold_a_secret(name):
    assert not secret_name(name)


# Each shape of engine.masking and engine.secrets, one text it matches.
SHAPE_SAMPLES = [
    "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAIOSFODNN7EXAMPLE",
    "ABIAIOSFODNN7EXAMPLE",
    "ACCAIOSFODNN7EXAMPLE",
    "aws_secret_access_key = wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    "SessionToken: FwoGZXIvYXdzEBYaDHqa0AP",
    "passwd=hunter22",
    "PWD: hunter22",
    "Secret=hunter22",
    "api-key: abcdef",
    "access_token=abcdef",
    "Authorization: Bearer abcdefgh1234",
    "redis://default:pw@cache",
    "ghp_" + "a" * 36,
    "gho_" + "a" * 36,
    "github_pat_" + "a" * 60,
    "xoxb-1234567890-abc",
    "xoxo-1234567890-abc",
    "sk_live_" + "a" * 24,
    "rk_test_" + "a" * 24,
    "AIza" + "a" * 35,
    "PuTTY-User-Key-File-3: ssh-ed25519",
    "npm_" + "a" * 36,
]
PATTERNS = [p for p, _g, _w in masking._SHAPES] + [p for _l, p in secrets.SHAPES] + [secrets.ACCESS_KEY_ID]


def test_every_shape_has_a_sample_and_the_prefilter_passes_every_sample():
    for pattern in PATTERNS:
        assert any(pattern.search(s) for s in SHAPE_SAMPLES), pattern.pattern
    # Each pattern's own literals gate it: every sample it matches holds one.
    for pattern, _group, words in masking._SHAPES:
        for sample in (s for s in SHAPE_SAMPLES if pattern.search(s)):
            assert any(w in sample.lower() for w in words), (pattern.pattern, sample)
    for label, pattern in secrets.SHAPES:
        for sample in (s for s in SHAPE_SAMPLES if pattern.search(s)):
            assert any(w in sample for w in secrets._SHAPE_LITERALS[label]), (label, sample)
            assert secrets.shape_labels(sample)[0], (label, sample)
    for sample in SHAPE_SAMPLES:
        assert might_hold_shape(sample), sample
        assert might_hold_shape(sample.upper()) and might_hold_shape(f"x {sample} y"), sample
    assert not might_hold_shape("arn:aws:lambda:us-east-1:111111111111:function:payments-fn")


def test_it_masks_a_string_leaf():
    assert mask_string("postgres://u:Pw-1@h/db") == "postgres://u:***@h/db"
    assert mask_string("plain words") == "plain words"
    assert mask_string("anything", secret=True) == MASK
    assert mask_string("{{resolve:ssm-secure:/p}}", secret=True) == "{{resolve:ssm-secure:/p}}"
    assert mask_string("npm_" + "a" * 36) == MASK  # a shape the text masks cannot cut out: whole
    pair = "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert mask_string(pair) == MASK


def test_it_masks_values_by_name_and_shape_and_keeps_logical_ids_and_references():
    document = {
        "resources": {
            "DbPassword": {  # a logical id, not a value
                "resourceType": "AWS::Lambda::Function",
                "physicalId": "fn-1",
                "properties": {
                    "Environment": {"Variables": {"DB_PASSWORD": "s3cr3t-1", "N": 5, "PORT": 5432}},
                    "Passwords": ["a-1234", {"Nested": "b-1234"}],
                    "Tokens": 12345,
                    "Ref": "{{resolve:secretsmanager:arn:x:SecretString:password::}}",
                },
                "attributes": {"Id": "AKIAIOSFODNN7EXAMPLE", "Other": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
                "dependencies": ["ApiKey"],
            }
        },
        "outputs": {"DbPassword": "s3cr3t-2", "Count": 3},
    }
    masked, changed = mask_document(document)
    row = masked["resources"]["DbPassword"]
    assert changed and row["physicalId"] == "fn-1" and row["dependencies"] == ["ApiKey"]
    assert row["properties"]["Environment"]["Variables"] == {"DB_PASSWORD": MASK, "N": 5, "PORT": 5432}
    assert row["properties"]["Passwords"] == [MASK, {"Nested": MASK}] and row["properties"]["Tokens"] == MASK
    assert row["properties"]["Ref"].startswith("{{resolve:")
    assert row["attributes"] == {"Id": MASK, "Other": MASK}
    assert masked["outputs"] == {"DbPassword": MASK, "Count": 3}


def test_a_body_with_nothing_to_mask_is_the_same_bytes():
    body = b'{"version": 11,   "resources": {}, "z": 1}\n\n'
    assert mask_bytes(body) is body
    assert mask_bytes(b"\xff{garbage") == b"\xff{garbage"


def test_it_masks_flagged_paths_and_a_damaged_body_as_text():
    body = js_stringify({"outputs": {"A": "found-by-scan", "B": "x"}}).encode()
    assert json.loads(mask_bytes(body, [["outputs", "A"], ["outputs", "Missing", "x"], [], ["***"]])) == {
        "outputs": {"A": MASK, "B": "x"}
    }
    damaged = b'\xff{"MasterUserPassword": "hunter2-x", "DbUrl": "mysql://u:pw-9@h", "Name": "kept", "tail'
    masked = mask_bytes(damaged)
    assert b"hunter2-x" not in masked and b"pw-9" not in masked and b'"Name": "kept"' in masked
    assert masked.startswith(b"\xff")  # bytes that are not UTF-8 stay as they were
    assert mask_text('"Password":"a\\"b" ') == '"Password": "***" '


def test_a_masked_body_stays_valid_utf8_json_with_lone_surrogates_and_unicode():
    body = b'{"outputs": {"DbPassword": "x-1234", "Odd": "\\ud800", "Name": "caf\xc3\xa9"}}'
    masked = mask_bytes(body)
    assert json.loads(masked.decode("utf-8")) == {"outputs": {"DbPassword": MASK, "Odd": "\ud800", "Name": "café"}}


def test_a_record_nested_as_deep_as_json_allows_masks_without_recursion():
    depth = 100_000
    body = ('{"a":' * depth + '"password=hunter2"' + "}" * depth).encode()
    masked = mask_bytes(body)  # json.loads refuses this depth: masked as text
    assert b"hunter2" not in masked
    deep: object = "token: abcdef-1"
    for _ in range(5000):
        deep = [deep]
    out, changed = mask_document(deep)
    while isinstance(out, list):
        (out,) = out
    assert changed and out == "token: ***"


@pytest.mark.parametrize(
    "body",
    [
        b'"' + b"a://" + b"a" * (1 << 20) + b'"',
        b'{"x": "' + b"a:" * (1 << 19) + b'"}',
        b'"a":"' + b'\\"' * (1 << 19),  # damaged: the text pair pattern
        b'"' * (1 << 20),
        b'"a"  :' * (1 << 17),
        b'{"k' + b"a" * (1 << 20),
    ],
)
def test_it_masks_a_1_mb_adversarial_body_in_well_under_a_second(body):
    started = time.perf_counter()
    mask_bytes(body)
    assert time.perf_counter() - started < 1.0


def test_it_shows_backticked_advice_as_code_with_a_copy_button_and_escapes_the_rest():
    from stacks.templatetags.cdkd import code_spans

    html = code_spans('<b>x</b> run `python manage.py cdkd state orphan "A" --yes` or read `resources`')
    assert html.startswith(
        "&lt;b&gt;x&lt;/b&gt; run <code>python manage.py cdkd state orphan &quot;A&quot; --yes</code>"
    )
    assert 'data-copy value="python manage.py cdkd state orphan &quot;A&quot; --yes"' in html
    assert "<code>resources</code>" in html and html.count("data-copy") == 1 and "`" not in html
    assert "data-copy" not in code_spans("run `cdkd orphan <constructPath>` first")  # a placeholder, not a command
