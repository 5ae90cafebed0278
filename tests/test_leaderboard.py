"""The leaderboard's helpers (`xmr_core.chapters.leaderboard`): Fast Re-ranking tuned per direction on validation,
the rows of one model, the ceiling row, the table and the cross-method claims (hand-built seed values)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from fixtures.corpora import synthetic_split

from xmr_core.ceiling import bayes_ceiling
from xmr_core.chapters import leaderboard
from xmr_core.chapters.leaderboard import (
    METRICS,
    BookData,
    ceiling_row,
    cross_method_claims,
    heatmap_figure,
    leaderboard_rows,
    model_summary,
    same_test_split,
    tune_fast_rerank,
)
from xmr_core.chapters.protocols import ChapterData
from xmr_core.config import RunConfig
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import direction_scores, embed_split, evaluate_scores
from xmr_core.methods.registry import create_method
from xmr_core.results import universal_verdict
from xmr_core.similarity import FastReranker
from xmr_core.viz import column_scaled


def _split(name: str, n: int, seed: int):
    rng = np.random.default_rng(seed)
    split = synthetic_split(name, n, rng)
    return dataclasses.replace(split, grid=rng.standard_normal((n, 4, 6)).astype(np.float32)).validate()


VAL, TEST = _split("val", 6, 1), _split("test", 7, 2)
VOCAB = Vocabulary.build(VAL.captions + TEST.captions)
VECTORS = np.random.default_rng(3).standard_normal((len(VOCAB), 8)).astype(np.float32)


def _model():
    torch.manual_seed(0)
    return create_method("vse", VECTORS, embed_dim=8, text=TextEncoderConfig(hidden=8),
                         image=ImageEncoderConfig(kind="grid", hidden=8, grid_dim=6, grid_cells=4)).eval()


def _rsum(values: dict[str, float], direction: str) -> float:
    return sum(values[f"instance/{direction}/R@{k}"] for k in (1, 5, 10))


def test_fast_rerank_is_tuned_per_direction_on_validation():
    model = _model()
    grid = (0.5, 5.0, 50.0)
    reranker, search = tune_fast_rerank(model, VAL, VOCAB, "cpu", grid)
    img, cap = embed_split(model, VAL, VOCAB)
    i2t, t2i = direction_scores(model, img, cap)
    # brute force: every (gamma, lambda) pair of the grid, untied; each direction's sum must depend on its pair only
    by_gamma = {g: [] for g in grid}
    by_lam = {lam: [] for lam in grid}
    for g in grid:
        for lam in grid:
            r = FastReranker((g, g), (lam, lam))
            values = evaluate_scores(VAL, r(i2t, "i2t"), views=["instance"], scores_t2i=r(t2i.T, "t2i").T)
            by_gamma[g].append(_rsum(values, "i2t"))
            by_lam[lam].append(_rsum(values, "t2i"))
    assert all(len(set(v)) == 1 for v in by_gamma.values()) and all(len(set(v)) == 1 for v in by_lam.values())
    assert list(search["i2t"]) == pytest.approx([by_gamma[g][0] for g in grid])
    assert list(search["t2i"]) == pytest.approx([by_lam[lam][0] for lam in grid])
    best_g = max(grid, key=lambda g: (by_gamma[g][0], -grid.index(g)))
    best_l = max(grid, key=lambda lam: (by_lam[lam][0], -grid.index(lam)))
    assert reranker.gamma == (best_g, best_g) and reranker.lam == (best_l, best_l)
    with pytest.raises(ValueError, match="empty temperature grid"):
        tune_fast_rerank(model, VAL, VOCAB, "cpu", ())


def test_leaderboard_rows_score_the_model_and_its_reranked_scores_on_test():
    model = _model()
    data = ChapterData(VAL, VAL, TEST, TEST, VOCAB, VECTORS, 1.0)
    plain, fr = leaderboard_rows("VSE0", 3, model, data, "cpu", converged=True, grid=(1.0, 10.0))
    img, cap = embed_split(model, TEST, VOCAB)
    i2t, _ = direction_scores(model, img, cap)
    direct = evaluate_scores(TEST, i2t, views=["instance", "exact", "plausible", "class"])
    assert {col: plain[col] for col in METRICS} == pytest.approx({col: direct[key] for col, key in METRICS.items()})
    assert plain["% of ceiling"] == pytest.approx(100 * direct["rsum"] / bayes_ceiling(TEST)["rsum"])
    reranker = FastReranker((fr["FR gamma"],) * 2, (fr["FR lambda"],) * 2)
    reranked = evaluate_scores(TEST, reranker(i2t, "i2t"), views=["instance"], scores_t2i=reranker(i2t.T, "t2i").T)
    assert fr["rSum"] == pytest.approx(reranked["rsum"])
    assert (plain["model"], fr["model"], plain["FR"], fr["FR"]) == ("VSE0", "VSE0 + FR", False, True)
    assert fr["base model"] == "VSE0" and fr["seed"] == 3 and np.isnan(plain["FR gamma"])


def test_ceiling_row_is_the_bayes_ceiling_and_the_table_puts_it_first():
    row = ceiling_row(TEST)
    ceiling = bayes_ceiling(TEST)
    assert row["i2t R@1"] == ceiling["i2t/R@1"] and row["t2i R@10"] == ceiling["t2i/R@10"]
    assert row["rSum"] == ceiling["rsum"] and row["% of ceiling"] == 100.0 and np.isnan(row["i2t PMRP"])
    per_run = pd.DataFrame([{"model": m, "protocol": p, "FR": False, "seed": s,
                             **{c: v for c in [*METRICS, "% of ceiling"]}}
                            for m, p, vals in (("A", "zero-shot, grid", (1.0, 3.0)), ("B", "all classes, regions", (5.0,)))
                            for s, v in enumerate(vals)])
    table = model_summary(per_run, TEST)
    assert list(table["model"]) == ["Bayes ceiling", "A", "B"]
    assert list(table["protocol"]) == ["", "zero-shot, grid", "all classes, regions"]
    assert list(table["seeds"]) == [0, 2, 1]
    assert table.loc[1, "rSum"] == 2.0 and table.loc[2, "t2i PMRP"] == 5.0


@pytest.mark.parametrize("verdicts, expected", [
    (["held", "held"], "held"),
    (["held", "within noise"], "within noise"),
    (["held", "not tested", "within noise"], "not tested"),
    (["held", "not tested", "did not hold"], "did not hold"),
    ([], "not tested"),
])
def test_a_claim_about_every_model_is_refuted_by_one_counterexample(verdicts, expected):
    assert universal_verdict(verdicts) == expected


def _runs(values: dict[str, list[float]], col: str, converged: bool = True) -> list[dict]:
    return [{"model": m, "FR": m.endswith("+ FR"), "seed": s, "converged": converged, col: v}
            for m, vs in values.items() for s, v in enumerate(vs)]


def test_cross_method_claims_on_hand_built_seeds():
    pmrp = {"VSE0": [40, 41, 42], "PCME mu only": [45, 45.5, 46], "PCME": [50, 51, 52], "MSRM": [55, 56, 57]}
    rows = [{**r, "t2i PMRP": r["i2t PMRP"]} for r in _runs(pmrp, "i2t PMRP")]
    # rSum: MSRM above PCME by 1 with seed std 1 -> within noise; FR: +3 on VSE0 (std 1) but -5 on PCME
    rsum = {"VSE0": [100, 101, 102], "VSE0 + FR": [103, 104, 105], "PCME mu only": [90, 90, 90],
            "PCME mu only + FR": [95, 95, 95], "PCME": [110, 111, 112], "PCME + FR": [105, 106, 107],
            "MSRM": [111, 112, 113], "MSRM + FR": [120, 120, 120],
            # HREM over VSE++ (its relation-free base): fusion +10 (std 1) held, standalone +1 within noise
            "VSE++": [80, 81, 82], "HREM fusion": [90, 91, 92], "HREM standalone": [81, 82, 83]}
    frame = pd.DataFrame(rows).merge(pd.DataFrame(_runs(rsum, "rSum")), how="outer",
                                     on=["model", "FR", "seed", "converged"])
    claims = {c.source: c for c in cross_method_claims(frame)}
    prob, rel, fr = claims["PCME Sec. 5, MSRM Sec. 4.3"], claims["MSRM Sec. 3.3, HREM Sec. 4"], \
        claims["DVSE Sec. IV-D, Table IV"]
    # best deterministic = PCME mu only (45.5): PCME +5.5, MSRM +10.5, both beyond spread 1 -> held
    assert prob.verdict == "held"
    assert "PCME - PCME mu only = +5.50" in prob.evidence and "MSRM - PCME mu only = +10.50" in prob.evidence
    assert rel.verdict == "within noise" and "MSRM - PCME = +1.00 (spread 1.00): within noise" in rel.evidence
    assert "HREM fusion - VSE++ = +10.00 (spread 1.00): held" in rel.evidence
    assert "HREM standalone - VSE++ = +1.00 (spread 1.00): within noise" in rel.evidence
    assert fr.verdict == "did not hold" and "PCME + FR - PCME = -5.00" in fr.evidence


def test_claims_on_unconverged_models_are_not_tested():
    pmrp = {"VSE0": [40, 41, 42], "PCME": [50, 51, 52]}
    frame = pd.DataFrame(_runs(pmrp, "i2t PMRP", converged=False))
    frame["t2i PMRP"], frame["rSum"] = frame["i2t PMRP"], frame["i2t PMRP"]
    claims = cross_method_claims(frame)
    assert claims[0].verdict == "not tested" and claims[2].verdict == "not tested"
    assert "no relation-modelling model" in claims[1].evidence


def test_score_book_scores_every_model_and_seed_in_book_order(monkeypatch):
    trained = []

    def train(chapter, name, k, data, tuned, enc, run, seed):
        trained.append((chapter, name, k, seed, data, enc["e"]))
        return f"{name}{k}", SimpleNamespace(converged=seed == 0, cached=True)

    def rows(label, seed, model, data, device, converged):
        return [{"model": label, "seed": seed, "built": model, "data": data, "converged": converged}]

    monkeypatch.setattr(leaderboard, "BOOK_MODELS", [("pcme", "PVSE", 2), ("hrem", "HREM fusion", 1)])
    monkeypatch.setattr(leaderboard, "train_book_model", train)
    monkeypatch.setattr(leaderboard, "leaderboard_rows", rows)
    book = BookData(grid="grid data", grid_enc={"e": "grid"}, regions="region data", region_enc={"e": "regions"})
    out = leaderboard.score_book([0, 1], book, {}, RunConfig.from_params(PROFILE="smoke", DEVICE="cpu"))
    # each chapter's model is trained and scored on its own protocol's data and encoders
    assert trained == [("pcme", "PVSE", 2, 0, "grid data", "grid"), ("pcme", "PVSE", 2, 1, "grid data", "grid"),
                       ("hrem", "HREM fusion", 1, 0, "region data", "regions"),
                       ("hrem", "HREM fusion", 1, 1, "region data", "regions")]
    grid, regions = "zero-shot, grid", "all classes, regions"
    assert out.to_dict("records") == [
        {"model": "PVSE K=2", "seed": 0, "built": "PVSE2", "data": "grid data", "converged": True, "protocol": grid},
        {"model": "PVSE K=2", "seed": 1, "built": "PVSE2", "data": "grid data", "converged": False, "protocol": grid},
        {"model": "HREM fusion", "seed": 0, "built": "HREM fusion1", "data": "region data", "converged": True,
         "protocol": regions},
        {"model": "HREM fusion", "seed": 1, "built": "HREM fusion1", "data": "region data", "converged": False,
         "protocol": regions}]


def test_the_region_dvse_is_the_dvse_chapters_region_run_with_its_own_protocol(monkeypatch):
    calls = []

    def train(name, k, data, tuned, enc, run, seed, config=None):
        calls.append((name, k, seed, config))
        return "model", SimpleNamespace(converged=True, cached=True)

    monkeypatch.setattr(leaderboard.dvse_chapter, "train_model", train)
    monkeypatch.setattr(leaderboard.dvse_chapter, "region_config", lambda data, tuned, enc: ("regions of", data))
    for name in ("DVSE", "DVSE (regions)"):
        leaderboard.train_book_model("dvse", name, 1, "grid data", {}, {}, None, 2)
    # the plain DVSE is the chapter's compared model; the region DVSE is DVSE at the region config, same seed
    assert calls == [("DVSE", 1, 2, None), ("DVSE", 1, 2, ("regions of", "grid data"))]
    monkeypatch.setattr(leaderboard, "BOOK_MODELS", [("dvse", "DVSE", 1), ("dvse", "DVSE (regions)", 1)])
    monkeypatch.setattr(leaderboard, "leaderboard_rows",
                        lambda label, seed, model, data, device, converged: [{"model": label}])
    book = BookData(grid="grid data", grid_enc={}, regions="region data", region_enc={})
    out = leaderboard.score_book([0], book, {}, RunConfig.from_params(PROFILE="smoke", DEVICE="cpu"))
    assert out.to_dict("records") == [{"model": "DVSE", "protocol": "zero-shot, grid"},
                                      {"model": "DVSE (regions)", "protocol": "zero-shot, regions"}]


def test_the_leaderboard_refuses_test_splits_that_differ():
    same_test_split(TEST, dataclasses.replace(TEST, name="test-regions"))  # same images and captions: fine
    other = dataclasses.replace(TEST, captions=[*TEST.captions[:-1], TEST.captions[-1] + " again"])
    with pytest.raises(ValueError, match="'test' and 'test' differ in captions"):
        same_test_split(TEST, other)
    shuffled = dataclasses.replace(TEST, image_ids=list(reversed(TEST.image_ids)))
    with pytest.raises(ValueError, match="differ in image_ids"):
        same_test_split(TEST, shuffled)


def test_heatmap_figure_draws_the_models_and_names_the_ceiling():
    per_run = pd.DataFrame([{"model": m, "protocol": "p", "FR": False, "seed": 0,
                             **{c: v for c in [*METRICS, "% of ceiling"]}} for m, v in (("A", 1.0), ("B", 5.0))])
    fig = heatmap_figure(model_summary(per_run, TEST), "scenes")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["A", "B"]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == f"i2t R@1\n(ceiling {bayes_ceiling(TEST)['i2t/R@1']:.1f})"
    assert labels[-1] == "% of ceiling" and "i2t PMRP" in labels  # no ceiling computed for the other views
    assert ax.get_title().startswith("The book's models on one scenes test split")
    plt.close(fig)


def test_column_scaled_maps_each_column_onto_unit_interval():
    scaled = column_scaled(np.array([[1.0, 5.0, np.nan], [3.0, 5.0, 2.0], [2.0, 5.0, 4.0]]))
    expected = np.array([[0.0, 0.5, np.nan], [1.0, 0.5, 0.0], [0.5, 0.5, 1.0]])
    np.testing.assert_allclose(scaled, expected, equal_nan=True)
