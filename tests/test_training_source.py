"""The training sources the cpu book's runs were trained by: an edit to one (`runlog.is_training`) makes the cached
and archived runs it computes count as "trained by other code" (`runidentity.code_problem`: every run for a shared
file, one method's runs for its own file), which `xmr runs pack` refuses, so such an edit must be a decision (a
retrain of those runs), never an accident."""

from __future__ import annotations

from xmr_core import runlog

# `runlog.source_fingerprint()` of the sources the cpu book is retrained by from an empty cache (begun 2026-11-28, with
# patience never stopping a run in the first half of its schedule, after the machine that held the runs of the
# 2026-11-27 retrain was replaced): each run's result.json records it as trained_at.source. Update it only with a
# retrain of the book on the new sources.
BOOK_TRAINING_SOURCE = "a7fed0601d9631216961cc025dae8bf1ef474c150a7e0715c93a695f48cb0245"


def test_the_training_sources_are_those_the_cpu_book_was_trained_by() -> None:
    here = runlog.source_fingerprint()
    assert here == BOOK_TRAINING_SOURCE, (
        f"the training sources changed (fingerprint {here[:12]}; the cpu book's runs: {BOOK_TRAINING_SOURCE[:12]}), so "
        "the runs of every method these sources compute count as other code for `xmr runs pack` "
        "(`runidentity.code_problem`): revert, or retrain those runs on the change (docs/training.md, 'The book's runs, "
        "retrained from an empty cache') and then update this pin")
