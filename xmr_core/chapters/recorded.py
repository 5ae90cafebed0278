"""Each method's tuned setting as its chapter's `train.py` recorded it, read back from the tuning table.

`train.py` of a chapter tunes its compared methods by the one protocol (`xmr_core.runs.tuning`) and writes every run of
the search to `<chapter>/tuning` (`tuning.tuning_frame`: one row per run, `chosen` marking the setting and schedule
every seed is trained with). The chapter's `ablate.py` and `visualise.py`, and the leaderboard, start from those
choices: `recorded_tuning` reads the table (through `book.results.read_table`, so the read is in the reader's
provenance and `xmr book run` re-executes the reader when the table changes) and gives one `TuningResult` per
method, the chosen learning rate, weight and epochs as written (the table's floats round-trip exactly: they are
the lattice values `tuning.Axis` rounds to 12 digits, written in their shortest form) and the method's rows.

Reading the choice, rather than replaying the search on the run cache, keeps a reader on what `train.py`
published: a cache that lacks the tuning runs (another machine, an archive of the final runs only) trains the
chosen setting's seeds, not the search again, and cannot arrive at another choice than the table shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from xmr_core.book.results import read_table, results_root
from xmr_core.config import RunConfig
from xmr_core.runs.trace import mark_provisional, tracing
from xmr_core.runs.tuning import TuningResult

PLANNED = "planned"  # `FitResult.stopped` of a run listed in trace mode, not trained
COLUMNS = ("method", "lr", "weight", "value", "epochs", "chosen")


def chosen_settings(frame: pd.DataFrame, source: str, methods: Sequence[str] | None = None
                    ) -> dict[str, TuningResult]:
    """One `TuningResult` per method of the tuning table `frame` (every method in the table's order, or `methods`
    in theirs): its single `chosen` row's lr, weight name and value, and epochs; its rows as dicts. Errors name
    `source` (the table's file) and the method or record: a missing column, a method absent, no chosen row or
    more than one, a learning rate that is not a positive finite number or a weight not a finite one >= 0, epochs
    that are not a whole number >= 1."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{source}: not a tuning table, columns {missing} missing (has {list(frame.columns)})")
    in_table = list(dict.fromkeys(frame["method"]))
    names = in_table if methods is None else list(methods)
    absent = [m for m in names if m not in in_table]
    if absent:
        raise ValueError(f"{source}: no tuning rows for {absent} (the table has {in_table})")
    settings = {}
    for name in names:
        rows = frame[frame["method"] == name]
        chosen = rows[rows["chosen"].astype(str) == "True"]
        if len(chosen) != 1:
            raise ValueError(f"{source}: method {name!r} has {len(chosen)} chosen rows (records "
                             f"{[int(i) + 2 for i in chosen.index]}), expected exactly 1")
        row, line = chosen.iloc[0], int(chosen.index[0]) + 2  # the CSV line: a header, then one line a record
        lr, value, epochs = float(row["lr"]), float(row["value"]), float(row["epochs"])
        if not (math.isfinite(lr) and lr > 0 and math.isfinite(value) and value >= 0):
            raise ValueError(f"{source}: line {line} ({name!r}, chosen): lr {lr:g} and {row['weight']} {value:g} "
                             "must be finite, lr > 0, the weight >= 0")
        if not (math.isfinite(epochs) and epochs >= 1 and epochs == int(epochs)):
            raise ValueError(f"{source}: line {line} ({name!r}, chosen): epochs {epochs:g} is not a whole "
                             "number >= 1")
        settings[name] = TuningResult(name, str(row["weight"]), lr, value, int(epochs),
                                      rows.to_dict("records"))
    return settings


def recorded_tuning(key: str, run: RunConfig, methods: Sequence[str] | None = None) -> dict[str, TuningResult]:
    """The tuned settings `train.py` wrote to the table `key` (e.g. "hrem/tuning") under `run`'s results folder,
    per method (`chosen_settings`); the table absent: FileNotFoundError naming it (run `train.py` first). In trace
    mode (`xmr book plan`) a table written from planned, untrained runs makes what this notebook asks for next
    provisional (`plantrace.mark_provisional`): its choice stands in for the one training will make."""
    frame = read_table(key, run=run)
    if tracing() and "stopped" in frame.columns and (frame["stopped"] == PLANNED).any():
        mark_provisional()
    return chosen_settings(frame, str(results_root(run) / f"{key}.csv"), methods)
