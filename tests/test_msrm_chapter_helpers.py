"""The MSRM chapter's helpers that need no training (xmr_core.chapters.msrm)."""

import dataclasses
import math

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
    label_distance,
    top_k_lists,
    training_runs,
)
from xmr_core.chapters.pcme import COMPARED as PCME_COMPARED
from xmr_core.chapters.pcme import table3_frame, weight_grids
from xmr_core.chapters.protocols import ChapterData
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Corpus, Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.msrm import MSRM
from xmr_core.results import paper_values


def test_compared_reuses_the_pcme_chapter_and_adds_msrm():
    for name, spec in PCME_COMPARED.items():
        assert COMPARED[name] is spec  # the same builders: the same run keys, so cached runs are loaded
    msrm = COMPARED["MSRM"]
    assert msrm.weight_name == "gamma" and msrm.default == 0.8 and msrm.weights == (0.5, 0.8, 2.0)
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
    fig6 = runs[runs["part"] == "Figure 6: batch grid"]["runs"].iloc[0]
    assert fig6 == 2  # 32 and 64; 128 is the default recipe's batch (the MSRM run itself)
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
    assert weight_grids({"MSRM": COMPARED["MSRM"]}) == "MSRM: gamma (0.5, 0.8, 2.0)"
    assert weight_grids(COMPARED).split("; ")[-1].startswith("MSRM: gamma")
    assert len(weight_grids(COMPARED).split("; ")) == len(COMPARED)
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
    cols = list(chapter.TABLE3_COLUMNS)
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
    chapter.write_optional_table(None, "msrm/none", run=run, caption="nothing")
    assert not (tmp_path / "res" / "msrm" / "none.csv").exists()
    chapter.write_optional_table(pd.DataFrame({"a": [1.0]}), "msrm/some", run=run, caption="one row",
                                 extra={"note": 1})
    assert pd.read_csv(tmp_path / "res" / "msrm" / "some.csv")["a"].tolist() == [1.0]


def _claim_values(rp: float, r1: float, pm: float, ir1: float) -> dict[str, float]:
    return {"T2 i2t R-P": rp, "T2 t2i R-P": rp, "T2 i2t R@1": r1, "T2 t2i R@1": r1, "T3 5K i2t PMRP": pm,
            "T3 5K t2i PMRP": pm, "T3 5K i2t R@1": ir1, "T3 5K t2i R@1": ir1}


def test_train_claims_by_hand():
    zs = _runs({"VSE0": _claim_values(10, 10, 10, 10), "PVSE K=1": _claim_values(30, 10, 10, 10),
                "PVSE K=2": _claim_values(25, 15, 10, 10), "PVSE K=4": _claim_values(20, 20, 10, 10),
                "PCME mu only": _claim_values(35, 35, 40, 35), "PCME": _claim_values(40, 40, 40.2, 40),
                "MSRM": _claim_values(50, 50, 50, 30)}, unconverged=("PVSE K=2",))
    ac = _runs({"PCME": {c: 45.0 for c in TABLE1_COLUMNS}, "MSRM": {c: 45.0 for c in TABLE1_COLUMNS}},
               protocol="all classes")
    runs = chapter.ChapterRuns(pd.concat([zs, ac], ignore_index=True), zs, ac, pd.DataFrame())
    claims = chapter.train_claims(runs, [0, 1])
    assert claims.columns.tolist() == ["claim", "source", "evidence", "verdict"]
    assert claims["verdict"].tolist() == [
        "not tested",  # PVSE: K=4 has the higher R@1 (20 > 10) and lower R-P (20 < 30), but K=2 did not converge
        "held",  # MSRM - PCME = +10 on T2 (spread sqrt 2)
        "not tested",  # best R-P of all: PVSE K=2 among "all"
        "held",  # PCME - mu only = +0.2 PMRP, within max(sqrt 2, 0.5)
        "held",  # MSRM - PCME = +9.8 PMRP
        "not tested",  # best PMRP of all
        "did not hold",  # MSRM - PCME = -10 instance R@1
        "within noise",  # all classes: MSRM - PCME = 0
        "not tested", "not tested",  # models not built
    ]
    assert claims["evidence"][0].startswith("K=1: R@1 10.0, R-P 30.0; K=2: R@1 15.0, R-P 25.0; K=4: R@1 20.0, R-P 20.0")
    assert "not tested: PVSE K=2 not converged" in claims["evidence"][0]
    assert claims["evidence"][1] == "MSRM - PCME = +10.00 pp (largest seed std 1.41)"
    assert claims["evidence"][6] == "MSRM - PCME = -10.00 pp of 5K instance R@1 (spread 1.41)"
    one_seed = chapter.train_claims(runs, [0])
    assert one_seed["verdict"][3] == "not tested"  # "differ very little" needs a seed spread


