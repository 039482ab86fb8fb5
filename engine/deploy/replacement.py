"""Does a change to a top-level property replace the resource? (deploy-engine.md 5.5)

In cdkd's order: a type change replaces; then cdkd's hand rule table (a key it classifies
in any way is final); then the CloudFormation registry schema's `createOnlyProperties`
(a one-segment path replaces on any change, a nested path only when the value at that path
differs, a path that cannot be followed counts as changed); otherwise in place.

The schemas are read offline from cfn-lint's bundled provider schemas (the pinned cfn-lint
package ships them per region), so a plan is the same with and without AWS access. If
cfn-lint cannot be imported, `_FALLBACK_CREATE_ONLY` keeps the MVP types' paths.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.deploy.intrinsics import is_intrinsic, json_equal


def _durable_config_toggled(old: Any, new: Any) -> bool:
    return (old is None) != (new is None)


def _attribute_type_changed(old: Any, new: Any) -> bool:
    def types(value: Any) -> dict[str, str]:
        out: dict[str, str] = {}
        if isinstance(value, list):
            for d in value:
                if (
                    isinstance(d, dict)
                    and isinstance(d.get("AttributeName"), str)
                    and isinstance(d.get("AttributeType"), str)
                ):
                    out[d["AttributeName"]] = d["AttributeType"]
        return out

    before, after = types(old), types(new)
    return any(name in after and after[name] != t for name, t in before.items())


def _budget_name_changed(old: Any, new: Any) -> bool:
    def name(v: Any) -> str | None:
        n = v.get("BudgetName") if isinstance(v, dict) else None
        return n if isinstance(n, str) else None

    a, b = name(old), name(new)
    return not (a is None and b is None) and a != b


@dataclass(frozen=True)
class HandRule:
    replace: frozenset[str]
    update: frozenset[str] = frozenset()
    conditional: dict[str, Callable[[Any, Any], bool]] = field(default_factory=dict)

    def classifies(self, key: str) -> bool:
        return key in self.replace or key in self.update or key in self.conditional


def _rule(replace: str, update: str = "", **conditional: Callable[[Any, Any], bool]) -> HandRule:
    return HandRule(frozenset(replace.split()), frozenset(update.split()), dict(conditional))


# cdkd's ReplacementRulesRegistry as of 0.284.40 (28 types), as data. Later cdkd adds
# a conditional AWS::Glue::Table TableInput rule, kept out here for parity.
HAND_RULES: dict[str, HandRule] = {
    "AWS::S3::Bucket": _rule(
        "BucketName",
        "Tags VersioningConfiguration LifecycleConfiguration PublicAccessBlockConfiguration BucketEncryption "
        "LoggingConfiguration WebsiteConfiguration CorsConfiguration NotificationConfiguration",
    ),
    "AWS::Lambda::Function": _rule(
        "FunctionName TenancyConfig",
        "Code Handler Runtime Description Timeout MemorySize Role Environment Tags VpcConfig DeadLetterConfig "
        "TracingConfig Layers FileSystemConfigs Architectures CodeSigningConfigArn RuntimeManagementConfig",
        DurableConfig=_durable_config_toggled,
    ),
    "AWS::Lambda::LayerVersion": _rule(
        "Content LayerName Description CompatibleRuntimes CompatibleArchitectures LicenseInfo"
    ),
    "AWS::Lambda::Version": _rule("CodeSha256 Description FunctionName ProvisionedConcurrencyConfig RuntimePolicy"),
    "AWS::Lambda::EventInvokeConfig": _rule(
        "FunctionName Qualifier", "MaximumEventAgeInSeconds MaximumRetryAttempts DestinationConfig"
    ),
    "AWS::DynamoDB::Table": _rule(
        "TableName KeySchema",
        "BillingMode ProvisionedThroughput GlobalSecondaryIndexes LocalSecondaryIndexes StreamSpecification "
        "SSESpecification Tags TimeToLiveSpecification PointInTimeRecoverySpecification",
        AttributeDefinitions=_attribute_type_changed,
    ),
    "AWS::SQS::Queue": _rule(
        "QueueName FifoQueue",
        "DelaySeconds MaximumMessageSize MessageRetentionPeriod ReceiveMessageWaitTimeSeconds VisibilityTimeout "
        "RedrivePolicy Tags ContentBasedDeduplication",
    ),
    "AWS::IAM::Role": _rule(
        "RoleName",
        "AssumeRolePolicyDocument Description ManagedPolicyArns MaxSessionDuration Path PermissionsBoundary "
        "Policies Tags",
    ),
    "AWS::SNS::Topic": _rule("TopicName", "DisplayName Subscription KmsMasterKeyId Tags"),
    "AWS::CodeCommit::Repository": _rule("", "RepositoryName RepositoryDescription KmsKeyId Tags"),
    "AWS::ECR::Repository": _rule(
        "RepositoryName", "ImageScanningConfiguration ImageTagMutability LifecyclePolicy RepositoryPolicyText Tags"
    ),
    "AWS::Logs::LogGroup": _rule("LogGroupName", "RetentionInDays KmsKeyId"),
    "AWS::Kinesis::Stream": _rule("Name", "RetentionPeriodHours ShardCount StreamModeDetails StreamEncryption Tags"),
    "AWS::SecretsManager::Secret": _rule(
        "Name", "Description KmsKeyId SecretString GenerateSecretString ReplicaRegions Tags"
    ),
    "AWS::StepFunctions::StateMachine": _rule(
        "StateMachineName StateMachineType",
        "DefinitionString DefinitionS3Location Definition DefinitionSubstitutions RoleArn LoggingConfiguration "
        "TracingConfiguration Tags EncryptionConfiguration",
    ),
    "AWS::Events::Rule": _rule(
        "Name EventBusName", "ScheduleExpression EventPattern State Description Targets RoleArn"
    ),
    "AWS::SSM::Parameter": _rule("Name", "Value Description Type Tier AllowedPattern Policies DataType Tags"),
    "AWS::Budgets::Budget": _rule("", "NotificationsWithSubscribers ResourceTags", Budget=_budget_name_changed),
    "AWS::CloudWatch::Alarm": _rule(
        "AlarmName",
        "ComparisonOperator EvaluationPeriods DatapointsToAlarm Threshold TreatMissingData MetricName Namespace "
        "Period Statistic ExtendedStatistic Dimensions Metrics AlarmDescription ActionsEnabled AlarmActions "
        "OKActions InsufficientDataActions Unit EvaluateLowSampleCountPercentile ThresholdMetricId Tags",
    ),
    "AWS::ApiGateway::RestApi": _rule(
        "Name", "Description Policy EndpointConfiguration BinaryMediaTypes MinimumCompressionSize Tags"
    ),
    "AWS::AppSync::GraphQLApi": _rule(
        "ApiType Visibility",
        "AuthenticationType LogConfig XrayEnabled Tags UserPoolConfig OpenIDConnectConfig LambdaAuthorizerConfig "
        "AdditionalAuthenticationProviders EnhancedMetricsConfig EnvironmentVariables IntrospectionConfig "
        "QueryDepthLimit ResolverCountLimit OwnerContact MergedApiExecutionRoleArn",
    ),
    "AWS::RDS::DBProxy": _rule("DBProxyName EngineFamily VpcSubnetIds"),
    "AWS::RDS::DBProxyEndpoint": _rule("DBProxyName DBProxyEndpointName VpcSubnetIds TargetRole"),
    "AWS::RDS::DBProxyTargetGroup": _rule("DBProxyName TargetGroupName"),
    "AWS::EC2::Subnet": _rule("VpcId CidrBlock AvailabilityZone", "MapPublicIpOnLaunch Tags"),
    "AWS::EC2::Instance": _rule("EbsOptimized AvailabilityZone ImageId SubnetId KeyName NetworkInterfaces"),
    "AWS::EC2::Volume": _rule(
        "AvailabilityZone AvailabilityZoneId Encrypted KmsKeyId OutpostArn SnapshotId",
        "AutoEnableIO Iops Size Throughput VolumeType Tags",
    ),
    "AWS::ECS::TaskDefinition": _rule(
        "Family ContainerDefinitions Cpu Memory NetworkMode RequiresCompatibilities ExecutionRoleArn TaskRoleArn "
        "Volumes"
    ),
}

# Used only when cfn-lint's schemas cannot be loaded (the MVP types, us-east-1, cfn-lint 1.58)
_FALLBACK_CREATE_ONLY: dict[str, tuple[str, ...]] = {
    "AWS::SQS::Queue": ("FifoQueue", "QueueName"),
    "AWS::SNS::Topic": ("TopicName", "FifoTopic"),
    "AWS::SNS::Subscription": ("Endpoint", "Protocol", "TopicArn"),
    "AWS::SSM::Parameter": ("Name",),
    "AWS::Logs::LogGroup": ("LogGroupName",),
    "AWS::S3::Bucket": ("BucketName", "ObjectLockEnabled"),
    "AWS::S3::BucketPolicy": ("Bucket",),
    "AWS::IAM::Role": ("Path", "RoleName"),
    "AWS::IAM::ManagedPolicy": ("ManagedPolicyName", "Description", "Path"),
    "AWS::Lambda::Function": ("FunctionName", "PackageType"),
    "AWS::DynamoDB::Table": ("TableName", "ImportSourceSpecification"),
    "AWS::SecretsManager::Secret": ("Name",),
    "AWS::KMS::Alias": ("AliasName",),
}


@functools.lru_cache(maxsize=1024)
def create_only_paths(resource_type: str, region: str = "us-east-1") -> tuple[tuple[str, ...], ...]:
    """The type's create-only property paths, as segment tuples below `/properties/`."""
    raw: list[str] | None = None
    try:
        from cfnlint.schema import PROVIDER_SCHEMA_MANAGER  # offline: schemas ship in the wheel
    except Exception:  # cfn-lint missing or broken: fall back to the table above
        PROVIDER_SCHEMA_MANAGER = None
    if PROVIDER_SCHEMA_MANAGER is not None:
        for r in dict.fromkeys((region, "us-east-1")):
            try:
                raw = list(
                    PROVIDER_SCHEMA_MANAGER.get_resource_schema(r, resource_type).schema.get("createOnlyProperties")
                    or []
                )
                break
            except Exception:  # unknown type or region in cfn-lint's data
                continue
    if raw is None:
        return tuple((p,) for p in _FALLBACK_CREATE_ONLY.get(resource_type, ()))
    out = []
    for path in raw:
        if isinstance(path, str) and path.startswith("/properties/"):
            out.append(tuple(path[len("/properties/") :].split("/")))
    return tuple(out)


