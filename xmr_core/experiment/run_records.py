"""A chapter's final runs scored once and kept as run records (`docs/records.md`): each trained model's record on a
test split is read back when its file is there (the run's key, every scoring asked for), else the model is scored
once (`run_evaluation.evaluate_run`) and its record written (`runs.record.write_run_record`) into the records
folder of the run's results (`book.results.records_home`: the repository's `runs/records/<profile>/` for the
committed book, the smoke build's for smoke), then read back, so that a table or claim reads what an auditor reads.

    records_folder(run)                                               -> where the run's records live
    fits_folder(run)                                                  -> where its runs' fit summaries live
    recorded(model, result, seed, split, vocab, scorings, run, ...)  -> records.RunRecord
    recorded_ensemble(model, members, method, split, vocab, scorings, run, ...)  -> records.RunRecord

Only the final runs of a chapter (every compared model and seed) are recorded; a tuning search's runs are
described by its tuning table. An ensemble of finished runs (HREM's "Full*": no training of its own) is recorded as a
run of its own, keyed by its members' keys (`recorded_ensemble`). A run that stood in by its fit summary
(`runs.fits.WeightlessFit`: no weights, a fresh clone's run cache lacks it) is never scored: its record is read,
and a missing one (or one lacking a scoring asked for) is an error naming the file and how to train the run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xmr_core.book.results import records_home, results_root
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split, split_fingerprint
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.records import RecordError, RunRecord, Scored, read_record, write_record
from xmr_core.run_evaluation import AP_VIEWS, FOLD_VIEWS, RANK_TOP, Scoring, evaluate_run
from xmr_core.runs.fits import FITS_DIR, WeightlessFit
from xmr_core.runs.record import MAIN_SPLIT, record_name, records_root, saved_result, write_run_record
from xmr_core.runs.train import FitResult


class NoRecord(FileNotFoundError):
    """A run with no weights (read from its fit summary) whose record is missing or lacks a scoring (one line)."""


def records_folder(run: RunConfig) -> Path:
    """`runs/records/<profile>/` under the records home of the run's results folder (`records_home`)."""
    return records_root(run.profile, records_home(results_root(run)))


def fits_folder(run: RunConfig) -> Path:
    """`runs/records/<profile>/fits/`: the fit summaries (`runs.fits`) of the runs of the run's results folder."""
    return records_folder(run) / FITS_DIR


def _held_views(scored: Scored, protocol: str) -> set[str]:
    """The views (plausible: one, whatever its ζ) a held scoring has blocks of under `protocol`."""
    return {b[1].partition("/")[0] for b in scored.blocks if b[0] == protocol}


def _kept(held: Scored, ap_views: Sequence[str] | None, precision_ks: Sequence[int]) -> bool:
    """Whether every block of a held scoring keeps AP@R where `ap_views` asks it (None: every view) and the hits at
    each K of `precision_ks`."""
    return all((q.ap_at_r is not None or (ap_views is not None and b[1].partition("/")[0] not in ap_views))
               and set(precision_ks) <= set(q.precision_hits) for b, q in held.blocks.items())


def _lacking(record: RunRecord, scorings: Mapping[str, Scoring], split: Split,
             fold_views: Sequence[str] | None, ap_views: Sequence[str] | None = AP_VIEWS,
             precision_ks: Sequence[int] = ()) -> dict[str, Scoring]:
    """The scorings of `scorings` that `record` does not hold: absent, with other options or re-ranker, or without
    a view (or a COCO 1K view of `fold_views`, AP@R of `ap_views`, hits at a K of `precision_ks`) asked for. A held
    scoring re-scored keeps its own views and folds: the returned scoring asks for the union of both."""
    out = {}
    for name, s in scorings.items():
        held = record.evaluation.scorings.get(name)
        views = set(split.views() if s.views is None else s.views)
        folds = views if fold_views is None else views & set(fold_views)
        if "coco1k" not in record.evaluation.split.folds:
            folds = set()
        if held is None or held.options != dict(s.options) or held.rerank != s.rerank_name:
            out[name] = s
        elif not views <= _held_views(held, "full") or not folds <= _held_views(held, "coco1k") or \
                not _kept(held, ap_views, precision_ks):
            out[name] = dataclasses.replace(s, views=None if s.views is None else
                                            tuple(sorted(views | _held_views(held, "full"))))
    return out


