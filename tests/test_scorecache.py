"""`experiment.scorecache`: a run's scores computed once, read back while the run, the scoring code, the arguments and
the thread count are the same, and computed again when any of them changes; a cached timing is the measured one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.corpora import word_split

from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import score_split
from xmr_core.experiment import scorecache
from xmr_core.experiment.scorecache import SCORES, cached_scores, code_key, value_key
from xmr_core.experiment.scorepool import score_trained
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs.train import FitResult, state_fingerprint

TEST = word_split("test", 30, 3)
VOCAB = Vocabulary.build(TEST.captions)
VECTORS = np.random.default_rng(2).normal(size=(len(VOCAB), 6)).astype(np.float32)
CALLS: list[str] = []  # the models `counted` scored, by their state fingerprint
SCALE = 2.0


def counted(model: torch.nn.Module, split, vocab, device) -> torch.Tensor:
    """`score_split`'s i2t scores times SCALE, recording the call."""
    CALLS.append(state_fingerprint(model))
    return SCALE * score_split(model, split, vocab, device).i2t


def _model(seed: int) -> VSE:
    torch.manual_seed(seed)
    return VSE(vse0_config(embed_dim=8, image=ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
                           text=TextEncoderConfig(hidden=4)), VECTORS).eval()


def _fit(model: torch.nn.Module, run_dir: Path, best_state: str | None = None) -> FitResult:
    return FitResult(run_dir, 1, 0.0, {}, [], 0.0, 0.0,
                     best_state=state_fingerprint(model) if best_state is None else best_state)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    CALLS.clear()
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_a_runs_scores_are_computed_once_then_read_back(tmp_path: Path) -> None:
    runs = [(m, _fit(m, tmp_path / f"run{i}")) for i, m in enumerate([_model(0), _model(1)])]
    first = cached_scores(counted, runs, TEST, VOCAB, torch.device("cpu"))
    assert len(CALLS) == 2 and all(len(list((fit.run_dir / SCORES).glob("*.pt"))) == 1 for _, fit in runs)
    again = cached_scores(counted, runs, TEST, VOCAB, torch.device("cpu"))
    assert len(CALLS) == 2  # nothing scored again
    assert all(torch.equal(a, b) for a, b in zip(first, again)) and not torch.equal(first[0], first[1])


def test_other_weights_arguments_threads_or_code_score_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(0)
    fit = _fit(model, tmp_path / "run")
    cached_scores(counted, [(model, fit)], TEST, VOCAB, "cpu")
    cached_scores(counted, [(model, dataclasses.replace(fit, best_state="other weights"))], TEST, VOCAB, "cpu")
    assert len(CALLS) == 2
    cached_scores(counted, [(model, fit)], word_split("test", 30, 4), VOCAB, "cpu")  # another split
    assert len(CALLS) == 3
    torch.set_num_threads(1 if torch.get_num_threads() > 1 else 2)
    cached_scores(counted, [(model, fit)], TEST, VOCAB, "cpu")
    assert len(CALLS) == 4
    monkeypatch.setattr(scorecache, "method_fingerprint", lambda method: "other scoring code")
    cached_scores(counted, [(model, fit)], TEST, VOCAB, "cpu")
    assert len(CALLS) == 5


def test_the_code_key_follows_the_constants_the_function_names(monkeypatch: pytest.MonkeyPatch) -> None:
    before = code_key(counted)
    monkeypatch.setattr(__import__(__name__), "SCALE", 3.0)
    assert code_key(counted) != before
    assert code_key(score_split) != code_key(counted)


def test_a_run_without_best_weights_is_never_cached(tmp_path: Path) -> None:
    model = _model(0)
    for _ in range(2):
        cached_scores(counted, [(model, _fit(model, tmp_path / "run", best_state=""))], TEST, VOCAB, "cpu")
    assert len(CALLS) == 2 and not (tmp_path / "run" / SCORES).exists()


def test_a_cached_timing_is_the_one_measured_when_scored(tmp_path: Path) -> None:
    model = _model(0)
    fit = _fit(model, tmp_path / "run")
    (_, measured), = score_trained(score_split, [(model, fit)], TEST, VOCAB, "cpu")
    (_, read), = score_trained(score_split, [(model, fit)], TEST, VOCAB, "cpu")
    assert read.seconds == measured.seconds > 0 and torch.equal(read.i2t, measured.i2t)


def test_an_argument_without_a_content_key_is_an_error() -> None:
    assert value_key([TEST, VOCAB, torch.device("cpu"), (1, "a")]) == value_key([TEST, VOCAB, torch.device("cpu"),
                                                                                (1, "a")])
    assert value_key(torch.ones(2)) != value_key(torch.zeros(2))
    with pytest.raises(TypeError, match="cannot key"):
        value_key(object())
