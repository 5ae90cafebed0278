"""A chapter's final runs scored once and kept as run records (`docs/records.md`): each trained model's record on a
test split is read back when its file is there (the run's key, every scoring asked for), else the model is scored
once (`run_evaluation.evaluate_run`) and its record written (`runs.record.write_run_record`) into the records
folder of the run's results (`book.results.records_home`: the repository's `runs/records/<profile>/` for the
committed book, the smoke build's for smoke), then read back, so that a table or claim reads what an auditor reads.

    records_folder(run)                                               -> where the run's records live
    recorded(model, result, seed, split, vocab, scorings, run, ...)  -> records.RunRecord

Only the final runs of a chapter (every compared model and seed) are recorded; a tuning search's runs are
described by its tuning table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xmr_core.book.results import records_home, results_root
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.records import RecordError, RunRecord, read_record
from xmr_core.run_evaluation import FOLD_VIEWS, Scoring, evaluate_run
from xmr_core.runs.record import MAIN_SPLIT, record_name, records_root, saved_result, write_run_record
from xmr_core.runs.train import FitResult


def records_folder(run: RunConfig) -> Path:
    """`runs/records/<profile>/` under the records home of the run's results folder (`records_home`)."""
    return records_root(run.profile, records_home(results_root(run)))


def _covers(record: RunRecord, key: str, scorings: Mapping[str, Scoring]) -> bool:
    """Whether `record` is of run `key` and holds every scoring of `scorings` with its options and re-ranker."""
    held = record.evaluation.scorings
    return record.key == key and all(name in held and held[name].options == dict(s.options)
                                     and held[name].rerank == s.rerank_name for name, s in scorings.items())


def recorded(model: RetrievalModel, result: FitResult, seed: int, split: Split, vocab: Vocabulary,
             scorings: Mapping[str, Scoring], run: RunConfig, *, fold_views: Sequence[str] | None = FOLD_VIEWS,
             tuning: Mapping[str, Any] | None = None) -> RunRecord:
    """The record of the finished run `result` (its `model`, best weights; trained with `seed`) on `split`: read
    back from `records_folder(run)` when it is there with the run's key and every scoring of `scorings`; otherwise
    scored once (`evaluate_run` with `scorings` and `fold_views`, on `run.torch_device`), written with the `tuning`
    facts, and read back. A run with no finished result to record (listed, not trained, by the run plan's trace;
    diverged in its first epoch) is scored and kept in memory only, named after its run directory, not converged."""
    try:
        key = saved_result(result)["key"]
    except FileNotFoundError:
        evaluation = evaluate_run(model, split, vocab, scorings=scorings, fold_views=fold_views,
                                  device=run.torch_device)
        name = result.run_dir.name + ("" if split.name == MAIN_SPLIT else f"@{split.name}")
        fit = {"converged": False, "stopped": result.stopped, "stop_message": result.stop_message, "history": []}
        return RunRecord("", name, "", {}, {"seed": seed}, fit, dict(tuning or {}), {}, evaluation)
    path = records_folder(run) / f"{record_name(result, split.name)}.npz"
    if path.is_file():
        try:
            record = read_record(path)
            if _covers(record, key, scorings):
                return record
        except RecordError as err:
            print(f"scoring the run again: {err}")
    evaluation = evaluate_run(model, split, vocab, scorings=scorings, fold_views=fold_views,
                              device=run.torch_device)
    return read_record(write_run_record(result, evaluation, run.profile, tuning, records_home(results_root(run))))
