"""The HREM chapter's helpers (xmr_core.chapters.hrem) and its paper values: every expected value is worked by
hand or by a brute-force loop written here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from fixtures.corpora import synthetic_corpus, synthetic_split

from xmr_core.chapters.hrem import (
    BERT_ORDER,
    ENSEMBLE,
    FIG6_DEFAULTS,
    FIG6_GRIDS,
    MODELS,
    PAPER_ONLY,
    TABLE1_COLUMNS,
    TABLE2_COLUMNS,
    TABLE3_ROWS,
    TABLE3A,
    TABLE3B,
    SplitScores,
    ablation_config,
    batch_graph,
    compared,
    ensemble,
    flickr_columns,
    hrem_data,
    hrem_encoders,
    hrem_table,
    longest_caption,
    loss_curves,
    mean_negative_similarity,
    not_run_table,
    region_word_matching,
    row_comparison,
    special_recall,
    sweep_gain,
    table4_rows,
    top_percent,
    training_runs,
)
from xmr_core.data.datasets import PairDataset, collate
from xmr_core.data.text import Vocabulary
from xmr_core.methods.hrem import HREM
from xmr_core.results import paper_values
from xmr_core.tuning import TuningResult


def _tuned(lr: float = 1e-3, margin: float = 0.2) -> dict[str, TuningResult]:
    return {name: TuningResult(name, "margin", lr, margin, []) for name in MODELS}


# ------------------------------------------------------------------------------------------- paper values
def test_paper_values_cover_every_built_row_and_paper_only_row_of_each_table() -> None:
    paper = paper_values("hrem")
    assert paper["value"].notna().all()
    for table, methods in PAPER_ONLY.items():
        assert set(methods) <= set(paper[paper["table"] == table]["method"])
    for table in ("table1_bigru", "table1_bert"):
        got = paper[paper["table"] == table]
        assert {"GPO", "HREM standalone", "HREM fusion", ENSEMBLE} <= set(got["method"])
        assert set(got["key"]) == {k.split("|")[1] for k in TABLE1_COLUMNS.values()} - {"rsum"}  # no rSum column
    assert set(paper[paper["table"] == "table3a"]["method"]) == set(TABLE3A) | {"HREM"}
    assert set(paper[paper["table"] == "table3b"]["method"]) == set(TABLE3B) | {"HREM"}
    # Table 2's rSum is the sum of its six R@K in the paper (a transcription check)
    t2 = paper[paper["table"] == "table2_bigru"]
    for (method, protocol), group in t2.groupby(["method", "protocol"]):
        values = group.set_index("key")["value"]
        assert values["rsum"] == pytest.approx(values.drop("rsum").sum(), abs=0.15), (method, protocol)


# ---------------------------------------------------------------------------------------------- data, encoders
def test_hrem_data_needs_region_features_and_builds_the_vocabulary_from_training_captions() -> None:
    corpus = synthetic_corpus(0)
    data = hrem_data(corpus, word_vectors="word2vec")
    assert data.test is corpus["test"] and data.test_unseen is corpus["test"]
    assert set(data.vocab.words) >= set(corpus["train"].captions[0].split())
    corpus.splits["val"] = dataclasses.replace(corpus["val"], regions=None, region_boxes=None)
    with pytest.raises(ValueError, match=r"\['val'\] have no region features"):
        hrem_data(corpus, word_vectors="word2vec")


def test_longest_caption_counts_the_word_tokens_of_every_split() -> None:
    data = hrem_data(synthetic_corpus(0), word_vectors="word2vec")
    lengths = [len(c.split()) for split in (data.train, data.val, data.test) for c in split.captions]
    assert longest_caption(data) == max(lengths)  # the synthetic captions are plain words


def test_encoders_read_regions_and_refuse_a_bad_region_dim() -> None:
    enc = hrem_encoders("smoke", 68)
    assert enc["image"].kind == "regions" and enc["image"].region_dim == 68 and enc["embed_dim"] % 16 == 0
    with pytest.raises(ValueError, match="region_dim must be > 0"):
        hrem_encoders("cpu", 0)


def test_the_unchanged_ablation_config_is_train_py_s_hrem_fusion_so_its_runs_are_shared() -> None:
    enc = hrem_encoders("smoke", 4)
    vectors = np.zeros((5, 3), dtype=np.float32)
    tuned = _tuned(margin=0.4)
    built = compared("smoke")["HREM fusion"].build(enc, vectors, 0.4, 1).config
    assert ablation_config(enc, "smoke", tuned) == built
    changed = ablation_config(enc, "smoke", tuned, intra=False, inter=False)
    assert (changed.intra, changed.inter, changed.hinge.margin) == (False, False, 0.4)


# ----------------------------------------------------------------------------------------------- scores
def test_ensemble_averages_the_similarity_matrices_and_adds_the_times() -> None:
    a = SplitScores(torch.tensor([[1.0, 3.0]]), torch.tensor([[2.0, 0.0]]), 1.5)
    b = SplitScores(torch.tensor([[3.0, -1.0]]), torch.tensor([[0.0, 4.0]]), 2.0)
    out = ensemble(a, b)
    assert out.i2t.tolist() == [[2.0, 1.0]] and out.t2i.tolist() == [[1.0, 2.0]] and out.seconds == 3.5


# ---------------------------------------------------------------------------------------------- Table 4
def test_mean_negative_similarity_matches_a_brute_force_loop() -> None:
    torch.manual_seed(0)
    img, cap = torch.randn(3, 4), torch.randn(6, 4)
    caption_image = np.array([0, 0, 1, 1, 2, 2])
    u_img = img / img.norm(dim=1, keepdim=True)
    u_cap = cap / cap.norm(dim=1, keepdim=True)

    def cos(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(a @ b)

    expected = {
        ("hard", "i2t"): [np.mean([cos(u_img[i], u_cap[c]) for c in range(6) if caption_image[c] != i]) for i in range(3)],
        ("hard", "t2i"): [np.mean([cos(u_cap[c], u_img[i]) for i in range(3) if caption_image[c] != i]) for c in range(6)],
        ("infrequent", "i2t"): [np.mean([cos(u_img[i], u_img[j]) for j in range(3) if j != i]) for i in range(3)],
        ("infrequent", "t2i"): [np.mean([cos(u_cap[c], u_cap[d]) for d in range(6)
                                         if caption_image[d] != caption_image[c]]) for c in range(6)],
    }
    for (kind, direction), values in expected.items():
        got = mean_negative_similarity(img, cap, caption_image, kind, direction)
        np.testing.assert_allclose(got.numpy(), values, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="kind must be"):
        mean_negative_similarity(img, cap, caption_image, "rare", "i2t")  # type: ignore[arg-type]


def test_top_percent_keeps_the_rounded_share_of_highest_values_ties_by_index() -> None:
    values = torch.tensor([0.1, 0.9, 0.5, 0.9, 0.3, 0.2, 0.0, 0.8, 0.4, 0.6])
    assert np.flatnonzero(top_percent(values, 20)).tolist() == [1, 3]  # 2 of 10
    assert np.flatnonzero(top_percent(values, 10)).tolist() == [1]  # tie 0.9 / 0.9: the lower index
    assert np.flatnonzero(top_percent(values, 5)).tolist() == [1]  # round(0.5) = 0 -> at least one
    assert top_percent(values, 100).all()
    with pytest.raises(ValueError, match="percent must be in"):
        top_percent(values, 0)


def test_special_recall_is_r_at_1_of_the_selected_queries_only() -> None:
    split = synthetic_split("test", 3, np.random.default_rng(0), k=2)  # captions 0,1 -> image 0; 2,3 -> 1; 4,5 -> 2
    i2t = torch.tensor([[0.9, 0.1, 0.8, 0.0, 0.0, 0.0],   # image 0: own caption first -> hit
                        [0.9, 0.0, 0.1, 0.2, 0.0, 0.0],   # image 1: caption 0 first -> miss
                        [0.0, 0.0, 0.0, 0.0, 0.5, 0.1]])  # image 2: hit
    t2i = i2t.clone()
    t2i[:, 0] = torch.tensor([0.1, 0.9, 0.0])  # caption 0 ranks image 1 first -> miss; the others: see columns
    scores = SplitScores(i2t, t2i, 0.0)
    masks = {"i2t": np.array([True, True, False]), "t2i": np.array([True, False, True, False, False, False])}
    got = special_recall(split, scores, masks)
    assert got["i2t R@1"] == pytest.approx(50.0)  # images 0 (hit) and 1 (miss)
    # caption 0: miss; caption 2 (image 1): column [0.8, 0.1, 0.0] ranks image 0 first -> miss
    assert got["t2i R@1"] == pytest.approx(0.0)
    rows = table4_rows(split, (torch.randn(3, 4), torch.randn(6, 4)), {"m": scores}, seed=7, percents=(50,))
    assert [(r["samples"], r["percent"], r["model"], r["seed"]) for r in rows] == [("hard", 50, "m", 7),
                                                                                  ("infrequent", 50, "m", 7)]


# -------------------------------------------------------------------------------------------- Figure 7
def test_loss_curves_read_both_triplet_terms_and_refuse_a_run_without_them() -> None:
    history = [{"epoch": 1, "train/triplet_initial": 0.5},
               {"epoch": 2, "train/triplet_initial": 0.4, "train/triplet_enhanced": 0.3}]
    curves = loss_curves(history)
    assert curves["epoch"].tolist() == [1, 2] and curves["initial"].tolist() == [0.5, 0.4]
    assert np.isnan(curves["enhanced"][0]) and curves["enhanced"][1] == 0.3
    assert loss_curves(history[:1])["enhanced"].isna().all()
    with pytest.raises(ValueError, match="not an HREM run"):
        loss_curves([{"epoch": 1, "train/hinge": 1.0}])


# --------------------------------------------------------------------------------------- tables and claims
def _per_run() -> pd.DataFrame:
    rows = []
    for model, base in (("GPO", 100.0), ("HREM fusion", 120.0)):
        for seed, shift in ((0, -1.0), (1, 1.0)):
            rows.append({"model": model, "seed": seed, "converged": True, "all rSum": base + shift,
                         "1K rSum": base + 50 + shift, **{c: 10.0 + shift for c in TABLE1_COLUMNS if c != "all rSum"},
                         **{c: 20.0 for c in TABLE2_COLUMNS if c.startswith("1K") and c != "1K rSum"}})
    return pd.DataFrame(rows)


def test_hrem_table_puts_the_ceiling_on_top_and_each_model_s_share_of_it() -> None:
    ceiling = {"all": {f"{d}/R@{k}": 50.0 for d in ("i2t", "t2i") for k in (1, 5, 10)} | {"rsum": 300.0},
               "1K": {f"{d}/R@{k}": 60.0 for d in ("i2t", "t2i") for k in (1, 5, 10)} | {"rsum": 360.0}}
    table = hrem_table(_per_run(), ["GPO", "HREM fusion"], "table2_bigru", TABLE2_COLUMNS, "scenes", ceiling)
    assert table["model"].tolist()[:3] == ["Bayes ceiling", "GPO", "HREM fusion"]
    assert table.loc[0, "all rSum (scenes)"] == 300.0 and table.loc[0, "1K i2t R@1 (scenes)"] == 60.0
    assert table.loc[1, "all rSum % of ceiling"] == pytest.approx(100 * 100 / 300)  # mean of 99/300 and 101/300
    assert table.loc[2, "1K rSum % of ceiling"] == pytest.approx(100 * 170 / 360)
    paper = paper_values("hrem")
    gpo_f30k = paper[(paper["table"] == "table2_bigru") & (paper["method"] == "GPO") & (paper["protocol"] == "F30K")
                     & (paper["key"] == "rsum")]["value"].item()
    assert table.loc[1, "all rSum (paper)"] == gpo_f30k
    assert [m for m in table["model"] if m.endswith("(paper only)")] == [f"{m} (paper only)"
                                                                         for m in PAPER_ONLY["table2_bigru"]]
    renamed = flickr_columns(table)
    assert "F30K-size rSum (scenes)" in renamed and "all rSum (scenes)" not in renamed and "1K rSum (scenes)" in renamed


def test_not_run_table_shows_the_paper_s_values_and_says_why_ours_are_missing() -> None:
    table = not_run_table("table1_bert", BERT_ORDER, TABLE1_COLUMNS, "scenes", "not run on cpu")
    assert table["model"].tolist() == BERT_ORDER + [f"{m} (paper only)" for m in PAPER_ONLY["table1_bert"]]
    assert (table.loc[: len(BERT_ORDER) - 1, "all i2t R@1 (scenes)"] == "not run on cpu").all()
    paper = paper_values("hrem")
    fusion = paper[(paper["table"] == "table1_bert") & (paper["method"] == "HREM fusion")
                   & (paper["key"] == "instance/i2t/R@1")]["value"].item()
    assert table.loc[BERT_ORDER.index("HREM fusion"), "all i2t R@1 (paper)"] == fusion


def test_row_comparison_judges_converged_trained_rows_and_leaves_missing_ones_untested() -> None:
    per_run = _per_run()
    converged = {"GPO": True, "HREM fusion": True}
    v, e = row_comparison(per_run, "HREM fusion", "GPO", ["all rSum"], converged, "rSum")
    assert v == "held" and "+20.00 rSum" in e  # (119 + 121) / 2 - (99 + 101) / 2, spread 1.41
    v, e = row_comparison(per_run, "HREM fusion", "VSE++", ["all rSum"], converged, "rSum")
    assert v == "not tested" and "VSE++ not trained" in e
    v, _ = row_comparison(per_run, "HREM fusion", "GPO", ["all rSum"], {**converged, "GPO": False}, "rSum")
    assert v == "not tested"


def test_sweep_gain_compares_the_default_with_one_value_against_the_seed_spread() -> None:
    assert sweep_gain({0.0: 100.0, 1.5: 104.0}, 1.5, 0.0, 3.0) == (4.0, "held")
    assert sweep_gain({0.0: 100.0, 1.5: 102.0}, 1.5, 0.0, 3.0) == (2.0, "within noise")
    diff, v = sweep_gain({1.5: 102.0}, 1.5, 0.0, 3.0)
    assert np.isnan(diff) and v == "not tested"
    assert sweep_gain({0.0: 100.0, 1.5: 104.0}, 1.5, 0.0, float("nan"))[1] == "not tested"


def test_training_runs_count_the_cpu_chapter_by_hand() -> None:
    runs = training_runs("cpu", 3)
    # tuning 4 x (3 lrs + 2 margins) = 20; seeds 4 x 2 = 8; no BERT on cpu; Table 3: 11 rows x 3 = 33;
    # Figure 6: 3 + 3 + 3 non-default values = 9; SCAN: 3 seeds
    assert runs["runs"].tolist() == [20, 8, 0, 33, 9, 3, 0, 0] and runs["runs"].sum() == 73
    assert len(TABLE3_ROWS["cpu"]) == 11
    assert sum(v != FIG6_DEFAULTS[p] for p, g in FIG6_GRIDS["cpu"].items() for v in g) == 9
    assert training_runs("paper", 3).loc[2, "runs"] == 9  # BERT: GPO and both HREM, 3 seeds


# ---------------------------------------------------------------------------------------- visualise helpers
def _tiny_hrem() -> tuple[HREM, Vocabulary, object]:
    split = synthetic_split("test", 6, np.random.default_rng(1), k=2, regions=3)
    vocab = Vocabulary.build(split.captions)
    torch.manual_seed(0)
    enc = {**hrem_encoders("smoke", 4), "embed_dim": 16}
    model = HREM(ablation_config(enc, "smoke", _tuned(), heads=4), np.random.default_rng(0).standard_normal(
        (len(vocab), 5)).astype(np.float32))
    return model, vocab, split


def test_batch_graph_attention_respects_the_connection_matrix_and_rows_sum_to_one() -> None:
    model, vocab, split = _tiny_hrem()
    graph, attention = batch_graph(model, split, vocab, [0, 2, 4, 6], "cpu")
    assert graph.connect.shape == (8, 8) and attention.shape == (8, 8)
    assert bool(graph.connect[:4, :4].diagonal().all())  # an image is its own nearest intra-modal neighbour
    assert (attention[~graph.connect.numpy()] == 0).all()
    np.testing.assert_allclose(attention.sum(1), np.ones(8), rtol=1e-5)


def test_region_word_matching_is_each_region_s_best_word_cosine() -> None:
    model, vocab, split = _tiny_hrem()
    match = region_word_matching(model, split, vocab, 3, "cpu")  # caption 3 of image 1
    batch = collate([PairDataset(split, vocab, visual=model.visual)[3]])
    model.eval()
    with torch.no_grad():
        img, cap = model(batch)
    regions, words = img.fragments[0], cap.fragments[0]
    expected = [max(float(torch.nn.functional.cosine_similarity(regions[r], words[w], dim=0))
                    for w in range(words.shape[0])) for r in range(regions.shape[0])]
    np.testing.assert_allclose(match, expected, rtol=1e-5, atol=1e-6)
