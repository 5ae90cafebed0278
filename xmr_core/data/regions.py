"""Region features for the scenes benchmark: the analogue of BUTD's 36 Faster R-CNN regions.

Each image gets R region boxes: one per object (its box, plus a margin) and background boxes (seeded
random boxes that overlap no object much) up to a fixed R, in a seeded random order per image (as a
detector's order, it carries no correspondence to the region queries). Crops are resized to
`crop_size`² with RoIAlign and encoded by a small CNN pretrained once, on crops of the *pretraining set*
(`scenes.generate_pretraining_set`, disjoint from train / val / test, as the image trunk:
`xmr_core.encoders.trunk`), to predict each region's shape, colour and size ("background" for background
crops), by the same loop as the trunk (`encoders.attributes.fit_attribute_classifier`), then frozen.

Feature of a region = the CNN's penultimate activations (`feature_dim`, post-ReLU, like BUTD's pooled
features) followed by its normalised box (x0/W, y0/H, x1/W, y1/H), so an encoder can recover where a
region is and how large it is (a crop resized to a fixed size loses both). D = feature_dim + 4.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torchvision.ops import roi_align

from xmr_core.config import one_thread
from xmr_core.data import scene_grammar as g
from xmr_core.data.corpus import DataFormatError, Split
from xmr_core.encoders.attributes import AttributeTraining, attribute_accuracy, fit_attribute_classifier
from xmr_core.io import atomic_write, atomic_write_text

REGION_VERSION = 2  # bump when the features change for the same config
BOX_DIMS = 4


@dataclass(frozen=True)
class RegionConfig:
    """Region boxes and the frozen region encoder (its hash names the cache sub-directory)."""

    slots: int = 8  # R regions per image: every object plus background boxes
    crop_size: int = 16
    feature_dim: int = 64
    margin: float = 2.0  # pixels added around an object's box
    steps: int = 300  # training steps of the encoder (random batches of pretraining-set crops)
    pretrain_images: int = 4000  # pretraining-set images whose regions it is trained on
    batch_size: int = 128
    lr: float = 3e-3
    seed: int = 0

    @property
    def dim(self) -> int:
        """D of the region features: CNN features plus the normalised box."""
        return self.feature_dim + BOX_DIMS

    def key(self) -> str:
        blob = json.dumps({"version": REGION_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _iou_max(box: np.ndarray, others: np.ndarray) -> float:
    """Largest intersection over the *object's* area between `box` (4,) and each of `others` (k, 4)."""
    if len(others) == 0:
        return 0.0
    ix = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    iy = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    area = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    return float((ix * iy / area).max())


