"""Fit summaries: the small facts of a finished run, committed beside its records, so a notebook runs with no run
cache (`docs/records.md`, "Running without weights").

A run's fit summary is `<fits folder>/<method>-<key[:16]>.json.gz` (named as its run directory; the folder is
`runs/records/<profile>/fits/` under the records home of the notebook's results, `experiment.run_records.
fits_folder`): what `train.fit` returns of it (`FitResult`: best epoch, score and validation metrics, why it stopped
and the message, every epoch's history, seconds, pairs a second, the best weights' fingerprint) with its key,
method, seed, torch threads and the commit and training sources it was trained at; of the validation metrics only
`select`'s (rSum) are kept, per epoch and at the best (no table reads the breakdown by view, direction and caption
level, two thirds of a history's bytes). Gzipped JSON, keys sorted, no timestamp: the same facts give the same
bytes, and an unchanged summary is not rewritten.

`runs.plan.fit_many(requests, fits=folder)` writes the summary of every run it returns with a result (trained,
loaded from the cache, or diverged in its first epoch) and, for a run the cache lacks whose summary is there (of
this code: `runs.identity.code_problem`), returns `WeightlessFit`: the summary's facts, no weights, the request's
model left as built and guarded (`guard`: using it raises `NoWeights`), unless the caller draws the model
(`weights=True`, or `XMR_WEIGHTS=1` for every call): then the run trains.

    summary_path(folder, name)                         -> the summary's file
    fit_summary(result, key, method, cfg, trained_at)  -> the summary (a dict) of a finished run
    write_summary(folder, summary)                     -> its path (written only when its bytes change)
    read_summary(folder, name)                         -> the summary, or None when there is none
    usable(summary, key)                               -> '' when it may stand in for the run of `key`, else why not
    core_seconds(summary)                              -> the run's training cost (the plan's)
    weightless(summary, run_dir, folder, model)        -> WeightlessFit, `model` guarded
    has_weights(result)                                -> whether the model of `result` holds its weights
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from xmr_core.io import atomic_write_bytes
from xmr_core.runs.identity import code_problem
from xmr_core.runs.train import FitResult, TrainConfig

FITS_DIR = "fits"  # under `runs/records/<profile>/`
SUFFIX = ".json.gz"
FORMAT = 1
WEIGHTS_ENV = "XMR_WEIGHTS"  # "1": every run trains for its weights, no summary stands in (`xmr runs train`)
_KEPT_FACTS = ("best_epoch", "best_score", "stopped", "stop_message", "train_seconds", "pairs_per_second",
               "best_state")


class NoWeights(RuntimeError):
    """A model of a run read from its fit summary was used: it has no weights (one line)."""


@dataclass
class WeightlessFit(FitResult):
    """A run's fit read from its fit summary: the facts `fit` would return, with no weights (the request's model is
    as built, untrained, and raises `NoWeights` when used: `guard`). `cached` is True: nothing trained here."""

    key: str = ""
    summary: Path = Path()


def has_weights(result: FitResult) -> bool:
    """Whether the model of `result` holds the run's best weights (False for a `WeightlessFit`)."""
    return not isinstance(result, WeightlessFit)


def weights_wanted() -> bool:
    """Whether `XMR_WEIGHTS=1` asks every run for its weights (no fit summary stands in)."""
    return os.environ.get(WEIGHTS_ENV, "") == "1"


def summary_path(folder: Path, name: str) -> Path:
    """`<folder>/<name>.json.gz` (`name`: the run directory's, `<method>-<key[:16]>`)."""
    return folder / f"{name}{SUFFIX}"


def _trimmed(row: Mapping[str, Any], select: str) -> dict[str, Any]:
    """A history row without the validation breakdown: every key but `val/...`, `val/<select>` kept."""
    return {k: v for k, v in row.items() if k == f"val/{select}" or not k.startswith("val/")}


def fit_summary(result: FitResult, key: str, method: str, cfg: TrainConfig, trained_at: Mapping[str, Any]
                ) -> dict[str, Any]:
    """The summary of the finished run `result` (of `method`, run key `key`, trained with `cfg`, at `trained_at`:
    its `result.json`'s commit and training source)."""
    return {"format": FORMAT, "key": key, "name": result.run_dir.name, "method": method, "seed": cfg.seed,
            "threads": cfg.threads, "trained_at": dict(trained_at),
            **{k: getattr(result, k) for k in _KEPT_FACTS},
            "best_metrics": {k: v for k, v in result.best_metrics.items() if k == cfg.select},
            "history": [_trimmed(row, cfg.select) for row in result.history]}


def _bytes(summary: Mapping[str, Any]) -> bytes:
    text = json.dumps(summary, sort_keys=True, separators=(",", ":")) + "\n"
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def write_summary(folder: Path, summary: Mapping[str, Any]) -> Path:
    """Write `summary` to `summary_path(folder, its name)` atomically, only when its bytes differ from the file's."""
    path, data = summary_path(folder, summary["name"]), _bytes(summary)
    if not (path.is_file() and path.read_bytes() == data):
        atomic_write_bytes(path, data)
    return path


def read_summary(folder: Path, name: str) -> dict[str, Any] | None:
    """The summary `name` of `folder`, None when there is none; a file that is not one raises a ValueError naming it."""
    path = summary_path(folder, name)
    if not path.is_file():
        return None
    try:
        summary = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable fit summary ({type(err).__name__}: {err})") from None
    if not isinstance(summary, dict) or summary.get("format") != FORMAT:
        raise ValueError(f"{path}: not a fit summary of format {FORMAT}")
    return summary


def usable(summary: Mapping[str, Any], key: str) -> str:
    """'' when `summary` may stand in for the run of `key`: its key, and trained by this code's training sources
    of its method (`runs.identity.code_problem`); else why not."""
    if summary["key"] != key:
        return f"holds run {summary['key'][:16]}, not {key[:16]}"
    at = summary.get("trained_at") or {}
    return code_problem(summary["method"], at.get("commit"), at.get("source"))


def core_seconds(summary: Mapping[str, Any]) -> float:
    """The summarised run's training cost in core-seconds (train seconds x its torch threads)."""
    return float(summary["train_seconds"]) * int(summary["threads"])


def guard(model: nn.Module, message: str) -> None:
    """Make every forward of `model` and its modules raise `NoWeights(message)`: a weightless run's model, as built,
    would otherwise score as an untrained one."""
    def refuse(*_: object) -> None:
        raise NoWeights(message)

    for module in model.modules():
        module.register_forward_pre_hook(refuse)


def weightless(summary: Mapping[str, Any], run_dir: Path, folder: Path, model: nn.Module) -> WeightlessFit:
    """The fit `summary` (of `folder`) stands for, in `run_dir` (the run cache's directory it would have), `model`
    (the request's, as built) guarded."""
    path = summary_path(folder, summary["name"])
    guard(model, f"run {summary['name']}: no weights (its fit read from {path}); a figure that draws the model asks "
                 f"for it with weights=True (`experiment.training.train_many`), which trains it")
    return WeightlessFit(run_dir, summary["best_epoch"], summary["best_score"],
                         summary["best_metrics"], summary["history"], summary["train_seconds"],
                         summary["pairs_per_second"], cached=True, stopped=summary["stopped"],
                         stop_message=summary["stop_message"], best_state=summary["best_state"], key=summary["key"],
                         summary=path)
