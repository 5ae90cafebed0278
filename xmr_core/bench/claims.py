"""`python -m xmr_core.bench claims [CHAPTER ...]`: the book's claims under the one verdict protocol.

For every chapter with a claims page (`results/<chapter>/claims.md`): its declared claims (`CLAIMS`, a list of
`xmr_core.claims.ClaimSpec` in `xmr_core/chapters/<chapter>.py`), each put through `claims.can_fail`, and its
judged claims (`results/<chapter>/judgements_*.csv`, written by `book.results.write_judgements`): per kind how many
verdicts of each sort, how many verdicts rest on seed scores only (no per-query values) with each one's stated reason
(`seed_only_rows`: the row's, else its declaration's `ClaimSpec.seed_only`) and how many have none, the committed rows re-judged under today's statistics where they suffice (`rejudged`: the
four verdicts, then Holm's adjustment over the chapter, each change named; a peak, trend or universal claim needs its
parts' intervals, which the rows do not hold), how many were paired, the median interval width, and any verdict
other than "not tested" resting on a run that did not converge or collapsed. A chapter that declares no claims yet
is reported as not migrated, with the number of claims its committed claims.md judged by the old rule; one whose
claims.md has more claims than its judgement files as partly migrated.

Per chapter also how many declared claims carry the paper's words (`xmr_core.paper_words`: the quote, its section, the
test's reading), with each quote checked verbatim against the papers' texts where they lie beside the clone
(`<repo>/../shared/papers`).

Exits non-zero when a chapter is not (or partly) migrated, a declared claim fails the can-fail test or lacks the
paper's words (or its quote is not verbatim), a verdict rests on a non-converged or collapsed run, or a verdict on
seed scores only states no reason.

`--seeds` also lists, per chapter, each claim inconclusive on seed noise with the seeds that would resolve it at its
smallest effect of interest or margin (`seeds_to_resolve`; where no number of seeds would, the test size that
would). Then the rule for more seeds (`central_seeds`): a chapter's central claims are those its train.py judges
(the paper's main tables); where one is inconclusive and `SEED_CAP` seeds or fewer would resolve it, train.py's
compared models get `SEED_CAP` seeds; the claims that would need more are named, not chased.

`--calibration` instead simulates each kind under a tie at 3 and 5 seeds at the chapters' noise and prints its
false-decision rates per side and its power (`calibration_lines`); it exits non-zero when a rate is above 5% beyond
the simulation's sampling error.

`--against REV` also compares each chapter with its results committed at git revision REV (e.g. the commit before a
retrain): the verdict counts of both claims pages, and every claim judged at both (by key) whose verdict changed,
with its effect and interval then and now. A page judged by the old rule at REV has no keys: only its counts compare.
"""

from __future__ import annotations

import argparse
import importlib
import io
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from xmr_core.bench._committed import committed_text
from xmr_core.book.diff import committed_files, table_cells
from xmr_core.calibration import LIMIT, chapter_noise, exceeds, rates
from xmr_core.claims import CONFIDENCE, VERDICTS, ClaimSpec, Noise, can_fail, family_sesoi, holm
from xmr_core.paper_words import papers_dir, read_papers, words_report

OLD_ROW = re.compile(r"^\| \d+ \|")
LEGACY = "within noise"  # the verdict pages written before the four verdicts carry for negligible or inconclusive
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
            if verdict == LEGACY:
                counts.setdefault(LEGACY, 0)
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
Z = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))


def _half_width(n_seeds: np.ndarray) -> np.ndarray:
    """The seed level's interval half-width at each of `n_seeds` seeds, in units of the seeds' std:
    t(0.975, n-1) / sqrt(n)."""
    return stats.t.ppf(0.5 + CONFIDENCE / 2, n_seeds - 1) / np.sqrt(n_seeds)


