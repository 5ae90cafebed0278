"""`xmr_core.chapters.recorded`: the tuned settings a chapter's train.py wrote, read back from its tuning table.

The settings are derived independently by running the protocol (`tuning.tune_many`) on scripted validation
scores (the fake trainer of test_tuning.py, no training); the table is written as train.py writes it
(`book.results.write_table` of `tuning.tuning_frame`) and read back."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fixtures.tuning import LR, FakeTrainer, method

from xmr_core.book import results
from xmr_core.chapters.recorded import chosen_settings, recorded_tuning
from xmr_core.config import RunConfig
from xmr_core.runs.tuning import Axis, Search, tune_many, tuning_frame, tuning_summary

KL = Axis("KL weight", 1e-3, 10.0, low=1e-5)


def surface(i: int, j: int, epochs: int) -> tuple[float, int]:
    """Top at lr index 2 and weight index -1 at the base schedule; a converged best epoch (5 of 10), except at
    the top on 10 epochs, whose last epoch is its best, so the schedule check trains 20 epochs and gains."""
    score = 100.0 - (i - 2) ** 2 - (j + 1) ** 2 + (5.0 if epochs == 20 else 0.0)
    return score, (epochs if (i, j, epochs) == (2, -1, 10) else 5)


def tuned_and_run(tmp_path: Path) -> tuple[dict, RunConfig]:
    tuned = {**tune_many([method(name="A")], FakeTrainer(surface)),
             **tune_many([method(Search(LR, KL), name="B")], FakeTrainer(surface, weight=KL))}
    run = RunConfig(profile="smoke", results_dir=str(tmp_path / "results"))
    results.write_table(tuning_frame(tuned), "demo/tuning", run=run, caption="tuning runs")
    return tuned, run


def test_the_chosen_settings_read_back_are_the_ones_the_search_chose(tmp_path: Path) -> None:
    tuned, run = tuned_and_run(tmp_path)
    assert (tuned["A"].lr, tuned["A"].weight, tuned["A"].epochs) == (4e-3, 0.1, 20)  # the surface's top, longer
    read = recorded_tuning("demo/tuning", run)
    assert list(read) == ["A", "B"]
    for name, want in tuned.items():
        got = read[name]
        assert (got.method, got.weight_name, got.lr, got.weight, got.epochs) == (
            want.method, want.weight_name, want.lr, want.weight, want.epochs)
        assert len(got.rows) == len(want.rows) and [r["run"] for r in got.rows] == [r["run"] for r in want.rows]
    # the lattice's floats survive the CSV exactly: the values equal the axis's own, not merely approximately
    assert read["B"].weight == KL.value(-1) and read["B"].lr == LR.value(2)
    assert list(recorded_tuning("demo/tuning", run, methods=["B"])) == ["B"]
    # the rows read back summarise as the search's own rows do (the leaderboard writes its tuning tables from them)
    pd.testing.assert_frame_equal(tuning_summary(tuning_frame(read)), tuning_summary(tuning_frame(tuned)))


def test_the_read_is_in_the_provenance_of_what_the_reader_writes(tmp_path: Path) -> None:
    _, run = tuned_and_run(tmp_path)
    recorded_tuning("demo/tuning", run)
    path = results.write_table(pd.DataFrame({"x": [1]}), "demo/ablation", run=run)
    reads = json.loads(path.with_suffix(".json").read_text())["reads"]
    digest = results.digest_bytes((tmp_path / "results" / "demo" / "tuning.csv").read_bytes())
    assert reads["demo/tuning.csv"] == digest


def test_a_missing_table_is_named(tmp_path: Path) -> None:
    run = RunConfig(profile="smoke", results_dir=str(tmp_path / "results"))
    with pytest.raises(FileNotFoundError, match=r"results/hrem/tuning\.csv: not found for profile smoke on "
                                                    r"scenes; run the notebook"):
        recorded_tuning("hrem/tuning", run)


def table(tmp_path: Path) -> pd.DataFrame:
    tuned, _ = tuned_and_run(tmp_path)
    return tuning_frame(tuned)


@pytest.mark.parametrize("edit, message", [
    (lambda f: f.drop(columns=["chosen"]), r"t\.csv: not a tuning table, columns \['chosen'\] missing"),
    (lambda f: f.assign(chosen=False), r"t\.csv: method 'A' has 0 chosen rows"),
    (lambda f: f.assign(chosen=f["method"] == "A"), r"t\.csv: method 'A' has \d+ chosen rows \(records \[2, 3"),
])
def test_a_malformed_table_is_named(tmp_path: Path, edit, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chosen_settings(edit(table(tmp_path)), "t.csv")


def test_a_method_absent_and_a_bad_record_are_named(tmp_path: Path) -> None:
    frame = table(tmp_path)
    with pytest.raises(ValueError, match=r"t\.csv: no tuning rows for \['C'\] \(the table has \['A', 'B'\]\)"):
        chosen_settings(frame, "t.csv", methods=["A", "C"])
    line = int(frame.index[(frame["method"] == "B") & frame["chosen"]][0]) + 2
    bad = frame.copy()
    bad.loc[bad["chosen"] & (bad["method"] == "B"), "lr"] = float("nan")
    with pytest.raises(ValueError, match=rf"t\.csv: line {line} \('B', chosen\): lr nan and KL weight"):
        chosen_settings(bad, "t.csv")
    bad = frame.copy()
    bad.loc[bad["chosen"] & (bad["method"] == "A"), "epochs"] = 0
    with pytest.raises(ValueError, match=r"\('A', chosen\): epochs 0 is not a whole number >= 1"):
        chosen_settings(bad, "t.csv")


def test_the_leaderboard_takes_each_method_from_its_own_chapters_table(tmp_path: Path) -> None:
    """Every chapter's table also holds the baselines; the board takes each method from the chapter that
    `BOOK_MODELS` names (VSE0 from PCME's table, not from DVSE's, whose search chose another setting)."""
    from xmr_core.chapters.leaderboard import BOOK_MODELS, recorded_book
    from xmr_core.experiment.compared import REGIONS

    def top(i0: int, j0: int):
        return lambda i, j, epochs: (100.0 - (i - i0) ** 2 - (j - j0) ** 2, 5)

    run = RunConfig(profile="smoke", results_dir=str(tmp_path / "results"))
    tables = {"pcme": (["VSE0", "PVSE", "PCME mu only", "PCME"], top(0, 0)),
              "msrm": (["VSE0", "MSRM"], top(-1, 0)),
              "dvse": (["VSE0", "DVSE"], top(1, 1)),
              "hrem": (["VSE++", "GPO", "HREM standalone", "HREM fusion", "GPO (BERT)"], top(0, -1))}
    want = {}
    for chapter, (names, script) in tables.items():
        tuned = tune_many([method(name=n) for n in names], FakeTrainer(script))
        results.write_table(tuning_frame(tuned), f"{chapter}/tuning", run=run)
        want |= {(chapter, n): (t.lr, t.weight) for n, t in tuned.items()}
    board = recorded_book(run)
    chapter_of = {("DVSE" if n == REGIONS else n): c for c, n, _ in BOOK_MODELS}
    assert list(board) == list(chapter_of)  # book order, each method once, no BERT model
    assert {n: (t.lr, t.weight) for n, t in board.items()} == {n: want[(c, n)] for n, c in chapter_of.items()}
    assert (board["VSE0"].lr, board["DVSE"].lr) == (1e-3, 2e-3)  # PCME's VSE0, the DVSE chapter's DVSE


def test_in_trace_mode_a_table_of_planned_runs_makes_what_follows_provisional(tmp_path: Path, monkeypatch) -> None:
    """`xmr book plan` runs train.py untrained: its tuning table holds planned runs, so the choice an ablate.py reads
    from it stands in for the one training will make, and what ablate.py asks for next is provisional."""
    from xmr_core.runs import trace as plantrace

    _, run = tuned_and_run(tmp_path)
    monkeypatch.setattr(plantrace, "_TRACE", plantrace._Trace())
    monkeypatch.setenv(plantrace.PLAN_ENV, str(tmp_path / "plan.jsonl"))
    recorded_tuning("demo/tuning", run)  # every run trained (scripted): nothing provisional
    assert not plantrace._TRACE.provisional
    path = tmp_path / "results" / "demo" / "tuning.csv"
    frame = pd.read_csv(path)
    frame.loc[0, "stopped"] = "planned"
    frame.to_csv(path, index=False)
    recorded_tuning("demo/tuning", run)
    assert plantrace._TRACE.provisional
    monkeypatch.setattr(plantrace, "_TRACE", plantrace._Trace())
    monkeypatch.delenv(plantrace.PLAN_ENV)
    recorded_tuning("demo/tuning", run)  # outside trace mode the table is read as it is
    assert not plantrace._TRACE.provisional
