"""The verdict protocol's statistics against hand-worked and brute-force references: Holm's adjustment, the
intersection-union peak/trend/universal decisions, p-values that agree with the intervals, negligible against
inconclusive, divergence as evidence, and the false-decision rates of every kind under a simulated tie, against the
rule before issue 73 (a peak's best-other and a trend's smallest step inside each resample), which they must fail."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import pytest
from scipy import stats

from xmr_core import claims
from xmr_core.calibration import exceeds, rates
from xmr_core.claims import ClaimSpec, Evidence, Judgement, Noise, holm, judge

SEEDS = (0, 1, 2)


def seeds_only(*values: float, seeds: tuple[int, ...] = SEEDS) -> Evidence:
    return Evidence(seeds, np.array(values))


def sweep(kind: str, n: int, metric: str = "R@1, pp") -> ClaimSpec:
    models = tuple(f"x{i}" for i in range(n))
    return ClaimSpec(f"{kind}{n}", "t", "s", kind, metric, models, peak="x0" if kind == "peak" else "")


# ------------------------------------------------------------------------------------------- Holm


def test_holm_on_a_hand_worked_list() -> None:
    """p = 0.01, 0.04, 0.03, 0.005 (m = 4), sorted 0.005, 0.01, 0.03, 0.04: 4 x 0.005 = 0.02 and 3 x 0.01 = 0.03
    stay below 0.05; 2 x 0.03 = 0.06 does not, and the step-down stops there (0.04 x 1 = 0.04, but the running
    maximum is 0.06)."""
    verdicts = ["held", "did not hold", "held", "negligible"]
    assert holm([0.01, 0.04, 0.03, 0.005], verdicts) == ["held", "inconclusive", "inconclusive", "negligible"]
    # an inconclusive claim is in the family (m = 5): 5 x 0.005 = 0.025, 4 x 0.01 = 0.04 stay; a claim not tested
    # (p NaN) is not in it and stays as it is
    got = holm([0.01, 0.04, 0.03, 0.005, math.nan, math.nan], [*verdicts, "inconclusive", "not tested"])
    assert got == ["held", "inconclusive", "inconclusive", "negligible", "inconclusive", "not tested"]
    # 0.011 x 5 = 0.055: even the smallest goes, and so does every larger one
    assert holm([0.011] * 5, ["held"] * 5) == ["inconclusive"] * 5
    assert holm([0.04], ["held"]) == ["held"]  # a family of one: Holm is the plain test


def test_holm_matches_a_brute_force_closed_test() -> None:
    """Holm is the shortcut of the closed test with Bonferroni local tests: H_i is rejected when every intersection
    containing it is, i.e. min over J ∋ i of |J| min_{j ∈ J} p_j ... < alpha. Brute force over every subset."""
    from itertools import combinations

    rng = np.random.default_rng(7)
    for _ in range(50):
        p = list(rng.uniform(0, 0.06, size=5) ** rng.uniform(0.5, 2))
        closed = []
        for i in range(5):
            subsets = [set(c) for r in range(1, 6) for c in combinations(range(5), r) if i in c]
            closed.append(all(len(J) * min(p[j] for j in J) < 0.05 for J in subsets))
        got = holm(p, ["held"] * 5)
        assert [g == "held" for g in got] == closed


# ------------------------------------------------------------------------------------------- decisions


def test_p_values_agree_with_the_95_interval() -> None:
    """Decided at 95% exactly when p < 0.05 (bisection over the interval's level), on evidence from a clear win to a
    tie; the interval at p's own level just reaches the bound."""
    rng = np.random.default_rng(3)
    spec = ClaimSpec("k", "t", "s", "superiority", "score", ("a", "b"))
    for shift in np.linspace(0.0, 3.0, 13):
        b = rng.normal(0, 1, 3)
        j = judge(spec, {"a": seeds_only(*(b + shift + rng.normal(0, 0.8, 3))), "b": seeds_only(*b)})
        decided = j.verdict in ("held", "did not hold")
        assert decided == (math.isfinite(j.p) and j.p < 0.05), j


def _boot(center: float, half: float) -> claims._Boot:
    """A bootstrap whose 95% interval is [center - half, center + half] on normal quantiles: a standard error of
    half / z(0.975) over so many seeds that t is z."""
    n = 10 ** 9
    return claims._Boot(center, "seed", "seeds", (half / stats.norm.ppf(0.975)) ** 2 * (n - 1) / n, n)


@pytest.mark.parametrize(("center", "half", "comparisons", "expected"), [
    (1.0, 0.5, 1, "held"),  # [0.5, 1.5] above 0
    (-1.0, 0.5, 1, "did not hold"),  # [-1.5, -0.5] below 0
    (0.1, 0.3, 1, "negligible"),  # [-0.2, 0.4] spans 0 inside ±0.5 (R@1 in pp)
    (0.1, 1.0, 1, "inconclusive"),  # [-0.9, 1.1]
    (0.2, 0.1, 1, "held"),  # [0.1, 0.3]: decided, and the reason says it is within ±0.5
    # a refutation among 4 parts needs the 98.75% interval below 0: z(0.99375) = 2.498 x 0.5/1.96 = 0.637 > 0.6
    (-0.6, 0.5, 4, "inconclusive"), (-0.7, 0.5, 4, "did not hold"),
])
def test_decide_on_constructed_intervals(center: float, half: float, comparisons: int, expected: str) -> None:
    spec = ClaimSpec("k", "t", "s", "superiority", "R@1, pp", ("a", "b"))
    verdict, reason, p = claims._decide(spec, _boot(center, half), comparisons)
    assert verdict == expected, reason
    if center == 0.2:
        assert "too small to matter" in reason
    assert (verdict == "inconclusive") == math.isnan(p)


def test_no_smallest_effect_of_interest_leaves_a_narrow_tie_inconclusive() -> None:
    tie = {"a": seeds_only(1.0, 1.01, 0.99), "b": seeds_only(1.0, 1.0, 1.0)}
    assert judge(ClaimSpec("k", "t", "s", "superiority", "R@1, pp", ("a", "b")), tie).verdict == "negligible"
    assert judge(ClaimSpec("k", "t", "s", "superiority", "sigma", ("a", "b")), tie).verdict == "inconclusive"
    declared = ClaimSpec("k", "t", "s", "superiority", "sigma", ("a", "b"), sesoi=0.1, sesoi_source="Sec. 4")
    assert judge(declared, tie).verdict == "negligible" and declared.smallest_effect == (0.1, "Sec. 4")
    with pytest.raises(ValueError, match="name its source"):
        ClaimSpec("k", "t", "s", "superiority", "sigma", ("a", "b"), sesoi=0.1)


def test_family_sesoi_by_metric() -> None:
    assert claims.family_sesoi("rSum (instance relevance, whole test split)")[0] == 3.0
    assert claims.family_sesoi("Avg. R@Sum (mean over rounds 1..N of R@1 + R@5 + R@10), pp")[0] == 1.5
    assert claims.family_sesoi("T2 R-P (class relevance), pp")[0] == 0.5
    assert claims.family_sesoi("instance ground truths among the top 6, % of the list")[0] == 0.5
    assert claims.family_sesoi("log10 of the seconds to embed")[0] == 0.0


def test_peak_is_held_only_when_it_beats_every_other_point() -> None:
    clear = {"x0": seeds_only(60.0, 60.5, 59.5), "x1": seeds_only(50.0, 50.2, 49.9), "x2": seeds_only(40.0, 40.1, 39.9)}
    j = judge(sweep("peak", 3), clear)
    assert j.verdict == "held" and [p.verdict for p in j.parts] == ["held", "held"]
    assert j.effect == pytest.approx(np.mean([10.0, 10.3, 9.6]))  # the weakest comparison: x0 - x1
    tied = {**clear, "x1": seeds_only(61.0, 59.0, 60.3)}  # x1 ties the peak: not held, not refuted
    assert judge(sweep("peak", 3), tied).verdict == "inconclusive"
    above = {**clear, "x2": seeds_only(70.0, 70.4, 69.6)}  # x2 is decided above the peak
    j = judge(sweep("peak", 3), above)
    assert j.verdict == "did not hold" and "x0 vs x2: did not hold" in j.reason


def test_trend_does_not_hold_only_when_a_step_is_decided_against() -> None:
    up = {"x0": seeds_only(40.0, 40.2, 39.8), "x1": seeds_only(50.0, 50.2, 49.8), "x2": seeds_only(60.0, 60.1, 59.8)}
    assert judge(sweep("trend", 3), up).verdict == "held"
    flat_step = {**up, "x2": seeds_only(52.0, 48.0, 50.3)}  # x1 -> x2 by noise only
    j = judge(sweep("trend", 3), flat_step)
    assert j.verdict == "inconclusive" and j.effect == pytest.approx(np.mean([2.0, -2.2, 0.5]))
    down_step = {**up, "x2": seeds_only(45.0, 45.1, 44.9)}
    assert judge(sweep("trend", 3), down_step).verdict == "did not hold"


def test_divergence_on_every_seed_is_evidence() -> None:
    spec = ClaimSpec("needs-l", "Removing L lowers performance.", "Table 4", "superiority", "R@1, pp",
                     ("full", "w/o L"))
    gone = Evidence(SEEDS, np.full(3, np.nan), converged=False, diverged=SEEDS)
    full = seeds_only(50.0, 51.0, 49.0)
    j = judge(spec, {"full": full, "w/o L": gone})
    assert j.verdict == "held" and j.reason.startswith("training diverges for w/o L on 3 of 3 seeds")
    assert math.isnan(j.p) and holm([j.p], [j.verdict]) == ["held"]  # not a sampling statistic: Holm leaves it
    backwards = ClaimSpec("k", "t", "s", "superiority", "R@1, pp", ("w/o L", "full"))
    assert judge(backwards, {"full": full, "w/o L": gone}).verdict == "did not hold"
    some = Evidence(SEEDS, np.array([np.nan, np.nan, 40.0]), converged=False, diverged=(0, 1))
    assert judge(spec, {"full": full, "w/o L": some}).verdict == "not tested"  # not every seed
    unsound = Evidence(SEEDS, np.array([50.0, 51.0, 49.0]), converged=False)
    assert judge(spec, {"full": unsound, "w/o L": gone}).verdict == "not tested"  # nor against an unsound side
    with pytest.raises(ValueError, match="diverged seeds"):
        Evidence(SEEDS, np.array([1.0, 2.0, 3.0]), diverged=(0,))  # converged evidence cannot have diverged


# ------------------------------------------------------------------------------------------- calibration


def widened_percentile(per_seed: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray],
                       confidence: float = 0.95) -> tuple[float, float, float]:
    """(effect, low, high): the seed-only interval before the t interval, of `statistic` (K side means (K, ...) ->
    (...)) over `per_seed` (K, S) paired seed scores: the percentile bootstrap (2,000 resamples of the S seeds),
    widened about the effect by t(S-1)/z * sqrt(S/(S-1)) at `confidence`."""
    n = per_seed.shape[1]
    draws = np.random.default_rng(0).integers(0, n, size=(2000, n))
    dist = statistic(per_seed[:, draws].mean(-1))
    effect = float(statistic(per_seed.mean(1)))
    a = (1 - confidence) / 2
    low, high = np.quantile(dist, [a, 1 - a])
    k = stats.t.ppf(1 - a, n - 1) / stats.norm.ppf(1 - a) * math.sqrt(n / (n - 1))
    return effect, effect - k * (effect - low), effect + k * (high - effect)


