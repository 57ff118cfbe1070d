"""The layering rules of ``src/inferactors`` as a check over its import graph.

`check_package` parses every module under a package root (no import is executed), builds
the graph of imports between its modules, and returns one line per broken rule:

- a module imports from a layer that its own layer may not import (`ALLOWED`);
- a ``_policy`` module imports an I/O library (`POLICY_FORBIDDEN`);
- a module outside ``_cli`` calls ``trio.run``;
- an import circle.

Every import counts, at module level or inside a function, except those under
``if __name__ == "__main__":`` (which run only when the module is a program). The rules
are stated in ``design/README.md``; `tests/test_layers.py` runs the check on the real
package and on deliberately broken copies.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs

VOCABULARY = frozenset({"_errors", "_events", "_flavor", "_status"})
"""Top-level modules every layer may import: the shared vocabulary."""

_BELOW_EDGES = frozenset({"vocabulary", "config", "models", "policy"})
ALLOWED: dict[str, frozenset[str]] = {
    "vocabulary": frozenset({"vocabulary"}),
    "config": frozenset({"vocabulary", "config"}),
    "models": frozenset({"vocabulary", "models"}),
    "policy": _BELOW_EDGES,
    "edges": _BELOW_EDGES | {"edges"},
    "actors": _BELOW_EDGES | {"edges", "actors"},
    "api": _BELOW_EDGES | {"edges", "actors", "api"},
    "testing": _BELOW_EDGES | {"edges", "actors", "api", "testing"},
    "cli": _BELOW_EDGES | {"edges", "actors", "api", "testing", "cli"},
    "main": frozenset({"cli"}),
}
"""Which layers each layer may import (its own included)."""

POLICY_FORBIDDEN = frozenset(
    {"trio", "httpx", "psutil", "socket", "subprocess", "h11", "asyncio", "selectors",
     "threading", "ssl", "http", "urllib"}
)  # fmt: skip
"""Top-level names of I/O libraries that no ``_policy`` module may import."""

_FOLDERS = {"_actors": "actors", "_cli": "cli", "_config": "config", "_edges": "edges",
            "_models": "models", "_policy": "policy", "testing": "testing"}  # fmt: skip


@attrs.frozen
class Module:
    """One parsed module: its dotted name, whether it is a package, and its syntax tree."""

    name: str
    is_package: bool
    tree: ast.Module


def layer_of(name: str) -> str:
    """The layer of a dotted module name inside the package (``pkg._actors.x`` is actors)."""
    parts = name.split(".")
    if len(parts) == 1:
        return "api"
    if parts[1] == "__main__":
        return "main"
    if parts[1] in VOCABULARY:
        return "vocabulary"
    return _FOLDERS.get(parts[1], "api")


def load_modules(root: Path) -> dict[str, Module]:
    """Every module under the package directory ``root``, keyed by dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        modules[name] = Module(name, is_package, ast.parse(path.read_text(), str(path)))
    return modules


def _is_main_guard(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk`, skipping ``if __name__ == "__main__":`` blocks."""
    for child in ast.iter_child_nodes(node):
        if _is_main_guard(child):
            continue
        yield child
        yield from _walk(child)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.name.split(".")
    if not module.is_package:
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: Module, known: set[str]) -> Iterator[str]:
    """Every module name ``module`` imports (ours resolved to the module, others as written)."""
    for node in _walk(module.tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield sub if sub in known else source


def _calls_trio_run(module: Module) -> bool:
    return any(_is_trio_run(node) for node in _walk(module.tree))


def _is_trio_run(node: ast.AST) -> bool:
    """``from trio import run`` or ``trio.run``."""
    if isinstance(node, ast.ImportFrom):
        return node.module == "trio" and any(alias.name == "run" for alias in node.names)
    if isinstance(node, ast.Attribute) and node.attr == "run":
        return isinstance(node.value, ast.Name) and node.value.id == "trio"
    return False


def graph_of(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Our modules' import graph: each module's set of our modules it imports."""
    known = set(modules)
    return {
        name: {target for target in imports_of(module, known) if target in known} - {name}
        for name, module in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def check_package(root: Path) -> list[str]:
    """Every broken layering rule in the package at ``root``, one line each (empty: clean)."""
    modules = load_modules(root)
    graph = graph_of(modules)
    problems = []
    for name, module in modules.items():
        layer = layer_of(name)
        for target in sorted(graph[name]):
            if layer_of(target) not in ALLOWED[layer]:
                problems.append(f"{name} ({layer}) imports {target} ({layer_of(target)})")
        if layer == "policy":
            for imported in sorted(set(imports_of(module, set(modules)))):
                if imported.split(".")[0] in POLICY_FORBIDDEN:
                    problems.append(f"{name} (policy) imports the I/O library {imported}")
        if layer != "cli" and _calls_trio_run(module):
            problems.append(f"{name} calls trio.run outside _cli")
    problems += [f"import circle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems
