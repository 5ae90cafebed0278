"""Seed summaries, the paper-beside-ours join and claim comparisons (xmr_core.chapters.summary)."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xmr_core.chapters.summary import (
    ceiling_first,
    ceiling_frame,
    ceiling_note,
    ceiling_row,
    ceiling_share,
    dataset_note,
    mean_std,
    seed_means,
    seed_summary,
    with_ceiling,
    with_ceiling_share,
    with_paper,
    write_ceiling_table,
)
from xmr_core.config import RunConfig


@pytest.fixture
def per_run() -> pd.DataFrame:
    # A: seeds 0, 1; B: seeds 0, 1; C: one seed. Two metric columns x, y.
    return pd.DataFrame({"model": ["A", "A", "B", "B", "C"], "seed": [0, 1, 0, 1, 0],
                         "x": [10.0, 20.0, 1.0, 3.0, 50.0], "y": [30.0, 40.0, 5.0, 7.0, 60.0]})


def test_mean_std_groups_in_order_of_appearance():
    frame = pd.DataFrame({"g": ["b", "a", "b", "a"], "x": [1.0, 4.0, 3.0, 8.0]})
    out = mean_std(frame, ["g"], ["x"])
    assert out.index.tolist() == ["b", "a"] and out.columns.tolist() == ["x mean", "x std"]
    assert out["x mean"].tolist() == [2.0, 6.0]
    np.testing.assert_allclose(out["x std"], [np.sqrt(2), np.sqrt(8)])  # ddof 1: |x1 - x2| / sqrt(2)


def test_seed_summary_mean_std_seeds_in_order(per_run):
    out = seed_summary(per_run, ["x"], ["C", "A", "missing", "B"])
    assert list(out["model"]) == ["C", "A", "missing", "B"]
    assert list(out.columns) == ["model", "x", "x std", "seeds"]
    assert out["x"].tolist()[:2] == [50.0, 15.0] and out["x"].iloc[3] == 2.0
    assert math.isnan(out["x std"].iloc[0])  # one seed: no std
    assert out["x std"].iloc[1] == pytest.approx(math.sqrt(50.0))  # (10, 20): ddof 1
    assert out["x std"].iloc[3] == pytest.approx(math.sqrt(2.0))
    assert math.isnan(out["x"].iloc[2]) and math.isnan(out["seeds"].iloc[2])
    assert out["seeds"].iloc[1] == 2


def test_seed_means(per_run):
    assert seed_means(per_run, "A", ["x", "y"]).tolist() == [20.0, 30.0]


def test_with_paper_puts_the_paper_value_beside_ours(monkeypatch, per_run):
    paper = pd.DataFrame({"table": ["t", "t", "other"], "method": ["A", "A", "A"], "protocol": ["test", "1K", "test"],
                          "key": ["x/key", "x/key", "x/key"], "row": ["", "", ""], "value": [1.5, 2.5, 9.0]})
    monkeypatch.setattr("xmr_core.chapters.summary.paper_values", lambda chapter: paper)
    summary = seed_summary(per_run, ["x"], ["A", "C"])
    out = with_paper(summary, "ch", "t", {"x": "x/key"}, "scenes")
    assert list(out.columns) == ["model", "seeds", "x (paper)", "x (scenes)", "x std"]
    assert out["x (paper)"].iloc[0] == 1.5 and out["x (scenes)"].iloc[0] == 15.0
    assert out["x std"].iloc[0] == pytest.approx(math.sqrt(50.0))
    assert math.isnan(out["x (paper)"].iloc[1])  # the paper has no C
    assert math.isnan(out["x std"].iloc[1])  # one seed: no std
    proto = with_paper(summary, "ch", "t", {"x": "1K|x/key"}, "scenes")
    assert proto["x (paper)"].iloc[0] == 2.5


def test_dataset_note_is_said_on_scenes_only():
    assert dataset_note("scenes", "CUB") == " (the synthetic scenes benchmark: NOT CUB; compare orderings, not values)"
    assert dataset_note("scenes", "Flickr30K", "compare signs") == (
        " (the synthetic scenes benchmark: NOT Flickr30K; compare signs)")
    assert dataset_note("scenes", compare="absolute numbers do not carry", lead="synthetic scenes") == (
        " (synthetic scenes: absolute numbers do not carry)")
    assert dataset_note("scenes", lead="synthetic, NOT COCO") == (
        " (synthetic, NOT COCO: compare orderings, not values)")
    assert dataset_note("coco", "COCO") == "" and dataset_note("cub", compare="anything") == ""


# ------------------------------------------------------------------------------------------ the Bayes ceiling
CEILING = {"1K": {"i2t/R@1": 90.0, "t2i/R@5": 70.0, "rsum": 500.0}, "all": {"i2t/R@1": 80.0, "rsum": 400.0}}


def _ceiling_runs() -> pd.DataFrame:
    """A: two seeds, 1K rSum 250 and 300, all rSum 100 and 300; B: one seed, 50 and 200."""
    return pd.DataFrame({"model": ["A", "A", "B"], "seed": [0, 1, 0], "converged": [True, True, False],
                         "1K rSum": [250.0, 300.0, 50.0], "all rSum": [100.0, 300.0, 200.0]})


def test_with_ceiling_share_is_each_runs_rsum_over_the_protocols_ceiling():
    runs = _ceiling_runs()
    out = with_ceiling_share(runs, CEILING, {"1K": "1K rSum", "all": "all rSum"})
    assert out["% of ceiling 1K"].tolist() == [50.0, 60.0, 10.0]
    assert out["% of ceiling all"].tolist() == [25.0, 75.0, 50.0]
    assert "% of ceiling 1K" not in runs  # the input is left as it was
    assert list(with_ceiling_share(runs, CEILING, {"all": "all rSum"})) == [*runs, "% of ceiling all"]
    assert with_ceiling_share(runs, None, {"all": "all rSum"}) is runs


def test_ceiling_share_is_the_mean_over_seeds_per_model():
    share = ceiling_share(_ceiling_runs(), "all rSum", 400.0, ["Bayes ceiling", "B", "A", "C"])
    assert share[:3] == [100.0, 50.0, 50.0]  # A: the mean of 25 and 75
    assert np.isnan(share[3])  # no runs of C


def test_ceiling_row_reads_each_protocols_ceiling():
    row = ceiling_row(CEILING, ["1K i2t R@1", "1K t2i R@5", "1K rSum", "all i2t R@1", "all rSum"], "scenes")
    assert row == {"model": "Bayes ceiling", "seeds": 0, "1K i2t R@1 (scenes)": 90.0, "1K t2i R@5 (scenes)": 70.0,
                   "1K rSum (scenes)": 500.0, "all i2t R@1 (scenes)": 80.0, "all rSum (scenes)": 400.0}


def test_with_ceiling_puts_the_row_on_top_and_adds_each_protocols_share():
    table = pd.DataFrame({"model": ["A", "B", "P (paper only)"], "seeds": [2, 1, 0],
                          "all rSum (scenes)": [200.0, 200.0, np.nan], "all rSum (paper)": [1.0, 2.0, 3.0]})
    row = {"model": "Bayes ceiling", "seeds": 0, "all rSum (scenes)": 400.0, "ignored": 1.0}
    top = ceiling_first(table, row)
    assert list(top.columns) == list(table.columns) and top["model"].tolist() == ["Bayes ceiling", "A", "B",
                                                                                   "P (paper only)"]
    assert np.isnan(top.loc[0, "all rSum (paper)"]) and top.loc[0, "all rSum (scenes)"] == 400.0
    out = with_ceiling(table, _ceiling_runs(), CEILING, {"all rSum": "rsum"}, "scenes", ["all"])
    assert list(out.columns) == [*table.columns, "all rSum % of ceiling"]
    assert out.loc[0, "all rSum (scenes)"] == 400.0
    assert out["all rSum % of ceiling"].tolist()[:3] == [100.0, 50.0, 50.0]
    assert np.isnan(out["all rSum % of ceiling"].iloc[3])
    assert list(with_ceiling(table, _ceiling_runs(), CEILING, {"all rSum": "rsum"}, "scenes").columns) == list(
        table.columns)


def test_ceiling_frame_and_write_ceiling_table(tmp_path: Path):
    frame = ceiling_frame(_ceiling_runs().set_index("seed", drop=False), "all rSum", 400.0)
    assert frame.to_dict("records") == [
        {"model": "A", "seed": 0, "rsum": 100.0, "ceiling_rsum": 400.0, "percent_of_ceiling": 25.0, "converged": True},
        {"model": "A", "seed": 1, "rsum": 300.0, "ceiling_rsum": 400.0, "percent_of_ceiling": 75.0, "converged": True},
        {"model": "B", "seed": 0, "rsum": 200.0, "ceiling_rsum": 400.0, "percent_of_ceiling": 50.0,
         "converged": False}]
    assert frame.index.tolist() == [0, 1, 2]
    run = RunConfig.from_params(PROFILE="smoke", RESULTS_DIR=str(tmp_path / "res"), DATASET="scenes")
    assert write_ceiling_table(_ceiling_runs(), None, "ch/ceiling", run, protocol="all",
                               rsum_column="all rSum") is None
    assert not (tmp_path / "res").exists()
    table = write_ceiling_table(_ceiling_runs(), CEILING, "ch/ceiling", run, protocol="1K", rsum_column="1K rSum")
    assert table["percent_of_ceiling"].tolist() == [50.0, 60.0, 10.0]
    assert pd.read_csv(tmp_path / "res" / "ch" / "ceiling.csv")["ceiling_rsum"].tolist() == [500.0] * 3
    meta = (tmp_path / "res" / "ch" / "ceiling.json").read_text()
    assert '"ceiling": {' in meta and "as a share of the Bayes ceiling (profile smoke)" in meta
    write_ceiling_table(_ceiling_runs(), CEILING, "ch/other", run, protocol="all", rsum_column="all rSum",
                        caption="my caption")
    assert "my caption" in (tmp_path / "res" / "ch" / "other.md").read_text()


def test_ceiling_note_names_the_ceiling_or_says_there_is_none():
    none = " No ceiling: this data set's relevance is annotated, not exact (only the scenes benchmark has one)."
    assert ceiling_note(None) == none and ceiling_note(None, "") == none
    assert ceiling_note(CEILING) == " 'Bayes ceiling': the best any scorer can reach on this split (xmr_core.ceiling)."
    assert ceiling_note(CEILING, "") == " 'Bayes ceiling': the best any scorer can reach on this split."
