"""Early stopping in `fit`: `TrainConfig.patience`, `FitResult.stopped` / `.converged`, on a scripted
validation score (the `validate=` hook) so the stopping epoch is known by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.train import TrainConfig, fit

WORDS = ["red", "blue", "green", "circle", "square", "star", "left", "right", "top", "a", "and"]


def _split(name: str, n: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    captions = [" ".join(rng.choice(WORDS, 4)) for _ in range(2 * n)]
    return Split(name, f"synthetic-{name}", [f"{name}{i}" for i in range(n)], [f"{name}c{j}" for j in range(2 * n)],
                 captions, np.repeat(np.arange(n), 2), images=rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8))


TRAIN, VAL = _split("train", 16, 0), _split("val", 8, 1)
VOCAB = Vocabulary.build(TRAIN.captions)
VECTORS = np.random.default_rng(2).normal(size=(len(VOCAB), 6)).astype(np.float32)
RISE_THEN_FLAT = [10.0, 20.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0]


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"epochs": 10, "patience": 2, "batch_size": 8, "progress": False, "device": "cpu", **kw})


def _model() -> VSE:
    torch.manual_seed(0)
    cfg = vse0_config(embed_dim=8, image=ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
                      text=TextEncoderConfig(hidden=4))
    return VSE(cfg, VECTORS)


def _scripted(scores: list[float]):
    """validate(model, split) -> {"rsum": scores[epoch]}, the epoch counted by the calls; records them."""
    calls: list[float] = []

    def validate(model, split) -> dict[str, float]:
        calls.append(scores[len(calls)])
        return {"rsum": calls[-1]}

    return validate, calls


def _run(scores: list[float], out_dir, **kw):
    validate, calls = _scripted(scores)
    states: list[dict[str, torch.Tensor]] = []
    model = _model()
    result = fit(model, TRAIN, VAL, _cfg(**kw), out_dir, vocab=VOCAB, validate=validate,
                 on_epoch_end=lambda e, row: states.append({k: v.clone() for k, v in model.state_dict().items()}))
    return model, result, calls, states


def test_stops_patience_epochs_after_the_best(tmp_path) -> None:
    # rsum 10, 20, 30, 30, ...: best at epoch 3 (a tie is no improvement), epochs 4 and 5 bring nothing,
    # so with patience 2 the run stops after epoch 5 = best epoch + patience
    model, result, calls, states = _run(RISE_THEN_FLAT, tmp_path / "run")
    assert result.best_epoch == 3 and result.best_score == 30.0
    assert len(result.history) == 5 and len(calls) == 5 and len(states) == 5
    assert [row["epoch"] for row in result.history] == [1, 2, 3, 4, 5]
    assert [row["val/rsum"] for row in result.history] == RISE_THEN_FLAT[:5]
    assert result.stopped == "patience" and result.converged is True and not result.cached
    # the best epoch's weights are restored, not the last epoch's
    best, last = states[2], states[4]
    assert all(torch.equal(v, best[k]) for k, v in model.state_dict().items())
    assert not all(torch.equal(v, last[k]) for k, v in model.state_dict().items())

    # a second call on the same run directory loads the finished run, stopping reason included
    again_validate, again_calls = _scripted(RISE_THEN_FLAT)
    epochs_run: list[int] = []
    again = fit(_model(), TRAIN, VAL, _cfg(), tmp_path / "run", vocab=VOCAB, validate=again_validate,
                on_epoch_end=lambda e, row: epochs_run.append(e))
    assert again.cached and epochs_run == [] and again_calls == []
    assert again.stopped == "patience" and again.converged is True
    assert again.best_epoch == 3 and len(again.history) == 5


def test_an_improvement_resets_the_count(tmp_path) -> None:
    # best at 1, 2, then 3 is no better (1 epoch without), 4 improves (count reset), 5 and 6 do not: stop after 6
    _, result, calls, _ = _run([10.0, 20.0, 20.0, 25.0, 24.0, 25.0, 99.0, 99.0, 99.0, 99.0], tmp_path / "run")
    assert result.best_epoch == 4 and result.best_score == 25.0
    assert len(result.history) == 6 and len(calls) == 6
    assert result.stopped == "patience" and result.converged


def test_patience_zero_trains_every_epoch(tmp_path) -> None:
    _, result, calls, _ = _run(RISE_THEN_FLAT, tmp_path / "run", patience=0)
    assert len(result.history) == 10 and len(calls) == 10
    assert result.best_epoch == 3 and result.stopped == "max_epochs" and result.converged is False
    again = fit(_model(), TRAIN, VAL, _cfg(patience=0), tmp_path / "run", vocab=VOCAB,
                validate=_scripted(RISE_THEN_FLAT)[0])
    assert again.cached and again.stopped == "max_epochs" and again.converged is False


def test_still_improving_at_the_last_epoch_is_not_converged(tmp_path) -> None:
    _, result, _, _ = _run([1.0, 2.0, 3.0, 4.0], tmp_path / "run", epochs=4)
    assert len(result.history) == 4 and result.best_epoch == 4
    assert result.stopped == "max_epochs" and not result.converged


def test_negative_patience_is_refused() -> None:
    with pytest.raises(ValueError, match="patience"):
        _cfg(patience=-1)
