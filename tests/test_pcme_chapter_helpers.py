"""The PCME chapter's notebook helpers (xmr_core.chapters.pcme): table rows and layouts, then what train.py,
ablate.py and visualise.py call (tables, figures, claims), each against values worked out by hand or recomputed
independently here; the few that embed use a tiny untrained PCME, nothing is trained."""

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from fixtures.corpora import CLASS_NAMES, synthetic_split
from scipy import stats

from xmr_core.chapters import pcme as chapter
from xmr_core.chapters.pcme import own_caption_score, table1_frame, table3_ceiling_row
from xmr_core.config import RunConfig
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import score_matrix
from xmr_core.experiment import compared, training
from xmr_core.experiment.compared import model_label
from xmr_core.experiment.protocols import ChapterData, word_table
from xmr_core.experiment.scoring import TABLE2_COLUMNS, TABLE3_COLUMNS
from xmr_core.methods.pcme import PCME, TEST_TIME_SIMILARITIES, PCMEConfig, uncertainty
from xmr_core.methods.vse import vse0_config
from xmr_core.perturb import GREY, erase_centre, erase_words, with_captions, with_images
from xmr_core.records import Evaluation, QueryStats, RunRecord, Scored, SplitQueries
from xmr_core.runs.tuning import Axis, TuningResult


def test_columns_and_labels():
    assert list(TABLE2_COLUMNS) == ["T2 i2t R-P", "T2 i2t R@1", "T2 t2i R-P", "T2 t2i R@1"]
    assert TABLE2_COLUMNS["T2 t2i R@1"] == "class/t2i/R@1"
    assert list(TABLE3_COLUMNS)[:2] == ["T3 1K i2t PMRP", "T3 1K i2t R@1"] and len(TABLE3_COLUMNS) == 8
    assert TABLE3_COLUMNS["T3 5K t2i PMRP"] == "5K|plausible/t2i/PMRP"
    assert model_label("PVSE", 4) == "PVSE K=4" and model_label("PCME", 1) == "PCME"


def test_own_caption_score():
    # images 0, 1, 2; captions 0, 1 -> image 0, caption 2 -> image 1, caption 3 -> image 2
    caption_image = np.array([0, 0, 1, 2])
    scores = torch.tensor([[1.0, 3.0, 9.0, 9.0],   # row 0 queries image 0: mean(1, 3) = 2
                           [9.0, 9.0, 9.0, 5.0]])  # row 1 queries image 2: 5
    assert own_caption_score(scores, np.array([0, 2]), caption_image) == pytest.approx((2.0 + 5.0) / 2)
    assert chapter.own_caption_scores(scores, np.array([0, 2]), caption_image).tolist() == pytest.approx([2.0, 5.0])


def test_table3_ceiling_row():
    ceiling = {"1K": {"i2t/R@1": 90.0, "t2i/R@1": 80.0}, "5K": {"i2t/R@1": 70.0, "t2i/R@1": 60.0}}
    row = table3_ceiling_row(ceiling, "scenes")
    assert row == {"model": "Bayes ceiling", "seeds": 0, "5K rSum % of ceiling": 100.0,
                   "T3 1K i2t R@1 (scenes)": 90.0, "T3 1K t2i R@1 (scenes)": 80.0,
                   "T3 5K i2t R@1 (scenes)": 70.0, "T3 5K t2i R@1 (scenes)": 60.0}


def test_table1_frame():
    def row(variant: str, similarity: str, seed: int, i2t: float, t2i: float) -> dict[str, object]:
        return {"variant": variant, "similarity": similarity, "seed": seed, "converged": True, "collapse": "",
                "i2t R-P": i2t, "t2i R-P": t2i}

    rows = [row("mu only", "Mean only", 0, 1.0, 2.0), row("mu only", "Mean only", 1, 3.0, 2.0)]
    rows += [row("PCME", v[0], 0, float(k), 10.0 + k) for k, v in enumerate(TEST_TIME_SIMILARITIES.values())]
    frame = table1_frame(pd.DataFrame(rows), "scenes")
    assert list(frame["similarity"]) == ["Mean only"] + [v[0] for v in TEST_TIME_SIMILARITIES.values()]
    assert list(frame["variant"]) == ["mu only"] + ["PCME"] * len(TEST_TIME_SIMILARITIES)
    assert frame["i2t R-P (scenes)"].iloc[0] == 2.0 and frame["i2t std"].iloc[0] == pytest.approx(math.sqrt(2.0))
    assert frame["t2i R-P (scenes)"].iloc[0] == 2.0 and frame["t2i std"].iloc[0] == 0.0
    assert frame["t2i R-P (scenes)"].tolist()[1:] == [10.0 + k for k in range(len(TEST_TIME_SIMILARITIES))]
    assert frame["space"].iloc[0] == "O(N)" and frame["sampling"].iloc[-1] == TEST_TIME_SIMILARITIES["match_prob"][1]
    assert frame["i2t R-P (paper, CUB)"].notna().all()  # every row of Table 1 is in the paper's values


# ================================================================================ the notebooks' helpers
# Every expectation below is worked out by hand (or recomputed independently) from the inputs given here.


def _split(n: int, k: int = 1, seed: int = 0, **fields: object):
    """A synthetic test split of `n` images with `k` captions each (`fixtures.corpora`), `fields` replaced."""
    return dataclasses.replace(synthetic_split("test", n, np.random.default_rng(seed), k=k), **fields)


# ------------------------------------------------------------------------------------------ train.py
def test_with_margin_sets_only_the_hinge_margin():
    cfg = vse0_config(embed_dim=8)
    out = compared.with_margin(cfg, 0.37)
    assert out.hinge.margin == 0.37 and cfg.hinge.margin != 0.37  # a copy; the input is left as it was
    assert out == dataclasses.replace(cfg, hinge=dataclasses.replace(cfg.hinge, margin=0.37))


