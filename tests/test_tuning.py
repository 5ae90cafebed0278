"""`xmr_core.runs.tuning`: the bracketing search, the schedule check and the run record, with scripted validation
scores and a fake trainer (no training); last, one tiny real run through the chapters' entry points."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest
from fixtures.corpora import word_split
from fixtures.tuning import LR, MARGIN, FakeTrainer, Script, method

from xmr_core.config import RunConfig
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.experiment.compared import MARGIN as BOOK_MARGIN
from xmr_core.experiment.compared import Compared, with_margin
from xmr_core.experiment.protocols import ChapterData
from xmr_core.experiment.training import train_model, tune_methods
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs.train import FitResult, RunRequest
from xmr_core.runs.tuning import (
    Axis,
    Search,
    TuningResult,
    tune,
    tune_many,
    tuning_frame,
    tuning_summary,
    unbracketed,
)


def peak(i0: int, j0: int) -> Script:
    """A unimodal surface with its top at (i0, j0); best epoch 5 of 10 (converged)."""
    def script(i: int, j: int, epochs: int) -> tuple[float, int]:
        return 100.0 - (i - i0) ** 2 - (j - j0) ** 2, 5
    return script


def tried(result: TuningResult) -> set[tuple[float, float, int]]:
    return {(r["lr"], r["value"], r["epochs"]) for r in result.rows}


def test_axis_is_log_spaced_around_the_default_and_clamped_to_its_bounds():
    assert [MARGIN.value(i) for i in range(-2, 5)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert MARGIN.value(5) is None and MARGIN.bound(4) == "high" and MARGIN.bound(3) == ""
    assert [LR.value(i) for i in (-1, 0, 1)] == [5e-4, 1e-3, 2e-3]
    kl = Axis("KL weight", 1e-3, 10.0, low=1e-5)
    assert [kl.value(i) for i in (-3, -2, -1, 0)] == [None, 1e-5, 1e-4, 1e-3] and kl.bound(-2) == "low"
    with pytest.raises(ValueError, match="'w': needs step > 1"):
        Axis("w", 1.0, 1.0)


def test_optimum_inside_the_first_cross_takes_five_runs_in_two_rounds():
    trainer = FakeTrainer(peak(0, 0))
    result = tune(method(), trainer)
    assert (result.lr, result.weight, result.epochs) == (1e-3, 0.2, 10)
    assert [len(c) for c in trainer.calls] == [5]  # the cross in one call; its centre's neighbours are all tried
    summary = tuning_summary(result.frame())
    assert summary[["lr status", "weight status", "runs", "epochs spent", "converged"]].to_dict("records") == [
        {"lr status": "bracketed", "weight status": "bracketed", "runs": 5, "epochs spent": 50, "converged": True}]


def test_a_choice_at_an_edge_extends_the_search_until_validation_stops_improving():
    trainer = FakeTrainer(peak(2, -1))  # lr optimum 4e-3 (two steps up), margin optimum 0.1
    result = tune(method(), trainer)
    assert (result.lr, result.weight) == (4e-3, 0.1)
    # cross; then around (1, 0): (2,0) (1,-1) (1,1); around (2, 0)... the climb ends at (2, -1) with every
    # neighbour tried and lower, so the lr 8e-3 beyond the optimum was trained and rejected
    assert (8e-3, 0.1, 10) in tried(result) and (4e-3, 0.05, 10) in tried(result)
    summary = tuning_summary(result.frame()).iloc[0]
    assert (summary["lr status"], summary["weight status"]) == ("bracketed", "bracketed")


def test_a_setting_where_training_diverges_is_a_tried_setting_that_scored_lower():
    def script(i: int, j: int, epochs: int) -> tuple[float, int]:
        return (float("-inf"), 0) if i >= 2 else peak(1, 0)(i, j, epochs)  # lr 4e-3 and up: NaN in epoch 1

    trainer = FakeTrainer(script)
    result = tune(method(), trainer)
    assert (result.lr, result.weight) == (2e-3, 0.2) and trainer.policies == {"stop"}  # a later NaN ends the run
    diverged = [r for r in result.rows if r["stopped"] == "diverged"]
    assert [(r["lr"], r["val rsum"], r["converged"]) for r in diverged] == [(4e-3, float("-inf"), False)]
    summary = tuning_summary(result.frame()).iloc[0]
    assert (summary["lr status"], summary["weight status"]) == ("bracketed", "bracketed")


def test_the_search_stops_at_a_hard_bound():
    trainer = FakeTrainer(lambda i, j, e: (float(j - i * i), 5))  # larger margins always better
    result = tune(method(Search(LR, MARGIN, max_runs=30)), trainer)
    assert result.weight == 2.0  # 0.2, 0.4, 0.8, 1.6, then the bound 2.0 itself: nothing past it
    assert sorted({v for _, v, _ in tried(result)}) == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    summary = tuning_summary(result.frame()).iloc[0]
    assert (summary["weight status"], summary["lr status"], summary["cap reached"]) == (
        "hard bound", "bracketed", False)
    assert len(result.rows) == 16  # 5 + 3 per step up (0.4, 0.8, 1.6, 2.0) + the two lrs next to 2.0


def test_a_tied_neighbour_leaves_the_axis_unbracketed():
    trainer = FakeTrainer(lambda i, j, e: (float(-j * j), 5))  # the lr makes no difference
    summary = tuning_summary(tune(method(), trainer).frame()).iloc[0]
    assert (summary["lr status"], summary["weight status"], summary["cap reached"]) == (
        "unbracketed", "bracketed", False)


def test_the_cap_on_runs_ends_the_search_unbracketed():
    trainer = FakeTrainer(lambda i, j, e: (float(i) - j * j, 5))  # lr: always better one step up
    result = tune(method(Search(LR, MARGIN, max_runs=8)), trainer)
    assert len(result.rows) == 8 and [len(c) for c in trainer.calls] == [5, 3]
    # round 1 around (1, 0): (2, 0), (1, -1), (1, 1); (2, 0) wins, its neighbours would exceed the cap
    assert result.lr == 4e-3
    summary = tuning_summary(result.frame()).iloc[0]
    assert summary["lr status"] == "unbracketed" and summary["cap reached"]
    assert summary["weight status"] == "unbracketed"  # (2, ±1) untried
    assert unbracketed(tuning_summary(result.frame())) == 2


def test_coordinate_recheck_tries_the_other_axis_at_the_new_value():
    scores = {(0, 0): 10, (1, 0): 12, (-1, 0): 0, (0, 1): 11, (0, -1): 0, (1, 1): 15, (2, 0): 0, (1, -1): 0}
    trainer = FakeTrainer(lambda i, j, e: (float(scores.get((i, j), 0)), 5))
    result = tune(method(), trainer)
    assert (result.lr, result.weight) == (2e-3, 0.4)
    # after the weight moved to 0.4 at lr 2e-3, both lrs next to 2e-3 are tried at 0.4: (0, 1) already, (2, 1) new
    assert trainer.calls[2] == [(4e-3, 0.4, 10), (2e-3, 0.8, 10)]
    assert tuning_summary(result.frame()).iloc[0]["lr status"] == "bracketed"


def test_ties_keep_the_default():
    trainer = FakeTrainer(lambda i, j, e: (1.0, 5))
    result = tune(method(), trainer)
    assert (result.lr, result.weight) == (1e-3, 0.2) and len(result.rows) == 5


def test_every_run_is_recorded_with_its_round_stage_and_epochs():
    trainer = FakeTrainer(peak(1, 0))
    result = tune(method(seed=3), trainer)
    frame = result.frame()
    assert frame["round"].tolist() == [0] * 5 + [1] * 3  # round 1: (2,0), (1,-1), (1,1) around (1,0)
    assert frame["stage"].unique().tolist() == ["search"]
    assert frame["seed"].unique().tolist() == [3]
    assert frame[["lr index", "weight index"]].values.tolist()[:5] == [[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]]
    assert frame["chosen"].tolist() == [False, False, True] + [False] * 5
    assert frame["epochs run"].sum() == 80 and frame["val rsum"].iloc[2] == 100.0
    assert frame["run"].iloc[0] == "0.001-0.2-10"
    summary = tuning_summary(frame).iloc[0]
    assert (summary["runs"], summary["epochs spent"]) == (8, 80)


def test_models_are_built_under_the_methods_seed():
    seeds = []

    def trainer(requests: Sequence[RunRequest]) -> list[FitResult]:
        seeds.extend(r.model.seed for r in requests)
        return FakeTrainer(peak(0, 0))(requests)

    tune(method(seed=7), trainer)
    assert seeds == [7] * 5


def test_methods_tuned_together_share_each_round():
    trainer = FakeTrainer(peak(0, 0))
    tuned = tune_many([method(name="A"), method(name="B")], trainer)
    assert [len(c) for c in trainer.calls] == [10]
    assert tuning_frame(tuned)["method"].tolist() == ["A"] * 5 + ["B"] * 5
    with pytest.raises(ValueError, match="names repeat"):
        tune_many([method(name="A"), method(name="A")], trainer)


def _last_epoch_best(longer_score: float) -> Script:
    """The default is the optimum, its 10-epoch run's best epoch its last; the 20-epoch run scores `longer_score`
    (best epoch 12: converged), every other run 1 point lower."""
    def script(i: int, j: int, epochs: int) -> tuple[float, int]:
        if epochs == 20:
            return longer_score, 12
        return (100.0, 10) if (i, j) == (0, 0) else (99.0, 5)
    return script


def test_a_longer_schedule_that_improves_beyond_noise_is_adopted():
    trainer = FakeTrainer(_last_epoch_best(101.5))  # +1.5 > min_delta 1.0
    result = tune(method(), trainer)
    assert result.epochs == 20 and trainer.calls[-1] == [(1e-3, 0.2, 20)]
    chosen = result.frame()[result.frame()["chosen"]].iloc[0]
    assert (chosen["stage"], chosen["epochs"]) == ("schedule", 20)
    summary = tuning_summary(result.frame()).iloc[0]
    assert (summary["epochs"], summary["converged"], summary["runs"], summary["epochs spent"]) == (20, True, 6, 70)
    assert summary["lr status"] == "bracketed"  # judged at the search schedule


def test_a_longer_schedule_within_noise_is_not_adopted_and_the_setting_counts_as_converged():
    trainer = FakeTrainer(_last_epoch_best(100.5))  # +0.5 <= min_delta 1.0
    result = tune(method(), trainer)
    assert result.epochs == 10
    summary = tuning_summary(result.frame()).iloc[0]
    assert (summary["epochs"], summary["converged"], summary["runs"]) == (10, True, 6)


def test_the_schedule_check_repeats_while_the_last_epoch_stays_best_up_to_its_limit():
    trainer = FakeTrainer(lambda i, j, e: (100.0 + e - (i * i + j * j), e))  # always best at the last epoch
    result = tune(method(Search(LR, MARGIN, max_longer=2)), trainer)
    assert result.epochs == 40 and trainer.calls[-2:] == [[(1e-3, 0.2, 20)], [(1e-3, 0.2, 40)]]
    assert not tuning_summary(result.frame()).iloc[0]["converged"]  # 40 epochs still ended on its best


def test_a_single_setting_trains_the_default_once():
    trainer = FakeTrainer(_last_epoch_best(200.0))
    result = tune(method(Search(LR, MARGIN, single=True)), trainer)
    assert (result.lr, result.weight, result.epochs, len(result.rows)) == (1e-3, 0.2, 10, 1)
    summary = tuning_summary(result.frame()).iloc[0]
    assert (summary["lr status"], summary["weight status"], summary["converged"]) == (
        "not searched", "not searched", False)


def test_summary_survives_the_csv_round_trip_and_rejects_the_old_format(tmp_path):
    trainer = FakeTrainer(lambda i, j, e: (float(j), 5))
    frame = tuning_frame({"M": tune(method(), trainer)})
    frame.to_csv(tmp_path / "t.csv", index=False)
    assert tuning_summary(pd.read_csv(tmp_path / "t.csv")).equals(tuning_summary(frame))
    with pytest.raises(ValueError, match="predates the bracketing protocol"):
        tuning_summary(frame.drop(columns=["lr index"]))


def test_the_tuning_run_at_the_chosen_setting_is_the_seeds_run():
    """Through the chapters' entry points, really trained (smoke: one setting, 2 epochs, a tiny VSE0): the seed's
    `train_model` at the tuned setting and schedule finds the tuning run in the cache (same run key)."""
    train, val = word_split("train", 24, 0), word_split("val", 8, 1)
    vocab = Vocabulary.build(train.captions)
    vectors = np.random.default_rng(2).normal(size=(len(vocab), 6)).astype(np.float32)
    enc = {"embed_dim": 8, "image": ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
           "text": TextEncoderConfig(hidden=4)}
    compared = {"tiny": Compared("tiny", BOOK_MARGIN, lambda enc, wv, margin, k: VSE(
        with_margin(vse0_config(**enc), margin), wv))}
    tuned = tune_methods("smoke", enc, vectors, train, val, vocab, 0, compared=compared, device="cpu", progress=False)
    assert (tuned["tiny"].epochs, len(tuned["tiny"].rows)) == (2, 1)
    data = ChapterData(train, val, val, val, vocab, vectors, 1.0)
    _, result = train_model("tiny", 1, data, tuned, enc, RunConfig.from_params(PROFILE="smoke", DEVICE="cpu"), 0,
                            compared)
    assert result.cached and result.run_dir.name == tuned["tiny"].rows[0]["run"]
    longer = {"tiny": dataclasses.replace(tuned["tiny"], epochs=3)}  # as if the schedule check had adopted 3 epochs
    _, result = train_model("tiny", 1, data, longer, enc, RunConfig.from_params(PROFILE="smoke", DEVICE="cpu"), 0,
                            compared)
    assert not result.cached and len(result.history) == 3  # smoke: no patience, every epoch of the schedule
