"""`viz.round_curves`: HMRN's R@K by round from its committed per-round tables, one line per model with its seed
interval, the paper's values in their own row; `viz.seed_interval`."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pandas as pd
import pytest

from xmr_core.viz import round_curves, seed_interval

T_975_4 = 2.7764451051977987  # Student t, 97.5% quantile, 4 degrees of freedom (any t table: 2.776)


def test_seed_interval_is_the_t_interval_of_the_mean() -> None:
    lo, hi = seed_interval(np.array([10.0, 10.0, 10.0]), np.array([2.0, 2.0, np.nan]), np.array([5, 1, 5]))
    half = T_975_4 * 2.0 / math.sqrt(5)
    assert lo == pytest.approx([10 - half, 10.0, 10.0]) and hi == pytest.approx([10 + half, 10.0, 10.0])


def _table(metric: str) -> pd.DataFrame:
    rows = [
        {"model": "Bayes ceiling", "seeds": 0, **{f"round{r}/{metric} (scenes)": 50.0 + r for r in (1, 2, 3)}},
        {"model": "A", "seeds": 5, **{f"round{r}/{metric} (paper)": 10.0 * r for r in (1, 2, 3)},
         **{f"round{r}/{metric} (scenes)": float(r) for r in (1, 2, 3)},
         **{f"round{r}/{metric} std": 1.0 for r in (1, 2, 3)}},
        {"model": "B", "seeds": 5, **{f"round{r}/{metric} (scenes)": 2.0 * r for r in (1, 2, 3)},
         **{f"round{r}/{metric} std": 0.5 for r in (1, 2, 3)}},  # the paper does not give B
        {"model": "C (paper only)", "seeds": 0, **{f"round{r}/{metric} (paper)": 5.0 * r for r in (1, 2, 3)}},
    ]
    return pd.DataFrame(rows)


def test_round_curves_draws_ours_with_intervals_and_the_papers_values_below() -> None:
    fig = round_curves({"R@1": _table("R@1"), "R@5": _table("R@5")}, "scenes")
    axes = np.array(fig.axes[:4]).reshape(2, 2)
    top, bottom = axes[0, 0], axes[1, 0]
    lines = {line.get_label(): line for line in top.get_lines()}
    assert set(lines) == {"Bayes ceiling", "A", "B"}
    assert list(lines["A"].get_ydata()) == [1.0, 2.0, 3.0] and list(lines["A"].get_xdata()) == [1, 2, 3]
    assert lines["Bayes ceiling"].get_linestyle() == "--"
    band = top.collections[0].get_paths()[0].vertices  # A's interval: mean ± t · std / sqrt(5)
    half = T_975_4 * 1.0 / math.sqrt(5)
    assert band[:, 1].min() == pytest.approx(1.0 - half) and band[:, 1].max() == pytest.approx(3.0 + half)
    paper = {line.get_label(): line for line in bottom.get_lines()}
    assert set(paper) == {"A", "C (paper only)"}  # B: no paper value; the ceiling: ours only
    assert list(paper["A"].get_ydata()) == [10.0, 20.0, 30.0]
    assert paper["A"].get_color() == lines["A"].get_color() and paper["C (paper only)"].get_linestyle() == ":"
    assert "R@5" in axes[0, 1].get_title() and bottom.get_xlabel().startswith("round")
