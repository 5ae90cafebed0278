"""`python -m xmr_core.bench ceiling [CHAPTER ...]`: each model's share of the Bayes ceiling, against the targets.

Reads `results/<chapter>/ceiling.csv`, written by the chapter's train notebook, in one of two layouts:

- single query (model, seed, rsum, ceiling_rsum, percent_of_ceiling, converged): a model's share is its
  5K-analogue rSum as % of the ceiling's;
- multi-round (HMRN: model, seed, round, converged, R@K and ceiling R@K for K = 1, 5, 10): a model's share is
  its R@1 + R@5 + R@10 summed over the rounds as % of the ceiling's same sum (the Avg. R@Sum of the HMRN paper,
  as a share: every round weighs by what the ceiling allows in it).

Prints, per chapter and model, the mean and std over seeds of that share, whether every seed converged, and
the strong-start targets: the best baseline at least 80% (aim 90%), every compared model at least 70%. With
`--against REV`, also each chapter's best model in the results committed at git revision REV (e.g. the commit
before a retrain) beside today's, whether today's best is at or above it, and the change judged by the book's
verdict protocol (`claims.judge`, per-seed shares paired by seed): above, below, negligible or inconclusive.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pandas as pd

from xmr_core.bench._committed import committed_text
from xmr_core.claims import ClaimSpec, Evidence, Judgement, judge

BASELINES = ("VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4")  # the PCME chapter's, shared by MSRM, DVSE, leaderboard
CHAPTER_BASELINES = {"hrem": ("VSE++", "GPO"),  # chapters with baselines of their own
                     "hmrn": ("VSE0*", "R-RankFusion", "R-RE", "R-HRE", "Drill-down")}
COLUMNS = ("model", "seed", "rsum", "ceiling_rsum", "percent_of_ceiling", "converged")
ROUND_KS = (1, 5, 10)
ROUND_COLUMNS = ("model", "seed", "round", "converged", *(f"{p}R@{k}" for k in ROUND_KS for p in ("", "ceiling ")))
_VERDICT_WORDS = {"held": "above beyond noise", "did not hold": "below beyond noise",
                  "negligible": "negligible (inside ± the smallest effect of interest)", "inconclusive": "inconclusive"}


def per_seed(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """One row per (model, seed): model, seed, rsum, ceiling_rsum, percent_of_ceiling, converged, from either
    layout (a multi-round table summed over its rounds)."""
    if all(c in df.columns for c in COLUMNS):
        return df[list(COLUMNS)]
    if all(c in df.columns for c in ROUND_COLUMNS):
        rows = df.assign(rsum=df[[f"R@{k}" for k in ROUND_KS]].sum(axis=1),
                         ceiling_rsum=df[[f"ceiling R@{k}" for k in ROUND_KS]].sum(axis=1))
        seeds = rows.groupby(["model", "seed"], sort=False).agg(
            rsum=("rsum", "sum"), ceiling_rsum=("ceiling_rsum", "sum"), converged=("converged", "all")).reset_index()
        seeds["percent_of_ceiling"] = 100 * seeds["rsum"] / seeds["ceiling_rsum"]
        return seeds[list(COLUMNS)]
    raise SystemExit(f"{path}: neither a single-query ceiling table ({', '.join(COLUMNS)}) nor a multi-round one "
                     f"({', '.join(ROUND_COLUMNS)}); columns: {', '.join(map(str, df.columns))}")


def summarise(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Per model (in the table's order): the mean and std over seeds of its share of the ceiling (percent, std),
    seeds, mean rsum, the ceiling's rsum and whether every seed converged."""
    return per_seed(df, path).groupby("model", sort=False).agg(
        percent=("percent_of_ceiling", "mean"), std=("percent_of_ceiling", "std"), seeds=("seed", "count"),
        rsum=("rsum", "mean"), ceiling=("ceiling_rsum", "first"), converged=("converged", "all"))


