"""What a request weighs on its way to a local worker (`runs.executors.dumps`): a split whose features are memory-mapped
travels as the features' file, not their bytes, and comes back equal."""

from __future__ import annotations

import dataclasses
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from fixtures.corpora import word_split

from xmr_core.data.corpus import split_fingerprint
from xmr_core.runs.executors import dumps, mapped_place

N, L, C = 24, 49, 256  # 1.2 MB of float32 features


@pytest.fixture
def mapped(tmp_path: Path) -> np.memmap:
    path = tmp_path / "features.npy"
    np.save(path, np.random.default_rng(0).normal(size=(N, L, C)).astype(np.float32))
    return np.load(path, mmap_mode="r")


def test_a_split_with_memory_mapped_features_pickles_small_and_round_trips(mapped: np.memmap) -> None:
    bare = word_split("train", N, 0)
    split = dataclasses.replace(bare, grid=mapped)
    payload = dumps(split)
    assert len(payload) < len(dumps(bare)) + 1_000 < mapped.nbytes  # the features add their place, not their bytes
    assert len(pickle.dumps(split)) > mapped.nbytes  # what plain pickle sends
    back = pickle.loads(payload)
    assert isinstance(back.grid, np.memmap) and Path(back.grid.filename) == Path(mapped.filename)
    np.testing.assert_array_equal(back.grid, mapped)
    assert not back.grid.flags.writeable
    assert split_fingerprint(back) == split_fingerprint(split)  # the worker computes the caller's run key


def test_a_row_slice_travels_as_its_place_and_other_arrays_by_value(mapped: np.memmap) -> None:
    rows = mapped[5:9]
    back = pickle.loads(dumps(rows))
    assert isinstance(back, np.memmap) and len(dumps(rows)) < 1_000
    np.testing.assert_array_equal(back, mapped[5:9])
    for copied in (mapped[[1, 3]], np.asarray(mapped[:, ::2]), np.zeros((3, 4), np.float32)):  # not views of the file
        assert mapped_place(copied) is None
        np.testing.assert_array_equal(pickle.loads(dumps(copied)), copied)
    strided = mapped[:, ::2]  # views the file, but not contiguously: sent by value
    assert mapped_place(strided) is None and np.array_equal(pickle.loads(dumps(strided)), strided)


def test_a_file_that_changed_before_the_worker_reopens_it_is_named(mapped: np.memmap) -> None:
    payload = dumps(mapped)
    path = Path(mapped.filename)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    with pytest.raises(RuntimeError, match=f"{path}: changed since"):
        pickle.loads(payload)
