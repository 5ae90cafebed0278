"""`python -m xmr_core.bench claims [CHAPTER ...]`: the book's claims under the one verdict protocol.

For every chapter with a claims page (`results/<chapter>/claims.md`): its declared claims (`CLAIMS`, a list of
`xmr_core.claims.ClaimSpec` in `xmr_core/chapters/<chapter>.py`), each put through `claims.can_fail`, and its
judged claims (`results/<chapter>/judgements_*.csv`, written by `claims.write_judgements`): per kind how many
verdicts of each sort, how many were paired, the median interval width, and any verdict other than "not tested"
resting on a run that did not converge or collapsed. A chapter that declares no claims yet is reported as not
migrated, with the number of claims its committed claims.md judged by the old rule; one whose claims.md has more
claims than its judgement files as partly migrated.

Exits non-zero when a chapter is not (or partly) migrated, a declared claim fails the can-fail test, or a verdict rests on
a non-converged or collapsed run.

`--against REV` also compares each chapter with its results committed at git revision REV (e.g. the commit before a
retrain): the verdict counts of both claims pages, and every claim judged at both (by key) whose verdict changed,
with its effect and interval then and now. A page judged by the old rule at REV has no keys: only its counts compare.
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from xmr_core.bench._committed import committed_text
from xmr_core.claims import VERDICTS, ClaimSpec, can_fail
from xmr_core.results_diff import committed_files, table_cells

OLD_ROW = re.compile(r"^\| \d+ \|")
BOLD = re.compile(r"\*\*(.+?)\*\*")


def declared(chapter: str) -> list[ClaimSpec] | None:
    """The chapter module's `CLAIMS`, or None when it declares none (or has no module)."""
    try:
        module = importlib.import_module(f"xmr_core.chapters.{chapter}")
    except ModuleNotFoundError:
        return None
    return list(getattr(module, "CLAIMS", [])) or None


def judged(folder: Path) -> pd.DataFrame:
    """Every judgement the chapter's notebooks wrote (`judgements_*.csv`), or an empty frame."""
    return judgement_frame([p.read_text() for p in sorted(folder.glob("judgements_*.csv"))])


def judgement_frame(tables: Sequence[str]) -> pd.DataFrame:
    """The judgement tables (the text of each `judgements_*.csv`) as one frame, or an empty frame."""
    text = {"unconverged": str, "collapsed": str, "paired": str, "verdict": str, "key": str}
    frames = [pd.read_csv(io.StringIO(t), dtype=text) for t in tables]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return frame.fillna({"unconverged": "", "collapsed": ""}) if frames else frame


def page_counts(text: str, where: str) -> dict[str, int]:
    """How many claims of a `claims.md` page (its numbered rows) carry each verdict (the row's last cell)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for n, line in enumerate(text.splitlines(), 1):
        if OLD_ROW.match(line):
            cell = table_cells(line)[-1]
            bold = BOLD.match(cell)  # `claims.render_claims` writes "**verdict**: reason"
            verdict = bold[1].strip() if bold else cell.strip("*").strip()
            if verdict not in counts:
                raise SystemExit(f"{where}:{n}: a claim row with the verdict {verdict!r}, none of {list(VERDICTS)}")
            counts[verdict] += 1
    return counts


def _counts(counts: dict[str, int]) -> str:
    return f"{sum(counts.values())} claims (" + ", ".join(f"{n} {v}" for v, n in counts.items()) + ")"


def _judgement(row: pd.Series) -> str:
    if any(pd.isna(row[c]) for c in ("effect", "low", "high")):
        return str(row["verdict"])
    return f"{row['verdict']} {row['effect']:+.3g} [{row['low']:+.3g}, {row['high']:+.3g}]"  # .3g: tiny effects too


def against(chapter: str, results: Path, rev: str) -> tuple[list[str], int]:
    """(lines, claims whose verdict changed): the chapter's claims page and judgements at git revision `rev` against
    today's."""
    names = [Path(p).name for p in committed_files(results, chapter, rev)]
    if "claims.md" not in names:
        return [f"  against {rev}: no {chapter}/claims.md then"], 0
    then = page_counts(committed_text(results, rev, f"{chapter}/claims.md"), f"{results / chapter}/claims.md@{rev}")
    now = page_counts((results / chapter / "claims.md").read_text(), str(results / chapter / "claims.md"))
    width = len(rev) + 4
    lines = [f"  {('at ' + rev + ':').ljust(width)} {_counts(then)}", f"  {'now:'.ljust(width)} {_counts(now)}"]
    before = judgement_frame([committed_text(results, rev, f"{chapter}/{n}") for n in sorted(names)
                              if n.startswith("judgements_") and n.endswith(".csv")])
    if before.empty:
        lines.append(f"  no judgements at {rev} (its claims were judged by the old rule): counts only")
        return lines, 0
    after = judged(results / chapter)
    both = before.merge(after, on="key", suffixes=(" then", " now")) if not after.empty else before.iloc[:0]
    changed = both[both["verdict then"] != both["verdict now"]]
    for _, r in changed.iterrows():
        was = _judgement(r.rename(lambda c: c.removesuffix(" then")))
        is_ = _judgement(r.rename(lambda c: c.removesuffix(" now")))
        lines.append(f"  changed {r['key']}: {was} -> {is_}")
    only = len(set(before["key"]) ^ set(after["key"] if not after.empty else []))
    lines.append(f"  {len(both)} claims judged at both, {len(changed)} changed verdict; {only} judged at one only")
    return lines, len(changed)


