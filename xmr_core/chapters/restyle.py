"""`xmr results restyle`: the figures a notebook draws from tables it writes, redrawn from the committed tables by
today's drawing code, without their models (`python -m xmr_core.chapters.restyle`, which the command runs).

`REDRAWS` names each such figure, the tables it is drawn from and the chapter function that draws it. A redrawn
figure keeps the provenance its notebook wrote (the run, the commit, the sources it was computed from: stale stays
stale until the notebook reruns) and gains `restyled`: when, at which commit, and the digest of each `xmr_core` file
of drawing code that provenance names as they are now, so the book stops calling it drawn by older code
(`book.static.older_code_note`). A figure absent from the results whose tables are there (one a notebook gained after
its last execution) is drawn with its first table's provenance, its own key, kind and caption. Every other figure
needs its notebook's models: the book says under it that the code that draws it changed, until that notebook is
executed again.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from xmr_core.book.results import rewrite_figure
from xmr_core.book.static import drawing_code
from xmr_core.chapters import hmrn, hrem, pcme
from xmr_core.config import project_root
from xmr_core.runs.log import git_commit
from xmr_core.sources import digest_bytes

Tables = Sequence[pd.DataFrame]


@dataclass(frozen=True)
class Redraw:
    """A figure drawn from committed tables alone."""
    tables: tuple[str, ...]  # the result keys of the tables it is drawn from (`<key>.csv`)
    draw: Callable[[Tables, dict[str, Any]], Figure]  # (the tables, the figure's provenance) -> the figure
    caption: Callable[[Tables, dict[str, Any]], str] | None = None  # for a figure not yet in the results


REDRAWS: dict[str, Redraw] = {
    "pcme/ceiling": Redraw(("pcme/ceiling",), lambda t, meta: pcme.ceiling_figure(t[0])),
    "hrem/fig6": Redraw(("hrem/fig6",), lambda t, meta: hrem.fig6_figure(t[0], meta["dataset"])),
    "hrem/fig7": Redraw(("hrem/fig7",), lambda t, meta: hrem.fig7_figure(t[0])),
    "hmrn/rounds": Redraw(
        ("hmrn/table1", "hmrn/table2", "hmrn/table3"),
        lambda t, meta: hmrn.rounds_figure(dict(zip(("table1", "table2", "table3"), t)), meta["dataset"]),
        lambda t, meta: hmrn.rounds_caption(meta["dataset"], int(t[0]["seeds"].max()))),
}


def _read(results: Path, key: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A committed table and its provenance."""
    csv = results / f"{key}.csv"
    if not csv.is_file():
        raise FileNotFoundError(f"{csv}: not found (the table a figure is redrawn from)")
    return pd.read_csv(io.BytesIO(csv.read_bytes())), json.loads(csv.with_suffix(".json").read_text(encoding="utf-8"))


def restyled_meta(meta: dict[str, Any], root: Path) -> dict[str, Any]:
    """`meta` with `restyled`: now, this checkout's commit, and the digest of each file of drawing code
    (`book.static.drawing_code`) its `xmr_core_sources` names, as it is now (a file gone: None)."""
    sources = {name: digest_bytes((root / name).read_bytes()) if (root / name).is_file() else None
               for name in meta.get("xmr_core_sources") or {} if drawing_code(name)}
    return {**meta, "restyled": {"created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                 "git_commit": git_commit(), "sources": sources}}


def restyle(results: Path, keys: Sequence[str] = (), root: Path | None = None) -> list[str]:
    """Redraw the figures `keys` (every one of `REDRAWS` when empty) under `results` from their committed tables;
    returns the keys redrawn. A figure with neither its PNG nor a caption to draw it with is an error."""
    matplotlib.use("Agg")
    root = root or project_root()
    unknown = sorted(set(keys) - set(REDRAWS))
    if unknown:
        raise ValueError(f"not redrawn from committed tables: {', '.join(unknown)} (these are: {', '.join(REDRAWS)})")
    done = []
    for key in keys or list(REDRAWS):
        redraw = REDRAWS[key]
        read = [_read(results, table) for table in redraw.tables]
        frames = [frame for frame, _ in read]
        own = results / f"{key}.json"
        if own.is_file():
            meta = json.loads(own.read_text(encoding="utf-8"))
        elif redraw.caption is not None:
            meta = {**read[0][1], "key": key, "kind": "figure", "caption": redraw.caption(frames, read[0][1])}
            for name in ("columns", "n_rows", "cell"):
                meta.pop(name, None)
        else:
            raise FileNotFoundError(f"{own}: no provenance to redraw {key} with")
        figure = redraw.draw(frames, meta)
        rewrite_figure(figure, key, results, restyled_meta(meta, root))
        plt.close(figure)
        done.append(key)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="xmr results restyle", description=__doc__.split("\n\n")[0])
    parser.add_argument("keys", nargs="*", help=f"figures to redraw (default all: {', '.join(REDRAWS)})")
    parser.add_argument("--results", default="results", help="results folder (default results/)")
    args = parser.parse_args(argv)
    root = project_root()
    folder = Path(args.results) if Path(args.results).is_absolute() else root / args.results
    try:
        done = restyle(folder, args.keys, root)
    except (ValueError, FileNotFoundError) as err:
        print(f"xmr results restyle: {err}", file=sys.stderr)
        return 1
    print(f"xmr results restyle: redrew {len(done)} figure(s) from their committed tables: {', '.join(done)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
