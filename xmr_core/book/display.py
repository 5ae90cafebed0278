"""How a notebook shows a table: as the book's fitted table (`book.tables`), the HTML a page rendered from source
builds from the result's CSV, so an executed page reads as one rendered from source.

`show_fitted_tables` makes `fitted_html` IPython's HTML form of every DataFrame; `xmr_core.book.results` calls it
when imported, so every chapter notebook shows its tables so (outside IPython it does nothing). A frame the
notebook wrote with `write_table` (`remember`: the same CSV bytes) is shown as that result: its caption and table,
folded when a diagnostic (`tables.frame_result_html`). Any other frame a notebook shows is a working table (the
per-run values before they are summarised, the runs a cell trained): fitted the same way and folded under a line
that gives its size (shown open when small: at most `OPEN_ROWS` rows in one part), its first `WORKING_ROWS` rows
shown.
"""

from __future__ import annotations

import html
import io

import pandas as pd

from xmr_core.book.tables import columns, folded, frame_result_html, parts, table_html
from xmr_core.sources import digest_bytes

WORKING_ROWS = 100  # rows of a working table shown (its CSV is not written; the rest are said to be left out)
OPEN_ROWS = 12  # a working table of at most this many rows that fits in one part is shown open
_WRITTEN: dict[str, tuple[str, str]] = {}  # digest of a written table's CSV bytes -> (key, caption)


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """The bytes `write_table` writes for `frame` as its CSV."""
    return frame.to_csv(index=False).encode("utf-8")


def remember(csv: bytes, key: str, caption: str) -> None:
    """Note that this process wrote `csv` (a table's CSV bytes) as result `key` under `caption`."""
    _WRITTEN[digest_bytes(csv)] = (key, caption)


def _flat(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with a meaningful index as its first columns and header levels joined, as one CSV header row."""
    shown = frame if isinstance(frame.index, pd.RangeIndex) else frame.reset_index()
    if isinstance(shown.columns, pd.MultiIndex):
        shown = shown.set_axis([" ".join(str(p) for p in c if str(p)) for c in shown.columns], axis=1)
    return shown


def fitted_html(frame: pd.DataFrame) -> str:
    """`frame` as the book shows a table: the result it was written as (`remember`), or a folded working table;
    its values as read back from its CSV, as a page rendered from source reads them."""
    if frame.columns.empty:
        return f"<p>An empty table ({len(frame)} rows, no columns).</p>"
    if (written := _WRITTEN.get(digest_bytes(csv_bytes(frame)))) is not None:
        return frame_result_html(pd.read_csv(io.BytesIO(csv_bytes(frame))), *written)
    shown = _flat(frame)
    read = pd.read_csv(io.BytesIO(csv_bytes(shown.head(WORKING_ROWS))))
    more = (f'<p class="xmr-table-note">The first {WORKING_ROWS} of {len(shown)} rows.</p>'
            if len(shown) > WORKING_ROWS else "")
    if len(shown) <= OPEN_ROWS and len(parts(columns(read)[0])) == 1:
        return f'<div class="xmr-result">{table_html(read)}</div>'
    size = f"{len(shown)} rows × {len(shown.columns)} columns"
    return folded(f"Table shown by this cell ({html.escape(size)})", table_html(read) + more)


def show_fitted_tables() -> None:
    """In IPython, show every DataFrame as `fitted_html` (its plain-text form stays pandas')."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, fitted_html)
