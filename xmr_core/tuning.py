"""The tuning budget every compared method gets on the validation split: learning rate × main weight.

`tune` is a coordinate search, the same for every method: first each learning rate of `lrs` at the
method's default weight (its own main loss weight or margin), then each value of `weights` at the best
learning rate (the run already made is reused). With three of each that is five training runs a method,
every one trained through `fit` (so cached like any run, with patience-based stopping) and judged by its
best validation `select` (rSum). The rows record every run, so `results/<chapter>/tuning.csv` shows what
each method was given and what it reached (`tuning_frame`: every method's runs in one table).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.train import FitResult, TrainConfig, fit


@dataclass
class TuningResult:
    """The chosen learning rate and weight of one method, and one row per run (`frame()`)."""

    method: str
    weight_name: str
    lr: float
    weight: float
    rows: list[dict]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def tune(method: str, build: Callable[[float], RetrievalModel], train_config: Callable[[float], TrainConfig],
         train: Split, val: Split, vocab: Vocabulary, *, lrs: Sequence[float], weight_name: str,
         weights: Sequence[float], default_weight: float, seed: int = 0) -> TuningResult:
    """Coordinate search over `lrs` (at `default_weight`) then `weights` (at the best lr).

    build(weight) -> a fresh model whose main loss weight or margin is `weight`; train_config(lr) -> the
    training recipe at that learning rate. Ties keep the earlier (default-first) setting.
    """
    if default_weight not in weights:
        raise ValueError(f"{method}: the default {weight_name} {default_weight} must be one of {list(weights)}")
    rows: list[dict] = []
    results: dict[tuple[float, float], FitResult] = {}

    def run(lr: float, weight: float, stage: str) -> float:
        if (lr, weight) not in results:
            torch.manual_seed(seed)
            cfg = train_config(lr)
            result = fit(build(weight), train, val, cfg, vocab=vocab)
            results[(lr, weight)] = result
            rows.append({"method": method, "stage": stage, "lr": lr, "weight": weight_name, "value": weight,
                         "seed": cfg.seed, f"val {cfg.select}": round(result.best_score, 2),
                         "best epoch": result.best_epoch, "epochs run": len(result.history),
                         "converged": result.converged, "train s": round(result.train_seconds, 1),
                         "cached": result.cached, "run": result.run_dir.name})
        return results[(lr, weight)].best_score

    best_lr = max(lrs, key=lambda lr: (run(lr, default_weight, "lr"), -list(lrs).index(lr)))
    ordered = [default_weight] + [w for w in weights if w != default_weight]
    best_weight = max(ordered, key=lambda w: (run(best_lr, w, "weight"), -ordered.index(w)))
    for row in rows:
        row["chosen"] = row["lr"] == best_lr and row["value"] == best_weight
    return TuningResult(method, weight_name, best_lr, best_weight, rows)


def tuning_frame(tuned: Mapping[str, TuningResult]) -> pd.DataFrame:
    """Every tuning run of every method (`TuningResult.frame`) in one table, methods in `tuned`'s order."""
    return pd.concat([t.frame() for t in tuned.values()], ignore_index=True)


def _edge(value: float, tried: Sequence[float]) -> str:
    """'low' / 'high' when `value` is the smallest / largest of several `tried` values, else ''."""
    values = sorted(set(tried))
    if len(values) < 2:
        return ""
    return "low" if value == values[0] else "high" if value == values[-1] else ""


def grid_edges(frame: pd.DataFrame) -> pd.DataFrame:
    """Per method of a `tuning_frame` (its rows in order): the chosen learning rate and weight, and whether each is
    the smallest ('low') or largest ('high') value the search tried ('' inside the grid, or when one value was
    tried). The weights tried are the lr stage's default plus the weight stage's values. A choice on the edge says
    the optimum may lie beyond the grid: the budget was the same for every method, but did not bracket it."""
    rows = []
    for method, runs in frame.groupby("method", sort=False):
        chosen = runs[runs["chosen"].astype(bool)]
        if len(chosen) != 1:
            raise ValueError(f"grid_edges: method {method!r} has {len(chosen)} chosen runs, expected 1")
        best = chosen.iloc[0]
        lrs = runs.loc[runs["stage"] == "lr", "lr"].tolist()
        weights = runs["value"].tolist()
        rows.append({"method": method, "lr": best["lr"], "lr edge": _edge(best["lr"], lrs), "weight": best["weight"],
                     "value": best["value"], "weight edge": _edge(best["value"], weights)})
    return pd.DataFrame(rows, columns=["method", "lr", "lr edge", "weight", "value", "weight edge"])
