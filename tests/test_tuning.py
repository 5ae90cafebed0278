"""`xmr_core.tuning`'s table of the tuning runs (hand-built `TuningResult`s)."""

from __future__ import annotations

from xmr_core.tuning import TuningResult, tuning_frame


def test_tuning_frame_stacks_every_method_in_order():
    tuned = {"B": TuningResult("B", "tau", 1e-3, 40.0, [{"method": "B", "lr": 1e-3}]),
             "A": TuningResult("A", "margin", 1e-3, 0.2, [{"method": "A", "lr": 1e-3}, {"method": "A", "lr": 2e-3}])}
    frame = tuning_frame(tuned)
    assert frame.to_dict("records") == [{"method": "B", "lr": 1e-3}, {"method": "A", "lr": 1e-3},
                                        {"method": "A", "lr": 2e-3}]
    assert frame.index.tolist() == [0, 1, 2]
