"""The embedded scenes benchmark: procedurally generated images with captions whose relevance is exact.

Each image is a canvas (default 64×64) with 1–4 objects (shape × colour × size × grid cell, one object
per cell) on a low-contrast textured background. Each image gets 5 captions from `scene_grammar` at four
levels of specificity, each with its logical form, so every relevance view is computed from the data:

- ``instance``: the image the caption was written for (COCO's protocol);
- ``class``: the (colour, shape) of the image's main object — the largest, ties to the first in reading
  order — 48 CUB-like classes, 12 of them held out as unseen (``corpus.meta["class_split"]``);
- ``plausible``: concept labels (which shapes and which colours occur, 14 bits) in ``image_labels``;
  `Split.relevance` applies ζ as in PCME's PMRP;
- ``exact``: the caption's logical form holds in the image (``Split.exact`` on val/test; on the train
  split, where (M, N) would be hundreds of MB, use `exact_block` for the pairs you need).

Each object also gets a region query ("a red shape", "a large circle": HMRN's multi-query retrieval) in
``Split.queries``, and region features come from `xmr_core.data.regions`. The ``multi`` variant (96×96,
4×4 grid, 5–10 objects) serves multi-query retrieval.

Generation is deterministic from `ScenesConfig.seed` (bit-identical arrays and captions) and cached under
``cache_dir()/scenes/<config hash>/`` with atomic writes; `load_scenes` returns a `Corpus`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from xmr_core.config import cache_dir, check_profile, recipe
from xmr_core.data import scene_grammar as g
from xmr_core.data.corpus import Corpus, DataFormatError, Split
from xmr_core.data.regions import RegionConfig, add_regions
from xmr_core.io import atomic_write, atomic_write_text, log_input

GENERATOR_VERSION = 2  # bump when the generated data change for the same config
SPLITS: tuple[str, ...] = ("train", "val", "test")
CAPTION_LEVELS = g.LEVELS

# base RGB of each colour in `scene_grammar.COLOURS`
RGB: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "green": (40, 165, 55),
    "blue": (40, 75, 215),
    "yellow": (235, 215, 40),
    "orange": (245, 135, 25),
    "purple": (135, 45, 185),
    "cyan": (40, 205, 215),
    "pink": (245, 125, 195),
}
RADIUS = (0.25, 0.40)  # object radius as a fraction of the grid cell, by size index
# how far each shape reaches beyond its nominal radius (for patches and jitter)
EXTENT = {"circle": 1.0, "square": 0.85, "triangle": 1.1, "diamond": 1.1, "star": 1.2, "cross": 1.05}


@dataclass(frozen=True)
class ScenesConfig:
    """Everything that determines the generated benchmark (its hash names the cache directory)."""

    seed: int = 0
    n_train: int = 8000
    n_val: int = 1000
    n_test: int = 1000
    image_size: int = 64
    grid: int = 3  # fine grid (grid × grid cells, one object per cell)
    min_objects: int = 1
    max_objects: int = 4
    captions_per_image: int = 5
    variant: str = "single"  # "single" (1–4 objects) or "multi" (up to 10, for multi-query retrieval)
    region_steps: int = 300  # training steps of the frozen region encoder

    def __post_init__(self) -> None:
        if self.variant not in ("single", "multi"):
            raise ValueError(f"unknown scenes variant {self.variant!r}; choose 'single' or 'multi'")
        if not 1 <= self.min_objects <= self.max_objects <= self.grid**2:
            raise ValueError(f"need 1 <= min_objects <= max_objects <= grid² ({self.grid**2}); got {self}")
        if self.max_objects > len(g.NUMBERS) - 1:
            raise ValueError(f"max_objects {self.max_objects} exceeds the grammar's numbers (up to ten)")
        if self.captions_per_image < 4:
            raise ValueError("captions_per_image must be at least 4 (one per level)")
        if self.image_size < 8 * self.grid:
            raise ValueError(f"image_size {self.image_size} is too small for a {self.grid}×{self.grid} grid")

    def split_sizes(self) -> dict[str, int]:
        return {"train": self.n_train, "val": self.n_val, "test": self.n_test}

    def key(self) -> str:
        """Short hash of the config and the generator version: the cache directory name."""
        blob = json.dumps({"version": GENERATOR_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


def scenes_config(profile: str = "cpu", variant: str = "single", seed: int = 0) -> ScenesConfig:
    """Presets. smoke: a few hundred images, seconds; cpu: sized so a chapter's models train in minutes
    on 2 cores, with a test split large enough that test-query noise is under a third of a central claim's interval
    variance (issue 76; docs/records.md, "Test split sizes"): 5,000 images and 25,000 captions (COCO 5K's size,
    whose 1K protocol is five real folds of 1,000 images), the multi variant 2,000 query sets; train and validation
    as before (each split has its own seed stream, so their bytes are unchanged). The multi variant (HMRN's
    multi-query retrieval) uses a 96×96 canvas, a 4×4 grid and 5–10 objects, so every image has at least five
    region queries."""
    check_profile(profile)
    if recipe(profile) == "paper":
        raise ValueError(f"the {profile} profile reads real data at DATA_ROOT, not the scenes benchmark")
    steps = {"smoke": 100, "cpu": 300}[profile]
    if variant == "single":
        sizes = {"smoke": (300, 100, 100), "cpu": (8000, 1000, 5000)}[profile]
        return ScenesConfig(seed, *sizes, region_steps=steps)
    if variant == "multi":
        sizes = {"smoke": (300, 100, 100), "cpu": (5000, 1000, 2000)}[profile]
        return ScenesConfig(
            seed,
            *sizes,
            image_size=96,
            grid=4,
            min_objects=5,
            max_objects=10,
            variant="multi",
            region_steps=steps,
        )
    raise ValueError(f"unknown scenes variant {variant!r}; choose 'single' or 'multi'")


# ------------------------------------------------------------------------------------------- layout


@dataclass
class Layout:
    """Objects of N images, padded to K = max_objects slots (padding = -1 / 0, `n_objects` says how many).

    shape, colour, size, row, col, pos: (N, K) int16; cx, cy, radius: (N, K) float32 pixels.
    """

    shape: np.ndarray
    colour: np.ndarray
    size: np.ndarray
    row: np.ndarray
    col: np.ndarray
    pos: np.ndarray
    cx: np.ndarray
    cy: np.ndarray
    radius: np.ndarray
    n_objects: np.ndarray  # (N,) int16

    @property
    def valid(self) -> np.ndarray:
        return np.arange(self.shape.shape[1])[None, :] < self.n_objects[:, None]

    def scene_arrays(self) -> g.SceneArrays:
        attrs = np.stack([self.shape, self.colour, self.size, self.pos], -1).astype(np.int16)
        return g.SceneArrays(attrs=attrs, row=self.row, col=self.col, valid=self.valid)

    def arrays(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def coarse_position(row: np.ndarray, col: np.ndarray, grid: int) -> np.ndarray:
    """Index into `scene_grammar.POSITIONS` (3×3, row-major) of fine grid cells, by their centres."""
    to3 = lambda x: np.floor(3 * (x.astype(np.float64) + 0.5) / grid).astype(np.int16)
    return to3(row) * 3 + to3(col)


def make_layout(cfg: ScenesConfig, n: int, rng: np.random.Generator) -> Layout:
    """Random objects: count uniform in [min, max], distinct cells, uniform attributes, jittered centres."""
    k = cfg.max_objects
    n_obj = rng.integers(cfg.min_objects, cfg.max_objects + 1, size=n).astype(np.int16)
    cells = np.argsort(rng.random((n, cfg.grid**2)), axis=1)[:, :k].astype(np.int16)
    shape = rng.integers(len(g.SHAPES), size=(n, k)).astype(np.int16)
    colour = rng.integers(len(g.COLOURS), size=(n, k)).astype(np.int16)
    size = rng.integers(len(g.SIZES), size=(n, k)).astype(np.int16)
    cell = cfg.image_size / cfg.grid
    radius = (np.asarray(RADIUS)[size] * cell * rng.uniform(0.92, 1.08, size=(n, k))).astype(np.float32)
    ext = np.asarray([EXTENT[s] for s in g.SHAPES])[shape] * radius
    slack = np.maximum(0.0, cell / 2 - ext - 1.0) * 0.6
    row, col = cells // cfg.grid, cells % cfg.grid
    cx = ((col + 0.5) * cell + rng.uniform(-1, 1, size=(n, k)) * slack).astype(np.float32)
    cy = ((row + 0.5) * cell + rng.uniform(-1, 1, size=(n, k)) * slack).astype(np.float32)
    valid = np.arange(k)[None, :] < n_obj[:, None]
    pad = lambda a: np.where(valid, a, -1).astype(np.int16)
    zero = lambda a: np.where(valid, a, 0).astype(np.float32)
    return Layout(
        shape=pad(shape), colour=pad(colour), size=pad(size), row=pad(row), col=pad(col),
        pos=pad(coarse_position(row, col, cfg.grid)), cx=zero(cx), cy=zero(cy), radius=zero(radius),
        n_objects=n_obj,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------- rendering

SUPERSAMPLE = 4


def _inside(shape: str, dx: np.ndarray, dy: np.ndarray, r: float) -> np.ndarray:
    """Bool mask of points (dx, dy) relative to the centre (y down) inside the shape of radius r."""
    if shape == "circle":
        return dx**2 + dy**2 <= r**2
    if shape == "square":
        return np.maximum(np.abs(dx), np.abs(dy)) <= 0.85 * r
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= 1.1 * r
    if shape == "cross":
        arm, half = 0.36 * r, 1.05 * r
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= half)) | ((np.abs(dy) <= arm) & (np.abs(dx) <= half))
    if shape == "triangle":  # equilateral, apex up, circumradius 1.1 r, centroid at the centre
        big = 1.1 * r
        return (dy <= big / 2) & (np.abs(dx) <= (dy + big) * np.tan(np.pi / 6))
    if shape == "star":  # five points, outer radius 1.2 r, inner 0.5 of that
        outer = 1.2 * r
        inner = 0.5 * outer
        rho = np.hypot(dx, dy)
        t = np.mod(np.arctan2(dx, -dy), 2 * np.pi / 5)
        t = np.minimum(t, 2 * np.pi / 5 - t)  # fold into [0, 36°] between an outer and an inner vertex
        px, py = rho * np.cos(t), rho * np.sin(t)
        ax, ay = outer, 0.0
        bx, by = inner * np.cos(np.pi / 5), inner * np.sin(np.pi / 5)
        return (bx - ax) * (py - ay) - (by - ay) * (px - ax) >= 0  # on the centre's side of the edge
    raise ValueError(f"unknown shape {shape!r}")


def _interp_matrix(n_out: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) bilinear interpolation weights (pixel centres aligned)."""
    x = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    lo = np.floor(x).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.arange(n_out), lo), 1 - (x - lo))
    np.add.at(w, (np.arange(n_out), hi), x - lo)
    return w


