"""HMRN's train.py from run records (issue 76): the smoke chapter's models at one seed trained (cached after the first
run), each scored once and recorded (`chapters.hmrn.record_models`: the multi-query rounds, the ensemble's record of
its own, VSE0's two fusions as two scorings of one record); the tables' values from the records equal those scored
from the models the old way (`score_rounds`, `ensemble_scores`, `run_row`), a recorded run is read back rather than
scored again, and `xmr claims recompute hmrn` judges train.py's claims from the records as the chapter judged them.
The claims judged from records (`record_judgements`) equal those of the per-run table's judge (`judge_claims`) on
constructed runs whose verdicts are decided (no training)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from fixtures.round_records import round_record

from xmr_core.book import recompute
from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import records_home, results_root, write_judgements
from xmr_core.chapters import hmrn as chapter
from xmr_core.config import RunConfig
from xmr_core.data.load import load_corpus
from xmr_core.experiment import run_records

SEEDS = (0,)


@pytest.fixture(scope="module")
def chapter_run(tmp_path_factory):
    """(run, data, trained, rows): the smoke chapter's trained models at seed 0, recorded into a temporary results
    folder's records home."""
    results = tmp_path_factory.mktemp("hmrn") / "results"
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(results))
    corpus = load_corpus("scenes", "", "smoke", format=chapter.DATA_FORMAT, variant=chapter.VARIANT, progress=False,
                         seed=0)
    data = chapter.hmrn_data(corpus, "smoke")
    enc = chapter.hmrn_encoders("smoke", data.multi.test.regions.shape[2])
    tuned = chapter.tune_models("smoke", enc, data, seed=0, device="cpu", progress=False)
    trained = chapter.train_models(SEEDS, data, tuned, enc, run)
    return run, data, tuned, trained, chapter.record_models(trained, SEEDS, data, tuned, run)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9)
    return a == b


def test_table_values_from_records_equal_those_scored_from_the_models(chapter_run):
    _, data, _, trained, rows = chapter_run
    assert set(rows) == {(label, s) for label in chapter.ORDER for s in SEEDS}
    per_run = chapter.per_run_frame(rows).set_index(["model", "seed"])
    test, vocab = data.multi.test, data.multi.vocab
    old = {name: chapter.score_rounds(trained.models[name, 0], test, vocab, "cpu")
           for name in (chapter.IT, chapter.TI)}
    old[chapter.ENSEMBLE] = chapter.ensemble_scores(old[chapter.IT], old[chapter.TI])
    for label, fusion in chapter.FUSIONS.items():
        old[label] = chapter.score_rounds(trained.models[chapter.SINGLE, 0], test, vocab, "cpu", fusion)
    for label, scores in old.items():
        member = chapter.SINGLE if label in chapter.FUSIONS else label
        converged = trained.results[chapter.IT, 0].converged and trained.results[chapter.TI, 0].converged \
            if label == chapter.ENSEMBLE else trained.results[member, 0].converged
        expected = chapter.run_row(label, 0, converged, scores)
        got = per_run.loc[(label, 0)]
        assert all(_same(got[c], v) for c, v in expected.items() if c not in ("model", "seed", "score s")), label
        assert rows[label, 0].record.evaluation.scorings[rows[label, 0].scoring].rounds.tolist() == \
            chapter.target_ranks(scores.scores).tolist()
    # visualise.py's rank table beside the galleries: the ensemble's record, as the galleries' scores rank the sets
    ranks = chapter.gallery_ranks(rows[chapter.ENSEMBLE, 0].record, [0, 2])
    assert ranks["set 2"].tolist() == chapter.round_ranks(old[chapter.ENSEMBLE].scores, test, 2)[3]
    # the ensemble's record names its members; VSE0* and R-RankFusion read one VSE0 record
    ensemble = rows[chapter.ENSEMBLE, 0].record
    assert ensemble.fit["members"] == [rows[chapter.IT, 0].record.name, rows[chapter.TI, 0].record.name]
    assert rows[chapter.ROUND_MEAN, 0].record.name == rows[chapter.RANK_FUSION, 0].record.name == \
        trained.results[chapter.SINGLE, 0].run_dir.name


