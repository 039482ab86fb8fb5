"""What a recorded row answers for `Ref` and `Fn::GetAtt` (deploy-engine.md 2.2-2.3): the
physical id, translated for the types whose providers store a composite id, and the
attributes cdkd builds from the physical id when the record does not hold them."""

from __future__ import annotations

from typing import Any

# Ref of a composite physical id (deploy-engine.md 2.3)
_REF_LAST_SEGMENT = frozenset(
    [
        "AWS::ApiGateway::Model",
        "AWS::ApiGateway::RequestValidator",
        "AWS::ApiGateway::Stage",
        "AWS::ApiGateway::Resource",
        "AWS::ApiGateway::Authorizer",
        "AWS::ApiGatewayV2::Stage",
        "AWS::ApiGatewayV2::Route",
        "AWS::ApiGatewayV2::Integration",
        "AWS::ApiGatewayV2::Model",
        "AWS::ApiGatewayV2::Deployment",
        "AWS::ApiGatewayV2::RouteResponse",
        "AWS::ApiGatewayV2::IntegrationResponse",
        "AWS::Cognito::UserPoolClient",
        "AWS::Cognito::UserPoolResourceServer",
        "AWS::Cognito::UserPoolGroup",
        "AWS::Cognito::UserPoolIdentityProvider",
        "AWS::Cognito::UserPoolDomain",
        "AWS::Cognito::UserPoolUser",
        "AWS::AppConfig::Environment",
        "AWS::AppConfig::ConfigurationProfile",
        "AWS::AppConfig::HostedConfigurationVersion",
        "AWS::AppConfig::Deployment",
        "AWS::S3Tables::Namespace",
        "AWS::Glue::Table",
    ]
)
_REF_FIRST_SEGMENT = frozenset(
    [
        "AWS::EC2::EIP",
        "AWS::ApiGateway::Deployment",
        "AWS::ApiGateway::DocumentationPart",
        "AWS::ApiGatewayV2::Authorizer",
        "AWS::ApiGatewayV2::ApiMapping",
        "AWS::ECS::Service",
    ]
)


def ref_value(resource_type: str, row: dict[str, Any]) -> Any:
    """None when the row holds no physical id (the caller's "known after apply")."""
    pid = row.get("physicalId")
    if not isinstance(pid, str):
        return None
    if resource_type == "AWS::S3Tables::Table" and pid.startswith("arn:") and "|" not in pid:
        name = (row.get("properties") or {}).get("TableName")
        return name if isinstance(name, str) else pid
    if resource_type in _REF_LAST_SEGMENT:
        return pid.rsplit("|", 1)[-1]
    if resource_type in _REF_FIRST_SEGMENT:
        return pid.split("|", 1)[0]
    if resource_type == "AWS::Events::Rule" and ":rule/" in pid:
        return pid.split(":rule/", 1)[1]
    if resource_type == "AWS::CloudTrail::Trail" and ":trail/" in pid:
        return pid.split(":trail/", 1)[1]
    if resource_type == "AWS::Route53::RecordSet" and pid.count("|") == 2:
        return pid.split("|")[1]
    attr = {
        "AWS::AppSync::ApiKey": "Arn",
        "AWS::AppSync::DataSource": "DataSourceArn",
        "AWS::AppSync::Resolver": "ResolverArn",
    }.get(resource_type)
    if attr:
        value = (row.get("attributes") or {}).get(attr)
        if isinstance(value, str):
            return value
    prop = {"AWS::Backup::BackupSelection": "SelectionId", "AWS::CodeCommit::Repository": "RepositoryId"}.get(
        resource_type
    )
    if prop:
        value = (row.get("properties") or {}).get(prop)
        if isinstance(value, str):
            return value
    return pid


def construct_attribute(
    rtype: str, pid: str, attr: str, *, region: str, account: str, partition: str, url_suffix: str
) -> Any:
    """An attribute built from the physical id where cdkd builds one; None when unknown."""
    p = partition
    if rtype == "AWS::SQS::Queue":
        name = pid.rstrip("/").rsplit("/", 1)[-1]
        return {"QueueUrl": pid, "QueueName": name, "Arn": f"arn:{p}:sqs:{region}:{account}:{name}"}.get(attr)
    if rtype == "AWS::SNS::Topic":
        return {"TopicArn": pid, "TopicName": pid.rsplit(":", 1)[-1]}.get(attr)
    if rtype == "AWS::S3::Bucket":
        suffix = url_suffix
        return {
            "Arn": f"arn:{p}:s3:::{pid}",
            "DomainName": f"{pid}.s3.{suffix}",
            "RegionalDomainName": f"{pid}.s3.{region}.{suffix}",
        }.get(attr)
    if rtype == "AWS::Lambda::Function" and attr == "Arn":
        return f"arn:{p}:lambda:{region}:{account}:function:{pid}"
    if rtype == "AWS::DynamoDB::Table" and attr == "Arn":
        return f"arn:{p}:dynamodb:{region}:{account}:table/{pid}"
    if rtype == "AWS::Logs::LogGroup" and attr == "Arn":
        return f"arn:{p}:logs:{region}:{account}:log-group:{pid}:*"
    if rtype == "AWS::IAM::Role" and attr == "Arn":
        return f"arn:{p}:iam::{account}:role/{pid}"
    if rtype == "AWS::SSM::Parameter" and attr in ("Type", "Value"):
        return None
    return None
