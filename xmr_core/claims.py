"""Claims as data and the one verdict protocol of the book (the reasons are in `docs/claims.md`).

A paper's claim is declared once as a `ClaimSpec` (its text, section, kind, metric, the compared models or
variants, the claimed direction, a margin where the kind has one with its source (`xmr_core.margins`), and the
paper's words: its sentence verbatim and how the test reads it (`xmr_core.paper_words`)) and judged by `judge` against the
`Evidence` of each compared model on this run: its per-seed scores, optionally the per-query values they are
the mean of, the seeds and test split they came from, whether every run converged and whether it collapsed.

    detect_collapse(scores (Q, G), relevance (Q, G) | None) -> "" or why the run learnt nothing
    instance_collapse(scores_i2t (N, M), split)             -> the same under the split's instance relevance
    chance_best_rank(n_positives (Q,), gallery)             -> (mean, variance) of the best rank at random
    judge(spec, {model: Evidence}, dataset=, profile=)      -> Judgement (verdict, effect, interval, pairing, p)
    holm(judgements)                                        -> each one's verdict after Holm's adjustment
    seed_evidence(per_run, cols, split=)                    -> {model: Evidence} from a chapter's per-run table
    query_evidence(per_run, array cols, split=)             -> the same from per-query values, one stratum a column
    run_evidence(per_run, {(model, seed): values}, strata=)   -> the same from per-query values kept beside it
    simulated(spec, Noise, n_seeds, effect, rng)            -> {model: Evidence} drawn at the book's noise
    can_fail(spec)                                          -> "" or why the claim cannot both hold and fail
    seed_only(specs, why)                                   -> the specs with why they are judged on seed scores only
    judgements_frame(judgements)                            -> one row per judgement (claims.csv / claims.md)
    claim_cell(spec)                                        -> the claim with the paper's words and the test's reading
    claim_rows(judgements)                                  -> the (claim, source, evidence, verdict) rows of old pages
    render_claims(judgements, chapter, ...)                 -> the chapter's claims.md text
    verdict(held), universal_verdict(verdicts)              -> the verdict of a yes/no check, of "for every model"

Kinds (the effect is oriented so that > 0 favours the claim; `direction` "greater" or "less"):

    superiority      models (a, b): a is greater (less) than b         effect = ±(a - b)
    non-inferiority  models (a, b): a at least as good as b, margin m   effect = ±(a - b), compared with -m
    equivalence      models (a, b): no real difference, margin m        effect = a - b, compared with [-m, m]
    trend            models x1..xn (ordered): rises (falls) at every step   parts: each step ±(x[i+1] - x[i])
    peak             models x1..xn, `peak` among them: the best of all   parts: ±(peak - x) for each other x
    universal        `pairs` ((a1, b1), ...): `each` kind holds for every pair   parts: the pairs

The interval of the effect is a t interval at `CONFIDENCE` on its bootstrap standard error: the variance of the
effect from resampling the seeds alone and the queries alone (crossed: the same resampled queries for every seed,
since every seed scores the same test queries), in closed form (the ideal bootstrap: deterministic, no resampling),
each corrected by n/(n-1), with Welch-Satterthwaite degrees of freedom; over seed scores only it is the paired
(Welch) t interval of the seeds. Sides share the resampled seeds when they have the same seeds and split (paired by seed),
and the resampled queries when they score the same queries (paired by query). Verdicts (`VERDICTS`): held / did not hold when the interval excludes zero (or the margin) on one
side; negligible when it lies inside ± the claim's smallest effect of interest (`ClaimSpec.smallest_effect`: the
declared `sesoi`, else the metric family's, `family_sesoi`); otherwise inconclusive. Peak, trend and universal
claims are intersections of pairwise parts: held when every part held at 95%, did not hold when one part is
refuted at 95% Bonferroni-corrected over the parts, so that each side errs at most 2.5% under a tie (`python -m
xmr_core.bench claims --calibration` measures it). A claim the chapter judges on seed scores only declares why
(`ClaimSpec.seed_only`: its metric is not a mean over queries, or its per-query values are not kept, `RUN_MEANS`). Not tested, with the reason (a "not tested" judgement without
one is refused), when a compared run did not converge, collapsed, is missing, the claim needs a data set or
profile this run does not have, or it `needs` a model or data the book does not build (declared with the claim,
naming them). A superiority claim whose claimed-lower side diverged in training on every seed, the other side
converging, held on that (`Evidence.diverged`). `holm` adjusts a set of judgements' decided verdicts for their
number.

The science imports nothing of the runs or the book: a chapter writes its judgements through
`xmr_core.book.results.write_judgements`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import torch
from scipy import special

from xmr_core.margins import Margin
from xmr_core.metrics import Relevance, ranking_stats

if TYPE_CHECKING:
    from xmr_core.data.corpus import Split

# The verdicts a claim can reach, and the two rules that combine yes/no checks into one:
#   held          the interval excludes the claim's bound on its side
#   did not hold  the interval excludes it on the other side
#   negligible    undecided, the interval inside ± the claim's smallest effect of interest: too small to matter
#   inconclusive  undecided and wider than that: the run cannot say
#   not tested    with the reason (the run lacks a model, a model did not converge or collapsed, ...)
Verdict = Literal["held", "did not hold", "negligible", "inconclusive", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("held", "did not hold", "negligible", "inconclusive", "not tested")
DECIDED: tuple[Verdict, ...] = ("held", "did not hold", "negligible")  # what a multiple-comparison adjustment can undo


def verdict(held: bool | None) -> Verdict:
    """The verdict of a yes/no check; None = not tested on this run."""
    return "not tested" if held is None else ("held" if held else "did not hold")


def universal_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict of "X holds for every part" from the verdict per part (an intersection-union rule): one
    counterexample refutes it ("did not hold"); else a part not tested leaves it "not tested"; else "held" when
    every part held, "negligible" when every part is negligible, and "inconclusive" otherwise (no parts: not
    tested)."""
    found = set(verdicts)
    if not found:
        return "not tested"
    for first in ("did not hold", "not tested"):
        if first in found:
            return first  # type: ignore[return-value]
    if len(found) == 1 and found & {"held", "negligible"}:
        return found.pop()
    return "inconclusive"


Kind = Literal["superiority", "non-inferiority", "equivalence", "trend", "peak", "universal"]
KINDS: tuple[Kind, ...] = ("superiority", "non-inferiority", "equivalence", "trend", "peak", "universal")
PAIRWISE: tuple[Kind, ...] = ("superiority", "non-inferiority", "equivalence")
Pairing = Literal["seed+query", "seed", "query", "none"]

CONFIDENCE = 0.95
CHANCE_Z = 3.0  # a run whose mean best rank is not this many standard errors better than chance collapsed


# ------------------------------------------------------------------------------------------- collapse


