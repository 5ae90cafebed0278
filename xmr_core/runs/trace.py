"""The run plan's trace: with `XMR_PLAN=<file>` set, `fit` lists the runs it is asked for instead of training them.

`xmr book plan` executes the notebooks with `XMR_PLAN` naming a JSON-lines file. In that mode `train.fit` looks up
each run it is asked for: a finished run in the cache is loaded as usual, a missing one is not trained: `fit`
returns it as planned (`FitResult.stopped == "planned"`, never converged, the model untrained). Either way one line
is appended to the file (`record`): the notebook, the stage, the request's label, method, seed, run key and
directory, whether the run is cached, and its recorded cost (`train_seconds` x threads of a cached run; None for a
missing one, which the plan estimates). A run the cache lacks whose fit summary stands in (`runs.fits`,
`runs.plan.fit_many`) is listed as `summary` (no training: its facts are known, so nothing after it is
provisional), and one asked for with its weights (a figure draws the model: `needing_weights`) as `needs_weights`:
it is trained, at the cost its summary records where it has one.

Stages: the requests of one batch (one `runs.plan.fit_many` call, or a lone `fit`; its number, `batch_id`, is
recorded here and in the run log) are independent of each other. A batch with a missing run ends a stage: what
the notebook asks for afterwards may depend on that run's outcome (a tuned setting), so every later request is
*provisional*: its setting may change once the earlier runs are trained. Batches, stages and provisional marks
are counted per process (one notebook's kernel). Wall time: `batch_wall` packs a batch's runs on W workers,
`cold_wall` adds up the batches of every run (`xmr book plan` from the trace, `xmr runs ls` from the executed
notebooks' run logs).

What a missing run will cost: each record names the run's schedule (`epochs`), the items an epoch covers on its
training split (`epoch_items`, `train.epoch_items`: its images, or its captions), its batch and so its optimiser
steps an epoch (`epoch_steps`), and that split's images (`train_images`). With `XMR_PLAN_STEPS`
= k set (`xmr book plan --measure-steps k`), the first missing run of each shape (`step_shape`: the method and the
sizes of its config, batch, threads and device) has k training steps timed on a copy of its model
(`train.step_seconds`; nothing is written, the model and the random state are left as they were), and every
missing run of that shape records the measured core-seconds a step (`step_core_seconds`), from which `book.plan`
estimates its cost. A run asked for on stand-in inputs (`mark_stand_in`: features the trace did not extract) is
marked `stand_in`: its key is not the one it will have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmr_core.io import read_json_lines

if TYPE_CHECKING:
    from xmr_core.methods.base import RetrievalModel

PLAN_ENV = "XMR_PLAN"
STEPS_ENV = "XMR_PLAN_STEPS"  # k: time k training steps of each shape of missing run (unset or 0: none)
NOTEBOOK_ENV = "XMR_NOTEBOOK"  # the notebook the book runner executes (`book.results.NOTEBOOK_ENV`, which imports this
# module: the name is spelled here too, and a test checks the two agree)


@dataclass
class _Trace:
    stage: int = 1
    provisional: bool = False  # a planned (untrained) result has been returned in this process
    batches: int = 0  # batches opened in this process (`batch_id`)
    batch_depth: int = 0  # inside `batch()`: the stage ends when the outermost batch does
    batch_planned: bool = False
    label: str = ""
    stand_in: bool = False  # inputs the trace did not compute stand in for what the runs asked for from here on read
    step_costs: dict[str, float] = field(default_factory=dict)  # measured core-seconds a step, per `step_shape`
    weights: dict[str, float | None] | None = None  # inside `needing_weights`: key -> its fit summary's core-seconds


_TRACE = _Trace()


def tracing() -> bool:
    """Whether this process runs in trace mode (`XMR_PLAN` names a file)."""
    return bool(os.environ.get(PLAN_ENV))


@contextmanager
def batch() -> Iterator[None]:
    """The requests asked for inside are one batch (a nested batch is the outer one), in trace mode or not: one
    stage, ended (when one of them was missing) on exit."""
    if _TRACE.batch_depth == 0:
        _TRACE.batches += 1
    _TRACE.batch_depth += 1
    try:
        yield
    finally:
        _TRACE.batch_depth -= 1
        if _TRACE.batch_depth == 0 and _TRACE.batch_planned:
            _end_stage()


def batch_id() -> int | None:
    """The number of the batch open in this process (1, 2, ...), None outside one (a lone `fit`)."""
    return _TRACE.batches if _TRACE.batch_depth else None


@contextmanager
def labelled(label: str) -> Iterator[None]:
    """The request asked for inside carries `label` in the plan."""
    before, _TRACE.label = _TRACE.label, label
    try:
        yield
    finally:
        _TRACE.label = before


@contextmanager
def needing_weights(summarised: dict[str, float | None]) -> Iterator[None]:
    """The requests asked for inside need their weights (a figure draws the model): each is listed as "needs
    weights" unless cached; `summarised`: key -> the core-seconds its fit summary records (None: no summary)."""
    before, _TRACE.weights = _TRACE.weights, summarised
    try:
        yield
    finally:
        _TRACE.weights = before


def _end_stage() -> None:
    _TRACE.stage += 1
    _TRACE.provisional = True
    _TRACE.batch_planned = False


def mark_provisional() -> None:
    """What this process asks for from here on is provisional: it depends on runs not trained yet (a setting read
    from a table another notebook wrote from planned runs, `chapters.recorded.recorded_tuning`)."""
    _TRACE.provisional = True


