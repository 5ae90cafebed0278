"""`python -m xmr_core.bench claims [CHAPTER ...]`: the book's claims under the one verdict protocol.

For every chapter with a claims page (`results/<chapter>/claims.md`): its declared claims (`CLAIMS`, a list of
`xmr_core.claims.ClaimSpec` in `xmr_core/chapters/<chapter>.py`), each put through `claims.can_fail`, and its
judged claims (`results/<chapter>/judgements_*.csv`, written by `book.results.write_judgements`): per kind how many
verdicts of each sort, how many were paired, the median interval width, and any verdict other than "not tested"
resting on a run that did not converge or collapsed. A chapter that declares no claims yet is reported as not
migrated, with the number of claims its committed claims.md judged by the old rule; one whose claims.md has more
claims than its judgement files as partly migrated.

Exits non-zero when a chapter is not (or partly) migrated, a declared claim fails the can-fail test, or a verdict rests on
a non-converged or collapsed run.

`--seeds` also lists, per chapter, each claim judged within noise on seed noise with the seeds a verdict would need
if its observed effect were the true one (`seeds_to_resolve`): which claims the book's 3 seeds cannot resolve. Then
the rule for more seeds (`central_seeds`): a chapter's central claims are those its train.py judges (the paper's
main tables); where one is within noise and `SEED_CAP` seeds or fewer would resolve it at its observed effect,
train.py's compared models get `SEED_CAP` seeds (the projection rests on a 3-seed estimate of the effect, so it
gets the whole cap, not the bare count); the claims that would need more are named, not chased.

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

import numpy as np
import pandas as pd
from scipy import stats

from xmr_core.bench._committed import committed_text
from xmr_core.book.diff import committed_files, table_cells
from xmr_core.claims import CONFIDENCE, VERDICTS, ClaimSpec, can_fail

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
    """Every judgement the chapter's notebooks wrote (`judgements_*.csv`), or an empty frame; column `notebook`:
    which wrote it ("train" for judgements_train.csv)."""
    parts = [judgement_frame([p.read_text()]).assign(notebook=p.stem.removeprefix("judgements_"))
             for p in sorted(folder.glob("judgements_*.csv"))]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


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


MAX_SEEDS = 1000  # `seeds_to_resolve` looks no further
SEED_CAP = 5  # the most seeds the book trains a chapter's compared models with to resolve its central claims


def _half_width(n_seeds: np.ndarray) -> np.ndarray:
    """The seed level's interval half-width at each of `n_seeds` seeds, in units of the seeds' std:
    t(0.975, n-1) / sqrt(n)."""
    return stats.t.ppf(0.5 + CONFIDENCE / 2, n_seeds - 1) / np.sqrt(n_seeds)


def seeds_to_resolve(kind: str, effect: float, low: float, high: float, n_seeds: int, margin: float = 0.0
                     ) -> tuple[int | None, str]:
    """(seeds, verdict): how many seeds would turn a "within noise" judgement into `verdict` ("held" or "did not
    hold", the side its effect is on) if the observed effect were the true one and the interval [low, high] around it
    shrank like a t interval over seeds, t(0.975, n-1)/sqrt(n); None when even `MAX_SEEDS` would not (an effect on
    the bound never resolves). `kind` is the judgement's (a universal claim's "universal (each)" judges its weakest
    pair by `each`); `margin` that of a non-inferiority or equivalence claim. A projection, not a guarantee: the
    query noise of a seeds × queries interval does not shrink with seeds, so there it is a lower bound."""
    each = kind.split("(")[-1].rstrip(")").strip()
    below, above = effect - low, high - effect  # the interval's reach below and above the effect
    if each == "equivalence":
        needs = ([(below, effect + margin), (above, margin - effect)] if abs(effect) < margin else
                 [(below, effect - margin)] if effect > margin else [(above, -margin - effect)])
        verdict = "held" if abs(effect) < margin else "did not hold"
    else:
        bound = -margin if each == "non-inferiority" else 0.0
        needs = [(below, effect - bound)] if effect > bound else [(above, bound - effect)]
        verdict = "held" if effect > bound else "did not hold"
    if any(room <= 0 for _, room in needs):
        return None, verdict
    shrink = min(room / reach for reach, room in needs)  # the interval must shrink below this share of today's
    more = np.arange(n_seeds + 1, MAX_SEEDS + 1)
    enough = more[_half_width(more) < shrink * _half_width(np.array(n_seeds))]
    return (int(enough[0]) if len(enough) else None), verdict


def _needs(frame: pd.DataFrame) -> list[tuple[pd.Series, int | None, str]]:
    """(row, seeds, verdict) of every judgement within noise on seed noise (`seeds_to_resolve`), the fewest seeds
    first (None: more than `MAX_SEEDS`)."""
    rows = []
    for _, r in frame[(frame["verdict"] == "within noise") & frame["noise"].str.contains("seeds")].iterrows():
        margin = 0.0 if pd.isna(r["margin"]) else float(r["margin"])
        n, verdict = seeds_to_resolve(str(r["kind"]), r["effect"], r["low"], r["high"], int(r["n seeds"]), margin)
        rows.append((r, n, verdict))
    return sorted(rows, key=lambda row: row[1] or MAX_SEEDS + 1)


def unresolved(frame: pd.DataFrame) -> list[str]:
    """One line per judgement within noise on seed noise (`seeds_to_resolve`), the fewest seeds first."""
    lines = []
    for r, n, verdict in _needs(frame):
        seeds = f"{'at least ' if 'queries' in str(r['noise']) else ''}{n}" if n else f"more than {MAX_SEEDS}"
        lines.append(f"  within noise at {int(r['n seeds'])} seeds: {r['key']} {r['effect']:+.3g} [{r['low']:+.3g}, "
                     f"{r['high']:+.3g}] over {r['noise']}: {seeds} seeds for '{verdict}' at this effect")
    return lines


def central_seeds(frame: pd.DataFrame) -> tuple[int, list[str], list[str]]:
    """(seeds, resolved, beyond) of the chapter's central claims (those train.py judged): the seeds train.py's
    compared models should have (`SEED_CAP` when a claim within noise would be resolved at its observed effect by
    that many seeds or fewer, else the most they have), the keys of those claims, and of those that would need more
    than `SEED_CAP` (a seeds x queries interval's bound counts as what it needs)."""
    train = frame[frame["notebook"] == "train"]
    have = int(train["n seeds"].max()) if train["n seeds"].notna().any() else 0
    needs = _needs(train)
    resolved = [str(r["key"]) for r, n, _ in needs if n is not None and n <= SEED_CAP]
    beyond = [str(r["key"]) for r, n, _ in needs if n is None or n > SEED_CAP]
    return (max(have, SEED_CAP) if resolved else have), resolved, beyond


def central_line(frame: pd.DataFrame) -> str:
    """`central_seeds` in one line (a chapter without a train.py has no central claims)."""
    if not (frame["notebook"] == "train").any():
        return "  central claims: none (no train.py judgements)"
    seeds, resolved, beyond = central_seeds(frame)
    return (f"  central claims (train.py): {len(resolved) + len(beyond)} within noise on seed noise; train.py's seeds: "
            f"{seeds} (within {SEED_CAP} seeds at their effect: {', '.join(resolved) or 'none'}; beyond: "
            f"{', '.join(beyond) or 'none'})")


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


def chapter_report(chapter: str, folder: Path, seeds: bool = False) -> tuple[list[str], list[str], dict[str, float]]:
    """(lines to print, failures, figures) of one chapter; with `seeds`, its claims within noise too (`unresolved`)."""
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
    if seeds:
        lines += unresolved(frame) + [central_line(frame)]
    return lines, failures, {"claims": len(specs), "migrated": 1, "judged": len(frame), "paired": paired,
                             "median_width": median}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench claims")
    parser.add_argument("chapters", nargs="*", help="chapters to report (default: every one with a claims.md)")
    parser.add_argument("--results", default="results")
    parser.add_argument("--against", metavar="REV", help="also compare each chapter's verdicts with those committed "
                        "at git revision REV")
    parser.add_argument("--seeds", action="store_true", help="also list the claims within noise on seed noise with "
                        "the seeds a verdict would need at their observed effect")
    args = parser.parse_args(argv)
    root = Path(args.results)
    chapters = args.chapters or sorted(p.parent.name for p in root.glob("*/claims.md"))
    if not chapters:
        raise SystemExit(f"{root}: no <chapter>/claims.md found")
    failures: list[str] = []
    totals = {"claims": 0, "migrated": 0, "judged": 0, "paired": 0}
    changed = 0
    for chapter in chapters:
        lines, failed, figures = chapter_report(chapter, root / chapter, seeds=args.seeds)
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
