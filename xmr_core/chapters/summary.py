"""Seed summaries, the paper beside ours and the Bayes ceiling in the tables every chapter's notebooks write.

A chapter's per-run table (`per_run`) has one row per trained model and seed: a `model` column, a `seed`
column and one column per metric. From it:

    seed_summary(per_run, cols, order)            -> mean, std and number of seeds per model, in `order`
    mean_std(frame, by, cols)                     -> "<col> mean" and "<col> std" per group, in order of appearance
    with_paper(summary, chapter, table, mapping, label) -> the paper's value beside each of ours
    seed_means(per_run, model, cols)              -> (S,) per-seed mean of `cols` for one model

and, for the captions, `dataset_note(dataset, paper_data)`: the aside saying that scenes is not the paper's data.

The Bayes ceiling in a chapter's tables (`ceiling.split_ceiling`: {protocol: ceiling}, None on real data):

    with_ceiling_share(per_run, ceiling, rsum_columns) -> per_run plus "% of ceiling <protocol>" per run
    ceiling_share(per_run, rsum_column, ceiling_rsum, models) -> per model, the mean over seeds of that share
    with_ceiling(table, per_run, ceiling, mapping, label, protocols) -> the ceiling's row on top (`ceiling_row`,
                                                     `ceiling_first`) and "<protocol> rSum % of ceiling" per model
    ceiling_frame(per_run, rsum_column, ceiling_rsum) -> `ceiling.csv`: each run's rSum, the ceiling's, the share
    write_ceiling_table(per_run, ceiling, key, run, ...) -> `ceiling_frame` written (nothing without a ceiling)
    ceiling_note(ceiling)                            -> the captions' sentence on the ceiling row
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from xmr_core.book.results import write_figure, write_table
from xmr_core.ceiling import SplitCeiling, percent_of_ceiling
from xmr_core.config import RunConfig
from xmr_core.reported import paper_values

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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


def mean_std(frame: pd.DataFrame, by: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """Mean and std (ddof 1) over the rows of each group of `by` (in order of appearance), columns "<col> mean",
    "<col> std"; indexed by the groups."""
    out = frame.groupby(list(by), sort=False)[list(cols)].agg(["mean", "std"])
    out.columns = [f"{a} {b}" for a, b in out.columns]
    return out


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


def dataset_note(dataset: str, paper_data: str = "", compare: str = "compare orderings, not values",
                 lead: str = "the synthetic scenes benchmark") -> str:
    """What a caption says after the data set's name when it is the synthetic scenes benchmark, not the paper's
    data set `paper_data`: " (<lead>: NOT <paper_data>; <compare>)", or " (<lead>: <compare>)" without
    `paper_data`; "" for any other (real) data set."""
    if dataset != "scenes":
        return ""
    return f" ({lead}: " + (f"NOT {paper_data}; " if paper_data else "") + f"{compare})"


def with_ceiling_share(per_run: pd.DataFrame, ceiling: SplitCeiling | None,
                       rsum_columns: Mapping[str, str]) -> pd.DataFrame:
    """`per_run` plus "% of ceiling <protocol>" for each protocol -> rSum column of `rsum_columns`: each run's rSum
    as a share of `ceiling[protocol]`'s (`percent_of_ceiling`); `per_run` itself without a ceiling."""
    if ceiling is None:
        return per_run
    return per_run.assign(**{f"% of ceiling {proto}": [percent_of_ceiling(v, ceiling[proto]["rsum"])
                                                       for v in per_run[col]] for proto, col in rsum_columns.items()})


def ceiling_share(per_run: pd.DataFrame, rsum_column: str, ceiling_rsum: float, models: Iterable[str]) -> list[float]:
    """Per model of `models`: the mean over its runs of `rsum_column` as % of `ceiling_rsum`; 100 for the "Bayes
    ceiling" row itself, NaN for a model without runs (a paper-only row)."""
    runs = per_run.assign(share=percent_of_ceiling(per_run[rsum_column], ceiling_rsum))
    share = runs.groupby("model")["share"].mean()
    return [100.0 if m == "Bayes ceiling" else share.get(m, float("nan")) for m in models]


def ceiling_row(ceiling: SplitCeiling, columns: Iterable[str], label: str) -> dict[str, object]:
    """The "Bayes ceiling" row of an instance table: each column "<protocol> <direction> R@K" or "<protocol> rSum"
    (as "<column> (<label>)") from `ceiling[protocol]` (keys "i2t/R@1", ..., "rsum")."""
    row: dict[str, object] = {"model": "Bayes ceiling", "seeds": 0}
    for col in columns:
        proto, rest = col.split(" ", 1)
        row[f"{col} ({label})"] = ceiling[proto]["rsum" if rest == "rSum" else rest.replace(" ", "/")]
    return row