def old_rule(spec: ClaimSpec, evidence: Mapping[str, Evidence]) -> Judgement:
    """The rule before issue 73 (seed scores only): a peak's effect is the peak minus the best other point, a trend's
    its smallest step, both chosen inside each resample of one joint bootstrap (`widened_percentile`); decided when
    the 95% interval excludes 0."""
    per_seed = np.stack([evidence[m].values for m in spec.models])
    if spec.kind == "trend":
        def statistic(m: np.ndarray) -> np.ndarray:
            return np.diff(m, axis=0).min(0)
    else:
        p = spec.models.index(spec.peak)
        rest = [i for i in range(len(spec.models)) if i != p]

        def statistic(m: np.ndarray) -> np.ndarray:
            return m[p] - m[rest].max(0)
    effect, low, high = widened_percentile(per_seed, statistic)
    return Judgement(spec, "held" if low > 0 else "did not hold" if high < 0 else "inconclusive", effect, low, high)


def percentile_parts(spec: ClaimSpec, evidence: Mapping[str, Evidence]) -> Judgement:
    """A peak as `claims.judge` decides it, each part's interval the widened percentile one it had before the t
    interval (seed scores only): held when every part's 95% interval is above 0, did not hold when some part's at
    1 - 0.05 / k (Bonferroni over k parts) is below 0."""
    rest = [m for m in spec.models if m != spec.peak]
    parts = [np.stack([evidence[spec.peak].values, evidence[m].values]) for m in rest]

    def difference(m: np.ndarray) -> np.ndarray:
        return m[0] - m[1]

    held = all(widened_percentile(p, difference)[1] > 0 for p in parts)
    refuted = any(widened_percentile(p, difference, 1 - 0.05 / len(parts))[2] < 0 for p in parts)
    return Judgement(spec, "held" if held else "did not hold" if refuted else "inconclusive")


