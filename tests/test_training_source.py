"""The training sources the cpu book's runs were trained by: an edit to one (`runs.log.is_training`) makes the cached
and archived runs it computes count as "trained by other code" (`runs.identity.code_problem`: every run for a shared
file, one method's runs for its own file), which `xmr runs pack` refuses, so such an edit must be a decision (a
retrain of those runs), never an accident."""

from __future__ import annotations

from xmr_core.runs import log as runlog

# `runs.log.source_fingerprint()` of the sources the cpu book is retrained by: each run's result.json records it as
# trained_at.source. Update it only with a retrain of the book on the new sources. Last changed on 2026-12-07 by the
# changes that land before the retrain (issue 76): the layout move (issue 75), the AdamP step in fewer passes
# (`optim.ForeachAdamP`, issue 74), the paper profile's folds by image, views per data set, features on the device
# and trunk keys by weights (issues 71, 77). The runs behind the committed results were lost with their machines
# before these changes, so no cached run is invalidated that exists; the retrain trains on these sources.
# Changed again before the retrain by issue 74's faster scoring: SCAN's scores in caption-length blocks from one
# matrix product (its training scores too: the same up to float reordering), HMRN's last reasoning step computing
# only the global node it outputs (the same up to float reordering), and `fit`'s validation loaders built once a
# run (validation faster, the same numbers bit for bit).
# And (issue 74, before the retrain): the BiGRU caption encoder steps its GRU through `encoders.gru.packed_gru` on the
# CPU, the module's outputs and gradients bit for bit (`tests/test_gru.py`) with a backward linear in the caption
# length: what a run computes is unchanged, only the sources' bytes. Then by HREM's cheaper steps (issue 74; every
# HREM run's result bit for bit the same, measured on the bench's HREM fusion run: the same best score and weights'
# fingerprint after 2 epochs): fragment matching on the real words only, test-time captions embedded in groups of
# similar length.
# And (issue 76, before the retrain) by the cpu profile's larger test splits (`data/scenes.py`: single 5,000 test
# images, multi 2,000): the test split's data change, so every run's data fingerprint (its key) changes; the train
# and validation splits, each generated from its own seed stream, are byte for byte the same, so what a run trains on
# does not change.
# And before the retrain by issue 71's run plan (trace mode only, nothing a run computes): `train.fit` in
# trace mode records each run's items an epoch and can time a step (`epoch_items`, `step_seconds`, `_train_loader`'s
# given batches), and `trunk.attach_grid_features(stand_in=True)` attaches zeros for features it does not extract;
# and `image.ResNetEncoder` without ImageNet weights zero-scales its residual branches as the trunk without them did
# (only the paper profiles' runs fine-tuning a ResNet without ImageNet weights compute otherwise: none was kept).
BOOK_TRAINING_SOURCE = "41a5257bcdd2f823959a698df25be8ed5e1c8d32d7b5ac5aff010ea8c7818d0e"


def test_the_training_sources_are_those_the_cpu_book_was_trained_by() -> None:
    here = runlog.source_fingerprint()
    assert here == BOOK_TRAINING_SOURCE, (
        f"the training sources changed (fingerprint {here[:12]}; the cpu book's runs: {BOOK_TRAINING_SOURCE[:12]}), so "
        "the runs of every method these sources compute count as other code for `xmr runs pack` "
        "(`runs.identity.code_problem`): revert, or retrain those runs on the change (docs/training.md, 'The book's runs, "
        "retrained from an empty cache') and then update this pin")
