"""`python -m xmr_core.bench tuning [CHAPTER ...]`: is every method's tuned setting bracketed?

Reads `results/<chapter>/tuning.csv` (every chapter that has one, or the chapters named) and prints, per chapter,
each method's `tuning.tuning_summary`: the chosen learning rate and weight, each 'bracketed' (a tried neighbour on
each side scored lower), at a 'hard bound', or 'unbracketed' (the optimum may lie past what was tried), the chosen
schedule, the runs and epochs spent, and convergence. Exits 1 when any chosen setting is unbracketed, or when a
chapter's table predates the bracketing protocol (it records no lattice: retrain the chapter).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from xmr_core.runs.tuning import RUN_COLUMNS, tuning_summary, unbracketed


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench tuning")
    parser.add_argument("chapters", nargs="*", help="default: every chapter with a tuning.csv")
    parser.add_argument("--results", default="results")
    args = parser.parse_args(argv)
    root = Path(args.results)
    paths = [root / c / "tuning.csv" for c in args.chapters] or sorted(root.glob("*/tuning.csv"))
    if not paths:
        raise SystemExit(f"{root}: no <chapter>/tuning.csv; run a chapter's train notebook first")
    settings = open_settings = old = unconverged = 0
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"{path}: not found; run `xmr book run {path.parent.name}` first")
        frame = pd.read_csv(path)
        if any(c not in frame.columns for c in RUN_COLUMNS):
            print(f"== {path.parent.name}\n{path}: old format (before the bracketing protocol of xmr_core.runs.tuning: "
                  f"no lattice columns), so no setting in it counts as bracketed; retrain the chapter")
            old += 1
            continue
        table = tuning_summary(frame)
        print(f"== {path.parent.name}\n{table.to_string(index=False)}")
        settings += 2 * len(table)
        open_settings += unbracketed(table)
        unconverged += int((~table["converged"]).sum())
    print(f"chapters={len(paths)} old_format={old} settings={settings} unbracketed={open_settings} "
          f"not_converged={unconverged}")
    if old or open_settings:
        raise SystemExit(1)
