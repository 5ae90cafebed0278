"""The library's modules import each other without circles, counting imports inside functions too (a lazy
import that closes a circle only hides it). The graph is `xmr_core.sources.import_graph`, the one the stale-result
check follows."""

from __future__ import annotations

from pathlib import Path

import xmr_core
from xmr_core.sources import import_graph

ROOT = Path(xmr_core.__file__).parent.parent


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
        for w in sorted(graph[v]):
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
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_counts_lazy_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "xmr_core"
    (pkg / "data").mkdir(parents=True)
    for f in ("__init__.py", "io.py", "data/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "data" / "corpus.py").write_text("def f():\n    from xmr_core.io import x\n")
    (pkg / "io.py").write_text("from xmr_core.data import corpus\n")
    graph = import_graph(tmp_path)
    assert graph["xmr_core.data.corpus"] == {"xmr_core.io"}
    assert graph["xmr_core.io"] == {"xmr_core.data", "xmr_core.data.corpus"}
    assert cycles(graph) == [["xmr_core.data.corpus", "xmr_core.io"]]


def test_library_has_no_import_circles() -> None:
    found = cycles(import_graph(ROOT))
    assert not found, "import circles in xmr_core: " + "; ".join(" <-> ".join(c) for c in found)
