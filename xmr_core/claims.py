"""Claims as data and the one verdict protocol of the book (the reasons are in `docs/claims.md`).

A paper's claim is declared once as a `ClaimSpec` (its text, section, kind, metric, the compared models or
variants, the claimed direction, and a margin where the kind has one) and judged by `judge` against the
`Evidence` of each compared model on this run: its per-seed scores, optionally the per-query values they are
the mean of, the seeds and test split they came from, whether every run converged and whether it collapsed.

    detect_collapse(scores (Q, G), relevance (Q, G) | None) -> "" or why the run learnt nothing
    instance_collapse(scores_i2t (N, M), split)             -> the same under the split's instance relevance
    chance_best_rank(n_positives (Q,), gallery)             -> (mean, variance) of the best rank at random
    judge(spec, {model: Evidence}, dataset=, profile=)      -> Judgement (verdict, effect, interval, pairing)
    can_fail(spec)                                          -> "" or why the claim cannot both hold and fail
    seed_evidence(per_run, cols, split=)                    -> {model: Evidence} from a chapter's per-run table
    query_evidence(per_run, array cols, split=)             -> the same from per-query values, one stratum a column
    run_evidence(per_run, {(model, seed): values}, strata=)   -> the same from per-query values kept beside it
    judgements_frame(judgements)                            -> one row per judgement (claims.csv / claims.md)
    claim_rows(judgements)                                  -> the (claim, source, evidence, verdict) rows of old pages
    render_claims(judgements, chapter, ...)                 -> the chapter's claims.md text
    verdict(held), universal_verdict(verdicts)              -> the verdict of a yes/no check, of "for every model"

Kinds (the effect is oriented so that > 0 favours the claim; `direction` "greater" or "less"):

    superiority      models (a, b): a is greater (less) than b         effect = ±(a - b)
    non-inferiority  models (a, b): a at least as good as b, margin m   effect = ±(a - b), compared with -m
    equivalence      models (a, b): no real difference, margin m        effect = a - b, compared with [-m, m]
    trend            models x1..xn (ordered): rises (falls) at every step   effect = the smallest oriented step
    peak             models x1..xn, `peak` among them: the best of all   effect = ±peak - max(±others)
    universal        `pairs` ((a1, b1), ...): `each` kind holds for every pair; one refutation refutes it

The interval of the effect is a percentile bootstrap at `CONFIDENCE` with `N_RESAMPLES` resamples and a fixed
generator seed (deterministic): over seeds, over queries, or both (crossed: the same resampled queries for
every seed, since every seed scores the same test queries). Sides share the resampled seeds when they have the
same seeds and split (paired by seed), and the resampled queries when they score the same queries (paired by
query). Verdicts: held / did not hold when the interval excludes zero (or the margin) on one side, otherwise
within noise; not tested, with the reason (a "not tested" judgement without one is refused), when a compared
run did not converge, collapsed, is missing, the claim needs a data set or profile this run does not have, or
it `needs` a model or data the book does not build (declared with the claim, naming them).

The science imports nothing of the runs or the book: a chapter writes its judgements through
`xmr_core.book.results.write_judgements`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import torch
from scipy import stats

from xmr_core.metrics import Relevance, ranking_stats

if TYPE_CHECKING:
    from xmr_core.data.corpus import Split

# The four verdicts a claim can reach, and the two rules that combine yes/no checks into one.
Verdict = Literal["held", "did not hold", "within noise", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("held", "did not hold", "within noise", "not tested")
UNIVERSAL_ORDER: tuple[Verdict, ...] = ("did not hold", "not tested", "within noise", "held")  # first one present wins


def verdict(held: bool | None) -> Verdict:
    """The verdict of a yes/no check; None = not tested on this run."""
    return "not tested" if held is None else ("held" if held else "did not hold")


def universal_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict of "X holds for every model" from the verdict per model: one counterexample refutes it
    ("did not hold"); else a model not tested leaves it "not tested"; else any within noise makes it "within
    noise"; else "held"."""
    return min(verdicts, key=UNIVERSAL_ORDER.index, default=verdict(None))


