"""`python -m xmr_core.bench paperplan`: what the paper profile's book costs at the papers' data sizes, chapter by
data set, from the cost of a training step measured on small copies of the data in their real layouts.

For each data set of `--datasets` (default cub coco; vg too when named) the chapters whose papers used it
(`book.plan.PAPER_BOOKS`) are planned under the paper profile, as
`xmr book plan CHAPTERS --profile paper --measure-steps K --train-images N -p DATASET D -p DATA_ROOT R` would
(`book.plan.plan_book`): every run their notebooks ask for is listed (the paper's seeds, tuning rounds, ablations and
schedules), and each shape of run to train has K training steps timed on a copy of its model with the paper
profile's sizes and batch (`runs.train.step_seconds`), so a run costs its seconds a step x its schedule's epochs x
its steps an epoch on N training images, N being the paper's (`PAPER_TRAIN_IMAGES`). R is `--data D=PATH`, else the
test suite's small real-layout copy of D (`tests/fixtures/real_layout.py`, written into a temporary folder: a
checkout is needed). The trunk has no ImageNet weights (`IMAGE_WEIGHTS none`): a step costs the same with them,
and the plan does not extract its features anyway (zeros of their shape stand in, `experiment.protocols`). The run
cache is a fresh temporary one, so every run is to train.

Prints one row per chapter and data set (runs, runs to train, hours: core-hours when the steps were timed on the
CPU, one thread a run; GPU-hours with `--device cuda`, AMP on) and the totals. What is not counted: the
validation after every epoch, HREM's clustering at the start of an epoch, the trunk's feature extraction (once per
data set), and the runs of a tuning round the search adds after its first (it extends until its choice is
bracketed: the plan lists the first round and the provisional runs after it). A schedule's epochs are the most a run
trains: patience may stop it after half of them. So the figures are a lower bound on the search, an upper one on
each run's schedule.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from xmr_core.book.plan import PAPER_BOOKS, Plan, plan_book
from xmr_core.config import project_root

# The papers' training images (what an epoch covers; runs scale their steps by this over their own split's):
PAPER_TRAIN_IMAGES: dict[str, int] = {
    "coco": 113_287,  # Karpathy's train + restval (docs/data.md); SCAN's precomp train holds the same images
    "cub": 7_091,  # the 8,855 images of Xian et al.'s 150 trainval classes less PCME's 1,764 seen test images
    "vg": 92_105,  # Drill-down's vg_train.txt (HMRN Sec. 4.1: 92,105 / 5,000 / 9,896)
}


def fixture_writer(dataset: str) -> Callable[[Path], Path]:
    """The test suite's writer of a small real-layout copy of `dataset` (`tests/fixtures/real_layout.py`)."""
    tests = project_root() / "tests"
    if not (tests / "fixtures" / "real_layout.py").is_file():
        raise SystemExit(f"bench paperplan: no {tests}/fixtures/real_layout.py (a checkout is needed); name the data "
                         f"with --data {dataset}=PATH")
    sys.path.insert(0, str(tests))
    from fixtures import real_layout  # the test suite's own package, on the path just above

    return getattr(real_layout, f"write_{dataset}")


def chapter_rows(plan: Plan, dataset: str) -> pd.DataFrame:
    """Per chapter of `plan`: runs (each distinct run under the chapter whose notebook first asks for it), runs to
    train, hours of the runs to train, and the notebooks that failed."""
    rows = []
    for chapter in PAPER_BOOKS[dataset]:
        runs = [r for r in plan.runs if r.chapter == chapter]
        failed = [nb for nb, _ in plan.failed if nb.startswith(f"{chapter}/")]
        rows.append({"dataset": dataset, "chapter": chapter, "runs": len(runs),
                     "to train": sum(not r.cached for r in runs),
                     "hours": sum(r.core_seconds for r in runs if not r.cached) / 3600,
                     "unmeasured": sum(r.source not in ("per step", "recorded") for r in runs),
                     "failed": ", ".join(failed)})
    return pd.DataFrame(rows)


