"""The one in-memory form of an image–caption split that every reader and the scenes generator return.

A `Split` carries ids, captions, the image each caption was written for, and whatever else its source
supports (pixels or paths, region features, classes, concept labels, exact relevance, region queries).
`Split.relevance(view)` turns it into a boolean (queries × gallery) matrix for `xmr_core.metrics`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

View = Literal["instance", "class", "plausible", "exact"]
Direction = Literal["i2t", "t2i"]


class DataFormatError(ValueError):
    """Malformed or inconsistent input; the message names the file (or source) and the record."""


def check_finite(features: np.ndarray, path: str | Path, image_ids: Sequence[str], chunk: int = 4096) -> None:
    """Raise naming the first image whose features hold NaN or inf (scanned in chunks: works on memmaps)."""
    for start in range(0, features.shape[0], chunk):
        block = np.asarray(features[start : start + chunk])
        ok = np.isfinite(block.reshape(block.shape[0], -1)).all(1)
        if not ok.all():
            row = start + int(np.flatnonzero(~ok)[0])
            raise DataFormatError(
                f"{path}: image {image_ids[row]!r} (row {row}): features contain NaN or inf"
            )


@dataclass
class Split:
    """One split (train / val / test) of an image–caption corpus.

    Shapes: N images, M captions, R regions, D region dims, C concept labels, T region queries.
    """

    name: str
    source: str  # file or directory this split was read from, named in every error
    image_ids: list[str]  # N
    caption_ids: list[str]  # M
    captions: list[str]  # M
    caption_image: np.ndarray  # (M,) int64: index of the image each caption was written for
    images: np.ndarray | None = None  # (N, H, W, 3) uint8 pixels held in memory
    image_paths: list[str] | None = None  # N image files on disk
    regions: np.ndarray | None = None  # (N, R, D) float32 precomputed region features
    grid: np.ndarray | None = None  # (N, L, C) float32 grid features of a frozen trunk (`encoders.trunk`)
    region_boxes: np.ndarray | None = None  # (N, R, 4) float32 boxes (x0, y0, x1, y1), pixels
    image_class: np.ndarray | None = None  # (N,) int64 class index (CUB-style class relevance)
    class_names: list[str] | None = None  # names of the class indices
    image_labels: np.ndarray | None = None  # (N, C) uint8 multi-hot concepts (PMRP plausible matches)
    exact: np.ndarray | None = None  # (M, N) bool: the caption's logical form holds in the image
    caption_level: list[str] | None = None  # M specificity levels (scenes: full/partial/relational/vague)
    queries: list[list[str]] | None = None  # N × T region queries for multi-query retrieval
    meta: dict = field(default_factory=dict)

    @property
    def n_images(self) -> int:
        return len(self.image_ids)

    @property
    def n_captions(self) -> int:
        return len(self.captions)

    def views(self) -> list[str]:
        """Relevance views this split supports."""
        out = ["instance"]
        if self.image_class is not None:
            out.append("class")
        if self.image_labels is not None:
            out.append("plausible")
        if self.exact is not None:
            out.append("exact")
        return out

    def validate(self) -> Split:
        """Check every array against N and M; raise `DataFormatError` naming the source and field."""
        n, m = self.n_images, self.n_captions

        def fail(what: str) -> None:
            raise DataFormatError(f"{self.source}: split {self.name!r}: {what}")

        if len(self.caption_ids) != m:
            fail(f"{len(self.caption_ids)} caption ids for {m} captions")
        cap_img = np.asarray(self.caption_image)
        if cap_img.shape != (m,):
            fail(f"caption_image has shape {cap_img.shape}, expected ({m},)")
        if m and (cap_img.min() < 0 or cap_img.max() >= n):
            bad = int(np.flatnonzero((cap_img < 0) | (cap_img >= n))[0])
            fail(f"caption {self.caption_ids[bad]!r} points at image index {int(cap_img[bad])} of {n}")
        for i, c in enumerate(self.captions):
            if not c.strip():
                fail(f"caption {self.caption_ids[i]!r} is empty")
        if len(set(self.image_ids)) != n:
            fail("duplicate image ids")
        if self.images is not None and (self.images.ndim != 4 or self.images.shape[0] != n):
            fail(f"images have shape {self.images.shape}, expected ({n}, H, W, 3)")
        if self.image_paths is not None and len(self.image_paths) != n:
            fail(f"{len(self.image_paths)} image paths for {n} images")
        if self.regions is not None:
            if self.regions.ndim != 3 or self.regions.shape[0] != n:
                fail(f"regions have shape {self.regions.shape}, expected ({n}, R, D)")
            check_finite(self.regions, f"{self.source}: split {self.name!r}: regions", self.image_ids)
        if self.grid is not None:
            if self.grid.ndim != 3 or self.grid.shape[0] != n:
                fail(f"grid features have shape {self.grid.shape}, expected ({n}, L, C)")
            check_finite(self.grid, f"{self.source}: split {self.name!r}: grid features", self.image_ids)
        if self.image_class is not None and np.asarray(self.image_class).shape != (n,):
            fail(f"image_class has shape {np.asarray(self.image_class).shape}, expected ({n},)")
        if self.image_labels is not None:
            if self.image_labels.ndim != 2 or self.image_labels.shape[0] != n:
                fail(f"image_labels have shape {self.image_labels.shape}, expected ({n}, C)")
            if not np.isin(self.image_labels, (0, 1)).all():
                bad = int(np.flatnonzero(~np.isin(self.image_labels, (0, 1)).all(1))[0])
                fail(f"image_labels of image {self.image_ids[bad]!r} are not 0/1")
        if self.exact is not None:
            if self.exact.shape != (m, n):
                fail(f"exact relevance has shape {self.exact.shape}, expected ({m}, {n})")
            if m and not self.exact[np.arange(m), cap_img].all():
                bad = int(np.flatnonzero(~self.exact[np.arange(m), cap_img])[0])
                fail(f"caption {self.caption_ids[bad]!r} does not hold in its own image")
        if self.caption_level is not None and len(self.caption_level) != m:
            fail(f"{len(self.caption_level)} caption levels for {m} captions")
        if self.queries is not None and len(self.queries) != n:
            fail(f"{len(self.queries)} query lists for {n} images")
        return self

    def subset(self, images: np.ndarray | list[int], name: str, captions: np.ndarray | None = None) -> Split:
        """The given images (indices, in order) with their captions (of those, only the caption indices in
        `captions` when given); every per-image and per-caption field is subset, `exact` in both axes, and per-item
        lists in `meta` are dropped."""
        keep_img = np.asarray(images, dtype=np.int64)
        if len(keep_img) == 0:
            raise ValueError(f"{self.source}: split {self.name!r}: empty image subset {name!r}")
        new_index = np.full(self.n_images, -1, dtype=np.int64)
        new_index[keep_img] = np.arange(len(keep_img))
        keep_cap = np.flatnonzero(new_index[self.caption_image] >= 0)
        if captions is not None:
            keep_cap = np.intersect1d(keep_cap, np.asarray(captions, dtype=np.int64))

        def pick(values, index: np.ndarray):
            if values is None:
                return None
            return values[index] if isinstance(values, np.ndarray) else [values[i] for i in index]

        per_item = (self.n_images, self.n_captions)
        return Split(
            name=name, source=self.source,
            image_ids=pick(self.image_ids, keep_img), caption_ids=pick(self.caption_ids, keep_cap),
            captions=pick(self.captions, keep_cap), caption_image=new_index[self.caption_image[keep_cap]],
            images=pick(self.images, keep_img), image_paths=pick(self.image_paths, keep_img),
            regions=pick(self.regions, keep_img), region_boxes=pick(self.region_boxes, keep_img),
            grid=pick(self.grid, keep_img),
            image_class=pick(self.image_class, keep_img), class_names=self.class_names,
            image_labels=pick(self.image_labels, keep_img),
            exact=None if self.exact is None else self.exact[np.ix_(keep_cap, keep_img)],
            caption_level=pick(self.caption_level, keep_cap), queries=pick(self.queries, keep_img),
            meta={k: v for k, v in self.meta.items() if not (isinstance(v, list | np.ndarray) and len(v) in per_item)},
        ).validate()

    def class_subset(self, classes: list[int] | set[int], name: str) -> Split:
        """The images whose class is in `classes`, with their captions (a zero-shot class split)."""
        if self.image_class is None:
            raise ValueError(f"{self.source}: split {self.name!r} has no classes, so it has no class split")
        return self.subset(np.flatnonzero(np.isin(self.image_class, list(classes))), name)

    def relevance(self, view: View = "instance", direction: Direction = "t2i", zeta: int = 0) -> np.ndarray:
        """Boolean relevance, (M, N) for t2i (caption queries) or (N, M) for i2t (image queries).

        instance: the image the caption was written for; class: same class; plausible: the caption's
        image and the gallery image have concept-label vectors at L1 distance <= zeta (PCME's PMRP);
        exact: the caption's logical form holds in the image.
        """
        if view not in self.views():
            raise ValueError(f"{self.source}: split {self.name!r} has no {view!r} relevance (has {self.views()})")
        m, n = self.n_captions, self.n_images
        cap_img = np.asarray(self.caption_image, dtype=np.int64)
        if view == "instance":
            rel = np.zeros((m, n), dtype=bool)
            rel[np.arange(m), cap_img] = True
        elif view == "class":
            cls = np.asarray(self.image_class)
            rel = cls[cap_img][:, None] == cls[None, :]
        elif view == "plausible":
            lab = np.asarray(self.image_labels, dtype=np.float32)  # binary, so L1 = |a| + |b| - 2 a.b
            count = lab.sum(1)
            img_close = count[:, None] + count[None, :] - 2 * (lab @ lab.T) <= zeta + 0.5  # (N, N)
            rel = img_close[cap_img]
        else:
            rel = np.asarray(self.exact, dtype=bool)
        return rel if direction == "t2i" else np.ascontiguousarray(rel.T)


@dataclass
class Corpus:
    """A named data set: its splits plus what the reader knows of it (e.g. `class_split`)."""

    name: str
    splits: dict[str, Split]
    meta: dict = field(default_factory=dict)

    def __getitem__(self, split: str) -> Split:
        if split not in self.splits:
            raise KeyError(f"corpus {self.name!r} has no split {split!r} (has {sorted(self.splits)})")
        return self.splits[split]


def split_fingerprint(split: Split) -> str:
    """sha256 of a split's content: captions, caption→image map, image ids and pixels / regions / grid
    features, and the image paths when it holds no pixels. With pixels the paths are left out: they say where
    a cache or data root happens to be (a scenes export lives in the run cache), so run keys stay the same
    in another cache or on another machine. Arrays over 64 MB are fingerprinted by shape, dtype and 256
    evenly spaced items."""
    h = hashlib.sha256()
    for text in (split.name, "\n".join(split.image_ids), "\n".join(split.captions)):
        h.update(text.encode("utf-8"))
        h.update(b"\0")
    h.update(np.ascontiguousarray(split.caption_image, dtype=np.int64).tobytes())
    if split.image_paths is not None and split.images is None:
        h.update("\n".join(split.image_paths).encode("utf-8"))
    for arr in (split.images, split.regions, split.grid):
        if arr is None:
            continue
        h.update(f"{arr.shape}{arr.dtype}".encode())
        if arr.nbytes > 64 * 2**20:
            arr = arr[np.linspace(0, len(arr) - 1, 256).astype(np.int64)]
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()
