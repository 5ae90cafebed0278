"""`xmr book plan` (`xmr_core.book.plan`): the runs the notebooks ask for, by notebook and stage, their costs and the
totals; `xmr runs train`; and, on the smoke profile, that executing a notebook asks for no run its plan did not
list."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from xmr_core.book import cli
from xmr_core.book import plan as bookplan
from xmr_core.book.runner import Notebook, RunSummary, resolve_chapters
from xmr_core.runs.executors import JOBS_ENV
from xmr_core.runs.fits import FITS_DIR
from xmr_core.runs.log import read_log
from xmr_core.runs.trace import PLAN_ENV

ROOT = Path(__file__).resolve().parents[1]


def _record(key: str, notebook: str = "book/01_x/train.py", stage: int = 1, cached: bool = False,
            core_seconds: float | None = None, method: str = "vse", provisional: bool = False,
            batch: int | None = None) -> dict[str, Any]:
    return {"notebook": notebook, "stage": stage, "batch": batch, "label": "", "method": method, "seed": 0, "epochs": 2,
            "threads": 1, "key": key, "run": f"{method}-{key[:16]}", "cached": cached, "core_seconds": core_seconds,
            "provisional": provisional}


def _results(root: Path, rows: list[tuple[str, float]]) -> None:
    folder = root / "results" / "x"
    folder.mkdir(parents=True)
    (folder / "training.csv").write_text("model,run,train s\n" + "".join(f"m,{r},{s}\n" for r, s in rows))
    (folder / "table.csv").write_text("model,rsum\nm,1.0\n")  # no run and train s: not a cost table


def test_the_trace_reads_the_notebook_the_runner_names() -> None:
    from xmr_core.book import results
    from xmr_core.runs import trace as plantrace

    assert plantrace.NOTEBOOK_ENV == results.NOTEBOOK_ENV


def test_costs_recorded_committed_median_or_default(tmp_path: Path) -> None:
    _results(tmp_path, [("vse-" + "a" * 16, 100.0), ("vse-" + "b" * 16, 300.0), ("vse-" + "c" * 16, 50.0),
                        ("pcme-" + "d" * 16, 40.0)])
    records = [_record("e" * 64, cached=True, core_seconds=12.5), _record("a" * 64), _record("f" * 64),
               _record("9" * 64, method="hrem"), _record("a" * 64, stage=2)]  # asked for again: listed once
    plan = bookplan.build_plan(records, "cpu", tmp_path)
    assert [(r.core_seconds, r.source) for r in plan.runs] == [
        (12.5, "recorded"), (100.0, "results"), (100.0, "method median"),
        (bookplan.DEFAULT_CORE_SECONDS["cpu"], "default")]
    assert plan.requests == 5 and len(plan.keys) == 4
    smoke = bookplan.build_plan(records, "smoke", tmp_path)  # committed results are cpu runs: not used for smoke
    assert [r.source for r in smoke.runs] == ["recorded", "default", "default", "default"]
    totals = plan.totals()
    assert totals["runs"] == 4 and totals["cached"] == 1 and totals["to train"] == 3
    assert totals["recorded core-h"] == pytest.approx(12.5 / 3600)
    assert totals["estimated core-h"] == pytest.approx((200.0 + bookplan.DEFAULT_CORE_SECONDS["cpu"]) / 3600)


def test_a_measured_step_costs_each_run_its_schedule_scaled_to_the_images_planned_for(tmp_path: Path) -> None:
    _results(tmp_path, [("vse-" + "a" * 16, 100.0)])
    timed = {"epochs": 60, "epoch_items": 40, "batch_size": 16, "epoch_steps": 3, "train_images": 40,
             "step_core_seconds": 2.0}  # 40 images a step of 16: the last step is short
    records = [_record("a" * 64) | timed, _record("b" * 64) | timed | {"stand_in": True},
               _record("c" * 64, cached=True, core_seconds=7.0) | timed | {"step_core_seconds": None},
               _record("d" * 64) | timed | {"step_core_seconds": None}]
    own = bookplan.build_plan(records, "cpu", tmp_path)
    assert [(r.core_seconds, r.source) for r in own.runs] == [
        (100.0, "results"), (2.0 * 60 * 3, "per step"), (7.0, "recorded"), (100.0, "method median")]
    paper = bookplan.build_plan(records, "paper", tmp_path, train_images=113_287)  # planned from a 40-image copy
    assert paper.runs[0].core_seconds == pytest.approx(2.0 * 60 * 7_081)  # ceil(113,287 / 16) whole steps an epoch
    assert [r.source for r in paper.runs] == ["per step", "per step", "recorded", "default"]
    assert paper.totals()["stand-in"] == 1
    printed: list[str] = []
    paper.print([1], echo=printed.append)
    assert "costs of the runs to train: 2 per step, 1 default; steps scaled to a training split of 113,287 images" \
        in printed[-2]
    assert printed[-1].startswith("1 run(s) listed on stand-in inputs")


def test_wall_packs_each_batch_on_the_workers(tmp_path: Path) -> None:
    costs = {"1": 5.0, "2": 4.0, "3": 3.0, "4": 3.0, "5": 3.0, "6": 7.0}
    records = [_record(k * 64, stage=1, batch=1, core_seconds=None) for k in "12345"] + [
        _record("6" * 64, stage=2, batch=2), _record("7" * 64, stage=2, batch=2, cached=True, core_seconds=99.0)]
    plan = bookplan.build_plan(records, "smoke", tmp_path)
    for run in plan.runs:
        if not run.cached:
            run.core_seconds = costs[run.record["key"][0]]
    # stage 1 {5,4,3,3,3} longest first onto the least loaded: 1 worker 18; 2 workers [5,3] [4,3,3] -> 10;
    # 8 workers -> 5; stage 2: 7 (the cached run costs no time)
    assert [plan.wall_seconds(w) for w in (1, 2, 8)] == [25.0, 17.0, 12.0]
    other = bookplan.build_plan([_record("1" * 64, notebook="a"), _record("2" * 64, notebook="b")], "smoke", tmp_path)
    assert other.wall_seconds(2) == 2 * bookplan.DEFAULT_CORE_SECONDS["smoke"]  # notebooks run one after another


def test_cold_wall_packs_every_run_in_the_batch_that_first_asks_for_it(tmp_path: Path) -> None:
    cost = {"1": 5.0, "2": 4.0, "3": 3.0, "4": 7.0, "5": 2.0, "6": 6.0}
    records = [_record(k * 64, batch=1, cached=True, core_seconds=cost[k]) for k in "123"] + [
        _record("4" * 64, stage=2, core_seconds=None), _record("5" * 64, stage=3, core_seconds=None),  # lone fits
        _record("6" * 64, notebook="b", batch=1, cached=True, core_seconds=6.0),  # another kernel's batch 1
        _record("1" * 64, notebook="b", batch=1, cached=True, core_seconds=5.0)]  # trained before: not again
    plan = bookplan.build_plan(records, "smoke", tmp_path)
    for run in plan.runs:
        run.core_seconds = cost[run.record["key"][0]]
    # a's batch {5,4,3}: 1 worker 12, 2 workers [5] [4,3] -> 7, 8 workers 5; the lone 7 and 2 one after another;
    # b's batch {6} (its run 1 was trained by a): 6
    assert [plan.wall_seconds(w, cold=True) for w in (1, 2, 8)] == [27.0, 22.0, 20.0]
    assert [plan.wall_seconds(w) for w in (1, 2, 8)] == [9.0] * 3  # the missing 7 and 2, each its own stage


def test_plan_book_executes_in_trace_mode_aside_and_reports_failures(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, dict[str, Any], Path]] = []

    def execute(nb: Notebook, output: Path, parameters: dict[str, Any]) -> None:
        seen.append((nb.label, parameters, output))
        with open(os.environ[PLAN_ENV], "a") as fh:
            fh.write(json.dumps(_record(str(len(seen)) * 64, notebook=nb.label)) + "\n")
        if nb.name == "ablate":
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text("the executed notebook, with its traceback")
            raise ValueError("the untrained model has no history")

    monkeypatch.delenv(PLAN_ENV, raising=False)
    lines: list[str] = []
    keep = tmp_path / "plan-failed"
    (keep / "01_pcme").mkdir(parents=True)
    (keep / "01_pcme" / "train.ipynb").write_text("an earlier failure")  # train passes now: its old copy goes
    plan = bookplan.plan_book(["pcme"], profile="smoke", params={"SEED": 1}, echo=lines.append, execute=execute,
                              keep=keep)
    kept = keep / "01_pcme" / "ablate.ipynb"
    assert kept.read_text() == "the executed notebook, with its traceback"  # its temporary folder is gone
    assert not (keep / "01_pcme" / "train.ipynb").exists()
    assert f"       executed notebook with the traceback: {kept}" in lines
    assert [s[0] for s in seen] == [nb.label for nb in resolve_chapters(["pcme"], ROOT / "book")]
    for _, parameters, output in seen:
        assert parameters["PROFILE"] == "smoke" and parameters["SEED"] == 1
        assert not Path(parameters["RESULTS_DIR"]).is_relative_to(ROOT) and not output.is_relative_to(ROOT)
    assert [r.record["notebook"] for r in plan.runs] == [s[0] for s in seen]
    assert plan.failed == [("01_pcme/ablate", "ValueError: the untrained model has no history")]
    assert PLAN_ENV not in os.environ
    printed: list[str] = []
    plan.print([1, 2], echo=printed.append)
    assert printed[0] == "01_pcme/train stage 1: 1 run(s), 1 to train"
    assert any(line.startswith("plan (smoke profile): 3 runs (3 requests), 0 cached, 0 from fit summaries and records "
                               "(no training), 3 to train") for line in printed)
    assert printed[-1].startswith("incomplete: 01_pcme/ablate failed in trace mode")


def test_runs_train_executes_with_the_workers_and_writes_no_results(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str | None, str]] = []

    def execute(nb: Notebook, output: Path, parameters: dict[str, Any]) -> None:
        seen.append((os.environ.get(JOBS_ENV), parameters["RESULTS_DIR"]))

    monkeypatch.delenv(JOBS_ENV, raising=False)
    assert bookplan.train_runs(["hrem/train"], "smoke", 3, echo=lambda line: None, execute=execute)
    assert seen[0][0] == "3" and not Path(seen[0][1]).is_relative_to(ROOT) and JOBS_ENV not in os.environ


def test_book_run_jobs_sets_the_workers_for_the_notebooks_only(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from xmr_core.book.runner import run_book

    seen: list[str | None] = []
    monkeypatch.setenv(JOBS_ENV, "5")
    summary = run_book(["hrem/train"], profile="smoke", force=True, root=ROOT, echo=lambda line: None, jobs=2,
                       execute=lambda nb, output, parameters: seen.append(os.environ.get(JOBS_ENV)))
    assert summary.ok and seen == ["2"] and os.environ[JOBS_ENV] == "5"


def _cold_project(root: Path) -> list[Notebook]:
    """A book of two notebooks: 01_x/train with committed runs (a training table, provenance naming it) and
    01_x/visualise with none."""
    folder = root / "book" / "01_x"
    folder.mkdir(parents=True)
    for name in ("train", "visualise"):
        (folder / f"{name}.py").write_text('# %% tags=["parameters"]\nPROFILE = "cpu"\n')
    _results(root, [("vse-" + "a" * 16, 3600.0), ("vse-" + "b" * 16, 1800.0), ("pcme-" + "c" * 16, 7200.0)])
    (root / "results" / "x" / "training.json").write_text(json.dumps(
        {"key": "x/training", "kind": "table", "notebook": "book/01_x/train.py"}))
    return resolve_chapters([], root / "book")


def test_cold_cost_counts_the_runs_the_cache_lacks(tmp_path: Path) -> None:
    notebooks = _cold_project(tmp_path)
    cache = tmp_path / "cache"
    cold = bookplan.cold_cost(notebooks, "cpu", tmp_path, cache)
    assert sorted(cold.runs) == ["pcme-" + "c" * 16, "vse-" + "a" * 16, "vse-" + "b" * 16]
    assert cold.core_seconds == pytest.approx(3600.0 + 1800.0 + 7200.0) and cold.unknown == ["01_x/visualise"]
    assert "3 run(s) to train" in cold.line() and "at least 3.50 core-hours" in cold.line()
    done = cache / "runs" / ("vse-" + "a" * 16)  # finished in the cache: not to train
    done.mkdir(parents=True)
    (done / "result.json").write_text("{}")
    (done / "best.pt").write_bytes(b"")
    unfinished = cache / "runs" / ("vse-" + "b" * 16)  # no best weights: still to train
    unfinished.mkdir(parents=True)
    (unfinished / "result.json").write_text("{}")
    assert sorted(bookplan.cold_cost(notebooks, "cpu", tmp_path, cache).runs) == ["pcme-" + "c" * 16, "vse-" + "b" * 16]
    fits = bookplan.committed_records("cpu", root=tmp_path) / FITS_DIR  # a committed fit summary stands in: no training
    fits.mkdir(parents=True)
    (fits / ("pcme-" + "c" * 16 + ".json.gz")).write_bytes(b"")
    summarised = bookplan.cold_cost(notebooks, "cpu", tmp_path, cache)
    assert summarised.runs == ["vse-" + "b" * 16] and summarised.summarised == 1
    assert "1 run(s) to train" in summarised.line() and "1 more the cache lacks stand in by their committed fit " \
        "summaries" in summarised.line()
    (fits / ("pcme-" + "c" * 16 + ".json.gz")).unlink()
    # a notebook's last run log names its runs: it wins over the committed tables; an unknown run costs the default
    log = tmp_path / "book" / "_build" / "cpu" / "01_x" / "visualise.runs.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"kind": "run", "name": "hrem-" + "d" * 16}) + "\n"
                   + json.dumps({"kind": "run", "name": "vse-" + "a" * 16}) + "\n")
    warm = bookplan.cold_cost(notebooks[1:], "cpu", tmp_path, cache)
    assert warm.runs == ["hrem-" + "d" * 16] and warm.unknown == []
    assert warm.core_seconds == bookplan.DEFAULT_CORE_SECONDS["cpu"]
    # other profiles: the committed (cpu) tables say nothing about their runs
    paper = bookplan.cold_cost(notebooks, "paper", tmp_path, cache)
    assert paper.runs == [] and paper.unknown == ["01_x/train", "01_x/visualise"] and paper.trains


def test_book_run_states_the_cost_and_needs_yes_off_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """cpu and paper: the cost first; with stdin not a terminal one line naming --yes and nothing runs; --yes runs.
    smoke is never held (CI runs `xmr book run --profile smoke`); a warm cache is not asked about."""
    _cold_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    (tmp_path / "pyproject.toml").write_text("[project]\nname='demo'\n")
    (tmp_path / "xmr_core").mkdir()  # `config.project_root`: the nearest folder with both
    ran: list[str] = []
    monkeypatch.setattr("xmr_core.book.runner.run_book", lambda names, profile, **kw: ran.append(profile) or
                        RunSummary())
    monkeypatch.setattr("sys.stdin", io.StringIO())  # not a terminal
    with pytest.raises(SystemExit) as refused:
        cli.main(["book", "run"])
    assert ran == [] and str(refused.value).count("\n") == 0 and "add --yes" in str(refused.value)
    assert "3 run(s) to train" in capsys.readouterr().out
    assert cli.main(["book", "run", "--yes"]) == 0 and ran == ["cpu"]
    assert "3 run(s) to train" in capsys.readouterr().out
    assert cli.main(["book", "run", "--profile", "smoke"]) == 0 and ran == ["cpu", "smoke"]
    with pytest.raises(SystemExit, match="add --yes"):
        cli.main(["book", "run", "--profile", "paper"])
    assert "runs of 2 notebook(s) not known here" in capsys.readouterr().out
    for name in ("vse-" + "a" * 16, "vse-" + "b" * 16, "pcme-" + "c" * 16):  # every committed run cached
        run_dir = tmp_path / "cache" / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / "result.json").write_text("{}")
        (run_dir / "best.pt").write_bytes(b"")
    (tmp_path / "results" / "x" / "figure.json").write_text(json.dumps(
        {"key": "x/figure", "kind": "figure", "notebook": "book/01_x/visualise.py"}))
    assert cli.main(["book", "run"]) == 0 and ran[-1] == "cpu" and capsys.readouterr().out == ""


def test_help_starts_with_the_command_that_builds_the_book(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert capsys.readouterr().out.startswith("Start here: `xmr book build`")
    with pytest.raises(SystemExit):
        cli.main(["book", "--help"])  # a subcommand's help is its own
    assert capsys.readouterr().out.startswith("usage: xmr book")


def test_cli_parses_plan_run_jobs_and_runs_train() -> None:
    parser = cli.build_parser()
    plan = parser.parse_args(["book", "plan", "pcme", "--profile", "smoke", "--jobs", "4"])
    assert (plan.action, plan.chapters, plan.profile, plan.jobs) == ("plan", ["pcme"], "smoke", 4)
    assert parser.parse_args(["book", "run", "--jobs", "2"]).jobs == 2
    train = parser.parse_args(["runs", "train", "hrem", "--jobs", "2", "--profile", "smoke"])
    assert (train.action, train.chapters, train.jobs) == ("train", ["hrem"], 2)
    with pytest.raises(SystemExit, match="--jobs must be >= 1"):
        cli.main(["runs", "train", "hrem", "--jobs", "0"])


# ----------------------------------------------------------------------------- the plan against execution


@pytest.mark.book
@pytest.mark.timeout(900)
def test_executing_a_notebook_asks_for_no_run_its_plan_did_not_list(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cold cache the plan's firm runs (not provisional) are all asked for when the notebook executes; on the
    warm cache after it, the plan lists exactly the runs the execution asked for, every one cached."""
    from xmr_core.book.runner import run_book

    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    shutil.rmtree(bookplan.committed_records("smoke") / FITS_DIR, ignore_errors=True)  # no earlier run stands in
    notebook = "03_hrem/train"
    cold = bookplan.plan_book([notebook], profile="smoke", echo=lambda line: None)
    assert not cold.failed and cold.runs
    summary = run_book([notebook], profile="smoke", force=True, root=ROOT, echo=lambda line: None, jobs=2)
    assert summary.ok
    executed = {r["key"] for r in read_log(ROOT / "book" / "_build" / "smoke" / "03_hrem" / "train.runs.jsonl")
                if r["kind"] == "run"}
    firm = {r.record["key"] for r in cold.runs if not r.record["provisional"]}
    assert firm and firm <= executed
    warm = bookplan.plan_book([notebook], profile="smoke", echo=lambda line: None)
    assert warm.keys == executed and all(r.cached for r in warm.runs) and not warm.failed