def test_word_table_is_the_vectors_or_the_words():
    vocab = Vocabulary.build(["a red circle"])
    data = ChapterData(*[_split(2)] * 4, vocab, np.ones((len(vocab), 3), np.float32), 1.0)
    assert word_table(data, bert=False) is data.word_vectors
    assert word_table(data, bert=True).tolist() == list(vocab.words)


def test_weight_axes_and_tuned_settings():
    spec = compared.Compared("X", Axis("margin", 0.1, 2.0, high=2.0), lambda *a: None)
    assert chapter.weight_axes({"X": spec}) == "X: margin 0.1 x 2^k, at most 2"
    assert chapter.weight_axes().startswith("VSE0: margin 0.2 x 2^k, at most 2; PVSE: margin")
    assert chapter.weight_axes().endswith("PCME: KL weight 0.001 x 10^k")
    tuned = {"X": TuningResult("X", "margin", 1e-3, 0.2, 20, [])}
    assert chapter.tuned_settings(tuned) == {"X": (1e-3, "margin", 0.2)}


def test_chapter_runs_and_order():
    assert chapter.ORDER == ["VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4", "PCME mu only", "PCME"]
    runs = training.chapter_runs([3, 4])
    assert runs[:6] == [("VSE0", 1, 3), ("PVSE", 1, 3), ("PVSE", 2, 3), ("PVSE", 4, 3), ("PCME mu only", 1, 3),
                        ("PCME", 1, 3)]
    assert runs[6:] == [(name, k, 4) for name, k, _ in runs[:6]] and len(runs) == 12
    assert training.chapter_runs([3, 4], [("X", 2)]) == [("X", 2, 3), ("X", 2, 4)]  # a later chapter's specs


def test_tuned_model_builds_from_the_given_methods():
    built = []
    spec = compared.Compared("X", Axis("margin", 0.1, 2.0), lambda enc, wv, w, k: built.append((w, k)) or "model")
    tuned = {"X": TuningResult("X", "margin", 1e-3, 0.2, 20, [])}
    assert training.tuned_model("X", tuned, {}, np.zeros((1, 1)), 4, compared={"X": spec}) == "model"
    assert built == [(0.2, 4)]
    with pytest.raises(KeyError):
        training.tuned_model("X", tuned, {}, np.zeros((1, 1)))  # not one of the PCME chapter's methods


def test_split_sizes():
    a, b, c = _split(6, k=5), _split(3, k=2), _split(4, k=1)
    data = ChapterData(a, b, c, a, Vocabulary.build(a.captions), np.zeros((1, 1), np.float32), 1.0)
    assert chapter.split_sizes(data).values.tolist() == [
        ["train (seen classes)", 6, 30], ["val (seen classes)", 3, 6], ["test, unseen classes (Table 2)", 4, 4],
        ["test, all (Table 3)", 6, 30]]


def _fit(history: list[tuple[int, float]]) -> SimpleNamespace:
    return SimpleNamespace(history=[{"epoch": e, "val/rsum": v, "loss": 0.0} for e, v in history])


def test_learning_curves_and_figure():
    results = {("VSE0", 0): _fit([(1, 10.0), (2, 20.0)]), ("PCME", 1): _fit([(1, 5.0)])}
    curves = chapter.learning_curves(results)
    assert curves.values.tolist() == [["VSE0", 0, 1, 10.0], ["VSE0", 0, 2, 20.0], ["PCME", 1, 1, 5.0]]
    assert curves.columns.tolist() == ["model", "seed", "epoch", "val rSum"]
    fig = chapter.learning_curves_figure(curves, ["PCME", "VSE0"], 123.0, "the title")
    ax = fig.axes[0]
    assert ax.get_title() == "the title"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["PCME", "VSE0"]
    assert any(list(line.get_ydata()) == [123.0, 123.0] for line in ax.get_lines())  # the dashed ceiling
    plt.close(fig)


def _table3_runs() -> pd.DataFrame:
    rows = [("VSE0", 0, 100.0, 5.0), ("PCME", 0, 60.0, 10.0), ("PCME", 1, 100.0, 20.0)]
    return pd.DataFrame([{"model": m, "seed": s, "converged": True, "rsum 5K": r,
                          **{c: v for c in chapter.TABLE3_COLUMNS}} for m, s, r, v in rows])


CEILING = {"1K": {"i2t/R@1": 90.0, "t2i/R@1": 80.0, "rsum": 500.0},
           "5K": {"i2t/R@1": 70.0, "t2i/R@1": 60.0, "rsum": 200.0}}


def test_table3_frame_with_and_without_ceiling():
    order = ["VSE0", "PCME"]
    plain = chapter.table3_frame(_table3_runs(), "scenes", None, order)
    assert plain["model"].tolist() == order and "5K rSum % of ceiling" not in plain
    assert plain["T3 5K i2t PMRP (scenes)"].tolist() == [5.0, 15.0]  # PCME: mean of 10 and 20
    table = chapter.table3_frame(_table3_runs(), "scenes", CEILING, order)
    assert table["model"].tolist() == ["Bayes ceiling", "VSE0", "PCME"]
    assert table["5K rSum % of ceiling"].tolist() == [100.0, 50.0, 40.0]  # PCME: mean of 30 and 50
    assert table["T3 5K i2t R@1 (scenes)"].iloc[0] == 70.0 and table["T3 1K t2i R@1 (scenes)"].iloc[0] == 80.0


def test_write_ceiling(tmp_path: Path):
    run = RunConfig.from_params(PROFILE="smoke", RESULTS_DIR=str(tmp_path / "res"), DATASET="scenes")
    per_run = _table3_runs()
    assert chapter.write_ceiling(per_run, None, run, "caption") is None
    assert not (tmp_path / "res" / "pcme").exists()
    table = chapter.write_ceiling(per_run, CEILING, run, "caption")
    assert table["percent_of_ceiling"].tolist() == [50.0, 30.0, 50.0]
    assert pd.read_csv(tmp_path / "res" / "pcme" / "ceiling.csv")["rsum"].tolist() == [100.0, 60.0, 100.0]
    assert (tmp_path / "res" / "pcme" / "ceiling.png").is_file()
    plt.close("all")


