"""Dependencies point one way (docs/architecture.md section 1), checked on the source with ``ast``.

* No module of ``agentgym_envs`` imports ``agentgym_trainers``: the trainer depends on the envs,
  never the reverse (``agentgym train`` is added through an entry point).
* There is no import cycle among the modules of either package. Imports at module level
  and inside functions both count (a function-level import only hides a cycle until the
  function runs); imports under ``if TYPE_CHECKING:`` do not, since they never run.

``from package import name`` is an edge to ``package.name`` when that is a module and to
``package`` (its ``__init__``) otherwise. Importing ``a.b.c`` also runs ``a/__init__`` and
``a/b/__init__``; those implicit edges are left out, or every package would be a cycle.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentgym_envs", "agentgym_trainers")


def module_files() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``) for both packages."""
    out: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


MODULES = module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield child
        yield from _runtime_nodes(child)


def _known(name: str) -> str | None:
    """The longest prefix of ``name`` that is one of our modules."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> list[tuple[str, int]]:
    """(imported name, line) for each import that ``module`` runs, relative ones resolved.

    Names outside our packages are kept as written (``torch``, ``agentgym_trainers.x`` ...), so the
    trainer check sees ``agentgym_trainers`` even where no such module file exists.
    """
    path, is_package = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                found.append((full if full in MODULES else source, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, node.lineno))
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """Module -> {imported module of either package: first line}, over both packages (an
    edge from ``agentgym_envs`` to ``agentgym_trainers`` is an error of its own, so a
    cycle through both packages shows up twice)."""
    graph: dict[str, dict[str, int]] = {}
    for module in MODULES:
        edges: dict[str, int] = {}
        for name, line in imports_of(module):
            target = _known(name)
            if target and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle path ``[a, b, ..., a]`` per strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan; the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, dict[str, int]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w in component and w not in parents:
                    parents[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start} in its component")  # pragma: no cover


def describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    hops = [f"{a} imports {b} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join(cycle) + "\n    " + "\n    ".join(hops)


# -- the checks ---------------------------------------------------------------------------


def test_the_scan_sees_both_packages_and_their_imports() -> None:
    # a guard against a scan that silently finds nothing
    assert "agentgym_envs.cli" in MODULES and "agentgym_trainers.trainer" in MODULES
    assert "agentgym_envs.llm.sampler" in MODULES
    trainer = dict(imports_of("agentgym_trainers.trainer"))
    assert "agentgym_envs.llm.sampler" in trainer
    graph = import_graph()
    assert "agentgym_envs.llm.template" in graph["agentgym_envs.llm.chat"]
    # the trainer's modules are nodes too, with their function-level imports
    assert "agentgym_trainers.async_rollout" in graph["agentgym_trainers.trainer"]
    assert "agentgym_trainers.ray_rollout" in graph["agentgym_trainers.trainer"]


def test_no_agentgym_envs_module_imports_the_trainer() -> None:
    offenders = [
        f"{module} imports {name} (line {line})"
        for module in MODULES
        if module.startswith("agentgym_envs")
        for name, line in imports_of(module)
        if name == "agentgym_trainers" or name.startswith("agentgym_trainers.")
    ]
    assert not offenders, (
        "agentgym_envs must not depend on agentgym_trainers (the trainer depends on "
        "agentgym_envs); "
        "move the shared code into agentgym_envs (llm/ for model code) or add the feature "
        "through an entry point:\n" + "\n".join(offenders)
    )


def test_no_import_cycles_in_either_package() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, (
        "import cycles (move what both modules need into a third, or pass it in as a "
        "narrow interface):\n" + "\n".join(describe(graph, c) for c in cycles)
    )


def test_the_cycle_finder_reports_a_function_level_cycle_with_its_path() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 4}, "c": {"a": 9}, "d": {"a": 2}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert "c imports a (line 9)" in describe(graph, ["a", "b", "c", "a"])
    assert find_cycles({"a": {"b": 1}, "b": {}}) == []


def test_imports_inside_functions_count_and_type_checking_ones_do_not(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from agentgym_envs.cli import main\n"
        "def f():\n"
        "    from agentgym_envs.core import errors\n"
        "    import agentgym_trainers.model\n"
    )
    tree = ast.parse(source)
    names = [
        n.module if isinstance(n, ast.ImportFrom) else n.names[0].name
        for n in _runtime_nodes(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    assert names == ["typing", "agentgym_envs.core", "agentgym_trainers.model"]


# -- layers: no module imports a layer above its own ---------------------------------------

LAYERS = (
    "agentgym_envs.core",  # the env base and everything an env is made of
    "agentgym_envs.store",  # the trajectory store: plain episodes in SQLite
    "agentgym_envs.wrappers",  # cross-cutting behaviour around an env, the recorder
    "agentgym_envs.distributed",  # env actors and the Ray pool
    "agentgym_envs.rollout",  # env slots and the one turn loop
    "agentgym_envs.eval",  # suites, the evaluator, reports, the store's CLI
)
"""Lowest first. A module of a layer may import its own layer and those below it, never
one above (``wrappers`` never imports ``eval``; ``core`` none of the others)."""


def _layer(module: str) -> int | None:
    for rank, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return rank
    return None


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each import in ``graph`` from a module of a layer to a module of a higher one."""
    found = []
    for module, edges in sorted(graph.items()):
        low = _layer(module)
        for target, line in sorted(edges.items()):
            high = _layer(target)
            if low is not None and high is not None and high > low:
                found.append(
                    f"{module} imports {target} (line {line}): "
                    f"{LAYERS[low]} sits below {LAYERS[high]}"
                )
    return found


def test_no_layer_imports_a_layer_above_it() -> None:
    offenders = upward_imports(import_graph())
    assert not offenders, (
        "imports that point up the layers (docs/architecture.md section 1); move what both "
        "need down a layer, or pass it in as a narrow interface:\n" + "\n".join(offenders)
    )


def test_the_layer_check_names_each_upward_import() -> None:
    graph = {
        "agentgym_envs.wrappers.recording": {"agentgym_envs.eval.store": 21},
        "agentgym_envs.core.env": {"agentgym_envs.wrappers.faults": 3, "agentgym_envs.cli": 4},
        "agentgym_envs.eval.evaluate": {"agentgym_envs.wrappers": 9, "agentgym_envs.store": 2},
        "agentgym_envs.distributed.host": {"agentgym_envs.wrappers.recording": 30},
    }
    assert upward_imports(graph) == [
        "agentgym_envs.core.env imports agentgym_envs.wrappers.faults (line 3): "
        "agentgym_envs.core sits below agentgym_envs.wrappers",
        "agentgym_envs.wrappers.recording imports agentgym_envs.eval.store (line 21): "
        "agentgym_envs.wrappers sits below agentgym_envs.eval",
    ]
    assert _layer("agentgym_envs.storex") is None  # a prefix is no layer
