"""`python -m xmr_core.bench throughput`: runs per hour of one representative cpu run of each chapter, side by side.

The representative runs (`REPRESENTATIVE`, one for each chapter that trains), built the way the chapters build
them on the cpu profile's data (`build_run`): VSE0 on the frozen trunk's grid features (the PCME chapter,
`compared.BASELINES`), MSRM and DVSE (K = 6) on the same grid features (`compared.MSRM_COMPARED`,
`compared.DVSE_COMPARED`, each at its paper default: gamma 0.8, margin 0.2), HREM fusion on region features
(`compared.hrem_compared`) and HMRN I-T on the multi-query sets (`hmrn.compared`, the chapter's batch 32), each at
the cpu recipe's lr 1e-3 for `--epochs` epochs (default 2, no patience, no extension),
`--copies` K seeds each (default 2: seeds 0 and 1, a chapter's seeds side by side, as the book's plan batches one
method's settings and seeds), each in its own fresh run directory. With one run per chapter, two workers spend most
of the wall time with one waiting on HREM's run (the longest) and nothing left to take: they measure the imbalance
of three runs, not the throughput of a plan of hundreds. The cpu data (and the trunk) are generated into the run
cache the first time (minutes).

The same list of runs is trained in each mode, each timed on its wall clock (data loading included):
- `old-serial`: the serial path before runs were pinned to one thread: one process, one run at a time with
  torch's default threads (`TrainConfig.threads` = `torch.get_num_threads()`, all the cores), batches built item by
  item (`datasets.BATCHES = "items"`, the reference builder);
- `new-serial`: one process, one run at a time with one thread (`TrainConfig.threads` = 1, the default), batches
  built on whole arrays (`datasets.BATCHES = "arrays"`, the default);
- `old-jobs` / `new-jobs`: `--jobs` N worker processes (spawn), one run and one torch thread each (`train_plan`),
  batches item by item / on arrays;
- `fast-serial` / `fast-jobs`: `new-serial` / `new-jobs` with issue 74's levers: AdamP's step in fewer passes
  (`train.ADAMP` = "foreach", `xmr_core.optim.ForeachAdamP`, the book's default since; the other modes run the
  `adamp` package's, the reference), and the BiGRU caption encoder's GRU stepped with each step's gates split once
  (`encoders.gru.STEPS` = "split", `packed_gru`, the book's default since; the other modes run `nn.GRU`'s own
  forward, whose backward is quadratic in the caption length). The GRU's steps give the module's results bit for bit;
  AdamP's computes the package's update at float tolerance, so a fast run's result differs from a new run's in the
  last bits and is compared only with other fast runs.
Prints each chapter's training seconds a run (`fit`, the mean over its seeds) and its CPU seconds (the training
process's, which other load on a shared machine does not inflate) per mode, and each mode's wall
seconds and runs per hour next to `old-serial`'s, with the load average (the machine is shared: rerun on a quiet
machine for the record; `--repeat` R runs every mode R times, the modes interleaved, and reports each mode's
fastest round). It also prints whether each run's result (best validation score, final weights'
`state_fingerprint`) is the same in every mode of the same thread count (`items_arrays_identical`: every pair of
modes that differ only in the batch builder agree): item- and array-built batches agree bit for bit
(`tests/test_batches.py`), and `fit` trains with exactly `TrainConfig.threads` threads wherever it runs, so a
one-thread run learns the same serially or in a worker (`tests/test_runplan.py`). Torch's CPU kernels round
differently with another thread count, so `old-serial` (all cores) learns other weights (measured: HMRN I-T's
validation rSum after one epoch 52.19 with 2 threads, 47.03 with 1): the thread count is part of the run key.

`train_plan(specs, jobs, root)` trains into fresh run directories (never the run cache), for timing; the book's
runs are spread over workers by `xmr_core.runs.plan.fit_many` and its executors (`xmr_core.runs.executors`).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from xmr_core.data import datasets
from xmr_core.encoders import gru as gru_module
from xmr_core.encoders.gru import GRUSteps
from xmr_core.runs import train as train_module
from xmr_core.runs.train import AdamPImpl

Chapter = Literal["pcme", "msrm", "hrem", "dvse", "hmrn"]
REPRESENTATIVE: tuple[Chapter, ...] = ("pcme", "msrm", "hrem", "dvse", "hmrn")
LABELS = {"pcme": "PCME ch.: VSE0, grid", "msrm": "MSRM, grid", "hrem": "HREM fusion, regions",
          "dvse": "DVSE K=6, grid", "hmrn": "HMRN I-T, query sets"}
LR = 1e-3  # the cpu recipe's learning rate (the tuning protocol's default)
MODES = ("old-serial", "new-serial", "old-jobs", "new-jobs", "fast-serial", "fast-jobs")


@dataclass(frozen=True)
class RunSpec:
    """One training run: a chapter's representative model, its epochs and seed, and how its batches are built."""

    chapter: Chapter
    epochs: int = 2
    seed: int = 0
    batches: datasets.Batches = "arrays"
    profile: str = "cpu"  # the data and model sizes (smoke: seconds, for tests)
    threads: int = 1  # torch threads of the run (`TrainConfig.threads`)
    adamp: AdamPImpl = "foreach"  # AdamP's step (`train.ADAMP`): `optim.ForeachAdamP` or the package's
    gru: GRUSteps = "split"  # the BiGRU's steps (`encoders.gru.STEPS`): gates split once, or `nn.GRU`'s forward


