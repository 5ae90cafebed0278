"""Tuning and training the compared methods (`compared`) the same way in every chapter: the recipe at a learning
rate (`train_config`), the tuning budget (`tune_methods`), one model at its tuned setting (`train_built`,
`train_model`), a batch of independent runs trained side by side (`request_built` / `request_model`, then
`train_many`: `runs.plan.fit_many` on the workers `XMR_JOBS` names) and the training table's row (`fit_row`).

Weights (`docs/records.md`, "Running without weights"): every run asked for here has its fit summary written
beside the run records of its results (`run_records.fits_folder`), and a run the run cache lacks whose summary is
there stands in by it, not trained: its fit facts, no weights (`runs.fits.WeightlessFit`), its model as built and
refusing to score. Tables and claims read such a run's record (`run_records.recorded`); code that uses the model
itself (a figure that draws it, a table not yet on records) asks for it with `weights=True`, which trains the
run if the cache lacks it (the run plan lists it as "needs weights"). The tuning search never needs weights.

Every compared method is tuned by the same protocol on the validation split (`xmr_core.runs.tuning`): log-spaced
learning rates around the recipe's (step `tuning.LR_STEP`) and values of its own main loss weight or margin around
its paper's (its `Compared.weight` axis), extended until the chosen setting is bracketed or at a hard bound, then
the training length checked; smoke trains one setting per method (the defaults: every code path, seconds). The
tuned schedule (`TuningResult.epochs`) is part of the setting every seed trains at (`train_built`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from xmr_core.config import RunConfig, budget
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.experiment.compared import BASELINE_SPECS, BASELINES, Compared
from xmr_core.experiment.protocols import ChapterData
from xmr_core.experiment.recipes import pcme_train_config
from xmr_core.experiment.run_records import fits_folder
from xmr_core.methods.base import RetrievalModel
from xmr_core.runs.plan import fit_many
from xmr_core.runs.train import FitResult, RunRequest, TrainConfig
from xmr_core.runs.tuning import FIRST_ROUND, LR_STEP, Axis, Method, Search, Trainer, TuningResult, tune_many


def train_config(profile: str, lr: float, seed: int = 0, **overrides: object) -> TrainConfig:
    """The book's recipe (`pcme_train_config`) at a learning rate."""
    return pcme_train_config(profile, seed=seed, lr=lr, **overrides)


def tuning_methods(profile: str, enc: dict, word_vectors: np.ndarray, train: Split, val: Split, vocab: Vocabulary,
                   seed: int = 0, *, compared: Mapping[str, Compared] | None = None,
                   **train_overrides: object) -> list[Method]:
    """The methods of `compared` (default the baselines) as the tuning protocol takes them (`tuning.Method`): built
    at K = 1, on the recipe `train_config` (with `train_overrides`), their learning rate around the recipe's, their
    weight on their own axis; smoke: one setting each (`Search.single`). A chapter whose methods train on several
    data sets joins their lists into one `tuning.tune_many` call."""
    lr = Axis("lr", pcme_train_config(profile, seed, **train_overrides).lr, LR_STEP)
    return [Method(name, lambda w, spec=spec: spec.build(enc, word_vectors, w, 1),
                   lambda rate: train_config(profile, rate, seed, **train_overrides),
                   Search(lr, spec.weight, spec.max_runs, single=budget(profile) == "smoke"), train, val, vocab, seed)
            for name, spec in (BASELINES if compared is None else compared).items()]


def least_tuning_runs(profile: str) -> int:
    """The fewest tuning runs a method gets: the first round's cross around its defaults (`tuning.FIRST_ROUND`),
    smoke's one setting; the search adds runs until its choice is bracketed (the count is known only after)."""
    return 1 if budget(profile) == "smoke" else FIRST_ROUND


def tuning_trainer(run: RunConfig) -> Trainer:
    """The tuning protocol's trainer (`tuning.train_tuning_runs`) with the fit summaries of `run`'s results
    (`fits_folder`): a search run the cache lacks stands in by its summary, never trained for weights."""
    return lambda requests: fit_many(requests, diverged="result", fits=fits_folder(run))


def tune_methods(profile: str, enc: dict, word_vectors: np.ndarray, train: Split, val: Split, vocab: Vocabulary,
                 seed: int = 0, *, compared: Mapping[str, Compared] | None = None, run: RunConfig | None = None,
                 **train_overrides: object) -> dict[str, TuningResult]:
    """Tune every compared method (`compared`, default the baselines; a later chapter passes these plus its
    own) by the one protocol (`tuning_methods`, `tuning.tune_many`: each round's runs of every method in one
    `fit_many` call; cached runs: free the second time). With `run`, the search's runs have fit summaries
    (`tuning_trainer`)."""
    methods = tuning_methods(profile, enc, word_vectors, train, val, vocab, seed, compared=compared,
                             **train_overrides)
    return tune_many(methods) if run is None else tune_many(methods, tuning_trainer(run))