def target(kind: str, metric: str, margin: float) -> tuple[float, str]:
    """(half-width, why) an interval must shrink below to resolve a claim whatever its true effect: the margin of a
    non-inferiority or equivalence claim, else the metric's smallest effect of interest (`claims.family_sesoi`; 0:
    none). An interval narrower than it either clears the bound or lies inside ± it."""
    each = kind.split("(")[-1].rstrip(")").strip()
    if each in ("non-inferiority", "equivalence") and margin > 0:
        return margin, f"the margin {margin:g}"
    sesoi, _ = family_sesoi(metric)
    return sesoi, (f"the smallest effect of interest {sesoi:g}" if sesoi > 0 else "no smallest effect of interest")


def seeds_to_resolve(half_width: float, n_seeds: int, goal: float, seed_share: float = 1.0, n_queries: int = 0
                     ) -> tuple[int | None, int | None]:
    """(seeds, queries): the fewest seeds at which an interval of today's `half_width` over `n_seeds` seeds would be
    narrower than `goal` (the claim's margin or smallest effect of interest, `target`: then it is decided whatever the
    true effect), its seed part (`seed_share` of its variance) shrinking like t(0.975, n-1)/sqrt(n) and its query
    part not at all; None when no number up to `MAX_SEEDS` does. Then `queries`: the test size (queries) whose query
    part alone would be narrower than `goal` (None when seeds suffice or the interval has no query part). A
    projection at the smallest effect that matters, never at the observed effect (that would be post-hoc power)."""
    if goal <= 0 or not math.isfinite(half_width):
        return None, None
    share = 1.0 if not math.isfinite(seed_share) else min(max(seed_share, 0.0), 1.0)
    if half_width < goal:
        return n_seeds, None
    more = np.arange(n_seeds + 1, MAX_SEEDS + 1)
    ratio = _half_width(more) / _half_width(np.array(n_seeds))
    width = half_width * np.sqrt(share * ratio ** 2 + (1 - share))
    enough = more[width < goal]
    if len(enough):
        return int(enough[0]), None
    query_part = half_width * math.sqrt(1 - share)
    return None, (math.ceil(n_queries * (query_part / goal) ** 2) + 1 if n_queries and query_part > 0 else None)


def _needs(frame: pd.DataFrame) -> list[tuple[pd.Series, int | None, int | None, str]]:
    """(row, seeds, queries, goal) of every judgement inconclusive on seed noise (`seeds_to_resolve` at `target`), the
    fewest seeds first (None: more than `MAX_SEEDS`, or no goal)."""
    rows = []
    undecided = (frame["verdict"] == "inconclusive") & frame["noise"].fillna("").str.contains("seeds")
    for _, r in frame[undecided].iterrows():
        margin = 0.0 if pd.isna(r["margin"]) else float(r["margin"])
        goal, why = target(str(r["kind"]), str(r["metric"]), margin)
        share = float(r["seed share"]) if "seed share" in r and pd.notna(r["seed share"]) else (
            1.0 if str(r["noise"]) == "seeds" else math.nan)
        n, q = seeds_to_resolve((r["high"] - r["low"]) / 2, int(r["n seeds"]), goal,
                                1.0 if math.isnan(share) else share, int(r["n queries"]))
        rows.append((r, n, q, why if math.isfinite(share) else why + " (seed share not recorded: seeds only assumed, "
                     "a lower bound)"))
    return sorted(rows, key=lambda row: row[1] or MAX_SEEDS + 1)


def unresolved(frame: pd.DataFrame) -> list[str]:
    """One line per judgement inconclusive on seed noise: the seeds (or, where no number of seeds would, the test
    size) that would resolve it at its smallest effect of interest (`seeds_to_resolve`), the fewest seeds first."""
    lines = []
    for r, n, q, why in _needs(frame):
        if n:
            need = f"{n} seeds"
        elif why.startswith("no smallest"):
            lines.append(f"  inconclusive at {int(r['n seeds'])} seeds: {r['key']}: no seed count, the metric has no "
                         "smallest effect of interest")
            continue
        else:
            need = (f"no number of seeds at {int(r['n queries'])} queries; {q} queries would" if q else
                    f"more than {MAX_SEEDS} seeds")
        lines.append(f"  inconclusive at {int(r['n seeds'])} seeds: {r['key']} {r['effect']:+.3g} [{r['low']:+.3g}, "
                     f"{r['high']:+.3g}] over {r['noise']}: {need} to resolve it at {why}")
    return lines


