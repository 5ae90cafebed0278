"""The paper's words of each claim: what a declared `ClaimSpec` must carry, and whether its quote is verbatim.

    Words(quote, reading, ...)          the words of one claim, declared beside the chapter's claims
    worded(specs, words)                the specs with their words ({key: Words}) set
    PAPERS                              the five papers, by chapter name
    papers_dir(repo)                    <repo>/../shared/papers (or $XMR_PAPERS): the papers' full texts
    normalised(text)                    whitespace collapsed; a hyphen at a line break marked (`BREAK`)
    words_missing(spec)                 "" or which of the quote, the section, the reading the claim lacks
    quote_missing(spec, chapter, texts) "" or why the quote is not verbatim in its paper's text
    words_report(chapter, specs, texts) (one line, failures): how many claims carry the paper's words (`bench claims`)

A quote matches its paper's text up to whitespace and hyphenation line breaks: "sub-\\nembeddings" in the text
matches a quote's "subembeddings" or "sub-embeddings", nothing else.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xmr_core.claims import ClaimSpec

PAPERS = ("pcme", "msrm", "hrem", "dvse", "hmrn")
BREAK = "\x00"  # where the text hyphenated a word at a line break
_HYPHEN_BREAK = re.compile(r"-[ \t]*\n\s*")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Words:
    """The paper's words of one claim: its sentence verbatim (`quote`), how the book's test reads it (`reading`),
    why the test is harder than the words where the book keeps it as its own claim (`stronger_than_paper`), and the
    paper the quote is from where it is not the chapter's own (`paper`)."""

    quote: str
    reading: str
    stronger_than_paper: str = ""
    paper: str = ""


def worded(specs: Sequence[ClaimSpec], words: Mapping[str, Words]) -> list[ClaimSpec]:
    """`specs` with the words of each key of `words` set (a spec whose key `words` lacks is left as it is: the
    tests and `bench claims` report it)."""
    return [dataclasses.replace(s, **dataclasses.asdict(words[s.key])) if s.key in words else s for s in specs]


def papers_dir(repo: Path) -> Path:
    """The folder of the papers' full texts (`<paper>.txt`) beside a clone at `repo`: `<repo>/../shared/papers`, or
    `$XMR_PAPERS` where set (a checkout whose parent holds no shared/, e.g. a git worktree)."""
    return Path(os.environ["XMR_PAPERS"]) if os.environ.get("XMR_PAPERS") else repo.parent / "shared" / "papers"


def normalised(text: str) -> str:
    """`text` with each hyphen at a line break replaced by `BREAK` and every run of whitespace by one space."""
    return _SPACE.sub(" ", _HYPHEN_BREAK.sub(BREAK, text)).strip()


def paper_of(spec: ClaimSpec, chapter: str) -> str:
    """The paper whose words `spec.quote` is: its `paper`, else the chapter's own."""
    return spec.paper or chapter


def words_missing(spec: ClaimSpec) -> str:
    """"" when `spec` carries the paper's words (a quote, its section in `source`, a reading); else what it lacks."""
    lacks = [name for name, value in (("quote", spec.quote), ("section", spec.source), ("reading", spec.reading))
             if not value.strip()]
    return f"claim {spec.key!r} has no {', no '.join(lacks)}" if lacks else ""


def quote_missing(spec: ClaimSpec, chapter: str, texts: Mapping[str, str]) -> str:
    """"" when `spec.quote` occurs verbatim in its paper's text (`texts` {paper: full text}, up to whitespace and
    hyphenation line breaks); else why not."""
    paper = paper_of(spec, chapter)
    if paper not in texts:
        return f"claim {spec.key!r}: no text of paper {paper!r} (papers: {sorted(texts)})"
    quote, text = normalised(spec.quote), normalised(texts[paper])
    if not quote or BREAK in quote:
        return f"claim {spec.key!r}: empty quote or a hyphen at a line break inside it"
    if quote in text.replace(BREAK, "") or quote in text.replace(BREAK, "-"):
        return ""
    return f"claim {spec.key!r}: its quote is not verbatim in {paper}.txt: {spec.quote[:80]!r}"


def read_papers(folder: Path) -> dict[str, str]:
    """{paper: full text} of every `PAPERS` text in `folder` (those present)."""
    return {p: (folder / f"{p}.txt").read_text(encoding="utf-8") for p in PAPERS if (folder / f"{p}.txt").is_file()}


def words_report(chapter: str, specs: Sequence[ClaimSpec], texts: Mapping[str, str] | None) -> tuple[str, list[str]]:
    """(one line, failures) of `chapter`'s declared claims: how many carry the paper's words, how many quotes were
    found verbatim in the papers' texts (`texts`; None: the texts are absent, the quotes unchecked), how many tests
    the book keeps as its own stronger claim. A claim without its words, or whose quote is not verbatim, fails."""
    failures = [f"{chapter}: {why}" for why in map(words_missing, specs) if why]
    worded_n = len(specs) - len(failures)
    if texts is None:
        checked = "quotes not checked (no papers' texts beside the clone)"
    else:
        wrong = [f"{chapter}: {why}" for s in specs if s.quote for why in [quote_missing(s, chapter, texts)] if why]
        failures += wrong
        checked = f"{worded_n - len(wrong)} quotes verbatim in the papers"
    stronger = sum(bool(s.stronger_than_paper) for s in specs)
    return (f"  the paper's words: {worded_n} of {len(specs)} claims; {checked}; {stronger} tests stronger than the "
            "paper, kept as the book's own"), failures
