"""PCME's train.py from run records (issue 76's pilot): two seeds of every compared model trained at the smoke
profile (seconds), each scored once and recorded (`chapters.pcme.record_models`); the tables' values from the
records equal those scored from the models (`experiment.scoring.tables_row`), a record already there is read back
rather than scored again, smoke's records stay out of the repository, and `xmr claims recompute` judges the
chapter's claims from the records alone as the chapter judged them."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xmr_core.book import recompute
from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import records_home, results_root, write_judgements
from xmr_core.chapters import pcme as chapter
from xmr_core.config import RunConfig, project_root
from xmr_core.evaluate import direction_scores, embed_split, evaluate_similarities
from xmr_core.experiment import run_records
from xmr_core.experiment.protocols import chapter_setup
from xmr_core.experiment.scoring import run_collapse, tables_row
from xmr_core.experiment.training import chapter_runs, tune_methods
from xmr_core.methods.pcme import TEST_TIME_SIMILARITIES
from xmr_core.metrics import ranking_stats
from xmr_core.record_evidence import record_evidence

SEEDS = (0, 1)


@pytest.fixture(scope="module")
def chapter_run(tmp_path_factory):
    """(run, data, runs, trained, records): the smoke chapter's six models at seeds 0 and 1, recorded into a temporary
    results folder's records home."""
    results = tmp_path_factory.mktemp("pcme") / "results"
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(results))
    _, _, data, enc = chapter_setup(run)
    tuned = tune_methods("smoke", enc, data.word_vectors, data.train, data.val, data.vocab, seed=0, device="cpu",
                         progress=False)
    runs = chapter_runs(SEEDS)
    trained = chapter.train_models(runs, data, tuned, enc, run)
    return run, data, runs, tuned, trained, chapter.record_models(runs, trained, data, tuned, run)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9)


def test_table_values_from_records_equal_those_scored_from_the_models(chapter_run):
    _, data, _, _, trained, records = chapter_run
    assert set(records) == set(trained.models) and len(records) == 6 * len(SEEDS)
    per_run = chapter.per_run_frame(records)
    for (label, seed), model in trained.models.items():
        expected = tables_row(model, data, "cpu")
        got = per_run[(per_run["model"] == label) & (per_run["seed"] == seed)].iloc[0]
        assert all(_same(got[c], v) for c, v in expected.items()), (label, seed)
        assert got["collapse"] == run_collapse(model, data.test, data.vocab, "cpu")
        assert got["converged"] == trained.results[label, seed].converged
        assert got["record"] == records[label, seed].test.name == trained.results[label, seed].run_dir.name
    assert not per_run[["T2 i2t R-P", "T3 5K t2i PMRP", "T3 1K i2t R@1"]].isna().any().any()  # views and folds held
    # the unseen classes' record: its own split, PCME's also with every other test-time similarity
    pcme = records["PCME", 0].unseen
    assert pcme.name.endswith("@test-unseen") and pcme.evaluation.split.name == data.test_unseen.name
    assert set(pcme.evaluation.scorings) == {"default", "mean_cosine", "elk", "js", "wasserstein", "avg_l2"}
    assert set(records["VSE0", 0].unseen.evaluation.scorings) == {"default"}


def test_a_recorded_run_is_read_back_not_scored_again(chapter_run, monkeypatch):
    run, data, runs, tuned, trained, records = chapter_run
    folder = run_records.records_folder(run)
    files = {p: p.read_bytes() for p in folder.glob("*.npz")}
    assert len(files) == 2 * len(records)  # a record per run and test split

    def scored(*args, **kwargs):
        raise AssertionError("a run with its record was scored again")

    monkeypatch.setattr(run_records, "evaluate_run", scored)
    again = chapter.record_models(runs, trained, data, tuned, run)
    assert {k: (r.test.name, r.unseen.name) for k, r in again.items()} == \
        {k: (r.test.name, r.unseen.name) for k, r in records.items()}
    assert {p: p.read_bytes() for p in folder.glob("*.npz")} == files


def test_records_live_beside_the_results_smoke_never_in_the_repository(chapter_run):
    run = chapter_run[0]
    assert run_records.records_folder(run) == Path(run.results_dir).parent / "runs" / "records" / "smoke"
    root = project_root()
    assert run_records.records_folder(RunConfig.from_params(PROFILE="cpu")) == root / "runs" / "records" / "cpu"
    assert run_records.records_folder(RunConfig.from_params(PROFILE="smoke")) == \
        root / "book" / "_build" / "smoke" / "runs" / "records" / "smoke"
    assert records_home(root / "results" / "paper" / "coco") == root