def report(chapter: str, results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Print one chapter's per-model shares and its targets; return its per-seed rows (`per_seed`) and their
    summary (`summarise`)."""
    path = results / chapter / "ceiling.csv"
    if not path.is_file():
        raise SystemExit(f"{path}: not found; run `xmr book run {chapter}` first")
    seeds = per_seed(pd.read_csv(path), path)
    summary = summarise(seeds, path)
    print(f"{chapter}:")
    print(summary.round(2).to_string())
    baselines = summary[summary.index.isin(CHAPTER_BASELINES.get(chapter, BASELINES))]
    best_baseline = float(baselines["percent"].max()) if len(baselines) else float("nan")
    worst, best = float(summary["percent"].min()), float(summary["percent"].max())
    print(f"best baseline {best_baseline:.1f}% (target >= 80, aim 90): {'met' if best_baseline >= 80 else 'NOT met'}; "
          f"lowest model {worst:.1f}% (target >= 70): {'met' if worst >= 70 else 'NOT met'}; best model "
          f"{summary['percent'].idxmax()} {best:.1f}%")
    print(f"best_baseline_percent={best_baseline:.2f} lowest_percent={worst:.2f} "
          f"best_percent={best:.2f} all_converged={bool(summary['converged'].all())}")
    return seeds, summary


def change_judgement(then: pd.DataFrame, now: pd.DataFrame) -> Judgement:
    """The one verdict protocol (`claims.judge`) on "today's best model scores above the best at the revision":
    `then` and `now` are the per-seed rows (`per_seed`) of the two best models; the effect is now − then in
    percent of the ceiling, paired by seed when both have the same seeds. "did not hold" = below beyond noise."""
    spec = ClaimSpec("best-vs-revision", "the best model scores above the best at the revision", "bench ceiling",
                     "superiority", "% of the Bayes ceiling", ("now", "then"))
    evidence = {side: Evidence(tuple(int(s) for s in rows["seed"]), rows["percent_of_ceiling"].to_numpy(),
                               converged=bool(rows["converged"].all()))
                for side, rows in (("now", now), ("then", then))}
    return judge(spec, evidence)


def against(chapter: str, results: Path, rev: str, seeds_now: pd.DataFrame, today: pd.DataFrame) -> None:
    """Print the chapter's best model at git revision `rev` (its committed `ceiling.csv`) beside today's best
    (`seeds_now`, `today`: `report`'s per-seed rows and summary), whether today's is at or above it, and the change
    judged by the verdict protocol (`change_judgement`)."""
    path_then = results / chapter / f"ceiling.csv@{rev}"
    seeds_then = per_seed(pd.read_csv(io.StringIO(committed_text(results, rev, f"{chapter}/ceiling.csv"))), path_then)
    then = summarise(seeds_then, path_then)
    before, after = then["percent"].idxmax(), today["percent"].idxmax()
    b, a = then.loc[before], today.loc[after]
    gap = float(a["percent"] - b["percent"])
    where = "at or above it" if gap >= 0 else f"below it by {-gap:.1f} pp"
    j = change_judgement(seeds_then[seeds_then["model"] == before], seeds_now[seeds_now["model"] == after])
    judged = f"{j.verdict} ({j.reason})" if j.verdict == "not tested" else \
        f"{_VERDICT_WORDS[j.verdict]}: now − then {j.effect:+.1f} pp, {j.confidence:.0%} interval " \
        f"[{j.low:+.1f}, {j.high:+.1f}] over {j.noise} (paired: {j.paired})"
    print(f"against {rev}: best model then {before} {b['percent']:.1f}% (seed std {b['std']:.1f}, {b['seeds']} "
          f"seeds), now {after} {a['percent']:.1f}% (seed std {a['std']:.1f}, {a['seeds']} seeds): {where}; {judged}")
    print(f"best_percent_then={b['percent']:.2f} best_percent_now={a['percent']:.2f} at_or_above={gap >= 0} "
          f"below_beyond_noise={j.verdict == 'did not hold'}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench ceiling")
    parser.add_argument("chapters", nargs="*", default=["pcme"], help="results folders (default pcme); all: every "
                        "chapter with a ceiling.csv")
    parser.add_argument("--results", default="results")
    parser.add_argument("--against", metavar="REV", help="also compare each chapter's best model with the one in "
                        "the results committed at git revision REV")
    args = parser.parse_args(argv)
    results = Path(args.results)
    chapters = sorted(p.parent.name for p in results.glob("*/ceiling.csv")) if args.chapters == ["all"] \
        else args.chapters
    if not chapters:
        raise SystemExit(f"{results}: no chapter has a ceiling.csv")
    for chapter in chapters:
        seeds, summary = report(chapter, results)
        if args.against:
            against(chapter, results, args.against, seeds, summary)
