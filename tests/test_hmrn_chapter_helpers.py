"""The HMRN chapter's helpers (xmr_core.chapters.hmrn): data protocol, score fusion, table layouts, the figures'
tensors and the claim rules, each against values worked out by hand or by brute force here."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch
from fixtures.corpora import synthetic_split

from xmr_core.chapters import hmrn as chapter
from xmr_core.config import RunConfig
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import multi_query_scores
from xmr_core.methods.hmrn import HMRN, HMRNEnsemble
from xmr_core.tuning import TuningResult

SPLIT = synthetic_split("test", 6, np.random.default_rng(0))  # image i holds 1 + i % 3 queries
VOCAB = Vocabulary.build([q for qs in SPLIT.queries for q in qs])
VECTORS = np.random.default_rng(1).standard_normal((len(VOCAB), 5)).astype(np.float32)
ENC = {"embed_dim": 8, "image": ImageEncoderConfig(kind="regions", region_dim=4), "text": TextEncoderConfig(hidden=8)}


def _tuned(tau: float = 40.0) -> dict[str, TuningResult]:
    return {m: TuningResult(m, "tau", 1e-3, tau, []) for m in chapter.MODELS}


def _model(name: str, seed: int = 0) -> HMRN:
    torch.manual_seed(seed)
    return HMRN(chapter.tuned_config(name, ENC, _tuned()), VECTORS).eval()


# ---------------------------------------------------------------------------------------------- data
def test_queries_as_captions_makes_each_query_a_caption_of_its_image():
    out = chapter.queries_as_captions(SPLIT.subset([0, 1, 2], "three"))
    # image 0 holds one query, image 1 two, image 2 three
    assert out.captions == ["object 0 of image 0", "object 0 of image 1", "object 1 of image 1",
                            "object 0 of image 2", "object 1 of image 2", "object 2 of image 2"]
    assert out.caption_image.tolist() == [0, 1, 1, 2, 2, 2]
    assert out.caption_ids[2] == "test_001#q1"
    assert out.exact is None and out.caption_level is None
    assert out.queries == SPLIT.queries[:3] and out.n_images == 3


def test_queries_as_captions_needs_queries():
    with pytest.raises(ValueError, match="no region queries"):
        chapter.queries_as_captions(dataclasses.replace(SPLIT, queries=None))


def test_first_images_keeps_the_first_n_or_the_whole_split():
    assert chapter.first_images(SPLIT, None) is SPLIT
    assert chapter.first_images(SPLIT, 10) is SPLIT
    two = chapter.first_images(SPLIT, 2)
    assert two.image_ids == SPLIT.image_ids[:2] and two.queries == SPLIT.queries[:2]


def test_gallery_queries_is_none_without_logical_forms():
    assert chapter.gallery_queries(SPLIT, None) is None


def test_rounds_of_is_the_longest_set_up_to_ten():
    assert chapter.rounds_of(SPLIT) == 3  # sets of 1, 2, 3 queries


def test_encoders_per_profile():
    assert [chapter.hmrn_encoders(p, 68)["embed_dim"] for p in ("smoke", "cpu", "paper")] == [32, 64, 256]
    assert chapter.hmrn_encoders("cpu", 68)["text"].hidden == 64
    with pytest.raises(ValueError, match="region_dim"):
        chapter.hmrn_encoders("cpu", 0)


# ---------------------------------------------------------------------------------------------- configs
def test_the_cpu_recipe_trains_every_model_at_batch_32():
    assert chapter.hmrn_train_config("cpu", 1e-3).batch_size == 32
    assert chapter.hmrn_train_config("paper", 1e-3).batch_size == 128  # the shared paper recipe, unchanged
    assert chapter.hmrn_train_config("cpu", 1e-3, batch_size=8).batch_size == 8


def test_tuned_config_is_the_local_direction_at_the_tuned_tau_with_changes():
    cfg = chapter.tuned_config(chapter.TI, ENC, _tuned(80.0), icr_steps=1)
    assert (cfg.local, cfg.tau, cfg.icr_steps, cfg.lambda2) == ("T-I", 80.0, 1, 15.0)


def test_r_re_r_hre_and_drill_down_are_tuned_on_vse0_s_margin_grid_and_hmrn_on_tau():
    from xmr_core.methods.drilldown import DrillDown
    from xmr_core.methods.recurrent_sets import RHRE, RRE

    grids = {name: (c.weight_name, c.weights, c.default) for name, c in chapter.compared().items()}
    assert grids == {chapter.IT: ("tau", (20.0, 40.0, 80.0), 40.0), chapter.TI: ("tau", (20.0, 40.0, 80.0), 40.0),
                     chapter.RE: ("margin", (0.1, 0.2, 0.4), 0.2), chapter.HRE: ("margin", (0.1, 0.2, 0.4), 0.2),
                     chapter.DRILL: ("margin", (0.1, 0.2, 0.4), 0.2)}
    re_model = chapter.compared()[chapter.RE].build(ENC, VECTORS, 0.4, 1)
    hre_model = chapter.compared()[chapter.HRE].build(ENC, VECTORS, 0.1, 1)
    assert type(re_model) is RRE and type(hre_model) is RHRE
    assert (re_model.config.margin, hre_model.config.margin, re_model.config.embed_dim) == (0.4, 0.1, 8)
    drill = chapter.compared()[chapter.DRILL].build(ENC, VECTORS, 0.1, 1)
    assert type(drill) is DrillDown and (drill.config.margin, drill.config.n_states, drill.config.lam) == (0.1, 3, 9.0)


def test_table6_pairs_keep_the_paper_proportions_of_local_and_global():
    cfg = chapter.tuned_config(chapter.IT, ENC, _tuned(), **chapter.TABLE6["S_I-T + S_G"][1])
    weights = cfg.level_weights()
    assert weights["reasoning"] == 0.0
    assert weights["local"] / weights["global"] == pytest.approx(0.4 / 0.2)  # α : (1 - α - β) of the paper


def test_sweep_settings_always_hold_the_default():
    assert chapter.sweep_settings("smoke", chapter.TI, "lambda", _tuned()) == [{"lambda2": 15.0}]
    assert chapter.sweep_settings("smoke", chapter.IT, "tau", _tuned(80.0)) == [{"tau": 20.0}, {"tau": 40.0},
                                                                                 {"tau": 80.0}]
    assert {"alpha": 0.4, "beta": 0.4} in chapter.sweep_settings("cpu", chapter.IT, "alpha_beta", _tuned())
    with pytest.raises(ValueError, match="kind"):
        chapter.sweep_settings("cpu", chapter.IT, "gamma", _tuned())


def test_training_runs_count_the_tuning_budget():
    smoke, cpu = chapter.training_runs("smoke"), chapter.training_runs("cpu", 3)
    # smoke: one learning rate and the default weight for each of the 6 tuned models (HMRN I-T, T-I, R-RE, R-HRE,
    # Drill-down, VSE0)
    assert smoke["runs"].iloc[0] == 6 and smoke["runs"].iloc[1] == 0
    # cpu: 3 learning rates + 2 other weights, 6 models; then 2 more seeds of each
    assert cpu["runs"].iloc[0] == 30 and cpu["runs"].iloc[1] == 12
    # Figure 6 on cpu reuses the tuning grid's runs: nothing new
    assert cpu.loc[cpu["part"].str.startswith("Figure 6"), "runs"].item() == 0
    # Table 9: one jointly trained model, every ablation seed (3 on cpu, 1 on smoke)
    assert cpu.loc[cpu["part"].str.startswith("Table 9"), "runs"].item() == 3
    assert smoke.loc[smoke["part"].str.startswith("Table 9"), "runs"].item() == 1


# ---------------------------------------------------------------------------------------------- scores
def test_the_ensemble_of_stored_scores_is_eq17_scored_by_hmrn_ensemble():
    it, ti = _model(chapter.IT), _model(chapter.TI, 1)
    a = chapter.score_rounds(it, SPLIT, VOCAB, "cpu")
    b = chapter.score_rounds(ti, SPLIT, VOCAB, "cpu")
    both = multi_query_scores(HMRNEnsemble(it, ti), SPLIT, VOCAB, 3, short="hold")
    assert torch.allclose(chapter.ensemble_scores(a, b).scores, both, atol=1e-5)
    assert chapter.ensemble_scores(a, b).seconds == pytest.approx(a.seconds + b.seconds)


def test_run_row_ranks_by_hand():
    # 2 rounds, 3 sets, 3 images; set q's target is image q
    scores = torch.tensor([[[3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [0.0, 0.0, 5.0]],
                           [[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [0.0, 0.0, 5.0]]])
    row = chapter.run_row("m", 0, True, chapter.RoundScores(scores, 1.0))
    # round 1 ranks: 1, 2, 1 -> R@1 = 2/3; round 2 ranks: 1, 1, 1
    assert row["round1/R@1"] == pytest.approx(200 / 3)
    assert row["round2/R@1"] == pytest.approx(100.0)
    assert row["round1/meanR"] == pytest.approx(4 / 3)
    assert row["mean/R@1"] == pytest.approx((200 / 3 + 100) / 2)
    assert row["rsum"] == pytest.approx((200 / 3 + 100) / 2 + 100 + 100)  # R@5, R@10: every target within 3
    assert (row["model"], row["seed"], row["converged"]) == ("m", 0, True)


def _per_run() -> pd.DataFrame:
    return pd.DataFrame([{"model": chapter.IT, "seed": 0, "converged": True, "rsum": 50.0, "round1/R@1": 10.0,
                          "round2/R@1": 30.0},
                         {"model": chapter.IT, "seed": 1, "converged": True, "rsum": 100.0, "round1/R@1": 20.0,
                          "round2/R@1": 32.0}])


def _every_model(per_run: pd.DataFrame) -> pd.DataFrame:
    """`per_run` plus a copy of its runs under every other model of the tables."""
    others = [per_run.assign(model=m) for m in chapter.ORDER if m != chapter.IT]
    return pd.concat([per_run, *others], ignore_index=True)


def test_table5_adds_the_ceiling_row_and_the_share_of_it():
    ceiling = {"mean/R@1": 40.0, "mean/R@5": 60.0, "mean/R@10": 100.0, "rsum": 200.0, "mean/meanR": 2.0}
    per_run = _per_run().assign(**{"mean/R@1": 1.0, "mean/R@5": 2.0, "mean/R@10": 3.0, "mean/meanR": 4.0})
    out = chapter.table5(_every_model(per_run), "scenes", ceiling)
    assert out["model"].iloc[0] == "Bayes ceiling" and out["rsum (scenes)"].iloc[0] == 200.0
    row = out[out["model"] == chapter.IT].iloc[0]
    assert row["R@Sum % of ceiling"] == pytest.approx((25.0 + 50.0) / 2)  # the mean of each run's share
    assert row["rsum (paper)"] == 236.2  # Table 5, HMRN I-T's Avg. R@Sum
    assert out.loc[out["model"] == chapter.HRE, "rsum (paper)"].item() == 129.9  # Table 5, R-HRE's Avg. R@Sum
    assert out.loc[out["model"] == chapter.DRILL, "rsum (paper)"].item() == 186.4  # Table 5, Drill-down's
    assert "VSRN* (paper only)" in set(out["model"]) and "Drill-down (paper only)" not in set(out["model"])
    # the paper's row order: the ceiling, the single-vector rows, the multi-vector rows, then the paper-only rows
    assert out["model"].tolist()[:10] == ["Bayes ceiling", "R-RankFusion", "R-RE", "R-HRE", "Drill-down", "VSE0*",
                                          chapter.TI, chapter.IT, chapter.ENSEMBLE, "VSRN* (paper only)"]


def test_round_table_columns_are_the_rounds():
    assert list(chapter.round_columns("meanR", 2)) == ["round1/meanR", "round2/meanR"]
    out = chapter.round_table(_every_model(_per_run()), "table1", "scenes", 2, {"round1/R@1": 5.0, "round2/R@1": 50.0})
    assert out["round2/R@1 (scenes)"].iloc[0] == 50.0
    assert out.loc[out["model"] == chapter.IT, "round1/R@1 (scenes)"].item() == pytest.approx(15.0)
    assert out.loc[out["model"] == chapter.IT, "round1/R@1 (paper)"].item() == 18.5  # Table 1, HMRN I-T, round 1


def test_ceiling_frame_is_the_share_per_round():
    ceiling = {f"round{r}/R@{k}": 40.0 for r in (1, 2) for k in (1, 5, 10)}
    per_run = _per_run().assign(**{f"round{r}/R@{k}": 10.0 for r in (1, 2) for k in (5, 10)})
    out = chapter.ceiling_frame(per_run, ceiling, 2)
    assert len(out) == 4
    first = out[(out["seed"] == 1) & (out["round"] == 2)].iloc[0]
    assert first["R@1 % of ceiling"] == pytest.approx(100 * 32 / 40)


def test_renamed_relabels_only_the_named_models():
    out = chapter.renamed(_per_run(), {"Bi-GRU": chapter.IT})
    assert out["model"].tolist() == ["Bi-GRU", "Bi-GRU"]


def test_ensemble_grid_sums_every_pair():
    # one round, two sets, two images; set q's target is image q
    a = {(1.0,): chapter.RoundScores(torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]), 0.0),
         (2.0,): chapter.RoundScores(torch.tensor([[[0.0, 1.0], [1.0, 0.0]]]), 0.0)}
    b = {(3.0,): chapter.RoundScores(torch.tensor([[[0.0, 0.5], [0.5, 0.0]]]), 0.0)}
    out = chapter.ensemble_grid(a, b)
    assert out[["I-T", "T-I"]].values.tolist() == [[1.0, 3.0], [2.0, 3.0]]
    # (1, 0.5) and (0.5, 1): both targets first -> R@1 = 100, rsum 300; (0, 1.5), (1.5, 0): both second
    assert out["rsum"].tolist() == pytest.approx([300.0, 0.0 + 100.0 + 100.0])
    assert out["mean/meanR"].tolist() == pytest.approx([1.0, 2.0])


# --------------------------------------------------------------------------------------------- figures
def test_round_gallery_by_hand():
    split = SPLIT.subset([0, 1, 2], "three")
    scores = torch.tensor([[[0.1, 0.9, 0.5], [0.0, 1.0, 0.0], [0.3, 0.2, 0.1]],
                           [[0.9, 0.1, 0.5], [0.0, 1.0, 0.0], [0.3, 0.2, 0.4]]])
    texts, images, hits, ranks = chapter.round_gallery(scores, split, 2, k=2)
    assert ranks == [3, 1]  # set 2 (target image 2): 0.1 is last, then 0.4 is first
    assert hits.tolist() == [[True, False], [False, False], [True, False]]  # row 0: the target alone
    assert np.array_equal(images[0, 0], split.images[2]) and not images[0, 1].any()
    assert np.array_equal(images[2, 0], split.images[2]) and np.array_equal(images[1, 0], split.images[0])
    assert texts[1].startswith("round 1: + 'object 0 of image 2'") and texts[2].endswith("target rank 1")


def test_without_pixels_the_ranks_and_the_attention_are_still_drawn(tmp_path):
    """Real data read without images (Visual Genome's features only): the ranks of `round_gallery` without its
    images, no gallery figure, and the attention as a regions x queries heatmap."""
    split = dataclasses.replace(SPLIT.subset([0, 1, 2], "three"), images=None)
    scores = torch.tensor([[[0.1, 0.9, 0.5], [0.0, 1.0, 0.0], [0.3, 0.2, 0.1]],
                           [[0.9, 0.1, 0.5], [0.0, 1.0, 0.0], [0.3, 0.2, 0.4]]])
    run = RunConfig.from_params(PROFILE="smoke", RESULTS_DIR=str(tmp_path))
    ranks = chapter.write_galleries(scores, split, [2, 0], 2, run)
    assert ranks["set 2"].tolist() == [3, 1] and ranks["set 0"].tolist() == [3, 1]  # by hand, as in the test above
    assert not list(tmp_path.rglob("gallery_*"))
    weights, heat = chapter.query_attention(_model(chapter.TI), split, VOCAB, 2)
    assert heat is None and weights.shape == (3, 3)
    fig = chapter.attention_figure(split, 2, weights, heat, split.queries[2])
    image = fig.axes[0].images[0].get_array()
    assert np.allclose(image, weights)


def test_query_attention_sums_to_one_and_heats_the_boxes():
    model = _model(chapter.TI)
    weights, heat = chapter.query_attention(model, SPLIT, VOCAB, 2)  # image 2: three queries, three regions
    assert weights.shape == (3, 3) and heat is not None
    assert weights.sum(0) == pytest.approx(np.ones(3), abs=1e-6)
    box = SPLIT.region_boxes[2]
    # a pixel centre inside exactly one box gets that region's weight
    h, w = SPLIT.images.shape[1:3]
    for y in range(h):
        for x in range(w):
            inside = [(b[0] <= x + 0.5 < b[2]) and (b[1] <= y + 0.5 < b[3]) for b in box]
            if sum(inside) == 1:
                r = inside.index(True)
                assert heat[:, y, x] == pytest.approx(weights[r], abs=1e-6)
                return
    pytest.skip("no pixel inside exactly one box")


def test_correlation_graph_columns_sum_to_one_over_the_nodes():
    model = _model(chapter.IT)
    graphs = chapter.correlation_graph(model, SPLIT, VOCAB, 1)  # image 1: two queries -> 3 nodes
    assert len(graphs) == model.config.icr_steps
    assert graphs[0].shape == (3, 3)
    assert graphs[-1].sum(0) == pytest.approx(np.ones(3), abs=1e-6)


def test_complexity_of_the_ensemble_is_the_sum_of_its_members():
    it, ti = _model(chapter.IT), _model(chapter.TI)
    rows = [chapter.complexity_row(m, models, SPLIT, VOCAB, "BiGRU")
            for m, models in (("a", [it]), ("b", [ti]), ("both", [it, ti]))]
    assert rows[2]["params (M)"] == pytest.approx(rows[0]["params (M)"] + rows[1]["params (M)"])
    assert rows[2]["MFLOPs per session"] == pytest.approx(rows[0]["MFLOPs per session"] + rows[1]["MFLOPs per session"])
    assert rows[0]["MFLOPs per session"] > 0 and rows[0]["queries in the session"] == 3
    n_params = sum(p.numel() for p in it.parameters() if p.requires_grad)
    assert rows[0]["params (M)"] == pytest.approx(n_params / 1e6)


def test_session_flops_count_one_matrix_product_by_hand():
    class Dot(torch.nn.Module):
        """A stand-in multi-query model whose only counted work is one (1 x D) @ (D x 1) product per round."""

        task, visual, max_queries, name = "multi_query", "regions", 10, "dot"

        def encode_images(self, batch):
            return batch["regions"].mean(1)

        def encode_queries(self, batch):
            return batch["query_mask"].float()[..., None].expand(-1, -1, 4).sum(1)

        def query_prefix(self, emb, r):
            return emb

        def score(self, img, sets):
            return img @ sets.T

    flops = chapter.session_flops(Dot(), SPLIT, VOCAB, 2)  # image 2: three rounds
    assert flops == 3 * 2 * 4  # 3 rounds x (2 FLOPs per multiply-add x D = 4)


# ---------------------------------------------------------------------------------------------- claims
def _claim_runs(late_r1: dict[str, float], rsum: dict[str, float]) -> pd.DataFrame:
    """Two seeds of every model of the tables (3 rounds): round 3's R@1 and Avg. R@Sum given, seed 1 one above
    seed 0 (seed std 0.71), every run converged."""
    return pd.DataFrame([{"model": m, "seed": s, "converged": True, "round1/R@1": 1.0, "round2/R@1": 2.0,
                          "round3/R@1": late_r1[m] + s, "mean/R@1": 10.0, "rsum": rsum[m] + s}
                         for m in chapter.ORDER for s in (0, 1)])


def test_train_claims_every_multi_vector_model_above_every_single_vector_one_and_r_hre_above_r_re():
    complexity = pd.DataFrame([{"model": chapter.ENSEMBLE, "params (M)": 1.0, "MFLOPs per session": 2.0}])
    late = {"R-RankFusion": 10.0, "R-RE": 20.0, "R-HRE": 30.0, "Drill-down": 40.0, "VSE0*": 50.0, chapter.TI: 60.0,
            chapter.IT: 70.0, chapter.ENSEMBLE: 80.0}
    rsum = {**late, "R-HRE": 25.0}  # R-HRE - R-RE = +5 Avg. R@Sum
    claims = chapter.train_claims(_claim_runs(late, rsum), 3, complexity, 8).set_index("claim")
    paradigm = claims.loc[claims.index.str.startswith("Multi-vector methods")].iloc[0]
    assert paradigm["verdict"] == "held"
    assert "15 of 15 pairs held" in paradigm["evidence"] and "Drill-down - R-HRE = +10.00" in paradigm["evidence"]
    hre = claims.loc[claims.index.str.startswith("R-HRE is above R-RE")].iloc[0]
    assert hre["verdict"] == "held" and "+5.00" in hre["evidence"]
    # one single-vector model above one multi-vector model after round 2 refutes the claim for every pair
    claims = chapter.train_claims(_claim_runs({**late, "R-HRE": 55.0}, rsum), 3, complexity, 8).set_index("claim")
    paradigm = claims.loc[claims.index.str.startswith("Multi-vector methods")].iloc[0]
    assert paradigm["verdict"] == "did not hold" and "13 of 15 pairs held" in paradigm["evidence"]
    assert "Drill-down - R-HRE = -15.00" in paradigm["evidence"]
    # HMRN against Drill-down, on our runs: the last round's R@1 and Avg. R@Sum
    drill = claims.loc[claims.index.str.startswith("HMRN (the ensemble) beats Drill-down")].iloc[0]
    assert drill["verdict"] == "held" and "ensemble - Drill-down = +40.00 round3/R@1" in drill["evidence"]


def test_default_margin_by_hand():
    assert chapter.default_margin({"a": 10.0, "b": 8.0, "c": 9.0}, "a", 0.5) == (1.0, "held")
    assert chapter.default_margin({"a": 10.0, "b": 12.0}, "a", 0.5) == (-2.0, "did not hold")
    assert chapter.default_margin({"a": 10.0}, "a", 0.5)[1] == "not tested"
    assert chapter.default_margin({"a": 10.0, "b": 8.0}, "a", float("nan")) == (2.0, "not tested")


def test_round_gain_by_hand():
    gain, spread, v = chapter.round_gain(_per_run(), chapter.IT, 2)
    assert gain == pytest.approx(16.0)  # gains 20 and 12
    assert spread == pytest.approx(math.sqrt(32.0))  # std (ddof 1) of 20 and 12
    assert v == "held"
    assert chapter.round_gain(_per_run().iloc[:1], chapter.IT, 2)[2] == "not tested"


def test_pair_claims_use_the_larger_spread_and_say_what_was_not_trained():
    runs = pd.DataFrame([{"model": "a", "seed": 0, "rsum": 10.0}, {"model": "b", "seed": 0, "rsum": 7.0}])
    pairs = {"a > b": ("a", "b", chapter.IT), "a > c": ("a", "c", chapter.IT)}
    out = chapter.pair_claims(runs, pairs, {chapter.IT: 2.0}, "Table 6")
    assert out[0]["verdict"] == "held" and "+3.00" in out[0]["evidence"]
    assert out[1]["verdict"] == "not tested" and "c not trained" in out[1]["evidence"]
    assert chapter.pair_claims(runs, pairs, {chapter.IT: 4.0}, "Table 6")[0]["verdict"] == "within noise"
    assert chapter.pair_claims(runs, pairs, {chapter.IT: float("nan")}, "Table 6")[0]["verdict"] == "not tested"


def test_sweep_claims_by_hand():
    lam = {chapter.IT: pd.DataFrame({"lambda1": [1.0, 5.0, 10.0], "rsum": [10.0, 20.0, 15.0]})}
    tau = {chapter.IT: pd.DataFrame({"tau": [10.0, 40.0], "rsum": [5.0, 20.0]})}
    out = chapter.sweep_claims(lam, tau, {chapter.IT: 1.0})
    assert [c["verdict"] for c in out] == ["held", "held"]
    assert "best lambda1 = 5" in out[0]["evidence"] and "+15.00" in out[1]["evidence"]


def test_paper_values_cover_tables_1_to_11():
    from xmr_core.results import paper_values

    paper = paper_values("hmrn")
    assert sorted(paper["table"].unique(), key=lambda t: int(t[5:])) == [f"table{i}" for i in range(1, 12)]
    one = paper[(paper["table"] == "table1") & (paper["method"] == "HMRN ensemble")]
    assert len(one) == 10 and one[one["key"] == "round10/R@1"]["value"].item() == 93.5  # Table 1's last round
    assert paper[(paper["table"] == "table4") & (paper["method"] == "Drill-down") &
                 (paper["key"] == "round1/meanR")]["value"].item() == 321.8


def test_hmrn_data_builds_the_vocabulary_from_training_queries_and_keeps_every_query(monkeypatch):
    from fixtures.corpora import synthetic_corpus

    corpus = synthetic_corpus(0, {"train": 6, "val": 4, "test": 5})
    monkeypatch.setitem(chapter.SUBSETS, "cpu", (5, 3, 4))
    data = chapter.hmrn_data(corpus, "cpu", word_vectors="word2vec")
    assert (data.multi.train.n_images, data.multi.val.n_images, data.multi.test.n_images) == (5, 3, 4)
    assert set(data.multi.vocab.words) >= {"object", "of", "image", "4"}  # training image 4's queries
    assert "5" not in data.multi.vocab.words  # image 5 is past the cpu subset (and the queries hold no "5")
    # the baseline's captions are the same splits' queries: one caption per query, none dropped
    assert data.single.train.n_captions == sum(len(q) for q in data.multi.train.queries)
    assert data.single.vocab is data.multi.vocab and data.queries is None
    no_regions = synthetic_corpus(0)
    no_regions["val"].regions = None
    with pytest.raises(ValueError, match=r"\['val'\] lack region features"):
        chapter.hmrn_data(no_regions, "cpu", word_vectors="word2vec")
