"""`runs.plan.fit_many` on its executors (serial, a local pool of spawn workers, submitit's local executor, Slurm) and
the run plan's trace (`XMR_PLAN`): the same runs, the same weights, wherever they train."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import slurm_cluster
import torch
from fixtures.corpora import word_split

from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.io import RUN_LOG_ENV
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs import fits as summaries
from xmr_core.runs import log as runlog
from xmr_core.runs import trace as plantrace
from xmr_core.runs import train as train_module
from xmr_core.runs.distributed import DistEnv
from xmr_core.runs.executors import Executor
from xmr_core.runs.plan import batched, fit_many
from xmr_core.runs.train import FitResult, RunRequest, TrainConfig, fit, run_key, state_fingerprint

TRAIN, VAL = word_split("train", 24, 0), word_split("val", 8, 1)
VOCAB = Vocabulary.build(TRAIN.captions)
VECTORS = np.random.default_rng(2).normal(size=(len(VOCAB), 6)).astype(np.float32)


def _requests(seeds: tuple[int, ...] = (0, 1, 2), epochs: int = 2) -> list[RunRequest]:
    """Fresh, seeded tiny VSE0 runs (one per seed)."""
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        cfg = vse0_config(embed_dim=8, image=ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
                          text=TextEncoderConfig(hidden=4))
        out.append(RunRequest(VSE(cfg, VECTORS), TRAIN, VAL, TrainConfig(epochs=epochs, batch_size=8, progress=False,
                                                                          device="cpu", seed=seed), VOCAB,
                              label=f"seed {seed}"))
    return out


def _summary(requests: list[RunRequest], results: list[FitResult]) -> list[tuple]:
    """Per run: directory name (method + key), best weights' fingerprint, what the model holds, best score."""
    return [(r.run_dir.name, r.best_state, state_fingerprint(q.model), r.best_score, r.cached)
            for q, r in zip(requests, results)]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    for name in ("XMR_EXECUTOR", "XMR_JOBS", plantrace.PLAN_ENV):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


