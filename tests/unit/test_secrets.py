"""engine.secrets and the pure parts of engine.scrub: matching rules, no value ever out."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from engine import scrub
from engine.backend import VersionInfo
from engine.errors import AccessDenied
from engine.secrets import (
    MASK,
    SECRET_KEY_LABEL,
    SecretIndex,
    SecretSource,
    shape_labels,
    sm_reference,
    ssm_reference,
)

ARN = "arn:aws:secretsmanager:us-east-1:111111111111:secret:prod/db-AbCdEf"
PASSWORD = "hunter2-Very-Secret"
API_KEY = "api-key-0123456789"
SHORT = "x9z"  # shorter than 4: whole values only
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"


def sm(key: str | None = None, region: str = "us-east-1") -> SecretSource:
    label = "Secrets Manager secret prod/db" + (f", key {key}" if key else "")
    return SecretSource("secretsmanager", label, "prod/db", region, sm_reference(ARN, key))


def ssm(name: str = "/prod/api-key", region: str = "us-east-1") -> SecretSource:
    return SecretSource("ssm", f"SSM SecureString parameter {name}", name, region, ssm_reference(name))


@pytest.fixture
def index() -> SecretIndex:
    index = SecretIndex()
    index.add(PASSWORD, sm("password"))
    index.add(API_KEY, ssm())
    index.add(SHORT, sm("pin"))
    return index


def hits(index: SecretIndex, document: Any, *, jsonl: bool = False) -> list[scrub.Hit]:
    body = document if isinstance(document, bytes) else json.dumps(document, indent=2).encode()
    return scrub.scan_document(index, body, jsonl=jsonl)


def summary(found: list[scrub.Hit]) -> list[tuple[list[Any], str, bool]]:
    return [(list(h.path), h.match.source, h.match.whole) for h in found]


def test_it_matches_whole_and_embedded_values_and_skips_masks_and_references(index: SecretIndex) -> None:
    document = {
        "whole": PASSWORD,
        "embedded": f"postgres://app:{PASSWORD}@db:5432/app",
        "masked": MASK,
        "reference": sm_reference(ARN, "password"),
        "inside a reference": f"{{{{resolve:ssm:{API_KEY}}}}} and nothing else",
        "short whole": SHORT,
        "short embedded": f"a{SHORT}b",
        "clean": "nothing to see",
    }
    assert summary(hits(index, document)) == [
        (["whole"], "Secrets Manager secret prod/db, key password", True),
        (["embedded"], "Secrets Manager secret prod/db, key password", False),
        (["short whole"], "Secrets Manager secret prod/db, key pin", True),
    ]


def test_it_never_decodes_a_body_without_candidates(index: SecretIndex, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(scrub.scanner, "_decode_json", lambda text: calls.append(text) or (True, {}))
    assert scrub.scan_document(index, b'{"a": "plain", "b": [1, 2]}') == []
    assert calls == []


def test_it_finds_json_escaped_and_ascii_escaped_values() -> None:
    index = SecretIndex()
    index.add('pa"ss\\wörd', sm("password"))
    body_utf8 = json.dumps({"v": 'pa"ss\\wörd'}, ensure_ascii=False).encode()
    body_ascii = json.dumps({"v": 'pa"ss\\wörd'}, ensure_ascii=True).encode()
    assert summary(scrub.scan_document(index, body_utf8)) == [
        (["v"], "Secrets Manager secret prod/db, key password", True)
    ]
    assert summary(scrub.scan_document(index, body_ascii)) == [
        (["v"], "Secrets Manager secret prod/db, key password", True)
    ]


def test_it_flags_secret_property_names_per_resource_type(index: SecretIndex) -> None:
    row = {
        "resourceType": "AWS::RDS::DBInstance",
        "properties": {"MasterUserPassword": "typed-by-hand", "MasterUsername": "admin", "Password": MASK},
        "attributes": {},
    }
    key_row = {"resourceType": "AWS::IAM::AccessKey", "attributes": {"SecretAccessKey": "abc/def+ghi"}}
    api = {"resourceType": "AWS::ApiGateway::ApiKey", "properties": {"Value": "k-123"}}
    other = {"resourceType": "AWS::SSM::Parameter", "properties": {"Value": "not a secret"}}
    found = summary(hits(index, {"resources": {"Db": row, "Key": key_row, "Api": api, "P": other}}))
    assert found == [
        (
            ["resources", "Db", "properties", "MasterUserPassword"],
            "property MasterUserPassword of AWS::RDS::DBInstance",
            True,
        ),
        (
            ["resources", "Key", "attributes", "SecretAccessKey"],
            "property SecretAccessKey of AWS::IAM::AccessKey",
            True,
        ),
        (["resources", "Api", "properties", "Value"], "property Value of AWS::ApiGateway::ApiKey", True),
    ]


def test_it_recognises_credential_shapes() -> None:
    assert shape_labels(PEM) == (["credential shape: PEM private key"], False)
    assert shape_labels(f"id={AWS_KEY_ID} secret={AWS_SECRET}")[0] == [SECRET_KEY_LABEL]
    assert shape_labels(AWS_SECRET) == ([], False)  # alone, 40 base64 characters are no credential
    assert shape_labels("0123456789abcdef0123456789abcdef01234567") == ([], False)
    index = SecretIndex()
    document = {"creds": {"AccessKeyId": AWS_KEY_ID, "Token": AWS_SECRET}, "key": PEM}
    assert summary(hits(index, document)) == [
        (["creds", "Token"], SECRET_KEY_LABEL, True),
        (["key"], "credential shape: PEM private key", False),
    ]


def test_it_reports_jsonl_paths_by_line(index: SecretIndex) -> None:
    lines = [
        json.dumps({"type": "RUN_STARTED"}),
        json.dumps({"type": "RESOURCE_FAILED", "message": f"bad password {PASSWORD}"}),
        f'{{"torn": "{API_KEY}',
    ]
    found = summary(hits(index, "\n".join(lines).encode(), jsonl=True))
    assert found == [
        ([1, "message"], "Secrets Manager secret prod/db, key password", False),
        ([2], "SSM SecureString parameter /prod/api-key", False),
    ]


def test_it_never_prints_a_secret_held_in_an_object_key(index: SecretIndex) -> None:
    found = hits(index, {"outputs": {f"out-{PASSWORD}": {"Password": "x1234"}}})
    assert [(list(h.path), h.in_key, h.redacted_path) for h in found] == [
        (["outputs", "***"], True, True),
        (["outputs", "***", "Password"], False, True),
    ]
    assert PASSWORD not in json.dumps([[list(h.path), h.match.source] for h in found])


def test_it_prefers_references_that_resolve_in_the_records_region() -> None:
    index = SecretIndex()
    index.add("same-value-1234", ssm(region="eu-west-1"))
    match = index.all().whole("same-value-1234")
    assert len(match) == 1
    m = scrub.Match(("x",), True, tuple(match))
    assert m.replacement("eu-west-1") == ssm_reference("/prod/api-key")
    assert m.replacement("us-east-1") == MASK  # ssm-secure resolves in the deploying region only
    index.add("same-value-1234", sm("password", region="eu-west-1"))
    both = scrub.Match(("x",), True, tuple(index.all().whole("same-value-1234")))
    assert both.replacement("us-east-1") == sm_reference(ARN, "password")
    assert scrub.Match(("x",), False, ()).replacement("us-east-1") == MASK


def test_it_keeps_values_out_of_everything_it_hands_out(index: SecretIndex) -> None:
    other = SecretIndex()
    other.add(PASSWORD, sm("password"))
    assert index.digest(PASSWORD) != other.digest(PASSWORD)  # keyed per scan
    text = repr(index) + repr(index.all()) + json.dumps(index.fingerprints())
    for value in (PASSWORD, API_KEY, SHORT):
        assert value not in text
    assert {r["length"] for r in index.fingerprints()} == {len(PASSWORD), len(API_KEY), len(SHORT)}
    with pytest.raises(TypeError):
        pickle.dumps(index)
    with pytest.raises(TypeError):
        pickle.dumps(index.all())


def test_it_matches_json_secret_identifiers_only_whole() -> None:
    index = SecretIndex()
    index.add(
        "admin",
        SecretSource(
            "secretsmanager",
            "Secrets Manager secret prod/db, key username",
            "prod/db",
            "us-east-1",
            sm_reference(ARN, "username"),
            embeddable=False,
        ),
    )
    found = summary(hits(index, {"MasterUsername": "admin", "Description": "administrators only"}))
    assert found == [(["MasterUsername"], "Secrets Manager secret prod/db, key username", True)]


# --- purge: per-key results from DeleteObjects -------------------------------------------------


class FakeS3:
    def __init__(self, errors: list[dict[str, str]] | None = None, deny: bool = False) -> None:
        self.errors = errors or []
        self.deny = deny
        self.calls: list[list[dict[str, str]]] = []

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        objects = kwargs["Delete"]["Objects"]
        self.calls.append(objects)
        if self.deny:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "DeleteObjects")
        return {"Errors": self.errors}


class FakeBucket:
    name = "state"
    account_id = "111111111111"
    region = "us-east-1"

    def __init__(self, versions: dict[str, list[VersionInfo]], deny_list: set[str] | None = None) -> None:
        self._versions = versions
        self.deny_list = deny_list or set()
        self.requests: Counter[str] = Counter()
        self.requests.add = lambda api, n=1: self.requests.update({api: n})  # type: ignore[attr-defined]

    def versions(self, key: str) -> list[VersionInfo]:
        if key in self.deny_list:
            error = AccessDenied(f"Access denied: s3:ListBucketVersions (ListObjectVersions) on {key}")
            error.code = "AccessDenied"  # type: ignore[attr-defined]
            raise error
        return self._versions.get(key, [])


def version(key: str, vid: str, latest: bool, marker: bool = False) -> VersionInfo:
    return VersionInfo(key, vid, datetime(2026, 1, 1, tzinfo=UTC), 0 if marker else 10, latest, marker, None)


def test_it_purges_noncurrent_versions_only_and_reads_per_key_errors(monkeypatch) -> None:
    bucket = FakeBucket(
        {
            "a/state.json": [
                version("a/state.json", "a3", True),
                version("a/state.json", "a2", False),
                version("a/state.json", "a1", False),
            ],
            "b/state.json": [version("b/state.json", "b2", True), version("b/state.json", "b1", False)],
            "c/journal.json": [
                version("c/journal.json", "cm", True, marker=True),
                version("c/journal.json", "c1", False),
            ],
        },
        deny_list={"d/exports.json"},
    )
    fake = FakeS3(
        errors=[
            {"Key": "b/state.json", "VersionId": "b1", "Code": "AccessDenied", "Message": "denied"},
            {"Key": "a/state.json", "VersionId": "a1", "Code": "NoSuchVersion", "Message": "gone"},
        ]
    )
    monkeypatch.setattr(scrub.history, "_s3", lambda b: fake)
    report = scrub.purge_noncurrent(bucket, ["a/state.json", "b/state.json", "c/journal.json", "d/exports.json"])  # type: ignore[arg-type]
    deleted_ids = sorted(o["VersionId"] for call in fake.calls for o in call)
    assert deleted_ids == ["a1", "a2", "b1", "c1"]  # never a3, b2 or the current marker cm
    assert report.deleted == {"a/state.json": 2, "b/state.json": 0, "c/journal.json": 1}
    assert report.failures == {
        "b/state.json": "AccessDenied: s3:DeleteObjectVersion",
        "d/exports.json": "AccessDenied: s3:ListBucketVersions",
    }
    warning = report.warning("state")
    assert warning is not None
    assert "Could not purge noncurrent versions of 2 key(s) in s3://state" in warning
    assert "Grant s3:ListBucketVersions and s3:DeleteObjectVersion" in warning
    assert "b/state.json (AccessDenied: s3:DeleteObjectVersion)" in warning
    assert "d/exports.json (AccessDenied: s3:ListBucketVersions)" in warning


def test_it_batches_deletes_by_1000_and_names_five_keys_then_counts(monkeypatch) -> None:
    keys = [f"k{i:02d}" for i in range(8)]
    bucket = FakeBucket({k: [version(k, "cur", True)] + [version(k, f"v{j}", False) for j in range(300)] for k in keys})
    fake = FakeS3(deny=True)
    monkeypatch.setattr(scrub.history, "_s3", lambda b: fake)
    report = scrub.purge_noncurrent(bucket, keys)  # type: ignore[arg-type]
    assert [len(c) for c in fake.calls] == [1000, 1000, 400]
    assert sorted(report.failures) == keys
    assert "(and 3 more)" in (report.warning("state") or "")


def test_it_masks_known_values_in_messages(index: SecretIndex) -> None:
    message = f"PutObject failed near {PASSWORD} and {API_KEY}; short {SHORT} stays inside text"
    assert index.mask(message) == f"PutObject failed near *** and ***; short {SHORT} stays inside text"
    assert index.mask(SHORT) == MASK


def test_it_hands_its_values_to_a_masker_without_showing_them(index: SecretIndex) -> None:
    masker = index.masker()
    assert masker(f"failed with {PASSWORD}") == "failed with ***"


def test_it_matches_a_secrets_user_name_only_where_the_record_names_a_user():
    from engine.scrub import scan_document
    from engine.secrets import SecretIndex, SecretSource

    index = SecretIndex()
    label = "Secrets Manager secret prod/db, key username"
    index.add("payments", SecretSource("secretsmanager", label, "prod/db", "us-east-1", embeddable=False))
    body = json.dumps(
        {
            "resources": {
                "Db": {"resourceType": "AWS::RDS::DBInstance", "properties": {"MasterUsername": "payments"}},
                "Fn": {
                    "resourceType": "AWS::Lambda::Function",
                    "properties": {"Environment": {"Variables": {"POWERTOOLS_SERVICE_NAME": "payments"}}},
                },
            }
        }
    ).encode()

    paths = [hit.path for hit in scan_document(index, body)]

    assert paths == [("resources", "Db", "properties", "MasterUsername")]
