"""Claims judged from run records: evidence aligned by query across seeds, claims bound to records, and the auditor's
path `xmr claims recompute` on records of tiny trained runs and a synthetic chapter's claims."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from fixtures.recorded_runs import TEST, VOCAB, trained, viewed_split

from xmr_core.book import cli
from xmr_core.book.diff import differences
from xmr_core.book.recompute import write_bindings
from xmr_core.book.staleness import result_metas
from xmr_core.claims import ClaimSpec, judge, judgements_frame
from xmr_core.claims import _pairing as pairing
from xmr_core.config import RunConfig
from xmr_core.query_values import QueryMetric, scoring_metrics
from xmr_core.record_evidence import ClaimRecords, Side, judge_records, record_evidence
from xmr_core.run_evaluation import evaluate_run
from xmr_core.runs.record import read_run_record, run_record, write_run_record

SEEDS = (0, 1, 2)
METHODS = ("vse0", "vsepp")
RSUM = QueryMetric("rsum")
CLASS_RP = QueryMetric("R-P", "class")
CLAIMS = [
    (ClaimSpec("vsepp-over-vse0", "VSE++ is above VSE0 in rSum.", "Sec. 1", "superiority", "rSum (instance, test)",
               ("vsepp", "vse0")), RSUM),
    (ClaimSpec("vse0-not-below-vsepp", "VSE0 is not below VSE++ in class R-P.", "Sec. 2", "non-inferiority",
               "mean of i2t/t2i class R-P, pp", ("vse0", "vsepp"), margin=5.0), CLASS_RP),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project folder with the records of both methods at three seeds in runs/records/smoke, and the records in
    memory: {(method, seed): RunRecord}."""
    root = tmp_path_factory.mktemp("project")
    (root / "pyproject.toml").write_text("")
    (root / "xmr_core").mkdir()
    records = {}
    for method in METHODS:
        for seed in SEEDS:
            model, result = trained(root / "cache", method, seed)
            evaluation = evaluate_run(model, TEST, VOCAB)
            write_run_record(result, evaluation, "smoke", {"seed": seed}, root=root)
            records[method, seed] = run_record(result, evaluation, {"seed": seed})
    return root, records


def test_evidence_is_every_seeds_per_query_values_aligned_by_query(project):
    root, records = project
    mine = [read_run_record("smoke", records["vse0", s].name, root=root) for s in SEEDS]
    e = record_evidence(mine, RSUM)
    assert e.seeds == SEEDS and e.values.shape == (3, 20 + 100) and e.converged == all(r.converged for r in mine)
    assert list(np.bincount(e.strata)) == [20, 100]  # the image queries, then the caption queries
    np.testing.assert_allclose(e.per_seed, [scoring_metrics(r.evaluation)["rsum"] for r in mine])
    other = record_evidence([records["vsepp", s] for s in SEEDS], RSUM)
    assert other.split == e.split and pairing([e, other]) == (True, True)
    # on another test split they pair by neither
    model, result = trained(root / "cache", "vse0", 0)
    elsewhere = run_record(result, evaluate_run(model, viewed_split(seed=9), VOCAB))
    with pytest.raises(ValueError, match="different test splits"):
        record_evidence([mine[0], elsewhere], RSUM)
    assert record_evidence([elsewhere], RSUM).split != e.split


def test_collapse_and_divergence_come_from_the_records(project):
    _, records = project
    r = records["vse0", 0]
    scored = dataclasses.replace(r.evaluation.scorings["default"], collapse="chance-level ranking")
    collapsed = dataclasses.replace(r, evaluation=dataclasses.replace(r.evaluation, scorings={"default": scored}))
    diverged = dataclasses.replace(records["vse0", 1], fit={**records["vse0", 1].fit, "stopped": "diverged",
                                                            "converged": False})
    e = record_evidence([collapsed, diverged], RSUM)
    assert e.collapse == "chance-level ranking" and e.diverged == (1,) and not e.converged


def bindings(records) -> list[ClaimRecords]:
    return [ClaimRecords(spec, metric, {m: Side(tuple(records[m, s].name for s in SEEDS)) for m in METHODS}, "scenes",
                         "smoke", "synthetic", "train") for spec, metric in CLAIMS]