def mark_stand_in() -> None:
    """What this process asks for from here on is trained on inputs the trace did not compute (zeros of their shape
    stand in: `experiment.protocols`), so the keys it lists are not the runs' own."""
    _TRACE.stand_in = True


def steps_to_time() -> int:
    """`XMR_PLAN_STEPS`: the training steps timed per shape of missing run (0: none)."""
    text = os.environ.get(STEPS_ENV, "") or "0"
    if not text.isdigit():
        raise ValueError(f"{STEPS_ENV}={text!r}: expected a whole number of steps")
    return int(text)


def _sizes(value: Any) -> Any:
    """A config's fields that size its computation: whole numbers, booleans and text (its rates and weights left
    out), nested."""
    if isinstance(value, dict):
        return {k: _sizes(v) for k, v in value.items() if not isinstance(v, float)}
    if isinstance(value, list | tuple):
        return [_sizes(v) for v in value]
    return value


def step_shape(model: RetrievalModel, cfg: Any) -> str:
    """What a training step's cost depends on: the method, the sizes of its config (`_sizes`), the batch size, the
    threads and the device (a digest)."""
    shape = {"method": model.name, "config": _sizes(dataclasses.asdict(model.config)), "batch": cfg.batch_size,
             "threads": cfg.threads, "device": cfg.device}
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()


def _step_cost(model: RetrievalModel, cfg: Any, time_steps: Callable[[int], float]) -> float | None:
    """Core-seconds a training step of a missing run (on a GPU: its wall seconds), measured once per `step_shape`
    when `XMR_PLAN_STEPS` asks (`time_steps(k)`: seconds a step over k steps, on `cfg.threads` threads); None when not
    measured or not finite (a loss that diverged at once)."""
    k = steps_to_time()
    if not k:
        return None
    shape = step_shape(model, cfg)
    if shape not in _TRACE.step_costs:
        _TRACE.step_costs[shape] = time_steps(k)
    cost = _TRACE.step_costs[shape]
    return cost if math.isfinite(cost) else None


def core_seconds(result: dict[str, Any]) -> float:
    """A finished run's cost in core-seconds, from its `result.json`: `train_seconds` x its torch threads."""
    return float(result.get("train_seconds", 0.0)) * int(result.get("run", {}).get("train", {}).get("threads", 1))


def batch_wall(costs: Sequence[float], workers: int) -> float:
    """Wall seconds of one batch's runs (`costs`, core-seconds, one thread a run) trained side by side on
    `workers`: longest first, each onto the least loaded worker; the most loaded worker's total."""
    loads = [0.0] * workers
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads)


def cold_wall(runs: Iterable[tuple[str, int | None, float]], workers: int) -> float:
    """Wall seconds to train every run from an empty cache on `workers`: `runs` as (notebook, batch, core-seconds),
    each distinct run once, in the notebook and batch that first asks for it (`batch_id`; None: a lone
    `fit`, a batch of its own). A batch's runs train side by side (`batch_wall`), batches and notebooks one after
    another; what a notebook computes between its batches is not counted."""
    groups: dict[tuple[str, int | str], list[float]] = {}
    for i, (notebook, batch, cost) in enumerate(runs):
        groups.setdefault((notebook, f"lone {i}" if batch is None else batch), []).append(cost)
    return sum(batch_wall(costs, workers) for costs in groups.values())


def record(model: RetrievalModel, cfg: Any, key: str, run_dir: Path, done: dict[str, Any] | None,
           summarised: float | None = None, *, epoch_items: int | None = None, train_images: int | None = None,
           time_steps: Callable[[int], float] | None = None) -> None:
    """Append one requested run to the plan file: `done` is its finished `result.json` (None: missing, so it is
    planned, unless its fit summary stands in: `summarised`, the core-seconds the summary records, `runs.fits`).
    `cfg` is its `TrainConfig`. Inside `needing_weights` a missing run is marked as needing its weights.
    `epoch_items`: the items an epoch covers on its training split of `train_images` images; `time_steps(k)` times
    k training steps (`_step_cost`, for a missing run with no summary to cost it)."""
    weights = _TRACE.weights is not None
    if weights and done is None:
        summarised = (_TRACE.weights or {}).get(key)
    recorded = core_seconds(done) if done is not None else summarised
    timed = recorded is None and time_steps is not None
    line = {"notebook": os.environ.get(NOTEBOOK_ENV, ""), "stage": _TRACE.stage, "batch": batch_id(),
            "label": _TRACE.label, "method": model.name, "seed": cfg.seed, "epochs": cfg.epochs,
            "threads": cfg.threads, "key": key, "run": Path(run_dir).name, "cached": done is not None,
            "core_seconds": recorded, "summary": done is None and recorded is not None,
            "needs_weights": weights and done is None, "provisional": _TRACE.provisional, "stand_in": _TRACE.stand_in,
            "epoch_items": epoch_items,
            "epoch_steps": None if epoch_items is None else math.ceil(epoch_items / cfg.batch_size),
            "batch_size": cfg.batch_size, "train_images": train_images,
            "step_core_seconds": _step_cost(model, cfg, time_steps) if timed else None}
    fd = os.open(os.environ[PLAN_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)
    if done is None and not (line["summary"] and not weights):  # a run its summary stands in for is no unknown
        if _TRACE.batch_depth:
            _TRACE.batch_planned = True
        else:  # a lone fit: its own batch
            _end_stage()


def read_plan(path: Path) -> list[dict[str, Any]]:
    """The records of a plan file, in the order they were asked for; a bad line is an error naming the file."""
    return read_json_lines(path, lambda record: "key" in record, "a plan record")