Kind = Literal["superiority", "non-inferiority", "equivalence", "trend", "peak", "universal"]
KINDS: tuple[Kind, ...] = ("superiority", "non-inferiority", "equivalence", "trend", "peak", "universal")
PAIRWISE: tuple[Kind, ...] = ("superiority", "non-inferiority", "equivalence")
Pairing = Literal["seed+query", "seed", "query", "none"]

CONFIDENCE = 0.95
N_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
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

    def __post_init__(self) -> None:
        v = np.asarray(self.values, dtype=np.float64)
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

    def __post_init__(self) -> None:
        def bad(why: str) -> ValueError:
            return ValueError(f"claim {self.key!r}: {why}")

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
    def compared(self) -> tuple[str, ...]:
        """Every model the claim reads, in order."""
        return tuple(dict.fromkeys(m for p in self.pairs for m in p)) if self.kind == "universal" else self.models


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
    parts: tuple[Judgement, ...] = field(default=(), repr=False)  # universal: one judgement per pair

    def __post_init__(self) -> None:
        if self.verdict == "not tested" and not self.reason.strip():
            raise ValueError(f"claim {self.spec.key!r}: a 'not tested' judgement must say why (the model or data it "
                             "would need, or what the run lacks)")

    @property
    def width(self) -> float:
        return self.high - self.low


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


def _counts(rng: np.random.Generator, n_items: int, n_draws: int, resample: bool = True) -> np.ndarray:
    """(n_draws, n_items) how often each item is drawn in each of `n_draws` resamples of `n_items` with
    replacement (all ones when not `resample`)."""
    if not resample:
        return np.ones((n_draws, n_items))
    idx = rng.integers(0, n_items, size=(n_draws, n_items)) + n_items * np.arange(n_draws)[:, None]
    return np.bincount(idx.ravel(), minlength=n_draws * n_items).reshape(n_draws, n_items).astype(np.float64)


def _query_counts(rng: np.random.Generator, e: Evidence, n_draws: int, resample: bool) -> np.ndarray:
    """`_counts` of `e`'s queries, drawn within each stratum."""
    if e.strata is None:
        return _counts(rng, e.n_queries, n_draws, resample)
    out = np.empty((n_draws, e.n_queries))
    for h in np.unique(e.strata):
        cols = np.flatnonzero(e.strata == h)
        out[:, cols] = _counts(rng, len(cols), n_draws, resample)
    return out


def _crossed_means(sides: Sequence[Evidence], by_seed: bool, by_query: bool, n: int, rng: np.random.Generator,
                   seeds: bool = True, queries: bool = True, chunk: int = 250) -> np.ndarray:
    """(K, n) each side's mean under `n` two-level resamples: seeds and queries drawn with replacement, the
    same query draw for every seed of a side (the seeds score the same test queries), within each stratum,
    shared between sides when paired by seed / by query. `seeds` / `queries` False keeps that level as it is."""
    out = np.empty((len(sides), n))
    for start in range(0, n, chunk):
        b = min(chunk, n - start)
        shared_s = _counts(rng, len(sides[0].seeds), b, seeds) if by_seed else None
        shared_q = _query_counts(rng, sides[0], b, queries) if by_query else None
        for k, e in enumerate(sides):
            cs = shared_s if shared_s is not None else _counts(rng, len(e.seeds), b, seeds)  # (b, S)
            cq = shared_q if shared_q is not None else _query_counts(rng, e, b, queries)  # (b, Q)
            out[k, start:start + b] = np.einsum("bs,bs->b", cs, (cq * e.weights) @ e.values.T) / cs.shape[1]
    return out