def ceiling_first(table: pd.DataFrame, row: Mapping[str, object]) -> pd.DataFrame:
    """`table` with `row` (its "Bayes ceiling" row) on top, in `table`'s columns."""
    return pd.concat([pd.DataFrame([row]), table], ignore_index=True)[table.columns]


def with_ceiling(table: pd.DataFrame, per_run: pd.DataFrame, ceiling: SplitCeiling, mapping: Mapping[str, str],
                 label: str, protocols: Sequence[str] = ()) -> pd.DataFrame:
    """`table` (`with_paper`'s layout of `mapping`'s columns) with the ceiling's row on top (`ceiling_row`) and, per
    protocol of `protocols`, "<protocol> rSum % of ceiling": each model's mean share of `per_run`'s "<protocol>
    rSum" (`ceiling_share`)."""
    out = ceiling_first(table, ceiling_row(ceiling, mapping, label))
    for proto in protocols:
        share = ceiling_share(per_run, f"{proto} rSum", ceiling[proto]["rsum"], out["model"])
        out[f"{proto} rSum % of ceiling"] = share
    return out


def ceiling_frame(per_run: pd.DataFrame, rsum_column: str, ceiling_rsum: float) -> pd.DataFrame:
    """`ceiling.csv` in every chapter's layout: per run (model, seed), its rSum (`rsum_column`), the ceiling's, its
    share in % and whether it converged."""
    return pd.DataFrame({"model": per_run["model"], "seed": per_run["seed"], "rsum": per_run[rsum_column],
                         "ceiling_rsum": ceiling_rsum,
                         "percent_of_ceiling": percent_of_ceiling(per_run[rsum_column], ceiling_rsum),
                         "converged": per_run["converged"]}).reset_index(drop=True)


def write_ceiling_table(per_run: pd.DataFrame, ceiling: SplitCeiling | None, key: str, run: RunConfig, *,
                        protocol: str, rsum_column: str, caption: str | None = None) -> pd.DataFrame | None:
    """Write `key` (`ceiling_frame` of `rsum_column` against `ceiling[protocol]`'s rSum, the ceiling's values in its
    provenance) and return it; nothing and None without a ceiling. caption: default, the whole test split's."""
    if ceiling is None:
        return None
    table = ceiling_frame(per_run, rsum_column, ceiling[protocol]["rsum"])
    write_table(table, key, run=run, extra={"ceiling": ceiling}, caption=caption or (
        f"Each model's instance rSum on the whole {run.dataset} test split as a share of the Bayes ceiling "
        f"(profile {run.profile})."))
    return table


def ceiling_note(ceiling: SplitCeiling | None, detail: str = " (xmr_core.ceiling)") -> str:
    """The captions' sentence on the "Bayes ceiling" row, `detail` before its full stop; without a ceiling (real data,
    `ceiling.split_ceiling` None) that there is none and why."""
    if ceiling is None:
        return " No ceiling: this data set's relevance is annotated, not exact (only the scenes benchmark has one)."
    return f" 'Bayes ceiling': the best any scorer can reach on this split{detail}."


def paper_table(per_run: pd.DataFrame, order: Sequence[str], table: str, mapping: Mapping[str, str], label: str,
                paper_only: Sequence[str] = (), chapter: str = "dvse") -> pd.DataFrame:
    """One of the paper's tables: our rows (`seed_summary` of `per_run` in `order`) with the paper's value
    beside each (`with_paper`, the paper values of `chapter`), then one row per method of `paper_only` (the
    paper's rows this book does not build) with the paper's values alone, labelled "<method> (paper only)"."""
    out = with_paper(seed_summary(per_run, list(mapping), order), chapter, table, mapping, label)
    if not paper_only:
        return out
    blank = pd.DataFrame([{"model": m, "seeds": 0, **{c: float("nan") for c in mapping}} for m in paper_only])
    extra = with_paper(blank, chapter, table, mapping, label)
    extra["model"] = [f"{m} (paper only)" for m in paper_only]
    return pd.concat([out, extra], ignore_index=True)


def write_optional_table(table: pd.DataFrame | None, key: str, *, run: RunConfig, caption: str = "",
                         float_digits: int = 1, extra: dict[str, object] | None = None) -> None:
    """`results.write_table`, skipped when there is no table (a protocol, a view or a ceiling this data set lacks)."""
    if table is not None:
        write_table(table, key, run=run, caption=caption, float_digits=float_digits, extra=extra)


def write_optional_figure(fig: Figure | None, key: str, *, run: RunConfig, caption: str = "") -> None:
    """`results.write_figure`, skipped when there is no figure (what it draws is absent from this data set)."""
    if fig is not None:
        write_figure(fig, key, run=run, caption=caption)