def central_seeds(frame: pd.DataFrame) -> tuple[int, list[str], list[str]]:
    """(seeds, resolved, beyond) of the chapter's central claims (those train.py judged): the seeds train.py's
    compared models should have (`SEED_CAP` when an inconclusive claim would be resolved at its smallest effect of
    interest by that many seeds or fewer, else the most they have), the keys of those claims, and of those that would
    need more than `SEED_CAP` (or have no smallest effect of interest)."""
    train = frame[frame["notebook"] == "train"]
    have = int(train["n seeds"].max()) if train["n seeds"].notna().any() else 0
    needs = _needs(train)
    resolved = [str(r["key"]) for r, n, _, _ in needs if n is not None and n <= SEED_CAP]
    beyond = [str(r["key"]) for r, n, _, _ in needs if n is None or n > SEED_CAP]
    return (max(have, SEED_CAP) if resolved else have), resolved, beyond


def central_line(frame: pd.DataFrame) -> str:
    """`central_seeds` in one line (a chapter without a train.py has no central claims)."""
    if not (frame["notebook"] == "train").any():
        return "  central claims: none (no train.py judgements)"
    seeds, resolved, beyond = central_seeds(frame)
    return (f"  central claims (train.py): {len(resolved) + len(beyond)} inconclusive on seed noise; train.py's seeds: "
            f"{seeds} (within {SEED_CAP} seeds at their smallest effect of interest: {', '.join(resolved) or 'none'}; "
            f"beyond: {', '.join(beyond) or 'none'})")


# ------------------------------------------------------------------------------------ re-judging committed rows


def approximate_p(row: pd.Series) -> float:
    """The p-value of a committed row's decided verdict, from its interval alone (no bootstrap kept): the normal
    approximation that puts the interval's deciding bound 1.96 standard errors from the effect, so that p < 0.05
    exactly when the interval decides. NaN when undecided or without an interval."""
    effect, low, high = (float(row[c]) for c in ("effect", "low", "high"))
    if not all(map(math.isfinite, (effect, low, high))):
        return math.nan
    margin = 0.0 if pd.isna(row["margin"]) else float(row["margin"])
    each = str(row["kind"]).split("(")[-1].rstrip(")").strip()
    bound = -margin if each == "non-inferiority" else 0.0
    verdict = str(row["verdict"])

    def tail(distance: float, reach: float) -> float:
        return 2 * float(stats.norm.sf(Z * distance / reach)) if reach > 0 else 0.0

    if each == "equivalence":
        if verdict == "held":
            return max(tail(effect + margin, effect - low), tail(margin - effect, high - effect))
        if verdict == "did not hold":
            return tail(effect - margin, effect - low) if effect > margin else tail(-margin - effect, high - effect)
        return math.nan
    if verdict == "held":
        return tail(effect - bound, effect - low)
    if verdict == "did not hold":
        return tail(bound - effect, high - effect)
    if verdict == "negligible":
        s, _ = family_sesoi(str(row["metric"]))
        return max(tail(effect + s, effect - low), tail(s - effect, high - effect))
    return math.nan