def _expansion(v_seed: float, n_seeds: int, v_query: float, n_queries: int) -> float:
    """The factor widening a percentile interval to small-sample width: a bootstrap over n units estimates the
    variance of a mean (n-1)/n too small, and its normal-like quantiles ignore that the seed variance rests on
    n_seeds - 1 degrees of freedom. With v_seed, v_query the bootstrap variances of the effect from resampling
    seeds alone and queries alone (0 for a level not resampled), the factor is
    t(df) / z * sqrt(corrected / plug-in variance), df by Welch-Satterthwaite over the two levels."""
    parts = [(v * n / (n - 1), n - 1) for v, n in ((v_seed, n_seeds), (v_query, n_queries)) if n > 1 and v > 0]
    total, plugin = sum(v for v, _ in parts), v_seed + v_query
    if not parts or plugin <= 0:
        return 1.0
    df = total ** 2 / sum(v ** 2 / d for v, d in parts)
    level = 1 - (1 - CONFIDENCE) / 2
    return float(stats.t.ppf(level, df) / stats.norm.ppf(level) * math.sqrt(total / plugin))


def _interval(sides: Sequence[Evidence], statistic: Callable[[np.ndarray], np.ndarray]
              ) -> tuple[float, float, float, Pairing, str] | str:
    """(effect, low, high, paired, noise) of `statistic` (K side means (K, ...) -> (...)) over the sides, or why
    no interval can be had: the percentile bootstrap interval widened about the effect by `_expansion`.
    One-level cases use `scipy.stats.bootstrap`; seeds × queries use `_crossed_means`."""
    by_seed, by_query = _pairing(sides)
    with_queries = all(e.n_queries > 1 for e in sides)
    one_seed = [i for i, e in enumerate(sides) if len(e.seeds) < 2]
    n_seeds, n_queries = min(len(e.seeds) for e in sides), min(e.n_queries for e in sides)
    effect = float(statistic(np.array([e.per_seed.mean() for e in sides])))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    alpha = (1 - CONFIDENCE) / 2
    stratified = any(e.strata is not None for e in sides)  # scipy cannot resample within strata
    if with_queries and (len(one_seed) < len(sides) or stratified):  # the crossed two-level bootstrap
        dist = statistic(_crossed_means(sides, by_seed, by_query, N_RESAMPLES, rng))
        v_seed = float(np.var(statistic(_crossed_means(sides, by_seed, by_query, N_RESAMPLES, rng, queries=False))))
        v_query = float(np.var(statistic(_crossed_means(sides, by_seed, by_query, N_RESAMPLES, rng, seeds=False))))
        low, high = np.quantile(dist, [alpha, 1 - alpha])
        k = _expansion(v_seed, n_seeds, v_query, n_queries)
        paired: Pairing = "seed+query" if by_seed and by_query else "seed" if by_seed else "query" if by_query else "none"
        noise = ("queries (one seed: test sampling only)" if len(one_seed) == len(sides) else "seeds+queries"
                 + (" (one seed for some: their training noise not covered)" if one_seed else ""))
        return effect, effect - k * (effect - float(low)), effect + k * (float(high) - effect), paired, noise
    if with_queries:  # one seed everywhere, one stratum: test sampling only
        data, paired, noise = [e.values[0] for e in sides], ("query" if by_query else "none"), \
            "queries (one seed: test sampling only)"
        is_paired, n_units = by_query, n_queries
    elif not one_seed:
        data, paired, noise, is_paired, n_units = [e.per_seed for e in sides], ("seed" if by_seed else "none"), \
            "seeds", by_seed, n_seeds
    else:
        return "one seed and no per-query values: no interval can be had"

    def stat(*xs: np.ndarray, axis: int = -1) -> np.ndarray:
        return statistic(np.stack([x.mean(axis=axis) for x in xs]))

    res = stats.bootstrap(tuple(data), stat, n_resamples=N_RESAMPLES, paired=is_paired, vectorized=True,
                          confidence_level=CONFIDENCE, method="percentile", rng=rng)
    k = _expansion(float(np.var(res.bootstrap_distribution)), n_units, 0.0, 0)
    ci = res.confidence_interval
    return effect, effect - k * (effect - float(ci.low)), effect + k * (float(ci.high) - effect), paired, noise