def tuned_model(name: str, tuned: dict[str, TuningResult], enc: dict, word_vectors: np.ndarray, k: int = 1,
                compared: Mapping[str, Compared] = BASELINES) -> RetrievalModel:
    """A fresh model of a compared method (of `compared`: the baselines, or a chapter's set) at its tuned weight
    (PVSE: with K embeddings)."""
    return compared[name].build(enc, word_vectors, tuned[name].weight, k)


def request_built(build: Callable[[], RetrievalModel], tuning: TuningResult, data: ChapterData, run: RunConfig,
                  seed: int, label: str = "", **train_overrides: object) -> RunRequest:
    """The run `train_built` trains, as a request for `train_many`: seeded with `seed`, the model built, the book's
    recipe at a tuned method's learning rate and schedule (`tuning.lr`, `tuning.epochs`; `train_config`;
    `train_overrides` e.g. finetune=True, on_nonfinite="stop") on `data`'s train and validation splits; `label`
    names it in the run plan (`xmr book plan`). The tuning run at the chosen setting is seed `tuning`'s run."""
    torch.manual_seed(seed)
    model = build()
    cfg = train_config(run.profile, tuning.lr, seed, **{"epochs": tuning.epochs, **train_overrides},
                       device=run.device, progress=run.progress)
    return RunRequest(model, data.train, data.val, cfg, data.vocab, label)


def train_many(requests: Sequence[RunRequest], run: RunConfig, *, weights: bool = False
               ) -> list[tuple[RetrievalModel, FitResult]]:
    """Train (or load from the run cache) a batch of independent runs (`runs.plan.fit_many`: side by side on the
    workers `XMR_JOBS` / `XMR_EXECUTOR` name); per request, in order, its model (best weights, eval mode, on
    `run.torch_device`) and its fit. Every chapter trains through here, so the same model, recipe and seed give
    the same run key (the tuning run at the chosen setting is the seed's run). A run the cache lacks whose fit
    summary is there (`run_records.fits_folder(run)`) stands in by it, with no weights (`runs.fits.has_weights`),
    unless `weights`: the caller uses the models (draws them), so such runs train."""
    results = fit_many(requests, fits=fits_folder(run), weights=weights)
    return [(r.model.to(run.torch_device).eval(), result) for r, result in zip(requests, results)]


def train_built(build: Callable[[], RetrievalModel], tuning: TuningResult, data: ChapterData, run: RunConfig,
                seed: int, *, weights: bool = False, **train_overrides: object) -> tuple[RetrievalModel, FitResult]:
    """One run (`request_built`), trained or loaded on its own (`train_many`, `weights` as there): the model (best
    weights, eval mode, on `run.torch_device`) and the fit."""
    return train_many([request_built(build, tuning, data, run, seed, **train_overrides)], run, weights=weights)[0]


def request_model(name: str, k: int, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, run: RunConfig,
                  seed: int, compared: Mapping[str, Compared] = BASELINES, **train_overrides: object) -> RunRequest:
    """One compared model (of `compared`, as `tuned_model`; PVSE: with K embeddings) at its tuned weight, learning
    rate and schedule, as a request (`request_built`) labelled with the method, K and seed."""
    label = f"{name}{f' K={k}' if k != 1 else ''} seed {seed}"
    return request_built(lambda: tuned_model(name, tuned, enc, data.word_vectors, k, compared), tuned[name], data,
                         run, seed, label, **train_overrides)


def train_model(name: str, k: int, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, run: RunConfig,
                seed: int, compared: Mapping[str, Compared] = BASELINES, *, weights: bool = False,
                **train_overrides: object) -> tuple[RetrievalModel, FitResult]:
    """One compared model (`request_model`), trained or loaded on its own (`train_many`, `weights` as there)."""
    return train_many([request_model(name, k, data, tuned, enc, run, seed, compared, **train_overrides)], run,
                      weights=weights)[0]


def fit_row(label: str, seed: int, tuning: TuningResult, result: FitResult, wall_s: float) -> dict[str, object]:
    """One row of the training table: the tuned setting, the best epoch, convergence and the cost."""
    return {"model": label, "seed": seed, "lr": tuning.lr, tuning.weight_name: tuning.weight, "epochs": tuning.epochs,
            "cached": result.cached,
            "best epoch": result.best_epoch, "epochs run": len(result.history), "converged": result.converged,
            "train s": round(result.train_seconds, 1), "images/s": round(result.pairs_per_second, 1),
            "wall s": round(wall_s, 1), "run": result.run_dir.name}


def chapter_runs(seeds: Sequence[int], specs: Sequence[tuple[str, int]] = BASELINE_SPECS
                 ) -> list[tuple[str, int, int]]:
    """The trained models of a chapter's `train.py` in training order: (method, K, seed), every model of `specs`
    (the baselines', or a later chapter's) every seed."""
    return [(name, k, seed) for seed in seeds for name, k in specs]
