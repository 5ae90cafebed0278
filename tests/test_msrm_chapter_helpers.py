"""The MSRM chapter's helpers that need no training (xmr_core.chapters.msrm)."""

import dataclasses
import itertools
import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from fixtures.msrm import tiny_config

from xmr_core.chapters import msrm as chapter
from xmr_core.chapters.msrm import (
    ABLATION_GRIDS,
    COMPARED,
    ORDER,
    TABLE1_COLUMNS,
    batch_incidence,
    training_runs,
)
from xmr_core.chapters.pcme import COMPARED as PCME_COMPARED
from xmr_core.chapters.pcme import table3_frame, weight_axes
from xmr_core.chapters.summary import write_optional_table
from xmr_core.claims import can_fail, detect_collapse
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Corpus, Split
from xmr_core.data.text import Vocabulary
from xmr_core.evaluate import direction_scores, embed_split, evaluate_model, label_distance, top_k_lists
from xmr_core.experiment.protocols import ChapterData
from xmr_core.experiment.scoring import TABLE3_COLUMNS
from xmr_core.methods.msrm import MSRM
from xmr_core.records import Evaluation, QueryStats, RunRecord, Scored, SplitQueries
from xmr_core.reported import paper_values
from xmr_core.run_evaluation import evaluate_run


def test_compared_reuses_the_pcme_chapter_and_adds_msrm():
    for name, spec in PCME_COMPARED.items():
        assert COMPARED[name] is spec  # the same builders: the same run keys, so cached runs are loaded
    msrm = COMPARED["MSRM"]
    assert msrm.weight_name == "gamma" and msrm.default == 0.8 and msrm.weight.step == 2.0
    assert list(TABLE1_COLUMNS) == ["T1 i2t R-P", "T1 i2t R@1", "T1 t2i R-P", "T1 t2i R@1"]


def test_paper_values_cover_every_row_we_report():
    paper = paper_values("msrm")
    assert set(paper["table"]) == {"table1", "table2", "table3", "table4"}
    for table in ("table1", "table2"):
        methods = set(paper[paper["table"] == table]["method"])
        assert set(ORDER) <= methods
    msrm = paper[(paper["table"] == "table3") & (paper["method"] == "MSRM") & (paper["protocol"] == "5K")]
    assert float(msrm[msrm["key"] == "plausible/t2i/PMRP"]["value"].iloc[0]) == 35.81  # Table 3, typed by hand
    assert len(paper[(paper["table"] == "table4")]) == 16


def test_label_distance_is_l1_of_concept_labels():
    labels = np.array([[1, 0, 1], [1, 0, 1], [0, 1, 1], [0, 1, 0]], np.uint8)
    # image 0 against 0, 1, 2, 3: 0, 0, |1|+|1| = 2, 1+1+1 = 3 (unsigned labels must not wrap around)
    assert label_distance(labels, 0, np.array([0, 1, 2, 3])).tolist() == [0, 0, 2, 3]


def test_top_k_lists_by_hand():
    split = Split("t", "mem", ["a", "b", "c"], ["c0", "c1", "c2"], ["x", "y", "z"], np.array([0, 1, 2]),
                  image_labels=np.array([[1, 0], [1, 1], [0, 1]], np.uint8))
    i2t = torch.tensor([[0.1, 0.9, 0.5], [0.0, 0.0, 1.0], [0.3, 0.2, 0.1]])  # image 0: captions 1, 2
    t2i = torch.tensor([[0.2, 0.0, 0.0], [0.1, 0.0, 0.0], [0.7, 0.0, 0.0]])  # caption 0 (of image 0): images 2, 0
    out = top_k_lists(i2t, t2i, split, [0], [0], k=2)
    assert out["direction"].tolist() == ["i2t", "i2t", "t2i", "t2i"]
    assert out["result"].tolist() == [1, 2, 2, 0]
    # zeta to image 0's labels (1, 0): caption 1 -> image 1 (1, 1): 1; caption 2 -> image 2 (0, 1): 2; image 0: 0
    assert out["zeta"].tolist() == [1, 2, 2, 0]
    assert out["instance"].tolist() == [False, False, False, True]


def test_batch_incidence_is_eq8_with_ones_on_matches():
    rng = np.random.default_rng(0)
    split = Split("t", "mem", [f"i{k}" for k in range(3)], [f"c{k}" for k in range(4)],
                  ["red circle", "blue square", "red circle", "green star"], np.array([0, 1, 1, 2]),
                  images=rng.integers(0, 255, (3, 16, 16, 3), dtype=np.uint8))
    vocab = Vocabulary.build(split.captions)
    model = MSRM(tiny_config(), rng.standard_normal((len(vocab), 8)).astype(np.float32))
    s, matched = batch_incidence(model, split, vocab, [0, 1, 3], "cpu")
    assert s.shape == (3, 3) and matched.dtype == bool
    assert np.allclose(s[matched], 1.0) and np.diag(matched).all()
    off = s[~matched]
    assert ((off > 0) & (off < 1)).all()  # exp(-d^2 / alpha) with alpha = 2 and d^2 > 0


def test_training_runs_counts_the_grids():
    runs = training_runs("cpu", 3)
    assert runs["runs"].iloc[0] == 4 * 5 and runs["runs"].iloc[1] == 5  # 3 lrs + 2 other weights
    fig6 = runs[runs["part"] == "Figure 6: batch grid (seeds)"]["runs"].iloc[0]
    assert fig6 == 2 * 3  # 32 and 64 at every seed; 128 is the default recipe's batch (the MSRM runs themselves)
    alpha = runs[runs["part"] == "Table 5: alpha grid + last-sigmoid ablation (seeds)"]["runs"].iloc[0]
    assert alpha == (3 + 1) * 3  # alpha 0, 1, 4 and the last-sigmoid ablation at every seed; alpha 2 is MSRM
    assert set(ABLATION_GRIDS) == {"smoke", "cpu", "paper"}
    assert isinstance(runs, pd.DataFrame)


def test_chapter_runs_seed_every_model_zero_shot_and_the_compared_two_on_all_classes():
    from xmr_core.chapters.msrm import SPECS, chapter_runs

    runs = chapter_runs("cpu", [5, 6, 7])
    zero_shot = [r for r in runs if r[0] == "zero-shot"]
    assert sorted(zero_shot) == sorted(("zero-shot", n, k, s) for s in (5, 6, 7) for n, k in SPECS)
    all_classes = [r for r in runs if r[0] == "all classes"]
    seeded = {(n, k) for _, n, k, s in all_classes if s == 7}
    assert seeded == {("PCME", 1), ("MSRM", 1)}
    assert {(n, k) for _, n, k, s in all_classes if s == 5} == set(SPECS)  # every model has its first seed
    assert len(all_classes) == len(SPECS) + 2 * 2
    assert len(set(runs)) == len(runs)
    smoke = chapter_runs("smoke", [0])
    assert [r for r in smoke if r[0] == "all classes"] == [("all classes", "PCME", 1, 0), ("all classes", "MSRM", 1, 0)]


