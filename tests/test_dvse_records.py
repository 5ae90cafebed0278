"""The DVSE chapter from run records (issue 76): three of train.py's models (PVSE K=2, a PCME chapter baseline;
PCME, whose score is its own; DVSE) and the region DVSE at two smoke seeds, each scored once and recorded with FR
(and, for DVSE, RR and MR) as scorings of the same run (`chapters.dvse.record_models`); Tables 1-4's values from the records equal those
scored from the models the old way, a PCME chapter record of a shared run gets this chapter's scorings added and
keeps its own, ablate.py's Figure 7 and visualise.py's P@K come from the records too, and `xmr claims recompute
dvse` judges every bound claim of the three notebooks from the records alone as the chapter judged it."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest
import torch

from xmr_core.book import recompute
from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import records_home, results_root, write_judgements
from xmr_core.chapters import dvse as chapter
from xmr_core.chapters import pcme
from xmr_core.claims import instance_collapse
from xmr_core.config import RunConfig
from xmr_core.evaluate import direction_scores, embed_split, evaluate_scores, instance_row, rerank_directions
from xmr_core.experiment import run_records
from xmr_core.experiment.compared import REGIONS
from xmr_core.experiment.protocols import chapter_setup
from xmr_core.experiment.training import tune_methods
from xmr_core.similarity import fast_rerank

SEEDS = (0, 1)
SPECS = [("PVSE", 2), ("PCME", 1), ("DVSE", 1)]  # of `chapter.SPECS`: the paths the others share
CHECKED = (("PVSE K=2", 0), ("PCME", 1), ("DVSE", 1), (REGIONS, 0))  # scored again the old way


@pytest.fixture(scope="module")
def chapter_run(tmp_path_factory):
    """(run, data, tuned, enc, trained, records): `SPECS` and the region DVSE at seeds 0 and 1, recorded into a
    temporary results folder's records home."""
    results = tmp_path_factory.mktemp("dvse") / "results"
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(results))
    _, _, data, enc = chapter_setup(run)
    compared = {m: chapter.COMPARED[m] for m, _ in SPECS}
    tuned = tune_methods("smoke", enc, data.word_vectors, data.train, data.val, data.vocab, seed=0,
                         compared=compared, device="cpu", progress=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chapter, "SPECS", SPECS)
        trained = chapter.train_models(SEEDS, data, tuned, enc, run)
        records = chapter.record_models(trained, data, tuned, run)
    return run, data, tuned, enc, trained, records


def _scores(model, split, vocab) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(s.cpu() for s in direction_scores(model, *embed_split(model, split, vocab, device="cpu")))


def _old_row(model, data, fr: bool) -> dict[str, float]:
    """Tables 1-3's values of one model scored from it as the chapter scored them before the records: instance R@K on
    the whole test split (1K and all), class R-P and R@1 on the unseen classes; FR first at the COCO and CUB scales."""
    whole, unseen = _scores(model, data.test, data.vocab), _scores(model, data.test_unseen, data.vocab)
    if fr:
        whole, unseen = rerank_directions(*whole, chapter.FR_COCO), rerank_directions(*unseen, chapter.FR_CUB)
    cls = evaluate_scores(dataclasses.replace(data.test_unseen, caption_level=None), unseen[0], views=["class"],
                          scores_t2i=unseen[1])
    return {**instance_row(data.test, *whole), **{c: cls[k] for c, k in chapter.TABLE3_COLUMNS.items()},
            "collapse": instance_collapse(whole[0], data.test)}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9)