SIMS = 300
SEED_NOISE = Noise(1.0, source="seed scores only")
BOOK_NOISE = Noise(0.7, 46.0, 1000, source="PCME's committed noise: seed sd 0.7 pp, hits of sd 46 pp, 1000 queries")


@pytest.mark.parametrize(("kind", "n", "old_did_not_hold_above"), [
    ("peak", 6, 0.10),  # the audit: 21% at 3 seeds
    ("trend", 5, 0.30),  # the audit: 51-60%
])
def test_the_tie_simulation_catches_the_old_rules_lean(kind: str, n: int, old_did_not_hold_above: float) -> None:
    """The calibration below fails on the statistics before issue 73: under a tie of every point, the old peak and
    trend rules say "did not hold" far more often than 5% (the minimum or maximum over points, taken inside each
    resample, is biased against the claim)."""
    got = rates(sweep(kind, n), SEED_NOISE, 3, SIMS, seed=11, judge_fn=old_rule)
    assert exceeds(got["did not hold"], SIMS) and got["did not hold"] > old_did_not_hold_above, got


BONFERRONI_SIMS = 2000


def test_a_6_point_peak_on_3_seeds_refutes_at_most_at_its_bonferroni_level() -> None:
    """A 6-point peak on 3 seeds' scores alone, all points tied: "did not hold" needs one of its 5 parts refuted by
    its 99% interval, so it errs at most 5 x 0.5% = 2.5%. The percentile interval, even widened by t/z, cannot reach
    past the most extreme of 3 seeds (every 3-seed resample of one seed has probability 1/27 = 3.7%, so its 0.5%
    quantile is that seed): each part erred about 0.9% and the peak 4-5% (7.0% of 300 in `bench claims
    --calibration` before the t interval). The t interval keeps each part's tail at its level."""
    spec = sweep("peak", 6)
    before = rates(spec, SEED_NOISE, 3, BONFERRONI_SIMS, seed=1, judge_fn=percentile_parts)
    assert exceeds(before["did not hold"], BONFERRONI_SIMS, limit=0.025), before
    now = rates(spec, SEED_NOISE, 3, BONFERRONI_SIMS, seed=1)
    assert not exceeds(now["did not hold"], BONFERRONI_SIMS, limit=0.025), now
    assert now["held"] == 0.0


