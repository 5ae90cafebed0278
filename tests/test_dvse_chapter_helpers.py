"""The DVSE chapter's helpers (xmr_core.chapters.dvse), its paper values and its figure helpers: every expected
value is worked by hand or by a brute-force loop written here."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from xmr_core.chapters.dvse import (
    ABLATE_CLAIMS,
    ABLATION_GRIDS,
    CLAIMS,
    COMPARED,
    FR_COCO,
    MODELS,
    ORDER,
    PAPER_ONLY,
    SWEEP_COLUMNS,
    TABLE1_COLUMNS,
    TABLE2_COLUMNS,
    TABLE3_COLUMNS,
    TABLE6_COLUMNS,
    TRAIN_CLAIMS,
    VISUALISE_CLAIMS,
    NeighbourReranker,
    attention_grounding,
    best_cell,
    beta_range_runs,
    caption_query_figure,
    claims_preamble,
    combination_label,
    correlation_figure,
    correlation_matrices,
    data_summary,
    fig6_panels,
    fr_figure,
    fr_grid_figure,
    fr_models,
    grid_boxes,
    heat_figure,
    image_query_figure,
    impact_runs,
    k_config,
    k_label,
    mean_abs_offdiagonal,
    random_images,
    region_runs,
    rerank_bench_args,
    rerank_times,
    retrieval_lists,
    specific_captions,
    split_sizes,
    sub_embeddings,
    sweep_figure,
    table1_frame,
    table2_frame,
    table4_frame,
    table5_frame,
    table6_figure,
    table6_frame,
    training_runs,
    write_region_tables,
)
from xmr_core.chapters.pcme import COMPARED as PCME_COMPARED
from xmr_core.chapters.pcme import weight_axes
from xmr_core.chapters.summary import paper_table
from xmr_core.claims import can_fail, instance_collapse
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split
from xmr_core.data.datasets import ImageDataset, collate
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import direction_scores, embed_split, instance_row, rerank_directions
from xmr_core.experiment.compared import REGIONS
from xmr_core.experiment.protocols import ChapterData
from xmr_core.experiment.recipes import region_encoders
from xmr_core.methods.dvse import DVSE, dvse_config
from xmr_core.reported import paper_values
from xmr_core.similarity import reciprocal_rerank
from xmr_core.viz import attention_heat, caption_gallery

N, PER = 10, 2  # images, captions per image: five 1K-style folds of 2 images and 4 captions


def _split(seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    m = N * PER
    exact = rng.random((m, N)) < 0.3
    exact[np.arange(m), np.repeat(np.arange(N), PER)] = True
    return Split("t", "mem", [f"i{i}" for i in range(N)], [f"c{j}" for j in range(m)],
                 [f"caption {j}" for j in range(m)], np.repeat(np.arange(N), PER),
                 images=rng.integers(0, 255, (N, 8, 8, 3), dtype=np.uint8),
                 image_class=np.array([0, 0, 1, 1, 1, 2, 2, 0, 1, 2]), exact=exact,
                 image_labels=(rng.random((N, 4)) < 0.5).astype(np.uint8),
                 caption_level=["full", "vague"] * N).validate()


def _scores(seed: int) -> torch.Tensor:
    return torch.rand(N, N * PER, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ------------------------------------------------------------------- brute-force references (loops, float64)
def _best_ranks(scores: np.ndarray, relevant: np.ndarray) -> list[int]:
    """1-based rank of each query row's best positive (no ties in random scores)."""
    return [1 + int(np.sum(row > row[rel].max())) for row, rel in zip(scores, relevant)]


def _recalls(i2t: np.ndarray, t2i: np.ndarray, cap_img: np.ndarray) -> dict[str, float]:
    rel_i2t = cap_img[None, :] == np.arange(i2t.shape[0])[:, None]
    ranks = {"i2t": _best_ranks(i2t, rel_i2t), "t2i": _best_ranks(t2i.T, rel_i2t.T)}
    out = {f"{d} R@{k}": 100 * float(np.mean([r <= k for r in ranks[d]])) for d in ranks for k in (1, 5, 10)}
    out["rSum"] = sum(out.values())
    return out


def _r_precision(scores: np.ndarray, relevant: np.ndarray) -> float:
    vals = []
    for row, rel in zip(scores, relevant):
        r = int(rel.sum())
        vals.append(rel[np.argsort(-row)[:r]].mean())
    return 100 * float(np.mean(vals))


def _fr(a: np.ndarray, s1: float, s2: float) -> np.ndarray:
    """Eq. (14) in log form by brute force: s2 A_qg - log Σ_l exp(s1 A_lg), queries as rows."""
    return s2 * a - np.log(np.exp(s1 * a).sum(0, keepdims=True))


# ---------------------------------------------------------------------------------------- models, values
def test_compared_reuses_the_pcme_chapter_and_adds_dvse_with_its_margin():
    for name, spec in PCME_COMPARED.items():
        assert COMPARED[name] is spec  # the same builders: the same run keys, so cached runs are loaded
    dvse = COMPARED["DVSE"]
    assert dvse.weight_name == "margin" and dvse.default == 0.2 and dvse.weight.high == 2.0
    small = {"embed_dim": 8, "image": ImageEncoderConfig(widths=(4, 8), hidden=8, image_size=16),
             "text": TextEncoderConfig(hidden=4)}
    model = dvse.build(small, np.zeros((5, 3), np.float32), 0.4, 1)
    assert model.config.n_embeds == 6 and model.config.hinge.margin == 0.4  # K = 6 whatever PVSE's k argument