def chapter_report(chapter: str, folder: Path) -> tuple[list[str], list[str], dict[str, float]]:
    """(lines to print, failures, figures) of one chapter."""
    specs = declared(chapter)
    page = folder / "claims.md"
    n_page = sum(bool(OLD_ROW.match(line)) for line in page.read_text().splitlines()) if page.is_file() else 0
    if specs is None:
        why = f"{chapter}: not migrated: {n_page} claims in its committed claims.md judged by the old rule"
        return [why], [why], {"claims": n_page, "migrated": 0}
    lines = [f"{chapter}: {len(specs)} declared claims"]
    failures = []
    keys = [s.key for s in specs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        failures.append(f"{chapter}: repeated claim keys {repeated}")
    for s in specs:
        reason = can_fail(s)
        if reason:
            failures.append(f"{chapter}: {reason}")
    frame = judged(folder)
    n_old = max(n_page - len(frame), 0)  # the page's claims that no judgement file accounts for
    if n_old:
        failures.append(f"{chapter}: partly migrated: {n_old} claims in its committed claims.md judged by the old rule")
    if frame.empty:
        lines.append("  no judgements yet (results/<chapter>/judgements_*.csv): run the chapter")
        return lines, failures, {"claims": len(specs), "migrated": 1, "judged": 0}
    for kind, rows in frame.groupby("kind", sort=False):
        counts = ", ".join(f"{int((rows['verdict'] == v).sum())} {v}" for v in VERDICTS if (rows["verdict"] == v).any())
        lines.append(f"  {kind}: {len(rows)} ({counts})")
    paired = int((frame["paired"] != "none").sum())
    width = (frame["high"] - frame["low"]).dropna()
    median = float(width.median()) if len(width) else float("nan")
    lines.append(f"  paired: {paired} of {len(frame)}; median interval width {median:.3g}")
    missing = sorted(set(keys) - set(frame["key"]))
    if missing:
        lines.append(f"  declared but not judged on this run: {', '.join(missing)}")
    bad_run = frame[(frame["verdict"] != "not tested")
                    & ((frame["unconverged"] != "") | (frame["collapsed"] != ""))]
    for _, r in bad_run.iterrows():
        failures.append(f"{chapter}: claim {r['key']!r} is {r['verdict']!r} on a run that did not converge "
                        f"({r['unconverged']}) or collapsed ({r['collapsed']})")
    return lines, failures, {"claims": len(specs), "migrated": 1, "judged": len(frame), "paired": paired,
                             "median_width": median}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench claims")
    parser.add_argument("chapters", nargs="*", help="chapters to report (default: every one with a claims.md)")
    parser.add_argument("--results", default="results")
    parser.add_argument("--against", metavar="REV", help="also compare each chapter's verdicts with those committed "
                        "at git revision REV")
    args = parser.parse_args(argv)
    root = Path(args.results)
    chapters = args.chapters or sorted(p.parent.name for p in root.glob("*/claims.md"))
    if not chapters:
        raise SystemExit(f"{root}: no <chapter>/claims.md found")
    failures: list[str] = []
    totals = {"claims": 0, "migrated": 0, "judged": 0, "paired": 0}
    changed = 0
    for chapter in chapters:
        lines, failed, figures = chapter_report(chapter, root / chapter)
        if args.against:
            compared, n_changed = against(chapter, root, args.against)
            lines, changed = lines + compared, changed + n_changed
        print("\n".join(lines))
        failures += failed
        for k in totals:
            totals[k] += int(figures.get(k, 0))
    if failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures))
    print(f"chapters={len(chapters)} migrated={totals['migrated']} claims={totals['claims']} "
          f"judged={totals['judged']} paired={totals['paired']} failures={len(failures)}"
          + (f" against={args.against} changed={changed}" if args.against else ""))
    if failures:
        sys.exit(1)