def plan_rows(plan: Plan) -> pd.DataFrame:
    """One row a run of `plan`: its chapter, the plan's columns (`Plan.frame`) and what its cost was computed from
    (epochs, steps an epoch, training images, seconds a step)."""
    fields = ("epochs", "epoch_items", "batch_size", "epoch_steps", "train_images", "step_core_seconds", "stand_in")
    extra = pd.DataFrame([{"chapter": r.chapter, **{f: r.record.get(f) for f in fields}} for r in plan.runs],
                         columns=["chapter", *fields])
    return pd.concat([extra, plan.frame()], axis=1)


def markdown(table: pd.DataFrame, unit: str) -> str:
    """The table as Markdown, chapter rows then the total of each data set."""
    lines = [f"| data set | chapter | runs | to train | {unit} |", "|---|---|---:|---:|---:|"]
    for dataset, rows in table.groupby("dataset", sort=False):
        for _, row in rows.iterrows():
            note = f" (failed: {row['failed']})" if row["failed"] else ""
            lines.append(f"| {dataset} | {row['chapter']}{note} | {row['runs']:,} | {row['to train']:,} | "
                         f"{row['hours']:,.0f} |")
        lines.append(f"| {dataset} | **total** | {rows['runs'].sum():,} | {rows['to train'].sum():,} | "
                     f"{rows['hours'].sum():,.0f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench paperplan", description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["cub", "coco"], choices=sorted(PAPER_BOOKS))
    parser.add_argument("--data", nargs="*", default=[], metavar="DATASET=PATH",
                        help="a data set's copy in its real layout (default: the test suite's fixture)")
    parser.add_argument("--steps", type=int, default=3, help="training steps timed per shape of run (default 3)")
    parser.add_argument("--device", default="cpu", help="where the steps are timed (default cpu; cuda: GPU-hours)")
    parser.add_argument("--save", type=Path, help="write each data set's plan, one row a run, to SAVE/<dataset>.csv")
    args = parser.parse_args(argv)
    roots = dict(item.split("=", 1) for item in args.data)
    unit = "GPU-hours" if args.device.startswith("cuda") else "core-hours"

    old = os.environ.get("XMR_CACHE")
    tables, seconds = [], {}
    with tempfile.TemporaryDirectory(prefix="xmr-paperplan-") as tmp:
        os.environ["XMR_CACHE"] = str(Path(tmp) / "cache")
        try:
            for dataset in args.datasets:
                root = Path(roots[dataset]) if dataset in roots else fixture_writer(dataset)(Path(tmp) / dataset)
                t0 = time.perf_counter()
                plan = plan_book(PAPER_BOOKS[dataset], profile="paper", measure_steps=args.steps,
                                 train_images=PAPER_TRAIN_IMAGES[dataset], echo=lambda line: print(line, file=sys.stderr),
                                 params={"DATASET": dataset, "DATA_ROOT": str(root), "IMAGE_WEIGHTS": "none",
                                         "DEVICE": args.device, "PROGRESS": False})
                seconds[dataset] = time.perf_counter() - t0
                tables.append(chapter_rows(plan, dataset))
                print(markdown(tables[-1], unit), file=sys.stderr)  # each data set's rows as soon as they are known
                if args.save:
                    args.save.mkdir(parents=True, exist_ok=True)
                    plan_rows(plan).to_csv(args.save / f"{dataset}.csv", index=False)
        finally:
            if old is None:
                os.environ.pop("XMR_CACHE", None)
            else:
                os.environ["XMR_CACHE"] = old
    table = pd.concat(tables, ignore_index=True)
    print(f"paper profile at the papers' training images ({', '.join(f'{d} {PAPER_TRAIN_IMAGES[d]:,}' for d in args.datasets)}); "
          f"{args.steps} steps timed per shape of run on {args.device}, one thread a run on the CPU")
    print(markdown(table, unit))
    if table["unmeasured"].any():
        print(f"{int(table['unmeasured'].sum())} run(s) not timed (a loss that was not finite at once): costed at the "
              "profile's default")
    totals = table.groupby("dataset", sort=False)[["runs", "hours"]].sum()
    print(" ".join(f"{d}_runs={int(t.runs)} {d}_{unit.replace('-', '_')}={t.hours:.0f}" for d, t in totals.iterrows())
          + f" device={args.device} steps={args.steps} "
          + " ".join(f"{d}_plan_wall_s={s:.0f}" for d, s in seconds.items())
          + f" failed={int((table['failed'] != '').sum())}")
