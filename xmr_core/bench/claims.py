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
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

import pandas as pd

from xmr_core.claims import VERDICTS, ClaimSpec, can_fail

OLD_ROW = re.compile(r"^\| \d+ \|")


def declared(chapter: str) -> list[ClaimSpec] | None:
    """The chapter module's `CLAIMS`, or None when it declares none (or has no module)."""
    try:
        module = importlib.import_module(f"xmr_core.chapters.{chapter}")
    except ModuleNotFoundError:
        return None
    return list(getattr(module, "CLAIMS", [])) or None


def judged(folder: Path) -> pd.DataFrame:
    """Every judgement the chapter's notebooks wrote (`judgements_*.csv`), or an empty frame."""
    text = {"unconverged": str, "collapsed": str, "paired": str, "verdict": str, "key": str}
    frames = [pd.read_csv(p, dtype=text) for p in sorted(folder.glob("judgements_*.csv"))]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return frame.fillna({"unconverged": "", "collapsed": ""}) if frames else frame


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
    args = parser.parse_args(argv)
    root = Path(args.results)
    chapters = args.chapters or sorted(p.parent.name for p in root.glob("*/claims.md"))
    if not chapters:
        raise SystemExit(f"{root}: no <chapter>/claims.md found")
    failures: list[str] = []
    totals = {"claims": 0, "migrated": 0, "judged": 0, "paired": 0}
    for chapter in chapters:
        lines, failed, figures = chapter_report(chapter, root / chapter)
        print("\n".join(lines))
        failures += failed
        for k in totals:
            totals[k] += int(figures.get(k, 0))
    if failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures))
    print(f"chapters={len(chapters)} migrated={totals['migrated']} claims={totals['claims']} "
          f"judged={totals['judged']} paired={totals['paired']} failures={len(failures)}")
    if failures:
        sys.exit(1)
