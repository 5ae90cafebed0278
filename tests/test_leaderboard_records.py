"""The leaderboard's claims from run records: tiny trained runs (`fixtures.recorded_runs`, about a second each) of two
methods at three seeds stand for two models of the board; each run's record gains the leaderboard's Fast
Re-ranking (`record_board_model`), the cross-method claims (two of them, narrowed to these two models) are judged
from the records and bound to them, and `xmr claims recompute leaderboard` finds every claim the same from the
written records alone."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from fixtures.recorded_runs import TEST, VAL, VECTORS, VOCAB, trained

from xmr_core.book import recompute
from xmr_core.book.recompute import write_bindings
from xmr_core.book.results import records_home, results_root, write_judgements
from xmr_core.chapters import leaderboard
from xmr_core.config import RunConfig
from xmr_core.experiment.protocols import ChapterData

SEEDS = (0, 1, 2)
MODELS = {"VSE0": "vse0", "PCME": "vsepp"}  # a board model -> the tiny method standing for it


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """(run, records): every model and seed recorded with the leaderboard's FR in a temporary results folder."""
    tmp = tmp_path_factory.mktemp("board")
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(tmp / "results"))
    data = ChapterData(VAL, VAL, TEST, TEST, VOCAB, VECTORS, 1.0)
    records = {}
    for label, method in MODELS.items():
        for seed in SEEDS:
            model, result = trained(tmp / "runs", method, seed)
            records[label, seed] = leaderboard.record_board_model(model, result, seed, data, run, grid=(1.0, 10.0))
    return run, records


@pytest.fixture
def claims(monkeypatch):
    """The PCME PMRP claim (PCME above VSE0: a superiority claim of two models) and "FR improves any model",
    narrowed to the two models of `MODELS`."""
    specs = {s.key: s for s in leaderboard.CLAIMS}
    narrowed = [dataclasses.replace(specs["pcme-pmrp-over-deterministic"], kind="superiority", models=("PCME", "VSE0"),
                                    peak=""),
                dataclasses.replace(specs["fr-improves-any"], pairs=tuple((f"{m} + FR", m) for m in MODELS))]
    monkeypatch.setattr(leaderboard, "CLAIMS", narrowed)
    return narrowed


def test_bindings_name_each_models_records_and_scoring(board, claims):
    run, records = board
    bindings = leaderboard.board_bindings(records, run)
    assert list(bindings) == [s.key for s in claims]
    fr = bindings["fr-improves-any"]
    assert fr.sides["PCME + FR"].records == tuple(records["PCME", s].name for s in SEEDS)
    assert (fr.sides["PCME + FR"].scoring, fr.sides["PCME"].scoring) == (leaderboard.FR_SCORING, "default")
    assert (fr.metric.value, bindings["pcme-pmrp-over-deterministic"].metric.view) == ("rsum", "plausible")
    # a view the data lacks, or a compared model with no runs: no binding
    assert list(leaderboard.board_bindings(records, run, {"plausible": "no labels"})) == ["fr-improves-any"]
    assert leaderboard.board_bindings({k: r for k, r in records.items() if k[0] == "PCME"}, run) == {}


def test_xmr_claims_recompute_finds_the_leaderboards_claims_the_same(board, claims):
    run, records = board
    judged = leaderboard.cross_method_judgements(leaderboard.board_evidence(records), run)
    assert judged[0].verdict != "not tested", judged[0].reason  # (a tiny run's FR may collapse: not tested)
    results = results_root(run)
    write_judgements(judged, "leaderboard", "board", run)
    write_bindings(list(leaderboard.board_bindings(records, run).values()), run)
    rows = recompute.recompute("leaderboard", results, records_home(results))
    assert [r.binding.spec.key for r in rows] == [s.key for s in claims]
    assert all(r.same for r in rows), [(r.binding.spec.key, r.judgement.verdict, r.committed) for r in rows]
    committed = pd.read_csv(results / "leaderboard" / "judgements_board.csv")
    assert committed["n seeds"].tolist()[0] == len(SEEDS)
