"""Whole-array batches (each dataset's `batch`, `datasets.BATCHES = "arrays"`, the default) against the item-by-item
reference (`BATCHES = "items"`: `__getitem__` item by item, then `collate`, the code before whole-array batches):
the same batches and the same state of torch's generator after them, on every loader with its augmentations, and
tiny `fit` runs (grid features with erasing and word dropout; query sets on region features) that end with the
same weights and history."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xmr_core.data import datasets
from xmr_core.data.corpus import DataFormatError, Split
from xmr_core.data.datasets import (
    Augmentation,
    PairDataset,
    caption_loader,
    image_loader,
    pair_loader,
    query_loader,
)
from xmr_core.data.text import UNK_INDEX, Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.registry import create_method
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs.train import TrainConfig, fit, state_fingerprint

WORDS = ["red", "blue", "green", "circle", "square", "star", "left", "of", "a", "and", "small", "big"]
SIDE, CHANNELS, REGIONS, REGION_DIM = 4, 5, 4, 6


def make_split(name: str, n: int, seed: int) -> Split:
    """`n` images with 1-4 captions of 1-9 words, a 4x4 grid of 5 channels, 4 regions (some padding) and 1-4 region
    queries each."""
    rng = np.random.default_rng(seed)
    per_image = rng.integers(1, 5, n)
    captions = [" ".join(rng.choice(WORDS, rng.integers(1, 10))) for _ in range(per_image.sum())]
    regions = rng.standard_normal((n, REGIONS, REGION_DIM)).astype(np.float32)
    for i in range(n):
        regions[i, rng.integers(1, REGIONS + 1):] = 0.0
    return Split(name, f"synthetic-{name}", [f"{name}{i}" for i in range(n)],
                 [f"{name}c{j}" for j in range(per_image.sum())], captions, np.repeat(np.arange(n), per_image),
                 images=rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8), regions=regions,
                 grid=rng.standard_normal((n, SIDE * SIDE, CHANNELS)).astype(np.float32),
                 queries=[[" ".join(rng.choice(WORDS, rng.integers(1, 6))) for _ in range(rng.integers(1, 5))]
                          for _ in range(n)]).validate()


TRAIN, VAL = make_split("train", 14, 0), make_split("val", 6, 1)
VOCAB = Vocabulary.build(TRAIN.captions + [q for qs in TRAIN.queries + VAL.queries for q in qs])
AUG = Augmentation(random_erasing_prob=0.5, word_dropout=0.3)

LOADERS = {
    "pairs, grid, erasing + word dropout": lambda: pair_loader(TRAIN, VOCAB, 4, epoch="all_captions", visual="grid",
                                                               augment=AUG, seed=3),
    "pairs, regions, word dropout": lambda: pair_loader(TRAIN, VOCAB, 5, visual="regions", augment=AUG, seed=1),
    "pairs, grid, evaluation": lambda: pair_loader(TRAIN, VOCAB, 4, train=False, visual="grid", augment=AUG),
    "pairs, pixels, erasing + word dropout": lambda: pair_loader(TRAIN, VOCAB, 4, visual="pixels", augment=AUG),
    "query sets, regions, shuffled": lambda: query_loader(TRAIN, VOCAB, 3, train=True, visual="regions",
                                                          max_queries=2, seed=2),
    "query sets, grid, erasing": lambda: query_loader(TRAIN, VOCAB, 4, train=True, visual="grid", augment=AUG),
    "query sets, no image, in order": lambda: query_loader(VAL, VOCAB, 4, visual=None),
    "images, grid": lambda: image_loader(TRAIN, 4, visual="grid"),
    "images, regions": lambda: image_loader(TRAIN, 4, visual="regions"),
    "captions": lambda: caption_loader(TRAIN, VOCAB, 4),
}


def _epochs(make, mode: str, monkeypatch, n_epochs: int = 2) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor]:
    """Every batch of `n_epochs` passes over a fresh loader built in `mode`, and torch's generator state after."""
    monkeypatch.setattr(datasets, "BATCHES", mode)
    torch.manual_seed(11)
    loader = make()
    batches = [batch for _ in range(n_epochs) for batch in loader]
    return batches, torch.get_rng_state()


