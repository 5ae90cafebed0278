"""A notebook with no run cache (issue 76): PCME's train.py path at the smoke profile trained once into a cache,
writing its fit summaries and run records beside a results folder; then, with the run cache emptied (the data and
the frozen trunk kept: they are inputs, not runs), the same calls train nothing (`fit` is never called), and the
tuning table, the training table, the learning curves, the per-seed table and the claims with their bindings come
out the same. A figure's run (`weights=True`) is listed by the plan's trace as needing weights, a weightless model
refuses to score, and a run whose record is missing says so in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from xmr_core.book.plan import build_plan
from xmr_core.chapters import pcme as chapter
from xmr_core.config import RunConfig, cache_dir
from xmr_core.experiment import run_records
from xmr_core.experiment.protocols import chapter_setup
from xmr_core.experiment.scoring import run_collapse
from xmr_core.experiment.training import chapter_runs, train_model, tune_methods
from xmr_core.runs import plan as runplan
from xmr_core.runs import trace
from xmr_core.runs.fits import NoWeights, WeightlessFit, has_weights
from xmr_core.runs.tuning import tuning_frame

SEEDS = (0, 1)
EXECUTION = ["cached", "wall s"]  # columns that describe the execution (`book.diff.EXECUTION_COLUMNS`)


def _notebook(run: RunConfig) -> dict[str, object]:
    """What PCME's train.py computes, by its own calls: tuning, training, learning curves, records, claims."""
    _, _, data, enc = chapter_setup(run)
    tuned = tune_methods("smoke", enc, data.word_vectors, data.train, data.val, data.vocab, seed=0, run=run,
                         device="cpu", progress=False)
    runs = chapter_runs(SEEDS)
    trained = chapter.train_models(runs, data, tuned, enc, run)
    records = chapter.record_models(runs, trained, data, tuned, run)
    bindings = chapter.train_bindings(records, run)
    judged = chapter.train_judgements(records, bindings, run)
    return {"tuning": tuning_frame(tuned).drop(columns=["cached"]), "fits": trained.fits.drop(columns=EXECUTION),
            "curves": chapter.learning_curves(trained.results), "per_run": chapter.per_run_frame(records),
            "judged": [(j.verdict, repr(j.effect), repr(j.low), repr(j.high)) for j in judged],
            "bindings": [b.to_json() for b in bindings.values()], "trained": trained, "data": data, "tuned": tuned,
            "enc": enc}


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    """(run, warm, cold, fits called): the notebook's path with a run cache, then with it emptied."""
    results = tmp_path_factory.mktemp("weightless") / "results"
    run = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False, RESULTS_DIR=str(results))
    warm = _notebook(run)
    shutil.rmtree(cache_dir() / "runs")
    calls: list[str] = []
    fit = runplan.fit

    def counted(model, *args, **kwargs):
        calls.append(model.name)
        return fit(model, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runplan, "fit", counted)
        cold = _notebook(run)
    return run, warm, cold, calls


def test_with_no_run_cache_nothing_trains_and_every_table_and_claim_is_the_same(twice):
    run, warm, cold, calls = twice
    assert calls == [] and not (cache_dir() / "runs").exists()  # no run trained, none loaded
    assert all(not has_weights(r) and r.cached for r in cold["trained"].results.values())
    assert all(has_weights(r) for r in warm["trained"].results.values())
    for name in ("tuning", "fits", "curves", "per_run"):
        pd.testing.assert_frame_equal(cold[name], warm[name], check_exact=True, obj=name)
    assert cold["judged"] == warm["judged"] and cold["bindings"] == warm["bindings"]
    assert len(cold["curves"]) and cold["per_run"]["converged"].tolist() == warm["per_run"]["converged"].tolist()
    # one summary a distinct run, the tuning runs' included (each final run at seed 0 is its tuning run)
    summaries = sorted(p.name for p in run_records.fits_folder(run).iterdir())
    assert summaries == sorted(f"{r.run_dir.name}.json.gz" for r in warm["trained"].results.values()
                               ) == sorted(f"{n}.json.gz" for n in warm["fits"]["run"])
    print("fit summary bytes:", {n: (run_records.fits_folder(run) / n).stat().st_size for n in summaries})


def test_a_weightless_model_refuses_to_score(twice):
    cold = twice[2]
    model = cold["trained"].models["PCME", 0]
    with pytest.raises(NoWeights, match=r"run pcme-[0-9a-f]{16}: no weights .* weights=True"):
        run_collapse(model, cold["data"].test, cold["data"].vocab, "cpu")


def test_a_weightless_run_without_its_record_says_where_and_how_to_retrain(twice, tmp_path):
    cold = twice[2]
    elsewhere = RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False,
                                      RESULTS_DIR=str(tmp_path / "results"))
    result = cold["trained"].results["VSE0", 0]
    assert isinstance(result, WeightlessFit)
    data = cold["data"]
    with pytest.raises(run_records.NoRecord) as err:
        run_records.recorded(cold["trained"].models["VSE0", 0], result, 0, data.test, data.vocab,
                             {"default": run_records.Scoring()}, elsewhere)
    path = run_records.records_folder(elsewhere) / f"{result.run_dir.name}.npz"
    assert str(err.value) == (f"run {result.run_dir.name}: no weights and no record at {path}; retrain with `xmr runs "
                              "train <notebook> --profile smoke` (its weights into the run cache), then run the notebook "
                              "again")


def test_the_plan_lists_summarised_runs_as_recorded_and_a_figures_run_as_needing_weights(twice, tmp_path,
                                                                                        monkeypatch):
    run, _, cold, _ = twice
    plan_file = tmp_path / "plan.jsonl"
    monkeypatch.setenv(trace.PLAN_ENV, str(plan_file))
    data, tuned, enc = cold["data"], cold["tuned"], cold["enc"]
    for seed in SEEDS:
        chapter.train_models([("PCME", 1, seed)], data, tuned, enc, run)  # train.py: the summary stands in
    _, fit = train_model("PCME", 1, data, tuned, enc, run, 0, weights=True)  # visualise.py draws seed 0
    assert fit.stopped == "planned" and not (cache_dir() / "runs").exists()  # listed, not trained
    plan = build_plan(trace.read_plan(plan_file), "smoke", Path(run.results_dir))
    assert [r.status for r in plan.runs] == ["needs weights", "recorded"]
    summarised = cold["trained"].results["PCME", 0].train_seconds
    assert plan.runs[0].source == "summary" and plan.runs[0].core_seconds == pytest.approx(summarised)
    totals = plan.totals()
    assert (totals["recorded"], totals["needs weights"], totals["to train"]) == (1, 1, 1)
    assert [r.trains for r in plan.runs] == [True, False]