@dataclass(frozen=True)
class RunOutcome:
    """One finished run: its spec, the seconds `fit` took, its best validation score and final weights' hash."""

    spec: RunSpec
    fit_seconds: float
    best_score: float
    fingerprint: str
    cpu_seconds: float = 0.0  # CPU time of the training process during `fit` (its one thread): what a loaded
    # machine's wall clock inflates and this does not


def build_run(spec: RunSpec) -> tuple[Any, Any, Any, Any, Any]:
    """(model, train split, val split, TrainConfig, vocabulary) of `spec`, from its profile's cached data; the model
    built after seeding torch with `spec.seed`, as `training.train_built` does."""
    from xmr_core.chapters import hmrn
    from xmr_core.config import RunConfig
    from xmr_core.data.load import load_corpus
    from xmr_core.experiment.compared import BASELINES, DVSE_COMPARED, MSRM_COMPARED, hrem_compared
    from xmr_core.experiment.protocols import chapter_setup, hrem_setup
    from xmr_core.experiment.training import train_config

    run = RunConfig(profile=spec.profile, progress=False, device="cpu")
    overrides: dict[str, object] = {"epochs": spec.epochs, "patience": 0, "extend_epochs": 0, "device": "cpu",
                                    "progress": False, "threads": spec.threads}
    if spec.chapter in ("pcme", "msrm", "dvse"):
        _, _, data, enc = chapter_setup(run)
        compared = {"pcme": BASELINES["VSE0"], "msrm": MSRM_COMPARED, "dvse": DVSE_COMPARED}[spec.chapter]
        weight = compared.weight.default
    elif spec.chapter == "hrem":
        _, data, enc = hrem_setup(run)
        compared = hrem_compared(run.profile)["HREM fusion"]
        weight = 0.2
    elif spec.chapter == "hmrn":
        corpus = load_corpus(run.dataset, run.data_root, run.profile, format=hmrn.DATA_FORMAT, variant=hmrn.VARIANT,
                             progress=False, seed=run.data_seed)
        data = hmrn.hmrn_data(corpus, run.profile).multi
        enc = hmrn.hmrn_encoders(run.profile, data.test.regions.shape[2])
        compared = hmrn.compared()[hmrn.IT]
        weight = 40.0
        overrides.update(hmrn.TRAIN_OVERRIDES[run.profile])
    else:
        raise ValueError(f"unknown chapter {spec.chapter!r}; choose one of {', '.join(REPRESENTATIVE)}")
    torch.manual_seed(spec.seed)
    model = compared.build(enc, data.word_vectors, weight, 1)
    return model, data.train, data.val, train_config(run.profile, LR, spec.seed, **overrides), data.vocab


