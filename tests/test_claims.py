"""The one verdict protocol (`xmr_core.claims`): every kind reaches every verdict on synthetic evidence, the
intervals are the ones derived by hand, pairing narrows them, collapse is detected on real score matrices."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from fixtures.corpora import synthetic_split
from scipy import stats

from xmr_core import claims
from xmr_core.book.results import write_judgements
from xmr_core.claims import ClaimSpec, Evidence, can_fail, detect_collapse, judge
from xmr_core.config import RunConfig
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import direction_scores, embed_split
from xmr_core.methods.registry import create_method

SEEDS = (0, 1, 2)


def spec(kind: str, direction: str = "greater", **kw: object) -> ClaimSpec:
    """A claim of `kind` over models A, B (C for trend / peak; peak at B), margin 1 where the kind needs one."""
    if kind in ("trend", "peak"):
        kw.setdefault("models", ("A", "B", "C"))
    elif kind == "universal":
        kw.setdefault("pairs", (("A", "B"), ("C", "B")))
    else:
        kw.setdefault("models", ("A", "B"))
    if kind == "peak":
        kw.setdefault("peak", "B")
    if kind in ("non-inferiority", "equivalence") or kw.get("each") in ("non-inferiority", "equivalence"):
        kw.setdefault("margin", 1.0)
    return ClaimSpec(f"{kind}-{direction}", f"a {kind} claim", "Sec. 0", kind, "R@1, pp", direction=direction, **kw)


def seeds_only(*per_seed: float, seeds: tuple[int, ...] = SEEDS, **kw: object) -> Evidence:
    return Evidence(seeds, np.array(per_seed, dtype=float), **kw)


def interval_by_hand(d: np.ndarray) -> tuple[float, float, float]:
    """The seed-only interval of a paired effect over n seeds, derived by hand: the paired t interval of the seed
    differences, mean ± t(0.975, n-1) sd / sqrt(n)."""
    m, half = float(d.mean()), stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return m, m - half, m + half


# ------------------------------------------------------------------------------ the interval, by hand


def test_paired_seed_interval_is_the_t_interval_of_the_seed_differences() -> None:
    a, b = np.array([52.0, 52.5, 53.0]), np.array([50.0, 50.5, 50.2])
    j = judge(spec("superiority"), {"A": seeds_only(*a), "B": seeds_only(*b)})
    effect, low, high = interval_by_hand(a - b)
    assert (j.effect, j.low, j.high) == pytest.approx((effect, low, high))
    assert (j.paired, j.noise, j.n_seeds, j.n_queries, j.verdict) == ("seed", "seeds", 3, 0, "held")
    flipped = judge(spec("superiority", "less"), {"A": seeds_only(*a), "B": seeds_only(*b)})
    assert (flipped.effect, flipped.low, flipped.high) == pytest.approx((-j.effect, -j.high, -j.low))
    assert flipped.verdict == "did not hold" and flipped.effect_of == "B − A"


def test_the_old_rule_calls_held_what_the_paired_interval_calls_within_noise() -> None:
    # a - b per seed: +2, +2, +0.1: the seed means differ by 1.37 > the larger seed std 1.10, so the old rule
    # ("held when the difference of seed means exceeds the larger seed std", removed) said held; three seeds
    # this uneven cannot rule out a null effect
    a, b = np.array([52.0, 52.0, 50.1]), np.array([50.0, 50.0, 50.0])
    assert a.mean() - b.mean() > max(a.std(ddof=1), b.std(ddof=1))
    j = judge(spec("superiority"), {"A": seeds_only(*a), "B": seeds_only(*b)})
    assert j.verdict == "inconclusive" and j.low < 0 < j.high
    assert "ruled out" in j.reason


def test_unpaired_when_the_seeds_or_the_split_differ() -> None:
    a, b = seeds_only(51.0, 52.0, 53.0), seeds_only(50.0, 50.5, 49.0)
    assert judge(spec("superiority"), {"A": a, "B": dataclasses.replace(b, seeds=(3, 4, 5))}).paired == "none"
    assert judge(spec("superiority"), {"A": a, "B": dataclasses.replace(b, split="val")}).paired == "none"


def resampled_variances(e: Evidence, n: int = 20000) -> tuple[float, float]:
    """A brute-force crossed bootstrap of one side's mean, the reference for `claims._interval`'s closed form: its
    variance over `n` resamples of the seeds alone (the queries fixed) and of the queries alone (the seeds fixed;
    one draw for every seed, within each stratum, each stratum's mean weighing equally)."""
    rng = np.random.default_rng(1)
    seeds = e.per_seed[rng.integers(0, len(e.seeds), (n, len(e.seeds)))].mean(1)
    over_seeds = e.values.mean(0)  # (Q,): the same query draw for every seed
    strata = np.zeros(e.n_queries, dtype=int) if e.strata is None else e.strata
    groups = [over_seeds[strata == h] for h in np.unique(strata)]
    queries = np.mean([g[rng.integers(0, len(g), (n, len(g)))].mean(1) for g in groups], axis=0)
    return float(seeds.var()), float(queries.var())


def test_crossed_bootstrap_variance_matches_the_additive_model_by_hand() -> None:
    # values[s, q] = seed effect + query effect: resampling the S seeds gives the mean a variance of var_pop(seed
    # effects) / S, resampling the Q queries var_pop(query effects) / Q; a brute-force resampler agrees
    rng = np.random.default_rng(0)
    seed_fx, query_fx = rng.normal(0, 2, 4), rng.normal(0, 5, 60)
    e = Evidence((0, 1, 2, 3), seed_fx[:, None] + query_fx[None, :])
    boot = claims._interval([e], np.array([1.0]))
    assert (boot.v_seed, boot.v_query) == pytest.approx((seed_fx.var() / 4, query_fx.var() / 60))
    assert (boot.v_seed, boot.v_query) == pytest.approx(resampled_variances(e), rel=0.05)
    assert boot.effect == pytest.approx(e.values.mean())


def test_pairing_by_query_removes_the_shared_query_noise() -> None:
    # B scores the very same queries as A (e.g. A = B re-ranked) and beats it on every query by 0.5, under a
    # query-to-query spread of 20: paired by query the effect is exact; scored on different queries it is noise
    rng = np.random.default_rng(0)
    base = rng.normal(50, 20, size=(3, 300))
    a, b = Evidence(SEEDS, base + 0.5), Evidence(SEEDS, base)
    paired = judge(spec("superiority"), {"A": a, "B": b})
    assert paired.paired == "seed+query" and paired.noise == "seeds+queries" and paired.verdict == "held"
    assert paired.effect == pytest.approx(0.5) and paired.low == pytest.approx(0.5) and paired.high == pytest.approx(0.5)
    apart = judge(spec("superiority"), {"A": a, "B": Evidence(SEEDS, rng.normal(50, 20, size=(3, 300)), split="other")})
    assert apart.paired == "none" and apart.verdict == "inconclusive" and apart.width > 3


def test_one_seed_uses_test_sampling_only_and_says_so() -> None:
    rng = np.random.default_rng(2)
    q = rng.normal(0, 1, size=(1, 400))
    j = judge(spec("superiority"), {"A": Evidence((0,), q + 1.0), "B": Evidence((0,), q)})
    assert j.verdict == "held" and j.paired == "query" and j.noise.startswith("queries (one seed")
    none = judge(spec("superiority"), {"A": seeds_only(51.0, seeds=(0,)), "B": seeds_only(50.0, seeds=(0,))})
    assert none.verdict == "not tested" and "one seed" in none.reason


def test_judging_is_deterministic() -> None:
    rng = np.random.default_rng(3)
    ev = {"A": Evidence(SEEDS, rng.normal(1, 1, (3, 50))), "B": Evidence(SEEDS, rng.normal(0, 1, (3, 50)))}
    assert judge(spec("superiority"), ev) == judge(spec("superiority"), ev)


# ------------------------------------------------------------------------------ every kind, every verdict


def evidence_for(kind: str, outcome: str) -> dict[str, Evidence]:
    """Seed-only evidence on which `spec(kind)` (direction "greater") reaches `outcome`."""
    noise = np.array([0.0, 0.3, -0.3])
    clear, unclear = 10.0, np.array([2.0, -2.0, 0.3])  # far beyond / across the noise and the margin of 1
    if kind == "equivalence":
        shift = {"held": 0.0 * noise, "did not hold": clear + noise, "inconclusive": 1.0 + unclear}[outcome]
        return {"A": seeds_only(*(50 + shift)), "B": seeds_only(50.0, 50.0, 50.0)}
    sign = {"held": 1.0, "did not hold": -1.0}.get(outcome, 0.0)
    step = sign * (clear + noise) + (unclear if outcome == "inconclusive" else 0.0)
    if kind == "non-inferiority":  # the bound is -margin: shift by -1 so "inconclusive" straddles it
        step = step - (1.0 if outcome == "inconclusive" else 0.0)
    if kind in ("superiority", "non-inferiority"):
        return {"A": seeds_only(*(50 + step)), "B": seeds_only(50.0, 50.0, 50.0)}
    if kind == "trend":
        return {"A": seeds_only(50.0, 50.0, 50.0), "B": seeds_only(*(50 + step)), "C": seeds_only(*(50 + 2 * step))}
    if kind == "peak":
        return {"A": seeds_only(50.0, 50.0, 50.0), "B": seeds_only(*(50 + step)), "C": seeds_only(49.0, 49.0, 49.0)}
    # universal: A vs B and C vs B; not held unless both pairs hold
    return {"A": seeds_only(*(50 + step)), "B": seeds_only(50.0, 50.0, 50.0), "C": seeds_only(60.0, 60.0, 60.5)}


@pytest.mark.parametrize("kind", claims.KINDS)
@pytest.mark.parametrize("outcome", ["held", "did not hold", "inconclusive"])
def test_every_kind_reaches_every_verdict(kind: str, outcome: str) -> None:
    j = judge(spec(kind), evidence_for(kind, outcome))
    assert j.verdict == outcome, j
    assert math.isfinite(j.effect) and j.low <= j.high and j.n_seeds == 3
    if outcome == "held" and kind != "equivalence":
        assert j.low > (-1.0 if kind == "non-inferiority" else 0.0)


@pytest.mark.parametrize("kind", claims.KINDS)
def test_every_kind_is_not_tested_on_unconverged_collapsed_or_missing_runs(kind: str) -> None:
    ev = evidence_for(kind, "held")
    s = spec(kind)
    unconverged = {**ev, "B": dataclasses.replace(ev["B"], converged=False)}
    j = judge(s, unconverged)
    assert j.verdict == "not tested" and "B did not converge" in j.reason and j.unconverged == ("B",)
    collapsed = {**ev, "A": dataclasses.replace(ev["A"], collapse="every query's scores are tied")}
    j = judge(s, collapsed)
    assert j.verdict == "not tested" and "A collapsed" in j.reason and j.collapsed == ("A",)
    j = judge(s, {m: e for m, e in ev.items() if m != "A"})
    assert j.verdict == "not tested" and "no A" in j.reason
    restricted = dataclasses.replace(s, datasets=("coco",), profiles=("paper",))
    assert "needs data set coco" in judge(restricted, ev, dataset="scenes", profile="paper").reason
    assert "needs profile paper" in judge(restricted, ev, dataset="coco", profile="cpu").reason
    assert judge(restricted, ev, dataset="coco", profile="paper").verdict == "held"
    unbuilt = dataclasses.replace(s, needs="model B (not built in this book)")
    j = judge(unbuilt, ev)  # never judged, even on evidence that would decide it
    assert j.verdict == "not tested" and j.reason == "needs model B (not built in this book)"
    assert can_fail(unbuilt) == ""  # judged as if built, it can hold and fail


def test_a_not_tested_judgement_without_its_reason_is_refused() -> None:
    s = spec("superiority")
    with pytest.raises(ValueError, match="must say why"):
        claims.Judgement(s, "not tested")
    with pytest.raises(ValueError, match="must say why"):
        claims.Judgement(s, "not tested", reason="  ")
    assert claims.Judgement(s, "inconclusive").reason == ""  # other verdicts may carry their reason in the interval


def test_trend_and_peak_are_judged_on_their_weakest_point() -> None:
    # a sweep that rises A -> B clearly but B -> C only by noise: the trend is inconclusive, not held
    ev = {"A": seeds_only(40.0, 40.2, 39.8), "B": seeds_only(50.0, 50.2, 49.8), "C": seeds_only(52.0, 48.0, 50.3)}
    j = judge(spec("trend"), ev)
    assert j.verdict == "inconclusive" and j.effect == pytest.approx(np.mean([2.0, -2.2, 0.5]))
    # the claimed peak B against the best of the others (C) in each resample: C ties it, so it cannot hold
    j = judge(spec("peak"), ev)
    assert j.verdict == "inconclusive" and j.effect == pytest.approx(50.0 - np.mean([52.0, 48.0, 50.3]))


def test_universal_one_refutation_refutes_and_reports_the_weakest_pair() -> None:
    ev = {"A": seeds_only(60.0, 60.5, 59.5), "B": seeds_only(50.0, 50.0, 50.0), "C": seeds_only(40.0, 40.3, 39.9)}
    j = judge(spec("universal"), ev)
    assert j.verdict == "did not hold" and [p.verdict for p in j.parts] == ["held", "did not hold"]
    assert j.effect == pytest.approx(j.parts[1].effect) and "C vs B: did not hold" in j.reason
    ev["C"] = dataclasses.replace(ev["C"], converged=False)
    j = judge(spec("universal"), ev)
    assert j.verdict == "not tested" and j.unconverged == ("C",)


@pytest.mark.parametrize(("verdicts", "expected"), [
    (["held", "held"], "held"), (["held", "inconclusive"], "inconclusive"), (["inconclusive", "not tested"],
     "not tested"), (["not tested", "did not hold", "held"], "did not hold"), ([], "not tested"),
])
def test_universal_verdict(verdicts: list, expected: str) -> None:
    assert claims.universal_verdict(verdicts) == expected


# ------------------------------------------------------------------------------ can it fail?


@pytest.mark.parametrize("kind", claims.KINDS)
@pytest.mark.parametrize("direction", ["greater", "less"])
def test_every_kind_can_hold_and_fail(kind: str, direction: str) -> None:
    assert can_fail(spec(kind, direction)) == ""
    if kind == "universal":
        assert can_fail(spec(kind, direction, each="non-inferiority")) == ""
        assert can_fail(spec(kind, direction, each="equivalence")) == ""


@pytest.mark.parametrize("direction", ["greater", "less"])
@pytest.mark.parametrize("each", ["superiority", "non-inferiority", "equivalence"])
@pytest.mark.parametrize("pairs", [(("A", "B"), ("A", "C")), (("A", "B"), ("B", "C"), ("A", "C")),
                                   (("B", "A"), ("C", "A"), ("C", "B"))])
def test_universal_claims_sharing_models_can_hold_and_fail(pairs: tuple, each: str, direction: str) -> None:
    # a model first in several pairs, or a chain: the constructed win must clear every pair at once
    universal = ClaimSpec("u", "t", "s", "universal", "m", pairs=pairs, each=each, direction=direction,
                          margin=0.5 if each != "superiority" else 0.0)
    assert can_fail(universal) == ""


def test_can_fail_judges_a_claim_on_a_run_it_can_be_tested_on() -> None:
    paper_only = ClaimSpec("p", "t", "s", "superiority", "m", models=("A", "B"), datasets=("coco",),
                           profiles=("paper",))
    assert can_fail(paper_only) == ""


def test_a_universal_claim_whose_pairs_form_a_circle_cannot_hold() -> None:
    circle = ClaimSpec("u", "t", "s", "universal", "m", pairs=(("A", "B"), ("B", "A")))
    assert "clear win judged 'did not hold'" in can_fail(circle)


def test_can_fail_flags_a_judge_that_cannot_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "_decide", lambda spec, boot, comparisons=1: ("held", "always", 0.01))
    assert "clear loss judged 'held'" in can_fail(spec("superiority"))


