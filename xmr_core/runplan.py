"""Training runs asked for together: `fit_many(requests)` trains a batch of independent runs.

A chapter (or the tuning search) that needs several runs whose settings do not depend on each other's results
asks for them in one call, so an executor may train them side by side. Each `RunRequest` holds the model as
built (seeded, before training: its initial weights are part of the run key), its splits, recipe and vocabulary.
`fit_many` returns one `FitResult` per request, in order, each request's model holding its run's best weights,
exactly as `train.fit` would have left it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.train import FitResult, TrainConfig, fit


@dataclass
class RunRequest:
    """One training run: the model as built (before training), its train and validation splits, recipe, vocabulary,
    and a label for listings (e.g. "PCME tuning lr=1e-3 KL weight=1e-4")."""

    model: RetrievalModel
    train: Split
    val: Split
    cfg: TrainConfig
    vocab: Vocabulary
    label: str = ""


def fit_many(requests: Sequence[RunRequest]) -> list[FitResult]:
    """Train (or load from the run cache) every request; results in `requests` order. Serial, in this process."""
    return [fit(r.model, r.train, r.val, r.cfg, vocab=r.vocab) for r in requests]