# ------------------------------------------------------------------------------------------- the judge


def _statistic(spec: ClaimSpec, models: Sequence[str]) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """The oriented effect of a non-universal claim as a function of the side means (K, ...) in `models` order,
    and its description."""
    sign = 1.0 if spec.direction == "greater" else -1.0
    if spec.kind in PAIRWISE:
        a, b = models
        if spec.kind == "equivalence":
            return (lambda m: m[0] - m[1]), f"{a} − {b}"
        return (lambda m: sign * (m[0] - m[1])), (f"{a} − {b}" if sign > 0 else f"{b} − {a}")
    if spec.kind == "trend":
        return (lambda m: (sign * np.diff(m, axis=0)).min(0)), \
            f"smallest step {'up' if sign > 0 else 'down'} along {' → '.join(models)}"
    p = models.index(spec.peak)
    rest = [i for i in range(len(models)) if i != p]
    return (lambda m: sign * m[p] - (sign * m[rest]).max(0)), \
        f"{spec.peak} − the {'best' if sign > 0 else 'lowest'} of the others"


def _decide(kind: Kind, margin: float, low: float, high: float) -> tuple[Verdict, str]:
    """The verdict of an oriented effect with interval [low, high]."""
    if kind == "equivalence":
        if -margin < low and high < margin:
            return "held", f"interval inside ±{margin:g}"
        if low > margin or high < -margin:
            return "did not hold", f"interval outside ±{margin:g}"
        return "within noise", f"interval overlaps the margin ±{margin:g}"
    bound = -margin if kind == "non-inferiority" else 0.0
    if low > bound:
        return "held", f"interval above {bound:g}"
    if high < bound:
        return "did not hold", f"interval below {bound:g}"
    lo, hi = signed(low, high)
    return "within noise", f"interval spans {bound:g}: effects outside [{lo}, {hi}] ruled out"


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


def _universal_reason(parts: Sequence[Judgement], evidence: Mapping[str, Evidence]) -> str:
    """Each pair's verdict, then why the pairs not tested were not, each unsound run and each other reason once."""
    verdicts = "; ".join(f"{' vs '.join(j.spec.models)}: {j.verdict}" for j in parts)
    unconverged = sorted({m for j in parts for m in j.unconverged})
    collapsed = sorted({m for j in parts for m in j.collapsed})
    reasons = [_unsound_reason(unconverged, collapsed, evidence)] if unconverged or collapsed else []
    reasons += dict.fromkeys(j.reason for j in parts if j.verdict == "not tested" and not (j.unconverged or j.collapsed))
    return verdicts + (f" (not tested: {'; '.join(reasons)})" if reasons else "")


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
    if spec.kind == "universal":
        parts = tuple(judge(ClaimSpec(f"{spec.key}[{a} vs {b}]", spec.text, spec.source, spec.each, spec.metric,
                                      (a, b), spec.direction, spec.margin), evidence) for a, b in spec.pairs)
        worst = min(parts, key=lambda j: (UNIVERSAL_ORDER.index(j.verdict),
                                          j.effect if math.isfinite(j.effect) else math.inf))
        return Judgement(
            spec, universal_verdict([j.verdict for j in parts]), worst.effect, worst.low, worst.high,
            f"weakest pair: {worst.effect_of or ' vs '.join(worst.spec.models)}",
            min(j.n_seeds for j in parts), min(j.n_queries for j in parts),
            worst.paired, worst.noise, reason=_universal_reason(parts, evidence),
            unconverged=tuple(sorted({m for j in parts for m in j.unconverged})),
            collapsed=tuple(sorted({m for j in parts for m in j.collapsed})), parts=parts)
    sides = [evidence[m] for m in spec.models]
    unconverged = tuple(m for m, e in zip(spec.models, sides) if not e.converged)
    collapsed = tuple(m for m, e in zip(spec.models, sides) if e.collapse)
    counts = {"n_seeds": min(len(e.seeds) for e in sides), "n_queries": min(e.n_queries for e in sides)}
    if unconverged or collapsed:
        return Judgement(spec, "not tested", reason=_unsound_reason(unconverged, collapsed, evidence),
                         unconverged=unconverged, collapsed=collapsed,
                         **counts)
    statistic, effect_of = _statistic(spec, spec.models)
    found = _interval(sides, statistic)
    if isinstance(found, str):
        return Judgement(spec, "not tested", effect_of=effect_of, reason=found, **counts)
    effect, low, high, paired, noise = found
    outcome, reason = _decide(spec.kind, spec.margin, low, high)
    return Judgement(spec, outcome, effect, low, high, effect_of, paired=paired, noise=noise, reason=reason, **counts)