def test_table_values_from_records_equal_those_scored_from_the_models(chapter_run):
    _, data, _, _, trained, records = chapter_run
    assert set(records) == set(trained.models) and len(records) == (len(SPECS) + 1) * len(SEEDS)
    per_run = chapter.per_run_frame(records).set_index(["model", "seed"])
    assert len(per_run) == 2 * len(records)
    for label, seed in CHECKED:
        model = trained.models[label, seed]
        for fr in (False, True):
            got = per_run.loc[(label + (" + FR" if fr else ""), seed)]
            expected = _old_row(model, data, fr)
            assert got["collapse"] == expected.pop("collapse")
            assert all(_same(got[c], v) for c, v in expected.items()), (label, seed, fr)
            assert got["record"] == records[label, seed].test.name == trained.results[label, seed].run_dir.name
    assert not per_run[["1K i2t R@1", "all rSum", "CUB t2i R-P"]].isna().any().any()
    # Table 4: RR and MR re-rank the same scores as FR, scorings of the DVSE records
    t4 = chapter.table4_runs(records, {s: {"test s": 2.0, "RR": 0.5, "MR": 0.7, "FR": 0.1} for s in SEEDS})
    row = t4.set_index(["model", "seed"]).loc[("DVSE + MR", 1)]
    whole = _scores(trained.models["DVSE", 1], data.test, data.vocab)
    mr = chapter.table4_rerankers()["MR"]
    assert row["all rSum"] == pytest.approx(instance_row(data.test, *rerank_directions(*whole, mr))["all rSum"])
    assert (row["re-rank s"], row["test s"]) == (0.7, 2.7)
    assert set(records["PVSE K=2", 0].test.evaluation.scorings) == {"default", "FR"}
    assert set(records["DVSE", 0].test.evaluation.scorings) == {"default", "FR", "RR", "MR"}
    assert set(records["DVSE", 0].unseen.evaluation.scorings) == {"default", chapter.FR_CUB_SCORING}


def test_a_record_two_chapters_share_keeps_both_chapters_scorings(chapter_run, monkeypatch):
    run, data, tuned, _, trained, records = chapter_run
    key = ("PVSE K=2", 0)
    subset = pcme.TrainedModels({key: trained.models[key]}, {key: trained.results[key]}, pd.DataFrame())
    shared = pcme.record_models([("PVSE", 2, 0)], subset, data, tuned, run)[key]  # the PCME chapter's scorings added
    assert shared.test.name == records[key].test.name
    assert set(shared.test.evaluation.scorings) == {"default", "FR"}
    assert {b[1] for b in shared.test.evaluation.scorings["default"].blocks if b[0] == "coco1k"} >= {
        "instance", "plausible/zeta0"}  # PCME's Table 3 1K folds in the plausible view, DVSE's FR kept
    assert shared.unseen.name == records[key].unseen.name
    assert set(shared.unseen.evaluation.scorings) == {"default", chapter.FR_CUB_SCORING}
    folder = run_records.records_folder(run)
    files = {p: p.read_bytes() for p in folder.glob("*.npz")}

    def scored(*args, **kwargs):
        raise AssertionError("a run with its record was scored again")

    monkeypatch.setattr(run_records, "evaluate_run", scored)
    monkeypatch.setattr(chapter, "SPECS", SPECS)
    again = chapter.record_models(trained, data, tuned, run)  # both chapters' scorings there: read back
    assert {k: r.test.name for k, r in again.items()} == {k: r.test.name for k, r in records.items()}
    assert {p: p.read_bytes() for p in folder.glob("*.npz")} == files
    pcme.record_models([("PVSE", 2, 0)], subset, data, tuned, run)
    assert {p: p.read_bytes() for p in folder.glob("*.npz")} == files


@pytest.fixture(scope="module")
def ablate_run(chapter_run):
    """ablate.py's runs on the smoke grids at seeds 0 and 1 and visualise.py's precision runs."""
    run, data, tuned, enc, _, _ = chapter_run
    grids = chapter.ABLATION_GRIDS["smoke"]
    base = chapter.tuned_model("DVSE", tuned, enc, data.word_vectors, compared=chapter.COMPARED).config
    t5 = chapter.table5_runs(grids["combination"], SEEDS, base, data, tuned, enc, run)
    t6 = chapter.table6_runs(grids["K"], SEEDS, base, data, tuned, enc, run)
    sweep = chapter.sweep_runs(grids["beta"], grids["eta"], SEEDS, base, data, tuned, enc, run)
    fr = chapter.fr_grid_runs(grids["fr"], SEEDS, data, tuned, enc, run)
    precision = chapter.precision_runs(SEEDS, data, tuned, enc, run)
    return t5, t6, sweep, fr, precision