@pytest.mark.parametrize(("kw", "match"), [
    ({"kind": "equivalence", "models": ("A", "B")}, "margin > 0"),
    ({"kind": "non-inferiority", "models": ("A", "B"), "margin": -1.0}, "margin > 0"),
    ({"kind": "superiority", "models": ("A", "B"), "margin": 1.0}, "has no margin"),
    ({"kind": "superiority", "models": ("A", "A")}, "repeated model"),
    ({"kind": "superiority", "models": ("A", "B", "C")}, "exactly two"),
    ({"kind": "trend", "models": ("A", "B")}, "at least three"),
    ({"kind": "peak", "models": ("A", "B", "C"), "peak": "D"}, "`peak` must name"),
    ({"kind": "universal", "pairs": (("A", "A"),)}, "two different models"),
    ({"kind": "rises", "models": ("A", "B")}, "kind must be one of"),
])
def test_declarations_that_cannot_be_judged_are_refused(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ClaimSpec("bad", "t", "s", metric="m", **kw)


def test_evidence_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="S = 3 seeds"):
        Evidence(SEEDS, np.zeros(2))
    with pytest.raises(ValueError, match="non-finite value in seed row 1"):
        Evidence(SEEDS, np.array([[0.0, 1.0], [np.nan, 1.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="repeated seeds"):
        Evidence((0, 0), np.zeros(2))


# ------------------------------------------------------------------------------ collapse


def test_chance_best_rank_matches_every_ranking_enumerated() -> None:
    for g, p in ((5, 1), (6, 2), (7, 3)):
        ranks = [1 + min(order.index(i) for i in range(p)) for order in itertools.permutations(range(g))]
        mean, var = claims.chance_best_rank(np.array([p]), g)
        assert mean[0] == pytest.approx(np.mean(ranks)) and var[0] == pytest.approx(np.var(ranks))


def _tiny_scores() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """A real VSE's image and caption embeddings of a 40-image synthetic split, and its relevance (i2t)."""
    rng = np.random.default_rng(0)
    split = dataclasses.replace(test := synthetic_split("test", 40, rng),
                                grid=rng.standard_normal((40, 4, 6)).astype(np.float32)).validate()
    vocab = Vocabulary.build(test.captions)
    vectors = np.random.default_rng(3).standard_normal((len(vocab), 8)).astype(np.float32)
    torch.manual_seed(0)
    model = create_method("vse", vectors, embed_dim=8, text=TextEncoderConfig(hidden=8),
                          image=ImageEncoderConfig(kind="grid", hidden=8, grid_dim=6, grid_cells=4)).eval()
    img, cap = embed_split(model, split, vocab)
    relevance = np.zeros((40, 200), dtype=bool)
    relevance[split.caption_image, np.arange(200)] = True
    return model, img, cap, relevance.copy()


def test_detect_collapse_on_real_score_matrices() -> None:
    model, img, cap, rel = _tiny_scores()
    # learnt: each image embedded where its own captions are (their mean), scored by the model
    own = torch.stack([cap[rel[i]].mean(0) for i in range(len(rel))])
    learnt, _ = direction_scores(model, torch.nn.functional.normalize(own, dim=-1), cap)
    assert detect_collapse(learnt, rel) == "" and detect_collapse(learnt.T, rel.T) == ""
    # collapsed image encoder: every image gets the same embedding
    same = img.mean(0, keepdim=True).expand_as(img).contiguous()
    collapsed, _ = direction_scores(model, same, cap)
    assert "do not depend on the query" in detect_collapse(collapsed, rel)
    assert "tied across the gallery" in detect_collapse(collapsed.T, rel.T)
    # a ranking unrelated to the relevance (the learnt scores with the gallery shuffled): chance level
    shuffled = learnt[:, torch.from_numpy(np.random.default_rng(1).permutation(200))]
    assert detect_collapse(shuffled, rel).startswith("chance-level ranking")
    assert detect_collapse(shuffled) == ""  # without relevance only ties and query-independence are seen
    with pytest.raises(ValueError, match="non-empty"):
        detect_collapse(torch.zeros(3))


# ------------------------------------------------------------------------------ rendering


def test_claims_page_and_table_show_effect_interval_counts_pairing_and_margin(tmp_path: Path) -> None:
    judged = [judge(spec("superiority"), evidence_for("superiority", "held")),
              judge(spec("equivalence"), evidence_for("equivalence", "inconclusive")),
              judge(spec("trend"), {**evidence_for("trend", "held"), "C": seeds_only(1.0, 2.0, 3.0, seeds=(7, 8, 9))}),
              judge(spec("peak"), {m: dataclasses.replace(e, converged=m != "C") for m, e in
                                   evidence_for("peak", "held").items()})]
    frame = claims.judgements_frame(judged)
    assert list(frame.columns) == list(claims.COLUMNS)
    assert list(frame["verdict"]) == ["held", "inconclusive", "did not hold", "not tested"]
    assert list(frame["paired"]) == ["seed", "seed", "none", "none"] and frame["margin"].iloc[1] == 1.0
    assert frame["unconverged"].iloc[3] == "C" and math.isnan(frame["margin"].iloc[0])
    page = claims.render_claims(judged, "demo", profile="cpu", dataset="scenes")
    row = next(line for line in page.splitlines() if line.startswith("| 2 |"))
    eq = judged[1]
    low, high = claims.signed(eq.effect, eq.low, eq.high)[1:]
    assert f"[{low}, {high}]" in row and "| 3 / 0 |" in row and "| seed |" in row and "| 1 |" in row
    assert "Of 4 claims" in page and "1 held, 1 did not hold, 0 negligible, 1 inconclusive, 1 not tested." in page
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path / "res"), DATASET="scenes")
    csv = write_judgements(judged, "demo", "train", run)
    assert csv.name == "judgements_train.csv"
    back = pd.read_csv(csv)
    assert list(back["verdict"]) == list(frame["verdict"]) and back["low"].iloc[0] == pytest.approx(judged[0].low)


def test_three_seed_intervals_cover_the_true_effect_at_about_their_level() -> None:
    # 200 runs of a null effect whose noise is mostly between seeds (sd 1; queries 0.1): a plain percentile
    # bootstrap over 3 seeds covers 0 in about 77% of them (it cannot reach past the seeds' range); the t
    # interval on the bootstrap's standard error should come near its 95%
    rng = np.random.default_rng(123)
    covered = 0
    for _ in range(200):
        a = rng.normal(0, 1, (3, 1)) + rng.normal(0, 0.1, 50) + rng.normal(0, 0.1, (3, 50))
        j = judge(spec("superiority"), {"A": Evidence(SEEDS, a), "B": Evidence(SEEDS, np.zeros((3, 50)))})
        covered += j.low <= 0 <= j.high
    assert 0.9 <= covered / 200 <= 0.995


def test_seed_evidence_reads_a_per_run_table() -> None:
    per_run = pd.DataFrame({"model": ["A", "A", "B", "B"], "seed": [0, 1, 0, 1], "converged": [True, True, True, False],
                            "collapse": ["", "", "every query's scores are tied", np.nan],
                            "i2t": [10.0, 20.0, 30.0, 40.0], "t2i": [20.0, 30.0, 50.0, 60.0]})
    ev = claims.seed_evidence(per_run, ["i2t", "t2i"], split="test unseen")
    assert ev["A"].seeds == (0, 1) and ev["A"].per_seed.tolist() == [15.0, 25.0] and ev["A"].split == "test unseen"
    assert ev["A"].converged and ev["A"].collapse == ""
    assert not ev["B"].converged and ev["B"].collapse == "every query's scores are tied"
    with pytest.raises(KeyError, match="no column"):
        claims.seed_evidence(per_run, ["R@1"])
    per_run.loc[3, "i2t"] = np.nan  # a diverged run has no score: its model is not converged, never judged
    ev = claims.seed_evidence(per_run, ["i2t", "t2i"])
    j = judge(ClaimSpec("k", "t", "s", "superiority", "m", models=("A", "B")), ev)
    assert j.verdict == "not tested" and j.unconverged == ("B",)
    per_run.loc[1, "i2t"] = np.nan
    with pytest.raises(ValueError, match="model 'A', columns \\['i2t', 't2i'\\]: Evidence: non-finite value in seed row 1"):
        claims.seed_evidence(per_run, ["i2t", "t2i"])  # a converged run's missing value is an error, not skipped


def test_strata_weigh_each_stratum_equally_and_are_resampled_within() -> None:
    # 10 image queries at 80 and 40 caption queries at 20 (+- noise): the score is (80 + 20) / 2 = 50, not the
    # pooled mean 32; resampled within strata the mean's variance is sum_h var_pop(x_h) / (H^2 n_h), with none of
    # the between-strata spread a pooled resampling would add
    rng = np.random.default_rng(4)
    x = np.concatenate([80 + rng.normal(0, 3, 10), 20 + rng.normal(0, 3, 40)])[None, :]
    strata = np.array([0] * 10 + [1] * 40)
    e = Evidence((0,), x, strata=strata)
    assert e.per_seed[0] == pytest.approx((x[0, :10].mean() + x[0, 10:].mean()) / 2)
    v_query = claims._interval([e], np.array([1.0])).v_query
    assert v_query == pytest.approx((x[0, :10].var() / 10 + x[0, 10:].var() / 40) / 4)
    assert v_query == pytest.approx(resampled_variances(e)[1], rel=0.05)
    pooled = Evidence((0,), x)
    assert claims._interval([pooled], np.array([1.0])).v_query > 10 * v_query
    assert resampled_variances(pooled)[1] > 10 * v_query
    # paired by query only when both sides have the same strata, labelled as test sampling only
    j = judge(spec("superiority"), {"A": Evidence((0,), x + 1.0, strata=strata), "B": e})
    assert (j.paired, j.noise, j.verdict) == ("query", "queries (one seed: test sampling only)", "held")
    assert j.effect == pytest.approx(1.0) and j.low == pytest.approx(1.0) and j.high == pytest.approx(1.0)
    other = judge(spec("superiority"), {"A": Evidence((0,), x + 1.0, strata=1 - strata), "B": e})
    assert other.paired == "none"
    with pytest.raises(ValueError, match="strata must be"):
        Evidence((0,), x, strata=strata[:5])


def test_query_evidence_reads_per_query_arrays_one_stratum_a_column() -> None:
    per_run = pd.DataFrame({"model": ["A", "A"], "seed": [0, 1], "converged": [True, True],
                            "i2t": [np.array([10.0, 30.0]), np.array([20.0, 20.0])],
                            "t2i": [np.array([0.0, 0.0, 60.0]), np.array([30.0, 30.0, 30.0])]})
    e = claims.query_evidence(per_run, ["i2t", "t2i"])["A"]
    assert e.values.tolist() == [[10.0, 30.0, 0.0, 0.0, 60.0], [20.0, 20.0, 30.0, 30.0, 30.0]]
    assert e.strata.tolist() == [0, 0, 1, 1, 1]
    assert e.per_seed.tolist() == pytest.approx([(20.0 + 20.0) / 2, (20.0 + 30.0) / 2])
    per_run.at[1, "t2i"] = np.array([30.0, 30.0])
    with pytest.raises(ValueError, match="model 'A', columns \\['i2t', 't2i'\\]: the runs score different numbers"):
        claims.query_evidence(per_run, ["i2t", "t2i"])


def test_a_reason_shared_by_several_compared_groups_is_said_once() -> None:
    tied = "every query's scores are tied across the gallery"
    ev = {m: Evidence(SEEDS, np.array([1.0, 2.0, 3.0]), converged=False, collapse=tied) for m in "ABC"}
    j = judge(ClaimSpec("t", "t", "s", "trend", "m", models=("A", "B", "C")), ev)
    assert j.verdict == "not tested" and j.reason.endswith(f"(not tested: A, B, C did not converge; A, B, C collapsed "
                                                           f"({tied}))") and j.reason.count(tied) == 1
    u = judge(ClaimSpec("u", "t", "s", "universal", "m", pairs=(("A", "B"), ("A", "C"))), ev)
    assert u.reason.count(tied) == 1 and u.reason.startswith("A vs B: not tested; A vs C: not tested (not tested: ")


def test_run_evidence_reads_per_query_values_kept_beside_the_per_run_table() -> None:
    per_run = pd.DataFrame({"model": ["A", "A", "B"], "seed": [0, 1, 0], "converged": [True, True, False],
                            "collapse": ["", "", "tied"]})
    values = {("A", 0): [1.0, 3.0], ("A", 1): [5.0, 7.0], ("B", 0): [0.0, 0.0]}
    ev = claims.run_evidence(per_run, values, strata=np.array([0, 1]), split="test i2t")
    assert ev["A"].per_seed.tolist() == [2.0, 6.0] and ev["A"].split == "test i2t" and ev["A"].converged
    assert not ev["B"].converged and ev["B"].collapse == "tied"
    with pytest.raises(KeyError, match=r"no per-query values of 'A', seed\(s\) \[1\]"):
        claims.run_evidence(per_run, {k: v for k, v in values.items() if k != ("A", 1)})


def test_signed_keeps_small_effects_readable_on_one_scale():
    # by hand: two decimals down to 0.1; below, enough decimals for two significant digits of the largest magnitude
    assert claims.signed(-29.294, -39.75, 17.456) == ["-29.29", "-39.75", "+17.46"]
    assert claims.signed(0.5, -0.013) == ["+0.50", "-0.01"]
    assert claims.signed(0.000353, -2.58e-05, 0.0) == ["+0.00035", "-0.00003", "+0.00000"]
    assert claims.signed(0.0) == ["+0.00"] and claims.signed(math.nan, 0.05) == ["+nan", "+0.050"]


def test_the_claims_page_and_table_mark_what_holm_changes() -> None:
    """Three decided claims with p = 0.01, 0.04, 0.04: Holm keeps the first (3 x 0.01 = 0.03) and undoes the others
    (2 x 0.04 = 0.08); the page marks the two and counts before and after."""
    judged = [claims.Judgement(spec("superiority"), v, 1.0, 0.5, 1.5, "A − B", 3, 0, "seed", "seeds", p=p)
              for v, p in (("held", 0.01), ("held", 0.04), ("did not hold", 0.04))]
    frame = claims.judgements_frame(judged)
    assert list(frame["verdict after Holm"]) == ["held", "inconclusive", "inconclusive"]
    page = claims.render_claims(judged, "demo", profile="cpu", dataset="scenes")
    assert page.count("(after Holm over this table's claims: inconclusive)") == 2
    assert "After Holm's adjustment over them: 1 held, 0 did not hold, 0 negligible, 2 inconclusive" in page
    rows = claims.claim_rows(judged)
    assert rows["evidence"].str.contains("after Holm").tolist() == [False, True, True]