# ------------------------------------------------------------------------------------------- can it fail?


def _universal_shifts(spec: ClaimSpec, step: float, wins: bool) -> dict[str, float]:
    """Per-model shifts under which every pair of a universal claim clearly holds (`wins`), or its first pair
    clearly fails. Winning: a model's shift is `step` times the length of the longest chain of pairs below it
    (a over b over c ...), so a model that is the first of several pairs clears all of them; for "each"
    equivalence every shift is 0. Pairs that form a circle (a over b over a) cannot all hold: the circle's models
    keep the levels reached, and `can_fail` reports the claim."""
    sign = 1.0 if spec.direction == "greater" else -1.0
    models = {m for pair in spec.pairs for m in pair}
    level = dict.fromkeys(models, 0)
    if spec.each != "equivalence":
        for _ in range(len(models)):  # Bellman-Ford style relaxation: longest chains, at most |models| rounds
            changed = False
            for a, b in spec.pairs:
                if level[a] < level[b] + 1:
                    level[a], changed = level[b] + 1, True
            if not changed:
                break
    shift = {m: sign * step * level[m] for m in models}
    if not wins:
        a, b = spec.pairs[0]
        shift[a] = shift[b] + (step if spec.each == "equivalence" else -sign * step)
    return shift


def _constructed(spec: ClaimSpec, wins: bool, n_seeds: int = 3, n_queries: int = 40) -> dict[str, Evidence]:
    """Evidence on which `spec`'s claimed side clearly wins (`wins`) or clearly loses: per-query values of
    `n_seeds` shared seeds, a common noise pattern plus a per-model shift far beyond the noise and margin."""
    rng = np.random.default_rng(1)
    noise = rng.normal(0.0, 0.1, size=(n_seeds, n_queries))
    step = 10.0 * (1.0 + spec.margin)
    sign = (1.0 if spec.direction == "greater" else -1.0) * (1.0 if wins else -1.0)
    if spec.kind == "universal":
        shift = _universal_shifts(spec, step, wins)
    elif spec.kind == "equivalence":
        shift = {spec.models[0]: 0.0 if wins else step, spec.models[1]: 0.0}
    elif spec.kind == "peak":
        shift = {m: sign * step if m == spec.peak else 0.0 for m in spec.models}
    elif spec.kind == "trend":
        shift = {m: sign * step * i for i, m in enumerate(spec.models)}
    else:
        shift = {spec.models[0]: sign * step, spec.models[1]: 0.0}
    seeds = tuple(range(n_seeds))
    return {m: Evidence(seeds, 50.0 + s + noise) for m, s in shift.items()}


def can_fail(spec: ClaimSpec) -> str:
    """"" when `judge` says "held" of `spec` on evidence where its claimed side clearly wins and "did not hold"
    where it clearly loses (judged as if the book had what the claim `needs`); otherwise why not (a claim that
    cannot fail, or cannot hold, is a defect)."""
    where = {"dataset": spec.datasets[0] if spec.datasets else None,  # a run the claim can be tested on
             "profile": spec.profiles[0] if spec.profiles else None}
    built = dataclasses.replace(spec, needs="")  # as if the book had what it needs
    got = {wins: judge(built, _constructed(spec, wins), **where).verdict for wins in (True, False)}
    if got == {True: "held", False: "did not hold"}:
        return ""
    return f"claim {spec.key!r}: clear win judged {got[True]!r}, clear loss judged {got[False]!r}"


