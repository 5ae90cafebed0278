"""Where a batch of training runs is trained: in this process, on a local pool of workers, or as a submitit job array.

`runs.plan.fit_many` picks the executor from the environment (`Executor.from_env`), so a notebook runs unchanged
on one core, on N local workers or on a Slurm cluster:

- `XMR_EXECUTOR` = `serial` (default; `local` when only `XMR_JOBS` > 1 is set): every run in this process;
  `local`: a pool of `XMR_JOBS` worker processes (spawn); `submitit-local`: submitit's local executor, waves of
  at most `XMR_JOBS` jobs (a test of the cluster path on one machine); `slurm`: one Slurm job array through
  submitit (`map_array`), at most `XMR_JOBS` tasks at once (`slurm_array_parallelism`; unset: no limit).
- Slurm options: `XMR_SLURM_PARTITION`, `XMR_SLURM_TIMEOUT_MIN` (default 720), `XMR_SLURM_MEM_GB` (default 8),
  `XMR_SLURM_GPUS` (per task, default 0), `XMR_SLURM_ADDITIONAL` (a JSON object of further sbatch options,
  e.g. `{"account": "my-lab"}`); `XMR_SUBMITIT_DIR`: the jobs' folder (default `<cache>/submitit`), which must
  be on a file system the nodes share, like the run cache itself (`XMR_CACHE`).

Every worker trains its runs through `train.fit` into the shared run cache, with `TrainConfig.threads` torch
threads (one by default, so a task asks Slurm for that many cores); the claims on run directories
(`xmr_core.runs.cache`) make two workers never train the same run, and a dead worker's run is taken over. The
executor returns, per run key, whether the worker found the run cached and its final weights' fingerprint; the
caller then loads each run from the cache (`runs.plan.fit_many`).

A request travels to a local worker as plain pickled bytes (`dumps`), in which an array that views a read-only
memory-mapped file (the trunk's grid features, SCAN's precomp regions: tens of GB on COCO) is its file and place,
reopened memory-mapped in the worker, not its bytes.
"""

from __future__ import annotations

import io
import json
import mmap
import multiprocessing as mp
import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from xmr_core.config import cache_dir
from xmr_core.runs.train import RunRequest

EXECUTOR_ENV = "XMR_EXECUTOR"
JOBS_ENV = "XMR_JOBS"
Kind = Literal["serial", "local", "submitit-local", "slurm"]
KINDS: tuple[Kind, ...] = ("serial", "local", "submitit-local", "slurm")
_CARRIED_ENV = ("XMR_CACHE", "XMR_RUN_LOG", "HF_HUB_OFFLINE")  # set in every worker as in the caller


@dataclass(frozen=True)
class WorkerOutcome:
    """What a worker reports of one run: its key, whether it was already finished in the cache, and the
    `state_fingerprint` of its best weights (`FitResult.best_state`)."""

    key: str
    cached: bool
    best_state: str


def _environment() -> dict[str, str]:
    """The caller's variables every worker needs: the run cache (resolved), the run log, offline mode."""
    env = {name: os.environ[name] for name in _CARRIED_ENV if name in os.environ}
    env["XMR_CACHE"] = str(cache_dir().resolve())
    return env


def train_request(request: RunRequest, env: dict[str, str]) -> WorkerOutcome:
    """A worker's task: with `env` set, train `request` (or find it finished) in the run cache through `fit`."""
    from xmr_core.runs.train import fit, run_key

    os.environ.update(env)
    log = os.environ.get("XMR_RUN_LOG")
    if log and not Path(log).parent.is_dir():  # a node that does not see the caller's run log: the caller logs
        os.environ.pop("XMR_RUN_LOG")
    key = run_key(request.model, request.train, request.val, request.cfg)
    result = fit(request.model, request.train, request.val, request.cfg, vocab=request.vocab)
    return WorkerOutcome(key, result.cached, result.best_state)


def _positive(name: str, default: int | None) -> int | None:
    text = os.environ.get(name, "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}={text!r}: expected a whole number >= 1")
    return int(text)