# ------------------------------------------------------------------------------------ notebook helpers (no training)
SQRT2 = math.sqrt(2)  # the seed std (ddof 1) of two runs at v - 1 and v + 1


def _split(name: str, n_images: int, captions: list[str], images: bool = False) -> Split:
    caption_image = np.arange(len(captions)) % n_images
    pixels = np.random.default_rng(0).integers(0, 255, (n_images, 16, 16, 3), dtype=np.uint8) if images else None
    return Split(name, "mem", [f"i{k}" for k in range(n_images)], [f"c{k}" for k in range(len(captions))],
                 captions, caption_image, images=pixels)


def _chapter_data() -> ChapterData:
    train = _split("train", 2, ["a red circle", "a blue square", "a red square"])
    val, test_unseen, test = _split("val", 1, ["x"]), _split("unseen", 2, ["y", "z"]), _split("test", 4, list("abcdefgh"))
    vocab = Vocabulary.build(train.captions)
    return ChapterData(train, val, test_unseen, test, vocab, np.zeros((len(vocab), 4), np.float32), 0.5)


def test_msrm_is_compared_on_gamma_after_the_pcme_chapters_methods():
    assert weight_axes({"MSRM": COMPARED["MSRM"]}) == "MSRM: gamma 0.8 x 2^k"
    assert weight_axes(COMPARED).split("; ")[-1].startswith("MSRM: gamma")
    assert len(weight_axes(COMPARED).split("; ")) == len(COMPARED)
    assert ORDER == ["VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4", "PCME mu only", "PCME", "MSRM"]


def test_split_sizes_and_vocabulary_note_with_and_without_all_classes():
    data = _chapter_data()
    sizes = chapter.split_sizes(data, None)
    assert sizes.values.tolist() == [["train, seen classes", 2, 3], ["val, seen classes", 1, 1],
                                     ["test, unseen classes (Table 2)", 2, 2], ["test, all (Tables 1 and 3)", 4, 8]]
    with_all = chapter.split_sizes(data, data)
    assert with_all.values.tolist()[-1] == ["train, all classes (Table 1)", 2, 3]
    # 7 entries: <pad>, <unk> and a, red, circle, blue, square; coverage 0.5
    assert chapter.vocabulary_note(data, None) == (
        "zero-shot vocabulary 7 words (50.0% in GloVe); no all-classes split for this data set: Table 1 is skipped")
    assert chapter.vocabulary_note(data, data).endswith("; all-classes vocabulary 7 words")


def test_all_classes_only_where_the_corpus_has_the_split(monkeypatch):
    data = _chapter_data()
    cub = Corpus("cub", {"train": data.train, "val": data.val, "test": data.test}, meta={})
    assert chapter.optional_all_classes(cub) is None
    assert chapter.ablation_data(cub, data) == (data, "zero-shot")
    scenes = Corpus("scenes", cub.splits, meta={"class_split": {"seen": [0], "unseen": [1]}})
    everything = _chapter_data()
    monkeypatch.setattr(chapter, "all_classes_data", lambda corpus: everything)
    assert chapter.optional_all_classes(scenes) is everything
    abl_data, protocol = chapter.ablation_data(scenes, data)
    assert abl_data is everything and protocol == "all classes"


def _runs(values: dict[str, dict[str, float]], unconverged: tuple[str, ...] = (), protocol: str = "zero-shot"
          ) -> pd.DataFrame:
    """Two seeds per model at value - 1 and value + 1 of every column; the first seed of `unconverged` did not
    converge."""
    rows = []
    for model, cols in values.items():
        for seed, delta in ((0, -1.0), (1, 1.0)):
            rows.append({"model": model, "seed": seed, "protocol": protocol,
                         "converged": not (model in unconverged and seed == 0),
                         **{c: v + delta for c, v in cols.items()}})
    return pd.DataFrame(rows)


def test_table1_frame_keeps_order_and_skips_without_runs():
    assert chapter.table1_frame(pd.DataFrame(), "scenes") is None
    cols = list(TABLE1_COLUMNS)
    ac = _runs({"MSRM": {c: 50.0 for c in cols}, "PCME": {c: 40.0 for c in cols}})
    table = chapter.table1_frame(ac, "scenes")
    assert table["model"].tolist() == ["PCME", "MSRM"]  # ORDER's order, only the models trained
    assert table["seeds"].tolist() == [2, 2]
    assert table["T1 i2t R-P (scenes)"].tolist() == [40.0, 50.0]
    assert np.allclose(table["T1 i2t R-P std"], SQRT2)


CEILING = {"1K": {"i2t/R@1": 90.0, "t2i/R@1": 80.0, "rsum": 500.0},
           "5K": {"i2t/R@1": 70.0, "t2i/R@1": 60.0, "rsum": 400.0}}


def _zero_shot() -> pd.DataFrame:
    """Every model of ORDER with two seeds, all Table 3 columns at 10 (MSRM: 40); 5K rSum 40 and 80 (PCME: 100
    and 140, MSRM: 200 and 240)."""
    cols = list(TABLE3_COLUMNS)
    runs = _runs({m: {c: 40.0 if m == "MSRM" else 10.0 for c in cols} for m in ORDER})
    rsum = {"PCME": [100.0, 140.0], "MSRM": [200.0, 240.0]}
    runs["rsum 5K"] = [rsum.get(m, [40.0, 80.0])[s] for m, s in zip(runs["model"], runs["seed"])]
    return runs


def test_table3_frame_of_msrm_with_and_without_the_ceiling():
    zs = _zero_shot()
    plain = table3_frame(zs, "scenes", None, ORDER, "msrm")
    assert plain["model"].tolist() == ORDER and "5K rSum % of ceiling" not in plain
    table = table3_frame(zs, "scenes", CEILING, ORDER, "msrm")
    assert table["model"].tolist() == ["Bayes ceiling", *ORDER]
    ceiling_row = table.iloc[0]
    assert ceiling_row["T3 1K t2i R@1 (scenes)"] == 80.0 and ceiling_row["T3 5K i2t R@1 (scenes)"] == 70.0
    share = table.set_index("model")["5K rSum % of ceiling"]
    # PCME: 100 / 400 = 25%, 140 / 400 = 35% -> 30; MSRM: 50% and 60% -> 55; VSE0: 10% and 20% -> 15
    assert share["PCME"] == 30.0 and share["MSRM"] == 55.0 and share["VSE0"] == 15.0
    assert table.set_index("model").loc["MSRM", "T3 5K i2t PMRP (scenes)"] == 40.0


