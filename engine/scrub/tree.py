"""What a scrub changes in one stack's record and, with an assembly, in each nested child's
record below it (`{parent}~{logicalId}`, any depth), with cdkd's next diff predicted for
every rewrite (engine.scrub.predict). Reads only; the operation writes.

The assembly is the deploy plan's input (engine.deploy.operation.load_assembly): a cdk.out
path in `params["app"]` (the CLI's `--app`) or a stored assembly by digest in
`params["assembly_digest"]` (the web's choice). A child is derived from its own nested
template, with the parameters the parent's row passes it (a parameter the parent fills
from a NoEcho source counts as NoEcho in the child, as cdkd has it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.backend import StoredObject
from engine.deploy.assembly import Assembly, AssemblyError, NestedTemplate, StackArtifact
from engine.deploy.intrinsics import ResolveError
from engine.errors import NotFound
from engine.keys import child_stack_name
from engine.operations import Context, OperationRefused
from engine.schema import write_version
from engine.scrub.predict import TEMPLATE_FROM_RECORD, predict
from engine.scrub.rewrite import Derivation, derive
from engine.scrub.template import MAX_NESTING, ReferenceValues, template_rewrite
from engine.secrets import SecretIndex


@dataclass
class StackScrub:
    stack: str
    key: str
    stored: StoredObject
    derived: Derivation
    predicted: list[dict[str, Any]]
    depth: int = 0
    children: list[StackScrub] = field(default_factory=list)

    def flat(self) -> list[StackScrub]:
        return [self, *(s for c in self.children for s in c.flat())]


def load_artifact(ctx: Context) -> tuple[Assembly | None, StackArtifact | None]:
    """The stack's artifact of the assembly the params name, or (None, None) without one."""
    if not (ctx.params.get("app") or ctx.params.get("assembly_digest")):
        return None, None
    from engine.deploy.operation import load_assembly

    try:
        assembly = load_assembly(ctx.params)
        artifact = assembly.stack(ctx.stack)
        artifact.check_account(ctx.bucket.account_id)
    except AssemblyError as exc:
        raise OperationRefused(f"the assembly cannot drive this scrub: {exc}") from None
    pinned = artifact.environment.region
    if pinned and ctx.region and pinned != ctx.region:
        raise OperationRefused(
            f"stack {ctx.stack} is synthesized for region {pinned}, not {ctx.region}: scrub the record of that "
            f"region, or synthesize the app for this one"
        )
    return assembly, artifact


class Deriver:
    """Derives (and predicts) one stack tree; the same inputs give the same answer, which is
    how `execute` checks that nothing moved since the plan."""

    def __init__(self, ctx: Context, index: SecretIndex, artifact: StackArtifact | None) -> None:
        self.ctx = ctx
        self.index = index
        self.artifact = artifact
        self.region = ctx.region or ""
        self.account = ctx.bucket.account_id
        self.values = ReferenceValues(ctx.bucket.session, self.region, self.account) if artifact else None
        self._exports: list[Any] = []

    @property
    def basis(self) -> str:
        if self.artifact is None:
            return TEMPLATE_FROM_RECORD
        return f"the template of {self.artifact.stack_name} in the assembly"

    def exports(self) -> Any:
        if not self._exports:
            try:
                self._exports.append(
                    json.loads(self.ctx.bucket.get(self.ctx.layout.exports_index_key(self.region)).body)
                )
            except (NotFound, ValueError):
                self._exports.append(None)
        return self._exports[0]

    def one(
        self,
        stack: str,
        stored: StoredObject,
        template: dict[str, Any] | None,
        parameters: dict[str, str] | None = None,
        no_echo: set[str] | None = None,
    ) -> tuple[Derivation, list[dict[str, Any]]]:
        values = self.values

        def prepare(data: dict[str, Any]) -> Any:
            assert values is not None and template is not None
            try:
                return template_rewrite(
                    values,
                    template,
                    data,
                    stack=stack,
                    region=self.region,
                    account=self.account,
                    parameters=parameters,
                    no_echo_inputs=no_echo,
                    exports=self.exports,
                )
            except ResolveError as exc:
                raise OperationRefused(f"the template cannot drive the scrub of {stack}: {exc}") from None

        derived = derive(self.index, stored, stack, self.region, prepare=prepare if template is not None else None)
        supplied = {k: v for k, v in (parameters or {}).items() if k in (template or {}).get("Parameters", {})}
        # Predicted against the record as it will be written (noEchoLeaves bumps it to v11).
        after = dict(derived.after)
        if derived.rewrites and derived.state is not None:
            after["version"] = write_version(derived.state)
        predicted = predict(
            derived.rewrites,
            after,
            before=derived.before,
            stack=stack,
            region=self.region,
            account=self.account,
            template=template,
            parameters=supplied,
            ssm=values.ssm_for_resolver if values is not None else None,
            exports=self.exports,
        )
        return derived, predicted

    def tree(self, stored: StoredObject) -> StackScrub:
        template = self.artifact.template if self.artifact else None
        derived, predicted = self.one(self.ctx.stack, stored, template)
        top = StackScrub(self.ctx.stack, stored.key, stored, derived, predicted)
        if self.artifact is not None:
            top.children = self._children(top, self.artifact.nested_templates, 1)
        return top

    def _children(self, parent: StackScrub, nested: dict[str, NestedTemplate], depth: int) -> list[StackScrub]:
        if depth > MAX_NESTING:
            raise OperationRefused(f"nested stacks under {parent.stack} go deeper than {MAX_NESTING} levels")
        inputs = parent.derived.template.children if parent.derived.template is not None else {}
        out: list[StackScrub] = []
        for lid, node in nested.items():
            if lid not in inputs:
                continue  # the parent's record holds no such nested stack row: no child record to scrub
            try:
                name = child_stack_name(parent.stack, lid)
            except ValueError as exc:
                raise OperationRefused(f"nested stack {lid} of {parent.stack} names no child record: {exc}") from None
            key = self.ctx.layout.state_key(name, self.region)
            try:
                stored = self.ctx.bucket.get(key)
            except NotFound:
                continue
            given = inputs[lid]
            derived, predicted = self.one(
                name, stored, node.template, given.get("parameters") or {}, set(given.get("no_echo") or [])
            )
            child = StackScrub(name, key, stored, derived, predicted, depth)
            child.children = self._children(child, node.children, depth + 1)
            out.append(child)
        return out
