"""The training sources the cpu book's runs were trained by: an edit to one (`runs.log.is_training`) makes the cached
and archived runs it computes count as "trained by other code" (`runs.identity.code_problem`: every run for a shared
file, one method's runs for its own file), which `xmr runs pack` refuses, so such an edit must be a decision (a
retrain of those runs), never an accident."""

from __future__ import annotations

from xmr_core.runs import log as runlog

# `runs.log.source_fingerprint()` of the sources the cpu book is retrained by: each run's result.json records it as
# trained_at.source. Update it only with a retrain of the book on the new sources. Last changed by the layout move
# (issue 75: `train.py` -> `runs/train.py` with `RunRequest` folded in, `distributed.py` -> `runs/distributed.py`, the
# frozen inputs' run-log writer in `io`, `project_root` in `config`), which renames and edits training sources, so every
# run counts as other code until the retrain that follows it.
BOOK_TRAINING_SOURCE = "eb84e695595f7ae90f7239a9f190067705724f2ccc48941247fc18c90e028664"


def test_the_training_sources_are_those_the_cpu_book_was_trained_by() -> None:
    here = runlog.source_fingerprint()
    assert here == BOOK_TRAINING_SOURCE, (
        f"the training sources changed (fingerprint {here[:12]}; the cpu book's runs: {BOOK_TRAINING_SOURCE[:12]}), so "
        "the runs of every method these sources compute count as other code for `xmr runs pack` "
        "(`runs.identity.code_problem`): revert, or retrain those runs on the change (docs/training.md, 'The book's runs, "
        "retrained from an empty cache') and then update this pin")
