"""A chapter's final runs scored once and kept as run records (`docs/records.md`): each trained model's record on a
test split is read back when its file is there (the run's key, every scoring asked for), else the model is scored
once (`run_evaluation.evaluate_run`) and its record written (`runs.record.write_run_record`) into the records
folder of the run's results (`book.results.records_home`: the repository's `runs/records/<profile>/` for the
committed book, the smoke build's for smoke), then read back, so that a table or claim reads what an auditor reads.

    records_folder(run)                                               -> where the run's records live
    recorded(model, result, seed, split, vocab, scorings, run, ...)  -> records.RunRecord

A record already there that lacks some of the scorings asked for gets them added (scored once, the others kept).
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
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.records import Block, Evaluation, RecordError, RunRecord, Scored, read_record
from xmr_core.run_evaluation import AP_VIEWS, FOLD_VIEWS, Scoring, evaluate_run, split_folds
from xmr_core.runs.record import MAIN_SPLIT, record_name, records_root, saved_result, write_run_record
from xmr_core.runs.train import FitResult


def records_folder(run: RunConfig) -> Path:
    """`runs/records/<profile>/` under the records home of the run's results folder (`records_home`)."""
    return records_root(run.profile, records_home(results_root(run)))


def _view(block: Block) -> str:
    return block[1].partition("/")[0]


def _covered(held: Scored | None, scoring: Scoring, split: Split, fold_views: Sequence[str] | None,
             ap_views: Sequence[str] | None, precision_ks: Sequence[int]) -> bool:
    """Whether the record's scoring `held` has the options and re-ranker of `scoring` and, in each of its views, the
    split's other protocols (`split_folds`) where `fold_views` names the view, AP@R where `ap_views` does (None:
    every view) and the hits at each K of `precision_ks`."""
    if held is None or held.options != dict(scoring.options) or held.rerank != scoring.rerank_name:
        return False
    views = split.views() if scoring.views is None else scoring.views
    kept = {(b[0], _view(b)) for b in held.blocks}
    if not all((protocol, v) in kept for protocol in split_folds(split) for v in views
               if protocol == "full" or fold_views is None or v in fold_views):
        return False
    return all((q.ap_at_r is not None or (ap_views is not None and _view(b) not in ap_views))
               and set(precision_ks) <= set(q.precision_hits) for b, q in held.blocks.items())


def _kept(scorings: Sequence[Scored]) -> tuple[set[str], set[str], set[int]]:
    """The views in which `scorings` keep a protocol other than "full", those in which they keep AP@R, and the Ks of
    their hits at K."""
    blocks = [(b, q) for s in scorings for b, q in s.blocks.items()]
    return ({_view(b) for b, _ in blocks if b[0] != "full"}, {_view(b) for b, q in blocks if q.ap_at_r is not None},
            {k for _, q in blocks for k in q.precision_hits})


def _merged(old: Evaluation, new: Evaluation) -> Evaluation:
    """`old` with the scorings of `new` added (replacing those of the same name) and their blocks' positives."""
    split = dataclasses.replace(old.split, n_positives={**new.split.n_positives, **old.split.n_positives})
    return Evaluation(split, {**old.scorings, **new.scorings}, new.embed_seconds)


def recorded(model: RetrievalModel, result: FitResult, seed: int, split: Split, vocab: Vocabulary,
             scorings: Mapping[str, Scoring], run: RunConfig, *, fold_views: Sequence[str] | None = FOLD_VIEWS,
             ap_views: Sequence[str] | None = AP_VIEWS, precision_ks: Sequence[int] = (),
             tuning: Mapping[str, Any] | None = None) -> RunRecord:
    """The record of the finished run `result` (its `model`, best weights; trained with `seed`) on `split`: read
    back from `records_folder(run)` when it is there with the run's key and every scoring of `scorings` with what
    `fold_views`, `ap_views` and `precision_ks` ask (`_covered`); otherwise the scorings it lacks are scored once
    (`evaluate_run` with those options, on `run.torch_device`) and added to the record's others (a run two chapters
    or notebooks record, e.g. PCME's baselines in the DVSE chapter with its FR scoring, keeps one record with the
    scorings of both; a scoring scored again keeps what its record kept too), written with the `tuning` facts,
    and read back. A run with no finished result to record (listed, not trained, by the run plan's trace; diverged
    in its first epoch) is scored and kept in memory only, named after its run directory, not converged."""
    options = {"fold_views": fold_views, "ap_views": ap_views, "precision_ks": precision_ks}
    try:
        key = saved_result(result)["key"]
    except FileNotFoundError:
        evaluation = evaluate_run(model, split, vocab, scorings=scorings, device=run.torch_device, **options)
        name = result.run_dir.name + ("" if split.name == MAIN_SPLIT else f"@{split.name}")
        fit = {"converged": False, "stopped": result.stopped, "stop_message": result.stop_message, "history": []}
        return RunRecord("", name, "", {}, {"seed": seed}, fit, dict(tuning or {}), {}, evaluation)
    path = records_folder(run) / f"{record_name(result, split.name)}.npz"
    held = {}
    if path.is_file():
        try:
            record = read_record(path)
            held = record.evaluation.scorings if record.key == key else {}
        except RecordError as err:
            print(f"scoring the run again: {err}")
    missing = {name: s for name, s in scorings.items()
               if not _covered(held.get(name), s, split, fold_views, ap_views, precision_ks)}
    if not missing:
        return record
    again = [held[name] for name in missing if name in held]
    if again:  # a scoring scored again keeps the folds, AP@R and hits at K its record kept
        folds, aps, ks = _kept(again)
        options = {"fold_views": None if fold_views is None else (*fold_views, *sorted(folds - set(fold_views))),
                   "ap_views": None if ap_views is None else (*ap_views, *sorted(aps - set(ap_views))),
                   "precision_ks": tuple(sorted(ks | set(precision_ks)))}
    evaluation = evaluate_run(model, split, vocab, scorings=missing, device=run.torch_device, **options)
    if held:
        evaluation = _merged(record.evaluation, evaluation)
    return read_record(write_run_record(result, evaluation, run.profile, tuning, records_home(results_root(run))))
