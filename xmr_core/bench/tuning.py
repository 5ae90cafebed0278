"""`python -m xmr_core.bench tuning [CHAPTER ...]`: where each method's tuned setting lies in its grid.

Reads `results/<chapter>/tuning.csv` (every chapter that has one, or the chapters named) and prints, per chapter,
each method's chosen learning rate and weight and whether each is the smallest or largest value tried
(`tuning.grid_edges`). Every method gets the same grid; a choice on its edge means the grid did not bracket that
method's optimum, so a larger budget could move the comparison.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from xmr_core.tuning import grid_edges


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench tuning")
    parser.add_argument("chapters", nargs="*", help="default: every chapter with a tuning.csv")
    parser.add_argument("--results", default="results")
    args = parser.parse_args(argv)
    root = Path(args.results)
    paths = [root / c / "tuning.csv" for c in args.chapters] or sorted(root.glob("*/tuning.csv"))
    if not paths:
        raise SystemExit(f"{root}: no <chapter>/tuning.csv; run a chapter's train notebook first")
    settings = edges = 0
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"{path}: not found; run `xmr book run {path.parent.name}` first")
        table = grid_edges(pd.read_csv(path))
        print(f"== {path.parent.name}\n{table.to_string(index=False)}")
        settings += 2 * len(table)
        edges += int((table["lr edge"] != "").sum() + (table["weight edge"] != "").sum())
    print(f"chapters={len(paths)} settings={settings} on_grid_edge={edges}")
