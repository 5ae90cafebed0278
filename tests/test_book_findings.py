"""The book's generated findings, result tables, leaderboard ranking and claims pages, against hand-derived text."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from xmr_core.book.findings import chapter_judgements, findings_html, findings_page, sentences, tally_html
from xmr_core.book.html import claims_page
from xmr_core.book.leaderboard import ranking, t_interval
from xmr_core.book.staleness import Verdict
from xmr_core.book.static import split_opening
from xmr_core.book.tables import columns, is_diagnostic, parts, result_table_html, table_html

ROOT = Path(__file__).resolve().parents[1]
HELD = '<span class="xmr-verdict xmr-v-held">held</span>'
NOT_HELD = '<span class="xmr-verdict xmr-v-did-not-hold">did not hold</span>'
NOISE = '<span class="xmr-verdict xmr-v-within-noise">within noise</span>'
UNTESTED = '<span class="xmr-verdict xmr-v-not-tested">not tested</span>'


def _judgements(folder: Path) -> Path:
    columns = ["key", "claim", "effect of", "effect", "low", "high", "confidence", "verdict", "reason"]
    train = pd.DataFrame([
        ["a", "A beats B.", "A − B", 1.5, 0.5, 2.5, 0.95, "held", "interval above 0"],
        ["b", "Sigma rises.", "smallest step", -0.004, -0.006, -0.002, 0.95, "did not hold", "interval below 0"],
        ["d", "Beats P2RM.", "", math.nan, math.nan, math.nan, math.nan, "not tested", "needs P2RM"],
    ], columns=columns)
    ablate = pd.DataFrame([["c", "C helps.", "C − no C", 0.25, -1.0, 1.5, 0.9, "within noise", "spans 0"]],
                          columns=columns)
    folder.mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "judgements_train.csv", index=False)
    ablate.to_csv(folder / "judgements_ablate.csv", index=False)
    return folder


def test_findings_sentences_from_judgements(tmp_path: Path) -> None:
    frame = chapter_judgements(_judgements(tmp_path / "demo"))
    assert list(frame["notebook"]) == ["train", "train", "train", "ablate"]  # train before ablate
    train = frame[frame["notebook"] == "train"]
    assert sentences(train) == [
        f"{HELD} 1 of 3: “A beats B.” (A − B: +1.50 [+0.50, +2.50] (95% interval)).",
        # two significant digits of the largest magnitude (0.006): four decimals
        f"{NOT_HELD} 1 of 3: “Sigma rises.” (smallest step: -0.0040 [-0.0060, -0.0020] (95% interval)).",
        f"{UNTESTED} 1 of 3: “Beats P2RM.” (needs P2RM).",
    ]
    # claims.VERDICTS' order first; a label it does not know (the committed pages' legacy "within noise") after
    assert tally_html(frame) == (
        '4 claims: <span class="xmr-verdict xmr-v-held">1 held</span> <span class="xmr-verdict '
        'xmr-v-did-not-hold">1 did not hold</span> <span class="xmr-verdict xmr-v-not-tested">1 not tested'
        '</span> <span class="xmr-verdict xmr-v-within-noise">1 within noise</span>')
    block = findings_html(frame, "ablate", "claims.html")
    assert "(judged by part: train 3, ablate 1)" in block
    assert f"{NOISE} 1 of 1: “C helps.” (C − no C: +0.25 [-1.00, +1.50] (90% interval))." in block
    assert "A beats B." not in block  # the train claims are on the train page
    assert '<a href="claims.html">the claims page</a>' in block
    assert "central claims" in findings_html(frame, "train", None) and "claims page" not in findings_html(
        frame, "train", None)
    assert "judges no claim of a paper" in findings_html(chapter_judgements(tmp_path / "none"), "train", None)


def test_a_new_verdict_name_is_read_from_the_data(tmp_path: Path) -> None:
    folder = _judgements(tmp_path / "demo")
    frame = pd.read_csv(folder / "judgements_ablate.csv")
    frame.loc[0, "verdict"] = "a new verdict"  # a name claims.VERDICTS does not list
    frame["quote"] = ["“C improves retrieval”"]
    frame.to_csv(folder / "judgements_ablate.csv", index=False)
    judged = chapter_judgements(folder)
    assert '<span class="xmr-verdict xmr-v-a-new-verdict">1 a new verdict</span>' in tally_html(judged)
    page = findings_page([("01_demo", judged, "01_demo/claims.html"), ("00_none", judged.iloc[:0], None)],
                         "_static/findings.js")
    assert "<th>the paper&#x27;s words</th>" in page and "“C improves retrieval”" in page
    assert page.count('<tr data-chapter="01_demo"') == 4
    assert 'data-verdict="a new verdict"' in page and '<option value="a new verdict">' in page
    assert '<script src="_static/findings.js"></script>' in page
    # the tally row of the demo chapter: 4 claims; a column per verdict in the data (none is within noise now):
    # held, did not hold, not tested (claims.VERDICTS' order), then the one it does not list
    assert ('<td><a href="01_demo/claims.html">01_demo</a></td><td class="xmr-num">4</td><td class="xmr-num">1</td>'
            '<td class="xmr-num">1</td><td class="xmr-num">1</td><td class="xmr-num">1</td></tr>' in page)
    assert page.index('<th><span class="xmr-verdict xmr-v-not-tested">') < page.index(
        '<th><span class="xmr-verdict xmr-v-a-new-verdict">')
    assert "xmr-v-within-noise" not in page


def test_table_cells_merge_paper_ours_std_and_never_read_nan() -> None:
    frame = pd.DataFrame({
        "model": ["Bayes ceiling", "VSE0"], "seeds": [0, 5],
        "R@1 (paper)": [math.nan, 44.2], "R@1 (scenes)": [96.3, 90.86206], "R@1 std": [math.nan, 0.19276],
        "rSum % of ceiling": [100.0, 79.93550]})
    cols, merged = columns(frame)
    assert merged
    assert [c.header for c in cols] == ["model", "seeds", "R@1", "rSum % of ceiling"]
    assert cols[2].cells == ["— · 96.3", "44.2 · 90.9 ± 0.2"]
    assert cols[1].cells == ["0", "5"] and cols[3].cells == ["100.0", "79.9"]
    html = table_html(frame)
    assert "nan" not in html.lower() and "paper&#x27;s value · ours ± std" in html


def test_wide_tables_split_into_parts_repeating_labels_and_ceiling_share() -> None:
    frame = pd.DataFrame({"model": ["a"], **{f"m{i} (paper)": [1.0] for i in range(6)},
                          **{f"m{i} (scenes)": [12.345] for i in range(6)}, **{f"m{i} std": [0.5] for i in range(6)},
                          "% of ceiling": [50.0]})
    cols, _ = columns(frame)
    # each merged cell "1.0 · 12.3 ± 0.5" is 16 characters, +2: 18; "model" 5 + 2, "% of ceiling" (its longest
    # word, "ceiling") 7 + 2: 16 in every part, leaving 44 of 60 for two merged columns a part
    split = parts(cols, width=60)
    assert [[c.header for c in p] for p in split] == [
        ["model", "% of ceiling", "m0", "m1"], ["model", "% of ceiling", "m2", "m3"],
        ["model", "% of ceiling", "m4", "m5"]]
    assert len(parts(cols, width=1000)) == 1


def test_diagnostics_are_folded(tmp_path: Path) -> None:
    assert is_diagnostic("pcme/tuning", 3) and is_diagnostic("hrem/table3_per_seed", 3)
    assert is_diagnostic("hmrn/ceiling", 400) and is_diagnostic("msrm/table4_runs", 12)
    assert is_diagnostic("hmrn/sweeps_lambda_tau", 39) and not is_diagnostic("hmrn/table5", 14)
    assert not is_diagnostic("pcme/table2", 6) and is_diagnostic("pcme/table2", 41)
    csv = tmp_path / "tuning.csv"
    pd.DataFrame({"lr": [0.001, 0.0001], "rsum": [300.0, math.nan]}).to_csv(csv, index=False)
    html = result_table_html(csv, "demo/tuning", "Tuning runs.")
    assert html.startswith('<details class="xmr-result xmr-diagnostic"><summary>Diagnostic: <code>tuning</code>'
                           " (2 rows × 2 columns)")
    assert "<td class=\"xmr-num\">0.0010</td>" in html and "<td class=\"xmr-num\">—</td>" in html


def test_t_interval_by_hand() -> None:
    mean, low, high = t_interval(pd.Series([1.0, 2.0, 3.0]))
    half = 4.302652729911275 / math.sqrt(3)  # t(0.975, 2) from a t table, sd = 1
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert math.isnan(t_interval(pd.Series([5.0]))[1])


def test_ranking_of_the_committed_leaderboard_matches_its_table() -> None:
    per_seed = pd.read_csv(ROOT / "results" / "leaderboard" / "per_seed.csv")
    board = pd.read_csv(ROOT / "results" / "leaderboard" / "leaderboard.csv").set_index("model")
    ranked = ranking(per_seed)
    assert list(ranked["share"]) == sorted(ranked["share"], reverse=True)
    assert len(ranked) == board.index.str.endswith(" + FR").sum()  # one row per model, FR as columns
    for _, row in ranked.iterrows():  # the notebook's own means, computed there from the same runs
        assert row["share"] == pytest.approx(board.loc[row["model"], "% of ceiling"])
        assert row["share + FR"] == pytest.approx(board.loc[f"{row['model']} + FR", "% of ceiling"])
        assert row["low"] < row["share"] < row["high"]


def test_opening_is_title_citation_and_summary() -> None:
    text = "# Title\n\n*Paper*, 2021.\n\nIt does\nthis and that.\n\n- Table 2\n\nMore."
    assert split_opening(text) == ("# Title\n\n*Paper*, 2021.\n\nIt does\nthis and that.", "- Table 2\n\nMore.")
    assert split_opening("# Title\n\nOne line.") == ("# Title\n\nOne line.", "")


def test_claims_page_has_provenance_tally_and_stale_banner(tmp_path: Path) -> None:
    frame = chapter_judgements(_judgements(tmp_path / "demo"))
    text = "# Claims of demo\n\nIntro.\n\n| # | claim | verdict |\n|---|---|---|\n| 1 | A beats B. | **held** |\n"
    meta = {"key": "demo/claims.md", "profile": "cpu", "dataset": "scenes", "git_commit": "0123456789abcdef"}
    page = claims_page(text, meta, Verdict("stale", ("xmr_core/chapters/demo.py",)), frame)
    lines = page.splitlines()
    assert lines[0] == "# Claims of demo"
    assert lines[2].startswith('<p class="xmr-provenance"><strong>results/demo/claims.md</strong> · profile '
                               "<code>cpu</code> · dataset <code>scenes</code> · commit <code>0123456789ab</code>")
    assert lines[4:8] == [":::{admonition} Stale result", ":class: warning xmr-stale",
                          ("**Stale**: its inputs changed since it was written (`xmr_core/chapters/demo.py`);"
                           " rerun its notebook."), ":::"]
    assert f"| 1 | A beats B. | {HELD} |" in page
    assert "xmr-stale" not in claims_page(text, meta, Verdict("fresh"), frame)
