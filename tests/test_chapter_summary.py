"""Seed summaries, the paper-beside-ours join and claim comparisons (xmr_core.chapters.summary)."""

import math

import pandas as pd
import pytest

from xmr_core.chapters.summary import (
    Comparison,
    best_other_margin,
    compare_models,
    dataset_note,
    model_means,
    seed_means,
    seed_summary,
    with_paper,
)


@pytest.fixture
def per_run() -> pd.DataFrame:
    # A: seeds 0, 1; B: seeds 0, 1; C: one seed. Two metric columns x, y.
    return pd.DataFrame({"model": ["A", "A", "B", "B", "C"], "seed": [0, 1, 0, 1, 0],
                         "x": [10.0, 20.0, 1.0, 3.0, 50.0], "y": [30.0, 40.0, 5.0, 7.0, 60.0]})


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


def test_seed_means_and_model_means(per_run):
    assert seed_means(per_run, "A", ["x", "y"]).tolist() == [20.0, 30.0]
    assert model_means(per_run, ["B", "A"], ["x", "y"]) == {"B": 4.0, "A": 25.0}


def test_compare_models_diff_spread_verdict(per_run):
    c = compare_models(per_run, "A", "B", ["x", "y"])
    # A per seed: 20, 30 (std sqrt 50); B: 3, 5 (std sqrt 2)
    assert isinstance(c, Comparison)
    assert c.diff == pytest.approx(25.0 - 4.0)
    assert c.spread == pytest.approx(math.sqrt(50.0))
    assert c.verdict == "held"
    assert compare_models(per_run, "B", "A", ["x", "y"]).verdict == "did not hold"
    single = compare_models(per_run, "C", "A", ["x"])
    assert single.verdict == "not tested" and single.spread == pytest.approx(math.sqrt(50.0))


def test_compare_models_within_noise():
    df = pd.DataFrame({"model": ["A", "A", "B", "B"], "x": [0.0, 10.0, 4.0, 5.0]})
    c = compare_models(df, "A", "B", ["x"])
    assert c.diff == pytest.approx(0.5) and c.verdict == "within noise"


def test_best_other_margin_picks_the_best_other(per_run):
    means = model_means(per_run, ["A", "B", "C"], ["x"])  # A 15, B 2, C 50
    m = best_other_margin(per_run, "A", means, ["x"])
    assert m.diff == pytest.approx(15.0 - 50.0)
    m = best_other_margin(per_run, "C", means, ["x"])
    assert m.diff == pytest.approx(50.0 - 15.0)


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
    assert dataset_note("scenes", lead="synthetic, NOT COCO") == " (synthetic, NOT COCO: compare orderings, not values)"
    assert dataset_note("coco", "COCO") == "" and dataset_note("cub", compare="anything") == ""
