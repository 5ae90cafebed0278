"""One training run asked for: `RunRequest`, what `runplan.fit_many` and its executors (`xmr_core.executors`) take."""

from __future__ import annotations

from dataclasses import dataclass

from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.train import TrainConfig


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
