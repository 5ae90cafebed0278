"""HREM's train.py from run records (issue 76): the four trained models of one seed at the smoke profile (seconds),
each scored once and recorded, with the seed's ensemble of the two HREM mechanisms recorded as a run of its own
(`chapters.hrem.train_and_record`); the tables' values from the records equal those scored from the models the old
way (`evaluate.instance_row` of `score_split`, the ensemble's as the mean of the two models' score matrices), a
record already there is read back rather than scored again, and `xmr claims recompute` judges the chapter's claims
from the records alone as the chapter judged them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from xmr_core.book import recompute
from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import records_home, results_root, write_judgements
from xmr_core.chapters import hrem as chapter
from xmr_core.claims import instance_collapse
from xmr_core.config import RunConfig
from xmr_core.evaluate import SplitScores, instance_row, score_split
from xmr_core.experiment import run_records
from xmr_core.experiment.protocols import hrem_setup
from xmr_core.record_evidence import record_evidence

SEEDS = (0,)


@pytest.fixture(scope="module")
def chapter_run(tmp_path_factory):
    """(run, data, tuned, enc, recorded runs): train.py's four models at seed 0 on smoke, recorded into a temporary
    results folder's records home."""
    results = tmp_path_factory.mktemp("hrem") / "results"
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(results))
    _, data, enc = hrem_setup(run)
    tuned = chapter.tune_methods("smoke", enc, data, seed=0, device="cpu", progress=False)
    return run, data, tuned, enc, chapter.train_and_record(chapter.MODELS, SEEDS, data, tuned, enc, run)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9)


def test_table_values_from_records_equal_those_scored_from_the_models(chapter_run):
    run, data, tuned, enc, recorded = chapter_run
    assert set(recorded.records) == {(m, s) for m in chapter.ORDER for s in SEEDS}
    scores = {}
    for name in chapter.MODELS:
        model, result = chapter.train_model(name, data, tuned, enc, run, 0)  # loaded from the run cache
        scores[name] = score_split(model, data.test, data.vocab, "cpu")
        assert recorded.records[name, 0].name == result.run_dir.name
    a, b = scores["HREM standalone"], scores["HREM fusion"]
    scores[chapter.ENSEMBLE] = SplitScores((a.i2t + b.i2t) / 2, (a.t2i + b.t2i) / 2, 0.0)  # the old ensemble
    per_run = recorded.per_run.set_index("model")
    for name, s in scores.items():
        expected = instance_row(data.test, s.i2t, s.t2i)
        got = per_run.loc[name]
        assert all(_same(got[c], v) for c, v in expected.items()), name
        assert got["collapse"] == instance_collapse(s.i2t, data.test), name
    assert not per_run[["1K rSum", "all rSum"]].isna().any().any()  # the 1K protocol's folds held
    # the ensemble's record: a run of its own, named by its members, converged when both are
    ensemble = recorded.records[chapter.ENSEMBLE, 0]
    members = [recorded.records[m, 0] for m in ("HREM standalone", "HREM fusion")]
    assert ensemble.name.startswith(chapter.ENSEMBLE_METHOD + "-") and ensemble.seed == 0
    assert ensemble.fit["members"] == [m.name for m in members]
    assert ensemble.converged == all(m.converged for m in members)


def test_a_recorded_run_is_read_back_not_scored_again(chapter_run, monkeypatch):
    run, data, tuned, enc, recorded = chapter_run
    folder = run_records.records_folder(run)
    files = {p: p.read_bytes() for p in folder.glob("*.npz")}
    assert len(files) == len(recorded.records)  # a record per run, the ensemble's too

    def scored(*args, **kwargs):
        raise AssertionError("a run with its record was scored again")

    monkeypatch.setattr(run_records, "evaluate_run", scored)
    again = chapter.train_and_record(chapter.MODELS, SEEDS, data, tuned, enc, run)
    assert {k: r.name for k, r in again.records.items()} == {k: r.name for k, r in recorded.records.items()}
    pd.testing.assert_frame_equal(again.per_run, recorded.per_run)
    assert {p: p.read_bytes() for p in folder.glob("*.npz")} == files


def test_claims_from_records_and_xmr_claims_recompute_finds_them_the_same(chapter_run):
    run, data, _, _, recorded = chapter_run
    bindings = chapter.train_bindings(recorded.records, run)
    assert set(bindings) == {s.key for s in chapter.TRAIN_CLAIMS} - {"both-text-encoders", "beats-score-based"}
    judged = chapter.train_judgements(recorded.records, bindings, run)
    assert [j.spec.key for j in judged] == [s.key for s in chapter.TRAIN_CLAIMS]
    # each claim's evidence is the per-seed table's rSum, query by query
    rsum = record_evidence([recorded.records[chapter.ENSEMBLE, s] for s in SEEDS], chapter.CLAIM_METRICS[chapter.RSUM])
    assert rsum.values.shape == (1, data.test.n_images + data.test.n_captions)
    per_run = recorded.per_run.set_index("model")
    assert rsum.per_seed == pytest.approx([per_run.loc[chapter.ENSEMBLE, "all rSum"]])
    results = results_root(run)
    write_judgements(judged, "hrem", "train", run)
    write_bindings(list(bindings.values()), run)
    rows = recompute.recompute("hrem", results, records_home(results))
    assert [r.binding.spec.key for r in rows] == list(bindings)
    assert all(r.same for r in rows), [(r.binding.spec.key, r.judgement.verdict, r.committed) for r in rows]
    assert [r.judgement.verdict for r in rows] == [j.verdict for j in judged if j.spec.key in bindings]
    committed = pd.read_csv(results / "hrem" / "judgements_train.csv")
    assert committed["n queries"].tolist()[:len(bindings)] == [rsum.values.shape[1]] * len(bindings)
    assert np.isfinite(rsum.values).all()