def rejudged(frame: pd.DataFrame) -> pd.DataFrame:
    """The committed judgements under today's protocol where their rows suffice: column `now` the verdict (a two-model
    claim's held / did not hold stand, its old "within noise" becomes negligible when the interval lies inside ± the
    metric's smallest effect of interest, else inconclusive), `p` (`approximate_p`) and `after Holm` over the
    chapter's rows; `how` says which rule: "same interval", or "needs its per-side values" for a peak, trend or
    universal claim (its parts' intervals are not in the file: the per-query values live in the run archive, not in
    git), whose `now` is then its committed verdict with "within noise" read as inconclusive."""
    out = frame.copy()
    nows, hows = [], []
    for _, r in frame.iterrows():
        verdict, kind = str(r["verdict"]), str(r["kind"])
        composite = kind.startswith(("peak", "trend", "universal"))
        if verdict == "within noise":
            s, _ = family_sesoi(str(r["metric"]))
            inside = s > 0 and kind == "superiority" and -s < r["low"] and r["high"] < s
            verdict = "negligible" if inside and not composite else "inconclusive"
        nows.append(verdict)
        hows.append("needs its per-side values" if composite and verdict != "not tested" else "same interval")
    out["now"], out["how"] = nows, hows
    ps = [approximate_p(r) if r["how"] == "same interval" else math.nan
          for _, r in out.assign(verdict=out["now"]).iterrows()]
    out["p"] = ps
    out["after Holm"] = holm(ps, list(out["now"]))
    return out


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


def seed_only_rows(frame: pd.DataFrame, specs: Sequence[ClaimSpec]) -> pd.DataFrame:
    """The judgements of `frame` on seed scores only (an interval over the seeds alone, `noise` "seeds": no per-query
    values), with column `why`: the row's "seed-only reason" where its file has one, else the declared claim's
    (`specs`, by key) `ClaimSpec.seed_only`; "" when neither states one."""
    declared_why = {s.key: s.seed_only for s in specs}
    rows = frame[frame["noise"].fillna("") == "seeds"]
    written = rows["seed-only reason"].fillna("") if "seed-only reason" in rows else [""] * len(rows)
    return rows.assign(why=[str(w) or declared_why.get(k, "") for w, k in zip(written, rows["key"])])


