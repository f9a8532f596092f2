"""The import direction is part of the design: planner -> simulator <- executor, CLI on top.

Scans every module's import statements (static, so lazy imports inside functions count too).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "simulator": {"torch", "planner", "executor", "trainplan"},
    "planner": {"torch", "executor", "trainplan"},
    "executor": {"planner", "trainplan"},
}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_import_direction(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_roots(path) & FORBIDDEN[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "; ".join(offenders)


def test_scanner_sees_lazy_imports(tmp_path):
    probe = tmp_path / "m.py"
    probe.write_text("def f():\n    import torch.distributed as dist\n    from planner import x\n")
    assert {"torch", "planner"} <= _imported_roots(probe)


# --- inside simulator: the workload stands apart from the cluster, and no two modules import each other

SIMULATOR_MODULES = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
                     for p in sorted((ROOT / "simulator").rglob("*.py"))}


def _type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_import_nodes(tree: ast.AST):
    """Import statements that run (lazy ones inside functions too); ``if TYPE_CHECKING:`` blocks never run."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _known(name: str) -> str | None:
    """The simulator module ``name`` loads (a name inside a module resolves to that module)."""
    parts = name.split(".")
    while parts and ".".join(parts) not in SIMULATOR_MODULES:
        parts.pop()
    return ".".join(parts) or None


def _simulator_imports(module: str) -> set[str]:
    path = SIMULATOR_MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    deps = set()
    for node in _runtime_import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # ``from pkg import sub`` loads the submodule; ``from pkg import name`` loads pkg
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in SIMULATOR_MODULES else base for a in node.names]
        deps.update(d for d in map(_known, names) if d and d != module)
    return deps


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan 1972), iteratively."""
    index, low, on_stack, stack, cycles, counter = {}, {}, set(), [], [], [0]

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle_among_simulator_modules():
    graph = {module: _simulator_imports(module) for module in SIMULATOR_MODULES}
    assert _import_cycles(graph) == []


def test_workload_does_not_import_the_cluster():
    offenders = [f"{m} imports {sorted(d for d in _simulator_imports(m) if d.startswith('simulator.cluster'))}"
                 for m in SIMULATOR_MODULES if m.startswith("simulator.workload")
                 and any(d.startswith("simulator.cluster") for d in _simulator_imports(m))]
    assert not offenders, "; ".join(offenders)


def test_cycle_finder_sees_a_lazy_cycle_and_skips_type_checking(tmp_path):
    assert _import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _import_cycles({"a": {"b"}, "b": set()}) == []
    probe = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
                      "def f():\n    import y\n")
    assert [a.name for n in _runtime_import_nodes(probe) if isinstance(n, ast.Import) for a in n.names] == ["y"]


def test_scanner_resolves_submodules_and_names():
    assert _known("simulator.cluster.spec.Dtype") == "simulator.cluster.spec"
    assert "simulator.cluster.presets" in _simulator_imports("simulator.cluster.io")
    assert "simulator.dtypes" in _simulator_imports("simulator.cluster.spec")