def test_write_optional_table_writes_only_a_table(tmp_path):
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path / "res"), DATASET="scenes")
    write_optional_table(None, "msrm/none", run=run, caption="nothing")
    assert not (tmp_path / "res" / "msrm" / "none.csv").exists()
    write_optional_table(pd.DataFrame({"a": [1.0]}), "msrm/some", run=run, caption="one row",
                         extra={"note": 1})
    assert pd.read_csv(tmp_path / "res" / "msrm" / "some.csv")["a"].tolist() == [1.0]


def test_table4_variants_change_one_field_each():
    base = tiny_config()
    variants = chapter.table4_variants(base)
    assert list(variants) == ["MSRM", "mu only", "w/o L_d", "w/o L_h"] and variants["MSRM"] is base
    changed = {name: {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
                      if getattr(cfg, f.name) != getattr(base, f.name)} for name, cfg in variants.items()}
    assert changed == {"MSRM": {}, "mu only": {"mu_only": True}, "w/o L_d": {"gamma": 0.0},
                       "w/o L_h": {"hypergraph": False}}


def test_sweep_settings_and_their_seeds():
    base = tiny_config()
    grids = {"alpha": (0.0, 2.0), "gamma": (0.5,), "layers": (3,), "batch": (32,)}
    settings = chapter.sweep_settings(base, grids)
    assert [(s.parameter, s.value) for s in settings] == [("alpha", 0.0), ("alpha", 2.0), ("gamma", 0.5),
                                                          ("layers", 3), ("batch", 32), ("last sigmoid", 0.0)]
    assert settings[0].config.init_alpha == 0.0 and settings[2].config.gamma == 0.5
    assert settings[3].config.hgnn_layers == 3
    assert settings[4].config is base and settings[4].overrides == {"batch_size": 32}
    assert settings[5].config.final_activation is False and base.final_activation is True


def _sweep_rows(parameter: str, values: list[float], means: list[float], seeds: list[int] | None = None,
                converged: bool = True) -> list[dict[str, object]]:
    """One run per value (seed 0) whose R-P and R@1 average to `means` (R-P = mean + 1, R@1 = mean - 1)."""
    rows = []
    for k, (value, mean) in enumerate(zip(values, means)):
        seed = 0 if seeds is None else seeds[k]
        rows.append({"parameter": parameter, "value": value, "seed": seed, "converged": converged, "collapse": "",
                     "i2t R-P": mean + 1, "i2t R@1": mean - 1, "t2i R-P": mean + 1, "t2i R@1": mean - 1})
    return rows


def test_table5_frame_means_each_alpha():
    sweep = pd.DataFrame(_sweep_rows("alpha", [0.0, 0.0, 2.0], [10.0, 14.0, 20.0], seeds=[0, 1, 0])
                         + _sweep_rows("gamma", [0.5], [99.0]))
    table = chapter.table5_frame(sweep)
    assert table["value"].tolist() == [0.0, 2.0]
    assert table["i2t R-P"].tolist() == [13.0, 21.0] and table["t2i R@1"].tolist() == [11.0, 19.0]


def _zeta_runs() -> pd.DataFrame:
    """MSRM: i2t zeta z = 10 + z, t2i = 20 + z at seed 0, both + 2 at seed 1 (mean 16 + z); PCME: 10 lower."""
    rows = []
    for model, base in (("MSRM", 10.0), ("PCME", 0.0)):
        for seed, delta in ((0, 0.0), (1, 2.0)):
            row = {"model": model, "seed": seed, "converged": True, "collapse": ""}
            for z in chapter.FIG7_ZETAS:
                row[f"i2t zeta{z}"], row[f"t2i zeta{z}"] = base + z + delta, base + 10 + z + delta
            rows.append(row)
    return pd.DataFrame(rows)


def test_fig7_frame_and_table():
    fig7 = chapter.fig7_frame(_zeta_runs())
    assert len(fig7) == len(ORDER) * len(chapter.FIG7_ZETAS)
    msrm = fig7[fig7["model"] == "MSRM"]
    assert msrm["zeta"].tolist() == [0, 1, 2, 3, 4] and msrm["R-P"].tolist() == [16.0, 17.0, 18.0, 19.0, 20.0]
    assert fig7[fig7["model"] == "VSE0"]["R-P"].isna().all()
    table = chapter.fig7_table(fig7)
    assert table.columns.tolist() == ["model", "zeta 0", "zeta 1", "zeta 2", "zeta 3", "zeta 4"]
    assert table["model"].tolist() == ORDER
    assert table.set_index("model").loc["PCME", "zeta 4"] == 10.0


def test_sweep_and_fig7_figures():
    sweep = pd.DataFrame(_sweep_rows("gamma", [0.5, 0.8], [1.0, 3.0]) + _sweep_rows("layers", [1, 2], [1.0, 2.0])
                         + _sweep_rows("batch", [32, 64], [5.0, 9.0]))
    fig = chapter.sweep_figure(sweep)  # `viz.sweep_grid` (tests/test_viz.py): metrics in rows, parameters in columns
    assert [ax.get_title() for ax in fig.axes[:3]] == ["Figure 4: γ", "Figure 5: layers l", "Figure 6: batch size B"]
    assert [fig.axes[3 * i].get_ylabel() for i in range(4)] == list(chapter.TABLE4_COLUMNS)
    assert fig.axes[2].containers[0].lines[0].get_ydata().tolist() == [6.0, 10.0]  # batch, i2t R-P = mean + 1
    assert fig.axes[5].containers[0].lines[0].get_ydata().tolist() == [4.0, 8.0]  # batch, i2t R@1 = mean - 1
    fig7 = chapter.fig7_figure(chapter.fig7_frame(_zeta_runs()))
    lines = {line.get_label(): line for line in fig7.axes[0].lines}
    assert list(lines) == ORDER and lines["MSRM"].get_linewidth() == 2.5
    assert lines["MSRM"].get_ydata().tolist() == [16.0, 17.0, 18.0, 19.0, 20.0]


def _list_split() -> Split:
    split = _split("t", 3, ["c0", "c1", "c2"], images=True)
    split.image_labels = np.array([[1, 0], [1, 1], [0, 1]], np.uint8)
    return split


def test_draw_queries_draws_images_then_captions():
    split = _split("t", 10, [f"c{k}" for k in range(20)])
    rng = np.random.default_rng(3)
    images, captions = chapter.draw_queries(rng, split, 4)
    assert images == sorted(set(images)) and len(images) == 4 and max(images) < 10
    assert captions == sorted(set(captions)) and len(captions) == 4 and max(captions) < 20
    again = np.random.default_rng(3)
    assert sorted(again.choice(10, 4, replace=False).tolist()) == images  # the images come first from `rng`


