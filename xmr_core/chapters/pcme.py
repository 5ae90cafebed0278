"""The PCME chapter's compared models, their tuning budget and their tuned recipes (one place for the
three notebooks: `train.py` tunes and trains, `ablate.py` and `visualise.py` load the same cached runs).

Every compared method gets the same budget on the seen-class validation split (`xmr_core.tuning.tune`):
three learning rates at the method's default weight, then three values of its own main loss weight or
margin at the best learning rate. The weights:

- VSE0 and PVSE: the hinge margin α (0.1, 0.2, 0.4; the papers' 0.2 in the middle). PVSE is tuned at
  K = 1 and its K = 2 and 4 rows reuse the tuned values (PVSE's paper uses one setting for every K).
- PCME μ-only: the uniformity weight (1, 10, 100; PCME's CUB value 10 in the middle), its only weight.
- PCME: the KL weight (1e-5, 1e-4, 1e-3: PCME's COCO and CUB values and the one between); the
  uniformity weight stays at PCME's CUB value 10.

smoke runs one setting per method (every code path, seconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.pcme import PCME, pcme_config, pcme_train_config
from xmr_core.methods.pvse import PVSE, pvse_config
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.train import TrainConfig
from xmr_core.tuning import TuningResult, tune

LEARNING_RATES = {"smoke": (5e-4,), "cpu": (2e-4, 5e-4, 1e-3), "paper": (1e-4,)}


@dataclass(frozen=True)
class Compared:
    """One compared method: its tuned weight (name, grid, default) and how to build it."""

    name: str
    weight_name: str
    weights: tuple[float, ...]
    default: float
    build: Callable[[dict, np.ndarray, float, int], RetrievalModel]  # (encoders, word vectors, weight, K)


def _vse0(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    cfg = vse0_config(**enc)
    return VSE(dataclasses.replace(cfg, hinge=dataclasses.replace(cfg.hinge, margin=margin)), wv)


def _pvse(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    cfg = pvse_config(n_embeds=k, hard_negatives=True, **enc)
    return PVSE(dataclasses.replace(cfg, hinge=dataclasses.replace(cfg.hinge, margin=margin)), wv)


def _mu_only(enc: dict, wv: np.ndarray, weight: float, k: int) -> RetrievalModel:
    return PCME(pcme_config(enc, mu_only=True, uniformity_weight=weight), wv)


def _pcme(enc: dict, wv: np.ndarray, weight: float, k: int) -> RetrievalModel:
    return PCME(pcme_config(enc, kl_weight=weight), wv)


COMPARED: dict[str, Compared] = {
    "VSE0": Compared("VSE0", "margin", (0.1, 0.2, 0.4), 0.2, _vse0),
    "PVSE": Compared("PVSE", "margin", (0.1, 0.2, 0.4), 0.2, _pvse),
    "PCME mu only": Compared("PCME mu only", "uniformity weight", (1.0, 10.0, 100.0), 10.0, _mu_only),
    "PCME": Compared("PCME", "KL weight", (1e-5, 1e-4, 1e-3), 1e-3, _pcme),
}


def train_config(profile: str, lr: float, seed: int = 0, **overrides: object) -> TrainConfig:
    """The chapter's recipe (`pcme_train_config`) at a learning rate."""
    return pcme_train_config(profile, seed=seed, lr=lr, **overrides)


def tune_methods(profile: str, enc: dict, word_vectors: np.ndarray, train: Split, val: Split, vocab: Vocabulary,
                 seed: int = 0, **train_overrides: object) -> dict[str, TuningResult]:
    """Tune every compared method with the same budget (cached runs: free the second time)."""
    lrs = LEARNING_RATES[profile]
    out = {}
    for name, spec in COMPARED.items():
        weights = spec.weights if profile != "smoke" else (spec.default,)
        out[name] = tune(name, lambda w, spec=spec: spec.build(enc, word_vectors, w, 1),
                         lambda lr: train_config(profile, lr, seed, **train_overrides), train, val, vocab,
                         lrs=lrs, weight_name=spec.weight_name, weights=weights, default_weight=spec.default,
                         seed=seed)
    return out


def tuned_model(name: str, tuned: dict[str, TuningResult], enc: dict, word_vectors: np.ndarray,
                k: int = 1) -> RetrievalModel:
    """A fresh model of a compared method at its tuned weight (PVSE: with K embeddings)."""
    spec = COMPARED[name]
    return spec.build(enc, word_vectors, tuned[name].weight, k)
