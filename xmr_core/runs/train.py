"""The one training loop: `fit(model, train_split, val_split, cfg, vocab=...)` for every method.

- Epochs over image–caption pairs (`xmr_core.data.datasets.pair_loader`), a plain tqdm bar; a method may choose
  its own batches (`model.train_batch_sampler`, HREM's neighbour batches) and is told when an epoch starts
  (`model.on_epoch_start`). A multi-query model (`model.task == "multi_query"`, HMRN) trains on (image, query
  set) items instead (`datasets.query_loader`: every image once an epoch with at most `model.max_queries` of
  its region queries, drawn at random) and is validated by `evaluate.evaluate_multi_query` on rounds
  1..min(max_queries, the longest set), a shorter set keeping its whole set in the later rounds; its "rsum"
  is the mean R@1 + R@5 + R@10 over those rounds.
- Optimiser (Adam, AdamW, AdamP: `xmr_core.optim.ForeachAdamP`, the package's update in fewer passes) and a per-epoch lr schedule (cosine, step, constant) from `TrainConfig`.
- PCME's two phases: `frozen_epochs` with `model.backbone_parameters()` frozen, then end-to-end with the
  lr multiplied by `finetune_lr_mult`; the schedule restarts for each phase (PCME's pretrain/finetune).
- Gradient clipping, AMP (fp16 autocast + GradScaler) on CUDA only. A NaN/inf loss raises `FloatingPointError`
  naming the epoch, step and loss terms; with `on_nonfinite="stop"` (one process) a run that has finished at
  least one epoch ends there instead, as a result with `stopped == "diverged"` (never `converged`), the
  message in `FitResult.stop_message` and the best checkpoint before the divergence loaded.
- Validation every epoch through `xmr_core.evaluate.evaluate_model`; the best checkpoint by `select`
  (validation rSum) is kept; metrics go to `metrics.csv` (rewritten atomically each epoch). Early stopping:
  the run ends once `select` has not beaten its last counted improvement by more than `min_delta` for
  `patience` epochs (a converged run), never in the first `patience_after` of its schedule (a plateau at a high
  learning rate is not convergence); the best checkpoint is still the highest score.
- Checkpoints (model, optimiser, scheduler, AMP scaler, epoch, RNG states, config, best score, history) are
  written atomically (`xmr_core.io`) and read with `torch.load(..., weights_only=True)`; `resume=True`
  continues an interrupted run and ends where the uninterrupted run would have.
- Run cache: without `out_dir`, the run lives in `cache_dir()/runs/<method>-<key>/`, the key hashing the
  method config, the model's initial state (word vectors, initial weights), the train config, the data
  (content fingerprints of both splits) and the seed; a finished
  run there is loaded, never retrained. A run directory is claimed before training (`xmr_core.runs.cache`): of
  any number of processes asking for one run, one trains it and the others wait for it, then load it; a dead
  worker's claim is taken over, and its cached run goes on from its `last.pt`. `fit` returns exactly the weights its `result.json` describes (`best_state`,
  checked whenever `best.pt` is loaded).
- Threads: a run trains with exactly `cfg.threads` torch CPU threads (restored after): torch's kernels round
  differently with another count, so the count is part of the run key, and a run learns the same serially or
  in a worker (`xmr_core.runs.plan`).
- Trace mode (`XMR_PLAN`, `xmr_core.runs.trace`): a run missing from the cache is recorded, not trained, and
  `fit` returns it as planned (`stopped == "planned"`, never converged; the model untrained).
- DDP through `torchrun` (`xmr_core.runs.distributed`); deterministic on CPU for a seed.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import io
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from torch.utils.data import BatchSampler
from tqdm import tqdm

from xmr_core.config import cache_dir, seed_everything, select_device, torch_threads
from xmr_core.data.corpus import Split, split_fingerprint
from xmr_core.data.datasets import Augmentation, pair_loader, query_loader
from xmr_core.data.samplers import AllCaptionsSampler, OneCaptionPerImageSampler
from xmr_core.data.text import Vocabulary
from xmr_core.io import atomic_write_bytes, atomic_write_text
from xmr_core.methods.base import RetrievalModel
from xmr_core.optim import ForeachAdamP
from xmr_core.runs import trace as plantrace
from xmr_core.runs.cache import Claim, acquire
from xmr_core.runs.distributed import (
    DistEnv,
    ShardedSampler,
    all_reduce_sum,
    barrier,
    current_env,
    wrap_model,
)
from xmr_core.runs.log import log_run, trained_at

CHECKPOINT_FORMAT = 1
AdamPImpl = Literal["foreach", "package"]
ADAMP: AdamPImpl = "foreach"  # AdamP's step: `xmr_core.optim.ForeachAdamP` (the package's update at float
# tolerance, in fewer passes), or the `adamp` package's (the reference, which `bench throughput`'s modes before
# issue 74 time)


@dataclass
class TrainConfig:
    """Everything about how a model is trained (the method's own hyperparameters live in its config)."""

    epochs: int = 20
    batch_size: int = 128
    optimizer: Literal["adam", "adamw", "adamp"] = "adam"
    lr: float = 2e-4
    weight_decay: float = 0.0
    scheduler: Literal["cosine", "step", "constant"] = "cosine"
    step_epochs: int = 15  # "step": lr × step_gamma every step_epochs (VSE++ / HREM style)
    step_gamma: float = 0.1
    frozen_epochs: int = 0  # PCME phase 1: backbones frozen for this many epochs
    finetune_lr_mult: float = 0.1  # PCME phase 2: lr multiplier once the backbones are unfrozen
    grad_clip: float = 2.0  # max gradient norm; 0 = off
    amp: bool = True  # fp16 autocast on CUDA only (ignored on CPU)
    epoch_mode: Literal["one_per_image", "all_captions"] = "one_per_image"
    random_erasing_prob: float = 0.0
    word_dropout: float = 0.0
    select: str = "rsum"  # validation metric that picks the best checkpoint (higher = better)
    patience: int = 0  # stop after this many epochs without a better `select` (0 = train all `epochs`)
    patience_after: float = 0.0  # share of the schedule in which patience never stops a run: it stops at the earliest
    # after ceil(patience_after x epochs) + patience epochs (0.5: never on the plateau of a high lr, in the first half)
    extend_epochs: int = 0  # when the schedule's last epoch is its best: go on at its last lr, at most this many
    # epochs, until an epoch is no better than the best (0 = off)
    min_delta: float = 0.0  # an epoch counts as better only when it beats the last counted best by more than this
    val_views: tuple[str, ...] | None = ("instance",)  # relevance views validated each epoch (None = all)
    eval_batch_size: int = 256
    seed: int = 0
    device: str = "auto"
    num_workers: int = 0
    progress: bool = True
    on_nonfinite: Literal["raise", "stop"] = "raise"  # a NaN/inf loss: raise, or end the run (an ablation's outcome)
    threads: int = 1  # torch CPU threads while training: kernels round differently with another count, so it is
    # part of what a run learns (and of its key); one thread a run, runs spread over workers (`xmr_core.runs.plan`)

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 2:
            raise ValueError(f"TrainConfig needs epochs >= 1 and batch_size >= 2, got {self.epochs}, {self.batch_size}")
        if not 0 <= self.frozen_epochs < self.epochs or (self.frozen_epochs and self.epochs - self.frozen_epochs < 1):
            raise ValueError(f"frozen_epochs must be in [0, epochs), got {self.frozen_epochs} of {self.epochs}")
        if self.threads < 1:
            raise ValueError(f"TrainConfig needs threads >= 1, got {self.threads}")
        if self.patience < 0 or self.min_delta < 0 or self.extend_epochs < 0:
            raise ValueError(f"patience, min_delta and extend_epochs must be >= 0, got {self.patience}, "
                             f"{self.min_delta}, {self.extend_epochs}")
        if not 0.0 <= self.patience_after < 1.0:
            raise ValueError(f"patience_after must be in [0, 1), got {self.patience_after}")


# fields that do not change what a run computes: left out of the run key
_NOT_IN_KEY = ("device", "num_workers", "progress", "eval_batch_size", "on_nonfinite")


@dataclass
class RunRequest:
    """One training run asked for, what `xmr_core.runs.plan.fit_many` and its executors take: the model as built
    (before training), its train and validation splits, recipe, vocabulary, and a label for listings (e.g. "PCME
    tuning lr=1e-3 KL weight=1e-4")."""

    model: RetrievalModel
    train: Split
    val: Split
    cfg: TrainConfig
    vocab: Vocabulary
    label: str = ""


@dataclass
class FitResult:
    """What `fit` returns; `model` holds the best weights afterwards."""

    run_dir: Path
    best_epoch: int
    best_score: float
    best_metrics: dict[str, float]
    history: list[dict[str, Any]]
    train_seconds: float
    pairs_per_second: float
    cached: bool = False
    stopped: str = "max_epochs"  # "patience": validation stopped improving; "max_epochs": ran out of epochs;
    # "extension": the schedule ended on its best epoch and an extension epoch was no better (`extend_epochs`);
    # "diverged": a NaN/inf loss ended the run (`on_nonfinite="stop"`); "planned": not trained, listed by the
    # run plan's trace (`xmr_core.runs.trace`), the model untrained
    stop_message: str = ""  # why a diverged run ended: the loss, epoch, step and terms
    best_state: str = ""  # `state_fingerprint` of the best epoch's weights, which `model` holds (runs from before
    # the field: "")

    @property
    def converged(self) -> bool:
        """True when training stopped because `select` had not improved by more than `min_delta` for `patience`
        epochs (checked after every epoch, the last included: a plateau; past `patience_after` of the schedule,
        `earliest_patience_stop`), or when the whole schedule ran (with
        a cosine the last epoch's lr is < 1% of the peak), extension epochs at its last lr included
        (`extend_epochs`), and its last epoch was no better than an earlier one.
        A run whose last epoch was its best, by more than `min_delta`, may still have been improving; a diverged
        run never converged."""
        if self.stopped in ("diverged", "planned"):
            return False
        return self.stopped == "patience" or 0 < self.best_epoch < len(self.history)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not belong to this run; the message names the file."""


# ----------------------------------------------------------------------------------------------- run key


def state_fingerprint(model: nn.Module) -> str:
    """SHA-256 of every parameter and buffer of `model` (name, dtype, shape, values) as it is now: given the
    model before training, it covers what the config does not name, such as the word vectors a text encoder
    was built from and the initial weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def run_key(model: RetrievalModel, train_split: Split, val_split: Split, cfg: TrainConfig) -> str:
    """Hash of (method name + config, the model's initial state (`state_fingerprint`: word vectors, initial
    weights), train config incl. seed, data fingerprints): names a run directory. Call it on the model before
    training, as `fit` does. `extend_epochs` = 0 and `patience_after` = 0 are left out, so a run without them keeps
    the key it had before the fields existed."""
    train = {k: v for k, v in dataclasses.asdict(cfg).items()  # runs from before a field keep their keys
             if k not in _NOT_IN_KEY and not (k in ("extend_epochs", "patience_after") and v == 0)}
    blob = json.dumps({"method": model.name, "config": dataclasses.asdict(model.config), "train": train,
                       "initial_state": state_fingerprint(model),
                       "train_data": split_fingerprint(train_split), "val_data": split_fingerprint(val_split)},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def cached_run_dir(model: RetrievalModel, key: str) -> Path:
    """`cache_dir()/runs/<method>-<first 16 hex of the run key>` (`run_key`)."""
    return cache_dir() / "runs" / f"{model.name}-{key[:16]}"


# ------------------------------------------------------------------------------------------- checkpoints


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
        "numpy_pos": int(np_state[2]),
        "numpy_gauss": [int(np_state[3]), float(np_state[4])],
        "python": list(random.getstate()[1]),
        "python_gauss": random.getstate()[2],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy_pos"], state["numpy_gauss"][0], state["numpy_gauss"][1]))
    random.setstate((3, tuple(state["python"]), state["python_gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, payload: dict[str, Any]) -> Path:
    """torch.save into memory, then an atomic write: a crash never leaves a half-written checkpoint."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, required: tuple[str, ...] = ("model",)) -> dict[str, Any]:
    """`torch.load(weights_only=True)` on CPU; a missing, corrupt or incomplete file raises `CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - truncated zip, bad pickle, ...: all mean a corrupt file
        msg = str(err).splitlines()[0] if str(err) else ""
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({type(err).__name__}: {msg})") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: not an xmr checkpoint (a {type(payload).__name__}, expected a dict)")
    missing = [k for k in required if k not in payload]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}")
    return payload


# ----------------------------------------------------------------------------------- optimiser, schedule


def build_optimizer(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam / AdamW / AdamP (Heo et al. 2021, PCME's optimiser: `optim.ForeachAdamP`, or the `adamp` package's
    when `ADAMP` is "package") over `params`."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamp" and ADAMP == "foreach":
        return ForeachAdamP(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamp" and ADAMP == "package":
        from adamp import AdamP

        return AdamP(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamp":
        raise ValueError(f"train.ADAMP must be 'foreach' or 'package', got {ADAMP!r}")
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; choose adam, adamw or adamp")


def lr_factor(epoch: int, cfg: TrainConfig) -> float:
    """Multiplier of cfg.lr during `epoch` (0-based): the phase's schedule × finetune_lr_mult in phase 2; an
    extension epoch (`epoch >= cfg.epochs`) keeps the last epoch's."""
    epoch = min(epoch, cfg.epochs - 1)
    if cfg.frozen_epochs and epoch >= cfg.frozen_epochs:
        start, length, mult = cfg.frozen_epochs, cfg.epochs - cfg.frozen_epochs, cfg.finetune_lr_mult
    else:
        start, length, mult = 0, cfg.frozen_epochs or cfg.epochs, 1.0
    t = epoch - start
    if cfg.scheduler == "cosine":
        return mult * 0.5 * (1.0 + math.cos(math.pi * t / length))
    if cfg.scheduler == "step":
        return mult * cfg.step_gamma ** (t // cfg.step_epochs)
    if cfg.scheduler == "constant":
        return mult
    raise ValueError(f"unknown scheduler {cfg.scheduler!r}; choose cosine, step or constant")


def set_backbone_frozen(model: RetrievalModel, frozen: bool) -> None:
    for p in model.backbone_parameters():
        p.requires_grad_(not frozen)


# ------------------------------------------------------------------------------------------------ helpers


def _to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _write_history(path: Path, history: list[dict[str, Any]]) -> None:
    atomic_write_text(path, pd.DataFrame(history).to_csv(index=False))


def _validator(model: RetrievalModel, split: Split, vocab: Vocabulary, cfg: TrainConfig,
               device: torch.device) -> Callable[[RetrievalModel, Split], dict[str, float]]:
    """`fit`'s validation on `split` each epoch: `evaluate_model` on `cfg.val_views`, or for a multi-query model
    `evaluate_multi_query` on every round its longest set allows. The split's loaders are built once a run: its
    captions are tokenised once, not every epoch (the same batches, so the same numbers)."""
    from xmr_core.data.datasets import caption_loader, image_loader
    from xmr_core.evaluate import evaluate_model, evaluate_multi_query

    batch_size = cfg.eval_batch_size
    if model.task == "multi_query":
        longest = max((len(q) for q in split.queries or []), default=1)
        rounds = min(longest, model.max_queries or longest)
        return lambda m, s: evaluate_multi_query(m, s, vocab, rounds, short="hold", batch_size=batch_size,
                                                 device=device)
    views = None if cfg.val_views is None else list(cfg.val_views)
    loaders = None if vocab is None else (image_loader(split, batch_size, visual=model.visual),
                                          caption_loader(split, vocab, batch_size))
    return lambda m, s: evaluate_model(m, s, vocab=vocab, batch_size=batch_size, device=device, views=views,
                                       progress=False, loaders=loaders if s is split else None)


def _finished(run_dir: Path, key: str) -> dict[str, Any] | None:
    path = run_dir / "result.json"
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: unreadable run result ({err})") from None
    if result.get("key") != key:
        raise CheckpointError(f"{path}: holds a different run (key {str(result.get('key'))[:16]}, "
                              f"this run {key[:16]}); choose another out_dir")
    return result


def _extends(result: dict[str, Any]) -> bool:
    """Whether a finished run without an extension would be extended: it ran its whole schedule and its last
    epoch was its best."""
    return result.get("stopped", "max_epochs") == "max_epochs" and result["best_epoch"] == len(result["history"])


def _cached_base(model: RetrievalModel, train_split: Split, val_split: Split,
                 cfg: TrainConfig) -> tuple[Path, dict[str, Any]] | None:
    """The finished cached run of `cfg` without its extension (`extend_epochs` > 0 only): (its directory, its
    result), or None. An extended run is that run plus the extension epochs, so it starts from there."""
    if not cfg.extend_epochs:
        return None
    key = run_key(model, train_split, val_split, dataclasses.replace(cfg, extend_epochs=0))
    result = _finished(cached_run_dir(model, key), key)
    return None if result is None else (cached_run_dir(model, key), result)


def _adopt_base(run_dir: Path, key: str, base: tuple[Path, dict[str, Any]], cfg: TrainConfig) -> dict[str, Any]:
    """The extended run of a cached run that needs no extension is that run: its checkpoints and result, under
    this run's key."""
    base_dir, result = base
    for name in ("best.pt", "last.pt", "metrics.csv"):
        atomic_write_bytes(run_dir / name, (base_dir / name).read_bytes())
    record = {**result["run"], "train": {**result["run"]["train"], "extend_epochs": cfg.extend_epochs}, "key": key}
    result = {**result, "key": key, "run": record, "adopted_from": base_dir.name}
    atomic_write_text(run_dir / "result.json", json.dumps(result, indent=1, default=str))
    return result


def _result_from(run_dir: Path, result: dict[str, Any], cached: bool) -> FitResult:
    return FitResult(run_dir=run_dir, best_epoch=result["best_epoch"], best_score=result["best_score"],
                     best_metrics=result["best_metrics"], history=result["history"],
                     train_seconds=result["train_seconds"], pairs_per_second=result["pairs_per_second"],
                     cached=cached, stopped=result.get("stopped", "max_epochs"),
                     stop_message=result.get("stop_message", ""), best_state=result.get("best_state", ""))


def _load_best(model: RetrievalModel, run_dir: Path, result: dict[str, Any]) -> None:
    """Load `run_dir/best.pt` into `model` after checking that it is the checkpoint `result` describes: its
    epoch and score, and its weights' `state_fingerprint` when the result records one."""
    path = run_dir / "best.pt"
    ckpt = load_checkpoint(path, ("model", "epoch", "score"))
    if (ckpt["epoch"], float(ckpt["score"])) != (result["best_epoch"], float(result["best_score"])):
        raise CheckpointError(f"{path}: epoch {ckpt['epoch']} (score {ckpt['score']}), but {run_dir / 'result.json'} "
                              f"describes epoch {result['best_epoch']} (score {result['best_score']})")
    model.load_state_dict(ckpt["model"])
    if result.get("best_state") and state_fingerprint(model) != result["best_state"]:
        raise CheckpointError(f"{path}: its weights are not the ones {run_dir / 'result.json'} describes "
                              f"(state fingerprint {state_fingerprint(model)[:16]}, result {result['best_state'][:16]})")


def _claim(run_dir: Path, key: str, env: DistEnv) -> Claim | None:
    """Rank 0 claims `run_dir` for this run (`xmr_core.runs.cache`), waiting while a live worker holds it; None
    when the run is finished (by this or another worker) and on the other ranks, which wait at a barrier until
    rank 0 holds the claim or has found the run finished."""
    claim = acquire(run_dir, lambda: _finished(run_dir, key) is not None, log=tqdm.write) if env.is_main else None
    barrier(env)
    return claim


# ---------------------------------------------------------------------------------------------------- fit


def fit(
    model: RetrievalModel,
    train_split: Split,
    val_split: Split,
    cfg: TrainConfig,
    out_dir: str | Path | None = None,
    resume: bool = False,
    *,
    vocab: Vocabulary,
    on_epoch_end: Callable[[int, dict[str, Any]], None] | None = None,
    validate: Callable[[RetrievalModel, Split], dict[str, float]] | None = None,
) -> FitResult:
    """Train `model` on `train_split`, validating on `val_split` each epoch; returns the best epoch's result,
    `model` holding that epoch's weights (`FitResult.best_state` is their fingerprint).

    out_dir: the run directory (default: the run cache, see the module docstring). A finished run with the
    same key there is loaded instead of retrained. The run directory is claimed before training
    (`xmr_core.runs.cache`): while another live process trains the same run, this one waits for it and then
    loads its result. resume: continue from `out_dir/last.pt`.
    on_epoch_end(epoch, row): called after each epoch's checkpoint (e.g. to log, or to stop a run).
    validate(model, split) -> metrics: replaces `evaluate_model` (must return `cfg.select`).
    """
    env: DistEnv = current_env()
    key = run_key(model, train_split, val_split, cfg)
    run_dir = Path(out_dir) if out_dir is not None else cached_run_dir(model, key)
    if plantrace.tracing():  # `xmr book plan`: a run missing from the cache is listed, not trained
        done = _finished(run_dir, key)
        plantrace.record(model, cfg, key, run_dir, done, epoch_items=epoch_items(model, train_split, cfg),
                         train_images=train_split.n_images,
                         time_steps=lambda k: step_seconds(model, train_split, cfg, vocab, k))
        if done is None:
            return FitResult(run_dir, 0, math.nan, {}, [], 0.0, 0.0, stopped="planned")
    claim = _claim(run_dir, key, env)
    try:
        with torch_threads(cfg.threads):
            result = _fit(model, train_split, val_split, cfg, run_dir, key, out_dir is None, resume, claim, env,
                          vocab=vocab, on_epoch_end=on_epoch_end, validate=validate)
        if env.is_main:  # the notebook's run log (`xmr_core.runs.log`)
            log_run(run_dir, key, model.name, cfg.seed, trained=not result.cached)
        return result
    finally:
        if claim is not None:
            claim.release(finished=(run_dir / "result.json").is_file())


@dataclass
class _Progress:
    """What a run carries from epoch to epoch (and saves in `last.pt`): the epochs done and their history, the
    best epoch so far, the last epoch that beat its predecessor by more than `min_delta` (the stop rule's), the
    training time and the pairs seen."""

    epoch: int = 0
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    best_score: float = -math.inf
    best_epoch: int = -1
    best_metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    improved_score: float = -math.inf
    improved_epoch: int = 0
    train_seconds: float = 0.0
    pairs_seen: int = 0


class _Optimisation(NamedTuple):
    """The optimiser, the learning-rate schedule and the AMP gradient scaler of a run."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler


class _Epoch(NamedTuple):
    """One epoch of training (`_train_epoch`): summed loss terms over `n_steps` steps, pairs seen (this rank),
    seconds, and the message of a non-finite loss that stopped it ("" when it finished)."""

    sums: dict[str, float]
    n_steps: int
    n_pairs: int
    seconds: float
    stop_message: str


def _optimisation(model: RetrievalModel, cfg: TrainConfig, use_amp: bool) -> _Optimisation:
    optimizer = build_optimizer(list(model.parameters()), cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: lr_factor(e, cfg))
    return _Optimisation(optimizer, scheduler, torch.amp.GradScaler("cuda", enabled=use_amp))


def _restore(path: Path, key: str, model: RetrievalModel, opt: _Optimisation) -> _Progress:
    """Load the checkpoint `path` of run `key` into the model, the optimisation and the RNGs; its progress."""
    ckpt = load_checkpoint(path, ("model", "optimizer", "scheduler", "epoch", "rng", "run", "improved_score",
                                  "improved_epoch"))
    if ckpt["run"]["key"] != key:
        raise CheckpointError(f"{path}: belongs to another run (method/config/data/seed differ)")
    model.load_state_dict(ckpt["model"])
    opt.optimizer.load_state_dict(ckpt["optimizer"])
    opt.scheduler.load_state_dict(ckpt["scheduler"])
    opt.scaler.load_state_dict(ckpt["scaler"])
    _set_rng_state(ckpt["rng"])
    return _Progress(ckpt["epoch"], list(ckpt["history"]), ckpt["best_score"], ckpt["best_epoch"],
                     dict(ckpt["best_metrics"]), ckpt["improved_score"], ckpt["improved_epoch"],
                     ckpt["train_seconds"], ckpt["pairs_seen"])


def epoch_items(model: RetrievalModel, split: Split, cfg: TrainConfig) -> int:
    """Items one training epoch of `model` on `split` covers, batched by `_train_loader` into ceil(items /
    `cfg.batch_size`) steps, the last one short: every caption (epoch mode "all_captions"), else every image once
    (one caption per image, a multi-query model's images, or a method's own batches: HREM's hold every image once,
    `samplers.ClusterBatchSampler`; a sampler that does not say how many images it covers counts whole batches)."""
    batches = model.train_batch_sampler(split, cfg.batch_size, cfg.seed)
    if batches is not None:
        return int(getattr(batches, "n_images", len(batches) * cfg.batch_size))
    per_image = model.task == "multi_query" or cfg.epoch_mode == "one_per_image"
    return split.n_images if per_image else split.n_captions


def step_seconds(model: RetrievalModel, split: Split, cfg: TrainConfig, vocab: Vocabulary, steps: int) -> float:
    """Seconds one training step of `model` on `split` takes under `cfg` (its device, threads, AMP; loading the
    batch included), timed over `steps` steps after an untimed one, on a copy of the model with batches of
    `cfg.batch_size` items drawn with replacement (so a split smaller than a batch still gives whole ones); CPU
    seconds of this process on the CPU, wall seconds on a GPU. The model, the random state and the run cache are
    left as they were; NaN when the loss is not finite. The run plan's cost a step (`runs.trace`)."""
    device = select_device(cfg.device)
    use_amp = cfg.amp and device.type == "cuda"
    work = copy.deepcopy(model).to(device)
    items = split.n_images if model.task == "multi_query" else split.n_captions
    drawn = np.random.default_rng(cfg.seed).integers(0, items, (steps + 1, cfg.batch_size)).tolist()
    quiet = dataclasses.replace(cfg, progress=False, on_nonfinite="raise")
    state = _rng_state()
    try:
        with torch_threads(cfg.threads):
            set_backbone_frozen(work, cfg.frozen_epochs > 0)
            opt = _optimisation(work, cfg, use_amp)
            loaders = [_train_loader(work, split, vocab, quiet, DistEnv(), batches=part)[0]
                       for part in (drawn[:1], drawn[1:])]
            _train_epoch(work, work, loaders[0], opt, 0, quiet, DistEnv(), device, use_amp, 0)
            clock = time.perf_counter if device.type == "cuda" else time.process_time
            t0 = clock()
            _train_epoch(work, work, loaders[1], opt, 0, quiet, DistEnv(), device, use_amp, 0)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return (clock() - t0) / steps
    except FloatingPointError:
        return math.nan
    finally:
        _set_rng_state(state)


def _train_loader(model: RetrievalModel, split: Split, vocab: Vocabulary, cfg: TrainConfig,
                  env: DistEnv, batches: Any = None) -> tuple[Any, Any]:
    """(the training loader, the sampler whose `set_epoch` reshuffles it) of `model` on `split`: the method's own
    batches (HREM's neighbour batches) or one caption per image / every caption (items are images for a
    multi-query model), sharded over the processes; `batches` (lists of item indices) instead of any of them:
    no sampler (`step_seconds`)."""
    augment = Augmentation(random_erasing_prob=cfg.random_erasing_prob, word_dropout=cfg.word_dropout)
    multi_query = model.task == "multi_query"
    if multi_query and cfg.epoch_mode != "one_per_image":
        raise ValueError(f"{model.name} trains on (image, query set) items, each image once an epoch: epoch_mode "
                         f"must be 'one_per_image', got {cfg.epoch_mode!r}")
    sampler: Any = None  # given batches: none
    if batches is None:
        batches = model.train_batch_sampler(split, cfg.batch_size, cfg.seed)
        sampler = batches
    if sampler is not None:  # the method chooses its batches (HREM's neighbour batches)
        if env.distributed or cfg.epoch_mode != "one_per_image":
            raise ValueError(f"{model.name} chooses its own training batches: it trains in one process with "
                             f"epoch_mode 'one_per_image' (got {env.world_size} processes, {cfg.epoch_mode!r})")
    elif batches is None:
        if multi_query:  # every image once (items are images)
            base: Any = AllCaptionsSampler(split.n_images, seed=cfg.seed)
        elif cfg.epoch_mode == "one_per_image":
            base = OneCaptionPerImageSampler(split.caption_image, split.n_images, seed=cfg.seed)
        else:
            base = AllCaptionsSampler(split.n_captions, seed=cfg.seed)
        sampler = ShardedSampler(base, env)
        batches = BatchSampler(sampler, cfg.batch_size, False)
    if multi_query:
        loader = query_loader(split, vocab, cfg.batch_size, train=True, visual=model.visual, augment=augment,
                              max_queries=model.max_queries, batch_sampler=batches, seed=cfg.seed,
                              num_workers=cfg.num_workers)
    else:
        loader = pair_loader(split, vocab, cfg.batch_size, batch_sampler=batches, augment=augment,
                             seed=cfg.seed, num_workers=cfg.num_workers, visual=model.visual)
    return loader, sampler


def _train_epoch(model: RetrievalModel, net: nn.Module, loader: Any, opt: _Optimisation, epoch: int,
                 cfg: TrainConfig, env: DistEnv, device: torch.device, use_amp: bool, best_epoch: int) -> _Epoch:
    """One pass over `loader`: forward (`net`, the model or its DDP wrapper), the method's loss, backward,
    clipping and the optimiser step per batch. A non-finite loss (or a `FloatingPointError` from the method's loss,
    which met a non-finite input) raises (`cfg.on_nonfinite` "raise", several
    processes, or no best epoch yet) or ends the epoch with its message, the best checkpoint standing."""
    model.train()
    sums: dict[str, float] = {}
    n_steps, n_pairs = 0, 0
    t0 = time.perf_counter()
    extra = " (extension)" if epoch >= cfg.epochs else ""
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{cfg.epochs}{extra}", disable=not (cfg.progress and env.is_main))
    for step, batch in enumerate(bar):
        model.set_epoch(epoch + step / len(loader))
        batch = _to_device(batch, device)
        with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=use_amp):
            img_emb, cap_emb = net(batch)
            try:
                loss, parts = model.loss(img_emb, cap_emb, batch)
            except FloatingPointError as err:  # the loss met a non-finite input: the forward pass diverged
                loss, parts = torch.tensor(float("nan")), {"error": str(err)}
        if not torch.isfinite(loss):
            message = f"{model.name}: loss {loss.item()} at epoch {epoch + 1} step {step + 1} (terms: {parts})"
            if cfg.on_nonfinite == "raise" or env.distributed or best_epoch < 1:
                raise FloatingPointError(message)
            return _Epoch(sums, n_steps, n_pairs, time.perf_counter() - t0, message)
        opt.optimizer.zero_grad(set_to_none=True)
        opt.scaler.scale(loss).backward()
        if cfg.grad_clip > 0:
            opt.scaler.unscale_(opt.optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.scaler.step(opt.optimizer)
        opt.scaler.update()
        for name, value in {"loss": loss.item(), **parts}.items():
            sums[name] = sums.get(name, 0.0) + float(value)
        n_steps += 1
        n_pairs += len(batch["image_index"])
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return _Epoch(sums, n_steps, n_pairs, time.perf_counter() - t0, "")


def _record_validation(progress: _Progress, row: dict[str, Any], metrics: dict[str, float], epoch: int,
                       cfg: TrainConfig) -> bool:
    """Add epoch `epoch`'s validation `metrics` to its history `row` and the progress (the stop rule's last
    improvement by more than `min_delta`, the best epoch); True when the epoch is the best so far."""
    if cfg.select not in metrics:
        raise KeyError(f"validation returned no {cfg.select!r} (has {sorted(metrics)[:8]} ...)")
    row.update({f"val/{k}": float(v) for k, v in metrics.items()})
    progress.history.append(row)
    if metrics[cfg.select] > progress.improved_score + cfg.min_delta:
        progress.improved_score, progress.improved_epoch = float(metrics[cfg.select]), epoch + 1
    if not metrics[cfg.select] > progress.best_score:
        return False
    progress.best_score, progress.best_epoch = float(metrics[cfg.select]), epoch + 1
    progress.best_metrics = {k: float(v) for k, v in metrics.items()}
    return True


def _save_last(run_dir: Path, model: RetrievalModel, opt: _Optimisation, progress: _Progress,
               config_record: dict[str, Any]) -> None:
    """`last.pt`: everything `_restore` needs to go on after `progress.epoch` epochs."""
    save_checkpoint(run_dir / "last.pt", {
        "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": opt.optimizer.state_dict(),
        "scheduler": opt.scheduler.state_dict(), "scaler": opt.scaler.state_dict(), "epoch": progress.epoch,
        "rng": _rng_state(), "run": config_record, "history": progress.history, "best_score": progress.best_score,
        "best_epoch": progress.best_epoch, "best_metrics": progress.best_metrics,
        "improved_score": progress.improved_score, "improved_epoch": progress.improved_epoch,
        "train_seconds": progress.train_seconds, "pairs_seen": progress.pairs_seen})


def earliest_patience_stop(cfg: TrainConfig) -> int:
    """The first epoch (counted from 1) after which patience may stop a run: ceil(patience_after x epochs) +
    patience (cpu: 10 + 3 = 13 of 20)."""
    return math.ceil(cfg.patience_after * cfg.epochs) + cfg.patience


def _stop_rule(progress: _Progress, epoch: int, cfg: TrainConfig, env: DistEnv, device: torch.device) -> str | None:
    """Why training stops after epoch `epoch` (None: it goes on). "patience": validation has not risen by more
    than `min_delta` for `patience` epochs, and the run is past `patience_after` of its schedule by `patience`
    epochs (`earliest_patience_stop`). With `extend_epochs`, once the schedule is over an epoch that is not
    the best ends the run: "extension" when it was an extension epoch, else "max_epochs". Only the main rank
    validates: it decides, the other ranks follow."""
    no_progress = (env.is_main and cfg.patience > 0 and epoch + 1 >= earliest_patience_stop(cfg)
                   and epoch + 1 - progress.improved_epoch >= cfg.patience)
    if all_reduce_sum(int(no_progress), env, device) > 0:
        return "patience"
    no_better = env.is_main and epoch + 1 >= cfg.epochs and progress.best_epoch < epoch + 1  # schedule over
    if cfg.extend_epochs and all_reduce_sum(int(no_better), env, device) > 0:
        return "extension" if epoch + 1 > cfg.epochs else "max_epochs"
    return None


def _finish(model: RetrievalModel, run_dir: Path, key: str, config_record: dict[str, Any], progress: _Progress,
            stopped: str, stop_message: str, claim: Claim | None, env: DistEnv) -> FitResult:
    """Write `result.json` (rank 0) and load the best weights into `model` (every rank)."""
    result = {"key": key, "run": config_record, "best_epoch": progress.best_epoch, "best_score": progress.best_score,
              "stopped": stopped, "stop_message": stop_message,
              "best_metrics": progress.best_metrics, "history": progress.history,
              "train_seconds": progress.train_seconds,
              "pairs_per_second": progress.pairs_seen / max(progress.train_seconds, 1e-9), "trained_at": trained_at()}
    if env.is_main:
        _load_best(model, run_dir, result)
        result["best_state"] = state_fingerprint(model)
        if claim is not None:
            claim.check()
        atomic_write_text(run_dir / "result.json", json.dumps(result, indent=1, default=str))
    barrier(env)
    if not env.is_main:  # only rank 0 validated: its result is the run's
        result = json.loads((run_dir / "result.json").read_text())
        _load_best(model, run_dir, result)
    return _result_from(run_dir, result, cached=False)


def _fit(
    model: RetrievalModel,
    train_split: Split,
    val_split: Split,
    cfg: TrainConfig,
    run_dir: Path,
    key: str,
    in_cache: bool,
    resume: bool,
    claim: Claim | None,
    env: DistEnv,
    *,
    vocab: Vocabulary,
    on_epoch_end: Callable[[int, dict[str, Any]], None] | None,
    validate: Callable[[RetrievalModel, Split], dict[str, float]] | None,
) -> FitResult:
    """`fit` in a run directory this process has claimed (rank 0; `claim` None on the other ranks): a finished
    run is loaded; otherwise training starts (or goes on from a checkpoint) and each epoch is trained
    (`_train_epoch`), validated (`_record_validation`), checkpointed (`best.pt`, `_save_last`) and judged by the
    stop rule (`_stop_rule`); the result is written last (`_finish`)."""
    device = select_device(cfg.device)
    if env.distributed and device.type == "cuda":
        device = torch.device("cuda", env.local_rank)
    done = _finished(run_dir, key)
    taken_over = in_cache and claim is not None and claim.took_over is not None
    resume = resume or taken_over  # a dead worker's cached run goes on from its last checkpoint
    base = _cached_base(model, train_split, val_split, cfg) if done is None and in_cache and not resume else None
    if base is not None and not _extends(base[1]):  # the schedule's own run already stopped short of its end
        done = _adopt_base(run_dir, key, base, cfg)
    if done is not None:
        if done.get("stopped") == "diverged" and cfg.on_nonfinite == "raise":
            raise FloatingPointError(f"{done.get('stop_message')} (the finished run in {run_dir})")
        _load_best(model, run_dir, done)
        return _result_from(run_dir, done, cached=True)

    model.to(device)
    use_amp = cfg.amp and device.type == "cuda"
    opt = _optimisation(model, cfg, use_amp)
    config_record = {"method": model.name, "config": json.loads(json.dumps(dataclasses.asdict(model.config),
                                                                           default=str)),
                     "train": dataclasses.asdict(cfg), "key": key}

    start = (run_dir / "last.pt", key) if resume and (run_dir / "last.pt").is_file() else None
    if base is not None:  # the first `cfg.epochs` epochs are the cached run without the extension: go on from it
        start = (base[0] / "last.pt", base[1]["key"])
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(run_dir / "best.pt", (base[0] / "best.pt").read_bytes())
    if start is not None:
        progress = _restore(start[0], start[1], model, opt)
        if taken_over:
            tqdm.write(f"{run_dir}: going on from the dead worker's {start[0].name} (epoch {progress.epoch})")
    else:
        progress = _Progress()
        seed_everything(cfg.seed)

    loader, sampler = _train_loader(model, train_split, vocab, cfg, env)
    validate = validate or _validator(model, val_split, vocab, cfg, device)

    net: nn.Module = model
    stopped, stop_message = "max_epochs", ""
    start_epoch = progress.epoch
    for epoch in range(start_epoch, cfg.epochs + cfg.extend_epochs):
        frozen = epoch < cfg.frozen_epochs
        if epoch in (start_epoch, cfg.frozen_epochs):  # DDP registers the trainable parameters when it wraps
            set_backbone_frozen(model, frozen)
            net = wrap_model(model, env, device)
        sampler.set_epoch(epoch)
        model.on_epoch_start(epoch, train_split, device)
        trained = _train_epoch(model, net, loader, opt, epoch, cfg, env, device, use_amp, progress.best_epoch)
        if trained.stop_message:  # the loss diverged: the epoch is not finished, the best checkpoint stands
            stopped, stop_message = "diverged", trained.stop_message
            tqdm.write(f"stopped: {stop_message}")
            break
        lr = opt.optimizer.param_groups[0]["lr"]
        opt.scheduler.step()
        n_pairs = int(all_reduce_sum(trained.n_pairs, env, device))
        progress.epoch = epoch + 1
        progress.train_seconds += trained.seconds
        progress.pairs_seen += n_pairs

        row: dict[str, Any] = {"epoch": epoch + 1, "phase": "frozen" if frozen else "end-to-end", "lr": lr,
                               **{f"train/{k}": v / max(trained.n_steps, 1) for k, v in trained.sums.items()},
                               "train_seconds": trained.seconds, "pairs_per_second": n_pairs / trained.seconds}
        if env.is_main:
            model.eval()
            is_best = _record_validation(progress, row, validate(model, val_split), epoch, cfg)
            if claim is not None:  # another host took the run over (this process's heartbeat went stale): stop
                claim.check()
            _write_history(run_dir / "metrics.csv", progress.history)
            if is_best:
                save_checkpoint(run_dir / "best.pt", {"format": CHECKPOINT_FORMAT, "model": model.state_dict(),
                                                      "epoch": epoch + 1, "score": progress.best_score,
                                                      "run": config_record})
            _save_last(run_dir, model, opt, progress, config_record)
        barrier(env)
        if on_epoch_end is not None:
            on_epoch_end(epoch, row)
        reason = _stop_rule(progress, epoch, cfg, env, device)
        if reason is not None:
            stopped = reason
            break
    return _finish(model, run_dir, key, config_record, progress, stopped, stop_message, claim, env)