def test_claims_from_records_and_xmr_claims_recompute_finds_them_the_same(chapter_run):
    run, data, _, _, _, records = chapter_run
    bindings = chapter.train_bindings(records, run)
    assert list(bindings) == [s.key for s in chapter.TRAIN_CLAIMS]
    judged = chapter.train_judgements(records, bindings, run)
    # each claim's evidence is the per-seed values of the per-seed table, query by query
    per_run = chapter.per_run_frame(records).set_index(["model", "seed"])
    rp = record_evidence([records["PCME", s].unseen for s in SEEDS], chapter.CLAIM_METRICS[chapter.RP][0])
    strata_means = [np.mean([row[rp.strata == k].mean() for k in (0, 1)]) for row in rp.values]
    assert strata_means == pytest.approx([per_run.loc[("PCME", s), ["T2 i2t R-P", "T2 t2i R-P"]].mean()
                                          for s in SEEDS])
    assert rp.values.shape == (2, data.test_unseen.n_images + data.test_unseen.n_captions)
    results = results_root(run)
    write_judgements(judged, "pcme", "train", run)
    write_bindings(list(bindings.values()), run)
    rows = recompute.recompute("pcme", results, records_home(results))
    assert [r.binding.spec.key for r in rows] == list(bindings)
    assert all(r.same for r in rows), [(r.binding.spec.key, r.judgement.verdict, r.committed) for r in rows]
    assert [r.judgement.verdict for r in rows] == [j.verdict for j in judged]
    committed = pd.read_csv(results / "pcme" / "judgements_train.csv")
    assert committed["n seeds"].tolist() == [len(SEEDS)] * len(judged)


def _class_rp(model, split, vocab, method: str) -> tuple[float, float]:
    """The old way of Table 1: (i2t, t2i) mean class R-P in percent of `model` scored with `method` on `split`."""
    img, cap = embed_split(model, split, vocab, device="cpu")
    i2t, t2i = direction_scores(model, img, cap, method=method)
    rel = {d: {"class": split.relevance("class", d)} for d in ("i2t", "t2i")}
    return tuple(100.0 * float(ranking_stats(s, rel[d])["class"].r_precision.double().mean())
                 for d, s in (("i2t", i2t), ("t2i", t2i.T)))


def test_table1_from_the_records_equals_each_similarity_scored_from_the_model(chapter_run):
    run, data, _, _, trained, records = chapter_run
    t1 = chapter.table1_runs(records)
    assert len(t1) == len(SEEDS) * (1 + len(TEST_TIME_SIMILARITIES))  # mu only's mean, PCME's every similarity
    for (label, seed), model in trained.models.items():
        for m in chapter.T1_SIMILARITIES.get(label, ()):
            row = t1[(t1["variant"] == chapter.T1_VARIANTS[label]) & (t1["seed"] == seed)
                     & (t1["similarity"] == TEST_TIME_SIMILARITIES[m][0])].iloc[0]
            expected = _class_rp(model, data.test_unseen, data.vocab, m)
            assert (row["i2t R-P"], row["t2i R-P"]) == pytest.approx(expected, rel=1e-9), (label, seed, m)
            assert row["collapse"] == records[label, seed].test.evaluation.scorings["default"].collapse
    # the claims from the records, bound and judged again by `xmr claims recompute` alike
    bindings = chapter.ablate_bindings(records, run)
    judged = chapter.ablate_judgements(records, bindings)
    results = results_root(run)
    write_judgements(judged, "pcme", "ablate", run)
    write_bindings(list(bindings.values()), run)
    rows = [r for r in recompute.recompute("pcme", results, records_home(results)) if r.binding.part == "ablate"]
    assert [r.binding.spec.key for r in rows] == [s.key for s in chapter.ABLATE_CLAIMS]
    assert all(r.same for r in rows), [(r.binding.spec.key, r.judgement.verdict, r.committed) for r in rows]


def test_an_ablation_row_from_its_records_equals_its_model_scored(chapter_run):
    run, data, _, tuned, trained, _ = chapter_run
    cfg = dataclasses.replace(trained.models["PCME", 0].config, n_samples=1)  # one ablation: J = 1
    row = chapter.ablation_frame([("J=1", cfg, {})], data, tuned, run, 0).iloc[0]
    model, result = chapter.train_tuned("PCME", cfg, data, tuned, run, 0)
    unseen = evaluate_similarities(model, data.test_unseen, data.vocab, ["match_prob"], views=["class"],
                                   device="cpu")["match_prob"]
    full = evaluate_similarities(model, data.test, data.vocab, ["match_prob"], views=["instance", "plausible"],
                                 device="cpu")["match_prob"]
    for d in ("i2t", "t2i"):
        assert (row[f"{d} R-P"], row[f"{d} R@1"]) == pytest.approx((unseen[f"class/{d}/R-P"], unseen[f"class/{d}/R@1"]),
                                                                 rel=1e-9)
        assert row[f"{d} PMRP"] == pytest.approx(full[f"plausible/{d}/PMRP"], rel=1e-9)
    assert row["rSum"] == pytest.approx(full["rsum"], rel=1e-9) and row["a"] == model.scale.item()
    assert (row["best epoch"], row["converged"]) == (result.best_epoch, result.converged)
    assert row["record"] == result.run_dir.name
    # the run's two records are there: the whole test split and the unseen classes
    assert {p.stem for p in run_records.records_folder(run).glob(f"{result.run_dir.name}*.npz")} == \
        {result.run_dir.name, f"{result.run_dir.name}@test-unseen"}