CALIBRATED = [sweep("peak", 3), sweep("peak", 4), sweep("peak", 6), sweep("trend", 3), sweep("trend", 5),
              ClaimSpec("u", "t", "s", "universal", "R@1, pp", pairs=(("a", "b"), ("a", "c"), ("a", "d"))),
              ClaimSpec("s", "t", "s", "superiority", "R@1, pp", ("a", "b"))]


@pytest.mark.slow
@pytest.mark.parametrize("n_seeds", [3, 5])
@pytest.mark.parametrize("spec", CALIBRATED, ids=[s.key for s in CALIBRATED])
def test_every_kind_errs_at_most_5_percent_a_side_under_a_tie(spec: ClaimSpec, n_seeds: int) -> None:
    got = rates(spec, SEED_NOISE, n_seeds, SIMS, seed=n_seeds)
    assert not exceeds(got["held"], SIMS) and not exceeds(got["did not hold"], SIMS), got


@pytest.mark.slow
def test_a_peak_errs_at_most_5_percent_a_side_at_the_books_seed_and_query_noise() -> None:
    got = rates(sweep("peak", 4), BOOK_NOISE, 3, 100, seed=5)
    assert not exceeds(got["held"], 100) and not exceeds(got["did not hold"], 100), got


def test_non_inferiority_and_equivalence_err_at_most_5_percent_at_their_margin() -> None:
    """At the margin's edge both decisions are wrong (a non-inferiority claim at -margin, an equivalence at
    +margin)."""
    ni = ClaimSpec("ni", "t", "s", "non-inferiority", "R@1, pp", ("a", "b"), margin=2.0)
    eq = ClaimSpec("eq", "t", "s", "equivalence", "R@1, pp", ("a", "b"), margin=2.0)
    for spec, effect in ((ni, -2.0), (eq, 2.0)):
        got = rates(spec, SEED_NOISE, 3, SIMS, effect=effect, seed=2)
        assert not exceeds(got["held"], SIMS) and not exceeds(got["did not hold"], SIMS), (spec.kind, got)


def test_can_fail_runs_on_the_books_noise() -> None:
    """`can_fail` draws seed and query noise at the book's scale (`claims.CAN_FAIL_NOISE`), not a shift on sd 0.1:
    a judge that leans to "did not hold" on every sweep at that noise is caught."""
    assert claims.CAN_FAIL_NOISE.n_queries > 0 and claims.CAN_FAIL_NOISE.seed_sd >= 0.5
    assert claims.can_fail(sweep("peak", 6)) == ""


def test_exceeds_reads_a_rate_against_its_sampling_error() -> None:
    # the one-sided binomial tail P(X >= k | n = 300, p = 0.05): 22 -> 0.049, 20 -> 0.119 (scipy.stats.binomtest)
    assert claims_exceeds(22, 300) and not claims_exceeds(20, 300)
    assert claims_exceeds(60, 300) and not claims_exceeds(6, 300)


def claims_exceeds(k: int, n: int) -> bool:
    return exceeds(k / n, n)
