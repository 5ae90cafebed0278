"""The book runner: parameter injection, skip-if-unchanged, failure reporting, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xmr_core.book import cli
from xmr_core.book import runner as book

NOTEBOOK = '''# %% [markdown]
# A demo chapter notebook.

# %% tags=["parameters"]
PROFILE = "cpu"
OUT = ""
N = 1
RATE = 0.5
FAIL = False

# %%
import json, os
if FAIL:
    raise ValueError("deliberate failure")
with open(OUT, "w") as fh:
    json.dump({"PROFILE": PROFILE, "N": N, "notebook": os.environ.get("XMR_NOTEBOOK"), "cwd": os.getcwd()}, fh)
'''


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname='demo'\n")
    (tmp_path / "xmr_core").mkdir()
    (tmp_path / "xmr_core" / "lib.py").write_text("X = 1\n")
    chapter = tmp_path / "book" / "01_demo"
    chapter.mkdir(parents=True)
    (chapter / "train.py").write_text(NOTEBOOK)
    return tmp_path


def run(project: Path, **kwargs) -> tuple[book.RunSummary, list[str]]:
    lines: list[str] = []
    summary = book.run_book(root=project, echo=lines.append, **kwargs)
    return summary, lines


def test_parameters_are_injected_and_output_goes_to_build(project: Path) -> None:
    out = project / "out.json"
    summary, lines = run(project, names=["demo"], profile="smoke", params={"OUT": str(out), "N": 3})
    assert summary.line() == "1 passed, 0 failed"
    got = json.loads(out.read_text())
    assert got["PROFILE"] == "smoke" and got["N"] == 3
    assert got["notebook"] == "book/01_demo/train.py"
    assert Path(got["cwd"]) == project / "book" / "01_demo"
    executed = project / "book" / "_build" / "smoke" / "01_demo" / "train.ipynb"
    assert executed.is_file()
    assert json.loads(executed.read_text())["metadata"]["kernelspec"]["name"] == "python3"
    assert lines[-1] == "1 passed, 0 failed"


def test_unchanged_inputs_are_skipped_until_something_changes(project: Path) -> None:
    params = {"OUT": str(project / "out.json")}
    assert run(project, profile="smoke", params=params)[0].count("passed") == 1
    again, lines = run(project, profile="smoke", params=params)
    assert again.count("skipped") == 1 and "skip" in lines[1]
    assert run(project, profile="smoke", params=params, force=True)[0].count("passed") == 1
    assert run(project, profile="smoke", params={**params, "N": 2})[0].count("passed") == 1  # new parameter
    src = project / "book" / "01_demo" / "train.py"
    src.write_text(src.read_text() + "\n# edited\n")  # notebook change
    assert run(project, profile="smoke", params={**params, "N": 2})[0].count("passed") == 1
    assert run(project, profile="smoke", params={**params, "N": 2})[0].count("skipped") == 1


def test_only_the_library_files_a_notebook_imports_rerun_it(project: Path) -> None:
    """The skip rule hashes the notebook's own `xmr_core` sources (what `xmr results check` judges staleness
    by): an edit to a module it never imports skips it, one to a module it imports (here through another, and
    only inside a branch the kernel never takes: the walk is static, as the staleness check's is) reruns it."""
    (project / "xmr_core" / "other.py").write_text("Y = 1\n")
    (project / "xmr_core" / "helper.py").write_text("import xmr_core.lib\n")
    src = project / "book" / "01_demo" / "train.py"
    src.write_text(src.read_text() + "\nif N < 0:\n    import xmr_core.helper\n")
    params = {"OUT": str(project / "out.json")}
    assert run(project, profile="smoke", params=params)[0].count("passed") == 1
    (project / "xmr_core" / "other.py").write_text("Y = 2\n")  # not imported by the notebook
    assert run(project, profile="smoke", params=params)[0].count("skipped") == 1
    (project / "xmr_core" / "lib.py").write_text("X = 2\n")  # imported through helper.py
    assert run(project, profile="smoke", params=params)[0].count("passed") == 1
    assert run(project, profile="smoke", params=params)[0].count("skipped") == 1
    (project / "xmr_core" / "paper.csv").write_text("a\n1\n")  # a data file: any module may read it
    assert run(project, profile="smoke", params=params)[0].count("passed") == 1


THREADS_NOTEBOOK = '''# %% tags=["parameters"]
PROFILE = "cpu"
OUT = ""

# %%
import torch
with open(OUT, "w") as fh:
    fh.write(str(torch.get_num_threads()))
'''


def test_kernels_compute_on_one_thread_unless_told(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the machine's cores and the caller's environment, a kernel's torch runs on one thread, or on
    XMR_KERNEL_THREADS; the count enters the skip rule; the caller's environment is restored."""
    (project / "book" / "01_demo" / "train.py").write_text(THREADS_NOTEBOOK)
    out = project / "threads.txt"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("XMR_KERNEL_THREADS", raising=False)
    summary, lines = run(project, profile="smoke", params={"OUT": str(out)})
    assert summary.ok and out.read_text() == "1" and "1 torch thread(s) a kernel" in lines[0]
    assert os.environ["OMP_NUM_THREADS"] == "3"
    monkeypatch.setenv("XMR_KERNEL_THREADS", "2")
    assert run(project, profile="smoke", params={"OUT": str(out)})[0].count("passed") == 1  # not skipped
    assert out.read_text() == "2"
    monkeypatch.setenv("XMR_KERNEL_THREADS", "two")
    with pytest.raises(SystemExit, match="XMR_KERNEL_THREADS must be a positive integer, got 'two'"):
        run(project, profile="smoke", params={"OUT": str(out)})


def test_failure_is_reported_with_the_executed_notebook(project: Path) -> None:
    summary, lines = run(project, profile="smoke", params={"OUT": str(project / "o.json"), "FAIL": True})
    assert not summary.ok and summary.line() == "0 passed, 1 failed"
    failed = summary.outcomes[0]
    assert "deliberate failure" in failed.error
    assert any(str(failed.output) in line for line in lines)
    assert "deliberate failure" in failed.output.read_text()  # the traceback is in the executed notebook
    # a failed run is never skipped next time
    assert run(project, profile="smoke", params={"OUT": str(project / "o.json")})[0].count("passed") == 1


def test_cli_exit_status_and_listing(project: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(project)
    (project / "book" / "01_demo" / "ablate.py").write_text(
        NOTEBOOK + '\nfrom xmr_core.book.results import write_table\n# write_table(df, "demo/table1", run=cfg)\n'
    )
    assert cli.main(["book", "list"]) == 0
    listing = capsys.readouterr().out
    assert listing.index("train") < listing.index("ablate") and "results/demo/table1" in listing
    out = str(project / "o.json")
    assert cli.main(["book", "run", "--profile", "smoke", "-p", "OUT", out, "-p", "FAIL", "True"]) == 1
    assert "0 passed, 2 failed" in capsys.readouterr().out
    assert cli.main(["book", "run", "demo", "--profile", "smoke", "-p", "OUT", out]) == 0
    one = book.resolve_chapters(["demo/ablate"], project / "book")
    assert [nb.label for nb in one] == ["01_demo/ablate"]
    assert [nb.label for nb in book.resolve_chapters(["01_demo/train", "demo"], project / "book")] == [
        "01_demo/train", "01_demo/ablate"]


def test_unknown_chapter_and_missing_parameters_cell(project: Path) -> None:
    with pytest.raises(SystemExit, match="no chapter 'nope'"):
        book.resolve_chapters(["nope"], project / "book")
    with pytest.raises(SystemExit, match="has no notebook 'nope'"):
        book.resolve_chapters(["demo/nope"], project / "book")
    (project / "book" / "01_demo" / "train.py").write_text("# %%\nx = 1\n")
    summary, _ = run(project, profile="smoke")
    assert summary.outcomes[0].status == "failed" and "parameters" in summary.outcomes[0].error


def test_parse_value() -> None:
    assert book.parse_value("3") == 3 and book.parse_value("0.5") == 0.5
    assert book.parse_value("True") is True and book.parse_value("[1, 2]") == [1, 2]
    assert book.parse_value("cuda:0") == "cuda:0" and book.parse_value("'x'") == "x"


# ------------------------------------------------------------- parameters checked before any kernel starts


def _no_kernel(nb, output, parameters) -> None:
    raise AssertionError(f"a kernel started for {nb.label}")


def _refused(project: Path, names: list[str], params: dict) -> str:
    with pytest.raises(SystemExit) as exit_:
        run(project, names=names, profile="smoke", params=params, execute=_no_kernel)
    message = str(exit_.value.code)
    assert "\n" not in message
    return message


def test_unknown_parameter_is_one_line_naming_it_and_who_declares_it(project: Path) -> None:
    message = _refused(project, [], {"NOPE": 1})
    assert message == ("xmr book: unknown parameter -p NOPE: none of the selected notebooks (01_demo/train) "
                       "declares it; no notebook of the book declares it")
    other = project / "book" / "02_other"
    other.mkdir()
    (other / "visualise.py").write_text(NOTEBOOK.replace("N = 1\n", "N = 1\nN_HEAT = 4\n"))
    message = _refused(project, ["demo"], {"OUT": "x", "N_HEAT": 2})
    assert message.endswith("(01_demo/train) declares it; only 02_other/visualise declares it")


def test_a_value_of_another_type_than_the_declared_literal_is_refused(project: Path) -> None:
    (project / "book" / "01_demo" / "ablate.py").write_text(NOTEBOOK)
    assert _refused(project, [], {"N": "three"}) == (
        "xmr book: parameter -p N 'three' is of type str, but 01_demo/train, 01_demo/ablate declare N = 1 "
        "(of type int)")
    assert "declare N = 1 (of type int)" in _refused(project, [], {"N": True})  # a bool is no int
    assert "declare N = 1 (of type int)" in _refused(project, [], {"N": 2.0})
    assert "declare FAIL = False (of type bool)" in _refused(project, [], {"FAIL": 1})
    assert _refused(project, ["demo/ablate"], {"OUT": 3}) == (
        "xmr book: parameter -p OUT 3 is of type int, but 01_demo/ablate declares OUT = '' (of type str); "
        "quote a string: -p OUT \"'3'\"")
    seen: dict[str, dict] = {}
    summary, _ = run(project, profile="smoke", params={"N": 2, "RATE": 1, "FAIL": True},
                     execute=lambda nb, out, params: seen.setdefault(nb.label, params))
    assert summary.ok and seen["01_demo/train"]["RATE"] == 1  # an int where a float is declared


def test_a_parameter_goes_only_to_the_notebooks_that_declare_it(project: Path) -> None:
    (project / "book" / "01_demo" / "ablate.py").write_text(NOTEBOOK.replace("N = 1\n", "N = 1\nN_HEAT = 4\n"))
    seen: dict[str, dict] = {}
    run(project, profile="smoke", params={"N_HEAT": 2, "N": 3},
        execute=lambda nb, out, params: seen.setdefault(nb.label, params))
    assert seen["01_demo/ablate"] == {"PROFILE": "smoke", "N_HEAT": 2, "N": 3}
    assert seen["01_demo/train"] == {"PROFILE": "smoke", "N": 3}


def test_the_command_line_exits_non_zero_with_one_line(project: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "xmr_core.book.cli", "book", "run", "--profile", "smoke",
                           "-p", "N", "many"], cwd=project, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "xmr book: parameter -p N 'many' is of type str, but 01_demo/train declares N = 1 (of type int)"]


TRAIN_WRITES = '''# %% tags=["parameters"]
PROFILE = "cpu"
RESULTS_DIR = "results"
VALUE = 1.0

# %%
import pandas as pd

from xmr_core.config import RunConfig
from xmr_core.book.results import write_table

run = RunConfig.from_params(PROFILE=PROFILE, RESULTS_DIR=RESULTS_DIR, PROGRESS=False)
write_table(pd.DataFrame({"value": [VALUE]}), "demo/per_seed", run=run)
'''

VISUALISE_READS = '''# %% tags=["parameters"]
PROFILE = "cpu"
RESULTS_DIR = "results"

# %%
from xmr_core.book.results import read_table, write_table
from xmr_core.config import RunConfig

run = RunConfig.from_params(PROFILE=PROFILE, RESULTS_DIR=RESULTS_DIR, PROGRESS=False)
write_table(read_table("demo/per_seed", run=run) * 2, "demo/doubled", run=run)
'''


@pytest.mark.slow
def test_a_notebook_reruns_when_a_result_it_read_changed(tmp_path: Path) -> None:
    """A chapter whose visualise.py reads the table train.py writes (`book.results.read_table`): after train.py reruns
    with another value, visualise.py reruns too, though its own inputs are unchanged, and its table follows; when
    train.py's table comes out as before, visualise.py is skipped. Kernels import the library under test."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname='demo'\n")
    (tmp_path / "xmr_core" / "book").mkdir(parents=True)
    (tmp_path / "xmr_core" / "book" / "results.py").write_text("# stand-in\n")
    (tmp_path / "book" / "01_demo").mkdir(parents=True)
    (tmp_path / "book" / "01_demo" / "train.py").write_text(TRAIN_WRITES)
    (tmp_path / "book" / "01_demo" / "visualise.py").write_text(VISUALISE_READS)
    results = tmp_path / "results"

    def book_run(**params: object) -> list[str]:
        summary, _ = run(tmp_path, names=["demo"], profile="cpu", params={"RESULTS_DIR": str(results), **params})
        assert summary.ok, [o.error for o in summary.outcomes]
        return [o.status for o in summary.outcomes]

    assert book_run() == ["passed", "passed"]
    assert book_run() == ["skipped", "skipped"]
    lines: list[str] = []
    summary = book.run_book(names=["demo"], profile="cpu", params={"RESULTS_DIR": str(results), "VALUE": 3.0},
                            root=tmp_path, echo=lines.append)
    assert [o.status for o in summary.outcomes] == ["passed", "passed"]
    assert "[run ] 01_demo/visualise ... (results it read changed: results/demo/per_seed.csv)" in lines
    assert (results / "demo" / "doubled.csv").read_text() == "value\n6.0\n"
    assert book_run(VALUE=3.0) == ["skipped", "skipped"]
    (results / "demo" / "per_seed.csv").write_text("value\n5.0\n")  # the table edited by hand
    assert book_run(VALUE=3.0) == ["skipped", "passed"]
    assert (results / "demo" / "doubled.csv").read_text() == "value\n10.0\n"