def test_paper_values_typed_from_the_tables():
    paper = paper_values("dvse")
    assert not paper.duplicated(["table", "method", "protocol", "key"]).any()
    # rows per table: methods x values minus the '-' cells (Table I ResNet block: 7 x 14 minus P2RM's 10)
    counts = paper.groupby("table").size().to_dict()
    assert counts == {"table1_resnet": 88, "table1_butd": 155, "table1_bert": 56, "table2_resnet": 42,
                      "table2_butd": 79, "table2_bert": 28, "table3": 32, "table4": 16, "table5": 7, "table6": 49}
    value = lambda t, m, k, p="test": float(paper.query("table == @t and method == @m and key == @k and protocol == @p")
                                           ["value"].iloc[0])
    assert value("table1_resnet", "DVSE + FR", "rsum", "5K") == 399.8  # Table I, typed by hand
    assert value("table1_resnet", "PVSE K=2", "instance/i2t/R@1", "1K") == 69.2
    assert value("table3", "DVSE", "class/i2t/R-P") == 26.2 and value("table3", "DVSE", "class/i2t/R@1") == 47.4
    assert value("table4", "DVSE + MR", "test time s", "5K") == 447.2
    assert value("table5", "combination 3", "rsum") == 500.6
    assert value("table6", "K=12", "class/t2i/R-P") == 26.8
    # the paper's own cross-references: Table VI K = 6 (COCO 5K) is Table I's BUTD DVSE, Table V's combination 1
    # is Table II's BUTD DVSE, Table III's DVSE is Table VI's CUB K = 8
    for key in ("instance/i2t/R@1", "instance/t2i/R@1", "rsum"):
        assert value("table6", "K=6", key, "5K") == value("table1_butd", "DVSE", key, "5K")
    assert value("table5", "combination 1", "rsum") == value("table2_butd", "DVSE", "rsum")
    for key in TABLE3_COLUMNS.values():
        assert value("table3", "DVSE", key) == value("table6", "K=8", key)
    # rSum is the sum of the six R@K wherever all seven are printed (rounding: 0.25)
    for _, g in paper[paper["table"].str.match("table[12]_")].groupby(["table", "method", "protocol"]):
        v = dict(zip(g["key"], g["value"]))
        if len(v) == 7:
            assert sum(x for k, x in v.items() if k != "rsum") == pytest.approx(v["rsum"], abs=0.25)


def test_every_row_we_label_has_its_paper_rows():
    paper = paper_values("dvse")
    for table, methods in PAPER_ONLY.items():
        assert set(methods) <= set(paper[paper["table"] == table]["method"])
    for table in ("table1_resnet", "table3"):
        assert {"PCME", "DVSE", "DVSE + FR"} <= set(paper[paper["table"] == table]["method"]) & set(ORDER)
    keys = {(p, k) for p, k in zip(paper["protocol"], paper["key"])}
    for col, key in {**TABLE1_COLUMNS, **TABLE6_COLUMNS}.items():
        proto, k = key.split("|") if "|" in key else ("test", key)
        assert (proto, k) in keys, col
    assert set(TABLE2_COLUMNS) == {c for c in TABLE1_COLUMNS if c.startswith("1K ")}  # Flickr30K's size: 1K folds


def test_region_encoders_swap_only_the_image_encoder():
    enc = {"embed_dim": 8, "image": ImageEncoderConfig(kind="grid"), "text": TextEncoderConfig(hidden=4)}
    out = region_encoders(enc, 68)
    assert out["image"].kind == "regions" and out["image"].region_dim == 68
    assert out["text"] is enc["text"] and out["embed_dim"] == 8 and enc["image"].kind == "grid"
    with pytest.raises(ValueError, match="region_dim"):
        region_encoders(enc, 0)


# ------------------------------------------------------------------------------------------- metric rows
def test_instance_row_matches_brute_force_on_folds_and_whole_split():
    split, i2t, t2i = _split(), _scores(1), _scores(2)
    row = instance_row(split, i2t, t2i)
    cap_img = np.asarray(split.caption_image)
    whole = _recalls(i2t.numpy(), t2i.numpy(), cap_img)
    folds = [_recalls(i2t.numpy()[2 * f:2 * f + 2, 4 * f:4 * f + 4], t2i.numpy()[2 * f:2 * f + 2, 4 * f:4 * f + 4],
                      cap_img[4 * f:4 * f + 4] - 2 * f) for f in range(5)]
    for key, value in whole.items():
        assert row[f"all {key}"] == pytest.approx(value)
        assert row[f"1K {key}"] == pytest.approx(np.mean([f[key] for f in folds]))


def test_rerank_directions_reranks_image_rows_and_caption_columns():
    i2t, t2i = _scores(9), _scores(10)
    a, b = rerank_directions(i2t, t2i, FR_COCO)
    assert np.allclose(a.numpy(), _fr(i2t.numpy(), *FR_COCO.gamma))
    assert np.allclose(b.numpy(), _fr(t2i.numpy().T, *FR_COCO.lam).T)


# ---------------------------------------------------------------------------------------------- Table 4
def test_neighbour_reranker_uses_the_k_of_each_direction():
    scores = _scores(11)
    rr = NeighbourReranker(reciprocal_rerank, (3, 7))
    assert torch.equal(rr(scores, "i2t"), reciprocal_rerank(scores, k=3))
    assert torch.equal(rr(scores.T, "t2i"), reciprocal_rerank(scores.T, k=7))
    assert not torch.equal(rr(scores, "i2t"), reciprocal_rerank(scores, k=7))
    with pytest.raises(ValueError, match="direction"):
        rr(scores, "both")


class _QueuedScores:
    """Scores still being computed on a device: `.cpu()` waits `seconds` for them (a GPU's queued kernels)."""

    def __init__(self, scores: torch.Tensor, seconds: float) -> None:
        self.scores, self.seconds = scores, seconds

    def cpu(self) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.scores