@dataclass(frozen=True)
class Executor:
    """How `fit_many` trains a batch: `kind` (see the module docstring) and `jobs` (workers, or tasks at once;
    None: no limit, Slurm only)."""

    kind: Kind = "serial"
    jobs: int | None = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{EXECUTOR_ENV}={self.kind!r}: choose one of {', '.join(KINDS)}")
        if self.jobs is not None and self.jobs < 1:
            raise ValueError(f"{JOBS_ENV}: jobs must be >= 1, got {self.jobs}")
        if self.jobs is None and self.kind != "slurm":
            raise ValueError(f"the {self.kind} executor needs a number of jobs ({JOBS_ENV})")

    @classmethod
    def from_env(cls) -> Executor:
        """`XMR_EXECUTOR` and `XMR_JOBS` (see the module docstring)."""
        kind = os.environ.get(EXECUTOR_ENV, "")
        jobs = _positive(JOBS_ENV, None)
        if not kind:
            kind = "local" if jobs is not None and jobs > 1 else "serial"
        if kind not in KINDS:
            raise ValueError(f"{EXECUTOR_ENV}={kind!r}: choose one of {', '.join(KINDS)}")
        return cls(kind, jobs if jobs is not None or kind == "slurm" else 1)  # type: ignore[arg-type]

    @property
    def in_process(self) -> bool:
        """Whether runs train in the calling process (serial, or a local pool of one)."""
        return self.kind == "serial" or (self.kind == "local" and self.jobs == 1)

    def train(self, requests: Sequence[RunRequest]) -> list[WorkerOutcome | BaseException]:
        """Train every request on this executor's workers: per request, in order, its outcome or the exception its
        worker raised."""
        if self.in_process:
            raise ValueError(f"the {self.kind} executor trains in the calling process: use train.fit")
        env = _environment()
        if self.kind == "local":
            return _pool(requests, env, self.jobs or 1)
        return _submitit(requests, env, self.kind, self.jobs)


MappedPlace = tuple[str, int, tuple[int, ...], str, int, int]  # file, byte offset, shape, dtype, file size, mtime (ns)


def mapped_place(array: np.ndarray) -> MappedPlace | None:
    """Where the C-contiguous `array` lies in the read-only memory-mapped file it views (`np.load(...,
    mmap_mode="r")`, or a row slice of one): the file, the byte offset of its first item, its shape and dtype, and the
    file's size and modification time; None for an array that does not view such a file (or holds nothing)."""
    root: Any = array
    while isinstance(root, np.ndarray) and not isinstance(root.base, mmap.mmap):
        root = root.base
    if (not isinstance(root, np.memmap) or root.mode != "r" or root.filename is None or not array.size
            or not array.flags.c_contiguous or array.dtype.hasobject):
        return None
    stat = os.stat(root.filename)
    offset = int(root.offset) + array.ctypes.data - root.ctypes.data
    return str(root.filename), offset, tuple(array.shape), array.dtype.str, stat.st_size, stat.st_mtime_ns


def reopen_mapped(path: str, offset: int, shape: tuple[int, ...], dtype: str, size: int, mtime_ns: int) -> np.memmap:
    """The array `mapped_place` described, memory-mapped read-only from its file again; an error naming the file when
    it changed since (another size or modification time)."""
    stat = os.stat(path)
    if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns):
        raise RuntimeError(f"{path}: changed since the array that maps it was sent to this worker (size {size} -> "
                           f"{stat.st_size}, mtime {mtime_ns} -> {stat.st_mtime_ns})")
    return np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape)


