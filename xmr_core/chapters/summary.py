"""Seed summaries and claim comparisons shared by every chapter's notebooks.

A chapter's per-run table (`per_run`) has one row per trained model and seed: a `model` column, a `seed`
column and one column per metric. From it:

    seed_summary(per_run, cols, order)            -> mean, std and number of seeds per model, in `order`
    with_paper(summary, chapter, table, mapping, label) -> the paper's value beside each of ours
    seed_means(per_run, model, cols)              -> (S,) per-seed mean of `cols` for one model
    model_means(per_run, models, cols)            -> {model: mean over seeds of `seed_means`}
    compare_models(per_run, a, b, cols)           -> Comparison(diff, spread, verdict) of "a > b"
    best_other_margin(per_run, model, means, cols) -> `compare_models` of `model` against the best other

and, for the captions, `dataset_note(dataset, paper_data)`: the aside saying that scenes is not the paper's data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import pandas as pd

from xmr_core.results import Verdict, difference_verdict, paper_values, verdict


def seed_summary(per_run: pd.DataFrame, cols: Sequence[str], order: Sequence[str]) -> pd.DataFrame:
    """Mean and std (ddof 1) over seeds of `cols` per model, rows in `order` (a model without runs: NaN).

    Columns: `model`, each of `cols` (the mean), `<col> std` for each, and `seeds` (the number of runs).
    """
    cols = list(cols)
    groups = per_run.groupby("model")[cols]
    mean, std, n = groups.mean(), groups.std(ddof=1), groups.size()
    out = mean.reindex(list(order))
    for c in cols:
        out[c + " std"] = std[c].reindex(list(order))
    out["seeds"] = n.reindex(list(order))
    return out.reset_index()


def with_paper(summary: pd.DataFrame, chapter: str, table: str, mapping: Mapping[str, str],
               dataset_label: str) -> pd.DataFrame:
    """The paper's value beside each of our columns, one row per row of `summary` (`seed_summary`).

    mapping: our column -> the paper's key, `"<protocol>|<key>"` or `"<key>"` (protocol "test"), looked up
    in `paper_values(chapter)` at the given `table` and the row's `model` as the method (NaN when the paper
    has no such value). Columns per mapped column: `<col> (paper)`, `<col> (<dataset_label>)` and, when the
    row has more than one seed, `<col> std`.
    """
    paper = paper_values(chapter)
    paper = paper[paper["table"] == table]
    rows = []
    for _, r in summary.iterrows():
        out = {"model": r["model"], "seeds": int(r["seeds"])}
        for col, key in mapping.items():
            proto, metric_key = key.split("|") if "|" in key else ("test", key)
            hit = paper[(paper["method"] == r["model"]) & (paper["key"] == metric_key) & (paper["protocol"] == proto)]
            out[f"{col} (paper)"] = float(hit["value"].iloc[0]) if len(hit) else float("nan")
            out[f"{col} ({dataset_label})"] = r[col]
            if r["seeds"] > 1:
                out[f"{col} std"] = r.get(col + " std")
        rows.append(out)
    return pd.DataFrame(rows)


def seed_means(per_run: pd.DataFrame, model: str, cols: Sequence[str]) -> pd.Series:
    """(S,) the mean of `cols` (e.g. the i2t and t2i values of one metric) in each run of `model`."""
    return per_run[per_run["model"] == model][list(cols)].mean(axis=1)


def model_means(per_run: pd.DataFrame, models: Sequence[str], cols: Sequence[str]) -> dict[str, float]:
    """{model: the mean over seeds of `seed_means`}, in the order of `models`."""
    return {m: float(seed_means(per_run, m, cols).mean()) for m in models}


class Comparison(NamedTuple):
    """The claim "a is above b": diff = mean(a) - mean(b) over seeds, spread = the larger seed std of the
    two (0 for a single run), and the verdict (`difference_verdict`; "not tested" when either model has
    a single run)."""

    diff: float
    spread: float
    verdict: Verdict


def compare_models(per_run: pd.DataFrame, a: str, b: str, cols: Sequence[str]) -> Comparison:
    """Compare the per-seed means (`seed_means`) of models `a` and `b` on `cols`: is `a` above `b`?"""
    x, y = seed_means(per_run, a, cols), seed_means(per_run, b, cols)
    diff = float(x.mean() - y.mean())
    spread = float(max(x.std(ddof=1) if len(x) > 1 else 0.0, y.std(ddof=1) if len(y) > 1 else 0.0))
    return Comparison(diff, spread, difference_verdict(diff, spread) if min(len(x), len(y)) > 1 else verdict(None))


def best_other_margin(per_run: pd.DataFrame, model: str, means: Mapping[str, float],
                      cols: Sequence[str]) -> Comparison:
    """`compare_models(model, best)` where `best` is the model other than `model` with the highest value
    in `means` (`model_means`): `diff` > 0 when `model` is the best of all."""
    best = max((m for m in means if m != model), key=means.__getitem__)
    return compare_models(per_run, model, best, cols)


def dataset_note(dataset: str, paper_data: str = "", compare: str = "compare orderings, not values",
                 lead: str = "the synthetic scenes benchmark") -> str:
    """What a caption says after the data set's name when it is the synthetic scenes benchmark, not the paper's
    data set `paper_data`: " (<lead>: NOT <paper_data>; <compare>)", or " (<lead>: <compare>)" without
    `paper_data`; "" for any other (real) data set."""
    if dataset != "scenes":
        return ""
    return f" ({lead}: " + (f"NOT {paper_data}; " if paper_data else "") + f"{compare})"
