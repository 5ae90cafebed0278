"""The paper's words of every declared claim (`xmr_core.paper_words`): present, verbatim in the paper's text, and the
two FR-on-any-model verdicts naming each other."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from xmr_core.claims import ClaimSpec
from xmr_core.paper_words import (
    BREAK,
    PAPERS,
    Words,
    normalised,
    papers_dir,
    quote_missing,
    read_papers,
    worded,
    words_missing,
    words_report,
)

CHAPTERS = ("pcme", "msrm", "hrem", "dvse", "hmrn", "leaderboard")
REPO = Path(__file__).resolve().parents[1]


def _claims(chapter: str) -> list[ClaimSpec]:
    return list(importlib.import_module(f"xmr_core.chapters.{chapter}").CLAIMS)


def _spec(quote: str, paper: str = "") -> ClaimSpec:
    return ClaimSpec("k", "a claim", "Sec. 1", "superiority", "m", ("A", "B"), quote=quote, paper=paper,
                     reading="A above B")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_claim_carries_the_papers_words(chapter: str) -> None:
    specs = _claims(chapter)
    assert [words_missing(s) for s in specs] == [""] * len(specs)
    module = importlib.import_module(f"xmr_core.chapters.{chapter}")
    assert set(module.WORDS) == {s.key for s in specs}  # no words left over for a claim no longer declared
    for s in specs:  # the words are the paper's, the reading and the stronger label the book's
        assert s.quote != s.text and s.reading.strip() and (s.paper in ("", *PAPERS))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_quote_is_verbatim_in_its_papers_text(chapter: str) -> None:
    folder = papers_dir(REPO)
    if not folder.is_dir():
        pytest.skip(f"no papers' texts at {folder} (CI has shared/ beside the clone; set XMR_PAPERS elsewhere)")
    texts = read_papers(folder)
    specs = _claims(chapter)
    assert [quote_missing(s, chapter, texts) for s in specs] == [""] * len(specs)


def test_a_quote_matches_up_to_whitespace_and_hyphenation_line_breaks_only() -> None:
    text = "We observe that the sub-\nembeddings  are\n  decorrelated, as Fig. 6\nshows.\nAnother sentence."
    texts = {"dvse": text}
    assert normalised(text).count(BREAK) == 1
    for quote in ("the subembeddings are decorrelated", "the sub-embeddings are decorrelated, as Fig. 6 shows.",
                  "We observe  that\tthe"):
        assert quote_missing(_spec(quote), "dvse", texts) == "", quote
    for quote in ("the sub embeddings are", "the sub-embeddings were decorrelated", "as Fig. 7 shows", ""):
        assert quote_missing(_spec(quote), "dvse", texts), quote
    assert "no text of paper 'pcme'" in quote_missing(_spec("We observe", "pcme"), "dvse", texts)


def test_words_are_set_by_key_and_a_claim_without_them_is_reported() -> None:
    bare = _spec("")
    specs = worded([bare, ClaimSpec("j", "b", "Sec. 2", "superiority", "m", ("A", "B"))],
                   {"k": Words("We observe that", "A above B", stronger_than_paper="why")})
    assert (specs[0].quote, specs[0].stronger_than_paper) == ("We observe that", "why")
    assert words_missing(specs[1]) == "claim 'j' has no quote, no reading"
    line, failures = words_report("dvse", specs, {"dvse": "We observe that it holds."})
    assert failures == ["dvse: claim 'j' has no quote, no reading"]
    assert line.startswith("  the paper's words: 1 of 2 claims; 1 quotes verbatim") and "1 tests stronger" in line
    line, failures = words_report("dvse", specs[:1], None)
    assert failures == [] and "quotes not checked" in line


def test_the_two_verdicts_on_fr_improving_any_model_name_each_other() -> None:
    dvse = next(s for s in _claims("dvse") if s.key == "fr-improves-any-model")
    board = next(s for s in _claims("leaderboard") if s.key == "fr-improves-any")
    assert dvse.quote == board.quote and board.paper == "dvse"
    assert "`fr-improves-any`" in dvse.stronger_than_paper and "`fr-improves-any-model`" in board.reading
    assert "fixed" in dvse.stronger_than_paper + dvse.reading and "tuned" in board.reading


def test_the_claims_pages_show_the_words_and_the_margins_source() -> None:
    from xmr_core.claims import Evidence, claim_rows, judge, judgements_frame, render_claims

    spec = next(s for s in _claims("dvse") if s.key == "dvse-r1-similar-to-pvse")
    ev = {m: Evidence((0, 1, 2), [40.0 + d, 40.5 + d, 39.5 + d]) for m, d in (("DVSE", 1.0), ("PVSE K=4", 0.0))}
    judged = [judge(spec, ev)]
    row = judgements_frame(judged).iloc[0]
    assert (row["quote"], row["reading"], row["paper"]) == (spec.quote, spec.reading, "")
    assert row["margin source"] == spec.margin_from.describe() and row["margin"] == spec.margin
    cell = claim_rows(judged)["claim"].iloc[0]
    assert cell.startswith(spec.text) and f"“{spec.quote}”" in cell and spec.reading in cell
    assert f"“{spec.quote}”" in render_claims(judged, "dvse", profile="cpu", dataset="scenes")
    stronger = next(s for s in _claims("dvse") if s.key == "dvse-best-set-based")
    assert "Stronger than the paper: the words say competitive or better" in \
        claim_rows([judge(stronger, {})])["claim"].iloc[0]