def recorded(model: RetrievalModel, result: FitResult, seed: int, split: Split, vocab: Vocabulary,
             scorings: Mapping[str, Scoring], run: RunConfig, *, fold_views: Sequence[str] | None = FOLD_VIEWS,
             ap_views: Sequence[str] | None = AP_VIEWS, precision_ks: Sequence[int] = (),
             tuning: Mapping[str, Any] | None = None) -> RunRecord:
    """The record of the finished run `result` (its `model`, best weights; trained with `seed`) on `split`: read
    back from `records_folder(run)` when it is there with the run's key and every scoring of `scorings`; otherwise
    scored once (`evaluate_run` with `scorings` and `fold_views`, on `run.torch_device`), written with the `tuning`
    facts, and read back. A record there of the run that lacks some of `scorings` (another notebook recorded the
    same run with its own scorings, e.g. the leaderboard's Fast Re-ranking beside a chapter's) keeps what it holds:
    only the scorings it lacks are scored (`_lacking`; a held scoring short of a view or fold asked for is scored
    again with both's), added to it, and its tuning facts updated with `tuning`. `ap_views` and `precision_ks`
    (`evaluate_run`'s: AP@R in those views, hits at those K) are asked of every scoring of `scorings`; a held
    scoring scored again keeps the AP@R views and K it kept. A run with no finished result to
    record (listed, not trained, by the run plan's trace; diverged in its first epoch) is scored and kept in memory
    only, named after its run directory, not converged.
    A run with no weights (`runs.fits.WeightlessFit`) is read only: `NoRecord` when its record is missing or lacks
    a scoring of `scorings`."""
    if isinstance(result, WeightlessFit):
        return _record_of_weightless(result, split, scorings, run, fold_views, ap_views, precision_ks)
    try:
        key = saved_result(result)["key"]
    except FileNotFoundError:
        evaluation = evaluate_run(model, split, vocab, scorings=scorings, fold_views=fold_views, ap_views=ap_views,
                                  precision_ks=precision_ks, device=run.torch_device)
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
    if held is not None and (held.key, held.evaluation.split.fingerprint, held.evaluation.rank_top) != (
            key, split_fingerprint(split), RANK_TOP):  # its ranks capped elsewhere: every scoring scored again
        held = None
    lacking = dict(scorings) if held is None else _lacking(held, scorings, split, fold_views, ap_views, precision_ks)
    if held is not None and not lacking:
        return held
    if held is not None:  # the run's record keeps its other scorings (another notebook's) and their folds
        again = [held.evaluation.scorings[name] for name in lacking if name in held.evaluation.scorings]
        kept = {v for s in again for v in _held_views(s, "coco1k")}
        fold_views = None if fold_views is None else tuple(sorted(set(fold_views) | kept))
        aps = {b[1].partition("/")[0] for s in again for b, q in s.blocks.items() if q.ap_at_r is not None}
        ap_views = None if ap_views is None else tuple(sorted(set(ap_views) | aps))
        precision_ks = tuple(sorted(set(precision_ks) | {k for s in again for q in s.blocks.values()
                                                        for k in q.precision_hits}))
    evaluation = evaluate_run(model, split, vocab, scorings=lacking, fold_views=fold_views, ap_views=ap_views,
                              precision_ks=precision_ks, device=run.torch_device)
    if held is not None:
        old = held.evaluation
        queries = dataclasses.replace(evaluation.split, folds={**old.split.folds, **evaluation.split.folds},
                                      n_positives={**old.split.n_positives, **evaluation.split.n_positives})
        evaluation = dataclasses.replace(old, split=queries, scorings={**old.scorings, **evaluation.scorings})
        tuning = {**held.tuning, **(tuning or {})}
    return read_record(write_run_record(result, evaluation, run.profile, tuning, records_home(results_root(run))))


