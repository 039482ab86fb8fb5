"""Two accounts in moto with secrets in Secrets Manager and SSM, and state buckets whose
records hold those secrets everywhere they can hide (for the scan, scrub and leak tests).

A1 (prod): Secrets Manager `prod/db` (JSON: username, password) and `prod/token`, SSM
SecureString `/prod/api-key`. Stack `App` (us-east-1) holds them in properties, observed
properties, attributes, outputs (whole and embedded), an `orphans` record, an older version
of the record, an older version of the rollback journal and the exports index. Stack
`Clean` holds none.
A2 (dev): Secrets Manager `dev/secret`, SSM SecureString `/dev/param`; stack `Far` holds
them in an output and a property, and in an older version.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User

from engine.schema import js_stringify
from stacks.models import Account, Membership, Role

A1, A2 = "111111111111", "222222222222"
BUCKET1, BUCKET2 = f"cdkd-state-{A1}", f"cdkd-state-{A2}"
REGION = "us-east-1"
STATE = "cdkd/App/us-east-1/state.json"
JOURNAL = "cdkd/App/us-east-1/rollback-journal.json"
INDEX = "cdkd/_index/us-east-1/exports.json"
CLEAN = "cdkd/Clean/us-east-1/state.json"
FAR = "cdkd/Far/us-east-1/state.json"

PW = "Pw-leak-0123456789abcdef"
TOKEN = "tok-leak-ABCDEFGHIJKLMN"
API = "api-leak-KEY-9876543210"
A2_SECRET = "a2-leak-secret-QRSTUVWX"
A2_PARAM = "a2-leak-param-567890yz"
SECRET_VALUES = (PW, TOKEN, API, A2_SECRET, A2_PARAM)


def cdkd_json(value: Any) -> bytes:
    return js_stringify(value, indent=2).encode()


def client(aws, account: str, service: str) -> Any:
    return aws.account_session(account).client(service, region_name=REGION, endpoint_url=aws.moto.url)


def app_record(**over: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "version": 11,
        "stackName": "App",
        "region": REGION,
        "resources": {
            "Db": {
                "physicalId": "app-db",
                "resourceType": "AWS::RDS::DBInstance",
                "properties": {"MasterUserPassword": PW, "DBName": "app"},
                "observedProperties": {"MasterUserPassword": PW, "Port": "5432"},
                "attributes": {"Endpoint.Address": "app-db.example.com"},
                "dependencies": [],
            },
            "Fn": {
                "physicalId": "app-fn",
                "resourceType": "AWS::Lambda::Function",
                "properties": {"Environment": {"Variables": {"TOKEN": TOKEN, "API": API, "PLAIN": "hello"}}},
                "attributes": {"Arn": "arn:aws:lambda:us-east-1:111111111111:function:app-fn", "Token": TOKEN},
            },
        },
        "outputs": {"DbPassword": PW, "ConnString": f"api={API};db=app", "Plain": "hello"},
        "orphans": [
            {
                "logicalId": "OldDb",
                "orphanedAt": 1_700_000_000_000,
                "state": {
                    "physicalId": "old-db",
                    "resourceType": "AWS::RDS::DBInstance",
                    "properties": {"MasterUserPassword": PW},
                    "attributes": {},
                },
            }
        ],
        "lastModified": 1_700_000_000_000,
    }
    record.update(over)
    return record


def index_body(value: Any = TOKEN) -> dict[str, Any]:
    return {
        "indexVersion": 1,
        "region": REGION,
        "exports": {
            "DbPassword": {"value": value, "producerStack": "App", "producerRegion": REGION},
            "Plain": {"value": "hello", "producerStack": "App", "producerRegion": REGION},
        },
        "lastModified": 1_700_000_000_000,
    }


def journal(with_secret: bool) -> dict[str, Any]:
    failed = [
        {
            "logicalId": "Db",
            "changeType": "UPDATE",
            "resourceType": "AWS::RDS::DBInstance",
            "attemptedProperties": {"MasterUserPassword": PW},
        }
    ]
    segment = {"timestamp": 1, "reason": "interrupted", "initialDeploy": False, "operations": []}
    segment["failedOperations"] = failed if with_secret else []
    return {"journalVersion": 1, "stackName": "App", "region": REGION, "segments": [segment]}


def plant(aws) -> dict[str, Any]:
    """Secrets in both accounts and the records that hold them. Returns the secrets' ARNs
    and the version ids of the older versions that hold secrets."""
    sm = client(aws, A1, "secretsmanager")
    db = sm.create_secret(Name="prod/db", SecretString=json.dumps({"username": "svc-user-xyz", "password": PW}))["ARN"]
    token = sm.create_secret(Name="prod/token", SecretString=TOKEN)["ARN"]
    client(aws, A1, "ssm").put_parameter(Name="/prod/api-key", Value=API, Type="SecureString")
    client(aws, A2, "secretsmanager").create_secret(Name="dev/secret", SecretString=A2_SECRET)
    client(aws, A2, "ssm").put_parameter(Name="/dev/param", Value=A2_PARAM, Type="SecureString")

    aws.make_bucket(A1, BUCKET1)
    aws.make_bucket(A2, BUCKET2)
    older = aws.put(A1, BUCKET1, STATE, app_record(outputs={"DbPassword": PW, "Old": TOKEN}))["VersionId"]
    aws.put(A1, BUCKET1, STATE, cdkd_json(app_record()))
    old_journal = aws.put(A1, BUCKET1, JOURNAL, journal(True))["VersionId"]
    aws.put(A1, BUCKET1, JOURNAL, journal(False))
    old_index = aws.put(A1, BUCKET1, INDEX, index_body(PW))["VersionId"]
    aws.put(A1, BUCKET1, INDEX, index_body(TOKEN))
    aws.put(A1, BUCKET1, CLEAN, {"version": 11, "stackName": "Clean", "region": REGION, "resources": {}, "outputs": {}})
    far = {
        "version": 11,
        "stackName": "Far",
        "region": REGION,
        "resources": {
            "Fn": {
                "physicalId": "far-fn",
                "resourceType": "AWS::Lambda::Function",
                "properties": {"Environment": {"Variables": {"PARAM": A2_PARAM}}},
                "attributes": {},
            }
        },
        "outputs": {"S": A2_SECRET},
        "lastModified": 1_700_000_000_000,
    }
    far_older = aws.put(A2, BUCKET2, FAR, {**far, "outputs": {"S": A2_SECRET, "T": f"x-{A2_PARAM}-y"}})["VersionId"]
    aws.put(A2, BUCKET2, FAR, cdkd_json(far))
    return {
        "arns": {"db": db, "token": token},
        "older": {STATE: older, JOURNAL: old_journal, INDEX: old_index, FAR: far_older},
    }


def accounts() -> tuple[Account, Account]:
    prod = Account.objects.create(account_id=A1, name="prod", role_arn=f"arn:aws:iam::{A1}:role/cdkd-admin")
    dev = Account.objects.create(account_id=A2, name="dev", role_arn=f"arn:aws:iam::{A2}:role/cdkd-admin")
    return prod, dev


def people(*accounts: Account) -> dict[str, User]:
    """olivia operates, arthur approves, vera views every given account; otto has none."""
    made = {}
    for name, role in (("olivia", Role.OPERATOR), ("arthur", Role.APPROVER), ("vera", Role.VIEWER), ("otto", None)):
        user = User.objects.create_user(name, f"{name}@example.com", "pw")
        for account in accounts if role else ():
            Membership.objects.create(user=user, account=account, role=role)
        made[name] = user
    return made


# --- demo-like leaks that the detectors catch before any scan ----------------------------------
# Shaped like demo.plant_leaked_secrets (`Prod-PaymentsLegacy`): plaintext written
# before cdkd masked it, under secret-bearing names and in credential shapes.

LEAKY = "Payments"
LEAKY_KEY = f"cdkd/{LEAKY}/us-east-1/state.json"
DEMO_PW = "Paym3nts-Db-Passw0rd-2024"
DEMO_API = "pk_live_51DemoKeyForTheScrubPage9xQ"
DEMO_GH = "ghp_" + "D3moGitHubToken0123456789abcdefghijKL"
DEMO_CONF_PW = "Hunter2-in-a-conn-string"
DEMO_AKID = "AKIAIOSFODNN7DEMO0KEY"[:20]
DEMO_SAK = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYDEMOKEY0x1"
DEMO_PEM_BODY = "MIIEowIBAAKCAQEAdemoPEMbodyNotARealKey0123"
DEMO_PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{DEMO_PEM_BODY}\n-----END RSA PRIVATE KEY-----"
DEMO_BEARER = "eyJhbGciOiJIUzI1NiJ9.demoBearerToken.sig0123"
DEMO_SECRETS = (DEMO_PW, DEMO_API, DEMO_GH, DEMO_CONF_PW, DEMO_AKID, DEMO_SAK, DEMO_PEM_BODY, DEMO_BEARER)


def leaky_records() -> tuple[dict[str, Any], dict[str, Any]]:
    """(older, current) versions of the `Payments` record."""
    db = {
        "physicalId": "payments-legacy-db",
        "resourceType": "AWS::RDS::DBInstance",
        "properties": {
            "DBInstanceIdentifier": "payments-legacy-db",
            "MasterUsername": "payments",
            "MasterUserPassword": "{{resolve:secretsmanager:arn:aws:secretsmanager:us-east-1:111111111111:"
            "secret:prod/payments/db-AbCdEf:SecretString:password::}}",
        },
        "attributes": {"Endpoint.Address": "payments-legacy-db.demo.us-east-1.rds.amazonaws.com"},
        "provisionedBy": "sdk",
    }
    older = {"version": 8, "stackName": LEAKY, "region": REGION, "lastModified": 1760000000000}
    older["resources"] = {"Db": {**db, "properties": {**db["properties"], "MasterUserPassword": DEMO_PW}}}
    older["outputs"] = {}
    fn = {
        "physicalId": "payments-fn",
        "resourceType": "AWS::Lambda::Function",
        "properties": {
            "Environment": {
                "Variables": {
                    "GITHUB_TOKEN": DEMO_GH,
                    "CONFIG": f"host=db;password={DEMO_CONF_PW};port=5432",
                    "AWS_ACCESS_KEY_ID": DEMO_AKID,
                    "AWS_KEY_MATERIAL": DEMO_SAK,  # a name that says nothing: the pair rule
                    "SIGNING_KEY_PEM": DEMO_PEM,
                    "UPSTREAM_AUTH": f"Authorization: Bearer {DEMO_BEARER}",
                    "PLAIN": "hello-visible",
                }
            }
        },
        "attributes": {"Arn": "arn:aws:lambda:us-east-1:111111111111:function:payments-fn"},
    }
    # A logical id that reads like a secret name is a name, not a value: it stays visible.
    queue = {"physicalId": "q-db-password-rotation", "resourceType": "AWS::SQS::Queue", "properties": {}}
    current = {"version": 11, "stackName": LEAKY, "region": REGION, "lastModified": 1790000000000}
    current["resources"] = {
        "Db": {**db, "attributes": {**db["attributes"], "ApiKey": DEMO_API}},
        "Fn": fn,
        "DbPasswordRotation": queue,
    }
    current["outputs"] = {"DbUrl": f"postgres://payments:{DEMO_PW}@payments-legacy-db:5432/payments"}
    current["exportNames"] = []
    return older, current


def plant_leaky(aws, bucket: str = BUCKET1) -> dict[str, str]:
    """The two versions of `Payments` in A1's bucket (made if missing); their version ids."""
    try:
        aws.make_bucket(A1, bucket)
    except Exception:  # noqa: BLE001 - plant() made it already
        pass
    older, current = leaky_records()
    return {
        "older": aws.put(A1, bucket, LEAKY_KEY, cdkd_json(older))["VersionId"],
        "current": aws.put(A1, bucket, LEAKY_KEY, cdkd_json(current))["VersionId"],
    }
