"""Stack kinds: what a typical team's stacks hold (data, events, api, analytics, db)."""

from __future__ import annotations

from typing import Any

from demo.accounts import (
    PLATFORM_EU,
    PRODUCTION,
    STAGING,
)
from demo.formats import _hash8, _suffix
from demo.records import StackBuilder

# --------------------------------------------------------------------------------------
# Stack kinds: what a typical team's stacks hold
# --------------------------------------------------------------------------------------

DOMAINS = {
    PRODUCTION.account_id: [
        "Orders",
        "Payments",
        "Inventory",
        "Catalog",
        "Shipping",
        "Notifications",
        "Search",
        "Billing",
        "Identity",
        "Checkout",
        "Carts",
        "Returns",
        "Loyalty",
        "Pricing",
    ],
    STAGING.account_id: [
        "Orders",
        "Payments",
        "Inventory",
        "Catalog",
        "Shipping",
        "Notifications",
        "Search",
        "Billing",
        "Identity",
        "Reviews",
        "Recommendations",
        "Media",
        "Webhooks",
    ],
    PLATFORM_EU.account_id: [
        "Network",
        "Observability",
        "Logging",
        "Artifacts",
        "Secrets",
        "Backup",
        "Guardrails",
        "Registry",
        "Mesh",
        "CostReports",
        "Scheduler",
        "AuditTrail",
    ],
}


def export_alias(stack: str, lid: str, attr: str) -> tuple[str, str]:
    """CDK's automatic cross-stack export: (output key, Export.Name)."""
    key = f"ExportsOutputFnGetAtt{lid}{attr}{_hash8(stack, lid, attr)}"
    return key, f"{stack}:{key}"


def build_data(b: StackBuilder, domain: str) -> None:
    # Every row an SDK type the demo creates, none retained: a destroy (where no Api stack
    # imports the table) deletes everything. The alias and bucket-policy rows cdkd also
    # writes are shown by the showcase stacks; here they would be skipped (no SDK delete).
    key = b.kms_key(f"{domain}DataKey", retain=False)
    table = b.table(f"{domain}Table", stream=True, retain=False)
    bucket = b.bucket(f"{domain}Archive", kms_key=key, retain=False)
    for attr, value in (
        ("Arn", b.resources[table]["attributes"]["Arn"]),
        ("StreamArn", b.resources[table]["attributes"]["StreamArn"]),
    ):
        out, alias = export_alias(b.stack, table, attr)
        b.output(out, value, alias)
    b.output(f"{domain}TableName", b.resources[table]["physicalId"])
    b.output(f"{domain}ArchiveBucketName", b.resources[bucket]["physicalId"])


def build_events(b: StackBuilder, domain: str) -> None:
    topic = b.topic(f"{domain}Events", display=f"{domain} domain events")
    dlq = b.queue(f"{domain}EventsDlq")
    # All SDK types (no Cloud Control row): the demo creates them in its AWS and destroys them.
    queue = b.queue(f"{domain}EventsQueue", dlq=dlq)
    b.subscription(topic, queue)
    out, alias = export_alias(b.stack, topic, "TopicArn")
    b.output(out, b.resources[topic]["physicalId"], alias)
    b.output("EventsTopicArn", b.resources[topic]["physicalId"])
    b.output("EventsQueueUrl", b.resources[queue]["physicalId"])


def build_api(b: StackBuilder, domain: str, data: StackBuilder | None, events: StackBuilder | None) -> None:
    role = b.role(f"{domain}Handler/ServiceRole", managed=["service-role/AWSLambdaBasicExecutionRole"])
    queue_dlq = b.queue(f"{domain}WorkDlq")
    queue = b.queue(f"{domain}WorkQueue", dlq=queue_dlq)
    param = b.parameter(
        f"{domain}EndpointParam",
        f"/{b.spec.env.lower()}/{domain.lower()}/endpoint",
        f"https://{domain.lower()}.{b.region}.internal.acme.io",
    )
    env: dict[str, Any] = {
        "QUEUE_URL": {"Ref": queue},
        "ENDPOINT_PARAM": {"Ref": param},
        "POWERTOOLS_SERVICE_NAME": domain.lower(),
    }
    statements: list[dict[str, Any]] = [
        {
            "Effect": "Allow",
            "Action": ["sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
            "Resource": {"Fn::GetAtt": [queue, "Arn"]},
        },
        {
            "Effect": "Allow",
            "Action": "ssm:GetParameter",
            "Resource": {
                "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter"
                + b.resources[param]["physicalId"]
            },
        },
    ]
    if data is not None:
        table_lid = next(k for k, v in data.resources.items() if v["resourceType"] == "AWS::DynamoDB::Table")
        _, alias = export_alias(data.stack, table_lid, "Arn")
        env["TABLE_ARN"] = data.outputs[alias]
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
                "Resource": data.outputs[alias],
            }
        )
        b.imports.append({"sourceStack": data.stack, "sourceRegion": data.region, "exportName": alias})
    if events is not None:
        env["EVENTS_TOPIC_ARN"] = events.outputs["EventsTopicArn"]
        b.output_reads.append(
            {"sourceStack": events.stack, "sourceRegion": events.region, "outputName": "EventsTopicArn"}
        )
    policy = b.policy(role, statements)
    fn = b.function(f"{domain}Handler", role, env, deps=[policy, queue, param])
    b.log_group(fn, retain=False)
    b.output("HandlerFunctionArn", b.resources[fn]["attributes"]["Arn"])
    b.output("WorkQueueUrl", b.resources[queue]["physicalId"])


def build_analytics(b: StackBuilder, domain: str) -> None:
    bucket = b.bucket(f"{domain}Lake", retain=True)
    b.glue(f"{domain}Catalog", bucket)
    role = b.role(f"{domain}Crawler/Role", service="glue.amazonaws.com", managed=["service-role/AWSGlueServiceRole"])
    b.policy(
        role,
        [
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [{"Fn::GetAtt": [bucket, "Arn"]}, {"Fn::Sub": "${" + bucket + ".Arn}/*"}],
            }
        ],
    )
    # The nightly crawl: an EventBridge rule, a type only Cloud Control deletes.
    rule_lid = b.lid(f"{domain}NightlyCrawl")
    b.add(
        rule_lid,
        "AWS::Events::Rule",
        f"{b.stack[:30]}-{rule_lid[:20]}-{_suffix(b.rng, 12, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')}",
        {"ScheduleExpression": "cron(0 2 * * ? *)", "State": "ENABLED"},
        {"Arn": b.arn("events", f"rule/{rule_lid}")},
        deps=[role],
    )
    b.output("LakeBucketName", b.resources[bucket]["physicalId"])


def build_db(b: StackBuilder, domain: str) -> None:
    key = b.kms_key(f"{domain}DbKey")
    secret = b.secret(f"{domain}DbCredentials", f"{b.spec.env.lower()}/{domain.lower()}/db", kms=key)
    db = b.database(f"{domain}Db", secret, key)
    b.output("DbEndpoint", b.resources[db]["attributes"]["Endpoint.Address"])
    b.output("DbSecretArn", b.resources[secret]["physicalId"])