def test_rerank_times_time_the_whole_split_until_its_scores_are_on_the_cpu_then_each_reranker(monkeypatch):
    # Table 4's "test s": on a GPU, embedding and scoring return before the work is done; the time must wait for it
    from xmr_core.chapters import dvse as chapter

    i2t, t2i = _scores(0), _scores(1)
    monkeypatch.setattr(chapter, "embed_split", lambda model, split, vocab, device: (None, None))
    monkeypatch.setattr(chapter, "direction_scores",
                        lambda model, img, cap: (_QueuedScores(i2t, 0.1), _QueuedScores(t2i, 0.1)))
    seen = []

    def slow(scores: torch.Tensor, direction: str) -> torch.Tensor:
        seen.append((scores, direction))
        time.sleep(0.05)
        return scores

    times = rerank_times(torch.nn.Linear(1, 1), _split(), None, "cpu", {"FR": FR_COCO, "slow": slow})
    assert list(times) == ["test s", "FR", "slow"] and times["test s"] >= 0.2  # both directions' waits
    assert times["slow"] >= 0.1 and [d for _, d in seen] == ["i2t", "t2i"] and seen[0][0] is i2t
    assert torch.equal(seen[1][0], t2i.T)  # the caption queries: the columns of the very scores timed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_dvse_scores_on_cuda_match_the_cpu():
    rng = np.random.default_rng(0)
    split = dataclasses.replace(_split(), regions=rng.standard_normal((N, 3, 5)).astype(np.float32))
    vocab = Vocabulary.build(split.captions)
    small = {"embed_dim": 8, "image": ImageEncoderConfig(kind="regions", region_dim=5),
             "text": TextEncoderConfig(hidden=4)}
    torch.manual_seed(0)
    model = DVSE(dvse_config(n_embeds=3, **small), rng.standard_normal((len(vocab), 3)).astype(np.float32))
    scored = {}
    for device in ("cpu", "cuda"):
        model.to(device).eval()
        scored[device] = [s.cpu() for s in direction_scores(model, *embed_split(model, split, vocab, device=device))]
    for got, want in zip(scored["cuda"], scored["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)  # cuDNN's TF32 RNN / matmul rounding


def test_table4_frame_puts_both_paper_datasets_beside_ours():
    runs = pd.DataFrame([{"model": m, "seed": s, "re-rank s": t, "test s": 1 + t, "all rSum": r}
                         for s in (0, 1) for m, t, r in (("DVSE", 0.0, 100 + s), ("DVSE + RR", 0.5, 110 + s),
                                                         ("DVSE + MR", 0.9, 108 + s), ("DVSE + FR", 0.1, 120 + s))])
    out = table4_frame(runs, "scenes").set_index("model")
    assert list(out.index) == ["DVSE", "DVSE + RR", "DVSE + MR", "DVSE + FR"]
    assert out.loc["DVSE + FR", "rSum (scenes)"] == 120.5 and out.loc["DVSE + MR", "test s (scenes)"] == 1.9
    assert out.loc["DVSE + MR", "test s (paper, Flickr30K)"] == 15.0 and out.loc["DVSE + MR", "test s (paper, COCO 5K)"] == 447.2
    assert out.loc["DVSE + FR", "rSum (paper, Flickr30K)"] == 524.5 and out.loc["DVSE", "rSum (paper, COCO 5K)"] == 429.3
    assert out.loc["DVSE", "rSum std"] == pytest.approx(np.std([100, 101], ddof=1))


# ------------------------------------------------------------------------------------------ table layout
def test_paper_table_adds_paper_only_rows_with_the_papers_values():
    per_run = pd.DataFrame([{"model": "DVSE", "seed": s, "CUB i2t R-P": 10.0 + s, "CUB i2t R@1": 20.0,
                             "CUB t2i R-P": 30.0, "CUB t2i R@1": 40.0} for s in (0, 1)])
    out = paper_table(per_run, ["DVSE"], "table3", TABLE3_COLUMNS, "scenes", ("P2RM",)).set_index("model")
    assert list(out.index) == ["DVSE", "P2RM (paper only)"]
    assert out.loc["DVSE", "CUB i2t R-P (scenes)"] == 10.5 and out.loc["DVSE", "CUB i2t R-P (paper)"] == 26.2
    assert out.loc["P2RM (paper only)", "seeds"] == 0 and np.isnan(out.loc["P2RM (paper only)", "CUB i2t R-P (scenes)"])
    assert out.loc["P2RM (paper only)", "CUB t2i R-P (paper)"] == 27.9  # Table III, row P2RM


# ----------------------------------------------------------------------------------------------- claims
# --------------------------------------------------------------------------------------------- Figure 7


# -------------------------------------------------------------------------------------- Figures 6 and 10
def test_correlation_matrices_are_pearson_and_a_constant_vector_correlates_zero():
    x = torch.randn(3, 4, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    corr = correlation_matrices(x)
    for i in range(3):
        assert np.allclose(corr[i].numpy(), np.corrcoef(x[i].numpy()))
    const = torch.tensor([[[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]])
    assert correlation_matrices(const)[0, 0, 1].item() == 0.0


def test_mean_abs_offdiagonal_by_hand():
    corr = torch.tensor([[[1.0, -0.5, 0.2], [-0.5, 1.0, 0.3], [0.2, 0.3, 1.0]]])
    assert mean_abs_offdiagonal(corr) == pytest.approx((0.5 + 0.2 + 0.3) * 2 / 6)
    assert np.isnan(mean_abs_offdiagonal(torch.ones(2, 1, 1)))


def test_grid_boxes_row_major_by_hand():
    assert grid_boxes(4, 8).tolist() == [[0, 0, 4, 4], [4, 0, 8, 4], [0, 4, 4, 8], [4, 4, 8, 8]]
    with pytest.raises(ValueError, match="square"):
        grid_boxes(6, 8)


def test_attention_heat_sums_the_weights_of_the_covering_boxes():
    boxes = np.array([[0, 0, 2, 4], [1, 1, 4, 3]])  # x0, y0, x1, y1 on a 4 x 4 image
    weights = np.array([[0.25, 1.0], [0.75, 0.0]])  # (R = 2, K = 2)
    heat = attention_heat(weights, boxes, 4)
    expect0 = np.zeros((4, 4))
    expect0[0:4, 0:2] += 0.25  # rows y, columns x
    expect0[1:3, 1:4] += 0.75
    assert np.allclose(heat[0], expect0)
    assert np.allclose(heat[1], np.pad(np.ones((4, 2)), ((0, 0), (0, 2))))
    with pytest.raises(ValueError, match="expected"):
        attention_heat(weights, boxes[:1], 4)


def test_attention_heat_max_is_the_best_covering_box_per_pixel():
    rng = np.random.default_rng(3)
    size, n_boxes = 8, 5
    corners = rng.integers(0, size + 1, (n_boxes, 2, 2))
    boxes = np.concatenate([corners.min(1), corners.max(1)], 1)  # x0, y0, x1, y1 (some empty)
    weights = rng.normal(size=(n_boxes, 2))
    heat = attention_heat(weights, boxes, size, reduce="max")
    for k in range(2):  # brute force: every pixel against every box
        for y in range(size):
            for x in range(size):
                covering = [weights[r, k] for r, (x0, y0, x1, y1) in enumerate(boxes) if x0 <= x < x1 and y0 <= y < y1]
                assert heat[k, y, x] == pytest.approx(max(covering) if covering else 0.0)
    assert not attention_heat(np.zeros((0, 2)), np.zeros((0, 4)), size, reduce="max").any()  # no box: all clear
    with pytest.raises(ValueError, match="reduce"):
        attention_heat(weights, boxes, size, reduce="mean")


def test_sub_embeddings_returns_the_unmasked_residuals_attention_and_mask():
    rng = np.random.default_rng(0)
    split = Split("t", "mem", ["a", "b", "c"], ["x", "y", "z"], ["x", "y", "z"], np.arange(3),
                  images=rng.integers(0, 255, (3, 16, 16, 3), dtype=np.uint8))
    small = {"embed_dim": 8, "image": ImageEncoderConfig(widths=(4, 8), hidden=8, image_size=16),
             "text": TextEncoderConfig(hidden=4)}
    torch.manual_seed(0)
    model = DVSE(dvse_config(n_embeds=3, **small), rng.standard_normal((5, 3)).astype(np.float32))
    residual, attn, mask = sub_embeddings(model, split, "cpu")
    assert residual.shape == (3, 3, 8) and attn.shape == (3, 16, 3) and mask.shape == (3, 3)
    assert torch.allclose(attn.sum(1), torch.ones(3, 3))  # softmax over the 4 x 4 cells
    _, gated, mask2 = model.encode_images(collate([ImageDataset(split, "pixels")[i] for i in range(3)]))
    assert torch.equal(mask, mask2)
    assert torch.allclose(residual * mask.unsqueeze(-1), gated, atol=1e-6)  # gated = F_mask(v̂)
    picked = sub_embeddings(model, split, "cpu", [2, 0])
    assert torch.allclose(picked[0], residual[[2, 0]], atol=1e-6)


# ------------------------------------------------------------------------------------- Figures 11 and 12
def test_retrieval_lists_mark_exact_relevance_both_ways():
    split = _split()
    i2t, t2i = _scores(16), _scores(17)
    out = retrieval_lists(i2t, t2i, split, [3], [5], k_captions=3, k_images=2)
    i2t_rows, t2i_rows = out[out["direction"] == "i2t"], out[out["direction"] == "t2i"]
    assert i2t_rows["result"].tolist() == np.argsort(-i2t[3].numpy())[:3].tolist()
    assert t2i_rows["result"].tolist() == np.argsort(-t2i[:, 5].numpy())[:2].tolist()
    assert i2t_rows["exact"].tolist() == [bool(split.exact[c, 3]) for c in i2t_rows["result"]]
    assert t2i_rows["exact"].tolist() == [bool(split.exact[5, i]) for i in t2i_rows["result"]]


def test_specific_captions_draws_only_the_given_levels():
    split = _split()
    picks = specific_captions(split, 4, np.random.default_rng(0), levels=("full",))
    assert picks == sorted(picks) and len(set(picks)) == 4
    assert all(split.caption_level[c] == "full" for c in picks)
    with pytest.raises(ValueError, match="asked for 11"):
        specific_captions(split, 11, np.random.default_rng(0), levels=("full",))


def test_caption_gallery_checks_its_shapes():
    images = np.zeros((2, 4, 4, 3), np.uint8)
    fig = caption_gallery(images, [["a", "b"], ["c", "d"]], np.array([[True, False], [False, False]]),
                          np.array([[True, False], [False, True]]), ["q0", "q1"])
    assert len(fig.axes) == 4
    with pytest.raises(ValueError, match="expected"):
        caption_gallery(images, [["a", "b"], ["c"]], np.ones((2, 2), bool))


# ------------------------------------------------------------------------------------------ run counts
def test_training_runs_counts_the_grids():
    cpu = training_runs("cpu", 3)
    own = cpu[~cpu["shared with PCME chapter"]]
    # train: DVSE tuning 3 lrs + 2 margins, 2 more seeds, 3 region runs (one a seed); ablate: Table V 6 combinations
    # x 3 seeds, K = 1 (w/o SE), 2, 4, 8, 12 x 3 seeds, beta 0.2, 0.6, 0.8 and eta 0.2, 0.4, 0.8 x 3 seeds
    assert own.groupby("notebook")["runs"].sum().to_dict() == {"train": 5 + 2 + 3, "ablate": 18 + 15 + 9 + 9,
                                                              "visualise": 0}
    assert cpu[cpu["shared with PCME chapter"]]["runs"].sum() == 4 * 5 + 6 * 3 - 4
    smoke = training_runs("smoke")
    assert smoke[~smoke["shared with PCME chapter"]]["runs"].sum() == 1 + 0 + 1 + 1 + 1  # tune, region, combo 5, w/o SE
    assert ABLATION_GRIDS["smoke"]["combination"] == (1, 5)  # 5 switches every component off: every loss path


# ======================================================================== the notebooks' calls (issue 13)
def _data(split: Split) -> ChapterData:
    return ChapterData(split, split, split, split, ["a", "b", "c"], np.zeros((3, 2), np.float32), 0.5)


def _ceiling(rsum_1k: float, rsum_all: float) -> dict[str, dict[str, float]]:
    keys = [f"{d}/R@{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)]
    return {"1K": {**{k: 90.0 for k in keys}, "rsum": rsum_1k}, "all": {**{k: 80.0 for k in keys}, "rsum": rsum_all}}


def _table1_runs() -> pd.DataFrame:
    """DVSE: 1K rSum 200, 240 and all rSum 250, 300 over two seeds; every other model of ORDER: one seed, 100."""
    rows = [("DVSE", 0, 200.0, 250.0), ("DVSE", 1, 240.0, 300.0)]
    rows += [(m, 0, 100.0, 100.0) for m in ORDER if m != "DVSE"]
    return pd.DataFrame([{"model": m, "seed": s, "converged": True, **{c: 1.0 for c in TABLE1_COLUMNS},
                          "1K rSum": k1, "all rSum": a} for m, s, k1, a in rows])


def test_table1_frame_puts_the_ceiling_on_top_with_the_mean_shares():
    ceiling = _ceiling(400.0, 500.0)
    runs = _table1_runs()
    plain = table1_frame(runs, "scenes", None)
    assert "Bayes ceiling" not in set(plain["model"]) and "1K rSum % of ceiling" not in plain.columns
    out = table1_frame(runs, "scenes", ceiling)
    assert list(out.columns) == list(plain.columns) + ["1K rSum % of ceiling", "all rSum % of ceiling"]
    assert list(out["model"]) == ["Bayes ceiling", *plain["model"]]
    top, rows = out.iloc[0], out.set_index("model")
    assert top["1K rSum (scenes)"] == 400.0 and top["all i2t R@5 (scenes)"] == 80.0
    assert top["1K rSum % of ceiling"] == 100.0 and top["all rSum % of ceiling"] == 100.0
    assert rows.loc["DVSE", "1K rSum % of ceiling"] == pytest.approx(55.0)  # mean of 50 and 60
    assert rows.loc["VSE0", "all rSum % of ceiling"] == pytest.approx(20.0)
    assert np.isnan(rows.loc["P2RM (paper only)", "1K rSum % of ceiling"])  # not built: no runs


def test_table2_frame_adds_the_ceiling_row_only_with_a_ceiling():
    runs = _table1_runs()
    assert "Bayes ceiling" not in set(table2_frame(runs, "scenes", None)["model"])
    out = table2_frame(runs, "scenes", _ceiling(400.0, 500.0))
    # Flickr30K's test size: the 1K protocol (five folds of 1,000 images), its ceiling too
    assert out.iloc[0]["model"] == "Bayes ceiling" and out.iloc[0]["1K rSum (scenes)"] == 400.0
    assert out.set_index("model").loc["DVSE", "1K rSum (scenes)"] == 220.0 and "all rSum (scenes)" not in out


def test_region_runs_rename_the_region_rows_as_the_papers_dvse():
    per_run = pd.DataFrame({"model": ["DVSE", REGIONS, REGIONS + " + FR", "DVSE + FR"], "x": [1.0, 2.0, 3.0, 4.0]})
    out = region_runs(per_run)
    assert out["model"].tolist() == ["DVSE", "DVSE + FR"] and out["x"].tolist() == [2.0, 3.0]


def test_write_region_tables_only_with_region_features(tmp_path: Path):
    run = RunConfig.from_params(PROFILE="smoke", RESULTS_DIR=str(tmp_path / "res"), DATASET="scenes")
    per_run = pd.DataFrame([{"model": m, "seed": 0, **{c: v for c in {**TABLE1_COLUMNS, **TABLE3_COLUMNS}}}
                            for m, v in ((REGIONS, 7.0), (REGIONS + " + FR", 9.0))])
    note = write_region_tables(per_run, _data(_split()), "scenes", [0], run)
    assert "no region features" in note.iloc[0, 0] and not (tmp_path / "res").exists()
    with_regions = dataclasses.replace(_split(), regions=np.zeros((N, 3, 5), np.float32))
    table = write_region_tables(per_run, _data(with_regions), "scenes", [0], run).set_index("model")
    assert table.loc["DVSE", "all rSum (scenes)"] == 7.0 and table.loc["DVSE + FR", "1K rSum (scenes)"] == 9.0
    for key in ("table1_regions", "table2_regions"):
        assert (tmp_path / "res" / "dvse" / f"{key}.csv").is_file()


def test_fr_models_add_the_region_dvse_with_region_features():
    assert fr_models(_data(_split())) == MODELS
    with_regions = dataclasses.replace(_split(), regions=np.zeros((N, 3, 5), np.float32))
    assert fr_models(_data(with_regions)) == [*MODELS, REGIONS]


def test_fr_figure_bars_are_the_seed_means_without_and_with_fr():
    per_run = pd.DataFrame({"model": ["A", "A", "A + FR", "B", "B + FR", "C"],
                            "all rSum": [10.0, 20.0, 30.0, 5.0, 7.0, 99.0]})
    fig = fr_figure(per_run, ["B", "A"], _ceiling(1.0, 50.0), "scenes")
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([5.0, 15.0, 7.0, 30.0])  # without FR (B, A), then with FR (B, A)
    assert [line.get_ydata()[0] for line in ax.lines] == [50.0]  # the ceiling
    assert not fr_figure(per_run, ["A"], None, "scenes").axes[0].lines


def test_rerank_bench_args():
    assert rerank_bench_args("smoke") == ["--images", "500", "--captions", "2500", "--threads", "2"]
    assert rerank_bench_args("cpu") == ["--fraction", "0.01", "--threads", "2"]


def test_compared_methods_and_the_data_tables():
    axes = weight_axes(COMPARED)
    assert "DVSE: margin 0.2 x 2^k, at most 2" in axes and axes.startswith("VSE0: margin")
    assert MODELS == ["VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4", "PCME mu only", "PCME", "DVSE"]
    split = _split()
    sizes = split_sizes(_data(split))
    assert sizes["images"].tolist() == [N] * 4 and sizes["captions"].tolist() == [N * PER] * 4
    trunk = SimpleNamespace(key="k", cells=16, channels=8)
    assert data_summary(trunk, _data(split)).endswith("vocabulary 3 words (50.0% in GloVe); region features: none")
    with_regions = dataclasses.replace(split, regions=np.zeros((N, 3, 5), np.float32))
    assert data_summary(trunk, _data(with_regions)).endswith("region features: 3 regions x 5 dims")


# ----------------------------------------------------------------------------------------- the declared claims
def test_every_declared_claim_can_fail_and_has_a_unique_key():
    assert CLAIMS == TRAIN_CLAIMS + ABLATE_CLAIMS + VISUALISE_CLAIMS
    assert len({s.key for s in CLAIMS}) == len(CLAIMS)
    assert [can_fail(s) for s in CLAIMS] == [""] * len(CLAIMS)


def test_run_collapse_finds_tied_and_chance_scores_but_not_a_learnt_one():
    split = _split()
    relevance = torch.as_tensor(split.relevance("instance", "i2t"), dtype=torch.float64)  # (N, M)
    assert instance_collapse(relevance + 0.01 * _scores(1), split) == ""  # every image's own captions on top
    assert instance_collapse(torch.ones(N, N * PER), split) == "every query's scores are tied across the gallery"
    assert instance_collapse(_scores(2)[:1].repeat(N, 1), split).startswith("every query gets the same scores")


# ----------------------------------------------------------------------------------------- train.py claims
_JITTER = (-0.1, 0.0, 0.1)  # per seed, alternating sign between models: zero mean, so every effect is exact


# ------------------------------------------------------------------------------------------ ablate.py
def _small_dvse_config():
    small = {"embed_dim": 8, "image": ImageEncoderConfig(widths=(4, 8), hidden=8, image_size=16),
             "text": TextEncoderConfig(hidden=4)}
    return dvse_config(n_embeds=6, **small)


def test_table5_frame_marks_the_switches_of_each_combination():
    runs = pd.DataFrame([{"model": f"combination {c}", "seed": s, "all rSum": 100.0 + c + s}
                         for c in (1, 3, 5) for s in (0, 1)])
    out = table5_frame(runs, (1, 3, 5), "scenes").set_index("model")
    assert list(out.columns[:5]) == ["DM", "L_var", "L_ort", "SE", "seeds"]
    assert out.loc["combination 1", ["DM", "L_var", "L_ort", "SE"]].tolist() == ["✓"] * 4
    assert out.loc["combination 3", ["DM", "L_var", "L_ort", "SE"]].tolist() == ["", "", "✓", "✓"]  # Table V row 3
    assert out.loc["combination 5", ["DM", "L_var", "L_ort", "SE"]].tolist() == [""] * 4
    assert out.loc["combination 3", "all rSum (scenes)"] == 103.5


def test_k_labels_and_configs():
    assert [k_label(k) for k in (1, 2, 6.0, 12)] == ["w/o SE", "K=2", "K=6", "K=12"]
    base = _small_dvse_config()
    one = k_config(base, 1)
    assert one.sub_embeddings is False and one.n_embeds == base.n_embeds
    eight = k_config(base, 8.0)
    assert eight.n_embeds == 8 and eight.sub_embeddings is True and eight.eta == base.eta
    assert combination_label(3) == "combination 3"


def test_table6_frame_and_figure_follow_k():
    runs = pd.DataFrame([{"model": k_label(k), "K": k, "seed": s, **{c: 10.0 * k + s for c in TABLE6_COLUMNS}}
                         for k, seeds in ((1, (0, 1)), (4, (0,)), (6, (0, 1))) for s in seeds])
    table = table6_frame(runs, (1, 4, 6), "scenes")
    assert table["model"].tolist() == ["w/o SE", "K=4", "K=6"] and table["seeds"].tolist() == [2, 1, 2]
    fig = table6_figure(runs)
    rsum = fig.axes[0].lines[0]
    assert rsum.get_xdata().tolist() == [1, 4, 6] and rsum.get_ydata().tolist() == [10.5, 40.0, 60.5]
    assert len(fig.axes[1].lines) == 4


def test_sweep_figure_draws_each_parameter_in_order():
    sweep = pd.DataFrame([{"parameter": p, "value": v, **{c: 10 * v + i for i, c in enumerate(SWEEP_COLUMNS)}}
                          for p, values in (("beta", (0.6, 0.2, 0.4)), ("eta", (0.2, 0.8))) for v in values])
    fig = sweep_figure(sweep)  # `viz.sweep_grid` (tests/test_viz.py): metrics in rows, beta and eta in columns
    axes = np.array(fig.axes).reshape(len(SWEEP_COLUMNS), 2)
    assert [ax.get_title() for ax in axes[0]] == ["Figure 8: β", "Figure 9: η"]
    assert [ax.get_ylabel() for ax in axes[:, 0]] == SWEEP_COLUMNS
    beta = axes[2, 0].containers[0].lines[0]  # all t2i R@1 = 10 v + 2
    assert beta.get_xdata().tolist() == [0.2, 0.4, 0.6] and beta.get_ydata().tolist() == pytest.approx([4.0, 6.0, 8.0])
    assert axes[0, 1].containers[0].lines[0].get_xdata().tolist() == [0.2, 0.8]
    seeds = pd.concat([sweep.assign(seed=0), sweep.assign(seed=1, **{c: sweep[c] + 2 for c in SWEEP_COLUMNS})])
    two = np.array(sweep_figure(seeds).axes).reshape(len(SWEEP_COLUMNS), 2)  # each value's mean over its seeds: + 1
    assert two[2, 0].containers[0].lines[0].get_ydata().tolist() == pytest.approx([5.0, 7.0, 9.0])


def _t5_runs(seeds=(0, 1, 2)) -> pd.DataFrame:
    rsum = {1: 100.0, 2: 95.0, 3: 80.0, 4: 77.5, 5: 78.0, 6: 90.0, 7: 85.0}
    return pd.DataFrame([{"model": f"combination {c}", "seed": s, "converged": True, "collapse": "",
                          "all rSum": v + s + (-1) ** c * _JITTER[s]} for c, v in rsum.items() for s in seeds])


def test_impact_runs_are_the_paired_differences_of_each_seed():
    runs = _t5_runs()
    runs.loc[(runs["model"] == "combination 6") & (runs["seed"] == 1), ["converged", "collapse"]] = [False, "tied"]
    out = impact_runs(runs).set_index(["model", "seed"])
    # a - b of each seed: combination c carries (-1)^c times the seed's jitter J (-0.1, 0, 0.1)
    assert out.loc[("impact of L_var", 0), "all rSum"] == pytest.approx(15.0)  # 1 - 7: the jitters cancel
    assert out.loc[("impact of L_ort", 2), "all rSum"] == pytest.approx(10.0 - 0.2)  # 1 - 6: -J - J, J = 0.1
    assert out.loc[("impact of SE", 0), "all rSum"] == pytest.approx(-0.5 - 0.2)  # 4 - 5: J + J, J = -0.1
    assert not out.loc[("impact of L_ort", 1), "converged"] and out.loc[("impact of L_ort", 1), "collapse"] == "tied"
    assert out.loc[("impact of DM", 1), "converged"] and len(out) == 12
    assert impact_runs(runs[runs["model"] != "combination 5"])["model"].unique().tolist() == [
        "impact of L_var", "impact of L_ort", "impact of DM"]


def _fr_runs(values=(1.0, 25.0, 100.0), diagonal=(40.0, 50.0, 30.0), seeds=(0, 1)) -> pd.DataFrame:
    """i2t: the diagonal as given, 20 off it; t2i: 60 above the diagonal (s2 > s1), 40 elsewhere; + seed."""
    rows = []
    for s in seeds:
        for i, s1 in enumerate(values):
            for s2 in values:
                rows.append({"direction": "i2t", "s1": s1, "s2": s2, "R@1": (diagonal[i] if s1 == s2 else 20.0) + s,
                             "seed": s, "converged": True, "collapse": ""})
                rows.append({"direction": "t2i", "s1": s1, "s2": s2, "R@1": (60.0 if s2 > s1 else 40.0) + s,
                             "seed": s, "converged": True, "collapse": ""})
    return pd.DataFrame(rows)


def test_best_cell_is_chosen_on_other_queries_than_those_that_score_it():
    # cell A wins on the even queries (all hit) and misses the odd ones; B hits only odd ones: A is chosen, scores 0
    cells = pd.DataFrame({"hits": [np.array([100.0, 0.0] * 5), np.array([0.0, 100.0] * 5)]})
    assert best_cell(cells)["R@1"] == 0.0 and best_cell(cells)["hits"].shape == (5,)


def _sweep(seeds=(0,)) -> pd.DataFrame:
    rows = [("beta", v, a, b) for v, a, b in zip((0.2, 0.4, 0.6, 0.8), (50.0, 52.0, 60.0, 51.0),
                                                   (40.0, 42.0, 41.0, 40.0))]
    rows += [("eta", v, a, a) for v, a in zip((0.2, 0.4, 0.6, 0.8), (50.0, 56.0, 52.0, 54.0))]
    return pd.DataFrame([{"parameter": p, "value": v, "seed": s, "converged": True, "collapse": "",
                          "all i2t R@1": a + s, "all i2t R@5": a + 10, "all t2i R@1": b + s, "all t2i R@5": b + 10}
                         for p, v, a, b in rows for s in seeds])


def test_beta_range_runs_by_hand():
    out = beta_range_runs(_sweep((0, 1))).set_index(["model", "seed"])["range"]
    assert out.to_dict() == {("β range: i2t", 0): 10.0, ("β range: t2i", 0): 2.0, ("β range: i2t", 1): 10.0,
                             ("β range: t2i", 1): 2.0}


# --------------------------------------------------------------------------------------------- Figure 7
def test_fr_grid_figure_draws_each_directions_grid():
    values = (2.0, 30.0)
    r1 = _fr_runs(values, (40.0, 50.0)).groupby(["direction", "s1", "s2"])["R@1"].mean()
    fig = fr_grid_figure(r1, values)
    i2t, t2i = (ax.images[0].get_array() for ax in fig.axes[:2] if ax.images)
    assert np.array_equal(np.asarray(i2t), [[40.5, 20.5], [20.5, 50.5]])  # rows s1, columns s2
    assert np.array_equal(np.asarray(t2i), [[40.5, 60.5], [40.5, 40.5]])


# ---------------------------------------------------------------------------------------- visualise.py
def test_random_images_and_fig6_panels():
    picks = random_images(np.random.default_rng(3), _split(), 4)
    assert picks == sorted(picks) and len(set(picks)) == 4 and all(0 <= i < N for i in picks)
    assert picks == random_images(np.random.default_rng(3), _split(), 4)
    assert list(fig6_panels(ABLATION_GRIDS["smoke"]["combination"]).values()) == [1]
    assert list(fig6_panels(ABLATION_GRIDS["cpu"]["combination"]).values()) == [4, 6, 2, 1]


def test_correlation_figure_has_one_column_per_panel():
    maps = {"a": (np.eye(3), np.full((3, 3), 0.5)), "b": (np.eye(3), np.eye(3))}
    fig = correlation_figure(maps, 7)
    assert len(fig.axes) == 4
    assert fig.axes[0].get_title() == "a\ntest image 7" and fig.axes[2].get_title() == "mean over the test split"
    assert np.array_equal(np.asarray(fig.axes[2].images[0].get_array()), np.full((3, 3), 0.5))


def test_heat_figure_titles_each_map_with_the_images_own_caption():
    rng = np.random.default_rng(0)
    split = Split("t", "mem", ["a", "b", "c"], ["x", "y", "z"], ["red x", "blue y", "green z"], np.arange(3),
                  images=rng.integers(0, 255, (3, 16, 16, 3), dtype=np.uint8))
    small = {"embed_dim": 8, "image": ImageEncoderConfig(widths=(4, 8), hidden=8, image_size=16),
             "text": TextEncoderConfig(hidden=4)}
    torch.manual_seed(0)
    vocab = Vocabulary.build(split.captions)
    model = DVSE(dvse_config(n_embeds=3, **small), rng.standard_normal((len(vocab), 3)).astype(np.float32))
    fig = heat_figure(model, split, vocab, [2, 0], grid_boxes(16, 16), "cpu")
    assert len(fig.axes) == 2 * (3 + 1) + 2  # and a colour bar per image (its own scale)
    assert [ax.get_ylabel() for ax in fig.axes[8:]] == ["image 2: heat", "image 0: heat"]
    _, attn, mask = sub_embeddings(model, split, "cpu", [2, 0])
    for row, image in enumerate((2, 0)):
        assert fig.axes[4 * row].get_title() == f"image {image}"
        heat = attention_heat(attn[row].numpy(), grid_boxes(16, 16), 16)
        for j in range(3):
            ax = fig.axes[4 * row + 1 + j]
            masked = " (masked)" if mask[row, j] == 0 else ""
            assert ax.get_title().replace("\n", " ") == f"v{j + 1}{masked}: {split.captions[image]}"  # its only caption
            assert np.allclose(np.asarray(ax.images[1].get_array()), heat[j])
            assert ax.images[1].get_cmap().name == "inferno" and ax.images[0].get_array().ndim == 2  # over grey


def _lists() -> pd.DataFrame:
    rows = []
    for model, shift in (("M1", 0), ("M2", 1)):
        for q in (4, 9):
            rows += [{"direction": "t2i", "query": q, "rank": r, "result": (q + r + shift) % N, "exact": r == 0,
                      "instance": False, "model": model} for r in range(2)]
        for q in (1, 3):
            rows += [{"direction": "i2t", "query": q, "rank": r, "result": 2 * q + r + shift, "exact": r == 1,
                      "instance": r == 0, "model": model} for r in range(3)]
    return pd.DataFrame(rows)


def test_query_figures_show_each_query_under_each_model_in_turn():
    split = _split()
    fig11 = caption_query_figure(_lists(), split, [4, 9], ["M1", "M2"])
    assert len(fig11.axes) == 4 * (1 + 2)
    texts = [ax.texts[0].get_text().replace("\n", " ") for ax in fig11.axes[::3]]
    assert texts == ["M1: caption 4", "M2: caption 4", "M1: caption 9", "M2: caption 9"]
    assert np.array_equal(np.asarray(fig11.axes[3 * 3 + 2].images[0].get_array()), split.images[(9 + 1 + 1) % N])
    fig12 = image_query_figure(_lists(), split, [1, 3], ["M1", "M2"])
    assert [ax.get_title() for ax in fig12.axes[::2]] == ["M1: image 1", "M2: image 1", "M1: image 3", "M2: image 3"]
    lines = [t.get_text() for t in fig12.axes[3].texts]  # M2, image 1: captions 3, 4, 5
    assert lines == ["1. caption 3 (True)", "2. caption 4", "3. caption 5"]
    assert [t.get_color() for t in fig12.axes[3].texts] == ["tab:red", "tab:green", "tab:red"]


@pytest.fixture(scope="module")
def tiny_scenes(tmp_path_factory):
    from xmr_core.data.scenes import ScenesConfig, load_scenes

    mp = pytest.MonkeyPatch()
    mp.setenv("XMR_CACHE", str(tmp_path_factory.mktemp("scenes")))
    yield load_scenes(ScenesConfig(seed=2, n_train=10, n_val=10, n_test=8, image_size=32), progress=False,
                      regions=False)["test"]
    mp.undo()


def test_attention_grounding_matches_a_brute_force_over_pixels_and_descriptors(tiny_scenes):
    """A smoke-size DVSE on scenes test images: each unmasked sub-embedding's attention on the pixels of the objects
    its best own caption names (found by matching every descriptor of the logical form by hand), against uniform."""
    from xmr_core.data import scene_grammar as g

    split = tiny_scenes
    size = split.images.shape[1]
    small = {"embed_dim": 8, "image": ImageEncoderConfig(widths=(4, 8), hidden=8, image_size=size),
             "text": TextEncoderConfig(hidden=4)}
    torch.manual_seed(0)
    vocab = Vocabulary.build(split.captions)
    model = DVSE(dvse_config(n_embeds=3, **small), np.random.default_rng(0).standard_normal(
        (len(vocab), 3)).astype(np.float32))
    _, attn, mask = sub_embeddings(model, split, "cpu")
    cells = attn.shape[1]
    boxes = grid_boxes(cells, size)
    share, chance = attention_grounding(model, split, vocab, boxes, "cpu")
    (v, _, _), cap = embed_split(model, split, vocab, device="cpu")
    lay, lfs = split.meta["layout"], split.meta["logical_forms"]
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    inside = lambda b: (xs >= b[0]) & (xs < b[2]) & (ys >= b[1]) & (ys < b[3])
    for i in range(split.n_images):
        own = [c for c in range(split.n_captions) if split.caption_image[c] == i]
        attrs = [(lay.shape[i, o], lay.colour[i, o], lay.size[i, o], lay.pos[i, o]) for o in range(lay.n_objects[i])]
        on = [k for k in range(3) if mask[i, k] != 0] or [0, 1, 2]
        got, base = [], []
        for k in on:
            best = own[int(np.argmax([float(v[i, k] @ cap[c]) for c in own]))]
            lf = lfs[best]
            descs = list(lf.objects) + [d for d, _ in lf.counts] + [d for a, _, b in lf.relations for d in (a, b)]
            named = [o for o, a in enumerate(attrs)
                     if any(all(want in (g.ANY, have) for want, have in zip(d, a)) for d in descs)]
            union = np.zeros((size, size), bool)
            for o in named:
                union |= inside(split.meta["object_boxes"][i][o])
            frac = np.array([(inside(b) & union).sum() / inside(b).sum() for b in boxes])
            w = attn[i, :, k].double().numpy()
            got.append(100 * (w * frac).sum() / w.sum())
            base.append(100 * frac.mean())
        assert share[i] == pytest.approx(np.mean(got)) and chance[i] == pytest.approx(np.mean(base))


def test_claims_preamble():
    assert "NOT COCO, Flickr30K or CUB" in claims_preamble("cpu", "scenes")
    assert "NOT COCO" not in claims_preamble("paper", "cub") and "profile `paper`, dataset `cub`" in claims_preamble(
        "paper", "cub")