def test_figure7_and_precision_from_records_equal_those_scored_from_the_model(chapter_run, ablate_run):
    run, data, _, _, trained, records = chapter_run
    t5, t6, _, fr, precision = ablate_run
    whole = _scores(trained.models["DVSE", 1], data.test, data.vocab)
    cell = fr.runs.set_index(["direction", "s1", "s2", "seed"]).loc[("t2i", 10.0, 25.0, 1)]
    expected = instance_row(data.test, whole[0], fast_rerank(whole[1].T, (10.0, 25.0)).T)["all t2i R@1"]
    assert cell["R@1"] == pytest.approx(expected) and cell["hits"].mean() == pytest.approx(expected)
    test = dataclasses.replace(data.test, caption_level=None)
    got = precision.runs.set_index(["model", "seed"]).loc[("DVSE", 1)]
    old = evaluate_scores(test, whole[0], views=["exact"], precision_ks=(4, 5), scores_t2i=whole[1])
    assert (got["t2i P@4"], got["i2t P@5"]) == pytest.approx((old["exact/t2i/P@4"], old["exact/i2t/P@5"]))
    # the tuned DVSE is combination 1 and K = 6: one record, train.py's, with every notebook's scorings
    name = records["DVSE", 1].test.name
    assert name in set(t5.runs["record"]) & set(t6.runs["record"]) & set(precision.runs["record"])
    dvse = run_records.read_record(run_records.records_folder(run) / f"{name}.npz").evaluation.scorings
    assert {"default", "FR", "RR", "MR", chapter.PRECISION, *chapter.fr_grid_scorings((10.0, 25.0))} <= set(dvse)
    assert not dvse["default"].blocks["full", "instance", "i2t"].precision_hits  # P@K in the precision scoring only
    assert set(dvse[chapter.PRECISION].blocks["full", "exact", "t2i"].precision_hits) == {4, 5}
    assert t6.runs["CUB i2t R-P"].notna().all() and t5.runs["CUB i2t R-P"].isna().all()  # unseen: Table VI only


def test_claims_from_records_and_xmr_claims_recompute_finds_them_the_same(chapter_run, ablate_run):
    run, _, _, _, _, records = chapter_run
    t5, t6, sweep, fr, precision = ablate_run
    per_run = chapter.per_run_frame(records)
    t4 = chapter.table4_runs(records, {s: {"test s": 2.0, "RR": 0.5, "MR": 0.7, "FR": 0.1} for s in SEEDS})
    bound = {"train": chapter.train_bindings(records, run),
             "ablate": chapter.ablate_bindings(t5, t6, fr, sweep, run),
             "visualise": chapter.visualise_bindings(precision, run)}
    judged = {"train": chapter.train_judgements(records, bound["train"], per_run, t4, run),
              "ablate": chapter.ablate_judgements(t5, t6, fr, sweep, bound["ablate"], run),
              "visualise": chapter.visualise_judgements(pd.DataFrame(columns=["model", "seed", "converged",
                                                                              "mean |corr|"]), precision, None,
                                                        bound["visualise"], run)}
    # every claim on a mean over queries whose models were recorded is bound; the seed-only ones are not
    assert set(bound["train"]) == {"dvse-over-pvse", "fr-improves-dvse", "fr-improves-region-dvse",
                                   "dvse-r1-over-pcme", "dvse-rp-near-pcme", "fr-above-rr-mr", "rr-mr-improve"}
    assert set(bound["ablate"]) == {"se-improves"}  # the smoke grids lack the others' points
    assert set(bound["visualise"]) == {"dvse-details-t2i", "dvse-details-i2t"}
    sides = chapter.ablation_sides(t5, t6, fr, sweep)
    assert sides["γ=10"].scoring == chapter.fr_scale_name(10.0, 10.0) and sides["β=0.4"].scoring == ""
    assert sides["β=0.4"].records == sides["K=6"].records == sides["combination 1"].records  # the tuned DVSE
    assert bound["train"]["fr-improves-dvse"].sides["DVSE + FR"].scoring == "FR"
    assert bound["train"]["dvse-r1-over-pcme"].sides["PCME"].records[0].endswith("@test-unseen")
    results = results_root(run)
    for part, found in judged.items():
        assert [j.spec.key for j in found] == [s.key for s in getattr(chapter, f"{part.upper()}_CLAIMS")]
        write_judgements(found, "dvse", part, run)
        write_bindings(list(bound[part].values()), run)
    rows = recompute.recompute("dvse", results, records_home(results))
    keys = [k for part in bound.values() for k in part]
    assert sorted(r.binding.spec.key for r in rows) == sorted(keys)
    assert all(r.same for r in rows), [(r.binding.spec.key, r.judgement.verdict, r.committed) for r in rows]
    verdicts = {j.spec.key: j.verdict for found in judged.values() for j in found}
    assert {r.binding.spec.key: r.judgement.verdict for r in rows} == {k: verdicts[k] for k in keys}
