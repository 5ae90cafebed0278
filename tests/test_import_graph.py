"""The library's modules import each other without circles, counting imports inside functions too (a lazy
import that closes a circle only hides it)."""

from __future__ import annotations

import ast
from pathlib import Path

import xmr_core

ROOT = Path(xmr_core.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The xmr_core modules `path` imports anywhere in its body (a `from pkg import name` that names a
    submodule counts as importing it); package `__init__`s a dotted import passes through are left out."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            found |= subs or {node.module}
            if len(subs) < len(node.names):
                found.add(node.module)
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, module_name(p), modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycles_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_imports_of_counts_lazy_and_submodule_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from xmr_core.data import corpus\n    import xmr_core.io\n")
    assert imports_of(src, "m", {"xmr_core.data", "xmr_core.data.corpus", "xmr_core.io"}) == {
        "xmr_core.data.corpus", "xmr_core.io"}


def test_library_has_no_import_circles() -> None:
    found = cycles(import_graph())
    assert not found, "import circles in xmr_core: " + "; ".join(" <-> ".join(c) for c in found)
