"""MSRM's train.py and ablate.py from run records (issue 76, after PCME's pilot): MSRM and PCME at two seeds in both
protocols and one Table 4 ablation (mu only), trained at the smoke profile (seconds), each scored once and recorded.
The tables' values from the records equal those scored from the models as the chapter scored them before, the
zero-shot records are the PCME chapter's own (read back, not scored again), and `xmr claims recompute msrm` judges
the bound claims from the records alone as the chapter judged them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from xmr_core.book import recompute
from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import records_home, results_root, write_judgements
from xmr_core.chapters import msrm as chapter
from xmr_core.chapters import pcme
from xmr_core.config import RunConfig
from xmr_core.evaluate import evaluate_model
from xmr_core.experiment import run_records
from xmr_core.experiment.protocols import chapter_setup
from xmr_core.experiment.scoring import run_collapse, tables_row
from xmr_core.experiment.training import tune_methods, tuned_model
from xmr_core.record_evidence import record_evidence

SEEDS = (0, 1)
MODELS = (("PCME", 1), ("MSRM", 1))


@pytest.fixture(scope="module")
def chapter_run(tmp_path_factory):
    """(run, data, all classes, tuned, trained, records, t4): MSRM and PCME at seeds 0 and 1 in both protocols, and
    Table 4's MSRM and mu only on the all-classes data, recorded into a temporary results folder's records home."""
    results = tmp_path_factory.mktemp("msrm") / "results"
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(results))
    corpus, _, data, enc = chapter_setup(run)
    all_classes = chapter.optional_all_classes(corpus)
    tuned = tune_methods("smoke", enc, data.word_vectors, data.train, data.val, data.vocab, seed=0,
                         compared={m: chapter.COMPARED[m] for m, _ in MODELS}, device="cpu", progress=False)
    runs = [(protocol, name, k, seed) for protocol in ("zero-shot", "all classes") for seed in SEEDS
            for name, k in MODELS]
    trained = chapter.train_runs(runs, data, all_classes, tuned, enc, run)
    records = chapter.record_runs(trained, data, all_classes, tuned, run)
    base = tuned_model("MSRM", tuned, enc, all_classes.word_vectors, compared=chapter.COMPARED).config
    variants = {k: v for k, v in chapter.table4_variants(base).items() if k in ("MSRM", "mu only")}
    t4 = chapter.table4_runs(variants, SEEDS, all_classes, tuned, enc, run)
    return run, data, all_classes, tuned, trained, records, t4


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9)


def test_table_values_from_records_equal_those_scored_from_the_models(chapter_run):
    _, data, all_classes, _, trained, records, t4 = chapter_run
    runs = chapter.chapter_frames(records, trained.fits)
    assert len(runs.zero_shot) == len(runs.all_classes) == len(MODELS) * len(SEEDS)
    for (protocol, label, seed), model in trained.models.items():
        got = runs.per_run[(runs.per_run["protocol"] == protocol) & (runs.per_run["model"] == label)
                           & (runs.per_run["seed"] == seed)].iloc[0]
        if protocol == "zero-shot":  # the PCME chapter's scoring of Tables 2 and 3
            expected, split = tables_row(model, data, "cpu"), data.test
        else:  # class relevance on the whole test split, as `evaluate_model` scores it
            values = evaluate_model(model, all_classes.test_unseen, all_classes.vocab, device="cpu", views=["class"])
            expected = {f"T1 {d} {m}": values[f"class/{d}/{m}"] for d in ("i2t", "t2i") for m in ("R-P", "R@1")}
            split = all_classes.test_unseen
        assert all(_same(got[c], v) for c, v in expected.items()), (protocol, label, seed)
        assert got["collapse"] == run_collapse(model, split, data.vocab if protocol == "zero-shot"
                                               else all_classes.vocab, "cpu")
        assert got["converged"] == trained.results[protocol, label, seed].converged
        assert got["record"] == records[protocol, label, seed].test.name
    assert not runs.zero_shot[["T2 i2t R-P", "T3 5K t2i PMRP", "T3 1K i2t R@1"]].isna().any().any()
    # Table 4: the records' class values and each query's mean of R-P and R@1, against `evaluate_model`
    for (label, seed), rec in t4.records.items():
        row = t4.runs[(t4.runs["model"] == label) & (t4.runs["seed"] == seed)].iloc[0]
        assert rec is not None and row["collapse"] == rec.evaluation.scorings["default"].collapse
        values, strata = t4.queries[label, seed]
        strata_means = [values[strata == h].mean() for h in (0, 1)]
        assert np.mean(strata_means) == pytest.approx(np.mean([row[c] for c in chapter.TABLE4_COLUMNS]))
    model = trained.models["all classes", "MSRM", 0]  # Table 4's MSRM is train.py's all-classes MSRM: one record
    assert t4.records["MSRM", 0].name == records["all classes", "MSRM", 0].test.name
    values = evaluate_model(model, all_classes.test_unseen, all_classes.vocab, device="cpu", views=["class"])
    row = t4.runs[(t4.runs["model"] == "MSRM") & (t4.runs["seed"] == 0)].iloc[0]
    assert all(_same(row[c], values[k]) for c, k in chapter.TABLE4_COLUMNS.items())


def test_the_zero_shot_records_are_the_pcme_chapters_and_are_read_back(chapter_run, monkeypatch):
    run, data, all_classes, tuned, trained, records, _ = chapter_run
    folder = run_records.records_folder(run)
    files = {p: p.read_bytes() for p in folder.glob("*.npz")}

    def scored(*args, **kwargs):
        raise AssertionError("a run with its record was scored again")

    monkeypatch.setattr(run_records, "evaluate_run", scored)
    again = chapter.record_runs(trained, data, all_classes, tuned, run)
    assert {k: (r.test.name, r.unseen.name) for k, r in again.items()} == \
        {k: (r.test.name, r.unseen.name) for k, r in records.items()}
    zero = [(name, k, seed) for seed in SEEDS for name, k in MODELS]
    pcme_trained = pcme.TrainedModels({key[1:]: m for key, m in trained.models.items() if key[0] == "zero-shot"},
                                      {key[1:]: r for key, r in trained.results.items() if key[0] == "zero-shot"},
                                      trained.fits)
    theirs = pcme.record_models(zero, pcme_trained, data, tuned, run)  # the PCME chapter's records of these runs
    assert {k: (r.test.name, r.unseen.name) for k, r in theirs.items()} == \
        {k[1:]: (r.test.name, r.unseen.name) for k, r in records.items() if k[0] == "zero-shot"}
    assert {p: p.read_bytes() for p in folder.glob("*.npz")} == files


def test_claims_from_records_and_xmr_claims_recompute_finds_them_the_same(chapter_run):
    run, data, _, _, trained, records, t4 = chapter_run
    runs = chapter.chapter_frames(records, trained.fits)
    bindings = chapter.train_bindings(records, run)
    # the claims on MSRM and PCME alone are bound; the others' models are not trained here (judged not tested)
    assert set(bindings) == {"msrm-over-pcme-zero-shot", "msrm-over-pcme-all-classes", "msrm-over-pcme-pmrp",
                             "msrm-over-pcme-r1"}
    judged = chapter.train_judgements(records, bindings, runs, run)
    assert [j.spec.key for j in judged] == [s.key for s in chapter.TRAIN_CLAIMS]
    assert {j.verdict for j in judged if j.spec.key not in bindings} == {"not tested"}
    # a column of a universal claim: its per-query values are that column's queries, averaging to the table's value
    side = bindings["msrm-over-pcme-pmrp"].sides["MSRM · 1K t2i"]
    pmrp = record_evidence([records["zero-shot", "MSRM", s].test for s in SEEDS], side.metric)
    assert pmrp.per_seed == pytest.approx(runs.zero_shot.set_index(["model", "seed"]).loc[
        [("MSRM", s) for s in SEEDS], "T3 1K t2i PMRP"].to_numpy())
    assert pmrp.values.shape == (2, data.test.n_captions)
    t1 = next(j for j in judged if j.spec.key == "msrm-over-pcme-all-classes")
    assert t1.n_seeds == 2 and t1.n_queries == data.test.n_images  # the i2t columns' queries: the fewest
    # ablate.py: MSRM against mu only bound to the records, judged as from the per-query values of the table path
    ablate_bindings = chapter.ablate_bindings(t4, NO_SWEEP, run)
    assert set(ablate_bindings) == {"without-variance-lower"}
    ablated = {j.spec.key: j for j in chapter.ablate_judgements(t4, NO_SWEEP, NO_ZETA, run)}
    by_table = {j.spec.key: j for j in chapter.ablate_judgements(t4, NO_SWEEP, NO_ZETA, run, bindings={})}
    got, want = ablated["without-variance-lower"], by_table["without-variance-lower"]
    assert (got.verdict, got.reason, got.n_seeds, got.n_queries) == (want.verdict, want.reason, want.n_seeds,
                                                                        want.n_queries)
    assert all(_same(getattr(got, a), getattr(want, a)) for a in ("effect", "low", "high"))
    results = results_root(run)
    write_judgements(judged, "msrm", "train", run)
    write_judgements(list(ablated.values()), "msrm", "ablate", run)
    write_bindings([*bindings.values(), *ablate_bindings.values()], run)
    rows = recompute.recompute("msrm", results, records_home(results))
    assert [r.binding.spec.key for r in rows] == [*ablate_bindings, *bindings]  # claim_records_ablate.json first
    assert all(r.same for r in rows), [(r.binding.spec.key, r.judgement.verdict, r.committed) for r in rows]


NO_ZETA = pd.DataFrame(columns=["model", "seed", "converged", "collapse"])  # Figure 7 not run here
NO_SWEEP = chapter.AblationRuns(pd.DataFrame(columns=["parameter", "value", "seed", "converged", "stopped", "collapse",
                                                      *chapter.TABLE4_COLUMNS]), {}, {})
