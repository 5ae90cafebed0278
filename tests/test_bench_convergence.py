"""`python -m xmr_core.bench convergence`: runs that the patience rule stopped in the first half of their schedule."""

from __future__ import annotations

import pandas as pd
import pytest

from xmr_core.bench.convergence import early, main, run_tables, sibling_gaps


def _runs(rows: list[tuple[str, int, int, int]]) -> pd.DataFrame:
    """training.csv rows (model, seed, epochs run, best epoch) of a 20-epoch schedule."""
    return pd.DataFrame([{"model": m, "seed": s, "lr": 1e-3, "epochs": 20, "epochs run": r, "best epoch": b,
                          "run": f"{m.lower()}-{s}"} for m, s, r, b in rows])


def test_early_is_a_plateau_stop_in_the_first_half_of_the_schedule() -> None:
    frame = _runs([("A", 0, 10, 7),   # stopped at half its 20 epochs, best before last: early
                   ("A", 1, 11, 8),   # past half: not early
                   ("A", 2, 8, 8),    # its last epoch was its best (a min_delta plateau): not the patience case
                   ("A", 3, 0, 0),    # diverged in its first epoch: no epoch ran
                   ("A", 4, 21, 20),  # ran its schedule and an extension epoch
                   ("A", 5, 4, 1)])
    assert early(frame).tolist() == [True, False, False, False, False, True]


def test_a_run_that_diverged_early_is_not_a_patience_stop() -> None:
    frame = _runs([("A", 0, 6, 3), ("A", 1, 6, 3), ("A", 2, 6, 3)])
    assert early(frame.assign(stopped=["patience", "diverged", "patience"])).tolist() == [True, False, True]
    assert early(frame.assign(converged=[True, False, True])).tolist() == [True, False, True]  # training.csv's record


def test_sibling_gaps_compare_early_and_full_length_seeds_of_one_model() -> None:
    training = _runs([("A", 0, 20, 19), ("A", 1, 8, 5), ("A", 2, 20, 18), ("B", 0, 20, 20), ("B", 1, 20, 17)])
    per_seed = pd.DataFrame({"model": ["A", "A", "A", "B", "B"], "seed": [0, 1, 2, 0, 1],
                             "rsum 5K": [300.0, 200.0, 310.0, 250.0, 260.0]})
    [(line, gap)] = sibling_gaps(training, per_seed)  # B has no early seed: no line
    assert gap == pytest.approx(200.0 - (300.0 + 310.0) / 2)  # -105 by hand
    assert line == "  A: rsum 5K early seed 1 200.0; full length seed 0 300.0, seed 2 310.0; gap -105.0"


def test_a_model_whose_every_seed_stopped_early_has_no_sibling_to_compare() -> None:
    training = _runs([("A", 0, 8, 5), ("A", 1, 9, 6)])
    per_seed = pd.DataFrame({"model": ["A", "A"], "seed": [0, 1], "rSum": [1.0, 2.0]})
    assert sibling_gaps(training, per_seed) == []


def _chapter(root, name: str, training: pd.DataFrame | None, tuning: pd.DataFrame | None = None) -> None:
    folder = root / name
    folder.mkdir()
    if training is not None:
        training.to_csv(folder / "training.csv", index=False)
    if tuning is not None:
        tuning.to_csv(folder / "tuning.csv", index=False)
        tuning.head(1)[["method"]].to_csv(folder / "tuning_summary.csv", index=False)  # one row a method: not read


def _tuning(rows: list[tuple[float, int, int]]) -> pd.DataFrame:
    return pd.DataFrame([{"method": "M", "lr": lr, "weight": "margin", "value": 0.2, "seed": 0, "epochs": 20,
                          "epochs run": r, "best epoch": b} for lr, r, b in rows])


def test_bench_convergence_lists_early_runs_and_exits_1(tmp_path, capsys) -> None:
    _chapter(tmp_path, "one", _runs([("A", 0, 20, 19), ("A", 1, 8, 5)]), _tuning([(1e-3, 20, 18), (2e-3, 6, 3)]))
    pd.DataFrame({"model": ["A", "A"], "seed": [0, 1], "rsum": [400.0, 350.0]}).to_csv(
        tmp_path / "one" / "per_seed.csv", index=False)
    with pytest.raises(SystemExit) as stop:
        main(["--results", str(tmp_path)])
    assert stop.value.code == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "== one"
    assert "  model A, seed 1, lr 0.001: stopped after 8 of 20 epochs (best epoch 5)" in out
    assert "  A: rsum early seed 1 350.0; full length seed 0 400.0; gap -50.0" in out
    assert "tuning.csv: 1 of 2 runs stopped early" in out
    assert out[-1] == ("chapters=1 runs=2 early=1 early_distinct=1 tuning_runs=2 tuning_early=1 "
                       "tuning_early_distinct=1 worst_sibling_gap=-50.0")


def test_bench_convergence_passes_when_every_run_ran_past_half_its_schedule(tmp_path, capsys) -> None:
    _chapter(tmp_path, "one", _runs([("A", 0, 20, 19), ("A", 1, 13, 10)]))
    _chapter(tmp_path, "two", None, _tuning([(1e-3, 11, 8)]))
    main(["--results", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("chapters=2 runs=2 early=0 early_distinct=0 tuning_runs=1 tuning_early=0 "
                       "tuning_early_distinct=0 worst_sibling_gap=none")
    assert [p.name for p in run_tables(tmp_path / "two")] == ["tuning.csv"]


def test_a_run_two_chapters_report_counts_once_as_distinct(tmp_path, capsys) -> None:
    for chapter in ("one", "two"):  # the same run folder "a-1" in both chapters' tables
        _chapter(tmp_path, chapter, _runs([("A", 0, 20, 19), ("A", 1, 8, 5)]))
    with pytest.raises(SystemExit):
        main(["--results", str(tmp_path)])
    last = capsys.readouterr().out.splitlines()[-1]
    assert "runs=4 early=2 early_distinct=1 " in last


def test_bench_convergence_names_a_missing_chapter_and_a_table_without_lengths(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="empty: no training.csv or tuning"):
        main(["empty", "--results", str(tmp_path)])
    _chapter(tmp_path, "old", pd.DataFrame([{"model": "A", "seed": 0, "epochs": 20}]))
    with pytest.raises(SystemExit, match=r"old/training.csv: lacks the column\(s\) epochs run, best epoch"):
        main(["old", "--results", str(tmp_path)])