class _MappedPickler(pickle.Pickler):
    """A pickler that sends every array `mapped_place` places as its place (`reopen_mapped` on loading)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            place = mapped_place(obj)
            if place is not None:
                return reopen_mapped, place
        return NotImplemented


def dumps(obj: object) -> bytes:
    """`obj` as plain pickled bytes (`spawn_pool`), each array that views a read-only memory-mapped file as that file
    and its place (`mapped_place`), reopened memory-mapped where `pickle.loads` reads it: a worker maps the file the
    caller maps instead of receiving a copy of it. The file must not change meanwhile (the cache's feature files are
    written once and renamed into place; a change is an error where it is reopened)."""
    buffer = io.BytesIO()
    _MappedPickler(buffer).dump(obj)
    return buffer.getvalue()


def _train_pickled(payload: bytes, env: dict[str, str]) -> WorkerOutcome:
    return train_request(pickle.loads(payload), env)


def spawn_pool(jobs: int, tasks: int, initializer: Callable[..., object] | None = None,
               initargs: tuple[object, ...] = ()) -> ProcessPoolExecutor:
    """A pool of min(`jobs`, `tasks`) spawn workers (a fresh interpreter each: no forked torch state), each first
    calling `initializer(*initargs)`. Its users pass plain pickled bytes (`dumps`), not tensors: torch's
    multiprocessing pickler would move tensors into shared memory, where a worker's training would change the
    caller's model."""
    return ProcessPoolExecutor(min(jobs, tasks), mp_context=mp.get_context("spawn"), initializer=initializer,
                               initargs=initargs)


def _pool(requests: Sequence[RunRequest], env: dict[str, str], jobs: int) -> list[WorkerOutcome | BaseException]:
    """`requests` trained on `spawn_pool(jobs)`, each request as plain pickled bytes (`dumps`)."""
    outcomes: list[WorkerOutcome | BaseException] = []
    with spawn_pool(jobs, len(requests)) as pool:
        futures = [pool.submit(_train_pickled, dumps(r), env) for r in requests]
        for future in futures:
            error = future.exception()
            outcomes.append(error if error is not None else future.result())
    return outcomes


def _slurm_parameters(jobs: int | None, cpus: int) -> dict[str, object]:
    """submitit parameters of a Slurm job array from `XMR_SLURM_*` (see the module docstring)."""
    params: dict[str, object] = {"name": "xmr-runs", "cpus_per_task": cpus, "tasks_per_node": 1, "nodes": 1,
                                 "timeout_min": _positive("XMR_SLURM_TIMEOUT_MIN", 720),
                                 "mem_gb": _positive("XMR_SLURM_MEM_GB", 8)}
    gpus = _positive("XMR_SLURM_GPUS", None)
    if gpus:
        params["gpus_per_node"] = gpus
    if os.environ.get("XMR_SLURM_PARTITION"):
        params["slurm_partition"] = os.environ["XMR_SLURM_PARTITION"]
    if jobs is not None:
        params["slurm_array_parallelism"] = jobs
    extra = os.environ.get("XMR_SLURM_ADDITIONAL", "")
    if extra:
        try:
            additional = json.loads(extra)
        except json.JSONDecodeError as err:
            raise ValueError(f"XMR_SLURM_ADDITIONAL is not JSON ({err}): {extra[:80]}") from None
        if not isinstance(additional, dict):
            raise ValueError(f"XMR_SLURM_ADDITIONAL must be a JSON object of sbatch options, got {extra[:80]}")
        params["slurm_additional_parameters"] = additional
    return params


def _submitit(requests: Sequence[RunRequest], env: dict[str, str], kind: Kind,
              jobs: int | None) -> list[WorkerOutcome | BaseException]:
    import submitit

    folder = Path(os.environ.get("XMR_SUBMITIT_DIR") or cache_dir() / "submitit") / "%j"
    cpus = max(r.cfg.threads for r in requests)
    if kind == "slurm":
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(**_slurm_parameters(jobs, cpus))
        waves = [list(requests)]
    else:  # submitit's local executor starts every job at once: waves of `jobs`
        executor = submitit.AutoExecutor(folder=folder, cluster="local")
        executor.update_parameters(timeout_min=_positive("XMR_SLURM_TIMEOUT_MIN", 720), name="xmr-runs")
        step = jobs or len(requests)
        waves = [list(requests[i:i + step]) for i in range(0, len(requests), step)]
    outcomes: list[WorkerOutcome | BaseException] = []
    for wave in waves:
        submitted = executor.map_array(train_request, wave, [env] * len(wave))
        outcomes += [_outcome(job.result) for job in submitted]
    return outcomes


def _outcome(result: Callable[[], WorkerOutcome]) -> WorkerOutcome | BaseException:
    try:
        return result()
    except Exception as err:  # noqa: BLE001 - a failed job's error is the caller's to raise, in request order
        return err
