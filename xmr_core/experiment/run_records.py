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

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xmr_core.book.results import records_home, results_root
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split, split_fingerprint
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.records import Evaluation, RecordError, RunRecord, Scored, read_record
from xmr_core.run_evaluation import FOLD_VIEWS, Scoring, evaluate_run
from xmr_core.runs.record import MAIN_SPLIT, record_name, records_root, saved_result, write_run_record
from xmr_core.runs.train import FitResult


def records_folder(run: RunConfig) -> Path:
    """`runs/records/<profile>/` under the records home of the run's results folder (`records_home`)."""
    return records_root(run.profile, records_home(results_root(run)))


def _held_views(scored: Scored, protocol: str) -> set[str]:
    """The views (plausible: one, whatever its ζ) a held scoring has blocks of under `protocol`."""
    return {b[1].partition("/")[0] for b in scored.blocks if b[0] == protocol}


def _lacking(record: RunRecord, scorings: Mapping[str, Scoring], split: Split,
             fold_views: Sequence[str] | None) -> dict[str, Scoring]:
    """The scorings of `scorings` that `record` does not hold: absent, with other options or re-ranker, or without
    a view (or a COCO 1K view of `fold_views`) asked for. A held scoring re-scored keeps its own views and folds: the
    returned scoring asks for the union of both."""
    out = {}
    for name, s in scorings.items():
        held = record.evaluation.scorings.get(name)
        views = set(split.views() if s.views is None else s.views)
        folds = views if fold_views is None else views & set(fold_views)
        if "coco1k" not in record.evaluation.split.folds:
            folds = set()
        if held is None or held.options != dict(s.options) or held.rerank != s.rerank_name:
            out[name] = s
        elif not views <= _held_views(held, "full") or not folds <= _held_views(held, "coco1k"):
            out[name] = dataclasses.replace(s, views=None if s.views is None else
                                            tuple(sorted(views | _held_views(held, "full"))))
    return out


def recorded(model: RetrievalModel, result: FitResult, seed: int, split: Split, vocab: Vocabulary,
             scorings: Mapping[str, Scoring], run: RunConfig, *, fold_views: Sequence[str] | None = FOLD_VIEWS,
             tuning: Mapping[str, Any] | None = None) -> RunRecord:
    """The record of the finished run `result` (its `model`, best weights; trained with `seed`) on `split`: read
    back from `records_folder(run)` when it is there with the run's key and every scoring of `scorings`; otherwise
    scored once (`evaluate_run` with `scorings` and `fold_views`, on `run.torch_device`), written with the `tuning`
    facts, and read back. A record there of the run that lacks some of `scorings` (another notebook recorded the
    same run with its own scorings, e.g. the leaderboard's Fast Re-ranking beside a chapter's) keeps what it holds:
    only the scorings it lacks are scored (`_lacking`; a held scoring short of a view or fold asked for is scored
    again with both's), added to it, and its tuning facts updated with `tuning`. A run with no finished result to
    record (listed, not trained, by the run plan's trace; diverged in its first epoch) is scored and kept in memory
    only, named after its run directory, not converged."""
    try:
        key = saved_result(result)["key"]
    except FileNotFoundError:
        evaluation = evaluate_run(model, split, vocab, scorings=scorings, fold_views=fold_views,
                                  device=run.torch_device)
        name = result.run_dir.name + ("" if split.name == MAIN_SPLIT else f"@{split.name}")
        fit = {"converged": False, "stopped": result.stopped, "stop_message": result.stop_message, "history": []}
        return RunRecord("", name, "", {}, {"seed": seed}, fit, dict(tuning or {}), {}, evaluation)
    path = records_folder(run) / f"{record_name(result, split.name)}.npz"
    held: RunRecord | None = None
    if path.is_file():
        try:
            held = read_record(path)
        except RecordError as err:
            print(f"scoring the run again: {err}")
    if held is not None and (held.key, held.evaluation.split.fingerprint) != (key, split_fingerprint(split)):
        held = None
    lacking = dict(scorings) if held is None else _lacking(held, scorings, split, fold_views)
    if held is not None and not lacking:
        return held
    if held is not None:  # the run's record keeps its other scorings (another notebook's) and their folds
        kept = {v for name in lacking if name in held.evaluation.scorings
                for v in _held_views(held.evaluation.scorings[name], "coco1k")}
        fold_views = None if fold_views is None else tuple(sorted(set(fold_views) | kept))
    evaluation = evaluate_run(model, split, vocab, scorings=lacking, fold_views=fold_views, device=run.torch_device)
    if held is not None:
        old = held.evaluation
        queries = dataclasses.replace(evaluation.split, folds={**old.split.folds, **evaluation.split.folds},
                                      n_positives={**old.split.n_positives, **evaluation.split.n_positives})
        evaluation = Evaluation(queries, {**old.scorings, **evaluation.scorings}, old.embed_seconds)
        tuning = {**held.tuning, **(tuning or {})}
    return read_record(write_run_record(result, evaluation, run.profile, tuning, records_home(results_root(run))))
