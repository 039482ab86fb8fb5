"""AWS::Lambda::Function (DeleteFunction) and AWS::Lambda::Permission (RemovePermission).

A permission's physical id is the bare statement id (what cdkd records), or
`<function name or ARN>|<statementId>` (the older Cloud Control path, and the legacy
`function|statementId` form). The function comes from the `FunctionName` property, else from
the physical id. Per seed 004 the row is skipped, no AWS call, when neither names the
function, or when the physical id carries no statement id.

Deploy (reference 5.7): a function's physical id is its name (max 64), attributes `Arn` and
`FunctionName`; code from S3 (`S3Bucket`/`S3Key`, a published file asset) or inline
`ZipFile` (written as `index.<ext>` of the runtime into an in-memory zip, as CloudFormation
does); CreateFunction does not wait for Active (cdkd neither). A role that Lambda cannot
assume yet ("cannot be assumed", IAM propagation) is retried by the runner's dense schedule.
A permission's physical id is its statement id (the logical id without characters outside
`[a-zA-Z0-9_-]`), attribute `Id`.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from typing import Any

from botocore.exceptions import ClientError

from engine.deploy.names import physical_name
from engine.providers.base import (
    COMPOSITE_ID_SKIP_REASON,
    DELETED,
    Clients,
    CreateResult,
    DeployCalls,
    DeployTarget,
    ProviderError,
    ResourceRef,
    SdkProvider,
    Skip,
    UpdateResult,
    already_exists,
    error_code,
    is_redacted,
    parse_arn,
    provider_error,
    region_of,
    tag_delta,
    tag_map,
)

FUNCTION = "AWS::Lambda::Function"
PERMISSION = "AWS::Lambda::Permission"
CONFIG_KEYS = (
    "Role",
    "Handler",
    "Runtime",
    "Description",
    "Timeout",
    "MemorySize",
    "Environment",
    "TracingConfig",
    "DeadLetterConfig",
    "VpcConfig",
    "Layers",
    "FileSystemConfigs",
    "EphemeralStorage",
    "KmsKeyArn",
    "LoggingConfig",
)
_STATEMENT = re.compile(r"[^a-zA-Z0-9_-]")


def inline_zip(source: str, runtime: str) -> bytes:
    """CloudFormation's ZipFile: the source as `index.<ext>` of the runtime, zipped."""
    ext = "py" if runtime.startswith("python") else "js"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo(f"index.{ext}", date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        zf.writestr(info, source)
    return buf.getvalue()


def _code(code: Any, runtime: str) -> dict[str, Any]:
    code = code if isinstance(code, dict) else {}
    if isinstance(code.get("ZipFile"), str):
        return {"ZipFile": inline_zip(code["ZipFile"], runtime)}
    out = {k: code[k] for k in ("S3Bucket", "S3Key", "S3ObjectVersion", "ImageUri") if k in code}
    return out


def statement_id(logical_id: str) -> str:
    cleaned = _STATEMENT.sub("", logical_id)
    if len(cleaned) > 100:
        raise ProviderError(f"{logical_id} ({PERMISSION}): a statement id over 100 characters is not supported yet")
    return cleaned


NOT_FOUND_CODES = frozenset({"ResourceNotFoundException"})


class FunctionProvider(SdkProvider, DeployCalls):
    types = (FUNCTION,)
    handled = frozenset({"FunctionName", "Code", "Tags", "Architectures", *CONFIG_KEYS})
    not_found_codes = NOT_FOUND_CODES
    action = "DeleteFunction"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        # DeleteFunction takes a name or an ARN; an ARN's region wins over the stack's.
        clients("lambda", region_of(ref, physical_id)).delete_function(FunctionName=physical_id)
        return DELETED

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        name = physical_name(FUNCTION, logical_id, properties, stack_name=target.stack_name)
        lam = clients("lambda", target.region)
        params: dict[str, Any] = {
            "FunctionName": name,
            "Code": _code(properties.get("Code"), str(properties.get("Runtime", ""))),
        }
        for key in (*CONFIG_KEYS, "Architectures"):
            if key in properties:
                params[key] = properties[key]
        tags = tag_map(properties.get("Tags"))
        if tags:
            params["Tags"] = tags
        try:
            made = lam.create_function(**params)
        except ClientError as exc:
            if error_code(exc) == "ResourceConflictException":
                raise already_exists(logical_id, resource_type, name) from None
            raise provider_error(ResourceRef(logical_id, FUNCTION, name), "CreateFunction", exc) from None
        return CreateResult(name, {"Arn": made["FunctionArn"], "FunctionName": name})

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        name = ref.physical_id or ""
        lam = clients("lambda", region_of(ref, name))
        old, lid = ref.properties, ref.logical_id
        if old.get("Code") != properties.get("Code") or old.get("Architectures") != properties.get("Architectures"):
            code = _code(properties.get("Code"), str(properties.get("Runtime", "")))
            extra = {"Architectures": properties["Architectures"]} if "Architectures" in properties else {}
            self._guarded(
                lid, FUNCTION, name, "UpdateFunctionCode", lam.update_function_code, FunctionName=name, **code, **extra
            )
        config = {k: properties[k] for k in CONFIG_KEYS if k in properties and old.get(k) != properties[k]}
        for key in ("Description", "Environment", "Layers"):
            if key in old and key not in properties:
                config[key] = {"Description": "", "Environment": {"Variables": {}}, "Layers": []}[key]
        if config:
            self._guarded(
                lid,
                FUNCTION,
                name,
                "UpdateFunctionConfiguration",
                lam.update_function_configuration,
                FunctionName=name,
                **config,
            )
        arn = self._guarded(lid, FUNCTION, name, "GetFunction", lam.get_function, FunctionName=name)["Configuration"][
            "FunctionArn"
        ]
        add, remove = tag_delta(old.get("Tags"), properties.get("Tags"))
        if remove:
            self._guarded(lid, FUNCTION, name, "UntagResource", lam.untag_resource, Resource=arn, TagKeys=remove)
        if add:
            self._guarded(lid, FUNCTION, name, "TagResource", lam.tag_resource, Resource=arn, Tags=add)
        return UpdateResult(name, {"Arn": arn, "FunctionName": name})

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        name = ref.physical_id or ""
        try:
            conf = clients("lambda", region_of(ref, name)).get_function(FunctionName=name)["Configuration"]
        except ClientError:
            return None
        out: dict[str, Any] = {"FunctionName": name}
        for key in ("Handler", "Runtime", "Role", "Description", "Timeout", "MemorySize"):
            if key in conf:
                out[key] = conf[key]
        return out


def split_permission_id(physical_id: str) -> tuple[str | None, str]:
    """(function from the physical id or None, statement id); Skip when it does not decode."""
    if "|" not in physical_id:
        return None, physical_id
    function, _, statement = physical_id.rpartition("|")
    if not statement.strip():
        raise Skip(
            f"{COMPOSITE_ID_SKIP_REASON} (the physical id carries no StatementId; expected <function>|<statementId>)"
        )
    if not function.strip():
        raise Skip(f"{COMPOSITE_ID_SKIP_REASON} (expected <function>|<statementId>)")
    return function, statement


class PermissionProvider(SdkProvider, DeployCalls):
    types = (PERMISSION,)
    handled = frozenset(
        {
            "FunctionName",
            "Action",
            "Principal",
            "SourceArn",
            "SourceAccount",
            "EventSourceToken",
            "PrincipalOrgID",
            "FunctionUrlAuthType",
        }
    )

    def create(
        self, clients: Clients, logical_id: str, resource_type: str, properties: dict, target: DeployTarget
    ) -> CreateResult:
        sid = statement_id(logical_id)
        function = str(properties.get("FunctionName") or "")
        arn = parse_arn(function)
        lam = clients("lambda", (arn.region if arn and arn.region else "") or target.region)
        params = {k: properties[k] for k in self.handled if k in properties}
        params["StatementId"] = sid
        if sid in self._statement_ids(lam, logical_id, function):
            # AddPermission of a taken id fails on AWS but moto overwrites: ask first, never adopt
            raise already_exists(logical_id, resource_type, sid)
        try:
            lam.add_permission(**params)
        except ClientError as exc:
            if error_code(exc) == "ResourceConflictException":
                raise already_exists(logical_id, resource_type, sid) from None
            raise provider_error(ResourceRef(logical_id, PERMISSION, sid), "AddPermission", exc) from None
        return CreateResult(sid, {"Id": sid})

    def _statement_ids(self, lam: Any, logical_id: str, function: str) -> set[str]:
        try:
            policy = lam.get_policy(FunctionName=function)["Policy"]
        except ClientError as exc:
            if error_code(exc) in NOT_FOUND_CODES:  # no resource policy yet (or no function: AddPermission says)
                return set()
            raise provider_error(ResourceRef(logical_id, PERMISSION, function), "GetPolicy", exc) from None
        try:
            statements = json.loads(policy).get("Statement") or []
        except (ValueError, AttributeError):
            return set()
        return {s.get("Sid") for s in statements if isinstance(s, dict) and isinstance(s.get("Sid"), str)}

    def update(self, clients: Clients, ref: ResourceRef, properties: dict, target: DeployTarget) -> UpdateResult:
        # every property of a permission is create-only: the plan replaces it instead
        raise ProviderError(f"{ref.logical_id} ({PERMISSION}): a permission cannot be updated in place")

    def read(self, clients: Clients, ref: ResourceRef) -> dict | None:
        return None

    not_found_codes = NOT_FOUND_CODES  # the function or the statement is gone
    action = "RemovePermission"

    def _delete(self, clients: Clients, ref: ResourceRef, physical_id: str, snapshot: bool) -> str:
        from_id, statement = split_permission_id(physical_id)
        prop = ref.properties.get("FunctionName")
        function = prop if isinstance(prop, str) and prop.strip() and not is_redacted(prop) else from_id
        if not function:
            raise Skip(
                "neither a FunctionName property nor a function in the physical id: the statement stays on the "
                "function's resource policy; repair FunctionName in state.json and run the destroy again"
            )
        arn = parse_arn(function)
        region = arn.region if arn and arn.region else ref.region
        clients("lambda", region).remove_permission(FunctionName=function, StatementId=statement)
        return DELETED


PROVIDERS = (FunctionProvider(), PermissionProvider())
