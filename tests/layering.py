"""The layering rules of ``src/inferactors`` as a check over its import graph.

`check_package` parses every module under a package root (no import is executed), builds
the graph of imports between its modules, and returns one line per broken rule:

- a module imports from a layer that its own layer may not import (`ALLOWED`);
- a ``_policy`` module imports an I/O library (`POLICY_FORBIDDEN`);
- a pure module beside the actors (`PURE_ACTOR_MODULES`: the instance actor's rules and
  values) imports an I/O library itself or calls file I/O;
- a module outside ``_cli`` calls ``trio.run``;
- an import circle.

Every import counts, at module level or inside a function, except those under
``if __name__ == "__main__":`` (which run only when the module is a program). The rules
are stated in ``design/README.md``; `tests/test_layers.py` runs the check on the real
package and on deliberately broken copies.

A source text is parsed once per process, and what a parsed module imports or calls is
worked out once (the same text gives the same tree, hence the same answers): a broken copy
is checked in the time its one changed module takes.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import attrs

VOCABULARY = frozenset(
    {
        "_atomic_file",
        "_errors",
        "_events",
        "_flavor",
        "_safe_json",
        "_status",
        "_stop_reasons",
        "_untrusted_file",
        "_version",
    }
)
"""Top-level modules every layer may import: the shared vocabulary."""

_BELOW_EDGES = frozenset({"vocabulary", "config", "models", "policy"})
ALLOWED: dict[str, frozenset[str]] = {
    "vocabulary": frozenset({"vocabulary"}),
    "config": frozenset({"vocabulary", "config"}),
    "models": frozenset({"vocabulary", "models"}),
    "policy": _BELOW_EDGES,
    "edges": _BELOW_EDGES | {"edges"},
    "actors": _BELOW_EDGES | {"edges", "actors"},
    "service": _BELOW_EDGES | {"edges", "actors", "service"},
    "api": _BELOW_EDGES | {"edges", "actors", "service", "api"},
    "testing": _BELOW_EDGES | {"edges", "actors", "api", "testing"},
    "cli": _BELOW_EDGES | {"edges", "actors", "service", "api", "testing", "cli"},
    "main": frozenset({"cli"}),
}
"""Which layers each layer may import (its own included)."""

POLICY_FORBIDDEN = frozenset(
    {"trio", "anyio", "asyncio", "httpx", "h11", "http", "urllib", "requests", "ssl",
     "socket", "_socket", "socketserver", "select", "selectors", "subprocess",
     "multiprocessing", "concurrent", "threading", "_thread", "psutil", "os", "pwd", "grp",
     "fcntl", "signal", "shutil", "tempfile", "mmap", "ctypes"}
)  # fmt: skip
"""Top-level names of I/O libraries that no ``_policy`` module may import, directly or
through any module of ours that it imports."""

POLICY_IO_CALLS = frozenset(
    {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob",
     "rglob", "unlink", "mkdir", "touch", "rename", "replace", "rmdir"}
)  # fmt: skip
"""Calls that do file I/O (the builtin ``open`` and `pathlib.Path` methods): none in
``_policy``."""

PURE_ACTOR_MODULES = frozenset(
    {f"_actors.{actor}.{module}" for actor in ("instance", "ollama")
     for module in ("effects", "messages", "state", "status", "step")}
    | {"_actors.instance.stopping", "_actors.instance.verdicts"}
)  # fmt: skip
"""Modules of the actors layer that hold pure rules and values (the instance and Ollama
actors' state machines, design/actors.md): like ``_policy``, none imports an I/O library
(trio included) or calls file I/O itself. Unlike ``_policy`` they may import our modules
that do, to name the classes of the values they handle (a process, a reply channel, a
command)."""

_FOLDERS = {"_actors": "actors", "_cli": "cli", "_config": "config", "_edges": "edges",
            "_models": "models", "_policy": "policy", "_service": "service",
            "testing": "testing"}  # fmt: skip


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
        modules[name] = Module(name, is_package, _parse(path))
    return modules


def _parse(path: Path) -> ast.Module:
    text = path.read_text()
    try:
        return _tree(text)
    except SyntaxError:
        return ast.parse(text, str(path))  # raises again, naming the file


@functools.cache
def _tree(text: str) -> ast.Module:
    return ast.parse(text)


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` exactly (not ``!=``, not ``is not``)."""
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and [type(op) for op in test.ops] == [ast.Eq]
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk`, skipping the body (not the ``else``) of ``if __name__ == "__main__":``
    (iterative: nested generators cost the whole check seconds)."""
    stack = [node]
    while stack:
        for child in ast.iter_child_nodes(stack.pop()):
            if isinstance(child, ast.If) and _is_main_guard(child):
                yield from child.orelse
                stack.extend(child.orelse)
                continue
            yield child
            stack.append(child)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.name.split(".")
    if not module.is_package:
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: Module, known: set[str]) -> Iterator[str]:
    """Every module name ``module`` imports (ours resolved to the module, others as written).

    Besides import statements: ``importlib.import_module("x")`` and ``__import__("x")``
    with a literal name, and attribute chains such as ``inferactors._actors.runtime.X``
    reached from an imported package.
    """
    for node in _walk(module.tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield sub if sub in known else source
        elif isinstance(node, ast.Call) and (name := _dynamic_import(node)):
            yield name
        elif isinstance(node, ast.Attribute) and (dotted := _dotted(node)) in known:
            yield dotted


def _dynamic_import(node: ast.Call) -> str | None:
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` as text when ``node`` is a chain of names, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


_LOOP_STARTERS = frozenset({"run", "start_guest_run"})


@functools.cache
def _calls_trio_run(module: Module) -> bool:
    """Whether ``module`` starts a trio event loop: ``trio.run`` or ``start_guest_run``,
    however trio was imported (``import trio as t``, ``from trio import run as go``,
    ``from trio import *``, ``getattr(trio, "run")``)."""
    aliases = {"trio"}
    for node in _walk(module.tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name.split(".")[0] == "trio"}
    return any(_starts_loop(node, aliases) for node in _walk(module.tree))


def _starts_loop(node: ast.AST, aliases: set[str]) -> bool:
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trio":
        return any(alias.name in _LOOP_STARTERS | {"*"} for alias in node.names)
    if isinstance(node, ast.Attribute) and node.attr in _LOOP_STARTERS:
        root = _dotted(node.value)
        return root is not None and root.split(".")[0] in aliases
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
        target, attribute = [*node.args, None, None][:2]
        root = _dotted(target) if target is not None else None
        named = isinstance(attribute, ast.Constant) and attribute.value in _LOOP_STARTERS
        return named and root is not None and root.split(".")[0] in aliases
    return False


@functools.cache
def _io_calls(module: Module) -> frozenset[str]:
    found = set()
    for node in _walk(module.tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in POLICY_IO_CALLS:
                found.add(name)
    return frozenset(found)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


@functools.cache
def _imports(module: Module, known: frozenset[str]) -> frozenset[str]:
    """`imports_of`, once per parsed module and set of our module names."""
    return frozenset(imports_of(module, set(known)))


def graph_of(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Our modules' import graph: each module's set of our modules it imports."""
    known = frozenset(modules)
    return {
        name: {target for target in _imports(module, known) if target in known} - {name}
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


def _policy_io(name: str, modules: dict[str, Module], graph: dict[str, set[str]]) -> list[str]:
    """What I/O a policy module reaches: libraries it or any of our modules it imports
    (transitively) import, and file I/O calls in its own code."""
    problems = []
    for reached in sorted(_reachable(graph, name)):
        via = "" if reached == name else f" through {reached}"
        for imported in sorted(_imports(modules[reached], frozenset(modules))):
            if imported.split(".")[0] in POLICY_FORBIDDEN:
                problems.append(f"{name} (policy) imports the I/O library {imported}{via}")
    problems += [f"{name} (policy) calls {call}()" for call in sorted(_io_calls(modules[name]))]
    return problems


def _pure_io(name: str, module: Module, known: set[str]) -> list[str]:
    """What I/O a pure actor module does itself: libraries it imports, file I/O calls."""
    problems = [
        f"{name} (pure) imports the I/O library {imported}"
        for imported in sorted(set(imports_of(module, known)))
        if imported.split(".")[0] in POLICY_FORBIDDEN
    ]
    return problems + [f"{name} (pure) calls {call}()" for call in sorted(set(_io_calls(module)))]


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
            problems += _policy_io(name, modules, graph)
        if name.partition(".")[2] in PURE_ACTOR_MODULES:
            problems += _pure_io(name, module, set(modules))
        if layer != "cli" and _calls_trio_run(module):
            problems.append(f"{name} calls trio.run outside _cli")
    problems += [f"import circle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems
