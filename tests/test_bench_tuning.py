"""`python -m xmr_core.bench tuning`: the per-method summary of every chapter's tuning table, and its exit status."""

from __future__ import annotations

import pandas as pd
import pytest
from fixtures.tuning import LR, MARGIN, FakeTrainer, method

from xmr_core.bench.tuning import main
from xmr_core.runs.tuning import Search, tune, tuning_frame


def _table(script, max_runs: int = 16) -> pd.DataFrame:
    """The tuning table `tune` writes for one method scored by `script` (a fake trainer: no training)."""
    return tuning_frame({"M": tune(method(Search(LR, MARGIN, max_runs=max_runs)),
                                   FakeTrainer(script))})


def _write(root, chapter: str, frame: pd.DataFrame) -> None:
    (root / chapter).mkdir()
    frame.to_csv(root / chapter / "tuning.csv", index=False)  # as written: CSV round trip


def test_bench_tuning_passes_when_every_setting_is_bracketed_or_at_a_bound(tmp_path, capsys):
    _write(tmp_path, "one", _table(lambda i, j, e: (-(i * i) - j * j, 5)))  # optimum at the default
    _write(tmp_path, "two", _table(lambda i, j, e: (float(j - i * i), 5), max_runs=30))  # margin at its bound 2.0
    main(["--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert "== one" in out and "== two" in out and "hard bound" in out
    assert out.splitlines()[-1] == "chapters=2 old_format=0 settings=4 unbracketed=0 not_converged=0"


def test_bench_tuning_exits_1_on_an_unbracketed_setting(tmp_path, capsys):
    _write(tmp_path, "one", _table(lambda i, j, e: (float(i - j * j), 5), max_runs=8))  # capped climbing the lr
    with pytest.raises(SystemExit) as stop:
        main(["--results", str(tmp_path)])
    assert stop.value.code == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "chapters=1 old_format=0 settings=2 unbracketed=2 not_converged=0")


def test_bench_tuning_exits_1_on_a_table_from_before_the_protocol(tmp_path, capsys):
    _write(tmp_path, "old", pd.DataFrame([{"method": "A", "stage": "lr", "lr": 1e-3, "weight": "margin",
                                           "value": 0.2, "val rsum": 1.0, "chosen": True}]))
    with pytest.raises(SystemExit) as stop:
        main(["--results", str(tmp_path)])
    assert stop.value.code == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "== old" and "old format" in out
    assert out.splitlines()[-1] == "chapters=1 old_format=1 settings=0 unbracketed=0 not_converged=0"
    with pytest.raises(SystemExit, match="three/tuning.csv: not found"):
        main(["three", "--results", str(tmp_path)])
