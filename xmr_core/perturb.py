"""Test-time perturbations of a split's images and captions (PCME Figures 5, 7 and 8; reusable by every
chapter that probes what a model's uncertainty or scores respond to).

    erase_centre(images (N, H, W, 3), ratio)     -> a centred square of `ratio` of the pixels set to grey
    mix_halves(a (N, H, W, 3), b (N, H, W, 3))   -> left half of a, right half of b (CutMix)
    erase_words(captions, ratio, rng)            -> that share of each caption's words made unknown
    with_images(split, images, name, trunk)      -> the split with other pixels (and their grid features)
    with_captions(split, captions, name)         -> the split with other captions
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from xmr_core.data.corpus import Split
from xmr_core.encoders.trunk import PretrainedTrunk, grid_features

GREY = 128  # the erased pixels' value (mid grey of uint8 pixels)
UNKNOWN_WORD = "zzunk"  # a word no vocabulary holds: tokenised as <unk>


def erase_centre(images: np.ndarray, ratio: float, value: int = GREY) -> np.ndarray:
    """A copy of `images` (N, H, W, C) with a centred square of side round(sqrt(ratio) * H) pixels set to
    `value` (about `ratio` of the pixels of a square image; ratio 0 = unchanged)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"erase_centre: ratio must be in [0, 1], got {ratio}")
    out = images.copy()
    side = round(float(np.sqrt(ratio)) * images.shape[1])
    if side:
        lo = (images.shape[1] - side) // 2
        out[:, lo:lo + side, lo:lo + side] = value
    return out


def mix_halves(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, H, W, C): the left half of each image of `a` beside the right half (columns W//2 on) of `b`."""
    if a.shape != b.shape:
        raise ValueError(f"mix_halves: shapes differ, {a.shape} and {b.shape}")
    out = a.copy()
    out[:, :, a.shape[2] // 2:] = b[:, :, b.shape[2] // 2:]
    return out


def erase_words(captions: Sequence[str], ratio: float, rng: np.random.Generator,
                unknown: str = UNKNOWN_WORD) -> list[str]:
    """Each caption with round(ratio * its word count) words, drawn without replacement from `rng`,
    replaced by `unknown`. Draws from `rng` once per caption with words to erase, in caption order."""
    out = []
    for caption in captions:
        words = caption.split()
        k = round(ratio * len(words))
        drop = set(rng.choice(len(words), size=k, replace=False).tolist()) if k else set()
        out.append(" ".join(unknown if i in drop else w for i, w in enumerate(words)))
    return out


def with_images(split: Split, images: np.ndarray, name: str, trunk: PretrainedTrunk | None = None) -> Split:
    """The split with other pixels (N, H, W, 3), same captions; with a frozen `trunk`, its grid features of
    those pixels too (otherwise the split has no grid features)."""
    if len(images) != split.n_images:
        raise ValueError(f"with_images: {len(images)} images for a split of {split.n_images}")
    new = dataclasses.replace(split, images=images, name=name, grid=None)
    if trunk is not None:
        new.grid = grid_features(trunk, new)
    return new


def with_captions(split: Split, captions: Sequence[str], name: str) -> Split:
    """The split with other caption texts (one per caption, same images each was written for)."""
    if len(captions) != split.n_captions:
        raise ValueError(f"with_captions: {len(captions)} captions for a split of {split.n_captions}")
    return dataclasses.replace(split, captions=list(captions), name=name)
