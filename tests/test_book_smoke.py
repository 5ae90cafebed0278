"""Chapter smoke runs: `xmr book run --profile smoke` of every chapter (marker `book`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from xmr_core.book import runner as book
from xmr_core.book.plan import committed_records
from xmr_core.book.results import SMOKE_RESULTS_DIR
from xmr_core.claims import VERDICTS
from xmr_core.runs.fits import FITS_DIR

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = list(book.chapters(ROOT / "book"))


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    """Generated data and trained runs go to a fresh cache, so every code path runs (nothing is reused
    from a developer's cache), shared by the chapters of this session; an earlier smoke run's fit summaries, which
    would stand in for runs the fresh cache lacks (`runs.fits`), are removed."""
    shutil.rmtree(committed_records("smoke") / FITS_DIR, ignore_errors=True)
    old = os.environ.get("XMR_CACHE")
    os.environ["XMR_CACHE"] = str(tmp_path_factory.mktemp("xmr_cache"))
    yield
    if old is None:
        os.environ.pop("XMR_CACHE")
    else:
        os.environ["XMR_CACHE"] = old


@pytest.mark.book
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_runs_under_smoke(chapter: str) -> None:
    lines: list[str] = []
    summary = book.run_book([chapter], profile="smoke", force=True, root=ROOT, echo=lines.append)
    assert summary.ok, "\n".join(lines)
    assert summary.count("passed") == len(book.chapters(ROOT / "book")[chapter])
    # the chapter's claims page gives every claim one of the four verdicts
    for claims in (ROOT / SMOKE_RESULTS_DIR).glob("*/claims.md"):
        rows = [line for line in claims.read_text().splitlines() if line.startswith("| ") and not line.startswith("| #")]
        assert rows, f"{claims}: no claims"
        for line in rows:
            assert any(f"**{v}**" in line for v in VERDICTS), f"{claims}: no verdict in {line}"