def chance_best_rank(n_positives: np.ndarray, gallery: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance) of a query's best rank (1-based) under a uniformly random ranking of a gallery of
    `gallery` items of which `n_positives` (Q,) are positive: the minimum of P positions drawn without
    replacement from 1..G has mean (G+1)/(P+1) and variance P(G+1)(G-P) / ((P+1)^2 (P+2))."""
    p = np.asarray(n_positives, dtype=np.float64)
    g = float(gallery)
    return (g + 1) / (p + 1), p * (g + 1) * (g - p) / ((p + 1) ** 2 * (p + 2))


def detect_collapse(scores: np.ndarray | torch.Tensor, relevance: Relevance | None = None) -> str:
    """Why the run that produced `scores (Q, G)` learnt nothing, or "" when it learnt something.

    Collapsed: every query's scores are tied across the gallery (to 1e-6 of the largest |score|); or every
    query ranks the gallery by the same scores (the scores do not depend on the query); or, with a bool
    `relevance (Q, G)`, the mean best rank (pessimistic ties, `metrics.ranking_stats`) is not `CHANCE_Z`
    standard errors better than under a random ranking (`chance_best_rank`).
    """
    s = torch.as_tensor(scores).double()
    if s.ndim != 2 or s.numel() == 0:
        raise ValueError(f"detect_collapse: scores must be a non-empty (Q, G) matrix, got shape {tuple(s.shape)}")
    tol = 1e-6 * max(float(s.abs().max()), 1e-12)
    if bool((s.amax(1) - s.amin(1) <= tol).all()):
        return "every query's scores are tied across the gallery"
    if s.shape[0] > 1 and bool(((s - s[:1]).abs() <= tol).all()):
        return "every query gets the same scores: they do not depend on the query"
    if relevance is None:
        return ""
    st = ranking_stats(s, {"r": relevance})["r"]
    rank = st.best_rank.double().numpy()
    mean, var = chance_best_rank(st.n_positives.numpy(), s.shape[1])
    se = math.sqrt(float(var.sum())) / len(rank)
    z = float(mean.mean() - rank.mean()) / se if se > 0 else 0.0  # > 0: better (lower) ranks than chance
    if z < CHANCE_Z:
        return (f"chance-level ranking: mean best rank {rank.mean():.1f} against {mean.mean():.1f} under a random "
                f"ranking (z = {z:.1f} < {CHANCE_Z:g})")
    return ""


def instance_collapse(scores_i2t: np.ndarray | torch.Tensor, split: Split) -> str:
    """`detect_collapse` of a run's image-to-text scores (N, M) on `split` under instance relevance."""
    return detect_collapse(scores_i2t, split.relevance("instance", "i2t"))


# ------------------------------------------------------------------------------------------- evidence