def region_boxes(
    object_boxes: np.ndarray,
    n_objects: np.ndarray,
    image_size: int,
    cfg: RegionConfig,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (N, R, 4) float32 (x0, y0, x1, y1 pixels) and labels (N, R) int64: the object slot each
    region shows, or -1 for background. Background boxes cover at most 30% of any object."""
    n, k = object_boxes.shape[:2]
    if cfg.crop_size % 4:
        raise ValueError(f"crop_size must be a multiple of 4, got {cfg.crop_size}")
    if k > cfg.slots:
        raise ValueError(f"{cfg.slots} region slots cannot hold up to {k} objects; raise RegionConfig.slots")
    boxes = np.zeros((n, cfg.slots, 4), np.float32)
    slot = np.full((n, cfg.slots), -1, np.int64)
    for i in range(n):
        objs = object_boxes[i, : int(n_objects[i])].astype(np.float64)
        grown = np.concatenate([objs[:, :2] - cfg.margin, objs[:, 2:] + cfg.margin], 1).clip(0, image_size)
        found = list(grown)
        while len(found) < cfg.slots:
            w, h = rng.uniform(0.15, 0.4, size=2) * image_size
            x0, y0 = rng.uniform(0, image_size - w), rng.uniform(0, image_size - h)
            cand = np.array([x0, y0, x0 + w, y0 + h])
            if _iou_max(cand, objs) <= 0.3:
                found.append(cand)
        order = rng.permutation(cfg.slots)
        boxes[i] = np.asarray(found, np.float32)[order]
        labels = np.concatenate([np.arange(len(objs)), np.full(cfg.slots - len(objs), -1)])
        slot[i] = labels[order]
    return boxes, slot


def crops(images: np.ndarray, boxes: np.ndarray, crop_size: int, chunk: int = 500) -> torch.Tensor:
    """(N*R, 3, c, c) float crops in [0, 1] of images (N, S, S, 3) uint8 at boxes (N, R, 4), RoIAlign
    (a chunk of images at a time, so no float copy of the whole split is made)."""
    out = []
    for start in range(0, len(images), chunk):
        x = torch.from_numpy(images[start : start + chunk]).permute(0, 3, 1, 2).float() / 255.0
        b = torch.from_numpy(boxes[start : start + chunk].reshape(-1, 4)).float()
        idx = torch.arange(len(x), dtype=torch.float32).repeat_interleave(boxes.shape[1])[:, None]
        out.append(
            roi_align(x, torch.cat([idx, b], 1), crop_size, spatial_scale=1.0, sampling_ratio=2, aligned=True)
        )
    return torch.cat(out)


class RegionEncoder(nn.Module):
    """Small CNN: crop (B, 3, c, c) -> features (B, feature_dim), with attribute heads for its training.
    Two conv-BN-ReLU-maxpool blocks (16, 32 channels), flattened (c/4)² × 32, linear + ReLU."""

    def __init__(self, crop_size: int = 16, feature_dim: int = 64) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)
            )

        self.body = nn.Sequential(block(3, 16), block(16, 32), nn.Flatten())
        self.proj = nn.Sequential(nn.Linear(32 * (crop_size // 4) ** 2, feature_dim), nn.ReLU())
        # one extra class per head for background
        self.heads = nn.ModuleList(
            nn.Linear(feature_dim, n + 1) for n in (len(g.SHAPES), len(g.COLOURS), len(g.SIZES))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.body(x))

    def logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        f = self(x)
        return [h(f) for h in self.heads]


def region_targets(layout, slot: np.ndarray) -> torch.Tensor:
    """(N*R, 3) int64 targets (shape, colour, size) of each region; background = the extra last class."""
    n, r = slot.shape
    rows = np.repeat(np.arange(n), r)
    s = slot.reshape(-1)
    out = np.empty((n * r, 3), np.int64)
    for j, (attr, n_cls) in enumerate(
        ((layout.shape, len(g.SHAPES)), (layout.colour, len(g.COLOURS)), (layout.size, len(g.SIZES)))
    ):
        out[:, j] = np.where(s >= 0, attr[rows, np.maximum(s, 0)], n_cls)
    return torch.from_numpy(out)


@torch.no_grad()
def encode(model: RegionEncoder, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """(B, feature_dim) features of crops x (B, 3, c, c)."""
    return torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


def region_features(model: RegionEncoder, x: torch.Tensor, boxes: np.ndarray, image_size: int) -> np.ndarray:
    """(N, R, feature_dim + 4) float32: CNN features then the box normalised by the canvas size."""
    n, r = boxes.shape[:2]
    f = encode(model, x).numpy().reshape(n, r, -1)
    return np.concatenate([f, boxes / image_size], -1).astype(np.float32)


def add_regions(
    splits: dict[str, Split], root: Path, cfg: RegionConfig, seed: int, pretraining_set: Callable[[int], dict],
    progress: bool = True,
) -> dict:
    """Fill `regions` (N, R, D) and `region_boxes` (N, R, 4) of every split, in place; pretrain the encoder
    on `pretraining_set(cfg.pretrain_images)` (a dict with "layout", "images", "object_boxes") if `root` (a
    cache directory) does not hold it yet. Returns the regions' meta (held-out attribute accuracy on the
    val split, times), also cached. `meta["region_object"]` (N, R) gives the object slot each region shows
    (-1 = background)."""
    done = root / "regions_meta.json"
    names = list(splits)
    if done.is_file():
        for name in names:
            s = splits[name]
            paths = [root / f"{name}_{what}.npy" for what in ("regions", "region_boxes", "region_object")]
            for p in paths:
                if not p.is_file():
                    raise DataFormatError(f"{p}: missing from the region cache (delete {root} to regenerate)")
            s.regions, s.region_boxes, s.meta["region_object"] = (np.load(p) for p in paths)
            s.validate()
        return json.loads(done.read_text(encoding="utf-8"))
    with one_thread():  # portable features (`config.one_thread`); a small CNN is faster so on a shared CPU too
        meta = _build_regions(splits, root, cfg, seed, pretraining_set, progress)
    atomic_write_text(done, json.dumps(meta, indent=1))  # written last: marks the cache complete
    return meta


def _build_regions(
    splits: dict[str, Split], root: Path, cfg: RegionConfig, seed: int, pretraining_set: Callable[[int], dict],
    progress: bool,
) -> dict:
    names = list(splits)
    t0, c0 = time.perf_counter(), time.process_time()
    size = int(splits["train"].images.shape[1])

    def regions_of(layout, images: np.ndarray, object_boxes: np.ndarray, stream: int):
        rng = np.random.default_rng(np.random.SeedSequence([seed, cfg.seed, stream, 11]))
        boxes, slot = region_boxes(object_boxes, layout.n_objects, size, cfg, rng)
        return boxes, slot, crops(images, boxes, cfg.crop_size), region_targets(layout, slot)

    data = {name: regions_of(splits[name].meta["layout"], splits[name].images, splits[name].meta["object_boxes"], i)
            for i, name in enumerate(names)}
    pre = pretraining_set(cfg.pretrain_images)
    _, _, pre_x, pre_y = regions_of(pre["layout"], pre["images"], pre["object_boxes"], len(names))
    t1 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    model = RegionEncoder(cfg.crop_size, cfg.feature_dim)
    training = AttributeTraining(steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed)
    fit_attribute_classifier(model, pre_x, pre_y, training, "region encoder", progress)
    t2 = time.perf_counter()
    held_out = "val" if "val" in data else "train"
    acc = attribute_accuracy(model, data[held_out][2], data[held_out][3], ("shape", "colour", "size"))
    for name in names:
        boxes, slot, x, _ = data[name]
        s = splits[name]
        s.regions, s.region_boxes, s.meta["region_object"] = (
            region_features(model, x, boxes, size),
            boxes,
            slot,
        )
        s.validate()
        for what, arr in (("regions", s.regions), ("region_boxes", boxes), ("region_object", slot)):
            atomic_write(root / f"{name}_{what}.npy", lambda fh, a=arr: np.save(fh, a, allow_pickle=False))
    atomic_write(root / "region_encoder.pt", lambda fh: torch.save(model.state_dict(), fh))
    meta = {
        "config": dataclasses.asdict(cfg),
        "dim": cfg.dim,
        "trained_on": f"{cfg.pretrain_images} pretraining-set images ({len(pre_x)} crops)",
        f"{held_out}_accuracy": acc,
        "crop_seconds": round(t1 - t0, 2),
        "train_seconds": round(t2 - t1, 2),
        "total_seconds": round(time.perf_counter() - t0, 2),
        "total_cpu_seconds": round(time.process_time() - c0, 2),
    }
    return meta
