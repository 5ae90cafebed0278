"""viz.sweep_grid: the sensitivity sweeps' panels (one row per metric, one column per parameter), checked by hand."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd

from xmr_core.viz import sweep_grid


def _rows(parameter: str, value: float, seed: int, a: float, b: float) -> dict[str, object]:
    return {"parameter": parameter, "value": value, "seed": seed, "A": a, "B": b}


def test_sweep_grid_lays_metrics_in_rows_and_parameters_in_columns():
    sweep = pd.DataFrame([_rows("p", 0.8, 0, 1.0, 10.0), _rows("p", 0.2, 0, 3.0, 30.0), _rows("p", 0.2, 1, 5.0, 50.0),
                          _rows("q", 32, 0, 7.0, 70.0)])
    fig = sweep_grid(sweep, [("p", "Figure P"), ("q", "Figure Q")], ["A", "B"], "unit (%)")
    axes = np.array(fig.axes).reshape(2, 2)  # row-major: (A, p), (A, q), (B, p), (B, q)
    assert [ax.get_title() for ax in axes[0]] == ["Figure P", "Figure Q"] and axes[1, 0].get_title() == ""
    assert [ax.get_ylabel() for ax in axes[:, 0]] == ["A", "B"] and [ax.get_xlabel() for ax in axes[1]] == ["p", "q"]
    assert fig.get_supylabel() == "unit (%)"
    assert all(len(ax.containers) == 1 for ax in fig.axes)  # one error-bar series per panel
    line, _, (spans,) = axes[1, 0].containers[0].lines  # B against p: values sorted, the mean over seeds
    assert line.get_xdata().tolist() == [0.2, 0.8] and line.get_ydata().tolist() == [40.0, 10.0]
    ends = [sorted(seg[:, 1].tolist()) for seg in spans.get_segments()]
    sd = np.std([30.0, 50.0], ddof=1)  # two seeds at 0.2; a single seed (0.8) has a bar of no height
    assert np.allclose(ends[0], [40.0 - sd, 40.0 + sd]) and ends[1] == [10.0, 10.0]
    assert axes[0, 1].containers[0].lines[0].get_ydata().tolist() == [7.0]
    assert axes[0, 0].get_shared_y_axes().joined(axes[0, 0], axes[0, 1])  # one y range per metric row
    assert not axes[0, 0].get_shared_y_axes().joined(axes[0, 0], axes[1, 0])
    assert [t.get_text() for t in axes[1, 0].get_xticklabels()] == ["0.2", "0.8"]
    assert not [ln for ax in fig.axes for ln in ax.lines if ln.get_linestyle() == ":"]  # no defaults, no marker
