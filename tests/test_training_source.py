"""The training sources the cpu book's runs were trained by: an edit to one (`runlog.is_training`) makes every cached
and archived run count as "trained by other code" (`runlog.code_problem`), which `xmr runs pack` refuses, so such
an edit must be a decision (a retrain of the book), never an accident."""

from __future__ import annotations

from xmr_core import runlog

# `runlog.source_fingerprint()` as the cpu book's runs record it (each result.json's trained_at.source, 264 runs of
# the cache on 2026-11-27): update it only with the book's retrain on the new sources.
BOOK_TRAINING_SOURCE = "95f7bc79966bf4bb15848287b2b3cf4b8db717928365887323dfd8dbaf752079"


def test_the_training_sources_are_those_the_cpu_book_was_trained_by() -> None:
    here = runlog.source_fingerprint()
    assert here == BOOK_TRAINING_SOURCE, (
        f"the training sources changed (fingerprint {here[:12]}; the cpu book's runs: {BOOK_TRAINING_SOURCE[:12]}), so "
        "every trained run now counts as other code for `xmr runs pack`: revert, or list the fix in docs/training.md "
        "('Waiting for the next retrain') until the book is retrained on it, then update this pin")
