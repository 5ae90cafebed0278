"""`python -m xmr_core.bench throughput`'s executor (`train_plan`): where each run is trained, with how many torch
threads, in which directory, and the outcomes' order (a stand-in `train` records it; the real runs take minutes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from xmr_core.bench.throughput import RunOutcome, RunSpec, run_mode, train_plan
from xmr_core.data import datasets


def where_trained(spec: RunSpec, run_dir: Path) -> RunOutcome:
    """A stand-in run: its outcome records the process, its torch threads, the batch builder in force and the run
    directory (which it creates)."""
    run_dir.mkdir(parents=True)
    return RunOutcome(spec, float(torch.get_num_threads()), float(os.getpid()),
                      f"{datasets.BATCHES}|{spec.batches}|{run_dir}")


SPECS = [RunSpec("pcme", epochs=1), RunSpec("hrem", epochs=2), RunSpec("hmrn", epochs=3)]


def test_one_job_trains_in_this_process_in_order(tmp_path):
    outcomes = train_plan(SPECS, 1, tmp_path, where_trained)
    assert [o.spec for o in outcomes] == SPECS
    assert {o.best_score for o in outcomes} == {float(os.getpid())}
    assert [o.fingerprint.split("|")[2] for o in outcomes] == [str(tmp_path / str(k)) for k in range(3)]


@pytest.mark.slow
def test_two_jobs_train_in_two_one_thread_workers(tmp_path):
    outcomes = train_plan(SPECS * 2, 2, tmp_path, where_trained)
    assert [o.spec for o in outcomes] == SPECS * 2  # in the specs' order, whichever worker finished first
    workers = {o.best_score for o in outcomes}
    assert float(os.getpid()) not in workers and 1 <= len(workers) <= 2
    assert {o.fit_seconds for o in outcomes} == {1.0}  # one torch thread each
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(str(k) for k in range(6))  # a directory each


def test_old_modes_build_batches_item_by_item(tmp_path, monkeypatch):
    from xmr_core.bench import throughput

    monkeypatch.setattr(throughput, "train_run", where_trained)
    monkeypatch.setattr(throughput, "train_plan", lambda specs, jobs, root: [where_trained(s, root / "0")
                                                                             for s in specs])
    for mode, batches, adamp, gru in (("old-serial", "items", "package", "module"),
                                      ("new-serial", "arrays", "package", "module"),
                                      ("new-jobs", "arrays", "package", "module"),
                                      ("fast-jobs", "arrays", "foreach", "split")):
        _, (outcome,) = run_mode(mode, ["pcme"], 1, 2, tmp_path / mode)
        assert (outcome.spec.batches, outcome.spec.adamp, outcome.spec.gru) == (batches, adamp, gru)
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        run_mode("fast", ["pcme"], 1, 2, tmp_path)


def test_train_run_trains_with_its_adamp_and_gru_steps(tmp_path, monkeypatch):
    """`train_run` sets `train.ADAMP` and `encoders.gru.STEPS` to the spec's while it trains, and restores them
    after."""
    from xmr_core.bench import throughput
    from xmr_core.encoders import gru
    from xmr_core.runs import train

    seen = []
    monkeypatch.setattr(throughput, "build_run", lambda spec: (None,) * 5)
    monkeypatch.setattr(train, "fit", lambda *a, **k: seen.append((train.ADAMP, gru.STEPS))
                        or type("R", (), {"best_score": 0})())
    monkeypatch.setattr(train, "state_fingerprint", lambda model: "")
    for adamp, steps in (("package", "module"), ("foreach", "split")):
        throughput.train_run(RunSpec("pcme", adamp=adamp, gru=steps), tmp_path)
        assert (train.ADAMP, gru.STEPS) == ("foreach", "split")
    assert seen == [("package", "module"), ("foreach", "split")]
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        train_plan(SPECS, 0, tmp_path)


def test_copies_are_seeds_side_by_side(tmp_path, monkeypatch):
    """`--copies K`: each chapter's run at seeds 0..K-1, a chapter's seeds adjacent (as the plan batches one
    method's runs), so two workers share the long runs instead of one worker waiting on the longest."""
    from xmr_core.bench import throughput

    monkeypatch.setattr(throughput, "train_plan", lambda specs, jobs, root: [where_trained(s, root / str(k))
                                                                             for k, s in enumerate(specs)])
    _, outcomes = run_mode("new-jobs", ["pcme", "hrem"], 1, 2, tmp_path, copies=2)
    assert [(o.spec.chapter, o.spec.seed) for o in outcomes] == [("pcme", 0), ("pcme", 1), ("hrem", 0), ("hrem", 1)]
    assert {o.spec.threads for o in outcomes} == {1}


@pytest.mark.slow
def test_every_chapter_that_trains_has_its_representative_run():
    """One representative run for each chapter that trains (the issue: 'one representative run of each chapter'),
    each built as its chapter builds it: the method the label names, the chapter's data."""
    from xmr_core.bench.throughput import LABELS, REPRESENTATIVE, build_run

    expected = {"pcme": "vse", "msrm": "msrm", "hrem": "hrem", "dvse": "dvse", "hmrn": "hmrn"}
    assert set(REPRESENTATIVE) == set(LABELS) == set(expected)
    for chapter in REPRESENTATIVE:
        model, train, val, cfg, _ = build_run(RunSpec(chapter, epochs=1, profile="smoke"))
        assert model.name == expected[chapter], chapter
        assert (cfg.epochs, cfg.threads, cfg.lr) == (1, 1, 1e-3)
        assert train.n_images > 0 and val.n_images > 0
