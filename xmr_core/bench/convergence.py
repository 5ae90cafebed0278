"""`python -m xmr_core.bench convergence [CHAPTER ...]`: which runs behind the committed results stopped early?

The cpu recipe stops a run once validation rSum has not risen by more than `min_delta` for `patience` epochs, and
`FitResult.converged` counts such a plateau as converged. A run that the rule ends in the first half of its schedule
(`early`: epochs run at most half its epochs, its best epoch before its last) stopped while its cosine learning rate
was still above half its peak: on the plateau of a high learning rate, before the annealing in which these models
gain most. Its seed siblings show what that costs. Since `TrainConfig.patience_after` (0.5 in the recipes) no run
stops there; results computed before it can hold such runs, and this bench finds them.

Reads `results/<chapter>/training.csv` (the models a chapter reports and its claims compare: model, seed, epochs,
epochs run, best epoch) and its tuning tables (`run_tables`: the search's runs: method, lr, the weight's value, the same
columns), for every chapter that has them or those named. Prints each early run; for a model with early and
full-length seeds, the score of each in the chapter's `per_seed.csv` (its first rSum column, matched on the key
columns both tables have: protocol, model, seed) and the mean gap. Chapters share runs (the PCME, MSRM and DVSE
chapters report the same VSE0 runs), so the last line also counts the distinct early runs (by the `run` folder the
tables name). Ablation tables record whether a run converged, not its length, so they are not read. Exits 1 when any run stopped early; the last line is `key=value` pairs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

KEYS = ("protocol", "model", "seed")  # the columns that name a trained run in training.csv and per_seed.csv


def run_tables(folder: Path) -> list[Path]:
    """A chapter's tables of trained runs: `training.csv` and its tuning runs (`tuning.csv`, `tuning_<model>.csv`;
    not `tuning_summary.csv`, one row a method), those that exist."""
    tuning = [p for p in sorted(folder.glob("tuning*.csv")) if not p.name.startswith("tuning_summary")]
    return [p for p in (folder / "training.csv", *tuning) if p.is_file()]


def early(frame: pd.DataFrame) -> pd.Series:
    """Whether each run (a row with `epochs`, `epochs run`, `best epoch`) was stopped by the patience rule in the
    first half of its schedule: it ran at most half its epochs and its best epoch was not its last, and it was not
    a run that diverged (`stopped` "patience" where the table records why a run stopped, else `converged`)."""
    ran, best = frame["epochs run"].astype(float), frame["best epoch"].astype(float)
    found = (ran > 0) & (ran <= frame["epochs"].astype(float) / 2) & (best < ran)
    if "stopped" in frame.columns:
        return found & (frame["stopped"] == "patience")
    if "converged" in frame.columns:
        return found & frame["converged"].astype(str).str.lower().eq("true")
    return found


def score_column(per_seed: pd.DataFrame) -> str | None:
    """The first column of a chapter's per-seed table whose name holds 'rsum' (any case), None when none does."""
    return next((c for c in per_seed.columns if "rsum" in c.lower()), None)


def sibling_gaps(training: pd.DataFrame, per_seed: pd.DataFrame) -> list[tuple[str, float]]:
    """For each model (and protocol) with early and full-length seeds: a line with each group's per-seed scores,
    and the gap of the means (early minus full)."""
    column = score_column(per_seed)
    keys = [k for k in KEYS if k in training.columns and k in per_seed.columns]
    if column is None or "seed" not in keys:
        return []
    scores = per_seed.dropna(subset=[column]).drop_duplicates(subset=keys)[[*keys, column]]
    runs = training.assign(early=early(training)).merge(scores, on=keys, how="inner")
    lines = []
    for name, group in runs.groupby([k for k in keys if k != "seed"], sort=False):
        if not group["early"].any() or group["early"].all():
            continue
        stopped, full = group[group["early"]], group[~group["early"]]
        label = " / ".join(str(n) for n in (name if isinstance(name, tuple) else (name,)))
        gap = float(stopped[column].mean() - full[column].mean())
        line = f"  {label}: {column} early {_seeds(stopped, column)}; full length {_seeds(full, column)}; gap {gap:+.1f}"
        lines.append((line, gap))
    return lines


def _seeds(runs: pd.DataFrame, column: str) -> str:
    return ", ".join(f"seed {int(seed)} {value:.1f}" for seed, value in zip(runs["seed"], runs[column]))


def _describe(row: pd.Series, names: list[str]) -> str:
    what = ", ".join(f"{n} {row[n]}" for n in names if n in row.index and pd.notna(row[n]))
    return (f"  {what}: stopped after {int(row['epochs run'])} of {int(row['epochs'])} epochs "
            f"(best epoch {int(row['best epoch'])})")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench convergence")
    parser.add_argument("chapters", nargs="*", help="default: every chapter with a training.csv or tuning.csv")
    parser.add_argument("--results", default="results")
    args = parser.parse_args(argv)
    root = Path(args.results)
    folders = [root / c for c in args.chapters] or sorted(
        p for p in root.iterdir() if p.is_dir() and run_tables(p))
    if not folders:
        raise SystemExit(f"{root}: no <chapter>/training.csv or tuning.csv; run a chapter's train notebook first")
    totals = {"runs": 0, "early": 0, "tuning_runs": 0, "tuning_early": 0}
    distinct: dict[str, set[str]] = {"early": set(), "tuning_early": set()}  # run folders (chapters share runs)
    gaps: list[float] = []
    for folder in folders:
        tables = run_tables(folder)
        if not tables:
            raise SystemExit(f"{folder}: no training.csv or tuning*.csv; run `xmr book run {folder.name}` first")
        print(f"== {folder.name}")
        for table in tables:
            frame = pd.read_csv(table)
            missing = [c for c in ("epochs", "epochs run", "best epoch") if c not in frame.columns]
            if missing:
                raise SystemExit(f"{table}: lacks the column(s) {', '.join(missing)}")
            stopped = frame[early(frame)]
            tuning = table.name != "training.csv"
            totals["tuning_runs" if tuning else "runs"] += len(frame)
            totals["tuning_early" if tuning else "early"] += len(stopped)
            names_of = stopped["run"] if "run" in stopped.columns else [f"{table}:{i}" for i in stopped.index]
            distinct["tuning_early" if tuning else "early"].update(str(n) for n in names_of)
            print(f"{table.name}: {len(stopped)} of {len(frame)} runs stopped early")
            names = ["method", "lr", "weight", "value", "seed"] if tuning else [*KEYS[:2], "seed", "lr"]
            for _, row in stopped.iterrows():
                print(_describe(row, names))
            per_seed = folder / "per_seed.csv"
            if not tuning and len(stopped) and per_seed.is_file():
                for line, gap in sibling_gaps(frame, pd.read_csv(per_seed)):
                    print(line)
                    gaps.append(gap)
    worst = f"{min(gaps):+.1f}" if gaps else "none"
    print(f"chapters={len(folders)} runs={totals['runs']} early={totals['early']} "
          f"early_distinct={len(distinct['early'])} tuning_runs={totals['tuning_runs']} "
          f"tuning_early={totals['tuning_early']} tuning_early_distinct={len(distinct['tuning_early'])} "
          f"worst_sibling_gap={worst}")
    if totals["early"] or totals["tuning_early"]:
        raise SystemExit(1)
