"""Issue 28 part 4: a run's key is the same on another machine with an empty cache. Two fresh caches (two
`XMR_CACHE` directories) each generate the smoke data and pretrain the smoke trunk on their own, under different
torch CPU thread counts (as a 1-core and a 2-core machine would), and the VSE0 run at the same setting gets the
same run key in both: the trunk and its grid features, which enter the key through the splits' fingerprints, are
computed on one thread (`config.one_thread`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from xmr_core.config import RunConfig
from xmr_core.encoders.trunk_cache import trunk_dir
from xmr_core.experiment.compared import BASELINES
from xmr_core.experiment.protocols import chapter_setup
from xmr_core.experiment.training import train_config
from xmr_core.runs.train import run_key


def _fresh_key(cache: Path, threads: int, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """(VSE0's run key at lr 5e-4, margin 0.2, seed 0 on the smoke data, the trunk's directory), everything
    generated and pretrained in the empty cache `cache` with torch on `threads` CPU threads."""
    monkeypatch.setenv("XMR_CACHE", str(cache))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _, trunk, data, enc = chapter_setup(RunConfig.from_params(PROFILE="smoke", DEVICE="cpu", PROGRESS=False))
        torch.manual_seed(0)
        model = BASELINES["VSE0"].build(enc, data.word_vectors, 0.2, 1)
        return run_key(model, data.train, data.val, train_config("smoke", 5e-4, 0)), trunk_dir(trunk.key)
    finally:
        torch.set_num_threads(before)


def test_a_run_key_is_the_same_in_two_fresh_caches_pretrained_on_different_thread_counts(tmp_path, monkeypatch):
    key_a, trunk_a = _fresh_key(tmp_path / "machine-a", 1, monkeypatch)
    key_b, trunk_b = _fresh_key(tmp_path / "machine-b", 2, monkeypatch)
    # each cache pretrained its own trunk (nothing was shared), and the keys agree
    assert trunk_a.is_relative_to(tmp_path / "machine-a") and trunk_b.is_relative_to(tmp_path / "machine-b")
    assert (trunk_a / "trunk.pt").is_file() and (trunk_b / "trunk.pt").is_file()
    assert key_a == key_b