_MISSING = object()


def _follow(value: Any, segments: tuple[str, ...]) -> Any:
    """The value at the path, _MISSING when absent, or raise LookupError when the path
    cannot be followed (wildcard, array or scalar in the way, an intrinsic)."""
    node = value
    for seg in segments:
        if node is _MISSING or node is None:
            return _MISSING
        if seg == "*" or not isinstance(node, dict) or is_intrinsic(node):
            raise LookupError(seg)
        node = node.get(seg, _MISSING)
    if isinstance(node, dict) and is_intrinsic(node):
        raise LookupError("intrinsic")
    return node


def hand_rule_verdict(resource_type: str, key: str, old: Any, new: Any) -> bool | None:
    rule = HAND_RULES.get(resource_type)
    if rule is None or not rule.classifies(key):
        return None
    if key in rule.replace:
        return True
    if key in rule.update:
        return False
    return bool(rule.conditional[key](old, new))


def schema_verdict(resource_type: str, key: str, old: Any, new: Any, region: str) -> bool:
    for path in create_only_paths(resource_type, region):
        if path[0] != key:
            continue
        if len(path) == 1:
            return True
        try:
            a = _follow(old, path[1:])
            b = _follow(new, path[1:])
        except LookupError:
            return True
        if a is _MISSING and b is _MISSING:
            continue
        if a is _MISSING or b is _MISSING or not json_equal(a, b):
            return True
    return False


def requires_replacement(resource_type: str, key: str, old: Any, new: Any, region: str = "us-east-1") -> bool:
    verdict = hand_rule_verdict(resource_type, key, old, new)
    if verdict is not None:
        return verdict
    return schema_verdict(resource_type, key, old, new, region)


def is_create_only(resource_type: str, key: str, region: str = "us-east-1") -> bool:
    """Whether any create-only path starts at `key` (for the admin's stricter propagation)."""
    return any(path[0] == key for path in create_only_paths(resource_type, region))