@dataclass(frozen=True)
class Evidence:
    """One compared model or variant on one metric: `values` (S,) its score per seed, or (S, Q) the per-query
    values whose mean over the Q queries is each seed's score (e.g. per-query R@1 hits × 100). With `strata` (Q,)
    (e.g. 0 for the image queries, 1 for the caption queries of a metric averaged over both directions) a seed's
    score is the mean of its strata's means, and queries are resampled within their stratum. `split` names the
    test queries (split, direction, protocol): two sides score the same queries only when it is equal."""

    seeds: tuple[int, ...]
    values: np.ndarray
    split: str = "test"
    converged: bool = True  # every run converged (`FitResult.converged`)
    collapse: str = ""  # why the runs learnt nothing (`detect_collapse`); "" when they learnt something
    strata: np.ndarray | None = None  # (Q,) the stratum of each query; None: one stratum
    diverged: tuple[int, ...] = ()  # the seeds whose training diverged (a NaN/inf loss ended it)

    def __post_init__(self) -> None:
        v = np.asarray(self.values, dtype=np.float64)
        if self.diverged and (self.converged or not set(self.diverged) <= set(self.seeds)):
            raise ValueError(f"Evidence: diverged seeds {self.diverged} must be among the seeds {self.seeds} of "
                             "evidence that did not converge")
        if v.ndim not in (1, 2) or v.shape[0] != len(self.seeds) or v.size == 0:
            raise ValueError(f"Evidence: values must be (S,) or (S, Q) with S = {len(self.seeds)} seeds, "
                             f"got shape {v.shape}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"Evidence: repeated seeds {self.seeds}")
        if self.converged and not np.isfinite(v).all():  # a diverged run has no scores: never judged (not converged)
            raise ValueError(f"Evidence: non-finite value in seed row {int(np.argwhere(~np.isfinite(v))[0][0])}")
        object.__setattr__(self, "values", v)
        if self.strata is not None:
            strata = np.asarray(self.strata, dtype=np.int64)
            if v.ndim != 2 or strata.shape != (v.shape[1],):
                raise ValueError(f"Evidence: strata must be (Q,) with Q = {v.shape[-1]} per-query values, "
                                 f"got shape {strata.shape}")
            object.__setattr__(self, "strata", strata)

    @property
    def weights(self) -> np.ndarray:
        """(Q,) each query's weight in its seed's score: 1/Q, or 1/(H n_h) for a query of stratum h of H."""
        if self.strata is None:
            return np.full(self.n_queries, 1.0 / self.n_queries)
        _, inverse, sizes = np.unique(self.strata, return_inverse=True, return_counts=True)
        return 1.0 / (len(sizes) * sizes[inverse])

    @property
    def all_diverged(self) -> bool:
        """Training diverged on every seed (at least one)."""
        return bool(self.diverged) and set(self.diverged) == set(self.seeds)

    @property
    def per_seed(self) -> np.ndarray:
        """(S,) the score of each seed."""
        return self.values if self.values.ndim == 1 else self.values @ self.weights

    @property
    def n_queries(self) -> int:
        return 0 if self.values.ndim == 1 else self.values.shape[1]


def _model_evidence(per_run: pd.DataFrame, cols: Sequence[str], split: str,
                    values: Callable[[pd.DataFrame], tuple[np.ndarray, np.ndarray | None]]) -> dict[str, Evidence]:
    """{model: Evidence} of a per-run table (one row per model and seed: `model`, `seed`, `converged`, optionally
    `collapse`, and `cols`), each model's (values, strata) read from its rows by `values`; a model is converged
    when every run is, collapsed when any run is."""
    missing = [c for c in ("model", "seed", "converged", *cols) if c not in per_run.columns]
    if missing:
        raise KeyError(f"the per-run table has no column(s) {missing}")
    out = {}
    for model, rows in per_run.groupby("model", sort=False):
        collapse = [str(c) for c in rows["collapse"] if isinstance(c, str) and c] if "collapse" in rows else []
        try:
            v, strata = values(rows)
            out[str(model)] = Evidence(tuple(int(s) for s in rows["seed"]), v, split=split, strata=strata,
                                       converged=bool(rows["converged"].all()), collapse="; ".join(collapse))
        except ValueError as err:
            raise ValueError(f"model {model!r}, columns {list(cols)}: {err}") from None
    return out


def seed_evidence(per_run: pd.DataFrame, cols: Sequence[str], *, split: str = "test") -> dict[str, Evidence]:
    """{model: Evidence} from a chapter's per-run table (one row per model and seed: `model`, `seed`, `converged`,
    optionally `collapse`, and metric columns): each seed's score is the mean of `cols` (e.g. the i2t and t2i
    values of one metric); a model is converged when every run is, collapsed when any run is."""
    return _model_evidence(per_run, cols, split,
                           lambda rows: (rows[list(cols)].mean(axis=1, skipna=False).to_numpy(), None))


def query_evidence(per_run: pd.DataFrame, cols: Sequence[str], *, split: str = "test") -> dict[str, Evidence]:
    """`seed_evidence` from per-query values: each of `cols` holds, per run, a (Q_c,) array of one stratum's
    per-query values (e.g. the i2t and the t2i R-P of each query), so a seed's score is the mean of the columns'
    means and the queries are resampled within their column (`Evidence.strata`)."""

    def values(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        parts = [[np.asarray(a, dtype=np.float64) for a in rows[c]] for c in cols]  # per column, per run
        sizes = [{len(a) for a in part} for part in parts]
        if any(len(n) != 1 for n in sizes):
            raise ValueError(f"the runs score different numbers of queries ({dict(zip(cols, sizes))})")
        stacked = np.stack([np.concatenate([part[i] for part in parts]) for i in range(len(rows))])
        return stacked, np.concatenate([np.full(next(iter(n)), h) for h, n in enumerate(sizes)])

    return _model_evidence(per_run, cols, split, values)


def run_evidence(per_run: pd.DataFrame, values: Mapping[tuple[str, int], np.ndarray], *,
                 strata: np.ndarray | None = None, split: str = "test") -> dict[str, Evidence]:
    """`seed_evidence` from per-query values kept beside the per-run table: `values` {(model, seed): (Q,) values}
    for every run of `per_run` (one row per model and seed: model, seed, converged, optionally collapse), in the
    strata `strata` (Q,) (None: one stratum). A run without values is an error naming it."""

    def stacked(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray | None]:
        model = rows["model"].iloc[0]
        missing = [int(s) for s in rows["seed"] if (model, int(s)) not in values]
        if missing:
            raise KeyError(f"no per-query values of {model!r}, seed(s) {missing}")
        return np.stack([np.asarray(values[model, int(s)], dtype=np.float64) for s in rows["seed"]]), strata

    return _model_evidence(per_run, [], split, stacked)


# ------------------------------------------------------------------------------------------- claims


# The smallest effect of interest of a metric family (docs/claims.md, "Smallest effect of interest"): a rule set from
# the papers' scale before the data, never from the run judged. Half a percentage point on a metric in pp (or %):
# the smallest difference the five papers call an effect is about 1 pp (PCME's R-P gain over mu only, 1.2-1.6 pp, is
# "some margin"; MSRM calls a 0.9 pp fall a degradation), and half of it is what they read as a tie. A sum of recalls
# takes it once per recall it sums: rSum (six R@K) 3, HMRN's R@Sum (R@1 + R@5 + R@10) 1.5. A metric in other units
# (sigma, a probability, seconds, parameters) has none: there a claim's undecided verdict is "inconclusive".
SESOI_PP = 0.5
SESOI_RULE = ("rule (docs/claims.md): 0.5 pp per percentage-point metric, once per recall a sum adds up "
              "(rSum 3, R@Sum 1.5), set from the papers' scale before the data")


def family_sesoi(metric: str) -> tuple[float, str]:
    """(smallest effect of interest, its source) of a metric by its family (`SESOI_RULE`): rSum 3, R@Sum 1.5, a
    metric in pp or % 0.5; 0.0 (none) for any other unit."""
    if "rSum" in metric:
        return 6 * SESOI_PP, SESOI_RULE
    if "R@Sum" in metric:
        return 3 * SESOI_PP, SESOI_RULE
    if re.search(r"\bpp\b|%", metric):
        return SESOI_PP, SESOI_RULE
    return 0.0, "none: the metric is not in percentage points, and neither the paper nor the rule gives one"


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of a paper, declared once (see the module docstring for the kinds)."""

    key: str  # unique within its chapter
    text: str  # what the paper says, in one sentence
    source: str  # where it says it (section / table / figure)
    kind: Kind
    metric: str  # what is compared, with its unit (e.g. "mean of i2t/t2i R-P, pp")
    models: tuple[str, ...] = ()  # pairwise: (a, b); trend: the ordered sweep; peak: the sweep
    direction: Literal["greater", "less"] = "greater"
    margin: float = 0.0  # non-inferiority / equivalence, in the metric's unit, declared with the claim
    peak: str = ""  # peak: the model claimed best
    pairs: tuple[tuple[str, str], ...] = ()  # universal: the (a, b) pairs
    each: Kind = "superiority"  # universal: the kind of each pair's claim
    datasets: tuple[str, ...] = ()  # the data sets the claim can be tested on (empty: any)
    profiles: tuple[str, ...] = ()  # the profiles the claim can be tested on (empty: any)
    needs: str = ""  # the model or data the claim needs that this book does not build or have: never tested
    sesoi: float = 0.0  # smallest effect of interest, in the metric's unit; 0: the metric family's (`family_sesoi`)
    sesoi_source: str = ""  # where a declared `sesoi` comes from (the paper's words, or a stated rule)
    # The paper's words (docs/claims.md, "The paper's words"): its sentence verbatim as its text has it (`source`
    # says where), the paper it is from ("" : the chapter's own), and one line on how the test reads the words.
    quote: str = ""
    paper: str = ""
    reading: str = ""
    stronger_than_paper: str = ""  # a test harder than the words, kept as the book's own claim: why ("": none)
    margin_from: Margin | None = None  # where the margin comes from; sets `margin` (docs/claims.md, Margins)
    # Why a judgement of the claim rests on seed scores only, without per-query values, where it does (docs/claims.md,
    # "Seed scores only"): its metric is not a mean over queries, or its per-query values were not kept where it was
    # judged (`RUN_MEANS`); "" where it is judged on per-query values. Set by `seed_only`.
    seed_only: str = ""

    def __post_init__(self) -> None:
        def bad(why: str) -> ValueError:
            return ValueError(f"claim {self.key!r}: {why}")

        if self.sesoi < 0 or (self.sesoi > 0) != bool(self.sesoi_source.strip()):
            raise bad(f"a declared smallest effect of interest must be > 0 and name its source, got {self.sesoi} "
                      f"from {self.sesoi_source!r}")
        if self.margin_from is not None:
            if self.margin not in (0.0, self.margin_from.value):
                raise bad(f"margin {self.margin} differs from its source's {self.margin_from.value}")
            object.__setattr__(self, "margin", self.margin_from.value)

        if self.kind not in KINDS:
            raise bad(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.direction not in ("greater", "less"):
            raise bad(f"direction must be 'greater' or 'less', got {self.direction!r}")
        has_margin = self.kind in ("non-inferiority", "equivalence") or (
            self.kind == "universal" and self.each in ("non-inferiority", "equivalence"))
        if has_margin and not self.margin > 0:
            raise bad(f"a {self.kind} claim needs a margin > 0 declared with it, got {self.margin}")
        if not has_margin and self.margin != 0:
            raise bad(f"a {self.kind} claim has no margin, got {self.margin}")
        if self.kind == "universal":
            if not self.pairs or self.each not in PAIRWISE or any(a == b for a, b in self.pairs):
                raise bad(f"universal needs pairs of two different models and `each` in {PAIRWISE}")
            return
        if len(set(self.models)) != len(self.models):
            raise bad(f"repeated model in {self.models}")
        if self.kind in PAIRWISE and len(self.models) != 2:
            raise bad(f"{self.kind} compares exactly two models, got {self.models}")
        if self.kind in ("trend", "peak") and len(self.models) < 3:
            raise bad(f"{self.kind} needs at least three models (two is a superiority claim), got {self.models}")
        if (self.kind == "peak") != bool(self.peak) or (self.peak and self.peak not in self.models):
            raise bad(f"`peak` must name one of the models of a peak claim (and only of one), got {self.peak!r}")

    @property
    def smallest_effect(self) -> tuple[float, str]:
        """(smallest effect of interest, its source): the declared `sesoi`, else the metric family's."""
        return (self.sesoi, self.sesoi_source) if self.sesoi > 0 else family_sesoi(self.metric)

    @property
    def compared(self) -> tuple[str, ...]:
        """Every model the claim reads, in order."""
        return tuple(dict.fromkeys(m for p in self.pairs for m in p)) if self.kind == "universal" else self.models


# The reason of a claim judged on seed scores only whose metric is a mean over queries (`ClaimSpec.seed_only`).
RUN_MEANS = ("a mean over queries, judged where the chapter had each run's score only: its per-query values need the "
             "runs' test scores, which the run records carry (issue 76; the retrain records them)")


def seed_only(specs: Sequence[ClaimSpec], why: Callable[[ClaimSpec], str]) -> list[ClaimSpec]:
    """`specs`, each with `why(spec)` as the reason it is judged on seed scores only (`ClaimSpec.seed_only`) where
    that is not "" (a chapter's rule: the claims its code judges on seed scores only, and why)."""
    return [dataclasses.replace(s, seed_only=why(s)) if why(s) else s for s in specs]


@dataclass(frozen=True)
class Judgement:
    """What one run's evidence says of one claim. `effect` is oriented (> 0 favours the claim) and described
    by `effect_of`; [low, high] is its interval at `confidence`; `noise` says what the interval covers."""

    spec: ClaimSpec
    verdict: Verdict
    effect: float = math.nan
    low: float = math.nan
    high: float = math.nan
    effect_of: str = ""
    n_seeds: int = 0  # the fewest seeds of a compared model
    n_queries: int = 0  # the fewest queries of a compared model (0: seed scores only)
    paired: Pairing = "none"
    noise: str = ""  # "seeds+queries", "seeds", "queries (one seed: test sampling only)"
    confidence: float = CONFIDENCE
    reason: str = ""  # why not tested, or what decided the verdict
    unconverged: tuple[str, ...] = ()
    collapsed: tuple[str, ...] = ()
    p: float = math.nan  # the p-value of a decided verdict (`_decide`; decided at p < 0.05), for `holm`
    seed_share: float = math.nan  # the share of the interval's variance from the seeds (1: seeds only)
    parts: tuple[Judgement, ...] = field(default=(), repr=False)  # peak, trend, universal: one judgement per part

    def __post_init__(self) -> None:
        if self.verdict == "not tested" and not self.reason.strip():
            raise ValueError(f"claim {self.spec.key!r}: a 'not tested' judgement must say why (the model or data it "
                             "would need, or what the run lacks)")

    @property
    def width(self) -> float:
        return self.high - self.low

    @property
    def seed_only(self) -> bool:
        """Judged on an interval over seed scores only: no per-query values."""
        return self.noise == "seeds"


# ------------------------------------------------------------------------------------------- bootstrap


def _pairing(sides: Sequence[Evidence]) -> tuple[bool, bool]:
    """(paired by seed, paired by query) of the compared sides."""
    first = sides[0]
    same_split = all(e.split == first.split for e in sides)
    by_seed = same_split and len(first.seeds) > 1 and all(e.seeds == first.seeds for e in sides)
    by_query = same_split and first.n_queries > 1 and all(
        e.n_queries == first.n_queries and _same_strata(e.strata, first.strata) for e in sides)
    return by_seed, by_query


def _same_strata(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _query_variance(e: Evidence, u: np.ndarray) -> float:
    """The variance of sum_q w_q u_q (`e`'s query weights, `Evidence.weights`) when `e`'s queries are drawn with
    replacement within each stratum: sum_h var_pop(u in h) / (H^2 n_h) over its H strata of n_h queries."""
    strata = np.zeros(e.n_queries, dtype=np.int64) if e.strata is None else e.strata
    _, inverse, sizes = np.unique(strata, return_inverse=True, return_counts=True)
    return float(sum(np.var(u[inverse == h]) / (len(sizes) ** 2 * n) for h, n in enumerate(sizes)))


def _standard_error(v_seed: float, n_seeds: int, v_query: float, n_queries: int) -> tuple[float, float]:
    """(standard error, degrees of freedom) of an effect from its bootstrap variances: v_seed and v_query from
    resampling the seeds alone and the queries alone (0 for a level not resampled). A bootstrap over n units
    estimates the variance of a mean (n-1)/n too small, so each level's is corrected by n/(n-1); the degrees of
    freedom come from Welch-Satterthwaite over the two levels (n-1 each). (0, inf) when neither level varies."""
    parts = [(v * n / (n - 1), n - 1) for v, n in ((v_seed, n_seeds), (v_query, n_queries)) if n > 1 and v > 0]
    if not parts:
        return 0.0, math.inf
    total = sum(v for v, _ in parts)
    return math.sqrt(total), total ** 2 / sum(v ** 2 / d for v, d in parts)


@dataclass(frozen=True)
class _Boot:
    """The bootstrap of one effect: the variances from resampling the seeds alone and the queries alone, with their
    counts (`_standard_error`), so that the interval at any level is the t interval effect ± t(df) * se at that
    level; `seed_share` the share of the variance from the seeds (1 over seeds only, 0 over one seed's queries)."""

    effect: float
    paired: Pairing
    noise: str
    v_seed: float
    n_seeds: int
    v_query: float = 0.0
    n_queries: int = 0

    @property
    def seed_share(self) -> float:
        total = self.v_seed + self.v_query
        return self.v_seed / total if total > 0 else math.nan

    def bounds(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """The two-sided t interval at `confidence`: effect ± t(1 - (1 - confidence)/2, df) * se. Over seed scores
        only, the paired (Welch) t interval on the seeds; its tails keep their size at any level, where a percentile
        interval over 3 seeds cannot reach past the most extreme seed (`docs/claims.md`, The interval)."""
        se, df = _standard_error(self.v_seed, self.n_seeds, self.v_query, self.n_queries)
        half = float(special.stdtrit(df, 1 - (1 - confidence) / 2)) * se if se > 0 else 0.0
        return self.effect - half, self.effect + half

    def p_value(self, excludes: Callable[[float, float], bool]) -> float:
        """The smallest two-sided alpha (to 0.01% relative) at whose interval `excludes(low, high)` holds, so that
        the 95% interval decides exactly when p < 0.05 (intervals nest as alpha falls: bisection); 1.0 when even
        the interval at alpha = 1 does not exclude, 1e-6 when the one at 1e-6 still does."""
        if not excludes(*self.bounds(1e-9)):
            return 1.0
        lo, hi = 1e-6, 1.0  # excluded at alpha = hi
        if excludes(*self.bounds(1 - lo)):
            return lo
        while hi / lo > 1.0001:
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if excludes(*self.bounds(1 - mid)) else (mid, hi)
        return hi


def _interval(sides: Sequence[Evidence], coef: np.ndarray) -> _Boot | str:
    """The bootstrap (`_Boot`) of the effect sum_k coef_k * (side k's mean), or why no interval can be had: the
    variance of the effect under the crossed bootstrap (the seeds drawn with replacement, and the queries, one draw
    for every seed of a side, within each stratum; shared between sides paired by seed / by query), from resampling
    the seeds alone (the queries fixed) and the queries alone (the seeds fixed), each in closed form (the ideal
    bootstrap, no resampling): var_pop over the seeds of the (paired) per-seed effect / S, and `_query_variance` of
    the (paired) per-query effect averaged over the seeds. Over seeds only where a side has no per-query values,
    over one seed's queries where every side has one seed."""
    by_seed, by_query = _pairing(sides)
    with_queries = all(e.n_queries > 1 for e in sides)
    one_seed = [i for i, e in enumerate(sides) if len(e.seeds) < 2]
    if one_seed and not with_queries:
        return "one seed and no per-query values: no interval can be had"
    weighted = list(zip(coef, sides))
    effect = float(sum(c * e.per_seed.mean() for c, e in weighted))
    if by_seed:
        v_seed = float(np.var(sum(c * e.per_seed for c, e in weighted))) / len(sides[0].seeds)
    else:
        v_seed = sum(c ** 2 * float(np.var(e.per_seed)) / len(e.seeds) for c, e in weighted)
    if not with_queries:
        v_query = 0.0
    elif by_query:
        v_query = _query_variance(sides[0], sum(c * e.values.mean(0) for c, e in weighted))
    else:
        v_query = sum(c ** 2 * _query_variance(e, e.values.mean(0)) for c, e in weighted)
    paired: Pairing = "seed+query" if by_seed and by_query else "seed" if by_seed else "query" if by_query else "none"
    if not with_queries:
        noise = "seeds"
    elif len(one_seed) == len(sides):
        noise = "queries (one seed: test sampling only)"
    else:
        noise = "seeds+queries" + (" (one seed for some: their training noise not covered)" if one_seed else "")
    n_seeds, n_queries = min(len(e.seeds) for e in sides), min(e.n_queries for e in sides)
    return _Boot(effect, paired, noise, v_seed, n_seeds, v_query, n_queries)


# ------------------------------------------------------------------------------------------- the judge


ALPHA = 1 - CONFIDENCE  # two-sided: each side of a 95% interval errs 2.5% of the time


def _pairwise_effect(spec: ClaimSpec) -> tuple[np.ndarray, str]:
    """The oriented effect of a pairwise claim as the coefficients (2,) of its two side means, and its description."""
    a, b = spec.models
    if spec.kind == "equivalence":
        return np.array([1.0, -1.0]), f"{a} − {b}"
    sign = 1.0 if spec.direction == "greater" else -1.0
    return sign * np.array([1.0, -1.0]), (f"{a} − {b}" if sign > 0 else f"{b} − {a}")


def _decide(spec: ClaimSpec, boot: _Boot, comparisons: int = 1) -> tuple[Verdict, str, float]:
    """(verdict, reason, p) of a pairwise claim's bootstrapped effect. "held" needs the 95% interval to clear the
    claim's bound on its side; "did not hold" needs the interval at 1 - 0.05 / `comparisons` to clear it on the other
    side (Bonferroni: a claim refuted by any one of `comparisons` parts errs at most 2.5% in all); undecided,
    "negligible" (a superiority claim with a smallest effect of interest s) needs the 95% interval inside (-s, s);
    otherwise "inconclusive". A decided effect whose interval lies inside (-s, s) says so in its reason. `p` is the p-value of the verdict reached (`_Boot.p_value`, times `comparisons` for a
    refutation): it is below 0.05 exactly when the verdict is decided; NaN when inconclusive."""
    low, high = boot.bounds()
    refuting = 1 - ALPHA / comparisons
    low_r, high_r = boot.bounds(refuting)
    level = f"{100 * refuting:.4g}% interval (Bonferroni over {comparisons} parts)" if comparisons > 1 else "interval"
    m = spec.margin
    if spec.kind == "equivalence":
        if -m < low and high < m:
            return "held", f"interval inside ±{m:g}", boot.p_value(lambda lo, hi: -m < lo and hi < m)
        if low_r > m or high_r < -m:
            return "did not hold", f"{level} outside ±{m:g}", \
                min(1.0, comparisons * boot.p_value(lambda lo, hi: lo > m or hi < -m))
        return "inconclusive", f"interval overlaps the margin ±{m:g}", math.nan
    bound = -m if spec.kind == "non-inferiority" else 0.0
    s, _ = spec.smallest_effect
    small = spec.kind == "superiority" and s > 0
    tiny = f", but all of it within ±{s:g}: too small to matter" if small and -s < low and high < s else ""
    if low > bound:
        return "held", f"interval above {bound:g}{tiny}", boot.p_value(lambda lo, hi: lo > bound)
    if high_r < bound:
        return "did not hold", f"{level} below {bound:g}{tiny}", \
            min(1.0, comparisons * boot.p_value(lambda lo, hi: hi < bound))
    if tiny:
        return "negligible", f"interval spans {bound:g} inside ±{s:g}, the smallest effect of interest", \
            boot.p_value(lambda lo, hi: -s < lo and hi < s)
    lo, hi = signed(low, high)
    wide = f"; wider than ±{s:g}, the smallest effect of interest" if small else ""
    return "inconclusive", f"interval spans {bound:g}: effects outside [{lo}, {hi}] ruled out{wide}", math.nan


def signed(*values: float) -> list[str]:
    """`values` as signed fixed-point numbers on one scale: two decimals, more where the largest magnitude needs them
    to show two significant digits (an effect of 0.00035 reads +0.00035, never +0.00)."""
    top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    decimals = 2 if top == 0.0 else max(2, 1 - math.floor(math.log10(top)))
    return [f"{v:+.{decimals}f}" for v in values]


def _unsound_reason(unconverged: Sequence[str], collapsed: Sequence[str], evidence: Mapping[str, Evidence]) -> str:
    """Why a claim is not tested on runs that did not converge or collapsed, each reason said once: "A, B did not
    converge; A, C collapsed (why)"."""
    why = [f"{', '.join(unconverged)} did not converge"] if unconverged else []
    by_reason: dict[str, list[str]] = {}
    for m in collapsed:
        by_reason.setdefault(evidence[m].collapse, []).append(m)
    return "; ".join(why + [f"{', '.join(ms)} collapsed ({r})" for r, ms in by_reason.items()])


def _parts_reason(parts: Sequence[Judgement], evidence: Mapping[str, Evidence]) -> str:
    """Each part's verdict, then why the parts not tested were not, each unsound run and each other reason once."""
    verdicts = "; ".join(f"{' vs '.join(j.spec.models)}: {j.verdict}" for j in parts)
    unconverged = sorted({m for j in parts for m in j.unconverged})
    collapsed = sorted({m for j in parts for m in j.collapsed})
    reasons = [_unsound_reason(unconverged, collapsed, evidence)] if unconverged or collapsed else []
    reasons += dict.fromkeys(j.reason for j in parts if j.verdict == "not tested" and not (j.unconverged or j.collapsed))
    return verdicts + (f" (not tested: {'; '.join(reasons)})" if reasons else "")


def _parts(spec: ClaimSpec) -> tuple[tuple[ClaimSpec, ...], str]:
    """The pairwise claims a peak, trend or universal claim is the intersection of, and what its effect is: a peak
    is its point above (below) each other point; a trend each step up (down) along the sweep; a universal claim
    its pairs."""
    if spec.kind == "peak":
        pairs, kind = tuple((spec.peak, m) for m in spec.models if m != spec.peak), "superiority"
    elif spec.kind == "trend":
        pairs, kind = tuple((b, a) for a, b in zip(spec.models, spec.models[1:])), "superiority"
    else:
        pairs, kind = spec.pairs, spec.each
    margin = spec.margin if kind in ("non-inferiority", "equivalence") else 0.0
    sesoi, source = spec.smallest_effect
    parts = tuple(ClaimSpec(f"{spec.key}[{a} vs {b}]", spec.text, spec.source, kind, spec.metric, (a, b),
                            direction=spec.direction, margin=margin, sesoi=sesoi,
                            sesoi_source=source if sesoi > 0 else "") for a, b in pairs)
    return parts, {"peak": "weakest of the peak's comparisons", "trend": "weakest step",
                   "universal": "weakest pair"}[spec.kind]


PART_ORDER: tuple[Verdict, ...] = ("did not hold", "not tested", "inconclusive", "negligible", "held")  # worst first


def _composite(spec: ClaimSpec, evidence: Mapping[str, Evidence]) -> Judgement:
    """A peak, trend or universal claim, judged as the intersection of its pairwise parts (`_parts`): held when
    every part held at 95% (each errs at most 2.5%, so the whole does too), did not hold when some part is refuted
    at 1 - 0.05 / (number of parts) (Bonferroni), negligible when every part is; reported by its weakest part."""
    specs, what = _parts(spec)
    parts = tuple(_pairwise(s, evidence, comparisons=len(specs)) for s in specs)
    worst = min(parts, key=lambda j: (PART_ORDER.index(j.verdict), j.effect if math.isfinite(j.effect) else math.inf))
    outcome = universal_verdict([j.verdict for j in parts])
    ps = [j.p for j in parts if j.verdict == outcome]
    p = (min(ps) if outcome == "did not hold" else max(ps)) if outcome in DECIDED and ps else math.nan
    return Judgement(
        spec, outcome, worst.effect, worst.low, worst.high,
        f"{what}: {worst.effect_of or ' vs '.join(worst.spec.models)}",
        min(j.n_seeds for j in parts), min(j.n_queries for j in parts),
        worst.paired, worst.noise, reason=_parts_reason(parts, evidence),
        unconverged=tuple(sorted({m for j in parts for m in j.unconverged})),
        collapsed=tuple(sorted({m for j in parts for m in j.collapsed})), p=p, seed_share=worst.seed_share,
        parts=parts)


def _diverged(spec: ClaimSpec, sides: Sequence[Evidence]) -> Judgement | None:
    """A superiority claim one of whose sides diverged in training on every seed while the other converged on every
    seed and learnt something: judged on that (the claimed-lower side diverging is what "the component is needed"
    predicts: held; the claimed-higher side diverging: did not hold). None when that is not the case."""
    if spec.kind != "superiority":
        return None
    gone = [i for i, e in enumerate(sides) if e.all_diverged]
    if len(gone) != 1 or not sides[1 - gone[0]].converged or sides[1 - gone[0]].collapse:
        return None
    lower = 1 if spec.direction == "greater" else 0  # the side the claim says is worse
    i, n = gone[0], len(sides[gone[0]].seeds)
    outcome: Verdict = "held" if i == lower else "did not hold"
    reason = (f"training diverges for {spec.models[i]} on {n} of {n} seeds, while {spec.models[1 - i]} converged on "
              f"every seed: the run cannot be trained without what the claim says is needed" if outcome == "held" else
              f"training diverges for {spec.models[i]}, the side claimed better, on {n} of {n} seeds")
    return Judgement(spec, outcome, n_seeds=min(len(e.seeds) for e in sides), reason=reason,
                     unconverged=(spec.models[i],), noise="divergence (no interval)")


def _pairwise(spec: ClaimSpec, evidence: Mapping[str, Evidence], comparisons: int = 1) -> Judgement:
    """A superiority, non-inferiority or equivalence claim on `evidence` (every model present), one of
    `comparisons` parts of a claim (`_decide`)."""
    sides = [evidence[m] for m in spec.models]
    diverged = _diverged(spec, sides)
    if diverged is not None:
        return diverged
    unconverged = tuple(m for m, e in zip(spec.models, sides) if not e.converged)
    collapsed = tuple(m for m, e in zip(spec.models, sides) if e.collapse)
    counts = {"n_seeds": min(len(e.seeds) for e in sides), "n_queries": min(e.n_queries for e in sides)}
    if unconverged or collapsed:
        return Judgement(spec, "not tested", reason=_unsound_reason(unconverged, collapsed, evidence),
                         unconverged=unconverged, collapsed=collapsed, **counts)
    coef, effect_of = _pairwise_effect(spec)
    boot = _interval(sides, coef)
    if isinstance(boot, str):
        return Judgement(spec, "not tested", effect_of=effect_of, reason=boot, **counts)
    outcome, reason, p = _decide(spec, boot, comparisons)
    low, high = boot.bounds()
    return Judgement(spec, outcome, boot.effect, low, high, effect_of, paired=boot.paired, noise=boot.noise,
                     reason=reason, p=p, seed_share=boot.seed_share, **counts)


def judge(spec: ClaimSpec, evidence: Mapping[str, Evidence], *, dataset: str | None = None,
          profile: str | None = None) -> Judgement:
    """Judge `spec` on this run's `evidence` ({model: Evidence} holding every model in `spec.compared`)."""
    if spec.needs:
        return Judgement(spec, "not tested", reason=f"needs {spec.needs}")
    if spec.datasets and dataset not in spec.datasets:
        return Judgement(spec, "not tested", reason=f"needs data set {' or '.join(spec.datasets)}; this run has {dataset}")
    if spec.profiles and profile not in spec.profiles:
        return Judgement(spec, "not tested", reason=f"needs profile {' or '.join(spec.profiles)}; this run has {profile}")
    missing = [m for m in spec.compared if m not in evidence]
    if missing:
        return Judgement(spec, "not tested", reason=f"this run has no {', '.join(missing)}")
    return _composite(spec, evidence) if spec.kind in ("peak", "trend", "universal") else _pairwise(spec, evidence)


# ------------------------------------------------------------------------------------------- can it fail?
# A compared model m at seed s scores query q as `level[m] + a[m, s] + e[m, s, q]`: `a` the training noise of a seed
# (sd `Noise.seed_sd`), `e` a query's own noise (sd `Noise.query_sd`, independent across models, seeds and queries;
# absent for seed scores only). Every seed of every model scores the same queries, so the sides pair by seed and by
# query, as the book's runs do. `xmr_core.calibration` measures the verdicts' error rates on the same simulation.


@dataclass(frozen=True)
class Noise:
    """The noise of one score: `seed_sd` of a seed's score around the model's level (training noise), and
    `query_sd` of one query's value around its seed's score over `n_queries` test queries (0: seed scores only).
    `simulated` uses `SIM_QUERIES` queries of spread `query_sd * sqrt(SIM_QUERIES / n_queries)`: the same noise of
    a seed's mean, at a fraction of the cost. `source`: where the figures come from."""

    seed_sd: float
    query_sd: float = 0.0
    n_queries: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if not self.seed_sd > 0 or self.query_sd < 0 or (self.query_sd > 0) != (self.n_queries > 0):
            raise ValueError(f"Noise: seed_sd must be > 0 and query_sd > 0 exactly when n_queries > 0, got {self}")

    @property
    def mean_sd(self) -> float:
        """The standard deviation of one seed's mean score: sqrt(seed_sd² + query_sd² / n_queries)."""
        return math.sqrt(self.seed_sd ** 2 + (self.query_sd ** 2 / self.n_queries if self.n_queries else 0.0))


SIM_QUERIES = 100  # queries simulated per seed; the query spread is scaled to keep the chapter's noise of a mean


def _levels(spec: ClaimSpec, effect: float) -> dict[str, float]:
    """Each compared model's level, oriented so that > 0 favours the claim: tied at `effect` 0; else the claimed
    side ahead by `effect` in every part (a peak above each other point, a trend by `effect` at each step, each
    pair of a universal claim by `effect` along its chain, an equivalence's pair `effect` apart)."""
    sign = 1.0 if spec.direction == "greater" else -1.0
    if spec.kind == "peak":
        return {m: sign * effect * (m == spec.peak) for m in spec.models}
    if spec.kind == "trend":
        return {m: sign * effect * i for i, m in enumerate(spec.models)}
    if spec.kind == "universal":
        level = dict.fromkeys(spec.compared, 0)
        if spec.each != "equivalence":
            for _ in range(len(level)):  # longest chain of pairs below each model (pairs forming a circle stop here)
                for a, b in spec.pairs:
                    level[a] = max(level[a], level[b] + 1)
        return {m: sign * effect * n for m, n in level.items()}
    a, b = spec.models
    return {a: effect * (1.0 if spec.kind == "equivalence" else sign), b: 0.0}


def simulated(spec: ClaimSpec, noise: Noise, n_seeds: int, effect: float, rng: np.random.Generator
              ) -> dict[str, Evidence]:
    """{model: Evidence} of `spec`'s compared models under `noise` at `n_seeds` shared seeds (`_levels`)."""
    seeds = tuple(range(n_seeds))
    out = {}
    for m, level in _levels(spec, effect).items():
        seed = level + noise.seed_sd * rng.standard_normal(n_seeds)
        if noise.n_queries:
            sd = noise.query_sd * math.sqrt(SIM_QUERIES / noise.n_queries)
            out[m] = Evidence(seeds, seed[:, None] + sd * rng.standard_normal((n_seeds, SIM_QUERIES)))
        else:
            out[m] = Evidence(seeds, seed)
    return out


CAN_FAIL_NOISE = Noise(1.0, 45.0, 1000, "the book's scale: a seed's score moves about 1 pp (0.3-2.5 pp in the "
                       "chapters' per_seed.csv), a query's hit about 45 pp, over 1000 queries (500-6000)")
CLEAR = 10.0  # a clear win or loss: this many times the noise of a seed's mean, beyond the margin
EQUIVALENT = 8.0  # an equivalence can hold on 3 seeds when a seed mean's sd is at most margin / this


def can_fail(spec: ClaimSpec, noise: Noise = CAN_FAIL_NOISE) -> str:
    """"" when `judge` says "held" of `spec` on simulated evidence at the book's noise (`simulated`, 3 seeds, seed and
    query noise) where its claimed side clearly wins, and "did not hold" where it clearly loses (`CLEAR` times the
    noise of a seed's mean beyond the margin and the smallest effect of interest; judged as if the book had what the
    claim `needs`, on a run it can be tested on); otherwise why not (a claim that cannot fail, or cannot hold, is a
    defect). An equivalence wins on a tie, which 3 seeds show only on noise small against its margin: its noise is
    scaled down to a seed mean's sd of margin / `EQUIVALENT` where the book's is larger (whether the book's own
    runs can show it is `bench claims --seeds`' question)."""
    where = {"dataset": spec.datasets[0] if spec.datasets else None,
             "profile": spec.profiles[0] if spec.profiles else None}
    built = dataclasses.replace(spec, needs="")  # as if the book had what it needs
    equivalence = spec.kind == "equivalence" or (spec.kind == "universal" and spec.each == "equivalence")
    if equivalence and noise.mean_sd > spec.margin / EQUIVALENT:  # can it hold at all: on noise small enough for it
        shrink = spec.margin / EQUIVALENT / noise.mean_sd
        noise = Noise(noise.seed_sd * shrink, noise.query_sd * shrink, noise.n_queries,
                      f"{noise.source}; scaled by {shrink:.3g} to a seed mean's sd of margin / {EQUIVALENT:g}")
    clear = spec.margin + max(spec.smallest_effect[0], CLEAR * noise.mean_sd)
    got = {}
    for wins in (True, False):
        rng = np.random.default_rng(1)
        if equivalence:  # tied wins; the first pair apart loses
            evidence = simulated(spec, noise, 3, 0.0, rng)
            if not wins:
                first = spec.models[0] if spec.kind == "equivalence" else spec.pairs[0][0]
                evidence[first] = dataclasses.replace(evidence[first], values=evidence[first].values + clear)
        else:
            evidence = simulated(spec, noise, 3, clear if wins else -clear, rng)
        got[wins] = judge(built, evidence, **where).verdict
    if got == {True: "held", False: "did not hold"}:
        return ""
    return f"claim {spec.key!r}: clear win judged {got[True]!r}, clear loss judged {got[False]!r}"


# ------------------------------------------------------------------------------------------- rendering


def holm(p_values: Sequence[float], verdicts: Sequence[Verdict], alpha: float = ALPHA) -> list[Verdict]:
    """Each verdict after Holm's step-down adjustment for the whole set (Holm 1979): the family is every verdict
    reached on an interval (`p_values` finite for the decided ones, NaN for the inconclusive; "not tested" and a
    verdict on divergence, whose p is NaN too, are not in it unless inconclusive), m its size. The decided verdict
    with the i-th smallest p keeps its verdict when max over j <= i of (m - j + 1) p_(j) is below `alpha`, and
    becomes "inconclusive" otherwise; every other verdict is unchanged. The family-wise error of the decided
    verdicts that keep theirs is then at most `alpha` (two-sided: the book's 95%)."""
    in_family = [i for i, (p, v) in enumerate(zip(p_values, verdicts)) if math.isfinite(p) or v == "inconclusive"]
    m = len(in_family)
    order = sorted((i for i in in_family if math.isfinite(p_values[i])), key=lambda i: p_values[i])
    out, running = list(verdicts), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        if running >= alpha:
            out[i] = "inconclusive"
    return out


COLUMNS = ("key", "claim", "source", "kind", "metric", "effect of", "effect", "low", "high", "confidence",
           "n seeds", "n queries", "paired", "noise", "margin", "sesoi", "sesoi source", "verdict", "reason", "p",
           "verdict after Holm", "seed share", "unconverged", "collapsed", "quote", "paper", "reading",
           "stronger than paper", "margin source", "seed-only reason")


def judgements_frame(judgements: Sequence[Judgement]) -> pd.DataFrame:
    """One row per judgement, columns `COLUMNS` (margin NaN for kinds without one; sesoi NaN for a metric without a
    smallest effect of interest; "verdict after Holm" over these judgements, `holm`; "seed-only reason" the claim's
    `seed_only` where the judgement is on seed scores only, else "")."""
    adjusted = holm([j.p for j in judgements], [j.verdict for j in judgements])
    rows = []
    for j, after in zip(judgements, adjusted):
        s = j.spec
        sesoi, source = s.smallest_effect
        rows.append(dict(zip(COLUMNS, (
            s.key, s.text, s.source, s.kind if s.kind != "universal" else f"universal ({s.each})", s.metric,
            j.effect_of, j.effect, j.low, j.high, j.confidence, j.n_seeds, j.n_queries, j.paired, j.noise,
            s.margin if s.margin > 0 else math.nan, sesoi if sesoi > 0 else math.nan, source, j.verdict, j.reason,
            j.p, after, j.seed_share, ", ".join(j.unconverged), ", ".join(j.collapsed), s.quote, s.paper, s.reading,
            s.stronger_than_paper, s.margin_from.describe() if s.margin_from else "",
            s.seed_only if j.seed_only else ""))))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def claim_cell(spec: ClaimSpec) -> str:
    """A claims page's claim cell: the book's sentence, then the paper's words and how the test reads them."""
    words = f" The paper{f' ({spec.paper.upper()})' if spec.paper else ''}: “{spec.quote}”" if spec.quote else ""
    reading = f" The test: {spec.reading}" if spec.reading else ""
    stronger = f" Stronger than the paper: {spec.stronger_than_paper}." if spec.stronger_than_paper else ""
    return spec.text + words + reading + stronger


def _effect_cell(j: Judgement) -> str:
    if not math.isfinite(j.effect):
        return "-"
    pct = round(100 * j.confidence)
    effect, low, high = signed(j.effect, j.low, j.high)
    return f"{j.effect_of}: {effect} [{low}, {high}] ({pct}% interval over {j.noise})"


def _holm_note(before: Verdict, after: Verdict) -> str:
    return f" (after Holm over this table's claims: {after})" if after != before else ""


def _seed_only_note(j: Judgement) -> str:
    return f"; seed scores only: {j.spec.seed_only or 'no reason declared'}" if j.seed_only else ""


def claim_rows(judgements: Sequence[Judgement]) -> pd.DataFrame:
    """The judgements in the layout `book.results.notebook_claims` collects (claim, source, evidence, verdict), for a
    chapter whose claims page is still assembled from per-notebook claim tables; a verdict Holm's adjustment over
    these judgements changes (`holm`) says so in its evidence."""
    adjusted = holm([j.p for j in judgements], [j.verdict for j in judgements])
    rows = []
    for j, after in zip(judgements, adjusted):
        margin = f"; margin {j.spec.margin:g}" if j.spec.margin > 0 else ""
        evidence = (f"{j.spec.metric}: {_effect_cell(j)}; {j.n_seeds} seeds / {j.n_queries} queries, paired: "
                    f"{j.paired}{margin}{_seed_only_note(j)}; {j.reason}{_holm_note(j.verdict, after)}")
        rows.append({"claim": claim_cell(j.spec), "source": j.spec.source, "evidence": evidence, "verdict": j.verdict})
    return pd.DataFrame(rows, columns=["claim", "source", "evidence", "verdict"])


def render_claims(judgements: Sequence[Judgement], chapter: str, *, profile: str, dataset: str,
                  preamble: str = "") -> str:
    """The chapter's claims page: per claim its kind, the effect with its interval, n seeds / n queries,
    the pairing, the margin, the smallest effect of interest and the verdict with its reason (and what Holm's
    adjustment over the page's claims makes of it, where that differs); then the count of each verdict, before and
    after the adjustment."""
    adjusted = holm([j.p for j in judgements], [j.verdict for j in judgements])
    lines = [f"# Claims of the paper tested by the `{chapter}` chapter", ""]
    if preamble:
        lines += [preamble, ""]
    lines += [("Judged by `xmr_core.claims.judge` (`docs/claims.md`): the effect is oriented so that > 0 favours "
              "the claim. Each interval is a 95% interval: on its own it errs 5% of the time; across the page's "
              "claims, the verdicts that keep theirs after Holm's adjustment err at most 5% all together."), "",
              ("| # | claim | source | kind | metric | effect [interval] | seeds / queries | paired | margin | "
               "smallest effect of interest | verdict |"),
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, (j, after) in enumerate(zip(judgements, adjusted), 1):
        s = j.spec
        kind = s.kind if s.kind != "universal" else f"universal ({s.each})"
        sesoi, source = s.smallest_effect
        why = f"**{j.verdict}**" + (f": {j.reason}" if j.reason else "") + _holm_note(j.verdict, after)
        cells = [str(i), claim_cell(s), s.source, kind, s.metric, _effect_cell(j) + _seed_only_note(j),
                 f"{j.n_seeds} / {j.n_queries}",
                 j.paired, f"{s.margin:g}" if s.margin > 0 else "-", f"{sesoi:g} ({source})" if sesoi > 0 else "-",
                 why]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    counts = ", ".join(f"{sum(j.verdict == v for j in judgements)} {v}" for v in VERDICTS)
    after_counts = ", ".join(f"{adjusted.count(v)} {v}" for v in VERDICTS)
    lines += ["", (f"Of {len(judgements)} claims on this run (profile `{profile}`, dataset `{dataset}`): {counts}. "
                   f"After Holm's adjustment over them: {after_counts}.")]
    return "\n".join(lines) + "\n"