def seed_only_lines(chapter: str, rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(lines, failures): how many verdicts rest on seed scores only (`seed_only_rows`) and how many state no reason,
    then each reason with the claims it explains; a failure per verdict without one."""
    unexplained = rows[rows["why"] == ""]
    lines = [f"  seed-only verdicts (no per-query values): {len(rows)}; without a stated reason: {len(unexplained)}"]
    for why, keys in rows.groupby("why", sort=False)["key"]:
        lines.append(f"    {', '.join(keys)}: {why or 'NO REASON STATED'}")
    failures = [f"{chapter}: claim {k!r} is judged on seed scores only and states no reason (`ClaimSpec.seed_only`)"
                for k in unexplained["key"]]
    return lines, failures


def rejudged_lines(frame: pd.DataFrame) -> list[str]:
    """The chapter's counts by the four verdicts as committed and re-judged (`rejudged`), then after Holm's
    adjustment over the chapter, each verdict the re-judging or Holm changes named."""
    def counts(col: str) -> str:
        return ", ".join(f"{int((frame[col] == v).sum())} {v}" for v in VERDICTS)

    lines = [f"  re-judged from the committed rows: {counts('now')}",
             (f"  after Holm over the chapter's {int(frame['now'].ne('not tested').sum())} tested claims: "
              f"{counts('after Holm')}")]
    changed = frame[frame["verdict"] != frame["now"]]
    lines += [f"  relabelled {r['key']}: {r['verdict']} -> {r['now']} [{r['low']:+.3g}, {r['high']:+.3g}]"
              for _, r in changed.iterrows()]
    lines += [f"  Holm changes {r['key']}: {r['now']} (p {r['p']:.3g}) -> {r['after Holm']}"
              for _, r in frame[frame["now"] != frame["after Holm"]].iterrows()]
    stale = frame[frame["how"] != "same interval"]
    if len(stale):
        lines.append(f"  {len(stale)} peak/trend/universal verdicts need their per-side values to be re-judged (the "
                     f"run archive, not in git): {', '.join(stale['key'])}")
    return lines


def chapter_report(chapter: str, folder: Path, seeds: bool = False) -> tuple[list[str], list[str], dict[str, float]]:
    """(lines to print, failures, figures) of one chapter; with `seeds`, its inconclusive claims too (`unresolved`)."""
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
    papers = papers_dir(Path(__file__).resolve().parents[2])
    words, unworded = words_report(chapter, specs, read_papers(papers) if papers.is_dir() else None)
    lines.append(words)
    failures += unworded
    frame = judged(folder)
    n_old = max(n_page - len(frame), 0)  # the page's claims that no judgement file accounts for
    if n_old:
        failures.append(f"{chapter}: partly migrated: {n_old} claims in its committed claims.md judged by the old rule")
    if frame.empty:
        lines.append("  no judgements yet (results/<chapter>/judgements_*.csv): run the chapter")
        return lines, failures, {"claims": len(specs), "migrated": 1, "judged": 0}
    for kind, rows in frame.groupby("kind", sort=False):
        counts = ", ".join(f"{int((rows['verdict'] == v).sum())} {v}" for v in (*VERDICTS, LEGACY)
                           if (rows["verdict"] == v).any())
        lines.append(f"  {kind}: {len(rows)} ({counts})")
    seed_only = seed_only_rows(frame, specs)
    seeds_lines, seeds_failed = seed_only_lines(chapter, seed_only)
    lines += seeds_lines
    failures += seeds_failed
    now = rejudged(frame)
    lines += rejudged_lines(now)
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
        current = now.assign(verdict=now["now"])
        lines += unresolved(current) + [central_line(current)]
    return lines, failures, {"claims": len(specs), "migrated": 1, "judged": len(frame), "paired": paired,
                             "median_width": median, "seed_only": len(seed_only),
                             "seed_only_unexplained": int((seed_only["why"] == "").sum())}


# ------------------------------------------------------------------------------------ calibration


def calibration_specs(margin: float) -> list[ClaimSpec]:
    """One claim of each kind, the sweep kinds at the book's sizes (trends over 3 and 5 points, peaks over 3, 4
    and 6), on a pp metric; `margin` for the kinds that have one."""
    pts = [tuple(f"x{i}" for i in range(n)) for n in (3, 4, 5, 6)]
    metric = "simulated score, pp"
    return [ClaimSpec("superiority", "a > b", "-", "superiority", metric, ("a", "b")),
            ClaimSpec("non-inferiority", "a >= b - m", "-", "non-inferiority", metric, ("a", "b"), margin=margin),
            ClaimSpec("equivalence", "|a - b| < m", "-", "equivalence", metric, ("a", "b"), margin=margin),
            ClaimSpec("trend 3", "rises", "-", "trend", metric, pts[0]),
            ClaimSpec("trend 5", "rises", "-", "trend", metric, pts[2]),
            ClaimSpec("peak 3", "x0 best", "-", "peak", metric, pts[0], peak="x0"),
            ClaimSpec("peak 4", "x0 best", "-", "peak", metric, pts[1], peak="x0"),
            ClaimSpec("peak 6", "x0 best", "-", "peak", metric, pts[3], peak="x0"),
            ClaimSpec("universal 3", "a > each", "-", "universal", metric, pairs=(("a", "b"), ("a", "c"), ("a", "d")))]


def null_effect(spec: ClaimSpec) -> float:
    """The effect at which both of `spec`'s decisions are wrong: 0 (a tie), or the margin's edge (non-inferiority at
    -margin, equivalence at +margin)."""
    return {"non-inferiority": -spec.margin, "equivalence": spec.margin}.get(spec.kind, 0.0)


def calibration_lines(noises: Sequence[Noise], n_claims: int) -> tuple[list[str], list[str]]:
    """(lines, failures): per noise and kind, at 3 and 5 seeds, the share of `n_claims` simulated claims judged
    held and did not hold at the null (`null_effect`: both are false decisions; a failure where either is above 5%
    beyond the simulation's sampling error, `calibration.exceeds`), and the power ("held") at an effect of 3
    seed-mean sds."""
    lines, failures = [], []
    for noise in noises:
        lines.append(f"calibration on {noise.source or noise}: seed-mean sd {noise.mean_sd:.3g}; {n_claims} simulated "
                     "claims a cell; false held / false did not hold at the null; power at 3 sd")
        for i, spec in enumerate(calibration_specs(margin=2 * noise.mean_sd)):
            cells = []
            for n_seeds in (3, 5):  # every cell its own generator: the kinds' rows are independent draws
                null = rates(spec, noise, n_seeds, n_claims, effect=null_effect(spec), seed=10 * i + n_seeds)
                power = (rates(spec, noise, n_seeds, n_claims, effect=3 * noise.mean_sd, seed=1000 + 10 * i + n_seeds)["held"]
                         if spec.kind != "equivalence" else math.nan)
                cells.append(f"{n_seeds} seeds {null['held']:.1%} / {null['did not hold']:.1%}, power "
                             + (f"{power:.0%}" if math.isfinite(power) else "- (holds at a tie)"))
                for side in ("held", "did not hold"):
                    if exceeds(null[side], n_claims):
                        failures.append(f"calibration: {spec.key} at {n_seeds} seeds on {noise.source or noise}: "
                                        f"{side} {null[side]:.1%} of {n_claims}, above {LIMIT:.0%} beyond sampling "
                                        "error at the null")
            lines.append(f"  {spec.key:16} " + "; ".join(cells))
    lines.append("  power at the paper's effect: none (no claim declaration links a numeric effect of the paper yet)")
    return lines, failures


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench claims")
    parser.add_argument("chapters", nargs="*", help="chapters to report (default: every one with a claims.md; with "
                        "--calibration, those whose noise to simulate, 'none' for seed scores only)")
    parser.add_argument("--results", default="results")
    parser.add_argument("--against", metavar="REV", help="also compare each chapter's verdicts with those committed "
                        "at git revision REV")
    parser.add_argument("--seeds", action="store_true", help="also list the inconclusive claims on seed noise with the "
                        "seeds (or queries) that would resolve them at their smallest effect of interest")
    parser.add_argument("--calibration", action="store_true", help="only simulate: each kind's false-decision rates "
                        "per side at 3 and 5 seeds at the chapters' noise, and its power")
    parser.add_argument("--sims", type=int, default=1000, help="simulated claims per calibration cell (a true 3%% prints "
                        "above 5%% one time in 50 at 300, one in 4,000 at 1,000)")
    args = parser.parse_args(argv)
    root = Path(args.results)
    if args.calibration:
        chapters = args.chapters or sorted(p.parent.name for p in root.glob("*/per_seed.csv"))
        noises = [Noise(1.0, source="seed scores only (sd 1)")] + [chapter_noise(root, c) for c in chapters
                                                                    if c != "none"]
        failures = []
        for noise in noises:  # one noise at a time, printed as it is done
            lines, failed = calibration_lines([noise], args.sims)
            print("\n".join(lines[:-1]), flush=True)
            failures += failed
        print(lines[-1])
        if failures:
            print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures))
        print(f"calibration cells={len(noises) * len(calibration_specs(1.0)) * 2} sims={args.sims} "
              f"failures={len(failures)}")
        if failures:
            sys.exit(1)
        return
    chapters = args.chapters or sorted(p.parent.name for p in root.glob("*/claims.md"))
    if not chapters:
        raise SystemExit(f"{root}: no <chapter>/claims.md found")
    failures: list[str] = []
    totals = {"claims": 0, "migrated": 0, "judged": 0, "paired": 0, "seed_only": 0, "seed_only_unexplained": 0}
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
          f"judged={totals['judged']} paired={totals['paired']} seed_only={totals['seed_only']} "
          f"seed_only_unexplained={totals['seed_only_unexplained']} failures={len(failures)}"
          + (f" against={args.against} changed={changed}" if args.against else ""))
    if failures:
        sys.exit(1)