def test_model_lists_figure_and_summary():
    split = _list_split()
    i2t = torch.tensor([[0.1, 0.9, 0.5], [0.0, 0.0, 1.0], [0.3, 0.2, 0.1]])  # image 0: captions 1, 2
    t2i = torch.tensor([[0.2, 0.0, 0.0], [0.1, 0.0, 0.0], [0.7, 0.0, 0.0]])  # caption 0: images 2, 0
    b_i2t = torch.tensor([[0.9, 0.5, 0.1], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # image 0: captions 0, 1
    b_t2i = torch.tensor([[0.8, 0.0, 0.0], [0.3, 0.0, 0.0], [0.1, 0.0, 0.0]])  # caption 0: images 0, 1
    scores = {"A": (i2t, t2i), "B": (b_i2t, b_t2i)}
    lists = chapter.model_lists(scores, split, [0], [0], k=2)
    assert lists["model"].tolist() == ["A"] * 4 + ["B"] * 4
    assert lists["result"].tolist() == [1, 2, 2, 0, 0, 1, 0, 1]
    fig = chapter.lists_figure(lists, split)
    assert len(fig.axes) == 2 * (1 + 2 * 2)  # two queries; the query, then two results of each model
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:5] == ["image query 0", "A 1: ζ=1", "A 2: ζ=2", "B 1: ζ=0 GT", "B 2: ζ=1"]
    assert titles[5:] == ["", "A 1: ζ=2", "A 2: ζ=0 GT", "B 1: ζ=0 GT", "B 2: ζ=1"]
    green, red = (matplotlib.colors.to_rgba(c) for c in ("tab:green", "tab:red"))
    frames = [fig.axes[i].spines["left"].get_edgecolor() for i in (1, 2, 3, 4, 6, 7, 8, 9)]
    assert chapter.positives_view(split) == "instance" and frames == [red, red, green, red, red, green, green, red]
    plt.close(fig)
    # with exact relevance the frames show it (caption 0 holds in images 0 and 2, caption 1 in images 0 and 1), GT
    # the instance: a result that plainly matches its query is green though it is not the ground truth
    split.exact = np.array([[True, False, True], [True, True, False], [False, False, True]])
    fig = chapter.lists_figure(lists, split)
    frames = [fig.axes[i].spines["left"].get_edgecolor() for i in (1, 2, 3, 4, 6, 7, 8, 9)]
    assert chapter.positives_view(split) == "exact" and frames == [green, red, green, green, green, green, green, red]
    plt.close(fig)
    summary = chapter.list_summary(lists).set_index(["model", "direction"])
    # A: i2t zetas 1, 2, no hit; t2i zetas 2, 0, one hit. B: i2t 0, 1 (caption 0 hits); t2i 0, 1 (image 0 hits)
    assert summary.loc[("A", "i2t")].tolist() == [1.5, 0.0, 0.0]
    assert summary.loc[("A", "t2i")].tolist() == [1.0, 0.5, 0.5]
    assert summary.loc[("B", "i2t")].tolist() == [0.5, 0.5, 0.5]


def test_incidence_stats_and_figure():
    s = np.array([[1.0, 0.2, 0.6], [0.4, 1.0, 0.8], [0.0, 1.0, 1.0]])
    matched = np.eye(3, dtype=bool)
    matched[2, 1] = True
    stats = chapter.incidence_stats(s, matched)
    # off the matches: 0.2, 0.6, 0.4, 0.8, 0.0
    assert stats == pytest.approx({"mean S off the matches": 0.4, "max S off the matches": 0.8,
                                   "share of off-match S > 0.5": 0.4})
    split = _split("t", 2, ["a red circle on top", "a blue square", "two green stars"])
    fig = chapter.incidence_figure(s, split, np.array([0, 1, 2]), alpha=1.2345)
    ax = fig.axes[0]
    assert ax.get_title() == "Soft incidence S (Eq. 8), learned alpha 1.23"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["image 0", "image 1", "image 0"]
    assert ax.get_xticklabels()[0].get_text() == "a red circle on… (img 0)"


def test_an_ablation_that_diverges_in_its_first_epoch_or_scores_nan_is_a_listed_outcome(monkeypatch):
    calls = []

    def request_model(name, k, data, tuned, enc, run, seed, config=None, **overrides):
        return seed, config, overrides  # the request, as far as the fake `train_many` reads it

    def train_many(requests, run):
        [(seed, config, overrides)] = requests
        calls.append((seed, config.gamma, overrides["on_nonfinite"]))
        if config.gamma == 0.0:
            raise FloatingPointError("msrm: loss nan at epoch 1 step 8")
        return [(object(), type("Fit", (), {"converged": True, "best_epoch": 3, "stopped": "patience",
                                            "stop_message": "", "cached": True})())]

    def ablation_scores(model, result, seed, split, vocab, run, tuning):
        if calls[-1][1] == 0.8 and calls[-1][0] == 1:  # seed 1's MSRM: a collapsed variance, inf scores
            raise ValueError("data.json: split 'test': scores: query row 3 contains a NaN or inf score")
        value = 50.0 + len(calls)
        return chapter.QueryScores(dict.fromkeys(chapter.TABLE4_COLUMNS, value), np.full(4, value),
                                   np.array([0, 0, 1, 1]), ""), None  # no record: judged on the per-run table

    monkeypatch.setattr(chapter, "request_model", request_model)
    monkeypatch.setattr(chapter, "train_many", train_many)
    monkeypatch.setattr(chapter, "ablation_scores", ablation_scores)
    data = ChapterData(None, None, None, None, None, None, 1.0)
    variants = {"MSRM": tiny_config(), "w/o L_d": tiny_config(gamma=0.0), "w/o L_h": tiny_config(hypergraph=False),
                "mu only": tiny_config(mu_only=True)}
    t4 = chapter.table4_runs(variants, [0, 1], data, {}, {}, RunConfig.from_params(PROFILE="smoke", DEVICE="cpu"))
    runs = t4.runs
    assert [c for c in calls if c[1] == 0.0] == [(0, 0.0, "stop"), (1, 0.0, "stop")] and len(calls) == 8
    diverged = runs[runs["model"] == "w/o L_d"]
    assert list(diverged["stopped"]) == ["diverged in epoch 1"] * 2 and not diverged["converged"].any()
    assert diverged[list(chapter.TABLE4_COLUMNS)].isna().all().all()
    assert list(diverged["stop message"]) == ["msrm: loss nan at epoch 1 step 8"] * 2
    msrm = runs[runs["model"] == "MSRM"].set_index("seed")
    assert msrm.loc[0, "converged"] and msrm.loc[0, "stopped"] == "patience"
    assert not msrm.loc[1, "converged"] and msrm.loc[1, "stopped"] == "patience; non-finite test scores"
    assert msrm.loc[1, "best epoch"] == 3 and "query row 3" in msrm.loc[1, "stop message"]
    assert msrm.loc[1, list(chapter.TABLE4_COLUMNS)].isna().all()
    assert list(runs["collapse"]) == [""] * 8
    # per-query values of the scored runs only: seed 0's three (seed 1's gamma 0.8 runs score NaN)
    assert sorted(t4.queries) == [("MSRM", 0), ("mu only", 0), ("w/o L_h", 0)]
    judged = {j.spec.key: j for j in chapter.ablate_judgements(t4, _sweep_for_claims(), _zeta_runs(), RUN)}
    # w/o L_d diverged on both seeds, but MSRM's seed 1 is not scored: divergence decides only against a sound side
    assert judged["without-l-d-lower"].verdict == "not tested"
    assert judged["without-l-d-lower"].reason == "MSRM, w/o L_d did not converge"
    sound = t4.runs.copy()
    sound.loc[(sound["model"] == "MSRM") & (sound["seed"] == 1), ["converged", *chapter.TABLE4_COLUMNS]] = \
        [True, *[51.0] * len(chapter.TABLE4_COLUMNS)]
    fixed = chapter.AblationRuns(sound, {**t4.queries, ("MSRM", 1): (np.full(4, 51.0), np.array([0, 0, 1, 1]))},
                                 t4.records)
    l_d = next(j for j in chapter.ablate_judgements(fixed, _sweep_for_claims(), _zeta_runs(), RUN)
               if j.spec.key == "without-l-d-lower")
    assert l_d.verdict == "held" and l_d.reason.startswith("training diverges for w/o L_d on 2 of 2 seeds")
    assert judged["without-l-h-lower"].verdict == "not tested"  # their seed 1 was not scored: not converged
    assert judged["without-l-h-lower"].unconverged == ("MSRM", "w/o L_h")


# ------------------------------------------------------------------------------------ the claims (xmr_core.claims)
RUN = RunConfig.from_params(PROFILE="cpu", DATASET="scenes", DEVICE="cpu")
NOISE = (-1.0, 0.0, 2.0)  # every model's seed offset: paired by seed, a difference is the same on every seed


def _seeded(values: dict[str, dict[str, float]], own: dict[str, dict[str, tuple[float, ...]]] | None = None,
            unconverged: tuple[str, ...] = (), collapsed: tuple[str, ...] = ()) -> pd.DataFrame:
    """Three seeds per model: value + NOISE[seed] in every column, plus `own[model][column][seed]` (a model's
    own seed noise); the first seed of `unconverged` did not converge, the second of `collapsed` collapsed."""
    own = own or {}
    rows = []
    for model, cols in values.items():
        for seed, delta in enumerate(NOISE):
            rows.append({"model": model, "seed": seed, "converged": not (model in unconverged and seed == 0),
                         "collapse": "tied scores" if model in collapsed and seed == 1 else "",
                         **{c: v + delta + own.get(model, {}).get(c, (0.0,) * 3)[seed] for c, v in cols.items()}})
    return pd.DataFrame(rows)


def _zero_shot_values(rp: float, r1: float, pmrp: float, ir1: float) -> dict[str, float]:
    out = {f"T2 {d} R-P": rp for d in ("i2t", "t2i")} | {f"T2 {d} R@1": r1 for d in ("i2t", "t2i")}
    for p in ("1K", "5K"):
        out |= {f"T3 {p} {d} PMRP": pmrp for d in ("i2t", "t2i")} | {f"T3 {p} {d} R@1": ir1 for d in ("i2t", "t2i")}
    return out


def test_every_declared_claim_can_hold_and_fail():
    assert [s.key for s in chapter.CLAIMS] == [s.key for s in chapter.TRAIN_CLAIMS + chapter.ABLATE_CLAIMS
                                               + chapter.VISUALISE_CLAIMS]
    assert len({s.key for s in chapter.CLAIMS}) == len(chapter.CLAIMS) == 23
    assert [can_fail(s) for s in chapter.CLAIMS] == [""] * 23
    assert all(s.metric in chapter.CLAIM_METRICS for s in chapter.TRAIN_CLAIMS + chapter.ABLATE_CLAIMS)


def test_claim_evidence_per_part_and_unscored_runs():
    runs = _seeded({"A": {"x": 1.0, "y": 3.0}, "B": {"x": 5.0, "y": 5.0}, "C": {"x": 0.0, "y": 0.0}},
                   unconverged=("B",))
    runs.loc[(runs["model"] == "B") & (runs["seed"] == 0), ["x", "y"]] = np.nan  # B's unconverged seed: unscored
    runs.loc[runs["model"] == "C", "converged"] = False
    runs.loc[runs["model"] == "C", ["x"]] = np.nan  # C: no run scored
    mean = chapter.ClaimMetric("t", "test", {"": ("x", "y")})
    evidence, unscored = chapter.claim_evidence(runs, mean)
    assert unscored == {"C": "did not converge: no run scored"} and set(evidence) == {"A", "B"}
    assert evidence["A"].per_seed.tolist() == [1.0, 2.0, 4.0]  # (1 + 3) / 2 + NOISE
    assert evidence["B"].seeds == (1, 2) and evidence["B"].per_seed.tolist() == [5.0, 7.0]
    assert not evidence["B"].converged and evidence["A"].converged and evidence["A"].split == "test"
    parts = chapter.ClaimMetric("t", "test", {"x": ("x",), "y": ("y",)})
    evidence, _ = chapter.claim_evidence(runs[runs["model"] == "A"], parts)
    assert evidence["A · x"].per_seed.tolist() == [0.0, 1.0, 3.0]
    assert evidence["A · y"].per_seed.tolist() == [2.0, 3.0, 5.0]
    runs.loc[(runs["model"] == "A") & (runs["seed"] == 2), "y"] = np.nan
    with pytest.raises(ValueError, match="model 'A', seed 2: a converged run with a missing score"):
        chapter.claim_evidence(runs, mean)


def test_train_claims_judged_by_hand():
    zs = {"VSE0": _zero_shot_values(10, 10, 10, 10),
          "PVSE K=1": _zero_shot_values(30, 10, 10, 10), "PVSE K=2": _zero_shot_values(20, 20, 10, 10),
          "PVSE K=4": _zero_shot_values(25, 30, 10, 10), "PCME mu only": _zero_shot_values(40, 40, 40, 40),
          "PCME": _zero_shot_values(40, 40, 40.2, 40), "MSRM": _zero_shot_values(50, 50, 50, 40)}
    zs["MSRM"]["T2 t2i R@1"] = 35.0  # below PCME's 40 on one column of Table 2
    pmrp = ("T3 5K i2t PMRP", "T3 5K t2i PMRP")
    own = {"PCME mu only": {c: (-3.0, 0.0, 3.0) for c in pmrp},  # PCME - mu only = 3.2, 0.2, -2.8 over the seeds
           "MSRM": {c: (-2.0, 0.0, 2.0) for c in _zero_shot_values(0, 0, 0, 0) if "T3" in c and "R@1" in c}}
    ac = _seeded({"PCME": {c: 40.0 for c in TABLE1_COLUMNS}, "MSRM": {c: 45.0 for c in TABLE1_COLUMNS}},
                 collapsed=("MSRM",))
    runs = chapter.ChapterRuns(pd.DataFrame(), _seeded(zs, own), ac, pd.DataFrame())
    judged = {j.spec.key: j for j in chapter.train_judgements({}, {}, runs, RUN)}  # no records: the per-run tables
    assert list(judged) == [s.key for s in chapter.TRAIN_CLAIMS]
    verdicts = {k: j.verdict for k, j in judged.items()}
    assert verdicts == {
        "pvse-r1-rises-with-m": "held",  # 10 -> 20 -> 30
        "pvse-rp-falls-with-m": "did not hold",  # 30 -> 20 -> 25: the step 20 -> 25 rises by 5
        "msrm-over-pcme-zero-shot": "did not hold",  # t2i R@1 35 < 40
        "msrm-best-rp": "held",  # 50 against 40
        "msrm-over-pcme-all-classes": "not tested",  # MSRM's seed 1 collapsed
        "pcme-close-to-mu-only-pmrp": "inconclusive",  # 0.2 on average, but 3.2 and -2.8 on two seeds
        "msrm-over-pcme-pmrp": "held",  # 50 against 40.2 on every PMRP column
        "msrm-best-pmrp": "held",
        "msrm-over-pcme-r1": "inconclusive",  # -2, 0, +2
        "vsrn-aoq-weaker-pmrp": "not tested", "msrm-over-p2rm": "not tested",  # not built
    }
    rp = judged["pvse-rp-falls-with-m"]
    assert rp.effect == pytest.approx(-5.0) and rp.paired == "seed" and rp.n_seeds == 3 and rp.n_queries == 0
    assert judged["msrm-over-pcme-zero-shot"].effect == pytest.approx(-5.0)  # the weakest column
    assert judged["msrm-over-pcme-all-classes"].collapsed == ("MSRM · i2t R-P", "MSRM · i2t R@1", "MSRM · t2i R-P",
                                                              "MSRM · t2i R@1")
    assert judged["pcme-close-to-mu-only-pmrp"].effect == pytest.approx(0.2)
    assert judged["msrm-over-p2rm"].reason == "needs P2RM (not built in this book)"
    unconverged = chapter.ChapterRuns(pd.DataFrame(), _seeded(zs, own, unconverged=("PCME mu only",)),
                                      pd.DataFrame(), pd.DataFrame())
    again = {j.spec.key: j for j in chapter.train_judgements({}, {}, unconverged, RUN)}
    assert again["pcme-close-to-mu-only-pmrp"].verdict == "not tested"
    assert again["pcme-close-to-mu-only-pmrp"].reason == "PCME mu only did not converge"
    assert again["msrm-over-pcme-all-classes"].reason.startswith("this run has no MSRM · i2t R-P")  # no Table 1


def _class_record(name: str, split: str, seed: int, rp: dict[str, int], r1: dict[str, int],
                  collapse: str = "") -> RunRecord:
    """A record of the class view (full protocol) on 4 image and 8 caption queries with 100 positives each: in each
    direction every query `rp[direction]` hits in its top R, best rank 1 on the first `r1[direction] / 25` of every 4
    queries, else 2 (so R-P = rp and R@1 = r1 exactly, and every seed's queries alike)."""
    sp = SplitQueries(split, "synthetic", split * 8, 4, np.repeat(np.arange(4), 2), {"full": ((0, 4, 0, 8),)},
                      {("full", "class", d): np.full(n, 100) for d, n in (("i2t", 4), ("t2i", 8))})
    blocks = {("full", "class", d): QueryStats(np.tile([1] * (r1[d] // 25) + [2] * (4 - r1[d] // 25), n // 4),
                                               np.full(n, rp[d])) for d, n in (("i2t", 4), ("t2i", 8))}
    return RunRecord("", name, name.split("-")[0], {}, {"seed": seed}, {"converged": True, "stopped": "patience"}, {},
                     {}, Evaluation(sp, {"default": Scored(blocks, collapse=collapse)}))


def test_train_claims_judged_from_records_by_hand():
    """MSRM above PCME in every column of Table 1, and below it in t2i R@1 of Table 2: universal claims whose sides
    each read their column's queries from the records; the other claims' models are not in these records."""
    every, none = {"i2t": 100, "t2i": 100}, {"i2t": 0, "t2i": 0}  # R@1: every query's best rank 1, or none's
    values = {"PCME": ({"i2t": 50, "t2i": 50}, every, none), "MSRM": ({"i2t": 60, "t2i": 60}, {"i2t": 100, "t2i": 0},
                                                                       every)}
    records = {}
    for model, (rp, r1_zero_shot, r1_all) in values.items():
        for seed in (1, 0):  # out of seed order: each side's records are bound in seed order
            unseen = _class_record(f"{model}-{seed}@test-unseen", "test-unseen", seed, rp, r1_zero_shot)
            records["zero-shot", model, seed] = chapter.RecordedRun(
                _class_record(f"{model}-{seed}", "test", seed, rp, r1_zero_shot), unseen)
            ac = _class_record(f"{model}-all-{seed}", "test", seed, rp, r1_all)
            records["all classes", model, seed] = chapter.RecordedRun(ac, ac)
    missing = {"1K": "no COCO 1K folds here"}  # Table 3's claims read Table 3's views: not bound
    bindings = chapter.train_bindings(records, RUN, missing)
    assert set(bindings) == {"msrm-over-pcme-zero-shot", "msrm-over-pcme-all-classes"}
    side = bindings["msrm-over-pcme-zero-shot"].sides["MSRM · t2i R@1"]
    assert side.records == ("MSRM-0@test-unseen", "MSRM-1@test-unseen")
    assert side.metric == chapter.QueryMetric("R@1", "class", ("t2i",))
    assert bindings["msrm-over-pcme-all-classes"].sides["PCME · i2t R-P"].records == ("PCME-all-0", "PCME-all-1")
    empty = chapter.ChapterRuns(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    judged = {j.spec.key: j for j in chapter.train_judgements(records, bindings, empty, RUN, missing)}
    assert list(judged) == [s.key for s in chapter.TRAIN_CLAIMS]
    zero_shot, all_classes = judged["msrm-over-pcme-zero-shot"], judged["msrm-over-pcme-all-classes"]
    assert (zero_shot.verdict, zero_shot.effect) == ("did not hold", pytest.approx(-100.0))  # t2i R@1 0 < 100
    assert (all_classes.verdict, all_classes.effect) == ("held", pytest.approx(10.0))  # the weakest column: R-P
    assert all_classes.n_seeds == 2 and all_classes.n_queries == 4 and all_classes.paired == "seed+query"
    assert judged["msrm-over-pcme-pmrp"].reason == "no COCO 1K folds here"
    assert judged["msrm-best-rp"].verdict == "not tested"  # the other models are not in these records
    # a run without a record (not scored) leaves its claims to the per-run tables
    records["all classes", "MSRM", 1] = chapter.RecordedRun(None, None)
    tables = chapter.train_tables(records)
    tables["all classes"]["MSRM", 1] = None
    assert "msrm-over-pcme-all-classes" not in chapter.claim_bindings(chapter.TRAIN_CLAIMS, tables, RUN, "train",
                                                                       missing)


def _sweep_for_claims(n_seeds: int = 3) -> chapter.AblationRuns:
    """Every sweep setting of the claims at `n_seeds` seeds (mean of the four columns = the value below + NOISE)."""
    points = {"alpha": {0.0: 10.0, 1.0: 20.2, 2.0: 20.0, 4.0: 19.9}, "batch": {32: 23.0, 64: 20.0, 128: 20.0},
              "gamma": {0.5: 15.0, 0.8: 20.0, 2.0: 18.0}, "layers": {1: 25.0, 2: 20.0, 3: 18.0}}
    rows = []
    for parameter, means in points.items():
        for seed in range(n_seeds):
            rows += _sweep_rows(parameter, list(means), [m + NOISE[seed] for m in means.values()],
                                seeds=[seed] * len(means))
    return chapter.AblationRuns(pd.DataFrame(rows), {})


PATTERN = np.random.default_rng(0).normal(0.0, 1.0, 40)
PATTERN -= np.r_[np.full(30, PATTERN[:30].mean()), np.full(10, PATTERN[30:].mean())]  # mean 0 in each stratum
STRATA = np.repeat([0, 1], [30, 10])


def _with_queries(runs: chapter.AblationRuns, labels: list[str]) -> chapter.AblationRuns:
    """`runs` with per-query values for each run: its four columns' mean + PATTERN (30 image, 10 caption queries)."""
    frame = runs.runs
    mean = frame[list(chapter.TABLE4_COLUMNS)].mean(axis=1)
    return chapter.AblationRuns(frame, {(label, int(seed)): (m + PATTERN, STRATA)
                                        for label, seed, m in zip(labels, frame["seed"], mean)})


def test_ablate_claims_judged_by_hand():
    t4 = chapter.AblationRuns(_seeded({m: {c: v for c in chapter.TABLE4_COLUMNS} for m, v in {
        "MSRM": 20.0, "mu only": 10.0, "w/o L_d": 20.0, "w/o L_h": 10.0}.items()}, collapsed=("w/o L_h",)), {})
    judged = {j.spec.key: j for j in chapter.ablate_judgements(t4, _sweep_for_claims(), _zeta_runs(), RUN)}
    assert list(judged) == [s.key for s in chapter.ABLATE_CLAIMS]
    assert {k: j.verdict for k, j in judged.items()} == {
        "without-l-d-lower": "negligible",  # equal on every seed: the interval is [0, 0], inside +-0.5 pp
        "without-l-h-lower": "not tested",  # collapsed
        "without-variance-lower": "held",  # 20 against 10
        "bipolar-inferior": "held",  # MSRM 20 against alpha 0 at 10
        "alpha-little-effect": "held",  # +0.2 and -0.1, inside +-0.9
        "batch-insensitive": "did not hold",  # batch 32 is 3 above batch 128
        "batch-small-best": "held",  # batch 32: 23 against 20 and 20
        "gamma-peak": "held",  # 0.8: 20 against 18
        "two-layers-best": "did not hold",  # 1 layer: 25
        "msrm-over-pcme-every-zeta": "held",  # 10 above at every zeta
    }
    assert judged["without-l-h-lower"].reason == "w/o L_h collapsed (tied scores)"
    assert judged["two-layers-best"].effect == pytest.approx(-5.0)
    one_seed = {j.spec.key: j for j in chapter.ablate_judgements(t4, _sweep_for_claims(1), _zeta_runs(), RUN)}
    for key in ("bipolar-inferior", "alpha-little-effect", "batch-insensitive", "gamma-peak", "two-layers-best"):
        assert one_seed[key].verdict == "not tested"  # a side of one seed: no interval from seed scores
    assert one_seed["gamma-peak"].reason.endswith("(not tested: one seed and no per-query values: no interval can be "
                                                  "had)")  # said once for both of the peak's comparisons
    assert one_seed["without-variance-lower"].verdict == "held"
    # with each test query's values, one seed still gives an interval: over test sampling only
    sweep = _sweep_for_claims(1)
    sweep = _with_queries(sweep, [chapter.sweep_label(p, v) for p, v in zip(sweep.runs["parameter"],
                                                                             sweep.runs["value"])])
    t4q = _with_queries(t4, list(t4.runs["model"]))
    per_query = {j.spec.key: j for j in chapter.ablate_judgements(t4q, sweep, _zeta_runs(), RUN)}
    assert {k: per_query[k].verdict for k in ("alpha-little-effect", "batch-insensitive", "gamma-peak",
                                              "two-layers-best", "without-variance-lower")} == {
        "alpha-little-effect": "held", "batch-insensitive": "did not hold", "gamma-peak": "held",
        "two-layers-best": "did not hold", "without-variance-lower": "held"}
    gamma = per_query["gamma-peak"]
    assert gamma.paired == "query" and gamma.n_queries == 40 and gamma.noise == "queries (one seed: test sampling only)"
    assert gamma.effect == pytest.approx(2.0)
    assert per_query["without-variance-lower"].paired == "seed+query"
    assert per_query["bipolar-inferior"].noise.startswith("seeds+queries (one seed for some")  # alpha 0: one seed
    t4q.queries["mu only", 1] = (t4q.queries["mu only", 1][0] + 1.0, STRATA)
    with pytest.raises(ValueError, match="model 'mu only': the per-query values average to"):
        chapter.ablate_judgements(t4q, sweep, _zeta_runs(), RUN)


def _list_frame(gain: dict[str, float], n_i2t: int = 30, n_t2i: int = 10) -> pd.DataFrame:
    """`query_lists`-shaped rows of PCME (GT share 20 + a query pattern, zeta 2) and MSRM (PCME + gain[direction]
    on the GT share, minus gain / 10 on zeta), one seed."""
    pattern = np.random.default_rng(0).normal(0.0, 1.0, n_i2t + n_t2i)
    direction = ["i2t"] * n_i2t + ["t2i"] * n_t2i
    rows = []
    for model in ("PCME", "MSRM"):
        shift = np.array([gain[d] if model == "MSRM" else 0.0 for d in direction])
        rows.append(pd.DataFrame({"model": model, "seed": 0, "converged": True, "collapse": "",
                                  "direction": direction, "query": np.r_[np.arange(n_i2t), np.arange(n_t2i)],
                                  chapter.GT_TOP6: 20 + pattern + shift, chapter.ZETA_TOP6: 2 + pattern - shift / 10}))
    return pd.concat(rows, ignore_index=True)


def test_visualise_claims_on_every_query_with_strata():
    judged = chapter.visualise_judgements(_list_frame({"i2t": 10.0, "t2i": 30.0}), RUN)
    assert [j.verdict for j in judged] == ["held", "held"]
    gt = judged[0]
    # strata weigh i2t and t2i equally: (10 + 30) / 2 = 20, not the pooled (30 * 10 + 10 * 30) / 40 = 15
    assert gt.effect == pytest.approx(20.0) and judged[1].effect == pytest.approx(2.0)
    assert gt.paired == "query" and gt.n_seeds == 1 and gt.n_queries == 40
    assert gt.noise == "queries (one seed: test sampling only)"
    worse = chapter.visualise_judgements(_list_frame({"i2t": -10.0, "t2i": -30.0}), RUN)
    assert [j.verdict for j in worse] == ["did not hold", "did not hold"]
    collapsed = _list_frame({"i2t": 10.0, "t2i": 30.0})
    collapsed.loc[collapsed["model"] == "PCME", "collapse"] = "every query's scores are tied across the gallery"
    assert [j.verdict for j in chapter.visualise_judgements(collapsed, RUN)] == ["not tested", "not tested"]
    # three seeds, each seed's lists shifted alike on both models: paired by seed and query, the same effect
    seeds = pd.concat([_list_frame({"i2t": 10.0, "t2i": 30.0}).assign(
        seed=seed, **{chapter.GT_TOP6: lambda d, shift=shift: d[chapter.GT_TOP6] + shift})
        for seed, shift in ((0, 0.0), (1, 5.0), (2, -3.0))], ignore_index=True)
    three = chapter.visualise_judgements(seeds, RUN)[0]
    assert three.verdict == "held" and three.effect == pytest.approx(20.0)
    assert three.paired == "seed+query" and three.n_seeds == 3 and three.noise == "seeds+queries"
    seeds.loc[(seeds["model"] == "PCME") & (seeds["seed"] == 2), "query"] += 1
    with pytest.raises(ValueError, match="model 'PCME': its seeds' lists are not of the same queries"):
        chapter.visualise_judgements(seeds, RUN)


def test_query_lists_by_hand():
    split = _list_split()  # caption k is image k's; labels (1, 0), (1, 1), (0, 1)
    i2t = torch.tensor([[0.1, 0.9, 0.5], [0.2, 0.3, 1.0], [0.3, 0.2, 0.1]])
    t2i = torch.tensor([[0.2, 0.1, 0.9], [0.1, 0.8, 0.5], [0.7, 0.3, 0.4]])  # column q: caption q's images
    lists = chapter.query_lists({"A": (i2t, t2i)}, split, {"A": False}, seed=4, k=2)
    assert lists["direction"].tolist() == ["i2t"] * 3 + ["t2i"] * 3 and lists["query"].tolist() == [0, 1, 2] * 2
    # image 0: captions 1, 2 (no hit; zeta 1, 2); image 1: captions 2, 1 (one hit; 1, 0); image 2: 0, 1 (2, 1);
    # caption 0: images 2, 0 (one hit; 2, 0); caption 1: images 1, 2 (one hit; 0, 1); caption 2: 0, 1 (2, 1)
    assert lists[chapter.GT_TOP6].tolist() == [0.0, 50.0, 0.0, 50.0, 50.0, 0.0]
    assert lists[chapter.ZETA_TOP6].tolist() == [1.5, 0.5, 1.5, 1.0, 0.5, 1.5]
    assert set(lists["seed"]) == {4} and not lists["converged"].any()
    assert set(lists["collapse"]) == {detect_collapse(i2t, split.relevance("instance", "i2t"))}


def test_chance_lists_by_hand_and_against_every_ranking():
    split = _list_split()  # caption k is image k's; labels (1, 0), (1, 1), (0, 1): zeta rows (0 1 2), (1 0 1), (2 1 0)
    chance = chapter.chance_lists(split)
    assert chance["direction"].tolist() == ["i2t"] * 3 + ["t2i"] * 3 and set(chance["model"]) == {chapter.CHANCE}
    assert chance[chapter.GT_TOP6].tolist() == pytest.approx([100 / 3] * 6)
    assert chance[chapter.ZETA_TOP6].tolist() == pytest.approx([1.0, 2 / 3, 1.0] * 2)
    # the mean over every ranking of the gallery of query_lists' top-2 values is the chance
    rows = []
    for order in itertools.permutations(range(3)):
        scores = torch.tensor([[3.0 - order.index(j) for j in range(3)]] * 3, dtype=torch.float64)
        rows.append(chapter.query_lists({"A": (scores, scores.T)}, split, {"A": True}, seed=0, k=2))
    mean = pd.concat(rows).groupby(["direction", "query"], sort=False)[[chapter.GT_TOP6, chapter.ZETA_TOP6]].mean()
    np.testing.assert_allclose(mean.to_numpy(), chance[[chapter.GT_TOP6, chapter.ZETA_TOP6]].to_numpy())
    summary = chapter.top6_summary(rows[0], chance)
    assert summary["model"].tolist() == ["A", "A", chapter.CHANCE, chapter.CHANCE]


def test_record_scores_average_to_evaluates_class_metrics():
    rng = np.random.default_rng(1)
    split = Split("t", "mem", [f"i{k}" for k in range(6)], [f"c{k}" for k in range(12)],
                  [["red circle", "blue square", "green star", "red square"][k % 4] for k in range(12)],
                  np.arange(12) % 6, images=rng.integers(0, 255, (6, 16, 16, 3), dtype=np.uint8),
                  image_class=np.array([0, 1, 0, 1, 2, 2]))
    vocab = Vocabulary.build(split.captions)
    model = MSRM(tiny_config(), rng.standard_normal((len(vocab), 8)).astype(np.float32))
    evaluation = evaluate_run(model, split, vocab, scorings=chapter.class_scoring(split),
                              fold_views=chapter.CLASS_FOLD_VIEWS)
    scored = chapter.record_scores(RunRecord("", "MSRM-0", "msrm", {}, {"seed": 0}, {"converged": True}, {}, {},
                                             evaluation))
    values = evaluate_model(model, split, vocab, device="cpu", views=["class"])
    expected = {c: values[k] for c, k in chapter.TABLE4_COLUMNS.items()}  # evaluate_model's class metrics
    assert scored.row == pytest.approx(expected)
    assert scored.strata.tolist() == [0] * 6 + [1] * 12
    image_mean, caption_mean = scored.values[:6].mean(), scored.values[6:].mean()
    assert (image_mean + caption_mean) / 2 == pytest.approx(np.mean(list(expected.values())))
    assert scored.collapse == detect_collapse(*_msrm_i2t(model, split, vocab))


def _msrm_i2t(model: MSRM, split: Split, vocab: Vocabulary) -> tuple[torch.Tensor, np.ndarray]:
    img, cap = embed_split(model, split, vocab, device="cpu")
    return direction_scores(model, img, cap)[0], split.relevance("instance", "i2t")
