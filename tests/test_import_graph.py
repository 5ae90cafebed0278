"""The library's modules import each other without circles, counting imports inside functions too (a lazy
import that closes a circle only hides it), and only downwards through the layers of `docs/layout.md`: the science
(every module outside the packages below) imports nothing of the runs or the book, the runs nothing of the book, and
no chapter module another chapter's. The graph is `xmr_core.sources.import_graph`, the one the stale-result check
follows."""

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


CHAPTERS = ("benchmark", "pcme", "msrm", "hrem", "dvse", "hmrn", "leaderboard")  # the chapter modules


def chapter_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """{chapter module: the other chapter modules it imports} (non-empty entries only; `import_graph` resolves
    `from xmr_core.chapters import pcme` to an edge to `xmr_core.chapters.pcme`, lazy imports included)."""
    modules = {f"xmr_core.chapters.{c}" for c in CHAPTERS}
    return {m: found for m in sorted(modules & graph.keys()) if (found := (graph[m] & modules) - {m})}


def test_chapter_imports_finds_a_planted_chapter_to_chapter_import(tmp_path: Path) -> None:
    pkg = tmp_path / "xmr_core"
    (pkg / "chapters").mkdir(parents=True)
    (pkg / "experiment").mkdir()
    for f in ("__init__.py", "chapters/__init__.py", "chapters/summary.py", "experiment/__init__.py",
              "experiment/training.py"):
        (pkg / f).write_text("")
    (pkg / "chapters" / "pcme.py").write_text("from xmr_core.experiment.training import x\n")
    (pkg / "chapters" / "msrm.py").write_text("from xmr_core.chapters.summary import y\n")
    (pkg / "chapters" / "dvse.py").write_text("def f():\n    from xmr_core.chapters import pcme\n")
    graph = import_graph(tmp_path)
    assert chapter_imports(graph) == {"xmr_core.chapters.dvse": {"xmr_core.chapters.pcme"}}


def test_no_chapter_module_imports_another() -> None:
    """The experiment layer (`xmr_core.experiment`) and the library hold what chapters share; chapter modules
    import those and the shared chapter helpers (`chapters.summary`), never each other."""
    found = chapter_imports(import_graph(ROOT))
    assert not found, "chapter modules importing other chapters: " + "; ".join(
        f"{m} -> {', '.join(sorted(v))}" for m, v in found.items())


def test_the_experiment_layer_imports_no_chapter() -> None:
    graph = import_graph(ROOT)
    found = {m: {d for d in deps if d.startswith("xmr_core.chapters")} for m, deps in graph.items()
             if m.startswith("xmr_core.experiment")}
    assert not {m: d for m, d in found.items() if d}, f"the experiment layer imports chapters: {found}"


# The packages above the science, bottom up (`docs/layout.md`); every other module of xmr_core, at the top or in a
# science package (data, encoders, methods), is of the science layer, so a new file is judged without being listed.
UPPER = ("runs", "book", "experiment", "chapters", "bench")


def layer(module: str) -> str:
    """The layer of an xmr_core module: its package under xmr_core if that is one of `UPPER`, else "science"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in UPPER else "science"


def upward_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """{science or runs module: the modules of a higher layer it imports} (non-empty entries only): the science may
    import only the science, the runs the science and the runs."""
    allowed = {"science": {"science"}, "runs": {"science", "runs"}}
    return {m: found for m in sorted(graph) if layer(m) in allowed
            and (found := {d for d in graph[m] if layer(d) not in allowed[layer(m)]})}


def test_upward_imports_finds_planted_violations(tmp_path: Path) -> None:
    pkg = tmp_path / "xmr_core"
    for folder in ("data", "runs", "book"):
        (pkg / folder).mkdir(parents=True)
    for f in ("__init__.py", "data/__init__.py", "runs/__init__.py", "book/__init__.py", "book/results.py",
              "runs/train.py", "metrics.py"):
        (pkg / f).write_text("")
    (pkg / "newly_added.py").write_text("def f():\n    from xmr_core.runs.train import fit\n")  # no list names it
    (pkg / "data" / "corpus.py").write_text("from xmr_core.book import results\n")
    (pkg / "runs" / "log.py").write_text("from xmr_core.book.results import x\nfrom xmr_core import metrics\n")
    (pkg / "book" / "cli.py").write_text("from xmr_core.runs import train\nfrom xmr_core import metrics\n")
    graph = import_graph(tmp_path)
    assert upward_imports(graph) == {
        "xmr_core.data.corpus": {"xmr_core.book", "xmr_core.book.results"},
        "xmr_core.newly_added": {"xmr_core.runs.train"},
        "xmr_core.runs.log": {"xmr_core.book.results"}}


def test_the_science_imports_nothing_of_the_runs_or_the_book() -> None:
    """Losses, metrics, claims, the data and the methods are what the papers define: they must stay usable (and
    testable) without the machinery that trains runs or writes the book, and the runs without the book."""
    found = upward_imports(import_graph(ROOT))
    assert not found, "imports against the layers (docs/layout.md): " + "; ".join(
        f"{m} ({layer(m)}) -> {', '.join(sorted(v))}" for m, v in found.items())