def test_a_claim_bound_to_records_round_trips_through_json_and_judges_as_in_memory(project):
    _, records = project
    for b in bindings(records):
        assert ClaimRecords.from_json(json.loads(json.dumps(b.to_json()))) == b
        by_name = {r.name: r for r in records.values()}
        got = judge_records(b, by_name.__getitem__)
        want = judge(b.spec, {m: record_evidence([records[m, s] for s in SEEDS], b.metric) for m in METHODS},
                     dataset="scenes", profile="smoke")
        assert (got.verdict, got.effect, got.low, got.high) == (want.verdict, want.effect, want.low, want.high)
        assert got.n_seeds == 3 and got.n_queries == 120 and got.paired == "seed+query"
    with pytest.raises(ValueError, match="no records named for"):
        ClaimRecords(CLAIMS[0][0], RSUM, {"vse0": Side(("x",))}, "scenes", "smoke", "synthetic", "train")


def test_a_side_read_on_its_own_metric_round_trips_and_judges_on_it(project):
    """A universal claim over several metrics: each side "<model> · <part>" names its part's metric."""
    _, records = project
    parts = {"i2t": QueryMetric("R-P", "class", ("i2t",)), "t2i": QueryMetric("R-P", "class", ("t2i",))}
    spec = ClaimSpec("vsepp-over-vse0-each", "VSE++ is above VSE0 in each direction's class R-P.", "Sec. 3",
                     "universal", "each of i2t / t2i class R-P, pp",
                     pairs=tuple((f"vsepp · {p}", f"vse0 · {p}") for p in parts))
    sides = {f"{m} · {p}": Side(tuple(records[m, s].name for s in SEEDS), metric=metric)
             for m in METHODS for p, metric in parts.items()}
    b = ClaimRecords(spec, parts["i2t"], sides, "scenes", "smoke", "synthetic", "train")
    assert ClaimRecords.from_json(json.loads(json.dumps(b.to_json()))) == b
    assert "metric" not in bindings(records)[0].to_json()["sides"]["vse0"]  # a side on the claim's metric: as before
    got = judge_records(b, {r.name: r for r in records.values()}.__getitem__)
    want = judge(spec, {f"{m} · {p}": record_evidence([records[m, s] for s in SEEDS], metric)
                        for m in METHODS for p, metric in parts.items()}, dataset="scenes", profile="smoke")
    assert (got.verdict, got.effect, got.low, got.high) == (want.verdict, want.effect, want.low, want.high)
    assert got.n_queries == 20  # each part's queries: one direction (20 images), not both


def test_xmr_claims_recompute_from_committed_records_alone(project, monkeypatch, capsys):
    root, records = project
    results = root / "results"
    chosen = bindings(records)
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", RESULTS_DIR=str(results))
    [path] = write_bindings(chosen, run)
    # a result with its provenance: `xmr results check` and `diff` cover it as a table
    assert dict(result_metas(results))["synthetic/claim_records_train"]["kind"] == "data"
    first = path.read_bytes()
    assert write_bindings(chosen, run) == [path] and differences(path.name, first, path.read_bytes()) == []
    # the committed judgements: what the chapter judged from its runs in memory
    by_name = {r.name: r for r in records.values()}
    judgements = [judge_records(b, by_name.__getitem__) for b in chosen]
    table = results / "synthetic" / "judgements_train.csv"
    judgements_frame(judgements).to_csv(table, index=False)
    monkeypatch.chdir(root)
    assert cli.main(["claims", "recompute", "synthetic"]) == 0
    out = capsys.readouterr().out
    assert out.count(": same") == 2 and "2 of 2 claims recomputed from records as committed" in out
    assert f"committed {judgements[0].verdict}" in out and "3 seeds, 120 queries" in out
    assert cli.main(["claims", "recompute", "vse0-not-below-vsepp"]) == 0
    assert "1 of 1 claims" in capsys.readouterr().out
    # a committed judgement the records do not give back is shown as different
    frame = pd.read_csv(table)
    frame.loc[0, "high"] = frame.loc[0, "high"] + 0.01
    frame.to_csv(table, index=False)
    assert cli.main(["claims", "recompute", "01_synthetic"]) == 1
    assert "vsepp-over-vse0: committed" in (out := capsys.readouterr().out) and "DIFFERENT" in out
    assert cli.main(["claims", "recompute", "nothing"]) == 1
    assert "no claim of 'nothing' is bound to run records" in capsys.readouterr().err
    # a record missing from the committed folder is an error naming it
    (root / "runs" / "records" / "smoke" / f"{records['vse0', 2].name}.npz").unlink()
    with pytest.raises(SystemExit, match=f"xmr claims recompute: .*{records['vse0', 2].name}.npz: not a readable"):
        cli.main(["claims", "recompute", "synthetic"])
