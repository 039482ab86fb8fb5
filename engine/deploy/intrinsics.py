"""CloudFormation intrinsics, parameters, conditions and pseudo parameters, resolved the way
`cdkd diff` resolves them (deploy-engine.md section 2): best effort, against the state record
as stored, never fetching a secret.

* `Resolver.resolve(value)` returns the resolved value or raises `ResolveError`; the diff
  then keeps the property's raw template value (cdkd's "known after apply").
  `KnownAfterApply` is the subclass for a value that only the deploy will know: a `Ref` /
  `Fn::GetAtt` of a resource not in state yet, an attribute the record does not hold.
* `Fn::Sub` keeps a placeholder it cannot resolve literally (`${X}`) and counts it in
  `Context.kept_placeholders`, as cdkd does.
* `{{resolve:ssm:...}}` is read through the caller's `ssm` callback; `secretsmanager` and
  `ssm-secure` references are left exactly as written, so they compare as expressions.
* `Fn::ImportValue` reads the exports index the caller passes (a dict or a loader called at
  most once, only when an import is met) and records `{exportName, sourceStack,
  sourceRegion}` in `Context.imports`.

No I/O here: the account id, region, exports and SSM values come from the caller.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.deploy.refs import construct_attribute, ref_value


class ResolveError(Exception):
    """The value cannot be resolved for the diff; the message says why."""


class KnownAfterApply(ResolveError):
    """The value depends on something only the deploy will know."""


class ParameterError(ValueError):
    """A parameter override that cannot be used (unknown name, malformed K=V)."""


class _NoValue:
    _instance: _NoValue | None = None

    def __new__(cls) -> _NoValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE = _NoValue()

SSMCallback = Callable[[str], "str | None"]

INTRINSIC_KEYS = frozenset(
    {
        "Ref",
        "Fn::Sub",
        "Fn::GetAtt",
        "Fn::Join",
        "Fn::Select",
        "Fn::Split",
        "Fn::If",
        "Fn::ImportValue",
        "Fn::FindInMap",
        "Fn::Base64",
        "Fn::GetAZs",
        "Fn::Equals",
        "Fn::And",
        "Fn::Or",
        "Fn::Not",
        "Fn::Cidr",
        "Fn::GetStackOutput",
    }
)

_DYNAMIC_RE = re.compile(r"\{\{resolve:(ssm|ssm-secure|secretsmanager):((?:(?!\}\}).){1,2048})\}\}")
SECRET_REF_RE = re.compile(r"\{\{resolve:(?:secretsmanager|ssm-secure):")
_SUB_RE = re.compile(r"\$\{([^}]*)\}")
SSM_TYPE_PREFIX = "AWS::SSM::Parameter::Value<"


def is_intrinsic(value: Any) -> bool:
    """A single-key object whose key is `Ref` or `Fn::...` (cdkd's intrinsic shape)."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    key = next(iter(value))
    return key == "Ref" or key.startswith("Fn::")


def contains_intrinsic(value: Any) -> bool:
    if isinstance(value, dict):
        return is_intrinsic(value) or any(contains_intrinsic(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_intrinsic(v) for v in value)
    return False


def has_secret_reference(value: Any) -> bool:
    if isinstance(value, str):
        return SECRET_REF_RE.search(value) is not None
    if isinstance(value, dict):
        return any(has_secret_reference(k) or has_secret_reference(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_secret_reference(v) for v in value)
    return False


# --- pseudo parameters -----------------------------------------------------------------------


def partition_for(region: str) -> str:
    for prefix, partition in (
        ("cn-", "aws-cn"),
        ("us-gov-", "aws-us-gov"),
        ("us-isob-", "aws-iso-b"),
        ("us-isof-", "aws-iso-f"),
        ("us-iso-", "aws-iso"),
        ("eu-isoe-", "aws-iso-e"),
        ("eusc-", "aws-eusc"),
    ):
        if region.startswith(prefix):
            return partition
    return "aws"


_URL_SUFFIX = {
    "aws-cn": "amazonaws.com.cn",
    "aws-iso": "c2s.ic.gov",
    "aws-iso-b": "sc2s.sgov.gov",
    "aws-iso-e": "cloud.adc-e.uk",
    "aws-iso-f": "csp.hci.ic.gov",
    "aws-eusc": "amazonaws.eu",
}


def url_suffix_for(region: str) -> str:
    return _URL_SUFFIX.get(partition_for(region), "amazonaws.com")


def pseudo_parameters(*, region: str, account: str, stack_name: str) -> dict[str, Any]:
    partition = partition_for(region)
    return {
        "AWS::Region": region,
        "AWS::AccountId": account,
        "AWS::Partition": partition,
        "AWS::URLSuffix": url_suffix_for(region),
        "AWS::StackName": stack_name,
        "AWS::StackId": f"arn:{partition}:cloudformation:{region}:{account}:stack/{stack_name}/cdkd",
        "AWS::NotificationARNs": "",
        "AWS::NoValue": NO_VALUE,
    }


# --- JS semantics the resolver copies --------------------------------------------------------


def js_string(value: Any) -> str:
    """JavaScript's String(x) for JSON values (how Fn::Join / Fn::Sub stringify)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join("" if v is None else js_string(v) for v in value)
    return "[object Object]"


def _norm_numbers(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, list):
        return [_norm_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm_numbers(v) for k, v in value.items()}
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Structural equality as cdkd compares properties: objects by keys, arrays in order,
    one number type (1 == 1.0) but a boolean is never a number and "1" is never 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    return a == b


def js_json(value: Any) -> str:
    """JSON.stringify(x) (compact; integral floats print as integers). AWS::NoValue is JS's
    undefined: "undefined" on its own, its name inside a structure (only messages use this)."""
    if value is NO_VALUE:
        return "undefined"
    return json.dumps(_norm_numbers(value), separators=(",", ":"), ensure_ascii=False, default=repr)


# --- parameters ------------------------------------------------------------------------------


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """`K=V` strings into a dict; the value may itself hold '='."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"parameter {item!r} is not of the form KEY=VALUE")
        out[key.strip()] = value
    return out


def coerce_parameter(ptype: str, value: str) -> Any:
    """A supplied value coerced by the parameter's Type, as cdkd's resolveParameters does."""
    inner = ptype[len(SSM_TYPE_PREFIX) : -1] if ptype.startswith(SSM_TYPE_PREFIX) else ptype
    if inner == "Number":
        try:
            number = float(value)
        except ValueError:
            raise ParameterError(f"value {value!r} is not a Number") from None
        return int(number) if number.is_integer() else number
    if inner == "List<Number>":
        return [coerce_parameter("Number", v.strip()) for v in value.split(",")]
    if inner == "CommaDelimitedList" or inner.startswith("List<"):
        return [v.strip() for v in value.split(",")]
    return value


def _references(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        if value.get("Ref") == name:
            return True
        sub = value.get("Fn::Sub")
        body = sub if isinstance(sub, str) else sub[0] if isinstance(sub, list) and sub else None
        if isinstance(body, str) and any(m.group(1) == name for m in _SUB_RE.finditer(body)):
            return True
        return any(_references(v, name) for v in value.values())
    if isinstance(value, list):
        return any(_references(v, name) for v in value)
    return False


@dataclass
class BoundParameters:
    values: dict[str, Any] = field(default_factory=dict)
    no_echo: set[str] = field(default_factory=set)
    unbound: dict[str, str] = field(default_factory=dict)  # name -> why it has no value
    ssm_typed: set[str] = field(default_factory=set)
    secret_fed: set[str] = field(default_factory=set)  # value is a secret {{resolve:...}}
    warnings: list[str] = field(default_factory=list)


def bind_parameters(
    template: dict[str, Any], overrides: dict[str, str] | None = None, ssm: SSMCallback | None = None
) -> BoundParameters:
    """Overrides (coerced by Type), else Default as written; SSM-typed parameters are read
    through `ssm` only when Resources, Outputs or Conditions reference them."""
    declared = template.get("Parameters") or {}
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise ParameterError(f"the template declares no parameter named {', '.join(unknown)}")
    bound = BoundParameters()
    readers = [template.get("Resources") or {}, template.get("Outputs") or {}, template.get("Conditions") or {}]
    for name, decl in declared.items():
        decl = decl if isinstance(decl, dict) else {}
        ptype = decl.get("Type") if isinstance(decl.get("Type"), str) else "String"
        if decl.get("NoEcho") in (True, "true", "True"):
            bound.no_echo.add(name)
        if name in overrides:
            raw: Any = overrides[name]
            supplied = True
        elif "Default" in decl:
            raw = decl["Default"]
            supplied = False
        else:
            bound.unbound[name] = f"parameter {name} has no value and no Default"
            continue
        if ptype.startswith(SSM_TYPE_PREFIX):
            bound.ssm_typed.add(name)
            if not any(_references(r, name) for r in readers):
                continue  # cdkd pays nothing for BootstrapVersion, read only by Rules
            if ssm is None:
                bound.unbound[name] = f"parameter {name} is SSM-typed and no SSM reader was given"
                continue
            try:
                looked = ssm(str(raw))
            except Exception as exc:  # the caller's reader: any failure unbinds this parameter only
                bound.unbound[name] = f"parameter {name}: SSM parameter {raw} could not be read ({exc})"
                continue
            if looked is None:
                bound.unbound[name] = f"parameter {name}: SSM parameter {raw} does not exist"
                continue
            bound.values[name] = coerce_parameter(ptype, looked)
            continue
        if isinstance(raw, str) and SECRET_REF_RE.search(raw):
            bound.secret_fed.add(name)
        try:
            bound.values[name] = coerce_parameter(ptype, raw) if supplied else raw
        except ParameterError as exc:
            raise ParameterError(f"parameter {name}: {exc}") from None
    return bound


# --- the resolver ----------------------------------------------------------------------------


@dataclass
class Context:
    template: dict[str, Any]
    stack_name: str
    region: str
    account: str
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)  # the state rows, by logical id
    parameters: BoundParameters = field(default_factory=BoundParameters)
    conditions: dict[str, bool] = field(default_factory=dict)
    undecided_conditions: set[str] = field(default_factory=set)
    exports: dict[str, Any] | Callable[[], dict[str, Any] | None] | None = None
    ssm: SSMCallback | None = None
    azs: Callable[[str], list[str]] | None = None
    imports: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kept_placeholders: int = 0
    exports_loaded: bool = False
    _exports_value: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.pseudo = pseudo_parameters(region=self.region, account=self.account, stack_name=self.stack_name)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def export_entries(self) -> dict[str, Any] | None:
        """The exports index's `exports` map, loaded at most once."""
        if not self.exports_loaded:
            self.exports_loaded = True
            source = self.exports() if callable(self.exports) else self.exports
            if isinstance(source, dict) and isinstance(source.get("exports"), dict):
                source = source["exports"]
            self._exports_value = source if isinstance(source, dict) else None
        return self._exports_value


class Resolver:
    def __init__(self, ctx: Context, *, max_depth: int = 200) -> None:
        self.ctx = ctx
        self.max_depth = max_depth
        self.template_resources = ctx.template.get("Resources") or {}

    # entry points ---------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        return self._resolve(value, 0, in_condition=False)

    def condition_value(self, value: Any) -> bool:
        result = self._resolve(value, 0, in_condition=True)
        if not isinstance(result, bool):
            raise ResolveError(f"a condition must evaluate to a boolean, not {js_json(result)}")
        return result

    # walk -----------------------------------------------------------------------------------

    def _resolve(self, value: Any, depth: int, *, in_condition: bool) -> Any:
        if depth > self.max_depth:
            raise ResolveError("the value is nested too deeply")
        if isinstance(value, str):
            return self._dynamic(value) if "{{resolve:" in value else value
        if isinstance(value, list):
            out = [self._resolve(v, depth + 1, in_condition=in_condition) for v in value]
            return [v for v in out if v is not NO_VALUE]
        if isinstance(value, dict):
            if len(value) == 1:
                key, arg = next(iter(value.items()))
                if in_condition and key == "Condition":
                    return self._condition(arg)
                if key == "Ref" or key.startswith("Fn::"):
                    handler = _HANDLERS.get(key)
                    if handler is None:
                        raise ResolveError(f"unknown intrinsic function {key}")
                    return handler(self, arg, depth + 1, in_condition)
            out_obj = {}
            for k, v in value.items():
                r = self._resolve(v, depth + 1, in_condition=in_condition)
                if r is not NO_VALUE:
                    out_obj[k] = r
            return out_obj
        return value

    def _sub_resolve(self, value: Any, depth: int, in_condition: bool) -> Any:
        return self._resolve(value, depth, in_condition=in_condition)

    def _dynamic(self, text: str) -> str:
        def replace(m: re.Match[str]) -> str:
            service, ref = m.group(1), m.group(2)
            if service != "ssm":
                return m.group(0)  # a secret: never fetched, compared as written
            if self.ctx.ssm is None:
                raise ResolveError(f"{{{{resolve:ssm:{ref}}}}} needs an SSM reader")
            try:
                looked = self.ctx.ssm(ref)
            except Exception as exc:  # the caller's reader
                raise ResolveError(f"SSM parameter {ref} could not be read ({exc})") from None
            if looked is None:
                raise ResolveError(f"SSM parameter {ref} does not exist")
            return looked

        return _DYNAMIC_RE.sub(replace, text)

    def _condition(self, name: Any) -> bool:
        if not isinstance(name, str):
            raise ResolveError("Condition must name a condition")
        if name not in self.ctx.conditions:
            self.ctx.warn(f"condition {name} is not defined; treated as false")
            return False
        return self.ctx.conditions[name]

    # Ref / GetAtt ---------------------------------------------------------------------------

    def ref(self, name: Any) -> Any:
        if not isinstance(name, str):
            raise ResolveError("Ref must name a resource, parameter or pseudo parameter")
        row = self.ctx.resources.get(name)
        if row is not None:
            value = ref_value(str(row.get("resourceType")), row)
            if value is None:
                raise KnownAfterApply(f"Ref {name}: the record holds no physical id")
            return value
        params = self.ctx.parameters
        if name in params.values:
            return params.values[name]
        if name in params.unbound:
            raise ResolveError(params.unbound[name])
        if name in self.ctx.pseudo:
            return self.ctx.pseudo[name]
        if name in self.template_resources:
            raise KnownAfterApply(f"Ref {name}: the resource does not exist yet")
        raise ResolveError(f"Ref {name} not found")

    def get_att(self, logical_id: str, attr: str) -> Any:
        row = self.ctx.resources.get(logical_id)
        if row is None:
            if logical_id in self.template_resources:
                raise KnownAfterApply(f"Fn::GetAtt {logical_id}.{attr}: the resource does not exist yet")
            raise ResolveError(f"Fn::GetAtt {logical_id}.{attr}: no such resource")
        attrs = row.get("attributes")
        if isinstance(attrs, dict):
            if attr in attrs:
                return attrs[attr]
            node: Any = attrs
            for part in attr.split("."):
                if not isinstance(node, dict) or part not in node:
                    break
                node = node[part]
            else:
                return node
        pid = row.get("physicalId")
        rtype = str(row.get("resourceType"))
        if not isinstance(pid, str):
            raise KnownAfterApply(f"Fn::GetAtt {logical_id}.{attr}: the record holds no physical id")
        built = construct_attribute(
            rtype,
            pid,
            attr,
            region=self.ctx.region,
            account=self.ctx.account,
            partition=self.ctx.pseudo["AWS::Partition"],
            url_suffix=self.ctx.pseudo["AWS::URLSuffix"],
        )
        if built is not None:
            return built
        if (attr.endswith("Arn") and not pid.startswith("arn:")) or (attr.endswith("Url") and "://" not in pid):
            raise KnownAfterApply(f"Fn::GetAtt {logical_id}.{attr}: not recorded and not buildable")
        self.ctx.warn(f"Fn::GetAtt {logical_id}.{attr} is not recorded; the physical id stands in for it")
        return pid


def _fn_ref(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    return r.ref(arg)


def _fn_get_att(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if isinstance(arg, str):
        lid, _, attr = arg.partition(".")
        if not attr:
            raise ResolveError(f"Fn::GetAtt {arg!r} names no attribute")
        return r.get_att(lid, attr)
    if not isinstance(arg, list) or len(arg) != 2 or not isinstance(arg[0], str):
        raise ResolveError("Fn::GetAtt takes [logicalId, attributeName]")
    attr = r._sub_resolve(arg[1], depth, inc)
    if not isinstance(attr, str):
        raise ResolveError("Fn::GetAtt attribute name must be a string")
    return r.get_att(arg[0], attr)


def _fn_sub(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if isinstance(arg, str):
        body, variables = arg, {}
    elif isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str) and isinstance(arg[1], dict):
        body = arg[0]
        variables = {k: r._sub_resolve(v, depth, inc) for k, v in arg[1].items()}
    else:
        raise ResolveError("Fn::Sub takes a string or [string, {variables}]")

    def replace(m: re.Match[str]) -> str:
        name = m.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        try:
            if name in variables:
                return js_string(variables[name])
            if name in r.ctx.pseudo:
                return js_string(r.ctx.pseudo[name])
            if "." in name and name not in r.ctx.resources and name not in r.ctx.parameters.values:
                lid, _, attr = name.partition(".")
                return js_string(r.get_att(lid, attr))
            return js_string(r.ref(name))
        except ResolveError as exc:
            r.ctx.kept_placeholders += 1
            r.ctx.warn(f"Fn::Sub placeholder ${{{name}}} kept as written ({exc})")
            return m.group(0)

    out = _SUB_RE.sub(replace, body)
    return r._dynamic(out) if "{{resolve:" in out else out


def _list_arg(r: Resolver, value: Any, depth: int, inc: bool, what: str) -> list[Any]:
    resolved = r._sub_resolve(value, depth, inc)
    if not isinstance(resolved, list):
        raise ResolveError(f"{what} needs a list, not {js_json(resolved)}")
    return resolved


def _fn_join(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if not isinstance(arg, list) or len(arg) != 2:
        raise ResolveError("Fn::Join takes [delimiter, [values]]")
    delim = r._sub_resolve(arg[0], depth, inc)
    if not isinstance(delim, str):
        raise ResolveError("Fn::Join delimiter must be a string")
    items = _list_arg(r, arg[1], depth, inc, "Fn::Join")
    return delim.join(js_string(v) for v in items)


def _fn_select(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if not isinstance(arg, list) or len(arg) != 2:
        raise ResolveError("Fn::Select takes [index, [values]]")
    index = r._sub_resolve(arg[0], depth, inc)
    try:
        i = int(index) if not isinstance(index, bool) else None
    except (TypeError, ValueError):
        i = None
    if i is None:
        raise ResolveError(f"Fn::Select index {js_json(index)} is not a number")
    items = _list_arg(r, arg[1], depth, inc, "Fn::Select")
    if not 0 <= i < len(items):
        raise ResolveError(f"Fn::Select index {i} is out of range for {len(items)} values")
    return items[i]


def _fn_split(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if not isinstance(arg, list) or len(arg) != 2:
        raise ResolveError("Fn::Split takes [delimiter, string]")
    delim = r._sub_resolve(arg[0], depth, inc)
    source = r._sub_resolve(arg[1], depth, inc)
    if not isinstance(delim, str) or not isinstance(source, str):
        raise ResolveError("Fn::Split needs a string delimiter and a string source")
    return list(source) if delim == "" else source.split(delim)


def _fn_if(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if not isinstance(arg, list) or len(arg) != 3 or not isinstance(arg[0], str):
        raise ResolveError("Fn::If takes [condition, then, else]")
    chosen = arg[1] if r._condition(arg[0]) else arg[2]
    return r._sub_resolve(chosen, depth, inc)


def _fn_equals(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if not isinstance(arg, list) or len(arg) != 2:
        raise ResolveError("Fn::Equals takes two values")
    a, b = (r._sub_resolve(v, depth, inc) for v in arg)
    return js_json(a) == js_json(b)


def _booleans(r: Resolver, arg: Any, depth: int, inc: bool, name: str, lo: int, hi: int) -> list[bool]:
    if not isinstance(arg, list) or not lo <= len(arg) <= hi:
        raise ResolveError(f"{name} takes {lo}-{hi} conditions" if lo != hi else f"{name} takes one condition")
    out = []
    for v in arg:
        b = r._resolve(v, depth, in_condition=True)
        if not isinstance(b, bool):
            raise ResolveError(f"{name} operand {js_json(b)} is not a boolean")
        out.append(b)
    return out


def _fn_and(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    return all(_booleans(r, arg, depth, inc, "Fn::And", 2, 10))


def _fn_or(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    return any(_booleans(r, arg, depth, inc, "Fn::Or", 2, 10))


def _fn_not(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    return not _booleans(r, arg, depth, inc, "Fn::Not", 1, 1)[0]


def _fn_find_in_map(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if not isinstance(arg, list) or len(arg) not in (3, 4):
        raise ResolveError("Fn::FindInMap takes [map, key, key] and an optional {DefaultValue}")
    keys = [r._sub_resolve(v, depth, inc) for v in arg[:3]]
    default: Any = None
    has_default = False
    if len(arg) == 4:
        opt = arg[3]
        if not isinstance(opt, dict) or "DefaultValue" not in opt:
            raise ResolveError("Fn::FindInMap's fourth argument must be {DefaultValue: ...}")
        has_default = True
        default = opt["DefaultValue"]
    node: Any = r.ctx.template.get("Mappings") or {}
    for k in keys:
        if not isinstance(node, dict) or not isinstance(k, str | int | float) or js_string(k) not in node:
            if has_default:
                return r._sub_resolve(default, depth, inc)
            raise ResolveError(f"Fn::FindInMap: {'/'.join(js_string(x) for x in keys)} is not in Mappings")
        node = node[js_string(k)]
    return node


def _fn_base64(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    value = r._sub_resolve(arg, depth, inc)
    if not isinstance(value, str):
        raise ResolveError("Fn::Base64 needs a string")
    return base64.b64encode(value.encode("utf-8")).decode("ascii")


def _fn_get_azs(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    region = r._sub_resolve(arg, depth, inc) or r.ctx.region
    if not isinstance(region, str) or not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", region):
        raise ResolveError(f"Fn::GetAZs: {js_json(region)} is not a region name")
    if r.ctx.azs is None:
        raise KnownAfterApply("Fn::GetAZs needs EC2 DescribeAvailabilityZones")
    return list(r.ctx.azs(region))


def _fn_cidr(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    if not isinstance(arg, list) or len(arg) != 3:
        raise ResolveError("Fn::Cidr takes [ipBlock, count, cidrBits]")
    block, count, bits = (r._sub_resolve(v, depth, inc) for v in arg)
    try:
        net = ipaddress.ip_network(str(block), strict=False)
        count, bits = int(count), int(bits)
        subnets = net.subnets(new_prefix=net.max_prefixlen - bits)
        out = []
        for s in subnets:
            if len(out) >= count:
                break
            out.append(str(s))
    except (ValueError, TypeError) as exc:
        raise ResolveError(f"Fn::Cidr: {exc}") from None
    if len(out) < count:
        raise ResolveError(f"Fn::Cidr: {block} holds fewer than {count} subnets of {bits} bits")
    return out


def _fn_import_value(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    name = r._sub_resolve(arg, depth, inc)
    if not isinstance(name, str):
        raise ResolveError("Fn::ImportValue needs an export name string")
    entries = r.ctx.export_entries()
    if entries is None:
        raise ResolveError(f"Fn::ImportValue {name}: no exports index for region {r.ctx.region}")
    entry = entries.get(name)
    if not isinstance(entry, dict) or "value" not in entry:
        raise ResolveError(f"Fn::ImportValue {name}: no stack exports it in {r.ctx.region}")
    record = {
        "exportName": name,
        "sourceStack": str(entry.get("producerStack")),
        "sourceRegion": str(entry.get("producerRegion", r.ctx.region)),
    }
    if record not in r.ctx.imports:
        r.ctx.imports.append(record)
    return entry["value"]


def _fn_get_stack_output(r: Resolver, arg: Any, depth: int, inc: bool) -> Any:
    raise ResolveError("Fn::GetStackOutput is not resolved for a diff")


_HANDLERS: dict[str, Callable[[Resolver, Any, int, bool], Any]] = {
    "Ref": _fn_ref,
    "Fn::GetAtt": _fn_get_att,
    "Fn::Sub": _fn_sub,
    "Fn::Join": _fn_join,
    "Fn::Select": _fn_select,
    "Fn::Split": _fn_split,
    "Fn::If": _fn_if,
    "Fn::Equals": _fn_equals,
    "Fn::And": _fn_and,
    "Fn::Or": _fn_or,
    "Fn::Not": _fn_not,
    "Fn::FindInMap": _fn_find_in_map,
    "Fn::Base64": _fn_base64,
    "Fn::GetAZs": _fn_get_azs,
    "Fn::Cidr": _fn_cidr,
    "Fn::ImportValue": _fn_import_value,
    "Fn::GetStackOutput": _fn_get_stack_output,
}


# --- conditions and pruning ------------------------------------------------------------------


def evaluate_conditions(ctx: Context) -> None:
    """Each condition once, recursion through {"Condition": name}, cycles and errors false
    (with a warning, the name kept in `undecided_conditions`)."""
    defs = ctx.template.get("Conditions") or {}
    resolver = Resolver(ctx)
    state: dict[str, str] = {}

    def evaluate(name: str) -> bool:
        if state.get(name) == "done":
            return ctx.conditions[name]
        if state.get(name) == "busy":
            raise ResolveError(f"condition {name} depends on itself")
        state[name] = "busy"
        try:
            for dep in _condition_names(defs[name]):
                if dep in defs:
                    evaluate(dep)
            value = resolver.condition_value(defs[name])
        except ResolveError as exc:
            ctx.warn(f"condition {name} could not be evaluated ({exc}); treated as false")
            ctx.undecided_conditions.add(name)
            value = False
        except RecursionError:
            ctx.warn(f"condition {name} is nested too deeply; treated as false")
            ctx.undecided_conditions.add(name)
            value = False
        ctx.conditions[name] = value
        state[name] = "done"
        return value

    for name in defs:
        evaluate(name)


def _condition_names(value: Any) -> list[str]:
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("Condition"), str):
            return [value["Condition"]]
        return [n for v in value.values() for n in _condition_names(v)]
    if isinstance(value, list):
        return [n for v in value for n in _condition_names(v)]
    return []


def prune_resources(template: dict[str, Any], ctx: Context) -> dict[str, dict[str, Any]]:
    """The template's resources without those whose Condition is false (or undefined)."""
    out = {}
    for lid, res in (template.get("Resources") or {}).items():
        cond = res.get("Condition") if isinstance(res, dict) else None
        if isinstance(cond, str):
            if cond not in ctx.conditions:
                ctx.warn(f"resource {lid} names undefined condition {cond}; treated as false")
                continue
            if not ctx.conditions[cond]:
                continue
        out[lid] = res
    return out