def test_train_claims_without_all_classes_runs():
    zs = _runs({m: _claim_values(10, 10, 10, 10) for m in ORDER})
    runs = chapter.ChapterRuns(zs, zs, pd.DataFrame(), pd.DataFrame())
    claims = chapter.train_claims(runs, [0, 1])
    assert len(claims) == 7 + 2 and not claims["source"].str.contains("Table 1$").any()


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
    assert chapter.sweep_seeds(settings[0], [5, 6, 7], 5) == [5, 6, 7]  # bipolar: every seed
    assert [chapter.sweep_seeds(s, [5, 6, 7], 5) for s in settings[1:]] == [[5]] * 5


def _sweep_rows(parameter: str, values: list[float], means: list[float], seeds: list[int] | None = None,
                converged: bool = True) -> list[dict[str, object]]:
    """One run per value (seed 0) whose R-P and R@1 average to `means` (R-P = mean + 1, R@1 = mean - 1)."""
    rows = []
    for k, (value, mean) in enumerate(zip(values, means)):
        seed = 0 if seeds is None else seeds[k]
        rows.append({"parameter": parameter, "value": value, "seed": seed, "converged": converged,
                     "i2t R-P": mean + 1, "i2t R@1": mean - 1, "t2i R-P": mean + 1, "t2i R@1": mean - 1})
    return rows


def test_table5_frame_means_each_alpha():
    sweep = pd.DataFrame(_sweep_rows("alpha", [0.0, 0.0, 2.0], [10.0, 14.0, 20.0], seeds=[0, 1, 0])
                         + _sweep_rows("gamma", [0.5], [99.0]))
    table = chapter.table5_frame(sweep)
    assert table["value"].tolist() == [0.0, 2.0]
    assert table["i2t R-P"].tolist() == [13.0, 21.0] and table["t2i R@1"].tolist() == [11.0, 19.0]


def test_range_and_peak_claims_by_hand():
    sweep = pd.DataFrame(_sweep_rows("alpha", [0.0, 1.0, 2.0, 4.0], [0.0, 10.0, 11.0, 12.5])
                         + _sweep_rows("gamma", [2.0, 0.5, 0.8], [2.0, 1.0, 3.0])
                         + _sweep_rows("layers", [1, 2, 3], [1.0, 2.0, 3.0]))
    alpha = chapter.range_claim(sweep, "alpha", "little effect", "Table 5", spread=1.5)
    # alpha 0 left out: range 12.5 - 10 = 2.5 <= 2 * 1.5
    assert alpha["verdict"] == "held"
    assert alpha["evidence"] == ("range over alpha [1.0, 2.0, 4.0] = 2.50 pp (one seed each; MSRM's seed std 1.50; "
                                 "little = within 2 seed std)")
    assert chapter.range_claim(sweep, "alpha", "c", "s", spread=1.0)["verdict"] == "did not hold"
    assert chapter.range_claim(sweep, "alpha", "c", "s", spread=float("nan"))["verdict"] == "not tested"
    gamma = chapter.peak_claim(sweep, "gamma", "peak", "Figure 4", spread=1.0)
    assert gamma["verdict"] == "held"  # sorted 0.5, 0.8, 2.0 -> 1, 3, 2: best 0.8 inside
    assert gamma["evidence"] == "mean R-P/R@1 per gamma: 0.5: 1.00, 0.8: 3.00, 2: 2.00; best 0.8; one seed each " \
                                "(MSRM's seed std 1.00)"
    assert chapter.peak_claim(sweep, "layers", "two", "Figure 5", 1.0, best_value=2)["verdict"] == "did not hold"
    assert chapter.peak_claim(sweep, "gamma", "peak", "Figure 4", 1.0, best_value=2)["verdict"] == "did not hold"
    assert chapter.peak_claim(sweep, "gamma", "peak", "Figure 4", float("nan"))["verdict"] == "not tested"
    two = pd.DataFrame(_sweep_rows("gamma", [0.5, 0.8], [1.0, 3.0]))
    assert chapter.peak_claim(two, "gamma", "peak", "Figure 4", 1.0)["verdict"] == "not tested"


