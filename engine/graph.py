"""The dependency graph of a state record's resources, for ordering a destroy.

cdkd builds its delete order from a pseudo-template made of the record (reference §8.2
step 6, E16): each row's `dependencies` (the template's DependsOn) plus the `Ref`,
`Fn::GetAtt` and `Fn::Sub` references left in its `properties`. An edge `A -> B` means
"A depends on B": B is created before A, so A must be deleted before B.

Contracts:
- `references(value)` never raises on any decoded JSON value; it returns logical ids in
  first-seen order (pseudo parameters `AWS::...` and `${!Literal}` escapes excluded).
- `build_graph(rows)` keeps only edges between ids of `rows` (a reference to an id that is
  not in the record cannot order anything; it is kept in `unknown` for display) and
  ignores self references.
- `levels()` / `deletion_levels()` are deterministic (ids in record order within a level)
  and raise `CycleError` naming one cycle; a destroy refuses such a record in its plan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# ${Name} or ${Name.Attr}; ${!Literal} is an escape, not a reference.
_SUB_VAR = re.compile(r"\$\{([^}]*)\}")


class CycleError(ValueError):
    """The resources depend on each other in a loop; `cycle` lists one, first id repeated last."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__("the resources depend on each other in a cycle: " + " -> ".join(cycle))


def _is_pseudo(name: str) -> bool:
    # AWS::Region, AWS::AccountId, AWS::NoValue, ... are not resources.
    return name.startswith("AWS::")


def _sub_names(template: str, local: set[str]) -> list[str]:
    """Logical ids named in a Fn::Sub template string (`local` = its own variable names)."""
    names: list[str] = []
    for match in _SUB_VAR.finditer(template):
        inner = match.group(1).strip()
        if not inner or inner.startswith("!"):
            continue
        name = inner.split(".", 1)[0]  # ${X.Attr} references X
        if name in local or _is_pseudo(inner) or _is_pseudo(name):
            continue
        names.append(name)
    return names


def references(value: Any) -> list[str]:
    """Every logical id `value` references through Ref / Fn::GetAtt / Fn::Sub, first-seen order."""
    found: dict[str, None] = {}

    def add(name: Any) -> None:
        if isinstance(name, str) and name and not _is_pseudo(name):
            found.setdefault(name, None)

    def walk(v: Any, depth: int = 0) -> None:
        if depth > 200:  # a hostile record cannot make us recurse without bound
            return
        if isinstance(v, list):
            for item in v:
                walk(item, depth + 1)
            return
        if not isinstance(v, dict):
            return
        if len(v) == 1:
            ((key, arg),) = v.items()
            if key == "Ref":
                add(arg) if isinstance(arg, str) else walk(arg, depth + 1)
                return
            if key == "Fn::GetAtt":
                if isinstance(arg, list) and arg:
                    add(arg[0]) if isinstance(arg[0], str) else walk(arg[0], depth + 1)
                    walk(arg[1:], depth + 1)  # an attribute name may itself be an intrinsic
                elif isinstance(arg, str):
                    add(arg.split(".", 1)[0])
                else:
                    walk(arg, depth + 1)
                return
            if key == "Fn::Sub":
                if isinstance(arg, str):
                    for name in _sub_names(arg, set()):
                        add(name)
                elif isinstance(arg, list) and arg:
                    variables = arg[1] if len(arg) > 1 and isinstance(arg[1], dict) else {}
                    if isinstance(arg[0], str):
                        for name in _sub_names(arg[0], set(variables)):
                            add(name)
                    else:
                        walk(arg[0], depth + 1)
                    walk(list(variables.values()), depth + 1)
                    walk(arg[2:], depth + 1)
                else:
                    walk(arg, depth + 1)
                return
        for item in v.values():
            walk(item, depth + 1)

    walk(value)
    return list(found)


def row_dependencies(row: Mapping[str, Any]) -> list[str]:
    """What one resource row depends on: its `dependencies` strings, then its properties' references."""
    names: dict[str, None] = {}
    deps = row.get("dependencies")
    if isinstance(deps, list):
        for dep in deps:
            if isinstance(dep, str):
                names.setdefault(dep, None)
    for name in references(row.get("properties")):
        names.setdefault(name, None)
    return list(names)


@dataclass
class DependencyGraph:
    """`depends_on[a]` = the ids `a` needs (created before it, deleted after it)."""

    nodes: list[str]
    depends_on: dict[str, list[str]]
    unknown: dict[str, list[str]] = field(default_factory=dict)  # references to ids not in the record

    @property
    def dependents(self) -> dict[str, list[str]]:
        """`dependents[b]` = the ids that depend on `b` (must be gone before `b` is deleted)."""
        result: dict[str, list[str]] = {node: [] for node in self.nodes}
        for node in self.nodes:
            for dep in self.depends_on[node]:
                result[dep].append(node)
        return result

    def find_cycle(self) -> list[str] | None:
        """One dependency cycle (first id repeated at the end), or None."""
        white, grey, black = 0, 1, 2
        colour = dict.fromkeys(self.nodes, white)
        for start in self.nodes:
            if colour[start] != white:
                continue
            # Iterative DFS: a deep chain must not hit Python's recursion limit.
            path: list[str] = [start]
            stack: list[Iterable[str]] = [iter(self.depends_on[start])]
            colour[start] = grey
            while stack:
                advanced = False
                for nxt in stack[-1]:
                    if colour[nxt] == grey:
                        return path[path.index(nxt) :] + [nxt]
                    if colour[nxt] == white:
                        colour[nxt] = grey
                        path.append(nxt)
                        stack.append(iter(self.depends_on[nxt]))
                        advanced = True
                        break
                if not advanced:
                    colour[path.pop()] = black
                    stack.pop()
        return None

    def levels(self) -> list[list[str]]:
        """Creation order in levels (level 0 depends on nothing). Raises CycleError."""
        position = {node: i for i, node in enumerate(self.nodes)}
        remaining = {node: len(self.depends_on[node]) for node in self.nodes}
        dependents = self.dependents
        current = [node for node in self.nodes if remaining[node] == 0]
        result: list[list[str]] = []
        placed = 0
        while current:
            result.append(current)
            placed += len(current)
            nxt: list[str] = []
            for node in current:
                for dependent in dependents[node]:
                    remaining[dependent] -= 1
                    if remaining[dependent] == 0:
                        nxt.append(dependent)
            current = sorted(nxt, key=position.__getitem__)
        if placed != len(self.nodes):
            raise CycleError(self.find_cycle() or sorted(n for n, count in remaining.items() if count))
        return result

    def deletion_levels(self) -> list[list[str]]:
        """Delete order in levels: the reverse of `levels()`; everything in a level may run at once."""
        return list(reversed(self.levels()))

    def deletion_order(self) -> list[str]:
        return [node for level in self.deletion_levels() for node in level]


def build_graph(rows: Mapping[str, Mapping[str, Any]]) -> DependencyGraph:
    """The graph of `rows` (logicalId -> readable resource row), edges only within `rows`."""
    nodes = list(rows)
    present = set(nodes)
    depends_on: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for node in nodes:
        row = rows[node]
        names = row_dependencies(row) if isinstance(row, Mapping) else []
        depends_on[node] = [n for n in names if n in present and n != node]
        missing = [n for n in names if n not in present]
        if missing:
            unknown[node] = missing
    return DependencyGraph(nodes=nodes, depends_on=depends_on, unknown=unknown)
