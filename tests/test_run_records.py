"""`experiment.run_records.recorded` when two notebooks record one run with different scorings (a chapter's own, the
leaderboard's Fast Re-ranking): the record there keeps what it holds, only what it lacks is scored and added, and a
request it covers is read back without scoring. On a tiny trained VSE (`fixtures.recorded_runs`, about a second)."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.recorded_runs import TEST, VOCAB, trained

from xmr_core.config import RunConfig
from xmr_core.experiment import run_records
from xmr_core.query_values import scoring_metrics
from xmr_core.run_evaluation import Scoring, evaluate_run
from xmr_core.similarity import FastReranker

FR = Scoring(rerank=FastReranker((2.0, 2.0), (3.0, 3.0)), rerank_name="FR gamma 2 lambda 3")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("runs"))


def _spy(monkeypatch) -> list[tuple[str, ...]]:
    """The scorings each `evaluate_run` call of `recorded` asked for."""
    calls: list[tuple[str, ...]] = []

    def spy(model, split, vocab, *, scorings, **kwargs):
        calls.append(tuple(scorings))
        return evaluate_run(model, split, vocab, scorings=scorings, **kwargs)

    monkeypatch.setattr(run_records, "evaluate_run", spy)
    return calls


def test_a_second_notebooks_scoring_is_added_to_the_runs_record(finished, tmp_path, monkeypatch):
    model, result = finished
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(tmp_path / "results"))
    calls = _spy(monkeypatch)
    chapter = run_records.recorded(model, result, 0, TEST, VOCAB, {"default": Scoring()}, run,
                                   fold_views=("instance", "plausible"), tuning={"lr": 0.01})
    board = run_records.recorded(model, result, 0, TEST, VOCAB, {"default": Scoring(), "FR": FR}, run,
                                 fold_views=(), tuning={"FR": {"gamma": 2.0}})
    assert calls == [("default",), ("FR",)]  # the held default is not scored again
    assert board.name == chapter.name and set(board.evaluation.scorings) == {"default", "FR"}
    assert board.tuning == {"lr": 0.01, "FR": {"gamma": 2.0}}
    # the chapter's scoring is kept as it was, its COCO 1K folds in the plausible view included
    for protocol in ("full", "coco1k"):
        assert scoring_metrics(board.evaluation, "default", protocol) == \
            scoring_metrics(chapter.evaluation, "default", protocol)
    assert "plausible/i2t/PMRP" in scoring_metrics(board.evaluation, "default", "coco1k")
    direct = evaluate_run(model, TEST, VOCAB, scorings={"FR": FR})
    assert scoring_metrics(board.evaluation, "FR") == pytest.approx(scoring_metrics(direct, "FR"), rel=1e-6)
    # either request is now read back as it is, with nothing scored
    for scorings, folds in (({"default": Scoring()}, ("instance",)), ({"FR": FR}, ())):
        again = run_records.recorded(model, result, 0, TEST, VOCAB, scorings, run, fold_views=folds)
        assert set(again.evaluation.scorings) == {"default", "FR"}
    assert len(calls) == 2
    # other temperatures under the same name: the re-ranked scoring is scored again, the default kept
    other = Scoring(rerank=FastReranker((5.0, 5.0), (5.0, 5.0)), rerank_name="FR gamma 5 lambda 5")
    run_records.recorded(model, result, 0, TEST, VOCAB, {"FR": other}, run, fold_views=())
    assert calls[2:] == [("FR",)]


def test_a_held_scoring_short_of_a_view_or_fold_is_scored_again_with_both(finished, tmp_path, monkeypatch):
    model, result = finished
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(tmp_path / "results"))
    calls = _spy(monkeypatch)
    run_records.recorded(model, result, 0, TEST, VOCAB, {"default": Scoring(views=("instance", "class"))}, run,
                         fold_views=("class",))
    wide = run_records.recorded(model, result, 0, TEST, VOCAB, {"default": Scoring()}, run, fold_views=("instance",))
    assert calls == [("default",), ("default",)]
    blocks = wide.evaluation.scorings["default"].blocks
    assert {b[1].partition("/")[0] for b in blocks if b[0] == "full"} == set(TEST.views())
    assert {b[1] for b in blocks if b[0] == "coco1k"} == {"instance", "class"}  # the held fold view kept
    full = scoring_metrics(evaluate_run(model, TEST, VOCAB, fold_views=("instance", "class")), "default", "coco1k")
    assert scoring_metrics(wide.evaluation, "default", "coco1k") == pytest.approx(full, rel=1e-6)
    assert not np.isnan(list(full.values())).any()