def _equal(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        list(x) == list(y) and all(x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b))


@pytest.mark.parametrize("name", list(LOADERS))
def test_whole_array_batches_equal_the_item_by_item_reference(name, monkeypatch):
    reference, rng_reference = _epochs(LOADERS[name], "items", monkeypatch)
    batches, rng_after = _epochs(LOADERS[name], "arrays", monkeypatch)
    assert _equal(batches, reference)
    assert torch.equal(rng_after, rng_reference)  # the same draws were made: the rest of the run is the same


def test_the_augmentations_were_drawn(monkeypatch):
    """The comparison above is not vacuous: erasing zeroed grid cells and word dropout replaced and removed words."""
    batches, _ = _epochs(LOADERS["pairs, grid, erasing + word dropout"], "arrays", monkeypatch)
    stored = torch.from_numpy(TRAIN.grid)
    erased = sum(int((b["grid"] != stored[b["image_index"]]).any(dim=(1, 2)).sum()) for b in batches)
    n_items = sum(len(b["image_index"]) for b in batches)
    full = torch.tensor([len(VOCAB.encode(TRAIN.captions[int(k)])) for b in batches for k in b["caption_index"]])
    lengths = torch.cat([b["lengths"] for b in batches])
    assert 0 < erased < n_items
    assert torch.equal(lengths, full - (full * 0.3).long())
    assert any((b["tokens"] == UNK_INDEX).any() for b in batches)


@pytest.mark.parametrize("mode", ["items", "arrays"])
def test_a_grid_that_is_not_square_is_refused_either_way(mode, monkeypatch):
    monkeypatch.setattr(datasets, "BATCHES", mode)
    with pytest.raises(ValueError, match="square grid, got 6 cells"):
        next(iter(image_loader(Split(**{**VAL.__dict__, "grid": VAL.grid[:, :6]}), 4, visual="grid")))


def test_an_image_without_regions_is_named_in_a_batch(monkeypatch):
    regions = TRAIN.regions.copy()
    regions[3] = 0.0
    split = Split(**{**TRAIN.__dict__, "regions": regions})
    with pytest.raises(DataFormatError, match="image 'train3' has only all-zero"):
        PairDataset(split, VOCAB, visual="regions").batch([0, int(np.flatnonzero(split.caption_image == 3)[0])])


def _grid_vse() -> VSE:
    torch.manual_seed(0)
    vectors = np.random.default_rng(2).standard_normal((len(VOCAB), 6)).astype(np.float32)
    image = ImageEncoderConfig(kind="grid", hidden=16, grid_dim=CHANNELS, grid_cells=SIDE * SIDE)
    return VSE(vse0_config(embed_dim=8, image=image, text=TextEncoderConfig(hidden=4)), vectors)


def _query_sets_model():
    torch.manual_seed(0)
    vectors = np.random.default_rng(2).standard_normal((len(VOCAB), 5)).astype(np.float32)
    return create_method("r-re", vectors, embed_dim=8, image=ImageEncoderConfig(kind="regions", region_dim=REGION_DIM),
                         text=TextEncoderConfig(hidden=6), max_queries=3)


@pytest.mark.parametrize("build", [_grid_vse, _query_sets_model], ids=["grid pairs", "query sets"])
def test_fit_learns_the_same_with_whole_array_batches(build, tmp_path, monkeypatch):
    """Seed, model, data and config fixed: the run on whole-array batches ends with the reference run's weights and
    history (timings aside)."""
    cfg = TrainConfig(epochs=2, batch_size=4, random_erasing_prob=0.5, word_dropout=0.3, device="cpu", progress=False,
                      seed=5)
    runs = {}
    for mode in ("items", "arrays"):
        monkeypatch.setattr(datasets, "BATCHES", mode)
        model = build()
        result = fit(model, TRAIN, VAL, cfg, tmp_path / mode, vocab=VOCAB)
        timing = ("train_seconds", "pairs_per_second")
        runs[mode] = (state_fingerprint(model), [{k: v for k, v in row.items() if k not in timing}
                                                 for row in result.history])
    assert runs["arrays"] == runs["items"]
    assert len(runs["items"][1]) == 2 and runs["items"][1][0]["train/loss"] != runs["items"][1][1]["train/loss"]
