"""The leaderboard's helpers (`xmr_core.chapters.leaderboard`): Fast Re-ranking tuned per direction on validation,
the rows of one model, the ceiling row, the table and the cross-method claims (constructed per-query values)."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from fixtures import recorded_runs
from fixtures.corpora import synthetic_split

from xmr_core.ceiling import bayes_ceiling
from xmr_core.chapters import leaderboard
from xmr_core.chapters.leaderboard import (
    BOOK_LABELS,
    CLAIMS,
    FR_SCORING,
    METRICS,
    PMRP,
    RSUM,
    BookData,
    board_evidence,
    board_rows,
    ceiling_row,
    cross_method_judgements,
    heatmap_figure,
    model_summary,
    record_board_model,
    same_test_split,
    tune_fast_rerank,
)
from xmr_core.claims import Evidence, can_fail, universal_verdict
from xmr_core.config import RunConfig
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import direction_scores, embed_split, evaluate_scores
from xmr_core.experiment import run_records
from xmr_core.experiment.compared import DVSE_COMPARED
from xmr_core.experiment.protocols import ChapterData
from xmr_core.methods.registry import create_method
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


def test_board_rows_read_the_models_record_with_and_without_fast_reranking(tmp_path, monkeypatch):
    model, result = recorded_runs.trained(tmp_path / "runs")
    test, val = recorded_runs.TEST, recorded_runs.VAL
    data = ChapterData(val, val, test, test, recorded_runs.VOCAB, recorded_runs.VECTORS, 1.0)
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(tmp_path / "results"))
    record = record_board_model(model, result, 0, data, run, grid=(1.0, 10.0))
    plain, fr = board_rows("VSE0", record, bayes_ceiling(test)["rsum"])
    # the model's own scores and its re-ranked scores, scored the old way: evaluate_scores of the model's scores
    img, cap = embed_split(model, test, recorded_runs.VOCAB)
    i2t, t2i = direction_scores(model, img, cap)
    views = ["instance", "exact", "plausible", "class"]
    direct = evaluate_scores(test, i2t, views=views, scores_t2i=t2i)
    reranker, _ = tune_fast_rerank(model, val, recorded_runs.VOCAB, "cpu", (1.0, 10.0))
    reranked = evaluate_scores(test, reranker(i2t, "i2t"), views=views, scores_t2i=reranker(t2i.T, "t2i").T)
    for row, values in ((plain, direct), (fr, reranked)):
        assert {col: row[col] for col in METRICS} == pytest.approx({col: values[key] for col, key in METRICS.items()},
                                                                   rel=1e-9)
        assert row["% of ceiling"] == pytest.approx(100 * values["rsum"] / bayes_ceiling(test)["rsum"])
    assert (fr["FR gamma"], fr["FR lambda"]) == (reranker.gamma[0], reranker.lam[0]) and np.isnan(plain["FR gamma"])
    assert record.tuning[FR_SCORING]["grid"] == [1.0, 10.0]
    assert (plain["model"], fr["model"], plain["FR"], fr["FR"]) == ("VSE0", "VSE0 + FR", False, True)
    assert fr["base model"] == "VSE0" and fr["seed"] == 0 and plain["collapse"] == fr["collapse"]
    assert plain["record"] == fr["record"] == record.name
    # the claims' per-query values: the mean of the image and the caption queries' means is the row's rSum / PMRP
    evidence = {metric: build() for metric, build in board_evidence({("VSE0", 0): record}).items()}
    n = test.n_images
    for metric, name, expected in ((RSUM, "VSE0", plain["rSum"]), (RSUM, "VSE0 + FR", fr["rSum"]),
                                   (PMRP, "VSE0", (plain["i2t PMRP"] + plain["t2i PMRP"]) / 2)):
        v = evidence[metric][name].values[0]
        assert v.shape == (n + test.n_captions,) and (v[:n].mean() + v[n:].mean()) / 2 == pytest.approx(expected)
    # recorded again: read back, the model not used (no scoring, no tuning)
    monkeypatch.setattr(run_records, "evaluate_run", lambda *a, **k: pytest.fail("scored again"))
    monkeypatch.setattr(leaderboard, "tune_fast_rerank", lambda *a, **k: pytest.fail("tuned again"))
    assert record_board_model(None, result, 0, data, run, grid=(1.0, 10.0)).name == record.name


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
    (["held", "inconclusive"], "inconclusive"),
    (["held", "not tested", "inconclusive"], "not tested"),
    (["held", "not tested", "did not hold"], "did not hold"),
    ([], "not tested"),
])
def test_a_claim_about_every_model_is_refuted_by_one_counterexample(verdicts, expected):
    assert universal_verdict(verdicts) == expected


def test_every_cross_method_claim_can_hold_and_fail():
    assert [can_fail(spec) for spec in CLAIMS] == [""] * len(CLAIMS)
    fr = next(s for s in CLAIMS if s.key == "fr-improves-any")
    assert fr.pairs == tuple((f"{m} + FR", m) for m in BOOK_LABELS)  # every model of the board


def _book_runs(levels: dict[str, float], unconverged: str = "", collapsed: str = "", n: int = 60) -> dict:
    """{claim metric: a function returning {model: Evidence}} (`board_evidence`'s shape): three seeds of every model
    of `levels`; each query's value is its level + a shared per-query pattern + a per-seed shift + small noise, both
    metrics, images and captions as two strata."""
    rng = np.random.default_rng(0)
    pattern = rng.normal(0, 5, size=2 * n)
    evidence = {m: Evidence((0, 1, 2), np.stack([level + pattern + s + rng.normal(0, 0.5, size=2 * n)
                                                  for s in range(3)]),
                            split="test, whole split", converged=m != unconverged,
                            collapse="chance-level ranking" if m == collapsed else "", strata=np.repeat([0, 1], n))
                for m, level in levels.items()}
    return {metric: lambda: evidence for metric in {spec.metric for spec in CLAIMS}}


def test_cross_method_judgements_on_constructed_runs():
    run = RunConfig.from_params(PROFILE="smoke")
    levels = {"VSE0": 40.0, "PVSE K=1": 41.0, "PVSE K=2": 42.0, "PVSE K=4": 43.0, "PCME mu only": 45.0,
              "DVSE": 44.0, "PCME": 50.0, "MSRM": 55.0, "VSE++": 80.0, "HREM standalone": 90.0, "HREM fusion": 91.0,
              "DVSE (regions)": 30.0, "GPO": 85.0}
    levels |= {f"{m} + FR": v + 3.0 for m, v in levels.items()}
    judged = {j.spec.key: j for j in cross_method_judgements(_book_runs(levels), run)}
    assert [judged[k].verdict for k in ("pcme-pmrp-over-deterministic", "msrm-pmrp-over-deterministic",
                                        "relations-help", "fr-improves-any")] == ["held"] * 4
    # PCME against the best deterministic model (PCME mu only, 45): +5; the shared seeds and queries cancel
    pcme = judged["pcme-pmrp-over-deterministic"]
    assert pcme.effect == pytest.approx(5.0, abs=0.3) and pcme.paired == "seed+query"
    assert judged["fr-improves-any"].effect == pytest.approx(3.0, abs=0.3)  # the weakest model's gain
    # one model that FR makes worse refutes "FR improves any model"; MSRM below PCME refutes "relations help"
    worse = levels | {"PCME + FR": 45.0, "MSRM": 48.0, "MSRM + FR": 51.0}
    judged = {j.spec.key: j for j in cross_method_judgements(_book_runs(worse), run)}
    assert judged["fr-improves-any"].verdict == "did not hold" and judged["relations-help"].verdict == "did not hold"
    assert "PCME + FR vs PCME: did not hold" in judged["fr-improves-any"].reason
    assert judged["msrm-pmrp-over-deterministic"].verdict == "held"  # 48 against 45
    # unconverged / collapsed runs leave every claim on them untested
    judged = {j.spec.key: j for j in cross_method_judgements(_book_runs(levels, unconverged="PCME",
                                                                        collapsed="VSE++"), run)}
    assert judged["pcme-pmrp-over-deterministic"].verdict == "not tested"
    assert judged["relations-help"].verdict == "not tested" and judged["relations-help"].collapsed == ("VSE++",)
    assert judged["msrm-pmrp-over-deterministic"].verdict == "held"


def test_cross_method_claims_without_a_model_are_not_tested():
    levels = {"VSE0": 40.0, "PCME": 50.0, "VSE0 + FR": 43.0, "PCME + FR": 53.0}
    judged = cross_method_judgements(_book_runs(levels), RunConfig.from_params(PROFILE="smoke"))
    assert {j.verdict for j in judged} == {"not tested"} and "this run has no" in judged[0].reason


def test_score_book_scores_every_model_and_seed_in_book_order(monkeypatch):
    trained = []

    def request(chapter, name, k, data, tuned, enc, run, seed):
        trained.append((chapter, name, k, seed, data, enc["e"]))
        return trained[-1]

    def train_many(requests, run):  # the batch: every model and seed, in book order
        assert list(requests) == trained
        return [(f"{name}{k}", SimpleNamespace(converged=seed == 0, cached=True)) for _, name, k, seed, _, _ in requests]

    def record(model, result, seed, data, run):
        return SimpleNamespace(name=f"{model}-{seed}", model=model, data=data, converged=result.converged, seed=seed)

    def rows(label, record, ceiling):
        return [{"model": label, "seed": record.seed, "built": record.model, "data": record.data,
                 "converged": record.converged}]

    monkeypatch.setattr(leaderboard, "BOOK_MODELS", [("pcme", "PVSE", 2), ("hrem", "HREM fusion", 1)])
    monkeypatch.setattr(leaderboard, "request_book_model", request)
    monkeypatch.setattr(leaderboard, "train_many", train_many)
    monkeypatch.setattr(leaderboard, "record_board_model", record)
    monkeypatch.setattr(leaderboard, "board_rows", rows)
    monkeypatch.setattr(leaderboard, "ceiling_rsum", lambda test: None)
    grid_data, region_data = SimpleNamespace(test="grid test"), SimpleNamespace(test="region test")
    book = BookData(grid=grid_data, grid_enc={"e": "grid"}, regions=region_data, region_enc={"e": "regions"})
    out = leaderboard.score_book([0, 1], book, {}, RunConfig.from_params(PROFILE="smoke", DEVICE="cpu"))
    # each chapter's model is trained and scored on its own protocol's data and encoders
    assert trained == [("pcme", "PVSE", 2, 0, grid_data, "grid"), ("pcme", "PVSE", 2, 1, grid_data, "grid"),
                       ("hrem", "HREM fusion", 1, 0, region_data, "regions"),
                       ("hrem", "HREM fusion", 1, 1, region_data, "regions")]
    grid, regions = "zero-shot, grid", "all classes, regions"
    assert {k: r.name for k, r in out.records.items()} == {
        ("PVSE K=2", 0): "PVSE2-0", ("PVSE K=2", 1): "PVSE2-1", ("HREM fusion", 0): "HREM fusion1-0",
        ("HREM fusion", 1): "HREM fusion1-1"}
    assert out.per_run.to_dict("records") == [
        {"model": "PVSE K=2", "seed": 0, "built": "PVSE2", "data": grid_data, "converged": True, "protocol": grid},
        {"model": "PVSE K=2", "seed": 1, "built": "PVSE2", "data": grid_data, "converged": False, "protocol": grid},
        {"model": "HREM fusion", "seed": 0, "built": "HREM fusion1", "data": region_data, "converged": True,
         "protocol": regions},
        {"model": "HREM fusion", "seed": 1, "built": "HREM fusion1", "data": region_data, "converged": False,
         "protocol": regions}]


def test_the_region_dvse_is_the_dvse_chapters_region_run_with_its_own_protocol(monkeypatch):
    calls = []

    def request(name, k, data, tuned, enc, run, seed, compared):
        calls.append((name, k, seed, enc["image"].kind, compared["DVSE"]))
        return calls[-1]

    monkeypatch.setattr(leaderboard, "request_model", request)
    monkeypatch.setattr(leaderboard, "train_many", lambda requests, run: [("model", SimpleNamespace(
        converged=True, cached=True)) for _ in requests])
    grid_data = SimpleNamespace(test=SimpleNamespace(regions=np.zeros((2, 3, 7), np.float32)))
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu")
    for name in ("DVSE", "DVSE (regions)"):
        leaderboard.train_book_model("dvse", name, 1, grid_data, {}, {"image": ImageEncoderConfig(kind="grid")}, run, 2)
    # the plain DVSE is the chapter's compared model; the region DVSE is the same compared DVSE on the region
    # features' encoders (`region_encoders`), same seed
    assert calls == [("DVSE", 1, 2, "grid", DVSE_COMPARED), ("DVSE", 1, 2, "regions", DVSE_COMPARED)]
    monkeypatch.setattr(leaderboard, "BOOK_MODELS", [("dvse", "DVSE", 1), ("dvse", "DVSE (regions)", 1)])
    monkeypatch.setattr(leaderboard, "record_board_model", lambda model, result, seed, data, run: None)
    monkeypatch.setattr(leaderboard, "board_rows", lambda label, record, ceiling: [{"model": label}])
    monkeypatch.setattr(leaderboard, "ceiling_rsum", lambda test: None)
    book = BookData(grid=grid_data, grid_enc={"image": ImageEncoderConfig(kind="grid")}, regions="region data",
                    region_enc={})
    out = leaderboard.score_book([0], book, {}, run)
    assert out.per_run.to_dict("records") == [{"model": "DVSE", "protocol": "zero-shot, grid"},
                                      {"model": "DVSE (regions)", "protocol": "zero-shot, regions"}]


def test_the_leaderboard_refuses_test_splits_that_differ():
    same_test_split(TEST, dataclasses.replace(TEST, name="test-regions"))  # same images and captions: fine
    other = dataclasses.replace(TEST, captions=[*TEST.captions[:-1], TEST.captions[-1] + " again"])
    n = len(TEST.captions)
    with pytest.raises(ValueError, match=rf"of {re.escape(TEST.source)} and that of {re.escape(TEST.source)} differ in captions \(record "
                                         rf"{n - 1}; {n} against {n}\)"):
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
