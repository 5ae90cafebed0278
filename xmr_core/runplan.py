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
serially or in a worker. In trace mode (`XMR_PLAN`, `xmr_core.plantrace`) the batch is one stage of the plan and
nothing trains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from xmr_core import plantrace
from xmr_core.executors import Executor, WorkerOutcome
from xmr_core.runrequest import RunRequest
from xmr_core.train import FitResult, cached_run_dir, fit, run_key

__all__ = ["RunRequest", "fit_many"]


def _fit(request: RunRequest) -> FitResult:
    with plantrace.labelled(request.label):
        return fit(request.model, request.train, request.val, request.cfg, vocab=request.vocab)


def fit_many(requests: Sequence[RunRequest], executor: Executor | None = None) -> list[FitResult]:
    """Train (or load from the run cache) every request; results in `requests` order. `executor`: default
    `Executor.from_env()` (serial without `XMR_EXECUTOR` / `XMR_JOBS`)."""
    executor = executor or Executor.from_env()
    if plantrace.tracing() or executor.in_process:
        with plantrace.batch():
            return [_fit(r) for r in requests]
    keys = [run_key(r.model, r.train, r.val, r.cfg) for r in requests]
    missing: dict[str, RunRequest] = {}  # one request a key: two requests for one run train it once
    for request, key in zip(requests, keys):
        if not (cached_run_dir(request.model, key) / "result.json").is_file():
            missing.setdefault(key, request)
    outcomes: dict[str, WorkerOutcome | BaseException] = {}
    if len(missing) > 1 or (missing and executor.kind == "slurm"):  # a lone local run trains here, as serially
        outcomes = dict(zip(missing, executor.train(list(missing.values()))))
    results = []
    for request, key in zip(requests, keys):
        outcome = outcomes.pop(key, None)  # a second request for the run finds it cached, as serially
        if isinstance(outcome, BaseException):
            raise outcome
        result = _fit(request)
        if outcome is not None:
            if result.best_state != outcome.best_state:
                raise RuntimeError(f"{result.run_dir}: the worker's best weights (fingerprint "
                                   f"{outcome.best_state[:16]}) are not the ones loaded ({result.best_state[:16]})")
            result = dataclasses.replace(result, cached=outcome.cached)
        results.append(result)
    return results
