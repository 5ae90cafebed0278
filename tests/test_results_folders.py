"""Each profile and data set has its own results folder (`results.results_folder`): a paper run, executed in a
fresh clone of this checkout, writes only under `results/paper/<dataset>/` (the committed cpu book untouched), and a
paper notebook whose tuning table is missing from its own folder stops with one line, though the cpu book has one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from xmr_core.book import html as book_html
from xmr_core.book import results
from xmr_core.book import runner as book
from xmr_core.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]

PARAMETERS = '''# %% tags=["parameters"]
PROFILE = "cpu"
DATASET = "scenes"
RESULTS_DIR = ""

# %%
import pandas as pd
from xmr_core.config import RunConfig
from xmr_core.book.results import Claim, write_claims, write_table
from xmr_core.chapters.recorded import recorded_tuning
run = RunConfig.from_params(PROFILE=PROFILE, DATASET=DATASET, RESULTS_DIR=RESULTS_DIR)
'''
# writes the keys of the committed cpu book's HREM chapter (a table, its claims page and the index)
WRITER = PARAMETERS + '''
write_table(pd.DataFrame({"rsum": [1.0, 2.0]}), "hrem/per_seed", run=run)
write_claims([Claim("c", "s", "e", "not tested")], "hrem", run=run)
'''
READER = PARAMETERS + '''
recorded_tuning("hrem/tuning", run)
'''


def test_each_profile_and_data_set_has_its_folder() -> None:
    assert results.results_folder("cpu", "scenes") == "results"
    assert results.results_folder("smoke", "scenes") == "book/_build/smoke/results"
    assert results.results_folder("paper", "coco") == "results/paper/coco"
    assert results.results_folder("cpu", "cub") == "results/cpu/cub"
    assert results.results_folder("smoke", "vg") == "book/_build/smoke/results/smoke/vg"
    with pytest.raises(ValueError, match="cannot name a results folder"):
        results.results_folder("paper", "../x")


def test_a_run_other_than_the_cpu_book_is_refused_the_cpu_folder() -> None:
    with pytest.raises(ValueError, match=r"RESULTS_DIR 'results' is the cpu book's results folder; profile paper on "
                                         r"coco writes to results/paper/coco/"):
        results.results_root(RunConfig(profile="paper", dataset="coco", results_dir="results"))
    assert results.results_root(RunConfig(profile="paper", dataset="coco")) == ROOT / "results" / "paper" / "coco"
    assert results.results_root(RunConfig(profile="cpu")) == ROOT / "results"


def test_an_index_lists_its_own_folder_only(tmp_path: Path) -> None:
    root = tmp_path / "results"
    cpu = RunConfig(profile="cpu", results_dir=str(root))
    paper = RunConfig(profile="paper", dataset="coco", results_dir=str(root / "paper" / "coco"))
    results.write_table(pd.DataFrame({"a": [1.0]}), "hrem/per_seed", run=paper)
    results.write_table(pd.DataFrame({"a": [2.0]}), "pcme/per_seed", run=cpu)
    assert results.own_result_files(root) == [root / "pcme" / "per_seed.json"]
    index = (root / "README.md").read_text()
    assert "pcme/per_seed.md" in index and "hrem" not in index and "| paper |" not in index
    assert "hrem/per_seed.md" in (root / "paper" / "coco" / "README.md").read_text()
    # the HTML book's results page of a profile shows its folder's results only
    assert [meta["profile"] for _, meta in book_html.result_items(root)] == ["cpu"]
    assert book_html.results_dir("paper", ROOT, "coco") == ROOT / "results" / "paper" / "coco"
    assert book_html.results_dir("cpu", ROOT) == ROOT / "results"


@pytest.fixture()
def clone(tmp_path: Path) -> Path:
    """A fresh clone of this checkout's HEAD with a demo chapter (untracked) beside the book's."""
    dest = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(dest)], check=True)
    chapter = dest / "book" / "99_demo"
    chapter.mkdir()
    (chapter / "train.py").write_text(WRITER)
    (chapter / "ablate.py").write_text(READER)
    return dest


@pytest.mark.timeout(600)
def test_a_paper_run_never_changes_the_cpu_results(clone: Path) -> None:
    assert (clone / "results" / "hrem" / "per_seed.csv").is_file()  # the cpu book's, committed
    assert (clone / "results" / "hrem" / "tuning.csv").is_file()
    lines: list[str] = []
    summary = book.run_book(["99_demo"], profile="paper", params={"DATASET": "coco"}, root=clone,
                            echo=lines.append)
    writer, reader = summary.outcomes
    assert writer.status == "passed", "\n".join(lines)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "results"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert status and all(line.startswith("?? results/paper/coco/") for line in status), status
    assert {"?? results/paper/coco/hrem/per_seed.csv", "?? results/paper/coco/README.md"} <= set(status)
    # the paper notebook that needs train.py's tuning table finds none of its own: one line names it
    assert reader.status == "failed"
    expected = (f"FileNotFoundError: {clone}/results/paper/coco/hrem/tuning.csv: not found for profile paper on "
                "coco; run the notebook that writes hrem/tuning under that profile and data set first")
    assert reader.error.startswith(expected) and "\n" not in reader.error


@pytest.mark.timeout(600)
def test_book_plan_keeps_the_failing_notebooks_executed_copy(clone: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xmr_core.book import plan as bookplan

    monkeypatch.chdir(clone)  # the project root is the clone's
    lines: list[str] = []
    plan = bookplan.plan_book(["99_demo"], profile="paper", params={"DATASET": "coco"}, echo=lines.append)
    assert [label for label, _ in plan.failed] == ["99_demo/ablate"]
    kept = clone / "book" / "_build" / "paper" / "plan-failed" / "99_demo" / "ablate.ipynb"
    assert f"       executed notebook with the traceback: {kept}" in lines
    assert "FileNotFoundError" in kept.read_text() and "hrem/tuning.csv: not found" in kept.read_text()
