"""Physical names exactly as cdkd generates them (deploy-engine.md 3.5; cdkd's
`src/provisioning/resource-name.ts`).

A name the template leaves out is built from `{stackName}-{logicalId}`: lowercased where
the type needs it, every character outside the type's allowed set replaced by `-`, runs of
`-` collapsed and trimmed, and, when longer than the type's maximum, cut to `max - 9`
characters (trailing `-` trimmed) plus `-` and the first 8 hex digits of the SHA-256 of the
UNSANITIZED base. Names have no random part, so cdkd and this engine address the same AWS
resource for the same template.

"Pattern B" types (IAM Role/User/Group/InstanceProfile/ManagedPolicy, ELBv2 LoadBalancer /
TargetGroup) run a template-supplied name through the same pipeline without the stack
prefix (cdkd's default since 0.94), so `my_role` becomes `my-role`. Other types use a
supplied name verbatim.

Lengths are counted in UTF-16 code units, as JavaScript counts them; stack names and
logical ids are ASCII in practice, so this only matters for a pathological supplied name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

DEFAULT_DISALLOWED = re.compile(r"[^a-zA-Z0-9-]")
SLASH_UNDERSCORE_DISALLOWED = re.compile(r"[^a-zA-Z0-9\-/_]")  # SSM, Logs, Secrets Manager
S3_DISALLOWED = re.compile(r"[^a-z0-9.-]")
_HYPHENS = re.compile(r"-{2,}")
_EDGES = re.compile(r"^-+|-+$")
_TRAILING = re.compile(r"-+$")


@dataclass(frozen=True)
class NameRule:
    max_length: int
    lowercase: bool = False
    disallowed: re.Pattern[str] = DEFAULT_DISALLOWED
    prefix: str = ""  # added in front of the generated name (SSM "/", Logs "/cdkd/")


def _js_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _js_prefix(text: str, units: int) -> str:
    """`text.substring(0, units)` in UTF-16 code units (a cut surrogate pair is dropped)."""
    if _js_len(text) == len(text):
        return text[:units]
    raw = text.encode("utf-16-le")[: units * 2]
    return raw.decode("utf-16-le", errors="ignore")


def generate(name: str, rule: NameRule, *, stack_name: str | None, prefix_stack: bool = True) -> str:
    """cdkd's `generateResourceName(name, options)` with the stack name in scope.

    `prefix_stack=False` is the user-supplied Pattern B path (no stack prefix)."""
    full = f"{stack_name}-{name}" if (stack_name and prefix_stack) else name
    sanitized = full.lower() if rule.lowercase else full
    sanitized = rule.disallowed.sub("-", sanitized)
    sanitized = _EDGES.sub("", _HYPHENS.sub("-", sanitized))
    if _js_len(sanitized) <= rule.max_length:
        return sanitized
    digest = hashlib.sha256(full.encode("utf-8", errors="surrogatepass")).hexdigest()[:8]
    head = _TRAILING.sub("", _js_prefix(sanitized, rule.max_length - len(digest) - 1))
    return f"{head}-{digest}"


# type -> (name property, rule); the types whose SDK provider generates a name
RULES: dict[str, tuple[str, NameRule]] = {
    "AWS::SQS::Queue": ("QueueName", NameRule(80)),
    "AWS::SNS::Topic": ("TopicName", NameRule(256)),
    "AWS::S3::Bucket": ("BucketName", NameRule(63, lowercase=True, disallowed=S3_DISALLOWED)),
    "AWS::Lambda::Function": ("FunctionName", NameRule(64)),
    "AWS::DynamoDB::Table": ("TableName", NameRule(255)),
    "AWS::IAM::Role": ("RoleName", NameRule(64)),
    "AWS::IAM::Policy": ("PolicyName", NameRule(64)),
    "AWS::IAM::ManagedPolicy": ("ManagedPolicyName", NameRule(128)),
    "AWS::IAM::User": ("UserName", NameRule(64)),
    "AWS::IAM::Group": ("GroupName", NameRule(128)),
    "AWS::IAM::InstanceProfile": ("InstanceProfileName", NameRule(128)),
    "AWS::SecretsManager::Secret": ("Name", NameRule(512, disallowed=SLASH_UNDERSCORE_DISALLOWED)),
    "AWS::SSM::Parameter": ("Name", NameRule(1023, disallowed=SLASH_UNDERSCORE_DISALLOWED, prefix="/")),
    "AWS::Logs::LogGroup": ("LogGroupName", NameRule(506, disallowed=SLASH_UNDERSCORE_DISALLOWED, prefix="/cdkd/")),
    "AWS::ElasticLoadBalancingV2::LoadBalancer": ("Name", NameRule(32)),
    "AWS::ElasticLoadBalancingV2::TargetGroup": ("Name", NameRule(32)),
}
PATTERN_B = frozenset(
    [
        "AWS::IAM::Role",
        "AWS::IAM::User",
        "AWS::IAM::Group",
        "AWS::IAM::InstanceProfile",
        "AWS::IAM::ManagedPolicy",
        "AWS::ElasticLoadBalancingV2::LoadBalancer",
        "AWS::ElasticLoadBalancingV2::TargetGroup",
    ]
)


def physical_name(resource_type: str, logical_id: str, properties: dict, *, stack_name: str) -> str:
    """The name the SDK provider creates the resource under: the template's own name
    (sanitized for Pattern B types) or the generated one. KeyError for a type with no rule."""
    prop, rule = RULES[resource_type]
    supplied = properties.get(prop)
    if isinstance(supplied, str) and supplied:
        if resource_type in PATTERN_B:
            return generate(supplied, rule, stack_name=stack_name, prefix_stack=False)
        return supplied
    return rule.prefix + generate(logical_id, rule, stack_name=stack_name)
