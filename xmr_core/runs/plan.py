"""Training runs asked for together: `fit_many(requests)` trains a batch of independent runs.

A chapter (or the tuning search) that needs several runs whose settings do not depend on each other's results
asks for them in one call, so an executor may train them side by side. Each `RunRequest` holds the model as
built (seeded, before training: its initial weights are part of the run key), its splits, recipe and vocabulary.
`fit_many` returns one `FitResult` per request, in order, each request's model holding its run's best weights,
exactly as `train.fit` would have left it.

The executor comes from the environment (`executors.Executor.from_env`: `XMR_EXECUTOR`, `XMR_JOBS`), so a
notebook needs no change to train on N local workers or a Slurm cluster. Off-process executors train the runs
missing from the run cache into it; this process then loads every run through `fit` (a cache hit), so each
request's model holds the weights and its result is what a serial `fit` would have returned (`cached` is what
the worker found). A run trains with `TrainConfig.threads` torch threads wherever it runs, so it learns the same
serially or in a worker. In trace mode (`XMR_PLAN`, `xmr_core.runs.trace`) the batch is one stage of the plan and
nothing trains. Either way the run log records each run's batch (`runs.trace.batch_id`), from which the book's wall time
at W workers is estimated.

With a fit summaries folder (`fits`, `runs.fits`), every run returned with a result has its summary written there,
and a run the cache lacks whose summary is there stands in by it: a `fits.WeightlessFit` (no weights, the request's
model as built and guarded), not trained, unless the caller draws the model (`weights=True`; `XMR_WEIGHTS=1`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from xmr_core.runs import fits as summaries
from xmr_core.runs import trace as plantrace
from xmr_core.runs.executors import Executor, WorkerOutcome
from xmr_core.runs.log import log_summary, trained_at
from xmr_core.runs.train import FitResult, RunRequest, cached_run_dir, fit, run_key

__all__ = ["batched", "fit_many"]


def _fit(request: RunRequest) -> FitResult:
    with plantrace.labelled(request.label):
        return fit(request.model, request.train, request.val, request.cfg, vocab=request.vocab)


def first_epoch_divergence(request: RunRequest, key: str, error: FloatingPointError) -> FitResult:
    """A run that diverged in its first epoch (a NaN/inf loss before any epoch finished, so no checkpoint), as a
    result: best epoch 0, score -inf (below any run that learnt), stopped "diverged" with the error, not
    converged, nothing cached; named by its run `key` (of the model as built)."""
    return FitResult(cached_run_dir(request.model, key), 0, float("-inf"), {}, [], 0.0, 0.0, stopped="diverged",
                     stop_message=str(error))


def _fit_or_diverged(request: RunRequest, diverged: Literal["raise", "result"]) -> FitResult:
    """`_fit`; a first-epoch divergence raises, or (diverged="result") leaves the model as built, as a worker's
    does, and is returned as `first_epoch_divergence` under the key computed before training touched it."""
    if diverged == "raise":
        return _fit(request)
    key = run_key(request.model, request.train, request.val, request.cfg)
    built = copy.deepcopy(request.model.state_dict())
    try:
        return _fit(request)
    except FloatingPointError as err:
        request.model.load_state_dict(built)
        return first_epoch_divergence(request, key, err)


def _train_missing(requests: Sequence[RunRequest], executor: Executor
                   ) -> tuple[list[str], dict[str, WorkerOutcome | BaseException]]:
    """Train on `executor` the runs of `requests` missing from the cache (one request a key: two requests for one
    run train it once). Returns every request's run key and the workers' outcome per trained key."""
    keys = [run_key(r.model, r.train, r.val, r.cfg) for r in requests]
    missing: dict[str, RunRequest] = {}
    for request, key in zip(requests, keys):
        if not (cached_run_dir(request.model, key) / "result.json").is_file():
            missing.setdefault(key, request)
    if len(missing) > 1 or (missing and executor.kind == "slurm"):  # a lone local run trains here, as serially
        return keys, dict(zip(missing, executor.train(list(missing.values()))))
    return keys, {}


def _trains_here(executor: Executor) -> bool:
    """Whether each request goes through `fit` in this process, no workers: trace mode (where nothing trains) or
    an in-process executor."""
    return plantrace.tracing() or executor.in_process


def _fit_all(requests: Sequence[RunRequest], executor: Executor, diverged: Literal["raise", "result"]
             ) -> list[FitResult]:
    """Train (or load) every request on `executor`; results in `requests` order (`fit_many` without summaries)."""
    if _trains_here(executor):
        return [_fit_or_diverged(r, diverged) for r in requests]
    keys, outcomes = _train_missing(requests, executor)
    results = []
    for request, key in zip(requests, keys):
        outcome = outcomes.pop(key, None)  # a second request for the run finds it cached, as serially
        if isinstance(outcome, FloatingPointError) and diverged == "result":
            results.append(first_epoch_divergence(request, key, outcome))
            continue
        if isinstance(outcome, BaseException):
            raise outcome
        result = _fit_or_diverged(request, diverged)
        if outcome is not None:
            if result.best_state != outcome.best_state:
                raise RuntimeError(f"{result.run_dir}: the worker's best weights (fingerprint "
                                   f"{outcome.best_state[:16]}) are not the ones loaded ({result.best_state[:16]})")
            result = dataclasses.replace(result, cached=outcome.cached)
        results.append(result)
    return results


def _summary(request: RunRequest, key: str, folder: Path) -> dict[str, Any] | None:
    """The fit summary in `folder` that may stand in for the request's run (`key`): None when the cache has the run
    (its weights are there), or there is no usable summary (one of other code is said and ignored)."""
    run_dir = cached_run_dir(request.model, key)
    if (run_dir / "result.json").is_file():
        return None
    found = summaries.read_summary(folder, run_dir.name)
    problem = "" if found is None else summaries.usable(found, key)
    if problem:
        print(f"{summaries.summary_path(folder, run_dir.name)}: not used, the run {problem}")
    return None if found is None or problem else found


def _stand_in(request: RunRequest, key: str, summary: dict[str, Any], folder: Path,
              diverged: Literal["raise", "result"]) -> FitResult:
    """The weightless result `summary` gives the request, as `fit_many` would give it: a diverged run that `fit`
    would raise for (diverged in its first epoch, or `on_nonfinite="raise"`) raises with `diverged="raise"`."""
    fails = summary["stopped"] == "diverged" and (summary["best_epoch"] == 0 or request.cfg.on_nonfinite == "raise")
    if fails and diverged == "raise":
        raise FloatingPointError(f"{summary['stop_message']} (the run's fit summary in {folder})")
    run_dir = cached_run_dir(request.model, key)
    if plantrace.tracing():
        plantrace.record(request.model, request.cfg, key, run_dir, None, summaries.core_seconds(summary))
    log_summary(run_dir.name, key, request.model.name, request.cfg.seed)
    return summaries.weightless(summary, run_dir, folder, request.model)


def _write_summary(request: RunRequest, key: str, result: FitResult, folder: Path) -> None:
    """Write the fit summary of a run returned with a result (not one planned by the trace)."""
    if result.stopped == "planned":
        return
    saved = result.run_dir / "result.json"
    at = json.loads(saved.read_text()).get("trained_at", {}) if saved.is_file() else trained_at()
    summaries.write_summary(folder, summaries.fit_summary(result, key, request.model.name, request.cfg, at))


def fit_many(requests: Sequence[RunRequest], executor: Executor | None = None, *,
             diverged: Literal["raise", "result"] = "raise", fits: Path | None = None,
             weights: bool = False) -> list[FitResult]:
    """Train (or load from the run cache) every request; results in `requests` order. `executor`: default
    `Executor.from_env()` (serial without `XMR_EXECUTOR` / `XMR_JOBS`). A run that diverges in its first epoch
    (`FloatingPointError`) raises, or with diverged="result" is returned as `first_epoch_divergence` (the tuning
    protocol: a setting where training diverges is an outcome of the search).

    `fits`: the fit summaries folder (`runs.fits`; None: none read or written). Every run returned with a result
    has its summary written there; a run the cache lacks whose summary is there is returned as a
    `fits.WeightlessFit`, not trained, unless `weights` (the caller draws the models) or `XMR_WEIGHTS=1`."""
    executor = executor or Executor.from_env()
    with plantrace.batch():
        if fits is None:
            return _fit_all(requests, executor, diverged)
        keys = [run_key(r.model, r.train, r.val, r.cfg) for r in requests]
        found = {key: _summary(r, key, fits) for r, key in zip(requests, keys)}
        draws = weights or summaries.weights_wanted()
        stand_ins = {} if draws else {i: _stand_in(r, key, found[key], fits, diverged)
                                      for i, (r, key) in enumerate(zip(requests, keys)) if found[key] is not None}
        rest = [r for i, r in enumerate(requests) if i not in stand_ins]
        costs = {key: None if s is None else summaries.core_seconds(s) for key, s in found.items()}
        with plantrace.needing_weights(costs) if draws else contextlib.nullcontext():
            trained = iter(_fit_all(rest, executor, diverged))
        results = [stand_ins[i] if i in stand_ins else next(trained) for i in range(len(requests))]
        for request, key, result in zip(requests, keys, results):
            if summaries.has_weights(result):
                _write_summary(request, key, result, fits)
        return results


@contextmanager
def batched(requests: Sequence[RunRequest], executor: Executor | None = None) -> Iterator[None]:
    """The runs of `requests` are one batch, which the body then asks for one run at a time (`fit`, through the
    chapter's own calls): for a loop that handles each run's failure itself, e.g. an ablation that may diverge in
    its first epoch. On entry, the missing runs are trained side by side on `executor` (default
    `Executor.from_env()`); a run that failed in its worker is left missing, so the body's own `fit` meets the
    failure again, as serially. In trace mode nothing trains and the body's requests are one stage of the plan."""
    executor = executor or Executor.from_env()
    with plantrace.batch():
        if not _trains_here(executor):
            _train_missing(requests, executor)
        yield
