"""The ceiling benchmark script reads a chapter's ceiling.csv and judges the strong-start targets."""

from __future__ import annotations

import pandas as pd
import pytest

from xmr_core.bench.ceiling import main


def _write(tmp_path, rows):
    path = tmp_path / "pcme" / "ceiling.csv"
    path.parent.mkdir(parents=True)
    pd.DataFrame(rows, columns=["model", "seed", "rsum", "ceiling_rsum", "percent_of_ceiling", "converged"]
                 ).to_csv(path, index=False)


def test_targets_met_and_missed(tmp_path, capsys) -> None:
    # VSE0 seeds at 85 and 75 %: mean 80 -> the best-baseline target (>= 80) is met;
    # PCME at 60 % is below the every-model target (>= 70).
    _write(tmp_path, [("VSE0", 0, 340, 400, 85.0, True), ("VSE0", 1, 300, 400, 75.0, True),
                      ("PCME", 0, 240, 400, 60.0, False)])
    main(["pcme", "--results", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert "best baseline 80.0% (target >= 80, aim 90): met" in out[-2]
    assert "lowest model 60.0% (target >= 70): NOT met" in out[-2]
    assert out[-1] == "best_baseline_percent=80.00 lowest_percent=60.00 all_converged=False"


def test_missing_file_names_it(tmp_path) -> None:
    with pytest.raises(SystemExit, match="ceiling.csv: not found"):
        main(["pcme", "--results", str(tmp_path)])
