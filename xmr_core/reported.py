"""The papers' reported numbers: `xmr_core/paper_values/<chapter>.csv`, typed from each paper with its table and
row (columns table, row, method, dataset, protocol, key, value, source). The science reads them (a margin is a gap
the paper reports, `xmr_core.margins`) and so does the book (its tables set the paper's numbers beside ours).

    paper_values(chapter) -> the chapter's paper values as a frame
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

PAPER_VALUES_DIR = Path(__file__).parent / "paper_values"


def paper_values(chapter: str) -> pd.DataFrame:
    """The paper's reported numbers for a chapter (`xmr_core/paper_values/<chapter>.csv`)."""
    path = PAPER_VALUES_DIR / f"{chapter}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no paper values recorded for chapter {chapter!r}")
    return pd.read_csv(path)
