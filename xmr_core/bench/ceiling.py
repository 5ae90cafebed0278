"""`python -m xmr_core.bench ceiling [CHAPTER]`: each model's share of the Bayes ceiling, against the targets.

Reads `results/<chapter>/ceiling.csv` (written by the chapter's train notebook: model, seed, rsum,
ceiling_rsum, percent_of_ceiling, converged) and prints, per model, the mean and std over seeds of its
5K-analogue rSum as % of the ceiling, whether every seed converged, and the strong-start targets: the best
baseline at least 80% (aim 90%), every compared model at least 70%.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

BASELINES = ("VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4")  # the PCME chapter's, shared by MSRM, DVSE, leaderboard
CHAPTER_BASELINES = {"hrem": ("VSE++", "GPO")}  # a chapter with baselines of its own
COLUMNS = ("model", "seed", "rsum", "ceiling_rsum", "percent_of_ceiling", "converged")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench ceiling")
    parser.add_argument("chapter", nargs="?", default="pcme")
    parser.add_argument("--results", default="results")
    args = parser.parse_args(argv)
    path = Path(args.results) / args.chapter / "ceiling.csv"
    if not path.is_file():
        raise SystemExit(f"{path}: not found; run `xmr book run {args.chapter}` first")
    df = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise SystemExit(f"{path}: no column(s) {', '.join(missing)}; this script reads single-query ceiling tables "
                         f"({', '.join(COLUMNS)}), not per-round ones such as HMRN's")
    summary = df.groupby("model", sort=False).agg(
        percent=("percent_of_ceiling", "mean"), std=("percent_of_ceiling", "std"), seeds=("seed", "count"),
        rsum=("rsum", "mean"), ceiling=("ceiling_rsum", "first"), converged=("converged", "all"))
    print(summary.round(2).to_string())
    baselines = summary[summary.index.isin(CHAPTER_BASELINES.get(args.chapter, BASELINES))]
    best_baseline = float(baselines["percent"].max()) if len(baselines) else float("nan")
    worst = float(summary["percent"].min())
    print(f"best baseline {best_baseline:.1f}% (target >= 80, aim 90): {'met' if best_baseline >= 80 else 'NOT met'}; "
          f"lowest model {worst:.1f}% (target >= 70): {'met' if worst >= 70 else 'NOT met'}")
    print(f"best_baseline_percent={best_baseline:.2f} lowest_percent={worst:.2f} "
          f"all_converged={bool(summary['converged'].all())}")
