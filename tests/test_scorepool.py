"""`experiment.scorepool.score_each`: a batch of models scored on the local workers gives, bit for bit, what the
kernel's serial scoring gives, on the caller's torch thread count, in order; serially without a pool."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from fixtures.corpora import word_split

from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import score_split
from xmr_core.experiment.scorepool import pooled, score_each
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs import trace as plantrace
from xmr_core.runs.executors import Executor

TEST = word_split("test", 40, 3)
VOCAB = Vocabulary.build(TEST.captions)
VECTORS = np.random.default_rng(2).normal(size=(len(VOCAB), 6)).astype(np.float32)
POOL = Executor("local", 2)


def _models(seeds: tuple[int, ...] = (0, 1, 2)) -> list[VSE]:
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(VSE(vse0_config(embed_dim=8, image=ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
                                   text=TextEncoderConfig(hidden=4)), VECTORS))
    return out


def threads_and_pid(model: torch.nn.Module, offset: int) -> tuple[int, int, int]:
    """(torch threads, process id, offset): where and how a task ran (module level: pickled by reference)."""
    return torch.get_num_threads(), os.getpid(), offset


def fails(model: torch.nn.Module) -> None:
    raise ValueError("scoring failed in the worker")


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_pooled_scores_equal_the_serial_scores_bit_for_bit() -> None:
    torch.set_num_threads(1)
    serial = [score_split(m, TEST, VOCAB, "cpu") for m in _models()]
    pooled_scores = score_each(score_split, _models(), TEST, VOCAB, "cpu", executor=POOL)
    assert len(pooled_scores) == 3
    for a, b in zip(serial, pooled_scores):
        assert torch.equal(a.i2t, b.i2t) and torch.equal(a.t2i, b.t2i)
    assert not torch.equal(serial[0].i2t, serial[1].i2t)  # the seeds' models differ: order is tested


@pytest.mark.parametrize("threads", [1, 2])
def test_workers_score_on_the_callers_thread_count_in_other_processes(threads: int) -> None:
    torch.set_num_threads(threads)
    out = score_each(threads_and_pid, _models(), 7, executor=POOL)
    assert [t for t, _, _ in out] == [threads] * 3 and [o for _, _, o in out] == [7] * 3
    assert os.getpid() not in {pid for _, pid, _ in out}


@pytest.mark.parametrize("executor", [Executor("serial"), Executor("local", 1), Executor("submitit-local", 2)])
def test_without_a_local_pool_of_several_jobs_it_scores_here(executor: Executor) -> None:
    out = score_each(threads_and_pid, _models((0, 1)), 0, executor=executor)
    assert {pid for _, pid, _ in out} == {os.getpid()}


def test_one_model_or_trace_mode_scores_here(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    assert not pooled(POOL, _models((0,))) and pooled(POOL, _models((0, 1)))
    monkeypatch.setenv(plantrace.PLAN_ENV, str(tmp_path / "plan.jsonl"))
    assert not pooled(POOL, _models((0, 1)))
    assert {pid for _, pid, _ in score_each(threads_and_pid, _models((0, 1)), 0, executor=POOL)} == {os.getpid()}


def test_models_off_the_cpu_score_here() -> None:
    """On a GPU each worker would start its own CUDA context for a model the GPU scores faster than that start;
    "meta" stands for any device other than the CPU."""
    models = _models((0, 1))
    assert pooled(POOL, models)
    models[1].to("meta")
    assert not pooled(POOL, models)


def test_a_workers_error_is_raised_here() -> None:
    with pytest.raises(ValueError, match="scoring failed in the worker"):
        score_each(fails, _models((0, 1)), executor=POOL)
