"""Calibrating the verdict protocol: how often `xmr_core.claims.judge` decides a claim on simulated evidence
(`claims.simulated`: its models tied, or its claimed side ahead), and the noise to simulate, measured on a chapter's
committed results.

    rates(spec, noise, n_seeds, n_claims, effect=, seed=, judge_fn=) -> {verdict: share of the simulated claims}
    exceeds(rate, n_claims)                                           -> the rate is above LIMIT beyond sampling error
    chapter_noise(results, chapter)                                   -> Noise measured on its committed results

`rates` of a tied claim are its false-decision rates: "held" is a false decision on the claim's side, "did not
hold" one on the other side (each should be at most 2.5%, and the book asks at most 5%); "negligible" is right
under a tie. At an effect, "held" is the power.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from xmr_core.claims import VERDICTS, ClaimSpec, Evidence, Judgement, Noise, judge, simulated

LIMIT = 0.05  # the most a verdict may err to one side under the null (the bar; nominal 2.5%)


def exceeds(rate: float, n_claims: int, limit: float = LIMIT) -> bool:
    """Whether a false-decision `rate` measured on `n_claims` simulated claims shows a true rate above `limit` beyond
    the simulation's own sampling error (one-sided exact binomial test at 5%): with 300 claims it fails at 22 or
    more (7.3%): a true 4% about 1 time in 400, a true 10% 19 times in 20."""
    return stats.binomtest(round(rate * n_claims), n_claims, limit, alternative="greater").pvalue < 0.05


def rates(spec: ClaimSpec, noise: Noise, n_seeds: int, n_claims: int, *, effect: float = 0.0, seed: int = 0,
          judge_fn: Callable[[ClaimSpec, Mapping[str, Evidence]], Judgement] = judge) -> dict[str, float]:
    """{verdict: share} of `n_claims` simulated claims (`simulated`, generator `seed`) judged by `judge_fn`."""
    rng = np.random.default_rng(seed)
    got = [judge_fn(spec, simulated(spec, noise, n_seeds, effect, rng)).verdict for _ in range(n_claims)]
    return {v: got.count(v) / n_claims for v in VERDICTS}


def chapter_noise(results: Path, chapter: str) -> Noise:
    """The chapter's noise on its committed results: `seed_sd` the median over models and metric columns of the
    per-seed std in `results/<chapter>/per_seed.csv` (columns holding R@, R-P, PMRP or R@Sum values, in pp); the
    query count the median `n queries` of its judgements with per-query values; `query_sd` that of a per-query hit
    at the chapter's median such score p (100·sqrt(p(1-p)), a Bernoulli hit in pp)."""
    table = results / chapter / "per_seed.csv"
    if not table.is_file():
        raise FileNotFoundError(f"{table}: no per-seed table to measure {chapter}'s noise on")
    per_seed = pd.read_csv(table)
    cols = [c for c in per_seed.columns if pd.api.types.is_float_dtype(per_seed[c])
            and any(k in c for k in ("R@1", "R@5", "R@10", "R-P", "PMRP")) and "med" not in c and "mean" not in c]
    if not cols or "model" not in per_seed.columns:
        raise ValueError(f"{table}: no model column or no recall/R-P/PMRP column to measure the seeds' noise on")
    seed_sd = float(np.nanmedian(per_seed.groupby("model")[cols].std().to_numpy()))
    level = float(np.nanmedian(per_seed[cols].to_numpy())) / 100
    judged = [pd.read_csv(p) for p in sorted((results / chapter).glob("judgements_*.csv"))]
    queries = pd.concat(judged)["n queries"] if judged else pd.Series(dtype=float)
    n_queries = int(queries[queries > 0].median()) if (queries > 0).any() else 0
    query_sd = 100 * math.sqrt(level * (1 - level)) if n_queries else 0.0
    return Noise(seed_sd, query_sd, n_queries,
                 f"{chapter}: seed sd {seed_sd:.2f} pp (per_seed.csv, median over models and {len(cols)} columns), "
                 f"{n_queries} queries (median of its judgements), query sd {query_sd:.0f} pp (a hit at {level:.0%})")