# ------------------------------------------------------------------------------------------- rendering


COLUMNS = ("key", "claim", "source", "kind", "metric", "effect of", "effect", "low", "high", "confidence",
           "n seeds", "n queries", "paired", "noise", "margin", "verdict", "reason", "unconverged", "collapsed")


def judgements_frame(judgements: Sequence[Judgement]) -> pd.DataFrame:
    """One row per judgement, columns `COLUMNS` (margin NaN for kinds without one)."""
    rows = []
    for j in judgements:
        s = j.spec
        rows.append(dict(zip(COLUMNS, (
            s.key, s.text, s.source, s.kind if s.kind != "universal" else f"universal ({s.each})", s.metric,
            j.effect_of, j.effect, j.low, j.high, j.confidence, j.n_seeds, j.n_queries, j.paired, j.noise,
            s.margin if s.margin > 0 else math.nan, j.verdict, j.reason, ", ".join(j.unconverged),
            ", ".join(j.collapsed)))))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _effect_cell(j: Judgement) -> str:
    if not math.isfinite(j.effect):
        return "-"
    pct = round(100 * j.confidence)
    effect, low, high = signed(j.effect, j.low, j.high)
    return f"{j.effect_of}: {effect} [{low}, {high}] ({pct}% interval over {j.noise})"


def claim_rows(judgements: Sequence[Judgement]) -> pd.DataFrame:
    """The judgements in the layout `book.results.notebook_claims` collects (claim, source, evidence, verdict), for a
    chapter whose claims page is still assembled from per-notebook claim tables."""
    rows = []
    for j in judgements:
        margin = f"; margin {j.spec.margin:g}" if j.spec.margin > 0 else ""
        evidence = (f"{j.spec.metric}: {_effect_cell(j)}; {j.n_seeds} seeds / {j.n_queries} queries, paired: "
                    f"{j.paired}{margin}; {j.reason}")
        rows.append({"claim": j.spec.text, "source": j.spec.source, "evidence": evidence, "verdict": j.verdict})
    return pd.DataFrame(rows, columns=["claim", "source", "evidence", "verdict"])


def render_claims(judgements: Sequence[Judgement], chapter: str, *, profile: str, dataset: str,
                  preamble: str = "") -> str:
    """The chapter's claims page: per claim its kind, the effect with its interval, n seeds / n queries,
    the pairing, the margin and the verdict with its reason; then the count of each verdict."""
    lines = [f"# Claims of the paper tested by the `{chapter}` chapter", ""]
    if preamble:
        lines += [preamble, ""]
    lines += [("Judged by `xmr_core.claims.judge` (`docs/claims.md`): the effect is oriented so that > 0 favours "
              "the claim."), "",
              "| # | claim | source | kind | metric | effect [interval] | seeds / queries | paired | margin | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, j in enumerate(judgements, 1):
        s = j.spec
        kind = s.kind if s.kind != "universal" else f"universal ({s.each})"
        why = f"**{j.verdict}**" + (f": {j.reason}" if j.reason else "")
        cells = [str(i), s.text, s.source, kind, s.metric, _effect_cell(j), f"{j.n_seeds} / {j.n_queries}",
                 j.paired, f"{s.margin:g}" if s.margin > 0 else "-", why]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    counts = ", ".join(f"{sum(j.verdict == v for j in judgements)} {v}" for v in VERDICTS)
    lines += ["", f"Of {len(judgements)} claims on this run (profile `{profile}`, dataset `{dataset}`): {counts}."]
    return "\n".join(lines) + "\n"

