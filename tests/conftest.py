"""Test-wide settings: offline, small thread count, a private cache directory per session."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Every test session gets its own empty run cache, so no test finds (or leaves) runs in the user's ~/.cache/xmr or
# an earlier session's; tests that need a cache of their own still set XMR_CACHE to a tmp_path.
_CACHE = tempfile.TemporaryDirectory(prefix="xmr-test-cache-")
os.environ["XMR_CACHE"] = _CACHE.name

import pytest
import torch

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)