def recorded_ensemble(model: RetrievalModel, members: Sequence[RunRecord], method: str, split: Split,
                      vocab: Vocabulary, scorings: Mapping[str, Scoring], run: RunConfig, *,
                      fold_views: Sequence[str] | None = FOLD_VIEWS) -> RunRecord:
    """The record on `split` of an ensemble (`model`, e.g. `experiment.ensemble.ScoreMean`) of finished runs whose
    records on `split` are `members` (one seed): no training of its own, so its key hashes `method` and the members'
    keys, its name is `<method>-<key[:16]>` (suffixed as a run's on a split other than the main one), its seed is the
    members', and its fit is theirs: converged when every member is, diverged when one did, the members' names. Read
    back from `records_folder(run)` when there with every scoring of `scorings`; otherwise scored once
    (`evaluate_run`), written and read back. A member kept in memory only (no key) keeps the ensemble in memory."""
    seeds = {r.seed for r in members}
    if len(members) < 2 or len(seeds) != 1:
        raise ValueError(f"recorded_ensemble: needs two or more members of one seed, got {[r.name for r in members]}")
    if {r.evaluation.split.fingerprint for r in members} != {split_fingerprint(split)}:
        raise ValueError(f"recorded_ensemble: members {[r.name for r in members]} are not records on {split.name!r}")
    keys = [r.key for r in members]
    key = hashlib.sha256(json.dumps({"method": method, "members": keys}).encode()).hexdigest() if all(keys) else ""
    name = f"{method}-{key[:16]}" + ("" if split.name == MAIN_SPLIT else f"@{split.name}")
    path = records_folder(run) / f"{name}.npz"
    if key and path.is_file():
        try:
            record = read_record(path)
            if record.key == key and not _lacking(record, scorings, split, fold_views):
                return record
        except RecordError as err:
            print(f"scoring the ensemble again: {err}")
    evaluation = evaluate_run(model, split, vocab, scorings=scorings, fold_views=fold_views,
                              device=run.torch_device)
    diverged = any(r.fit.get("stopped") == "diverged" for r in members)
    fit = {"converged": bool(key) and all(r.converged for r in members), "stopped": "diverged" if diverged else
           "members", "stop_message": "", "history": [], "members": [r.name for r in members]}
    timings = {"embed_seconds": evaluation.embed_seconds,
               "scoring_seconds": {n: s.seconds for n, s in evaluation.scorings.items()}}
    record = RunRecord(key, name, method, {"members": {r.name: r.method for r in members}},
                       {"seed": next(iter(seeds))}, fit, {}, timings, evaluation)
    return read_record(write_record(path, record)) if key else record


def _record_of_weightless(result: WeightlessFit, split: Split, scorings: Mapping[str, Scoring], run: RunConfig,
                          fold_views: Sequence[str] | None, ap_views: Sequence[str] | None = AP_VIEWS,
                          precision_ks: Sequence[int] = ()) -> RunRecord:
    """The record of a run read from its fit summary: it cannot be scored (no weights), so it must be there, of the
    run's key and split, lacking none of `scorings` (`_lacking`)."""
    name = result.run_dir.name + ("" if split.name == MAIN_SPLIT else f"@{split.name}")
    path = records_folder(run) / f"{name}.npz"
    retrain = (f"retrain with `xmr runs train <notebook> --profile {run.profile}` (its weights into the run cache), "
               "then run the notebook again")
    if not path.is_file():
        raise NoRecord(f"run {result.run_dir.name}: no weights and no record at {path}; {retrain}")
    record = read_record(path)
    same = (record.key, record.evaluation.split.fingerprint, record.evaluation.rank_top) == (
        result.key, split_fingerprint(split), RANK_TOP)
    lacking = dict(scorings) if not same else _lacking(record, scorings, split, fold_views, ap_views, precision_ks)
    if lacking:
        mismatch = f"is not of its key {result.key[:16]} on split {split.name} with ranks up to {RANK_TOP}"
        raise NoRecord(f"run {result.run_dir.name}: no weights, and its record at {path} "
                       + ("lacks the scorings " + ", ".join(sorted(lacking)) if same else mismatch) + f"; {retrain}")
    return record