def _t4_runs(means: dict[str, float], unconverged: tuple[str, ...] = ()) -> pd.DataFrame:
    return _runs({m: {c: v for c in chapter.TABLE4_COLUMNS} for m, v in means.items()}, unconverged, protocol="all classes")


def test_table4_and_bipolar_claims_by_hand():
    t4 = _t4_runs({"MSRM": 20.0, "mu only": 10.0, "w/o L_d": 20.5, "w/o L_h": 10.0}, unconverged=("w/o L_h",))
    claims = chapter.table4_claims(t4)
    assert [c["claim"] for c in claims] == ["Removing L_d lowers performance.", "Removing L_h lowers performance.",
                                            "Removing the query variance (mu only) lowers performance."]
    assert [c["verdict"] for c in claims] == ["within noise", "not tested", "held"]
    assert claims[2]["evidence"] == "MSRM - mu only = +10.00 pp (mean of R-P and R@1; spread 1.41)"
    sweep = pd.DataFrame(_sweep_rows("alpha", [0.0, 0.0, 2.0], [9.0, 11.0, 30.0], seeds=[0, 1, 0]))
    bipolar = chapter.bipolar_claim(sweep, t4, init_alpha=2.0)
    assert bipolar["verdict"] == "held"  # MSRM 19, 21 against alpha 0 at 9, 11
    assert bipolar["evidence"] == "MSRM (alpha 2) - bipolar = +10.00 pp (spread 1.41)"
    diverged = pd.DataFrame(_sweep_rows("alpha", [0.0, 0.0], [9.0, 11.0], seeds=[0, 1], converged=False))
    assert chapter.bipolar_claim(diverged, t4, init_alpha=2.0)["verdict"] == "not tested"


def _zeta_runs() -> pd.DataFrame:
    """MSRM: i2t zeta z = 10 + z, t2i = 20 + z at seed 0, both + 2 at seed 1 (mean 16 + z); PCME: 10 lower."""
    rows = []
    for model, base in (("MSRM", 10.0), ("PCME", 0.0)):
        for seed, delta in ((0, 0.0), (1, 2.0)):
            row = {"model": model, "seed": seed}
            for z in chapter.FIG7_ZETAS:
                row[f"i2t zeta{z}"], row[f"t2i zeta{z}"] = base + z + delta, base + 10 + z + delta
            rows.append(row)
    return pd.DataFrame(rows)


def test_fig7_frame_table_and_claim():
    fig7 = chapter.fig7_frame(_zeta_runs())
    assert len(fig7) == len(ORDER) * len(chapter.FIG7_ZETAS)
    msrm = fig7[fig7["model"] == "MSRM"]
    assert msrm["zeta"].tolist() == [0, 1, 2, 3, 4] and msrm["R-P"].tolist() == [16.0, 17.0, 18.0, 19.0, 20.0]
    assert fig7[fig7["model"] == "VSE0"]["R-P"].isna().all()
    table = chapter.fig7_table(fig7)
    assert table.columns.tolist() == ["model", "zeta 0", "zeta 1", "zeta 2", "zeta 3", "zeta 4"]
    assert table["model"].tolist() == ORDER
    assert table.set_index("model").loc["PCME", "zeta 4"] == 10.0
    claim = chapter.fig7_claim(fig7, [0, 1])
    assert claim["verdict"] == "held"
    assert claim["evidence"] == "MSRM - PCME per zeta: 0: +10.00, 1: +10.00, 2: +10.00, 3: +10.00, 4: +10.00 " \
                                "(mean over seeds [0, 1])"
    assert chapter.fig7_claim(fig7, [0])["verdict"] == "not tested"


def test_ablate_claims_in_the_papers_order():
    t4 = _t4_runs({"MSRM": 20.0, "mu only": 10.0, "w/o L_d": 10.0, "w/o L_h": 10.0})
    sweep = pd.DataFrame(_sweep_rows("alpha", [0.0, 0.0, 2.0, 4.0], [9.0, 11.0, 20.0, 20.5], seeds=[0, 1, 0, 0])
                         + _sweep_rows("gamma", [0.5, 0.8, 2.0], [1.0, 3.0, 2.0])
                         + _sweep_rows("layers", [1, 2, 3], [1.0, 3.0, 2.0])
                         + _sweep_rows("batch", [32, 64], [5.0, 9.0]))
    fig7 = chapter.fig7_frame(_zeta_runs())
    claims = chapter.ablate_claims(t4, sweep, fig7, 2.0, [0, 1])
    assert claims["source"].tolist() == ["Sec. 4.4, Table 4"] * 3 + [
        "Sec. 4.4, Table 5", "Sec. 4.4, Table 5", "Sec. 4.4, Figure 6", "Sec. 4.4, Figure 4", "Sec. 4.4, Figure 5", "Sec. 4.4, Figure 7"]
    # MSRM's seed std sqrt 2: alpha range 0.5 is within 2 sqrt 2, batch range 4 is not
    assert claims["verdict"].tolist() == ["held"] * 5 + ["did not hold", "held", "held", "held"]
    one_seed = chapter.ablate_claims(t4, sweep, fig7, 2.0, [0])
    assert one_seed["verdict"].tolist()[4:] == ["not tested"] * 5  # no seed spread for the one-seed sweeps