def _serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The reference: the requests trained one after another in this process, in a cache of their own."""
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "serial-cache"))
    requests = _requests()
    summary = _summary(requests, fit_many(requests, Executor("serial")))
    return summary


# ------------------------------------------------------------------------------------------- threads


def test_fit_trains_with_the_configured_threads_and_restores_them(cache: Path) -> None:
    seen: list[int] = []
    torch.set_num_threads(2)
    request = _requests((0,))[0]
    fit(request.model, TRAIN, VAL, TrainConfig(**{**request.cfg.__dict__, "threads": 1}), vocab=VOCAB,
        on_epoch_end=lambda epoch, row: seen.append(torch.get_num_threads()))
    assert seen == [1, 1] and torch.get_num_threads() == 2
    other = _requests((0,))[0]
    assert run_key(other.model, TRAIN, VAL, other.cfg) != run_key(
        other.model, TRAIN, VAL, TrainConfig(**{**other.cfg.__dict__, "threads": 2}))
    with pytest.raises(ValueError, match="threads >= 1"):
        TrainConfig(threads=0)


# ----------------------------------------------------------------------------------------- executors


def test_executor_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("XMR_EXECUTOR", "XMR_JOBS"):
        monkeypatch.delenv(name, raising=False)
    assert Executor.from_env() == Executor("serial", 1)
    monkeypatch.setenv("XMR_JOBS", "3")
    assert Executor.from_env() == Executor("local", 3)
    monkeypatch.setenv("XMR_EXECUTOR", "slurm")
    assert Executor.from_env() == Executor("slurm", 3)
    monkeypatch.delenv("XMR_JOBS")
    assert Executor.from_env() == Executor("slurm", None)
    monkeypatch.setenv("XMR_EXECUTOR", "pbs")
    with pytest.raises(ValueError, match="XMR_EXECUTOR='pbs'"):
        Executor.from_env()
    monkeypatch.setenv("XMR_EXECUTOR", "local")
    monkeypatch.setenv("XMR_JOBS", "two")
    with pytest.raises(ValueError, match="XMR_JOBS='two'"):
        Executor.from_env()


def test_local_pool_trains_the_same_runs_as_serial(tmp_path: Path, cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _serial(tmp_path, monkeypatch)
    assert not any(cached for *_, cached in reference)
    monkeypatch.setenv("XMR_CACHE", str(cache))
    requests = _requests() + _requests((1,))  # seed 1 asked for twice: trained once
    results = fit_many(requests, Executor("local", 2))
    assert _summary(requests, results)[:3] == reference
    assert _summary(requests, results)[3][:4] == reference[1][:4] and results[3].cached  # as serially: loaded
    assert all(s[1] == s[2] for s in _summary(requests, results))  # every model holds its run's best weights
    again = _requests()
    assert [r.cached for r in fit_many(again, Executor("local", 2))] == [True] * 3  # finished runs are not resent


def test_a_workers_error_is_raised_at_its_requests_turn(cache: Path) -> None:
    good, bad = _requests((0, 1))
    bad.cfg = TrainConfig(**{**bad.cfg.__dict__, "device": "cuda:99"})  # no such device (the key leaves it out)
    with pytest.raises(RuntimeError, match="cuda:99|invalid device"):
        fit_many([good, bad], Executor("local", 2))
    assert [r.cached for r in fit_many(_requests((0,)), Executor("serial"))] == [True]  # the good run was trained


@pytest.mark.parametrize("executor", [Executor("serial"), Executor("local", 2)], ids=["serial", "local"])
def test_a_first_epoch_divergence_raises_or_is_returned_as_a_diverged_result(cache: Path, executor: Executor) -> None:
    good, bad = _requests((0, 1))
    bad.cfg = TrainConfig(**{**bad.cfg.__dict__, "lr": float("inf")})  # NaN weights after the first step
    with pytest.raises(FloatingPointError, match="epoch 1"):
        fit_many([good, bad], executor)
    good, bad = _requests((0, 1))
    bad.cfg = TrainConfig(**{**bad.cfg.__dict__, "lr": float("inf")})
    built_key, built_state = run_key(bad.model, TRAIN, VAL, bad.cfg), state_fingerprint(bad.model)
    results = fit_many([good, bad], executor, diverged="result")
    # in this process or in a worker alike: named by the key of the model as built, which it is left as
    assert results[1].run_dir.name == f"vse-{built_key[:16]}" and state_fingerprint(bad.model) == built_state
    assert results[0].best_epoch >= 1 and results[0].cached  # trained by the first call
    assert (results[1].stopped, results[1].best_epoch, results[1].best_score) == ("diverged", 0, float("-inf"))
    assert "epoch 1" in results[1].stop_message and not results[1].converged
    assert not (results[1].run_dir / "result.json").exists()  # nothing cached: asked again, it diverges again


def test_batched_trains_the_missing_runs_side_by_side_and_leaves_a_failure_to_the_body(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _serial(tmp_path, monkeypatch)
    monkeypatch.setenv("XMR_CACHE", str(cache))
    good = _requests()
    bad = _requests((3,))[0]
    bad.cfg = TrainConfig(**{**bad.cfg.__dict__, "device": "cuda:99"})  # fails in its worker
    with batched(good + [bad], Executor("local", 2)):
        assert all((cache / "runs" / name / "result.json").is_file() for name, *_ in reference)  # trained
        assert not (cache / "runs" / f"vse-{run_key(bad.model, TRAIN, VAL, bad.cfg)}" / "result.json").exists()
        requests = _requests()
        results = [fit(r.model, TRAIN, VAL, r.cfg, vocab=VOCAB) for r in requests]  # the body: one run at a time
        with pytest.raises(RuntimeError, match="cuda:99|invalid device"):  # met again, as serially
            fit(bad.model, TRAIN, VAL, bad.cfg, vocab=VOCAB)
    assert all(r.cached for r in results)
    assert [s[:4] for s in _summary(requests, results)] == [s[:4] for s in reference]  # the serial runs


def test_batched_trains_nothing_serially_and_is_one_stage_in_trace_mode(
        cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with batched(_requests(), Executor("serial")):
        assert not (cache / "runs").exists()  # in process: the body trains them
    plan = tmp_path / "plan.jsonl"
    monkeypatch.setenv(plantrace.PLAN_ENV, str(plan))
    monkeypatch.setattr(plantrace, "_TRACE", plantrace._Trace())
    with batched(_requests(), Executor("local", 2)):
        for r in _requests():
            fit(r.model, TRAIN, VAL, r.cfg, vocab=VOCAB)
    lone = _requests((5,))[0]
    fit(lone.model, TRAIN, VAL, lone.cfg, vocab=VOCAB)
    records = plantrace.read_plan(plan)
    assert [(r["stage"], r["cached"]) for r in records] == [(1, False)] * 3 + [(2, False)]
    assert len({r["batch"] for r in records[:3]}) == 1 and None not in {records[0]["batch"]} and records[3]["batch"] is None
    assert not (cache / "runs").exists()


@pytest.mark.parametrize("executor", [Executor("serial"), Executor("local", 2)], ids=["serial", "local"])
def test_the_run_log_records_the_batch_each_run_was_asked_for_in(cache: Path, executor: Executor, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "notebook.runs.jsonl"
    monkeypatch.setenv(RUN_LOG_ENV, str(log))
    names = [r.run_dir.name for r in fit_many(_requests((0, 1)), executor)]
    lone = _requests((2,))[0]
    names.append(fit(lone.model, TRAIN, VAL, lone.cfg, vocab=VOCAB).run_dir.name)
    with batched(_requests((3, 4)), executor):
        names += [fit(r.model, TRAIN, VAL, r.cfg, vocab=VOCAB).run_dir.name for r in _requests((3, 4))]
    names += [r.run_dir.name for r in fit_many(_requests((5,)), executor)]
    batches = runlog.run_batches(log)
    assert sorted(batches) == sorted(names)  # workers log the runs they train in the order they finish them
    first, second, third = batches[names[0]], batches[names[3]], batches[names[5]]
    assert [batches[n] for n in names] == [first, first, None, second, second, third]
    assert None not in (first, second, third) and len({first, second, third}) == 3
    records = [r for r in runlog.read_log(log) if r["name"] == names[0]]
    # a worker records training the run outside any batch of its own; the notebook's loading it names the batch
    assert [(r["trained"], r["batch"]) for r in records] == (
        [(True, first)] if executor.in_process else [(True, None), (False, first)])


def test_submitit_local_executor_trains_the_same_runs_as_serial(tmp_path: Path, cache: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("submitit")
    reference = _serial(tmp_path, monkeypatch)
    monkeypatch.setenv("XMR_CACHE", str(cache))
    requests = _requests()
    assert _summary(requests, fit_many(requests, Executor("submitit-local", 3))) == reference
    assert len([p for p in (cache / "submitit").iterdir() if p.name.isdigit()]) == 3  # one job a run


# --------------------------------------------------------------------------------------------- trace


def test_trace_lists_missing_runs_by_stage_and_trains_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    trained = _requests((0,))[0]
    done = fit(trained.model, TRAIN, VAL, trained.cfg, vocab=VOCAB)  # one run finished before the plan
    plan = tmp_path / "plan.jsonl"
    monkeypatch.setenv(plantrace.PLAN_ENV, str(plan))
    monkeypatch.setattr(plantrace, "_TRACE", plantrace._Trace())
    first = _requests((0, 1, 2))
    results = fit_many(first)  # stage 1: one cached, two missing
    later = _requests((3,))[0]
    lone = fit(later.model, TRAIN, VAL, later.cfg, vocab=VOCAB)  # stage 2, asked for after planned results
    after = fit_many(_requests((0,)))  # stage 3: cached, no missing run, so the stage does not end
    last = fit_many(_requests((4,)))

    assert [r.stopped for r in results] == [done.stopped, "planned", "planned"] and results[0].cached
    assert not any(r.converged for r in results[1:] + [lone]) and math.isnan(lone.best_score)
    assert not (cache / "runs" / results[1].run_dir.name).exists()  # nothing trained, nothing claimed
    assert state_fingerprint(first[1].model) == state_fingerprint(_requests((1,))[0].model)  # still untrained
    records = plantrace.read_plan(plan)
    assert [(r["stage"], r["seed"], r["cached"], r["provisional"]) for r in records] == [
        (1, 0, True, False), (1, 1, False, False), (1, 2, False, False), (2, 3, False, True), (3, 0, True, True),
        (3, 4, False, True)]
    assert [r["run"] for r in records[:3]] == [r.run_dir.name for r in results]
    assert records[1]["label"] == "seed 1" and records[3]["label"] == ""
    recorded = json.loads((done.run_dir / "result.json").read_text())["train_seconds"]
    assert records[0]["core_seconds"] == pytest.approx(recorded) and records[1]["core_seconds"] is None
    assert after[0].cached and last[0].stopped == "planned"


def test_trace_times_a_step_once_per_shape_and_leaves_the_model_and_random_state_alone(
        cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plan = tmp_path / "plan.jsonl"
    monkeypatch.setenv(plantrace.PLAN_ENV, str(plan))
    monkeypatch.setenv(plantrace.STEPS_ENV, "2")
    monkeypatch.setattr(plantrace, "_TRACE", plantrace._Trace())
    timed: list[int] = []
    real = train_module.step_seconds

    def counted(model, split, cfg, vocab, steps):
        timed.append(cfg.batch_size)
        return real(model, split, cfg, vocab, steps)

    monkeypatch.setattr(train_module, "step_seconds", counted)
    requests = _requests((0, 1)) + [dataclasses.replace(_requests((2,))[0], cfg=TrainConfig(
        epochs=3, batch_size=4, progress=False, device="cpu", seed=2))]
    built = [state_fingerprint(r.model) for r in requests]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    fit_many(requests)
    assert torch.equal(torch.get_rng_state(), before)  # the timed steps drew from a state restored after
    assert [state_fingerprint(r.model) for r in requests] == built  # timed on a copy: the models are as built
    assert timed == [8, 4]  # seeds 0 and 1 share a shape (their seed and rate differ): timed once; batch 4 is another
    records = plantrace.read_plan(plan)
    assert records[0]["step_core_seconds"] == records[1]["step_core_seconds"] > 0
    assert [(r["epoch_items"], r["epoch_steps"], r["batch_size"], r["train_images"], r["epochs"]) for r in records] \
        == [(24, 3, 8, 24, 2), (24, 3, 8, 24, 2), (24, 6, 4, 24, 3)]  # one caption per image: 24 items an epoch
    for r in requests:  # an epoch's steps as the training loop batches it
        for mode, items in (("one_per_image", 24), ("all_captions", 48)):
            cfg = dataclasses.replace(r.cfg, epoch_mode=mode)
            assert train_module.epoch_items(r.model, TRAIN, cfg) == items
            assert math.ceil(items / cfg.batch_size) == len(
                train_module._train_loader(r.model, TRAIN, VOCAB, cfg, DistEnv())[0])


def test_a_step_is_timed_on_whole_batches_even_of_a_split_smaller_than_one(cache: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    request = _requests((0,))[0]
    big = dataclasses.replace(request.cfg, batch_size=64)  # more than the split's 48 captions
    sizes: list[list[int]] = []
    real = train_module._train_loader

    def loader(model, split, vocab, cfg, env, batches=None):
        sizes.append([len(b) for b in batches])
        return real(model, split, vocab, cfg, env, batches=batches)

    monkeypatch.setattr(train_module, "_train_loader", loader)
    assert train_module.step_seconds(request.model, TRAIN, big, VOCAB, 3) > 0
    assert sizes == [[64], [64, 64, 64]]  # one untimed step, then the timed ones, each of a whole batch


# ------------------------------------------------------------------------------------------ fit summaries


@pytest.mark.parametrize("executor", [Executor("serial"), Executor("local", 2)], ids=["serial", "local"])
def test_fit_summaries_stand_in_for_the_runs_a_cache_lacks(cache: Path, executor: Executor, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fits = tmp_path / "fits"
    trained = fit_many(_requests(), executor, fits=fits)
    files = {p.name: p.read_bytes() for p in fits.iterdir()}
    assert sorted(files) == sorted(f"{r.run_dir.name}.json.gz" for r in trained)
    stamps = {p.name: p.stat().st_mtime_ns for p in fits.iterdir()}
    fit_many(_requests(), executor, fits=fits)  # loaded: the same facts, the same bytes, not rewritten
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in fits.iterdir()} == \
        {n: (files[n], stamps[n]) for n in files}

    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "empty"))  # a fresh clone: no run cache
    monkeypatch.setenv(RUN_LOG_ENV, str(tmp_path / "runs.jsonl"))
    requests = _requests()
    built = [state_fingerprint(r.model) for r in requests]
    weightless = fit_many(requests, executor, fits=fits)
    assert not (tmp_path / "empty" / "runs").exists()  # nothing trained, nothing claimed
    for request, state, got, want in zip(requests, built, weightless, trained):
        assert isinstance(got, summaries.WeightlessFit) and not summaries.has_weights(got) and got.cached
        assert state_fingerprint(request.model) == state  # the model as built
        assert (got.run_dir.name, got.best_epoch, got.best_score, got.stopped, got.converged, got.best_state,
                got.train_seconds, got.best_metrics) == (want.run_dir.name, want.best_epoch, want.best_score,
                                                         want.stopped, want.converged, want.best_state,
                                                         want.train_seconds, {"rsum": want.best_score})
        assert got.history == [{k: v for k, v in row.items() if not k.startswith("val/") or k == "val/rsum"}
                               for row in want.history]
        with pytest.raises(summaries.NoWeights, match=f"run {got.run_dir.name}: no weights"):
            linear = next(m for m in request.model.modules() if isinstance(m, torch.nn.Linear))
            linear(torch.zeros(1, linear.in_features))  # any of its modules refuses
    assert runlog.describe(tmp_path / "runs.jsonl") == ", trained 0 runs, loaded 0, read 3 from fit summaries"

    drawn = fit_many(_requests((0,)), executor, fits=fits, weights=True)  # a figure draws seed 0: it trains
    monkeypatch.setenv(summaries.WEIGHTS_ENV, "1")  # `xmr runs train`: every run for its weights
    every = fit_many(_requests((1,)), executor, fits=fits)
    monkeypatch.delenv(summaries.WEIGHTS_ENV)
    for got, want in ((drawn[0], trained[0]), (every[0], trained[1])):
        assert summaries.has_weights(got) and not got.cached and got.best_state == want.best_state
    assert isinstance(fit_many(_requests((2,)), executor, fits=fits)[0], summaries.WeightlessFit)


def test_a_fit_summary_of_other_code_is_not_used(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    fits = tmp_path / "fits"
    done = fit_many(_requests((0,)), fits=fits)[0]
    summary = summaries.read_summary(fits, done.run_dir.name)
    summaries.write_summary(fits, {**summary, "trained_at": {"commit": None, "source": "0" * 64}})
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "empty"))
    again = fit_many(_requests((0,)), fits=fits)[0]
    assert summaries.has_weights(again) and not again.cached and again.best_state == done.best_state
    assert "not used, the run was trained by other code" in capsys.readouterr().out
    rewritten = summaries.read_summary(fits, done.run_dir.name)  # from the run trained here, of this code
    assert (rewritten["trained_at"], rewritten["best_state"]) == (summary["trained_at"], summary["best_state"])


def test_a_first_epoch_divergence_stands_in_as_it_was_returned(cache: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def diverging() -> RunRequest:
        bad = _requests((1,))[0]
        bad.cfg = TrainConfig(**{**bad.cfg.__dict__, "lr": float("inf")})
        return bad

    fits = tmp_path / "fits"
    first = fit_many([diverging()], diverged="result", fits=fits)[0]
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "empty"))
    again = fit_many([diverging()], diverged="result", fits=fits)[0]
    assert isinstance(again, summaries.WeightlessFit)
    assert (again.stopped, again.best_epoch, again.best_score, again.stop_message, again.run_dir.name) == \
        (first.stopped, 0, float("-inf"), first.stop_message, first.run_dir.name)
    with pytest.raises(FloatingPointError, match="epoch 1.*fit summary"):
        fit_many([diverging()], fits=fits)


def test_trace_lists_a_summarised_run_as_no_training_and_a_drawn_one_as_needing_weights(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fits = tmp_path / "fits"
    trained = fit_many(_requests((0, 1)), fits=fits)
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "empty"))
    plan = tmp_path / "plan.jsonl"
    monkeypatch.setenv(plantrace.PLAN_ENV, str(plan))
    monkeypatch.setattr(plantrace, "_TRACE", plantrace._Trace())
    fit_many(_requests((0, 1)), fits=fits)  # stand in: no stage ends, nothing after is provisional
    drawn = fit_many(_requests((0,)), fits=fits, weights=True)[0]  # a figure: listed as needing weights, planned
    fit_many(_requests((2,)), fits=fits)
    records = plantrace.read_plan(plan)
    assert [(r["seed"], r["stage"], r["cached"], r["summary"], r["needs_weights"], r["provisional"])
            for r in records] == [(0, 1, False, True, False, False), (1, 1, False, True, False, False),
                                  (0, 1, False, True, True, False), (2, 2, False, False, False, True)]
    assert [r["core_seconds"] for r in records[:3]] == pytest.approx([trained[0].train_seconds,
                                                                      trained[1].train_seconds,
                                                                      trained[0].train_seconds])
    assert drawn.stopped == "planned" and not (tmp_path / "empty" / "runs").exists()


# --------------------------------------------------------------------------------------------- Slurm


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A single-node Slurm started for these tests (`slurm_cluster`); skipped, saying why, when it cannot start."""
    folder = tmp_path_factory.mktemp("slurm")
    try:
        conf = slurm_cluster.start(folder)
    except slurm_cluster.SlurmUnavailable as err:
        pytest.skip(f"no Slurm: {err}")
    yield conf
    slurm_cluster.stop(folder)


@pytest.mark.slurm
def test_slurm_job_array_trains_the_same_runs_as_serial(tmp_path: Path, cache: Path, slurm_conf: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _serial(tmp_path, monkeypatch)
    monkeypatch.setenv("XMR_CACHE", str(cache))
    monkeypatch.setenv("SLURM_CONF", str(slurm_conf))
    monkeypatch.setenv("XMR_SLURM_TIMEOUT_MIN", "5")
    monkeypatch.setenv("XMR_SLURM_MEM_GB", "1")
    requests = _requests()
    assert _summary(requests, fit_many(requests, Executor("slurm", 2))) == reference
    tasks = sorted(p.name.split("_")[1] for p in (cache / "submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name))
    assert tasks == ["0", "1", "2"]  # one job array (Slurm's <job>_<task> ids), a task a run