def test_a_recorded_run_is_read_back_not_scored_again(chapter_run, monkeypatch):
    run, data, tuned, trained, rows = chapter_run
    folder = run_records.records_folder(run)
    files = {p: p.read_bytes() for p in folder.glob("*.npz")}
    assert len(files) == len({r.record.name for r in rows.values()})  # one record per run, one per ensemble

    def scored(*args, **kwargs):
        raise AssertionError("a run with its record was scored again")

    monkeypatch.setattr(run_records, "evaluate_run", scored)
    again = chapter.record_models(trained, SEEDS, data, tuned, run)
    assert {k: (r.record.name, r.scoring) for k, r in again.items()} == \
        {k: (r.record.name, r.scoring) for k, r in rows.items()}
    assert {p: p.read_bytes() for p in folder.glob("*.npz")} == files


def test_claims_from_records_and_xmr_claims_recompute_finds_them_the_same(chapter_run):
    run, data, _, _, rows = chapter_run
    complexity = pd.DataFrame([{"model": chapter.ENSEMBLE, "params (M)": 1.0, "MFLOPs per session": 2.0}])
    judged, bindings = chapter.train_judgements(rows, chapter.rounds_of(data.multi.test), complexity, 32, run)
    assert [j.spec.key for j in judged] == [s.key for s in chapter.TRAIN_CLAIMS]
    assert {b.spec.key for b in bindings} == {s.key for s in chapter.TRAIN_CLAIMS if s.metric != chapter.PARAMS}
    results = results_root(run)
    write_judgements(judged, "hmrn", "train", run)
    write_bindings(bindings, run)
    again = recompute.recompute("hmrn", results, records_home(results))
    assert [r.binding.spec.key for r in again] == [b.spec.key for b in bindings]
    assert all(r.same for r in again), [(r.binding.spec.key, r.judgement.verdict, r.committed) for r in again]


# ------------------------------------------------------------------------------------- constructed records
def _constructed(lifts: dict[str, float | None], growth: float = 0.0, seeds=(0, 1, 2)):
    """Per-run rows and scores (`run_row`) and the same runs as records: the target lifted by each model's `lifts`
    (+ `growth` a round; None: every score tied, a collapsed run), every seed's noise its own."""
    per_run, scores, rows = [], {}, {}
    for m, lift in lifts.items():
        for s in seeds:
            g = torch.Generator().manual_seed(100 * s + len(per_run))
            sc = torch.zeros(3, 40, 40) if lift is None else torch.randn(3, 40, 40, generator=g) + torch.tensor(
                [lift + growth * r for r in range(3)])[:, None, None] * torch.eye(40)
            scores[m, s] = chapter.RoundScores(sc, 0.0)
            per_run.append(chapter.run_row(m, s, True, scores[m, s]))
            rows[m, s] = chapter.RecordedRow(round_record(m, s, sc))
    return pd.DataFrame(per_run), scores, rows


@pytest.mark.parametrize("lifts, growth, keys, decided", [
    ({chapter.HRE: 3.0, chapter.RE: 1.5}, 0.0, ["hre-over-re"], True),
    ({chapter.HRE: 1.5, chapter.RE: None}, 0.0, ["hre-over-re"], False),  # R-RE collapsed: not tested
    ({chapter.ENSEMBLE: 1.5}, 1.5, ["improves-with-queries", "improves-every-round"], True),
    ({chapter.ENSEMBLE: 4.0}, -2.0, ["improves-with-queries", "improves-every-round"], True),
    ({**{m: 5.0 for m in chapter.MULTI_VECTOR}, **{s: 1.5 for s in chapter.SINGLE_VECTOR}, chapter.DRILL: 1.0}, 0.5,
     ["multi-over-R-RE", "ensemble-best", "ti-drags-ensemble-late", "ensemble-over-drilldown-last-r1"], True),
])
def test_claims_from_records_are_judged_as_the_per_run_table_judges_them(lifts, growth, keys, decided):
    per_run, scores, rows = _constructed(lifts, growth)
    specs = [s for s in chapter.CLAIMS if s.key in keys]
    run = RunConfig.from_params(PROFILE="cpu", DATASET="scenes")
    expected = chapter.judge_claims(specs, per_run, 3, run, scores)
    judged, bindings = chapter.record_judgements(specs, rows, 3, run, "train")
    assert {b.spec.key for b in bindings} == set(keys)
    for got, want in zip(judged, expected, strict=True):
        assert (got.spec.key, got.verdict, got.paired, got.n_queries) == \
            (want.spec.key, want.verdict, want.paired, want.n_queries)
        assert [got.effect, got.low, got.high] == pytest.approx([want.effect, want.low, want.high], nan_ok=True)
    assert any(j.verdict in ("held", "did not hold") for j in judged) == decided