def _record(name: str, sp: SplitQueries, view: str, hits: int, r1: int, seed: int, fit: dict[str, object],
            change: dict[str, object]) -> RunRecord:
    """A record of one view's blocks (full protocol, both directions): every query `hits` of its 100 positives in
    the top R; best rank 1 on the first `r1 / 25` of every 4 queries, else 2."""
    ranks = [1] * (r1 // 25) + [2] * (4 - r1 // 25)
    blocks = {("full", view, d): QueryStats(np.tile(ranks, n // 4), np.full(n, hits)) for d, n in (("i2t", 4), ("t2i", 8))}
    ev = Evaluation(sp, {"default": Scored(blocks, collapse=str(change.get("collapse", "")))})
    return RunRecord("", name, name.split("-")[0], {}, {"seed": seed}, fit, {}, {}, ev)


def _claims_runs(changes: dict[tuple[str, int], dict[str, object]] | None = None
                 ) -> dict[tuple[str, int], chapter.RecordedRun]:
    """Records of two seeds of every model on 4 image and 8 caption queries whose values are all the same (so test
    sampling adds nothing): (R-P of seed 0, R-P of seed 1, R@1, PMRP of seed 0, PMRP of seed 1), both directions
    equal; R@1 is 100 on the first `R@1 / 25` of every 4 queries. `changes`: {(model, seed): {"converged": ..,
    "collapse": ..}}."""
    values = {"VSE0": (40, 40, 25, 30, 30), "PVSE K=1": (35, 35, 50, 20, 20), "PVSE K=2": (34, 34, 75, 20, 20),
              "PVSE K=4": (33, 33, 100, 20, 20), "PCME mu only": (20, 22, 0, 10, 12), "PCME": (50, 52, 0, 40, 44)}
    n_img, caption_image = 4, np.repeat(np.arange(4), 2)
    full = {"full": ((0, 4, 0, 8),)}

    def split(name: str, view: str) -> SplitQueries:
        return SplitQueries(name, "synthetic", name * 8, n_img, caption_image, full,
                            {("full", view, d): np.full(n, 100) for d, n in (("i2t", 4), ("t2i", 8))})

    unseen, test = split("test-unseen", "class"), split("test", "plausible/zeta0")
    out = {}
    for model, (rp0, rp1, r1, pm0, pm1) in values.items():
        for seed, rp, pm in ((0, rp0, pm0), (1, rp1, pm1)):
            change = (changes or {}).get((model, seed), {})
            fit = {"converged": change.get("converged", True), "stopped": "patience"}

            out[model, seed] = chapter.RecordedRun(
                _record(f"{model}-{seed}", test, "plausible/zeta0", pm, r1, seed, fit, change),
                _record(f"{model}-{seed}@test-unseen", unseen, "class", rp, r1, seed, fit, change))
    return out


def _judged(records, run):
    return chapter.train_judgements(records, chapter.train_bindings(records, run), run)


def test_train_judgements_by_hand():
    run = RunConfig.from_params(PROFILE="cpu", DATASET="scenes")
    records = _claims_runs()
    bindings = chapter.train_bindings(records, run)
    assert bindings["pcme-best-pmrp"].sides["PCME"].records == ("PCME-0", "PCME-1")
    assert bindings["rp-over-mu-only"].sides["PCME mu only"].records == ("PCME mu only-0@test-unseen",
                                                                         "PCME mu only-1@test-unseen")
    judged = chapter.train_judgements(records, bindings, run)
    assert [j.spec.key for j in judged] == [s.key for s in chapter.TRAIN_CLAIMS]
    # two seeds, paired, every query alike: the t interval of the seed differences, whose standard error sd / sqrt(2)
    # is half their range: the effect ± t(0.975, 1) x half (docs/claims.md)
    k = stats.t.ppf(0.975, 1)
    expected = {  # key: (effect, half-width of the range, verdict)
        "rp-over-mu-only": (30.0, 0.0, "held"),  # R-P: PCME - mu only = 30 on both seeds
        "pmrp-over-mu-only": (31.0, 1.0, "held"),  # PMRP: 30 and 32
        "pvse-rp-not-up-with-k": (2.0, 0.0, "held"),  # PVSE R-P K=1 - K=4 = 35 - 33 > -1.4 (the margin)
        "pvse-below-vse0": (5.0, 0.0, "held"),  # VSE0 - PVSE R-P = 5, 6, 7: the weakest pair
        "pcme-best-rp": (11.0, 1.0, "inconclusive"),  # PCME R-P - VSE0's 40: 10 and 12; 11 - k < 0 (t = 11, 1 df)
        "pcme-best-pmrp": (12.0, 2.0, "inconclusive"),  # PCME PMRP - VSE0's 30: 10 and 14; 12 - 2k < 0
    }
    for j in judged:
        assert (j.n_seeds, j.n_queries) == (2, 12), j.spec.key
        if j.spec.key in expected:
            effect, half, outcome = expected[j.spec.key]
            assert (j.effect, j.low, j.high, j.verdict) == pytest.approx(
                (effect, effect - k * half, effect + k * half, outcome)), j.spec.key
    r1 = {j.spec.key: j for j in judged}  # R@1 50 -> 75 -> 100 with K: every query's hit differs, so only the effect
    assert (r1["pvse-r1-rises-with-k"].effect, r1["pvse-r1-k4-over-k1"].effect) == pytest.approx((25.0, 50.0))
    # swap PCME and mu only: the first claim does not hold
    swapped = _claims_runs()
    swapped["PCME", 0], swapped["PCME mu only", 0] = swapped["PCME mu only", 0], swapped["PCME", 0]
    swapped["PCME", 1], swapped["PCME mu only", 1] = swapped["PCME mu only", 1], swapped["PCME", 1]
    assert _judged(swapped, run)[0].verdict == "did not hold"
    # an unconverged VSE0 leaves its three claims not tested; a collapsed PCME run its four
    unconverged = _judged(_claims_runs({("VSE0", 1): {"converged": False}}), run)
    assert [j.verdict for j in unconverged][5:] == ["not tested"] * 3
    assert "VSE0 did not converge" in unconverged[5].reason
    collapsed = _judged(_claims_runs({("PCME", 0): {"collapse": "every query's scores are tied"}}), run)
    assert [j.verdict for j in collapsed][:2] + [j.verdict for j in collapsed][6:] == ["not tested"] * 4
    assert "PCME collapsed (every query's scores are tied)" in collapsed[0].reason
    # a view the data lacks: its claims are not tested and bound to no records
    missing = {"class": "no classes"}
    assert set(chapter.train_bindings(records, run, missing)) == {"pmrp-over-mu-only", "pcme-best-pmrp"}
    assert chapter.train_judgements(records, chapter.train_bindings(records, run, missing), run, missing)[0].reason


# ----------------------------------------------------------------------------------------- ablate.py
_SIMILARITY = {label: key for key, (label, _, _) in TEST_TIME_SIMILARITIES.items()}  # Table 1's label -> key


def _t1_records(pcme: dict[str, tuple[float, float]], mu: tuple[float, float]
                ) -> dict[tuple[str, int], chapter.RecordedRun]:
    """Records of seeds 0 and 1 of the mu-only model (its own similarity, the mean) and the PCME (its own, the match
    probability, as "default"; each other similarity under its key) on the unseen classes: every one of 4 image and
    8 caption queries at the class R-P of that seed and similarity (so test sampling adds nothing), every run
    converged."""
    sp = SplitQueries("test-unseen", "synthetic", "u" * 16, 4, np.repeat(np.arange(4), 2), {"full": ((0, 4, 0, 8),)},
                      {("full", "class", d): np.full(n, 1000) for d, n in (("i2t", 4), ("t2i", 8))})

    def scored(v: float) -> Scored:
        return Scored({("full", "class", d): QueryStats(np.ones(n, int), np.full(n, round(10 * v)))
                       for d, n in (("i2t", 4), ("t2i", 8))})

    out = {}
    for label, own, values in (("PCME mu only", "mean_cosine", {"Mean only": mu}), ("PCME", "match_prob", pcme)):
        for seed in (0, 1):
            scorings = {"default" if _SIMILARITY[s] == own else _SIMILARITY[s]: scored(v[seed])
                        for s, v in values.items()}
            rec = RunRecord("", f"{label}-{seed}@test-unseen", "pcme", {"test_similarity": own}, {"seed": seed},
                            {"converged": True, "stopped": "patience"}, {}, {}, Evaluation(sp, scorings))
            out[label, seed] = chapter.RecordedRun(rec, rec)
    return out


def _ablate_judged(pcme: dict[str, tuple[float, float]], mu: tuple[float, float], run: RunConfig):
    records = _t1_records(pcme, mu)
    return chapter.ablate_judgements(records, chapter.ablate_bindings(records, run))


def test_ablate_judgements_by_hand():
    run = RunConfig.from_params(PROFILE="cpu", DATASET="scenes")
    k = stats.t.ppf(0.975, 1)  # two seeds (test_train_judgements_by_hand)
    pcme = {"Mean only": (20.0, 20.0), "ELK": (21.0, 21.0), "JS-divergence": (19.0, 19.0),
            "2-Wasserstein": (20.2, 20.2), "Average L2": (21.5, 21.5), "Match prob": (30.0, 30.4)}
    records = _t1_records(pcme, (10.0, 10.0))
    bindings = chapter.ablate_bindings(records, run)
    assert bindings["match-prob-best"].sides["PCME: Match prob"].scoring == "default"
    assert bindings["match-prob-best"].sides["PCME: ELK"] == chapter.Side(("PCME-0@test-unseen", "PCME-1@test-unseen"),
                                                                          "elk")
    assert bindings["any-similarity-over-mu-only"].sides["mu only: Mean only"].scoring == "default"
    # Table 1's rows from the same records: each similarity's mean R-P per seed and direction
    t1 = chapter.table1_runs(records)
    assert len(t1) == 2 * (1 + len(TEST_TIME_SIMILARITIES)) and t1["i2t R-P"].tolist()[:3] == [10.0, 10.0, 20.0]
    assert t1[t1["similarity"] == "Match prob"]["t2i R-P"].tolist() == [30.0, 30.4]
    judged = chapter.ablate_judgements(records, bindings)
    assert [j.spec.key for j in judged] == [s.key for s in chapter.ABLATE_CLAIMS]
    # match prob - the best other (Average L2, 21.5) = 8.5 and 8.9; W2 - mean only = 0.2 on both seeds, inside
    # +-0.5; the weakest similarity over mu only: JS-divergence, 19 - 10 = 9 > -0.5
    assert (judged[0].effect, judged[0].low, judged[0].high) == pytest.approx((8.7, 8.7 - 0.2 * k, 8.7 + 0.2 * k))
    assert (judged[1].effect, judged[1].low, judged[1].high) == pytest.approx((0.2, 0.2, 0.2))
    assert (judged[2].effect, judged[2].low, judged[2].high) == pytest.approx((9.0, 9.0, 9.0))
    assert [j.verdict for j in judged] == ["held"] * 3 and all(j.paired == "seed+query" for j in judged)
    assert all((j.n_seeds, j.n_queries, j.noise) == (2, 12, "seeds+queries") for j in judged)
    # match prob lowest, W2 5 pp from the mean, mu only 25 above JS-divergence's 19
    pcme.update({"Match prob": (15.0, 15.0), "2-Wasserstein": (25.0, 25.0)})
    assert [j.verdict for j in _ablate_judged(pcme, (25.0, 25.0), run)] == ["did not hold"] * 3
    # W2 - mean only = 0.6 and -0.2: the t interval reaches past the 0.5 margin
    pcme["2-Wasserstein"] = (20.6, 19.8)
    assert _ablate_judged(pcme, (10.0, 10.0), run)[1].verdict == "inconclusive"
    # without class relevance: no bindings, every claim not tested with the reason
    missing = {"class": "no classes"}
    assert chapter.ablate_bindings(records, run, missing) == {}
    assert {j.reason for j in chapter.ablate_judgements(records, {}, missing)} == {"no classes"}


# -------------------------------------------------------------------------------------- visualise.py
def test_spread_classes():
    classes = np.array([8, 0, 4, 2, 6, 0])  # present: 0, 2, 4, 6, 8
    assert chapter.spread_classes(classes, 3) == [0, 4, 8]
    assert chapter.spread_classes(classes, 2) == [0, 8]
    assert chapter.spread_classes(classes, 5) == [0, 2, 4, 6, 8]


def test_recall_by_sigma_and_bin_correlation():
    split = _split(4, k=1)  # caption i was written for image i
    scores = torch.tensor([[9.0, 1, 2, 3],   # image 0: own caption first (rank 1)
                           [5.0, 4, 1, 0],   # image 1: rank 2
                           [0.0, 1, 9, 2],   # image 2: rank 1
                           [7.0, 6, 0, 5]])  # image 3: rank 3
    # captions as queries (columns): image 0 rank 1, image 1 rank 2 (6 > 4), image 2 rank 1, image 3 rank 1
    i2t, t2i = chapter.recall_by_sigma(scores, split, np.array([0.1, 0.4, 0.2, 0.3]), np.array([0.4, 0.3, 0.2, 0.1]),
                                       bins=2)
    assert i2t["bin"].tolist() == [1, 2] and i2t["R@1"].tolist() == [100.0, 0.0]  # bins {0, 2}, {3, 1}
    assert i2t["sigma"].tolist() == pytest.approx([0.15, 0.35])
    assert t2i["R@1"].tolist() == [100.0, 50.0] and t2i["sigma"].tolist() == pytest.approx([0.15, 0.35])
    # the per-query hits of the same bins: i2t images (0, 2), (3, 1); t2i captions (3, 2), (1, 0) by increasing σ
    hits = chapter.sigma_bin_hits(scores, split, np.array([0.1, 0.4, 0.2, 0.3]), np.array([0.4, 0.3, 0.2, 0.1]), 2)
    assert [b.tolist() for b in hits["i2t"]] == [[100.0, 100.0], [0.0, 0.0]]
    assert [b.tolist() for b in hits["t2i"]] == [[100.0, 100.0], [0.0, 100.0]]
    assert [b.mean() for b in hits["i2t"]] == i2t["R@1"].tolist()
    assert [b.mean() for b in hits["t2i"]] == t2i["R@1"].tolist()
    assert chapter.bin_correlation(pd.DataFrame({"bin": [1, 2, 3, 4], "R@1": [40.0, 30.0, 20.0, 10.0]})) == \
        pytest.approx(-1.0)
    fig = chapter.recall_by_sigma_figure(i2t, t2i)
    assert [ax.get_title() for ax in fig.axes] == ["image-to-text", "text-to-image"]
    assert [len(ax.patches) for ax in fig.axes] == [2, 2]
    plt.close(fig)


def test_mixed_and_erased():
    a, b = np.full((2, 4, 6, 3), 10, np.uint8), np.full((2, 4, 6, 3), 200, np.uint8)
    images = chapter.mixed_and_erased(a, b)
    assert list(images) == ["A", "B", "mix", "erase"] and images["A"] is a and images["B"] is b
    assert (images["mix"][:, :, :3] == 10).all() and (images["mix"][:, :, 3:] == 200).all()
    # a quarter of the pixels of a 4-pixel-high image: a centred square of side round(0.5 * 4) = 2
    assert (images["erase"] == GREY).all(axis=-1).sum() == 2 * 2 * 2 and (a == 10).all()


def _tiny_pcme() -> tuple[PCME, object, Vocabulary]:
    split = _split(6, k=2, images=np.random.default_rng(2).integers(0, 256, (6, 16, 16, 3), dtype=np.uint8))
    vocab = Vocabulary.build(split.captions)
    vectors = np.random.default_rng(1).standard_normal((len(vocab), 8)).astype(np.float32)
    torch.manual_seed(0)
    cfg = PCMEConfig(embed_dim=16, image=ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
                     text=TextEncoderConfig(hidden=8))
    return PCME(cfg, vectors).eval(), split, vocab


def test_set_algebra_against_a_direct_computation():
    model, split, vocab = _tiny_pcme()
    _, captions = chapter.embed_gaussians(model, split, vocab, "cpu")
    measures = chapter.set_algebra(model, split, None, vocab, "cpu", captions, 3)
    # reference: pairs (0, 3), (1, 4), (2, 5); the mix built by hand; each image's own captions found by a loop
    a, b = split.images[:3], split.images[3:6]
    mix = np.concatenate([a[:, :, :8], b[:, :, 8:]], axis=2)
    sub = split.subset(np.arange(3), "ref")
    embed = lambda pixels: chapter.embed_gaussians(model, with_images(sub, pixels, "ref"), vocab, "cpu")[0]
    p_mix = score_matrix(model, embed(mix), captions).numpy()
    erased = embed(erase_centre(a, 0.25))
    p_erase = score_matrix(model, erased, captions).numpy()
    own = lambda p, images: np.mean([np.mean([p[k, c] for c in range(split.n_captions)
                                              if split.caption_image[c] == i]) for k, i in enumerate(images)])
    sigma_a, sigma_erase = uncertainty(embed(a)[1]).numpy(), uncertainty(erased[1]).numpy()
    own_row = lambda p, k, i: np.mean([p[k, c] for c in range(split.n_captions) if split.caption_image[c] == i])
    per_pair = [[own_row(p_mix, k, k) for k in range(3)], [own_row(p_mix, k, k + 3) for k in range(3)], p_mix.mean(1),
                [own_row(p_erase, k, k) for k in range(3)], p_erase.mean(1), sigma_a, sigma_erase]
    for got, want in zip(measures, per_pair):
        assert got.shape == (3,) and got.tolist() == pytest.approx(list(want), rel=1e-5)
    # the frame the notebook writes: the means over the pairs and the share of images whose sigma grows
    expected = [own(p_mix, [0, 1, 2]), own(p_mix, [3, 4, 5]), p_mix.mean(), own(p_erase, [0, 1, 2]), p_erase.mean(),
                float(np.mean(sigma_erase > sigma_a))]
    frame = measures.frame()
    assert frame["quantity"].tolist()[0] == "p(mix, captions of A)"
    assert frame["value"].tolist() == pytest.approx(expected, rel=1e-5)


def test_sigma_by_erasing_and_generic_caption():
    model, split, vocab = _tiny_pcme()
    found = chapter.sigma_by_erasing(model, split, None, vocab, "cpu", [0.0, 0.5], np.random.default_rng(3))
    erasing = found.frame
    img, cap = chapter.embed_gaussians(model, split, vocab, "cpu")
    assert erasing["ratio"].tolist() == [0.0, 0.5]
    assert erasing["image sigma"][0] == pytest.approx(float(uncertainty(img[1]).mean()))
    assert erasing["caption sigma"][0] == pytest.approx(float(uncertainty(cap[1]).mean()))
    # ratio 0 erases no word, so draws nothing: ratio 0.5 gets the generator's first draws
    words = erase_words(split.captions, 0.5, np.random.default_rng(3))
    _, cap_half = chapter.embed_gaussians(model, with_captions(split, words, "half"), vocab, "cpu")
    assert erasing["caption sigma"][1] == pytest.approx(float(uncertainty(cap_half[1]).mean()))
    pixels = erase_centre(split.images, 0.5)
    img_half, _ = chapter.embed_gaussians(model, with_images(split, pixels, "half"), vocab, "cpu")
    assert erasing["image sigma"][1] == pytest.approx(float(uncertainty(img_half[1]).mean()))
    # the per-item σ the frame averages, item by item
    assert found.image_sigma.shape == (2, split.n_images) and found.caption_sigma.shape == (2, split.n_captions)
    for got, want in ((found.image_sigma[0], img[1]), (found.image_sigma[1], img_half[1]),
                      (found.caption_sigma[0], cap[1]), (found.caption_sigma[1], cap_half[1])):
        np.testing.assert_allclose(got, uncertainty(want).numpy(), rtol=1e-6)
    np.testing.assert_allclose(found.image_sigma.mean(1), erasing["image sigma"], rtol=1e-12)
    np.testing.assert_allclose(found.caption_sigma.mean(1), erasing["caption sigma"], rtol=1e-12)
    fig = chapter.erasing_figure(erasing)
    assert [ax.get_title() for ax in fig.axes] == ["images: erased pixels", "captions: erased words"]
    plt.close(fig)
    # every caption of the fixture has 7 words; any 7 words outside the vocabulary give the same Gaussian
    mu, logvar = chapter.generic_caption(model, split, vocab, "cpu")
    one = split.subset(np.array([0]), "one")
    other = with_captions(one, ["qqq " * 7] * one.n_captions, "other")
    ref_mu, ref_lv = chapter.embed_gaussians(model, other, vocab, "cpu")[1]
    assert mu.shape == logvar.shape == (1, 16)
    torch.testing.assert_close(mu, ref_mu[:1])
    torch.testing.assert_close(logvar, ref_lv[:1])


def test_embedding_and_set_algebra_figures_draw_one_ellipse_per_gaussian():
    split = _split(8, k=2)
    g = torch.Generator().manual_seed(0)
    images = (torch.randn(8, 6, generator=g), torch.randn(8, 6, generator=g) - 2)
    captions = (torch.randn(16, 6, generator=g), torch.randn(16, 6, generator=g) - 2)
    generic = (torch.randn(1, 6, generator=g), torch.zeros(1, 6))
    classes = [3, 4]
    fig = chapter.embedding_figure(split, images, captions, generic, classes)
    n_images = int(np.isin(split.image_class, classes).sum())
    assert [len(ax.patches) for ax in fig.axes] == [n_images + 1, 2 * n_images + 1]  # + the generic caption
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [CLASS_NAMES[3], CLASS_NAMES[4]]
    plt.close(fig)
    pixels = chapter.mixed_and_erased(split.images[:1], split.images[1:2])
    gaussians = {name: (torch.randn(1, 6, generator=g), torch.zeros(1, 6)) for name in pixels}
    fig = chapter.set_algebra_figure(pixels, gaussians, np.zeros(6), np.eye(6)[:2])
    assert [ax.get_title() for ax in fig.axes[:4]] == ["A", "B", "mix", "erase(A)"]
    assert [len(ax.patches) for ax in fig.axes[4:]] == [3, 2]  # mix with A and B; erase with A
    plt.close(fig)


def test_sigma_by_level_and_correlation():
    exact = np.zeros((4, 4), bool)
    for c, n in enumerate([3, 1, 4, 1]):  # positives per caption
        exact[c, :n] = True
    split = _split(4, k=1, caption_level=["vague", "full", "vague", "full"], exact=exact)
    sigma = np.array([0.5, 0.1, 0.7, 0.2], np.float32)
    by_level = chapter.sigma_by_level(split, sigma)
    assert by_level["level"].tolist() == ["full", "vague"] and by_level["captions"].tolist() == [2, 2]
    assert by_level["sigma"].tolist() == pytest.approx([0.15, 0.6]) and by_level["positives"].tolist() == [1.0, 3.5]
    per_level = chapter.sigma_per_level(split, sigma)
    assert list(per_level) == ["full", "vague"]
    assert per_level["full"].tolist() == pytest.approx([0.1, 0.2]) and per_level["vague"].tolist() == pytest.approx([0.5, 0.7])
    assert [per_level[lv].mean() for lv in by_level["level"]] == pytest.approx(by_level["sigma"].tolist())
    # ranks: sigma (3, 1, 4, 2), positives (3, 1.5, 4, 1.5): Pearson of the ranks = 4.5 / sqrt(5 * 4.5) = sqrt(0.9)
    assert chapter.sigma_positives_correlation(split, sigma) == pytest.approx(math.sqrt(0.9))


def test_level_gallery_picks_the_first_caption_of_each_level(monkeypatch: pytest.MonkeyPatch):
    split = _split(4, k=1, caption_level=["full", "vague", "full", "vague"])
    scores = torch.tensor([[0.9, 0.5, 0.0, 0.0],    # (images, captions)
                           [0.8, 0.1, 0.0, 0.0],
                           [0.95, 0.2, 0.0, 0.0],
                           [0.1, 0.7, 0.0, 0.0]])
    seen = {}
    monkeypatch.setattr(chapter, "retrieval_gallery", lambda *args: seen.setdefault("args", args))
    chapter.level_gallery(scores, split, ["vague", "full"], k=2)
    texts, images, relevant, values = seen["args"]
    # caption 1 (the first vague): images 3 (0.7), 0 (0.5); caption 0 (the first full): images 2 (0.95), 0 (0.9)
    assert texts == [f"[vague] {split.captions[1]}", f"[full] {split.captions[0]}"]
    np.testing.assert_array_equal(images, split.images[[[3, 0], [2, 0]]])
    np.testing.assert_array_equal(relevant, [split.exact[1, [3, 0]], split.exact[0, [2, 0]]])
    np.testing.assert_allclose(values, [[0.7, 0.5], [0.95, 0.9]])


def _visualise_inputs(erase_a: float = 0.3) -> dict[str, object]:
    """Constructed per-query values of every `VISUALISE_CLAIMS` claim: i2t R@1 falling over the thirds of σ, t2i
    rising; image σ rising at every erased ratio, caption σ falling at the fourth; vague captions the widest; the mix
    closer to A's and B's captions than to any; erase(A) wider than A but further from A's captions than from any."""
    rng = np.random.default_rng(0)
    third = lambda n_hits: np.r_[np.full(n_hits, 100.0), np.zeros(40 - n_hits)]  # 40 queries, n_hits hit
    base_img, base_cap = rng.uniform(0.5, 1.0, 20), rng.uniform(0.5, 1.0, 30)
    steps_cap = [0, 1, 2, 1, 3, 4]  # caption σ: +0.1, +0.1, -0.1, +0.2, +0.1
    erasing = chapter.Erasing(pd.DataFrame({"ratio": list(chapter.ERASE_RATIOS)}),
                              np.stack([base_img + 0.1 * i for i in range(6)]),
                              np.stack([base_cap + 0.1 * i for i in steps_cap]))
    per_level = {lv: centre + rng.normal(0, 0.02, 25) for lv, centre in
                 (("full", 0.2), ("partial", 0.3), ("relational", 0.25), ("vague", 0.9))}
    noise = lambda: rng.normal(0, 0.01, 20)
    sigma_a = rng.uniform(0.5, 1.0, 20)
    algebra = chapter.SetAlgebra(0.5 + noise(), 0.4 + noise(), 0.2 + noise(), erase_a + noise(), 0.35 + noise(),
                                 sigma_a, sigma_a + 0.05)
    return {"hits": {"i2t": [third(36), third(20), third(4)], "t2i": [third(4), third(20), third(36)]},
            "erasing": erasing, "per_level": per_level, "algebra": algebra}


def test_visualise_judgements_on_constructed_values():
    run = RunConfig.from_params(PROFILE="cpu", DATASET="scenes")
    inputs = _visualise_inputs()
    judged = chapter.visualise_judgements(chapter.visualise_evidence(0, True, "", **inputs), run)
    assert [j.spec.key for j in judged] == [s.key for s in chapter.VISUALISE_CLAIMS]
    assert [j.verdict for j in judged] == ["held", "did not hold", "held", "did not hold", "held", "held", "held",
                                           "held", "held", "did not hold"]
    levels = {lv: v.mean() for lv, v in inputs["per_level"].items()}
    algebra = inputs["algebra"]
    expected = [40.0, -40.0, 0.1, -0.1,  # the smallest step: 90 -> 50 -> 10 %; +0.1 each; the fall at the fourth
                0.5, 0.4,  # 50 % erased against none: image +0.1 x 5 steps; caption step 4 of steps_cap (the fall
                # at the fourth ratio refutes the caption trend, not the positive association the words claim)
                levels["vague"] - levels["partial"],  # vague - the widest other level
                min(algebra.mix_a.mean(), algebra.mix_b.mean()) - algebra.mix_any.mean(),  # the weakest pair
                0.05, algebra.erase_a.mean() - algebra.erase_any.mean()]
    assert [j.effect for j in judged] == pytest.approx(expected)
    # the same items at every ratio (and the same pairs) are paired; σ thirds and levels hold other queries
    assert [j.paired for j in judged] == ["none", "none", "query", "query", "query", "query", "none", "query",
                                          "query", "query"]
    assert all(j.n_seeds == 1 and j.noise == "queries (one seed: test sampling only)" for j in judged)
    assert [j.n_queries for j in judged] == [40, 40, 20, 30, 20, 30, 25, 20, 20, 20]
    assert (judged[2].low, judged[2].high) == pytest.approx((0.1, 0.1))  # every image rises by exactly 0.1
    # erase(A) just as close to A's captions as to any caption (each pair's difference is noise): inconclusive
    tied = chapter.visualise_evidence(0, True, "", **_visualise_inputs(erase_a=0.35))
    assert chapter.visualise_judgements(tied, run)[-1].verdict == "inconclusive"
    # an unconverged or a collapsed model tests nothing; off scenes the levels claim is not tested
    for converged, collapse, why in ((False, "", "did not converge"), (True, "every query's scores are tied",
                                                                      "collapsed (every query's scores are tied)")):
        out = chapter.visualise_judgements(chapter.visualise_evidence(0, converged, collapse, **inputs), run)
        assert {j.verdict for j in out} == {"not tested"} and all(why in j.reason for j in out)
    coco = RunConfig.from_params(PROFILE="cpu", DATASET="coco")
    off = chapter.visualise_judgements(chapter.visualise_evidence(0, True, "", **inputs), coco)
    assert off[6].verdict == "not tested" and "needs data set scenes" in off[6].reason
    assert [j.verdict for j in off[:6] + off[7:]] == [j.verdict for j in judged[:6] + judged[7:]]
    # the evidence is built from exactly the thirds of SIGMA_THIRDS
    with pytest.raises(ValueError, match="i2t: 2 σ bins, expected 3"):
        chapter.visualise_evidence(0, True, "", **{**inputs, "hits": {"i2t": inputs["hits"]["i2t"][:2]}})


def test_stacked_evidence_judges_every_seed_paired_by_seed():
    run = RunConfig.from_params(PROFILE="cpu", DATASET="scenes")
    per_seed = [chapter.visualise_evidence(s, True, "", **_visualise_inputs(erase_a=a))
                for s, a in ((0, 0.3), (1, 0.28), (2, 0.32))]
    stacked = chapter.stacked_evidence(per_seed)
    assert set(stacked) == set(per_seed[0])
    mix = stacked[chapter.FIG8["erase_a"]]
    assert mix.seeds == (0, 1, 2) and mix.values.shape == (3, 20)
    for k in range(3):  # each seed's row is that seed's evidence
        np.testing.assert_array_equal(mix.values[k], per_seed[k][chapter.FIG8["erase_a"]].values[0])
    judged = chapter.visualise_judgements(stacked, run)
    one = chapter.visualise_judgements(per_seed[0], run)
    assert all(j.n_seeds == 3 and j.noise.startswith("seeds") for j in judged)
    # the same items and pairs at every seed: paired by seed and query; σ thirds and levels hold other queries, so
    # the protocol pairs them by nothing (seed pairing needs the same split)
    assert [j.paired for j in judged] == ["none", "none", "seed+query", "seed+query", "seed+query", "seed+query",
                                          "none", "seed+query", "seed+query", "seed+query"]
    # the seeds here differ only in erase(A)'s match: every other effect is the one seed's
    assert [j.effect for j in judged][:9] == pytest.approx([j.effect for j in one][:9])
    assert [j.verdict for j in judged] == [j.verdict for j in one]
    # one seed that did not converge, or collapsed, leaves every claim untested
    for converged, collapse, why in ((False, "", "did not converge"), (True, "every query's scores are tied",
                                                                      "collapsed (every query's scores are tied)")):
        bad = chapter.visualise_evidence(1, converged, collapse, **_visualise_inputs())
        out = chapter.visualise_judgements(chapter.stacked_evidence([per_seed[0], bad, per_seed[2]]), run)
        assert {j.verdict for j in out} == {"not tested"} and all(why in j.reason for j in out)
    # a seed whose evidence holds other queries cannot be stacked
    short = dict(per_seed[1])
    short[chapter.FIG8["mix_a"]] = dataclasses.replace(short[chapter.FIG8["mix_a"]],
                                                       values=short[chapter.FIG8["mix_a"]].values[:, :19])
    with pytest.raises(ValueError, match="differs in queries"):
        chapter.stacked_evidence([per_seed[0], short])


def test_figure6_thirds_hold_the_same_queries_at_every_seed():
    """Two seeds rank six queries by σ differently; the thirds come from each query's mean σ rank over the seeds (by
    hand: ranks seed 0 = 0..5, seed 1 = 1, 0, 3, 2, 5, 4; means 0.5, 0.5, 2.5, 2.5, 4.5, 4.5 -> thirds {0, 1},
    {2, 3}, {4, 5}), so column j of a third's stack is one query at both seeds."""
    sigma = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.2, 0.1, 0.4, 0.3, 0.6, 0.5]])
    hits = np.array([[100.0, 100.0, 100.0, 0.0, 0.0, 0.0], [100.0, 0.0, 100.0, 100.0, 0.0, 0.0]])
    assert [list(c) for c in chapter.thirds_across_seeds(hits, sigma)] == [[0, 1], [2, 3], [4, 5]]
    inputs = _visualise_inputs()
    per_seed = [chapter.visualise_evidence(s, True, "", **inputs, queries={"i2t": (hits[s], sigma[s]),
                                                                        "t2i": (hits[s], sigma[s])}) for s in (0, 1)]
    stacked = chapter.stacked_evidence(per_seed)
    assert not any("test order" in k for k in stacked)  # the per-query carriers are consumed
    low = stacked[chapter.sigma_third("i2t", "lowest")]
    assert low.seeds == (0, 1) and low.values.tolist() == [[100.0, 100.0], [100.0, 0.0]]
    assert "binned by the mean σ rank over the seeds" in low.split
    assert stacked[chapter.sigma_third("t2i", "highest")].values.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="must both be"):
        chapter.thirds_across_seeds(hits[:, :5], sigma)