def train_run(spec: RunSpec, run_dir: Path) -> RunOutcome:
    """Train `spec` into `run_dir` with its batch builder (`datasets.BATCHES`), AdamP step (`train.ADAMP`) and GRU
    steps (`encoders.gru.STEPS`), all restored after."""
    from xmr_core.runs.train import fit, state_fingerprint

    before = datasets.BATCHES, train_module.ADAMP, gru_module.STEPS
    datasets.BATCHES, train_module.ADAMP, gru_module.STEPS = spec.batches, spec.adamp, spec.gru
    try:
        model, train, val, cfg, vocab = build_run(spec)
        t0, c0 = time.perf_counter(), time.process_time()
        result = fit(model, train, val, cfg, out_dir=run_dir, vocab=vocab)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        datasets.BATCHES, train_module.ADAMP, gru_module.STEPS = before
    return RunOutcome(spec, seconds, result.best_score, state_fingerprint(model), cpu)


def _one_thread() -> None:
    torch.set_num_threads(1)


def train_plan(specs: Sequence[RunSpec], jobs: int, root: Path,
               train: Callable[[RunSpec, Path], RunOutcome] = train_run) -> list[RunOutcome]:
    """`train(spec, root/<k>)` for every run k of `specs`: in this process (jobs 1, torch's threads as they are) or
    in `jobs` worker processes (spawn) of one torch thread each (`train`: a module-level function). Outcomes in
    `specs` order."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    dirs = [root / str(k) for k in range(len(specs))]
    if jobs == 1:
        return [train(spec, d) for spec, d in zip(specs, dirs)]
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_one_thread) as pool:
        return list(pool.map(train, specs, dirs))


def run_mode(mode: str, chapters: Sequence[Chapter], epochs: int, jobs: int, root: Path, profile: str = "cpu",
             copies: int = 1) -> tuple[float, list[RunOutcome]]:
    """Wall seconds and outcomes of training `chapters`' runs, seeds 0..copies-1 each (a chapter's seeds
    adjacent), in `mode` (one of `MODES`)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    batches: datasets.Batches = "items" if mode.startswith("old") else "arrays"
    threads = torch.get_num_threads() if mode == "old-serial" else 1
    adamp: AdamPImpl = "foreach" if mode.startswith("fast") else "package"
    gru: GRUSteps = "split" if mode.startswith("fast") else "module"
    specs = [RunSpec(c, epochs=epochs, seed=seed, batches=batches, profile=profile, threads=threads, adamp=adamp,
                     gru=gru) for c in chapters for seed in range(copies)]
    t0 = time.perf_counter()
    outcomes = train_plan(specs, jobs if mode.endswith("jobs") else 1, root / mode)
    return time.perf_counter() - t0, outcomes


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", nargs="+", default=list(REPRESENTATIVE), choices=REPRESENTATIVE)
    parser.add_argument("--epochs", type=int, default=2, help="epochs of each run (the chapters' cpu runs: up to 30)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes of the *-jobs modes")
    parser.add_argument("--copies", type=int, default=2, help="seeds of each chapter's run (0, 1, ...)")
    parser.add_argument("--modes", nargs="+", default=["old-serial", "new-serial", "new-jobs"], choices=MODES)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every mode, interleaved; the fastest round "
                        "of each mode is reported (a shared machine's load comes and goes)")
    parser.add_argument("--profile", default="cpu", help="data and model sizes (smoke: a check in seconds)")
    args = parser.parse_args(argv)

    for chapter in args.chapters:  # generate the cpu data (and the trunk) once, outside the timings
        build_run(RunSpec(chapter, epochs=1, profile=args.profile))
    walls: dict[str, list[float]] = {m: [] for m in args.modes}
    rounds: dict[str, list[list[RunOutcome]]] = {m: [] for m in args.modes}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="xmr-throughput-") as tmp:
        for r in range(args.repeat):
            for mode in args.modes:
                wall, outcomes = run_mode(mode, args.chapters, args.epochs, args.jobs, Path(tmp) / str(r), args.profile,
                                          args.copies)
                walls[mode].append(wall)
                rounds[mode].append(outcomes)
                print(f"round {r + 1} {mode}: {wall:.1f} s (load average {os.getloadavg()[0]:.2f})", flush=True)
    load_after = os.getloadavg()

    n = len(args.chapters) * args.copies
    width = max(len(m) for m in args.modes) + 2
    print(f"{n} runs ({len(args.chapters)} chapters x {args.copies} seeds) x {args.epochs} epochs ({args.profile} "
          f"profile), fastest of {args.repeat} round(s), cpu threads {os.cpu_count()} (old-serial: torch threads "
          f"{torch.get_num_threads()}; new-serial: 1; jobs: {args.jobs} x 1 thread); load average before "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"{'fit seconds a run':<24}" + "".join(f"{m:>{width}}" for m in args.modes)
          + "  same result in every mode of one thread count and AdamP step (rounds included)")
    for c, chapter in enumerate(args.chapters):
        ks = range(c * args.copies, (c + 1) * args.copies)  # this chapter's runs, one a seed
        same = all(len({(o[k].best_score, o[k].fingerprint) for m in args.modes for o in rounds[m]
                        if (o[k].spec.threads, o[k].spec.adamp) == t}) == 1
                   for k in ks for t in {(o[k].spec.threads, o[k].spec.adamp) for m in args.modes for o in rounds[m]})
        scores = ", ".join(f"{rounds[m][0][ks[0]].best_score:.2f}" for m in args.modes)
        seconds = {m: min(sum(o[k].fit_seconds for k in ks) / args.copies for o in rounds[m]) for m in args.modes}
        print(f"{LABELS[chapter]:<24}" + "".join(f"{seconds[m]:>{width}.1f}" for m in args.modes)
              + f"  {'yes' if same else 'no (seed 0): ' + scores}")
    print(f"{'fit CPU seconds a run':<24}" + "".join(f"{m:>{width}}" for m in args.modes)
          + "  (the training process's CPU time: what other load on the machine does not inflate)")
    for c, chapter in enumerate(args.chapters):
        ks = range(c * args.copies, (c + 1) * args.copies)
        cpu = {m: min(sum(o[k].cpu_seconds for k in ks) / args.copies for o in rounds[m]) for m in args.modes}
        print(f"{LABELS[chapter]:<24}" + "".join(f"{cpu[m]:>{width}.1f}" for m in args.modes))
    wall = {m: min(walls[m]) for m in args.modes}
    print(f"{'wall seconds':<24}" + "".join(f"{wall[m]:>{width}.1f}" for m in args.modes))
    per_hour = {m: 3600.0 * n / wall[m] for m in args.modes}
    print(f"{'runs per hour':<24}" + "".join(f"{per_hour[m]:>{width}.1f}" for m in args.modes))
    base = args.modes[0]
    print(f"{'vs ' + base:<24}" + "".join(f"{per_hour[m] / per_hour[base]:>{width - 1}.2f}x" for m in args.modes))
    fields = {f"{m.replace('-', '_')}_runs_per_hour": f"{per_hour[m]:.1f}" for m in args.modes}
    speedup = {f"{m.replace('-', '_')}_vs_{base.replace('-', '_')}": f"{per_hour[m] / per_hour[base]:.2f}"
               for m in args.modes[1:]}
    reproducible = all(len({(o.best_score, o.fingerprint) for o in outcomes}) == 1  # a run in every round of a mode
                       for m in args.modes for outcomes in zip(*rounds[m]))
    same_items_arrays = all(  # old-serial runs on all the cores, new-serial on one: compared only at one thread
        (a.best_score, a.fingerprint) == (b.best_score, b.fingerprint)
        for old, new in (("old-serial", "new-serial"), ("old-jobs", "new-jobs")) if old in rounds and new in rounds
        for a, b in zip(rounds[old][0], rounds[new][0]) if a.spec.threads == b.spec.threads)
    print(" ".join(f"{k}={v}" for k, v in {**fields, **speedup}.items())
          + f" items_arrays_identical={same_items_arrays} reproducible={reproducible} runs={n} epochs={args.epochs} jobs={args.jobs} "
          f"repeat={args.repeat} load1={load[0]:.2f}")