def test_sweep_and_fig7_figures():
    sweep = pd.DataFrame(_sweep_rows("gamma", [0.5, 0.8], [1.0, 3.0]) + _sweep_rows("layers", [1, 2], [1.0, 2.0])
                         + _sweep_rows("batch", [32, 64], [5.0, 9.0]))
    fig = chapter.sweep_figure(sweep)
    assert [ax.get_title() for ax in fig.axes] == ["Figure 4: γ", "Figure 5: layers l", "Figure 6: batch size B"]
    assert [len(ax.lines) for ax in fig.axes] == [4, 4, 4]
    assert fig.axes[0].lines[0].get_ydata().tolist() == [2.0, 4.0]  # i2t R-P = mean + 1
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
    assert titles[:5] == ["image query 0", "A 1: ζ=1", "A 2: ζ=2", "B 1: ζ=0", "B 2: ζ=1"]
    assert titles[5:] == ["", "A 1: ζ=2", "A 2: ζ=0", "B 1: ζ=0", "B 2: ζ=1"]
    assert fig.axes[3].spines["left"].get_edgecolor() != fig.axes[1].spines["left"].get_edgecolor()  # hit vs miss
    summary = chapter.list_summary(lists).set_index(["model", "direction"])
    # A: i2t zetas 1, 2, no hit; t2i zetas 2, 0, one hit. B: i2t 0, 1 (caption 0 hits); t2i 0, 1 (image 0 hits)
    assert summary.loc[("A", "i2t")].tolist() == [1.5, 0.0, 0.0]
    assert summary.loc[("A", "t2i")].tolist() == [1.0, 0.5, 0.5]
    assert summary.loc[("B", "i2t")].tolist() == [0.5, 0.5, 0.5]
    claim = chapter.lists_claim(chapter.list_summary(lists), ["A", "B"], 1)
    assert claim.verdict == "not tested"
    assert claim.evidence == ("A i2t: GT share 0.00, mean zeta 1.50; A t2i: GT share 0.50, mean zeta 1.00; "
                              "B i2t: GT share 0.50, mean zeta 0.50; B t2i: GT share 0.50, mean zeta 0.50 "
                              "(2 queries: illustrative, not a test)")


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

    def train_model(name, k, data, tuned, enc, run, seed, config=None, **overrides):
        calls.append((seed, config.gamma, overrides["on_nonfinite"]))
        if config.gamma == 0.0:
            raise FloatingPointError("msrm: loss nan at epoch 1 step 8")
        return object(), type("Fit", (), {"converged": True, "best_epoch": 3, "stopped": "patience",
                                          "stop_message": "", "cached": True})()

    def class_row(model, split, vocab, device, prefix):
        if calls[-1][1] == 0.8 and calls[-1][0] == 1:  # seed 1's MSRM: a collapsed variance, inf scores
            raise ValueError("data.json: split 'test': scores: query row 3 contains a NaN or inf score")
        return {c: 50.0 + len(calls) for c in chapter.TABLE4_COLUMNS}

    monkeypatch.setattr(chapter, "train_model", train_model)
    monkeypatch.setattr(chapter, "class_row", class_row)
    data = ChapterData(None, None, None, None, None, None, 1.0)
    variants = {"MSRM": tiny_config(), "w/o L_d": tiny_config(gamma=0.0), "w/o L_h": tiny_config(hypergraph=False),
                "mu only": tiny_config(mu_only=True)}
    runs = chapter.table4_runs(variants, [0, 1], data, {}, {}, RunConfig.from_params(PROFILE="smoke", DEVICE="cpu"))
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
    claims = {c["claim"]: c["verdict"] for c in chapter.table4_claims(runs)}
    assert claims["Removing L_d lowers performance."] == "not tested"
