"""Test-set scoring of a batch of trained models, side by side on the local workers.

A chapter trains a batch of runs on N workers (`XMR_JOBS`, `xmr_core.runs.executors`) and then scores every trained
model on its test split. In the notebook's kernel that scoring is serial, on the kernel's torch threads
(`book.runner.kernel_threads`, one), while the workers idle: measured on the HMRN chapter's ablations, the workers
trained during 38 % of two cores' time, and 2,251 s of its tables' time was scoring on one core.

`score_each(fn, models, *args)` returns `[fn(model, *args) for model in models]`, computed on a local pool of
`XMR_JOBS` spawn workers (`executors.spawn_pool`), each on the kernel's torch thread count. Every score is the
one the kernel would have computed: the same function, inputs and thread count in another process (tested bit
for bit). The arguments (a test split) go to each worker once (`executors.dumps`: memory-mapped features as their
file), a model with each task. Serially (one job, a
cluster executor, trace mode, a single model, or models off the CPU) it calls `fn` here. On a GPU the kernel's
thread is not what scoring waits for, and each spawn worker would start its own CUDA context: the smoke HMRN
ablate.py with `--jobs 4 -p DEVICE cuda` (H200) took 174 s with pooled scoring, against 65 s scoring in the
kernel. `fn` must be a module-level function (it is pickled by reference); models and arguments go as plain
pickled bytes, as the training pool's requests do.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from xmr_core.experiment.scorecache import cached_scores
from xmr_core.runs import trace as plantrace
from xmr_core.runs.executors import Executor, dumps, spawn_pool

T = TypeVar("T")

_ARGS: tuple[Any, ...] = ()  # a worker's copy of score_each's arguments (`_receive_args`)


def _receive_args(payload: bytes, threads: int) -> None:
    """A worker's start: keep score_each's arguments, unpickled once, and compute on `threads` torch threads."""
    global _ARGS
    _ARGS = pickle.loads(payload)
    torch.set_num_threads(threads)


def _score_pickled(payload: bytes) -> bytes:
    """A worker's task: unpickle (fn, model), compute fn(model, *arguments), pickle the result (plain bytes:
    torch's multiprocessing pickler would pass tensors through shared memory)."""
    fn, model = pickle.loads(payload)
    return pickle.dumps(fn(model, *_ARGS))


def pooled(executor: Executor, models: Sequence[torch.nn.Module]) -> bool:
    """Whether `score_each` scores `models` on workers: a local pool of more than one job, more than one model, every
    parameter on the CPU, and not in trace mode (`xmr_core.runs.trace`)."""
    return (executor.kind == "local" and (executor.jobs or 1) > 1 and len(models) > 1 and not plantrace.tracing()
            and all(p.device.type == "cpu" for model in models for p in model.parameters()))


def score_each(fn: Callable[..., T], models: Sequence[torch.nn.Module], *args: Any,
               executor: Executor | None = None) -> list[T]:
    """`[fn(model, *args) for model in models]`, on `executor`'s local workers when `pooled` (default executor:
    `Executor.from_env()`), each worker on this process's torch thread count; results in `models` order. A
    worker's exception is raised here, as the serial call would raise it."""
    executor = executor or Executor.from_env()
    if not pooled(executor, models):
        return [fn(model, *args) for model in models]
    shared = (dumps(args), torch.get_num_threads())  # a memory-mapped split travels as its file
    with spawn_pool(executor.jobs or 1, len(models), _receive_args, shared) as pool:
        futures = [pool.submit(_score_pickled, pickle.dumps((fn, model))) for model in models]
        return [pickle.loads(future.result()) for future in futures]


def score_trained(fn: Callable[..., T], trained: Sequence[tuple[torch.nn.Module, Any]],
                  *args: Any) -> list[tuple[Any, T]]:
    """`train_many`'s (model, fit) pairs as (fit, fn(model, *args)) pairs, in order: each result read from the run's
    score cache when computed before (`scorecache.cached_scores`), the others scored by `score_each` and cached."""
    scored = cached_scores(fn, trained, *args, compute=lambda models: score_each(fn, models, *args))
    return list(zip((fit for _, fit in trained), scored))
