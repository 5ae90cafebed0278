"""A committed result table (`results/<chapter>/<name>.csv`) as HTML that fits the page's content column.

The CSVs are data and stay as written; only how a page shows them changes here:

- a metric written as three columns, `<m> (paper)`, `<m> (<data set>)` and `<m> std`, becomes one column `<m>`
  whose cell reads `paper · ours ± std` (the paper's value first); a missing value is `—`, never `nan`;
- numbers are rounded on one scale per column (`number_format`);
- a table wider than `WIDTH_CHARS` is split into parts of its value columns, each part repeating the leading
  label columns (model, protocol, ...) and the share of the Bayes ceiling, so no table is wider than the
  column it is shown in;
- diagnostics (tuning logs, per-seed and per-run tables, per-round ceilings, judgement tables, the sweeps a
  figure draws, any table of more than `LONG_ROWS` rows) are folded in a `<details>` that names what is inside.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

WIDTH_CHARS = 96  # characters of small-font table text that fit the ~770 px content column at 1400 px
LEAD_SPAN = 4  # label columns among the first 4 (model, protocol, seed, ...) are repeated in every part
LONG_ROWS = 40  # a table with more rows than this is a listing: folded
# tuning logs, per-seed and per-run tables, ceilings per model and round, judgements, and the sweeps a figure draws
DIAGNOSTIC_KEYS = re.compile(r"(^|_)(tuning|per_seed|training|ceiling|judgements|claims|runs|sweeps)(_|$)")
MISSING = "—"
CEILING_SHARE = "% of ceiling"  # a column of each model's share of the Bayes ceiling: shown in every part
MERGED_NOTE = "Each cell: the paper's value · ours ± std over seeds (— where there is none)."


@dataclass
class Column:
    """One shown column: its header, its cells as text, and whether it is a label (repeated in every part)."""
    header: str
    cells: list[str]
    label: bool = False

    @property
    def width(self) -> int:
        """Characters it needs: its widest cell (numbers do not wrap) or its longest header word, text cells
        wrapping at 28 characters."""
        widest = max((len(c) if not self.label else min(len(c), 28) for c in self.cells), default=0)
        return max(widest, max((len(w) for w in self.header.split()), default=0)) + 2


def is_diagnostic(key: str, n_rows: int) -> bool:
    """Whether result `key` (`pcme/tuning`) is a diagnostic table, shown folded."""
    return bool(DIAGNOSTIC_KEYS.search(key.rsplit("/", 1)[-1])) or n_rows > LONG_ROWS


def number_format(values: pd.Series) -> int | None:
    """Decimals for a numeric column: None for whole numbers, 1 where its largest magnitude is at least 10, 2 at
    least 1, else enough for two significant digits."""
    finite = [abs(float(v)) for v in values if isinstance(v, (int, float)) and math.isfinite(float(v))]
    if all(float(v).is_integer() for v in finite):
        return None
    top = max(finite, default=0.0)
    if top >= 10:
        return 1
    if top >= 1 or top == 0:
        return 2
    return max(2, 1 - math.floor(math.log10(top)))


def cell(value: object, decimals: int | None) -> str:
    """One value as text: `—` when missing, numbers with `decimals` (whole when None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{float(value):.0f}" if decimals is None else f"{float(value):.{decimals}f}"
    text = str(value).strip()
    return text if text and text.lower() != "nan" else MISSING


def _decimals(frame: pd.DataFrame, name: str) -> int | None:
    return number_format(frame[name]) if pd.api.types.is_numeric_dtype(frame[name]) else 0


def columns(frame: pd.DataFrame) -> tuple[list[Column], bool]:
    """The shown columns of `frame` (metric triples merged) and whether any triple was merged."""
    names = list(frame.columns)
    bases = {m.group(1) for n in names if (m := re.match(r"^(.*) (?:\(paper\)|std)$", n))}
    ours = {}
    for base in bases:
        found = [n for n in names if n.startswith(f"{base} (") and n.endswith(")") and n != f"{base} (paper)"
                 and n[len(base) + 2:-1] and "(" not in n[len(base) + 2:-1]]
        if found:
            ours[base] = found[0]
    used: set[str] = set()
    out: list[Column] = []
    merged = False
    for name in names:
        if name in used:
            continue
        base = next((b for b in ours if name in (f"{b} (paper)", ours[b], f"{b} std")), None)
        if base is None:
            numeric = pd.api.types.is_numeric_dtype(frame[name])
            decimals = _decimals(frame, name)
            cells = [cell(v, decimals) for v in frame[name]]
            out.append(Column(name, cells, label=not numeric or name in {"seed", "seeds"}))
            used.add(name)
            continue
        paper, mine, std = f"{base} (paper)", ours[base], f"{base} std"
        used |= {paper, mine, std}
        decimals = _decimals(frame, mine)
        decimals = 1 if decimals is None else decimals
        cells = []
        for i in range(len(frame)):
            text = cell(frame[mine].iloc[i], decimals)
            if std in frame and cell(frame[std].iloc[i], decimals) != MISSING:
                text += f" ± {cell(frame[std].iloc[i], decimals)}"
            if paper in frame:
                text = f"{cell(frame[paper].iloc[i], decimals)} · {text}"
            cells.append(text)
        out.append(Column(base, cells))
        merged = True
    return out, merged


def parts(cols: list[Column], width: int = WIDTH_CHARS) -> list[list[Column]]:
    """`cols` split into tables of at most `width` characters: the label columns among the first `LEAD_SPAN` and
    the ceiling shares in every part, the other columns packed in order."""
    lead = [c for c in cols[:LEAD_SPAN] if c.label] + [c for c in cols if CEILING_SHARE in c.header]
    rest = [c for c in cols if all(c is not x for x in lead)]
    room = max(width - sum(c.width for c in lead), 1)
    out: list[list[Column]] = []
    current: list[Column] = []
    used = 0
    for c in rest:
        if current and used + c.width > room:
            out.append(current)
            current, used = [], 0
        current.append(c)
        used += c.width
    if current or not out:
        out.append(current)
    return [lead + p for p in out]


def _table(cols: list[Column]) -> str:
    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in cols)
    rows = []
    for i in range(len(cols[0].cells) if cols else 0):
        rows.append("<tr>" + "".join(
            f'<td class="{"xmr-label" if c.label else "xmr-num"}">{html.escape(c.cells[i])}</td>' for c in cols) + "</tr>")
    return f'<table class="table xmr-table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def table_html(frame: pd.DataFrame, width: int = WIDTH_CHARS) -> str:
    """`frame` as one or more HTML tables that fit `width` characters (`parts`), with the merged cells' legend."""
    cols, merged = columns(frame)
    tables = parts(cols, width)
    out = [f'<p class="xmr-table-note">{html.escape(MERGED_NOTE)}</p>'] if merged else []
    for i, p in enumerate(tables, 1):
        if len(tables) > 1:
            shown = ", ".join(c.header for c in p if not c.label)
            out.append(f'<p class="xmr-table-part">Part {i} of {len(tables)}: {html.escape(shown)}</p>')
        out.append(_table(p))
    return "\n".join(out)


def folded(summary: str, body: str) -> str:
    """`body` (HTML) in a `<details>` of the book's diagnostics, closed, under `summary` (HTML)."""
    return f'<details class="xmr-result xmr-diagnostic"><summary>{summary}, click to show</summary>\n{body}</details>'


def frame_result_html(frame: pd.DataFrame, key: str, caption: str) -> str:
    """Result `key`'s caption and table (`table_html` of `frame`, as read from its CSV), folded in `<details>` when
    it is a diagnostic."""
    body = f'<p class="xmr-caption">{html.escape(caption)}</p>\n' + table_html(frame)
    if not is_diagnostic(key, len(frame)):
        return f'<div class="xmr-result">{body}</div>'
    name = key.rsplit("/", 1)[-1]
    return folded(f"Diagnostic: <code>{html.escape(name)}</code> ({len(frame)} rows × {len(frame.columns)} columns)",
                  body)


def result_table_html(csv: Path, key: str, caption: str) -> str:
    """`frame_result_html` of the result table `csv`."""
    try:
        frame = pd.read_csv(csv)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{csv}: cannot be read as a result table ({exc})") from None
    return frame_result_html(frame, key, caption)
