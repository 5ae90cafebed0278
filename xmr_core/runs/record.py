"""A finished run's record in the repository (`docs/records.md`): `runs/records/<profile>/<method>-<key[:16]>.npz`,
named as its run directory, with its test split's queries in `runs/records/<profile>/splits/`. A run scored on a
second test split (PCME's and DVSE's zero-shot split of unseen classes, `test-unseen`) has a record per split: the
one on a split other than `MAIN_SPLIT` is named `<method>-<key[:16]>@<split name>`.

    records_root(profile)                           -> <project>/runs/records/<profile>
    saved_result(result)                            -> the run's result.json
    record_name(result, split_name)                 -> the record's name: <method>-<key[:16]>[@<split name>]
    run_record(result, evaluation, tuning)          -> records.RunRecord of a finished fit and its evaluation
    write_run_record(result, evaluation, profile)   -> the record's path (written atomically)
    read_run_record(profile, name)                  -> records.RunRecord
    over_budget(folder)                             -> '' when a records folder is within `BUDGET_BYTES`, else by how much

The record reads the run's `result.json` (its key, method and configs, and the commit and sources it was trained
at) beside what `fit` returned. Nothing here trains or changes what a run computes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xmr_core.config import check_profile, project_root
from xmr_core.records import Evaluation, RunRecord, read_record, write_record
from xmr_core.runs.train import FitResult

RECORDS_DIR = "runs/records"
MAIN_SPLIT = "test"  # a record of a run on this split is named as the run; on another split, suffixed "@<split>"
BUDGET_BYTES = 64_000_000  # the cpu book's committed runs/records/cpu/ (records, split files, fit summaries): 64 MB


def records_root(profile: str, root: Path | None = None) -> Path:
    """The profile's records folder under the project (`root`, default `config.project_root()`)."""
    return (root or project_root()) / RECORDS_DIR / check_profile(profile)


def saved_result(result: FitResult) -> dict[str, Any]:
    """The finished run's `result.json` (its key, method and configs, the commit it was trained at)."""
    path = result.run_dir / "result.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no finished run to record (a run that diverged in its first epoch has none)")
    return json.loads(path.read_text())


def record_name(result: FitResult, split_name: str = MAIN_SPLIT) -> str:
    """The name of the run's record on the test split `split_name`: its run directory's, `<method>-<key[:16]>`,
    suffixed `@<split_name>` on a split other than `MAIN_SPLIT`."""
    saved = saved_result(result)
    name = f"{saved['run']['method']}-{saved['key'][:16]}"
    return name if split_name == MAIN_SPLIT else f"{name}@{split_name}"


def run_record(result: FitResult, evaluation: Evaluation, tuning: Mapping[str, Any] | None = None) -> RunRecord:
    """The record of a finished run (`result`, its `result.json` in `result.run_dir`) scored once on its test
    split (`run_evaluation.evaluate_run`), with the tuning facts the chapter passes (e.g. the tuned setting and
    the grid it bracketed)."""
    saved = saved_result(result)
    run, key = saved["run"], saved["key"]
    fit = {"best_epoch": result.best_epoch, "best_score": result.best_score, "stopped": result.stopped,
           "stop_message": result.stop_message, "converged": result.converged, "best_state": result.best_state,
           "trained_at": saved.get("trained_at", {}), "history": result.history}
    timings = {"train_seconds": result.train_seconds, "pairs_per_second": result.pairs_per_second,
               "embed_seconds": evaluation.embed_seconds,
               "scoring_seconds": {name: s.seconds for name, s in evaluation.scorings.items()}}
    return RunRecord(key, record_name(result, evaluation.split.name), run["method"], run["config"], run["train"], fit,
                     dict(tuning or {}), timings, evaluation)


def write_run_record(result: FitResult, evaluation: Evaluation, profile: str, tuning: Mapping[str, Any] | None = None,
                     root: Path | None = None) -> Path:
    """Write the run's record (`run_record`) into `records_root(profile, root)`; its path."""
    record = run_record(result, evaluation, tuning)
    return write_record(records_root(profile, root) / f"{record.name}.npz", record)


def read_run_record(profile: str, name: str, root: Path | None = None) -> RunRecord:
    """The record `name` (`RunRecord.name`) of the profile's records folder, validated (`records.read_record`)."""
    return read_record(records_root(profile, root) / f"{name}.npz")


def over_budget(folder: Path, budget: int = BUDGET_BYTES) -> str:
    """'' when the files under `folder` (a profile's records folder; absent: none) take at most `budget` bytes, else
    one line saying how many and the largest."""
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size) \
        if folder.is_dir() else []
    total = sum(p.stat().st_size for p in files)
    if total <= budget:
        return ""
    largest = ", ".join(f"{p.relative_to(folder)} {p.stat().st_size / 1e3:.0f} KB" for p in files[:3])
    return (f"{folder}: {total / 1e6:.1f} MB in {len(files)} files, over the budget of {budget / 1e6:.0f} MB "
            f"(docs/records.md, \"Size\"); the largest: {largest}")
