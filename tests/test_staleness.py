"""Stale results: what a notebook imports (`xmr_core.sources`), and `xmr results check` on a tiny git project.

The project in tmp: a package `xmr_core` whose notebook `book/01_demo/train.py` imports `xmr_core.sub.c`
(which imports `..b` relatively) and `xmr_core.a` (which imports `xmr_core.b` lazily, in a function), and
a module `unused` nobody imports; a results folder with one table written at the first commit. The check
passes; editing what the notebook does not import, or its narration, keeps it passing; editing an imported
file or a code cell fails it, naming the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from xmr_core import sources
from xmr_core.book import cli, staleness
from xmr_core.book import html as book_html

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK = '''# %% [markdown]
# # Demo
# Narration.

# %% tags=["parameters"]
PROFILE = "cpu"

# %%
import json

import xmr_core.a
from xmr_core.sub.c import VALUE

print(VALUE)
'''

PACKAGE = {
    "__init__.py": "",
    "a.py": "def late():\n    from xmr_core import b\n    return b.X\n",
    "b.py": "X = 1\n",
    "sub/__init__.py": "",
    "sub/c.py": "from ..b import X\n\nVALUE = X + 1\n",
    "unused.py": "Y = 1\n",
    "paper_values/demo.csv": "table,row,value\nT1,a,1.0\n",
}
IMPORTED = ["xmr_core/__init__.py", "xmr_core/a.py", "xmr_core/b.py", "xmr_core/paper_values/demo.csv",
            "xmr_core/sub/__init__.py", "xmr_core/sub/c.py"]  # read off the imports above by hand


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def write_result(root: Path, key: str, **meta: object) -> None:
    path = root / "results" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "kind": "table", "notebook": "book/01_demo/train.py", **meta}))
    path.with_suffix(".md").write_text(f"# {key}\n\n| a |\n|---|\n| 1 |\n")


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname='demo'\n")
    for name, text in PACKAGE.items():
        (tmp_path / "xmr_core" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "xmr_core" / name).write_text(text)
    (tmp_path / "book" / "01_demo").mkdir(parents=True)
    (tmp_path / "book" / "01_demo" / "train.py").write_text(NOTEBOOK)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "sources")
    write_result(tmp_path, "demo/table1", git_commit=git(tmp_path, "rev-parse", "HEAD"))
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "results")
    return tmp_path


def check(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    monkeypatch.chdir(project)
    code = cli.main(["results", "check"])
    return code, capsys.readouterr().out


def test_notebook_sources_follow_imports_transitively(project: Path) -> None:
    found = sources.notebook_sources(project / "book" / "01_demo" / "train.py", project)
    assert [p.relative_to(project).as_posix() for p in found] == IMPORTED


def test_check_passes_then_fails_after_an_imported_file_changes(project: Path, monkeypatch, capsys) -> None:
    code, out = check(project, monkeypatch, capsys)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == "1 results: 1 fresh, 0 stale, 0 unknown"
    (project / "xmr_core" / "unused.py").write_text("Y = 2\n")  # not imported by the notebook
    nb = project / "book" / "01_demo" / "train.py"
    nb.write_text(nb.read_text().replace("# Narration.", "# Narration, reworded."))  # prose only
    assert check(project, monkeypatch, capsys)[0] == 0
    (project / "xmr_core" / "b.py").write_text("X = 2\n")  # imported lazily by a, relatively by sub/c
    code, out = check(project, monkeypatch, capsys)
    assert code == 1
    assert "[STALE] book/01_demo/train.py" in out and "changed since: xmr_core/b.py" in out and "demo/table1" in out
    assert out.strip().splitlines()[-1] == "1 results: 0 fresh, 1 stale, 0 unknown"


def test_a_json_result_holding_its_provenance_goes_stale_as_a_table(project: Path, monkeypatch, capsys) -> None:
    path = project / "results" / "demo" / "claim_records_train.json"  # `book.results.write_data`'s layout
    path.write_text(json.dumps({"key": "demo/claim_records_train", "kind": "data", "notebook": "book/01_demo/train.py",
                                "git_commit": git(project, "rev-parse", "HEAD~1"), "data": [{"claim": "x"}]}))
    code, out = check(project, monkeypatch, capsys)
    assert code == 0 and out.strip().splitlines()[-1] == "2 results: 2 fresh, 0 stale, 0 unknown", out
    (project / "xmr_core" / "b.py").write_text("X = 2\n")
    code, out = check(project, monkeypatch, capsys)
    assert code == 1 and "demo/claim_records_train, demo/table1" in out and "2 stale" in out


def test_a_changed_code_cell_makes_its_results_stale(project: Path, monkeypatch, capsys) -> None:
    nb = project / "book" / "01_demo" / "train.py"
    nb.write_text(nb.read_text().replace("print(VALUE)", "print(VALUE + 1)"))
    code, out = check(project, monkeypatch, capsys)
    assert code == 1 and "changed since: book/01_demo/train.py" in out


def test_recorded_digests_need_no_git_history(project: Path) -> None:
    notebook = project / "book" / "01_demo" / "train.py"
    inputs = sources.notebook_inputs(notebook, project)
    assert sorted(inputs["xmr_core_sources"]) == IMPORTED
    write_result(project, "demo/table2", git_commit="f" * 40, **inputs)  # a commit this clone lacks
    report = staleness.check_results(project / "results", project).by_key()
    assert report["demo/table2"].verdict.status == "fresh"
    (project / "xmr_core" / "sub" / "c.py").write_text("from ..b import X\n\nVALUE = X + 2\n")
    report = staleness.check_results(project / "results", project).by_key()
    assert report["demo/table2"].verdict == staleness.Verdict("stale", ("xmr_core/sub/c.py",))
    assert report["demo/table1"].verdict == staleness.Verdict("stale", ("xmr_core/sub/c.py",))  # via git


def test_unknown_commits_dirty_trees_and_missing_notebooks_fail(project: Path, monkeypatch, capsys) -> None:
    write_result(project, "demo/shallow", git_commit="e" * 40)
    write_result(project, "demo/dirty", git_commit=git(project, "rev-parse", "HEAD") + "+dirty")
    write_result(project, "demo/orphan", git_commit=git(project, "rev-parse", "HEAD"), notebook=None)
    report = staleness.check_results(project / "results", project).by_key()
    assert [report[k].verdict.status for k in ("demo/shallow", "demo/dirty", "demo/orphan", "demo/table1")] == [
        "unknown", "unknown", "unknown", "fresh"]
    assert "not in this clone's history" in report["demo/shallow"].verdict.reason
    code, out = check(project, monkeypatch, capsys)
    assert code == 1 and out.strip().splitlines()[-1] == "4 results: 1 fresh, 0 stale, 3 unknown"


def test_a_result_is_stale_once_a_result_it_read_changes_or_appears(project: Path, monkeypatch, capsys) -> None:
    """`reads` in a result's provenance (what `book.results.read_result` recorded: another notebook's file and the
    digest of the bytes read, None where it was absent): the result is fresh while every such file is as read,
    and stale, naming the file, once one changes, is removed, or appears where it was absent."""
    upstream = project / "results" / "demo" / "per_seed.csv"
    upstream.write_text("a\n1.0\n")
    head = git(project, "rev-parse", "HEAD")
    write_result(project, "demo/claims", git_commit=head,
                 reads={"demo/per_seed.csv": sources.digest_bytes(b"a\n1.0\n"), "demo/later.csv": None})
    report = staleness.check_results(project / "results", project).by_key()
    assert report["demo/claims"].verdict.status == "fresh"
    upstream.write_text("a\n2.0\n")  # train.py reran: its per-seed table changed
    code, out = check(project, monkeypatch, capsys)
    assert code == 1 and "changed since: results/demo/per_seed.csv" in out and "demo/claims" in out
    assert staleness.notebook_reads_changed("book/01_demo/train.py", project / "results", project) == [
        "results/demo/per_seed.csv"]
    upstream.write_text("a\n1.0\n")  # as read again
    assert staleness.check_results(project / "results", project).by_key()["demo/claims"].verdict.status == "fresh"
    (project / "results" / "demo" / "later.csv").write_text("b\n1\n")  # absent when read, written since
    verdict = staleness.check_results(project / "results", project).by_key()["demo/claims"].verdict
    assert verdict == staleness.Verdict("stale", ("results/demo/later.csv",))
    upstream.unlink()
    assert staleness.notebook_reads_changed("book/01_demo/train.py", project / "results", project) == [
        "results/demo/per_seed.csv", "results/demo/later.csv"]
    assert staleness.notebook_reads_changed("book/01_demo/other.py", project / "results", project) == []


def test_modules_imported_by_name_count(tmp_path: Path) -> None:
    """A module the registry imports by name (`importlib`, invisible to `ast`) is among a notebook's sources
    once the notebook reaches the registry; the real package's by-name imports are all declared."""
    files = {"__init__.py": "", "methods/__init__.py": "",
             "methods/registry.py": "import importlib\n\ndef load(n):\n    importlib.import_module(n)\n",
             "methods/vse.py": "X = 1\n", "methods/deep/__init__.py": "", "methods/deep/pcme.py": "Y = 1\n",
             "other.py": "Z = 1\n"}
    for name, text in files.items():
        (tmp_path / "xmr_core" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "xmr_core" / name).write_text(text)
    notebook = tmp_path / "nb.py"
    notebook.write_text("# %%\nfrom xmr_core.methods.registry import load\n")
    found = [p.relative_to(tmp_path).as_posix() for p in sources.notebook_sources(notebook, tmp_path)]
    assert found == ["xmr_core/__init__.py", "xmr_core/methods/__init__.py", "xmr_core/methods/deep/__init__.py",
                     "xmr_core/methods/deep/pcme.py", "xmr_core/methods/registry.py", "xmr_core/methods/vse.py"]
    callers = set()
    for path in sorted((ROOT / "xmr_core").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "import_module(" in text or "__import__(" in text:
            callers.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    assert callers == set(sources.BY_NAME)


@pytest.mark.slow
def test_static_sources_cover_what_a_real_notebook_imports() -> None:
    """Independent check on a real chapter: run the notebook's import statements in a fresh interpreter, then
    load every registered method as its training does, and every `xmr_core` module loaded must be among the
    statically found sources."""
    import ast

    notebook = ROOT / "book" / "01_pcme" / "train.py"
    tree = ast.parse(notebook.read_text(encoding="utf-8"))
    imports = "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    probe = (imports + "\nfrom xmr_core.methods.registry import list_methods\nlist_methods()\nimport sys\n"
             "print('\\n'.join(getattr(m, '__file__', None) or '' for n, m in "
             "list(sys.modules.items()) if n.split('.')[0] == 'xmr_core'))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    loaded = {Path(f).resolve() for f in done.stdout.split() if f}
    static = {p.resolve() for p in sources.notebook_sources(notebook, ROOT)}
    assert len(loaded) > 10 and loaded <= static, sorted(loaded - static)


WRITER = '''# %% tags=["parameters"]
PROFILE = "cpu"
RESULTS_DIR = "results"

# %%
import pandas as pd

from xmr_core.config import RunConfig
from xmr_core.book.results import write_table

run = RunConfig.from_params(PROFILE=PROFILE, RESULTS_DIR=RESULTS_DIR, PROGRESS=False)

# %%
write_table(pd.DataFrame({"a": [1.5]}), "demo/written", run=run)
'''


@pytest.mark.slow
def test_a_notebook_run_records_what_it_was_computed_from(tmp_path: Path, monkeypatch, capsys) -> None:
    """`xmr book run` of a notebook that writes a table with the real library: the provenance records the
    injected parameters, the digest of the cell that wrote it, the code cells and the imported sources (here
    a stand-in `xmr_core/book/results.py` in the project: the static analysis reads the project's files), and the
    check then passes until that file changes."""
    from xmr_core.book import runner as book

    (tmp_path / "pyproject.toml").write_text("[project]\nname='demo'\n")
    (tmp_path / "xmr_core" / "book").mkdir(parents=True)
    (tmp_path / "xmr_core" / "book" / "results.py").write_text("# stand-in\n")
    (tmp_path / "book" / "01_demo").mkdir(parents=True)
    (tmp_path / "book" / "01_demo" / "train.py").write_text(WRITER)
    summary = book.run_book(["demo"], profile="cpu", params={"RESULTS_DIR": str(tmp_path / "results")},
                            root=tmp_path, echo=lambda line: None)
    assert summary.ok, summary.outcomes[0].error
    meta = json.loads((tmp_path / "results" / "demo" / "written.json").read_text())
    assert meta["notebook"] == "book/01_demo/train.py"
    assert meta["parameters"] == {"PROFILE": "cpu", "RESULTS_DIR": str(tmp_path / "results")}
    cells = sources.code_cells(WRITER)
    assert meta["cell"] == sources.digest_bytes(cells[2].encode())  # the third code cell wrote it
    assert meta["notebook_code"] == sources.code_digest(WRITER)
    assert meta["xmr_core_sources"] == {"xmr_core/book/results.py": sources.digest_bytes(b"# stand-in\n")}
    assert check(tmp_path, monkeypatch, capsys)[0] == 0
    (tmp_path / "xmr_core" / "book" / "results.py").write_text("# stand-in, edited\n")
    code, out = check(tmp_path, monkeypatch, capsys)
    assert code == 1 and "changed since: xmr_core/book/results.py" in out


def test_built_pages_mark_stale_results(project: Path) -> None:
    """After an imported file changes, the page of the notebook (rendered from source) and the results page
    both say its table is stale and name the file."""

    def stage() -> tuple[str, str]:
        staged = project / "book" / "_build" / "cpu" / "_html_src"
        book_html.stage("cpu", project, staged)
        return (staged / "01_demo" / "train.ipynb").read_text(), (staged / "results.md").read_text()

    page, results_md = stage()
    assert "results/demo/table1" in page and "Stale" not in page and "Stale" not in results_md
    (project / "xmr_core" / "b.py").write_text("X = 3\n")
    page, results_md = stage()
    assert "Stale result" in page and "xmr_core/b.py" in page
    assert ":::{warning}\n**Stale**" in results_md and "`xmr_core/b.py`" in results_md