def _background(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """(n, size, size, 3) float32: grey 70–170 with a tint, two scales of smooth noise, pixel noise."""
    grey = rng.uniform(70, 170, size=(n, 1, 1, 1)).astype(np.float32)
    tint = rng.uniform(-12, 12, size=(n, 1, 1, 3)).astype(np.float32)
    tex = np.zeros((n, size, size), np.float32)
    for cells, amp in ((4, 10.0), (8, 6.0)):
        a = _interp_matrix(size, cells).astype(np.float32)
        tex += a @ (amp * rng.standard_normal((n, cells, cells), dtype=np.float32)) @ a.T
    noise = 4.0 * rng.standard_normal((n, size, size, 3), dtype=np.float32)
    return grey + tint + tex[..., None] + noise


def render(
    cfg: ScenesConfig, lay: Layout, rng: np.random.Generator, progress: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Draw every image. Returns images (N, S, S, 3) uint8 and object boxes (N, K, 4) float32
    (x0, y0, x1, y1 in pixels, x1/y1 exclusive; zeros for padding)."""
    n, k = lay.shape.shape
    s = cfg.image_size
    images = np.empty((n, s, s, 3), np.uint8)
    boxes = np.zeros((n, k, 4), np.float32)
    sub = (np.arange(SUPERSAMPLE) + 0.5) / SUPERSAMPLE
    chunk = 500
    for start in tqdm(range(0, n, chunk), desc="render", disable=not progress, leave=False):
        stop = min(n, start + chunk)
        canvas = _background(stop - start, s, rng)
        opacity = rng.uniform(0.75, 1.0, size=(stop - start, k))
        jitter = rng.uniform(-18, 18, size=(stop - start, k, 3))
        for i in range(start, stop):
            for j in range(int(lay.n_objects[i])):
                shape = g.SHAPES[lay.shape[i, j]]
                cx, cy, r = float(lay.cx[i, j]), float(lay.cy[i, j]), float(lay.radius[i, j])
                reach = EXTENT[shape] * r + 1
                x0, x1 = max(0, int(np.floor(cx - reach))), min(s, int(np.ceil(cx + reach)))
                y0, y1 = max(0, int(np.floor(cy - reach))), min(s, int(np.ceil(cy + reach)))
                xs = (np.arange(x0, x1)[:, None] + sub[None, :]).reshape(-1) - cx
                ys = (np.arange(y0, y1)[:, None] + sub[None, :]).reshape(-1) - cy
                inside = _inside(shape, xs[None, :], ys[:, None], r)
                cover = inside.reshape(y1 - y0, SUPERSAMPLE, x1 - x0, SUPERSAMPLE).mean((1, 3))
                alpha = (cover * opacity[i - start, j])[..., None]
                colour = np.asarray(RGB[g.COLOURS[lay.colour[i, j]]]) + jitter[i - start, j]
                patch = canvas[i - start, y0:y1, x0:x1]
                canvas[i - start, y0:y1, x0:x1] = patch * (1 - alpha) + colour * alpha
                ys_on, xs_on = np.nonzero(cover > 0.25)
                boxes[i, j] = (x0 + xs_on.min(), y0 + ys_on.min(), x0 + xs_on.max() + 1, y0 + ys_on.max() + 1)
        images[start:stop] = np.clip(np.rint(canvas), 0, 255).astype(np.uint8)
    return images, boxes


# ----------------------------------------------------------------------------------------- captions


def _objects(lay: Layout, i: int) -> tuple[np.ndarray, np.ndarray]:
    k = int(lay.n_objects[i])
    objs = np.stack([lay.shape[i, :k], lay.colour[i, :k], lay.size[i, :k], lay.pos[i, :k]], 1)
    return objs, np.stack([lay.row[i, :k], lay.col[i, :k]], 1)


def make_captions(cfg: ScenesConfig, lay: Layout, rng: np.random.Generator) -> list[g.Caption]:
    """`captions_per_image` captions per image, image-major."""
    out: list[g.Caption] = []
    for i in range(len(lay.n_objects)):
        objs, cells = _objects(lay, i)
        out.extend(g.image_captions(objs, cells, cfg.captions_per_image, rng))
    return out


def region_queries(
    lay: Layout, rng: np.random.Generator
) -> tuple[list[list[str]], list[list[g.LogicalForm]]]:
    """One query per object, in the layout's (random) object order, like a region caption: the object's
    shape or colour, plus (half the time) one more of its attributes ("a red shape", "a large circle",
    "a circle at the top left"). Returns the query texts and their logical forms (N lists of T_i)."""
    texts, lfs = [], []
    for i in range(len(lay.n_objects)):
        objs, _ = _objects(lay, i)
        t_i, l_i = [], []
        for obj in objs:
            first = int(rng.integers(2))  # 0 = shape, 1 = colour
            keep = {first}
            if rng.random() < 0.5:
                keep.add(int(rng.choice([j for j in range(4) if j != first])))
            d = g.Desc(*(int(obj[j]) if j in keep else g.ANY for j in range(4)))
            t_i.append(g.noun_phrase(d))
            l_i.append(g.LogicalForm(objects=(d,)))
        texts.append(t_i)
        lfs.append(l_i)
    return texts, lfs


def exact_matrix(lfs: list[g.LogicalForm], scenes: g.SceneArrays) -> np.ndarray:
    """(len(lfs), N) bool: each logical form evaluated on every scene (identical forms evaluated once)."""
    out = np.empty((len(lfs), len(scenes)), dtype=bool)
    seen: dict[g.LogicalForm, np.ndarray] = {}
    for q, lf in enumerate(lfs):
        if lf not in seen:
            seen[lf] = g.holds(lf, scenes)
        out[q] = seen[lf]
    return out


def _scene_subset(scenes: g.SceneArrays, idx: np.ndarray) -> g.SceneArrays:
    return g.SceneArrays(scenes.attrs[idx], scenes.row[idx], scenes.col[idx], scenes.valid[idx])


def exact_block(split: Split, caption_index: np.ndarray, image_index: np.ndarray) -> np.ndarray:
    """(len(caption_index), len(image_index)) bool exact relevance of a scenes split, computed on demand
    (e.g. to mask false negatives in a training batch, where the full train matrix is not stored)."""
    lfs = split.meta["logical_forms"]
    scenes = _scene_subset(split.meta["layout"].scene_arrays(), np.asarray(image_index))
    return exact_matrix([lfs[int(c)] for c in np.asarray(caption_index)], scenes)


# ------------------------------------------------------------------------------- classes and labels


def main_object(lay: Layout) -> np.ndarray:
    """(N,) slot of each image's main object: the largest, ties to the first in reading order."""
    big = np.where(lay.valid, lay.size, -1).astype(np.int64)
    order = np.where(lay.valid, lay.row.astype(np.int64) * 100 + lay.col, 10**6)  # int64: 10**6 overflows int16
    key = -big * 10**7 + order  # size first, then reading order
    return np.argmin(key, axis=1)


def class_names() -> list[str]:
    """Class index = shape * len(COLOURS) + colour -> 'red circle'."""
    return [f"{c} {s}" for s in g.SHAPES for c in g.COLOURS]


def image_class(lay: Layout) -> np.ndarray:
    """(N,) int64 class of each image: (shape, colour) of its main object."""
    m = main_object(lay)
    rows = np.arange(len(m))
    return lay.shape[rows, m].astype(np.int64) * len(g.COLOURS) + lay.colour[rows, m]


def class_split(seed: int) -> dict[str, list[int]]:
    """Seen / unseen classes for the zero-shot setting: each shape loses two colours, each colour is
    unseen with at most two shapes, so every attribute is still seen in training (a seeded choice)."""
    perm = np.random.default_rng(np.random.SeedSequence([seed, 7])).permutation(len(g.COLOURS))
    n_c = len(g.COLOURS)
    unseen = sorted(s * n_c + int(perm[(2 * s + t) % n_c]) for s in range(len(g.SHAPES)) for t in (0, 1))
    seen = [c for c in range(len(g.SHAPES) * n_c) if c not in unseen]
    return {"seen": seen, "unseen": unseen}


CONCEPTS: tuple[str, ...] = g.SHAPES + g.COLOURS


def concept_labels(lay: Layout) -> np.ndarray:
    """(N, 14) uint8 multi-hot: which shapes, then which colours occur (PCME's plausible-match labels)."""
    n = len(lay.n_objects)
    out = np.zeros((n, len(CONCEPTS)), np.uint8)
    rows = np.repeat(np.arange(n)[:, None], lay.shape.shape[1], 1)[lay.valid]
    out[rows, lay.shape[lay.valid]] = 1
    out[rows, len(g.SHAPES) + lay.colour[lay.valid]] = 1
    return out


# ------------------------------------------------------------------------------------ splits, cache


def _rng(cfg: ScenesConfig, split: str, stage: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([cfg.seed, SPLITS.index(split), stage]))


def generate_split(cfg: ScenesConfig, split: str, progress: bool = False) -> dict:
    """Generate one split: layout, pixels, boxes, captions with logical forms, region queries."""
    n = cfg.split_sizes()[split]
    lay = make_layout(cfg, n, _rng(cfg, split, 0))
    images, boxes = render(cfg, lay, _rng(cfg, split, 1), progress)
    caps = make_captions(cfg, lay, _rng(cfg, split, 2))
    q_text, q_lfs = region_queries(lay, _rng(cfg, split, 3))
    return {
        "layout": lay,
        "images": images,
        "boxes": boxes,
        "captions": caps,
        "queries": q_text,
        "query_lfs": q_lfs,
    }


PRETRAIN_STREAM = 7  # seed-stream index of the pretraining set (train / val / test use 0, 1, 2)


def generate_pretraining_set(cfg: ScenesConfig, n: int, progress: bool = False) -> dict:
    """The pretraining set (the ImageNet analogue): n more images of the same distribution from their own
    seed stream, so disjoint from train / val / test by construction; no captions. Layout and pixels
    (N, S, S, 3) uint8 and object_boxes (N, K, 4), for pretraining the frozen trunk and region encoder."""
    rng = lambda stage: np.random.default_rng(np.random.SeedSequence([cfg.seed, PRETRAIN_STREAM, stage]))
    lay = make_layout(cfg, n, rng(0))
    images, boxes = render(cfg, lay, rng(1), progress)
    return {"layout": lay, "images": images, "object_boxes": boxes}


def _save_split(root: Path, split: str, data: dict, exact: np.ndarray | None) -> None:
    def npy(name: str, arr: np.ndarray) -> None:
        atomic_write(root / f"{split}_{name}.npy", lambda fh: np.save(fh, arr, allow_pickle=False))

    npy("images", data["images"])
    npy("boxes", data["boxes"])
    atomic_write(root / f"{split}_layout.npz", lambda fh: np.savez(fh, **data["layout"].arrays()))
    if exact is not None:
        npy("exact", np.packbits(exact, axis=1))
    text = {
        "captions": [c.text for c in data["captions"]],
        "levels": [c.level for c in data["captions"]],
        "logical_forms": [c.lf.to_json() for c in data["captions"]],
        "queries": data["queries"],
        "query_logical_forms": [[lf.to_json() for lf in q] for q in data["query_lfs"]],
    }
    atomic_write_text(root / f"{split}_captions.json", json.dumps(text))


def _load_split(root: Path, split: str, n_captions: int) -> tuple[dict, np.ndarray | None]:
    def need(name: str) -> Path:
        path = root / name
        if not path.is_file():
            raise DataFormatError(f"{path}: missing from the scenes cache (delete {root} to regenerate)")
        return path

    with np.load(need(f"{split}_layout.npz")) as z:
        lay = Layout(**{k: z[k] for k in z.files})
    text = json.loads(need(f"{split}_captions.json").read_text(encoding="utf-8"))
    caps = [
        g.Caption(t, lv, g.LogicalForm.from_json(lf))
        for t, lv, lf in zip(text["captions"], text["levels"], text["logical_forms"], strict=True)
    ]
    data = {
        "layout": lay,
        "images": np.load(need(f"{split}_images.npy")),
        "boxes": np.load(need(f"{split}_boxes.npy")),
        "captions": caps,
        "queries": text["queries"],
        "query_lfs": [[g.LogicalForm.from_json(lf) for lf in q] for q in text["query_logical_forms"]],
    }
    path = root / f"{split}_exact.npy"
    exact = (
        np.unpackbits(np.load(path), axis=1, count=len(data["layout"].n_objects)).astype(bool)
        if path.is_file()
        else None
    )
    if exact is not None and exact.shape[0] != n_captions:
        raise DataFormatError(f"{path}: {exact.shape[0]} rows for {n_captions} captions")
    return data, exact


def _to_split(cfg: ScenesConfig, name: str, data: dict, exact: np.ndarray | None, source: str) -> Split:
    lay: Layout = data["layout"]
    n = len(lay.n_objects)
    per = cfg.captions_per_image
    image_ids = [f"scenes-{name}-{i:06d}" for i in range(n)]
    return Split(
        name=name,
        source=source,
        image_ids=image_ids,
        caption_ids=[f"{image_ids[i]}-{j}" for i in range(n) for j in range(per)],
        captions=[c.text for c in data["captions"]],
        caption_image=np.repeat(np.arange(n, dtype=np.int64), per),
        images=data["images"],
        image_class=image_class(lay),
        class_names=class_names(),
        image_labels=concept_labels(lay),
        exact=exact,
        caption_level=[c.level for c in data["captions"]],
        queries=data["queries"],
        meta={
            "layout": lay,
            "object_boxes": data["boxes"],
            "logical_forms": [c.lf for c in data["captions"]],
            "query_logical_forms": data["query_lfs"],
            "concepts": list(CONCEPTS),
        },
    ).validate()


def scenes_dir(cfg: ScenesConfig) -> Path:
    return cache_dir() / "scenes" / cfg.key()


def default_region_config(cfg: ScenesConfig) -> RegionConfig:
    """Region slots = the most objects an image has plus four background boxes; the config's steps."""
    return RegionConfig(slots=cfg.max_objects + 4, steps=cfg.region_steps, seed=cfg.seed)


def load_scenes(
    config: ScenesConfig | str = "cpu", progress: bool = True, regions: bool | RegionConfig = True
) -> Corpus:
    """The scenes benchmark for a config (or a profile name): generated once, then read from the cache.

    Every split holds images (N, S, S, 3) uint8, 5 captions per image with levels and logical forms
    (``meta["logical_forms"]``), classes, concept labels and region queries; val/test hold `exact`.
    With `regions` (True = `default_region_config`), also `regions` (N, R, D) and `region_boxes`
    (N, R, 4) from the frozen region encoder (`xmr_core.data.regions`), cached beside the images.
    """
    cfg = scenes_config(config) if isinstance(config, str) else config
    root = scenes_dir(cfg)
    done = root / "meta.json"
    splits: dict[str, Split] = {}
    if done.is_file():
        meta = json.loads(done.read_text(encoding="utf-8"))
        for name in SPLITS:
            data, exact = _load_split(root, name, cfg.split_sizes()[name] * cfg.captions_per_image)
            splits[name] = _to_split(cfg, name, data, exact, str(root))
    else:
        t0, c0 = time.perf_counter(), time.process_time()
        for name in tqdm(SPLITS, desc="scenes", disable=not progress):
            data = generate_split(cfg, name, progress)
            exact = None
            if name != "train":
                exact = exact_matrix([c.lf for c in data["captions"]], data["layout"].scene_arrays())
            _save_split(root, name, data, exact)
            splits[name] = _to_split(cfg, name, data, exact, str(root))
        meta = {
            "config": dataclasses.asdict(cfg),
            "version": GENERATOR_VERSION,
            "generation_seconds": round(time.perf_counter() - t0, 2),
            "generation_cpu_seconds": round(time.process_time() - c0, 2),  # wall time varies on a shared CPU
        }
        atomic_write_text(done, json.dumps(meta, indent=1))  # written last: marks the cache complete
    if regions:
        rcfg = default_region_config(cfg) if regions is True else regions
        pretraining_set = lambda n: generate_pretraining_set(cfg, n)
        meta["regions"] = add_regions(splits, root / f"regions-{rcfg.key()}", rcfg, cfg.seed, pretraining_set,
                                      progress)
        log_input(root / f"regions-{rcfg.key()}")  # its features enter the run keys (`xmr_core.runs.log`)
    split_classes = class_split(cfg.seed)
    names = class_names()
    return Corpus(
        name=f"scenes-{cfg.variant}",
        splits=splits,
        meta={
            **meta,
            "cache_dir": str(root),
            "class_split": split_classes,
            "class_split_names": {k: [names[c] for c in v] for k, v in split_classes.items()},
            "concepts": list(CONCEPTS),
        },
    )


# ------------------------------------------------------------------------------------- statistics


def _r_precision(rel: np.ndarray, order: np.ndarray) -> np.ndarray:
    """(Q,) R-Precision (0–1) of one ranking `order` of the gallery used for every query; rel (Q, G)."""
    r = rel.sum(1)
    hits = np.cumsum(rel[:, order], axis=1, dtype=np.int32)
    return hits[np.arange(len(rel)), np.maximum(r, 1) - 1] / np.maximum(r, 1)


def _view_rows(split: Split, view: str, zeta: int, direction: str) -> list[dict]:
    rel = split.relevance(view, direction, zeta)  # (Q, G)
    inst = split.relevance("instance", direction)
    npos = rel.sum(1)
    own = (rel & inst).sum(1)  # the query's instance positives, all of which are positives of every view
    popularity = np.argsort(-rel.sum(0), kind="stable")  # one constant ranking: most-often-relevant first
    rp_pop = _r_precision(rel, popularity)
    levels = np.asarray(split.caption_level) if direction == "t2i" else np.full(len(rel), "all")
    rows = []
    for level in (
        [*(lv for lv in CAPTION_LEVELS if lv in set(levels)), "all"] if direction == "t2i" else ["all"]
    ):
        q = np.ones(len(rel), bool) if level == "all" else levels == level
        p = npos[q]
        rows.append({
            "split": split.name,
            "view": view if view != "plausible" else f"plausible ζ={zeta}",
            "direction": direction,
            "level": level,
            "queries": int(q.sum()),
            "share %": 100 * q.sum() / len(rel),
            "positives mean": p.mean(),
            "positives median": float(np.median(p)),
            "positives p10": float(np.percentile(p, 10)),
            "positives p90": float(np.percentile(p, 90)),
            "positives max": int(p.max()),
            "only own %": 100 * np.mean(p == own[q]),
            "instance R@1 ceiling": 100 * np.mean(own[q] / p),
            "random R-P": 100 * np.mean(p / rel.shape[1]),
            "popularity R-P": 100 * rp_pop[q].mean(),
        })  # fmt: skip
    return rows


def scenes_statistics(corpus: Corpus, split: str = "test") -> pd.DataFrame:
    """Relevance statistics of one split, a row per view × direction × caption level.

    positives: gallery items relevant to a query under the view; only own %: queries whose positives are
    exactly their instance positives; instance R@1 ceiling: instance R@1 of a perfect model of the view
    that breaks ties at random (t2i: 1 / positives; i2t: own captions / positives); random R-P: expected
    R-Precision of a random ranking; popularity R-P: R-Precision of one constant ranking, most-often-
    relevant items first (e.g. vague captions first for i2t). All in percent.
    """
    s = corpus[split]
    rows = []
    for direction in ("t2i", "i2t"):
        for view in s.views():
            zetas = (0, 1, 2) if view == "plausible" else (0,)
            for zeta in zetas:
                rows.extend(_view_rows(s, view, zeta, direction))
    return pd.DataFrame(rows)


def query_holds(split: Split) -> list[np.ndarray]:
    """Exact relevance of the region queries of a scenes split: one (T_i, N) bool per image i, True where its
    query t holds in image g (the positives of `query_round_statistics`)."""
    scenes = split.meta["layout"].scene_arrays()
    lfs = split.meta["query_logical_forms"]
    holds = exact_matrix([lf for q in lfs for lf in q], scenes)  # (total queries, N)
    return np.split(holds, np.cumsum([len(q) for q in lfs])[:-1])


def query_attributes(split: Split) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The region queries of a scenes split as attribute values, the input of `xmr_core.ceiling.multi_round_ceiling`:
    per image i a (T_i, 4) int64 array (shape, colour, size, position; `scene_grammar.ANY` where a query names
    none), every image's objects (N, K, 4) int64 and which object slots are real (N, K) bool."""
    lay = split.meta["layout"]
    queries = []
    for i, lfs in enumerate(split.meta["query_logical_forms"]):
        if any(len(lf.objects) != 1 or lf.counts or lf.relations for lf in lfs):
            raise ValueError(f"{split.source}: split {split.name!r}, image {i}: a region query names more than one "
                             "object")
        queries.append(np.array([lf.objects[0] for lf in lfs], dtype=np.int64).reshape(len(lfs), 4))
    objects = np.stack([lay.shape, lay.colour, lay.size, lay.pos], -1).astype(np.int64)
    return queries, objects, lay.valid.copy()


def query_round_statistics(split: Split, max_rounds: int = 10) -> pd.DataFrame:
    """Multi-query retrieval (HMRN) on a scenes split: after r rounds an image's positives are the images
    where all of its first r region queries hold. A row per round r over the images with at least r
    queries: positives per image, share whose only positive is the image itself, and the R@1 ceiling of a
    perfect exact model that breaks ties at random (mean 1 / positives), in percent."""
    holds = query_holds(split)
    rows = []
    for r in range(1, max_rounds + 1):
        imgs = [i for i in range(split.n_images) if len(holds[i]) >= r]
        if not imgs:
            break
        pos = np.array([holds[i][:r].all(0).sum() for i in imgs])
        rows.append({
            "round": r,
            "images": len(imgs),
            "positives mean": pos.mean(),
            "positives median": float(np.median(pos)),
            "only own %": 100 * np.mean(pos == 1),
            "R@1 ceiling": 100 * np.mean(1 / pos),
        })  # fmt: skip
    return pd.DataFrame(rows)
