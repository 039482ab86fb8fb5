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
