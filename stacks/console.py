"""Where a resource lives in the AWS console, from its type and physical id (or its ARN).

A small table of the types cdkd stacks hold most, then a fallback on the ARN's service;
no link where neither knows the page (a wrong link is worse than none). Physical ids come
from untrusted records: every part put in a URL is percent-encoded, and a region that does
not look like one gives no link.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import quote

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")


def _q(value: str) -> str:
    return quote(value, safe="")


def _home(service: str, region: str, fragment: str) -> str:
    return f"https://{region}.console.aws.amazon.com/{service}/home?region={region}#{fragment}"


# resource type -> (physical id, region) -> URL
_BY_TYPE: dict[str, Callable[[str, str], str]] = {
    "AWS::S3::Bucket": lambda pid, r: f"https://s3.console.aws.amazon.com/s3/buckets/{_q(pid)}?region={r}",
    "AWS::Lambda::Function": lambda pid, r: _home("lambda", r, f"/functions/{_q(pid)}"),
    "AWS::DynamoDB::Table": lambda pid, r: _home("dynamodbv2", r, f"table?name={_q(pid)}"),
    "AWS::SQS::Queue": lambda pid, r: _home("sqs/v3", r, f"/queues/{_q(pid)}"),
    "AWS::SNS::Topic": lambda pid, r: _home("sns/v3", r, f"/topic/{_q(pid)}"),
    "AWS::IAM::Role": lambda pid, r: f"https://console.aws.amazon.com/iam/home#/roles/details/{_q(pid)}",
    "AWS::IAM::Policy": lambda pid, r: f"https://console.aws.amazon.com/iam/home#/policies/details/{_q(pid)}",
    "AWS::Logs::LogGroup": lambda pid, r: _home("cloudwatch", r, f"logsV2:log-groups/log-group/{_q(_q(pid))}"),
    "AWS::KMS::Key": lambda pid, r: _home("kms", r, f"/kms/keys/{_q(pid)}"),
    "AWS::EC2::VPC": lambda pid, r: _home("vpcconsole", r, f"VpcDetails:VpcId={_q(pid)}"),
    "AWS::EC2::Subnet": lambda pid, r: _home("vpcconsole", r, f"SubnetDetails:subnetId={_q(pid)}"),
    "AWS::EC2::SecurityGroup": lambda pid, r: _home("ec2", r, f"SecurityGroup:groupId={_q(pid)}"),
    "AWS::EC2::Instance": lambda pid, r: _home("ec2", r, f"InstanceDetails:instanceId={_q(pid)}"),
    "AWS::StepFunctions::StateMachine": lambda pid, r: _home("states", r, f"/statemachines/view/{_q(pid)}"),
    "AWS::Events::Rule": lambda pid, r: _home("events", r, f"/eventbus/default/rules/{_q(pid)}"),
    "AWS::SSM::Parameter": lambda pid, r: (
        f"https://{r}.console.aws.amazon.com/systems-manager/parameters/{_q(pid.lstrip('/'))}/description?region={r}"
    ),
}

# ARN service -> (arn, resource part, region) -> URL
_BY_ARN_SERVICE: dict[str, Callable[[str, str, str], str | None]] = {
    "sns": lambda arn, res, r: _home("sns/v3", r, f"/topic/{_q(arn)}"),
    "states": lambda arn, res, r: _home("states", r, f"/statemachines/view/{_q(arn)}"),
    "lambda": lambda arn, res, r: (
        _home("lambda", r, f"/functions/{_q(res.split(':')[1])}") if res.startswith("function:") else None
    ),
    "s3": lambda arn, res, r: (
        f"https://s3.console.aws.amazon.com/s3/buckets/{_q(res)}?region={r}" if res and "/" not in res else None
    ),
    "iam": lambda arn, res, r: (
        f"https://console.aws.amazon.com/iam/home#/roles/details/{_q(res.split('/')[-1])}"
        if res.startswith("role/")
        else None
    ),
    "dynamodb": lambda arn, res, r: (
        _home("dynamodbv2", r, f"table?name={_q(res.split('/')[1])}") if res.startswith("table/") else None
    ),
    "secretsmanager": lambda arn, res, r: (
        f"https://{r}.console.aws.amazon.com/secretsmanager/secret?name={_q(arn)}&region={r}"
        if res.startswith("secret:")
        else None
    ),
}


def arn_url(arn: str, default_region: str) -> str | None:
    """The console page of an ARN, by its service; its own region wins over the stack's."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or not parts[1].startswith("aws"):
        return None
    _arn, _partition, service, region, _account, resource = parts
    region = region or default_region
    build = _BY_ARN_SERVICE.get(service)
    if build is None or not _REGION.match(region or ""):
        return None
    return build(arn, resource, region)


def console_url(resource_type: str, physical_id: str, region: str | None) -> str | None:
    """The AWS console page of a resource, or None when unknown (or the id is composite)."""
    if not physical_id or "|" in physical_id or len(physical_id) > 2048:
        return None
    if physical_id.startswith("arn:"):
        return arn_url(physical_id, region or "")
    build = _BY_TYPE.get(resource_type)
    if build is None or not _REGION.match(region or ""):
        return None
    return build(physical_id, region)
