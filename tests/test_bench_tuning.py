"""Where each tuned setting lies in its grid: `tuning.grid_edges` and the `bench tuning` script."""

from __future__ import annotations

import pandas as pd
import pytest

from xmr_core.bench.tuning import main
from xmr_core.tuning import grid_edges


def _runs(method: str, lr_scores: dict[float, float], weight_scores: dict[float, float], default: float = 0.2
          ) -> list[dict]:
    """The rows `tune` writes for one method: the lr stage at `default`, then the other weights at the best lr
    (`tune`'s coordinate search, done by hand here)."""
    best_lr = max(lr_scores, key=lr_scores.__getitem__)
    best_w = max(weight_scores, key=weight_scores.__getitem__)
    rows = [{"method": method, "stage": "lr", "lr": lr, "weight": "margin", "value": default} for lr in lr_scores]
    rows += [{"method": method, "stage": "weight", "lr": best_lr, "weight": "margin", "value": w}
             for w in weight_scores if w != default]
    for row in rows:
        row["chosen"] = row["lr"] == best_lr and row["value"] == best_w
    return rows


def test_grid_edges_marks_choices_at_the_smallest_or_largest_value_tried():
    frame = pd.DataFrame(
        _runs("A", {5e-4: 1.0, 1e-3: 2.0, 2e-3: 3.0}, {0.2: 1.0, 0.1: 0.5, 0.4: 0.7})  # lr high, margin inside
        + _runs("B", {5e-4: 3.0, 1e-3: 2.0, 2e-3: 1.0}, {0.2: 1.0, 0.1: 2.0, 0.4: 0.7})  # lr low, margin low
        + _runs("C", {1e-3: 1.0}, {0.2: 1.0}))  # one value each: no edge
    edges = grid_edges(frame)
    assert edges.to_dict("records") == [
        {"method": "A", "lr": 2e-3, "lr edge": "high", "weight": "margin", "value": 0.2, "weight edge": ""},
        {"method": "B", "lr": 5e-4, "lr edge": "low", "weight": "margin", "value": 0.1, "weight edge": "low"},
        {"method": "C", "lr": 1e-3, "lr edge": "", "weight": "margin", "value": 0.2, "weight edge": ""}]
    frame.loc[frame["method"] == "C", "chosen"] = False
    with pytest.raises(ValueError, match="'C' has 0 chosen runs"):
        grid_edges(frame)


def test_bench_tuning_prints_every_chapter_and_counts_the_edges(tmp_path, capsys):
    for chapter, rows in (("one", _runs("A", {5e-4: 1.0, 1e-3: 2.0, 2e-3: 3.0}, {0.2: 1.0, 0.1: 0.5, 0.4: 0.7})),
                          ("two", _runs("B", {5e-4: 3.0, 1e-3: 2.0, 2e-3: 1.0}, {0.2: 1.0, 0.1: 2.0, 0.4: 0.7}))):
        (tmp_path / chapter).mkdir()
        pd.DataFrame(rows).to_csv(tmp_path / chapter / "tuning.csv", index=False)  # as written: CSV round trip
    main(["--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert "== one" in out and "== two" in out
    assert out.splitlines()[-1] == "chapters=2 settings=4 on_grid_edge=3"  # A: lr; B: lr and margin
    with pytest.raises(SystemExit, match="three/tuning.csv: not found"):
        main(["three", "--results", str(tmp_path)])
