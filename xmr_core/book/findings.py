"""What a chapter found, in words generated from its committed judgements (`results/<chapter>/judgements_*.csv`).

`chapter_judgements` reads a chapter's judgement tables (one per notebook: `judgements_train.csv`, ...) into one
frame; `findings_html` writes the block a chapter page opens with: the chapter's verdict tally, colour-coded, and
one sentence per verdict for the claims a notebook judges ("held 2 of 7: ..."), each claim with its effect and
interval, or why it was not tested; `findings_page` the book's Findings page. Verdict names are read from the
data (ordered as `xmr_core.claims.VERDICTS` lists them, any other after), so a new verdict kind shows up
without a change here.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import pandas as pd

from xmr_core.claims import VERDICTS, signed

NOTEBOOK_COLUMN = "notebook"  # added by `chapter_judgements`: the part after `judgements_` (train, ablate, ...)


def chapter_judgements(folder: Path) -> pd.DataFrame:
    """Every judgement of the chapter whose results are in `folder`, with the notebook part that judged it, in
    the notebooks' file order (train, ablate, visualise, others alphabetically); empty when it has none."""
    order = {"train": 0, "ablate": 1, "visualise": 2}
    paths = sorted(folder.glob("judgements_*.csv"),
                   key=lambda p: (order.get(p.stem.removeprefix("judgements_"), 9), p.stem))
    frames = []
    for path in paths:
        frame = pd.read_csv(path)
        missing = {"claim", "verdict"} - set(frame.columns)
        if missing:
            raise ValueError(f"{path}: not a judgement table (no column {', '.join(sorted(missing))})")
        frames.append(frame.assign(**{NOTEBOOK_COLUMN: path.stem.removeprefix("judgements_")}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["claim", "verdict", NOTEBOOK_COLUMN])


def verdict_order(verdicts: pd.Series) -> list[str]:
    """The verdicts present in `verdicts`, in `xmr_core.claims.VERDICTS` order, unknown ones after in order of
    appearance."""
    present = list(dict.fromkeys(str(v) for v in verdicts))
    return [v for v in VERDICTS if v in present] + [v for v in present if v not in VERDICTS]


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict badge: `xmr-v-` and the verdict's words joined by '-' (`xmr-v-did-not-hold`)."""
    return "xmr-v-" + re.sub(r"[^a-z0-9]+", "-", verdict.lower()).strip("-")


def badge(verdict: str, text: str | None = None) -> str:
    """A coloured badge naming a verdict (or `text`)."""
    return f'<span class="xmr-verdict {verdict_class(verdict)}">{html.escape(text or verdict)}</span>'


def effect_text(row: pd.Series) -> str:
    """`effect of: +0.40 [-4.81, +4.88]` (the interval's confidence in words), or why the claim was not tested."""
    effect = row.get("effect")
    if effect is None or not isinstance(effect, (int, float)) or not math.isfinite(effect):
        reason = str(row.get("reason") or "").strip()
        return reason if reason and reason != "nan" else "no effect measured"
    value, low, high = signed(float(effect), float(row["low"]), float(row["high"]))
    confidence = row.get("confidence")
    level = f"{round(100 * float(confidence))}% interval" if isinstance(confidence, float) and math.isfinite(
        confidence) else "interval"
    label = row.get("effect of")
    prefix = f"{label}: " if isinstance(label, str) and label.strip() else ""
    return f"{prefix}{value} [{low}, {high}] ({level})"


def tally(frame: pd.DataFrame) -> list[tuple[str, int]]:
    """(verdict, count) for every verdict in `frame`, in `verdict_order`."""
    counts = frame["verdict"].astype(str).value_counts()
    return [(v, int(counts[v])) for v in verdict_order(frame["verdict"])]


def tally_html(frame: pd.DataFrame) -> str:
    """`18 claims: [4 held] [5 did not hold] ...` with one coloured badge per verdict."""
    badges = " ".join(badge(v, f"{n} {v}") for v, n in tally(frame))
    return f"{len(frame)} claim{'s' if len(frame) != 1 else ''}: {badges}"


def sentences(frame: pd.DataFrame) -> list[str]:
    """One HTML sentence per verdict of `frame`'s claims, in `verdict_order`: `<badge> 2 of 7: "claim" (effect);
    "claim" (effect).`"""
    out = []
    for verdict, n in tally(frame):
        rows = frame[frame["verdict"].astype(str) == verdict]
        claims = "; ".join(f"“{html.escape(str(r['claim']).strip())}” ({html.escape(effect_text(r))})"
                           for _, r in rows.iterrows())
        out.append(f"{badge(verdict)} {n} of {len(frame)}: {claims}.")
    return out


def findings_html(frame: pd.DataFrame, notebook: str | None, claims_link: str | None) -> str:
    """The findings block of the page of notebook `notebook` (`train`, `ablate`, ...; None: the chapter's only
    notebook) of a chapter whose judgements are `frame` (`chapter_judgements`): the chapter's tally, then the
    sentences of this notebook's claims (all of them for None), and a link to the claims page (`claims_link`)."""
    parts = ['<div class="xmr-findings">', '<p class="xmr-findings-title">What this chapter found</p>']
    if frame.empty:
        parts += ["<p>This chapter judges no claim of a paper.</p>", "</div>"]
        return "\n".join(parts)
    by_part = ", ".join(f"{part} {n}" for part, n in frame[NOTEBOOK_COLUMN].value_counts(sort=False).items())
    parts.append(f"<p>The chapter's {tally_html(frame)} (judged by part: {html.escape(by_part)}).</p>")
    mine = frame if notebook is None else frame[frame[NOTEBOOK_COLUMN] == notebook]
    where = "this notebook" if notebook is None else f"this notebook ({html.escape(notebook)}.py)"
    if mine.empty:
        parts.append(f"<p>{where.capitalize()} judges no claim.</p>")
    else:
        central = " (the chapter's central claims)" if notebook == "train" else ""
        parts.append(f"<p>Judged by {where}{central}, each effect oriented so that &gt; 0 favours the claim:</p>")
        parts.append("<ul>" + "".join(f"<li>{s}</li>" for s in sentences(mine)) + "</ul>")
    if claims_link:
        parts.append(f'<p>Every claim with its evidence: <a href="{html.escape(claims_link)}">the claims page</a>.</p>')
    parts.append("</div>")
    return "\n".join(parts)


def findings_page(chapters: list[tuple[str, pd.DataFrame, str | None]], script: str) -> str:
    """The book's Findings page (MyST Markdown with HTML blocks): the tallies per chapter and per verdict, then
    every claim of every chapter in one table (chapter, claim, the paper's words where the judgement has a
    `quote`, verdict, effect [interval], a link to the chapter's claims page) that `script` (a URL) sorts and
    filters in the browser. `chapters`: (chapter, `chapter_judgements`, claims page link or None) in book order."""
    frames = [f.assign(chapter=c) for c, f, _ in chapters if not f.empty]
    everything = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["claim", "verdict", "chapter"])
    verdicts = verdict_order(everything["verdict"])
    links = {c: link for c, _, link in chapters}
    out = ["# Findings", "",
           ("Every claim the book judges, from each chapter's committed judgements (`results/<chapter>/judgements_*"
            ".csv`, judged by `xmr_core.claims.judge`: an interval for every effect, oriented so that > 0 favours"
            " the claim). Built from the committed results; nothing is re-executed. Click a column's header to sort"
            " by it; type or choose to filter (all in this page, offline)."), "",
           f"The book: {tally_html(everything)}", "", "## Tallies per chapter", ""]
    head = "".join(f"<th>{badge(v)}</th>" for v in verdicts)
    rows = []
    for chapter, frame, link in chapters:
        counts = dict(tally(frame)) if not frame.empty else {}
        name = f'<a href="{html.escape(link)}">{html.escape(chapter)}</a>' if link else html.escape(chapter)
        rows.append(f"<tr><td>{name}</td><td class=\"xmr-num\">{len(frame)}</td>"
                    + "".join(f'<td class="xmr-num">{counts.get(v, 0)}</td>' for v in verdicts) + "</tr>")
    totals = dict(tally(everything)) if not everything.empty else {}
    rows.append(f"<tr><td><strong>all</strong></td><td class=\"xmr-num\"><strong>{len(everything)}</strong></td>"
                + "".join(f'<td class="xmr-num"><strong>{totals.get(v, 0)}</strong></td>' for v in verdicts) + "</tr>")
    out += [(f'<table class="table xmr-table"><thead><tr><th>chapter</th><th>claims</th>{head}</tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>'), "", "## Every claim", ""]
    quotes = "quote" in everything.columns
    chapter_options = "".join(f'<option value="{html.escape(c)}">{html.escape(c)}</option>' for c, f, _ in chapters
                              if not f.empty)
    verdict_options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in verdicts)
    out.append(
        '<div class="xmr-filter"><input id="xmr-filter-text" type="search" placeholder="filter: any words">'
        f'<select id="xmr-filter-chapter"><option value="">every chapter</option>{chapter_options}</select>'
        f'<select id="xmr-filter-verdict"><option value="">every verdict</option>{verdict_options}</select>'
        '<span id="xmr-filter-count"></span></div>')
    header = ["chapter", "part", "claim"] + (["the paper's words"] if quotes else []) + [
        "verdict", "effect [interval]", "judged in"]
    body = []
    for _, r in everything.iterrows():
        effect = r.get("effect")
        sort = f' data-sort="{float(effect)}"' if isinstance(effect, float) and math.isfinite(effect) else ""
        link = links.get(r["chapter"])
        where = (f'<a href="{html.escape(link)}">claims page</a>' if link else "—")
        cells = [html.escape(str(r["chapter"])), html.escape(str(r[NOTEBOOK_COLUMN])), html.escape(str(r["claim"]))]
        if quotes:
            quote = r.get("quote")
            cells.append(html.escape(str(quote)) if isinstance(quote, str) and quote.strip() else "—")
        cells += [badge(str(r["verdict"])), f"<span{sort}>{html.escape(effect_text(r))}</span>", where]
        tds = "".join(f"<td{sort if h == 'effect [interval]' else ''}>{c}</td>" for h, c in zip(header, cells))
        body.append(f'<tr data-chapter="{html.escape(str(r["chapter"]))}" '
                    f'data-verdict="{html.escape(str(r["verdict"]))}">{tds}</tr>')
    heads = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    out += [(f'<table class="table xmr-findings-table" id="xmr-findings-table"><thead><tr>{heads}</tr></thead>'
             f'<tbody>{"".join(body)}</tbody></table>'), "",
            f'<script src="{html.escape(script)}"></script>', ""]
    return "\n".join(out)
