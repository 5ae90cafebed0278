"""The pretrained image trunk, the ImageNet analogue of the scenes benchmark, and its frozen grid features.

The papers start from ImageNet-pretrained ResNets (PCME, PVSE, DVSE) or frozen detector features (HREM,
HMRN). On scenes the trunk (`image.conv_trunk`, the `SmallCNN` blocks) is pretrained once per scenes
configuration on the *pretraining set* (`scenes.generate_pretraining_set`: images from their own seed
stream, disjoint from train / val / test), supervised by the exactly known objects: for every fine grid
cell, the shape, colour and size of its object, or "empty" (a head over the flattened grid, dropped after
pretraining). The region encoder (`xmr_core.data.regions`) is pretrained by the same loop
(`encoders.attributes.fit_attribute_classifier`) on crops of the same set.

The trunk is cached under `cache_dir()/trunks/<key>/` (`trunk.pt`, read with `weights_only=True`, and
`meta.json` with the held-out accuracy per attribute), the key hashing this config and everything of the
scenes config that changes the images. `attach_grid_features` runs it once over every split and caches
the grid features (N, L, C), so training a head and a text encoder costs no CNN pass (`ImageEncoder` kind
"grid"). The `paper` profile goes through the same path with a torchvision ResNet and ImageNet weights
(`imagenet_trunk`, keyed by the digest of the weights file), its features computed on the run's device in chunks
into a memory-mapped file that a killed extraction resumes (`write_grid_features`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from xmr_core.config import one_thread
from xmr_core.data import scene_grammar as g
from xmr_core.data.corpus import DataFormatError, Split, split_fingerprint
from xmr_core.data.scenes import GENERATOR_VERSION, Layout, ScenesConfig, generate_pretraining_set
from xmr_core.encoders.attributes import AttributeTraining, fit_attribute_classifier
from xmr_core.encoders.image import (
    GridHead,
    ResNetEncoder,
    conv_trunk,
    grid_side,
    grid_to_sequence,
    imagenet_weights_path,
)
from xmr_core.encoders.trunk_cache import load_trunk_state, trunk_dir
from xmr_core.io import atomic_write, atomic_write_text, file_digest, log_input

TRUNK_VERSION = 1  # bump when pretraining changes for the same config
ATTRIBUTES: tuple[str, ...] = ("shape", "colour", "size")
N_CLASSES: tuple[int, ...] = (len(g.SHAPES) + 1, len(g.COLOURS) + 1, len(g.SIZES) + 1)  # + "empty"


@dataclass(frozen=True)
class TrunkConfig:
    """The scenes trunk and its pretraining (defaults: the cpu profile; at most a few minutes on 2 cores)."""

    widths: tuple[int, ...] = (16, 32, 64, 128)
    n_images: int = 8000  # pretraining set, of which `held_out` are kept for the accuracy table
    held_out: int = 2000
    hidden: int = 512  # the pretraining head's hidden layer
    # 600 steps of 128: about 3 minutes on 2 cores, held-out shape accuracy on object cells > 99% (cpu)
    training: AttributeTraining = field(default_factory=lambda: AttributeTraining(steps=600, batch_size=128,
                                                                                   lr=3e-3))

    def key(self, scenes: ScenesConfig) -> str:
        """Hash of this config and the scenes rendering it is trained on (not the split sizes)."""
        images = {k: getattr(scenes, k) for k in ("seed", "image_size", "grid", "min_objects", "max_objects",
                                                   "variant")}
        blob = json.dumps({"version": TRUNK_VERSION, "generator": GENERATOR_VERSION, "scenes": images,
                           **dataclasses.asdict(self)}, sort_keys=True)
        return "scenes-" + hashlib.sha1(blob.encode()).hexdigest()[:12]


def trunk_config(profile: str) -> TrunkConfig:
    """smoke: a tiny trunk in seconds (CI); cpu: the book's trunk."""
    if profile == "smoke":
        return TrunkConfig(widths=(8, 16, 32, 64), n_images=1200, held_out=200, hidden=128,
                           training=AttributeTraining(steps=60, batch_size=64, lr=3e-3))
    return TrunkConfig()


def cell_targets(layout: Layout, grid: int) -> Tensor:
    """(N, grid², 3) int64: shape, colour and size of the object in each fine cell (row-major), or the
    extra last class ("empty") of each attribute."""
    n = len(layout.n_objects)
    out = np.empty((n, grid * grid, len(ATTRIBUTES)), np.int64)
    for t, n_cls in enumerate(N_CLASSES):
        out[..., t] = n_cls - 1
    valid = layout.valid
    rows, slots = np.nonzero(valid)
    cells = layout.row[rows, slots].astype(np.int64) * grid + layout.col[rows, slots]
    for t, attr in enumerate((layout.shape, layout.colour, layout.size)):
        out[rows, cells, t] = attr[rows, slots]
    return torch.from_numpy(out)


class TrunkPretrainer(nn.Module):
    """The trunk plus its pretraining head: images (B, 3, S, S) -> per-cell logits, one (B, cells, C_t) per
    attribute. Only `trunk` is kept."""

    def __init__(self, cfg: TrunkConfig, image_size: int, cells: int) -> None:
        super().__init__()
        self.trunk = conv_trunk(cfg.widths)
        self.cells = cells
        side = grid_side(image_size, cfg.widths)
        self.head = GridHead(cfg.widths[-1], side * side, cells * sum(N_CLASSES), cfg.hidden)

    def logits(self, images: Tensor) -> list[Tensor]:
        out = self.head(grid_to_sequence(self.trunk(images))).view(len(images), self.cells, sum(N_CLASSES))
        return list(out.split(N_CLASSES, dim=-1))


def normalise(images: np.ndarray) -> Tensor:
    """uint8 (N, S, S, 3) -> float32 (N, 3, S, S) with the ImageNet mean and std (as `datasets.VisualReader`)."""
    from xmr_core.data.datasets import IMAGENET_MEAN, IMAGENET_STD

    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0)
    return (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


@dataclass
class PretrainedTrunk:
    """A frozen trunk (images (B, 3, H, W) -> grid (B, C, h, w)), its cache key and what its pretraining
    measured (`meta`: held-out accuracy per attribute, seconds)."""

    net: nn.Module
    key: str
    meta: dict

    @property
    def channels(self) -> int:
        return int(self.meta["channels"])

    @property
    def cells(self) -> int:
        return int(self.meta["cells"])


def pretrained_trunk(scenes: ScenesConfig, cfg: TrunkConfig | None = None, progress: bool = True) -> PretrainedTrunk:
    """The scenes trunk for this scenes config: loaded from the cache, or pretrained once and cached."""
    cfg = cfg or TrunkConfig()
    key = cfg.key(scenes)
    root = trunk_dir(key)
    net = conv_trunk(cfg.widths)
    done = root / "meta.json"
    if done.is_file():
        net.load_state_dict(load_trunk_state(key))
        meta = json.loads(done.read_text(encoding="utf-8"))
    else:
        with one_thread():  # the same trunk on any machine (`config.one_thread`): its features enter run keys
            state, meta = _pretrain(scenes, cfg, progress)
        meta = json.loads(json.dumps(meta))  # the same types as when read back from the cache
        net.load_state_dict(state)
        atomic_write(root / "trunk.pt", lambda fh: torch.save(net.state_dict(), fh))
        atomic_write_text(done, json.dumps(meta, indent=1))  # written last: marks the cache complete
    log_input(root, ["trunk.pt", "meta.json"])  # its features enter the run keys (`xmr_core.runs.log`)
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return PretrainedTrunk(net, key, meta)


def _pretrain(scenes: ScenesConfig, cfg: TrunkConfig, progress: bool) -> tuple[dict[str, Tensor], dict]:
    """Generate the pretraining set, fit trunk + head (seeded), measure held-out accuracy: (trunk state, meta)."""
    t0, c0 = time.perf_counter(), time.process_time()
    data = generate_pretraining_set(scenes, cfg.n_images, progress)
    x, y = normalise(data["images"]), cell_targets(data["layout"], scenes.grid)
    n_fit = cfg.n_images - cfg.held_out
    torch.manual_seed(cfg.training.seed)
    model = TrunkPretrainer(cfg, scenes.image_size, scenes.grid**2)
    t1 = time.perf_counter()
    losses = fit_attribute_classifier(model, x[:n_fit], y[:n_fit], cfg.training, "pretrain trunk", progress)
    t2 = time.perf_counter()
    held_x, held_y = x[n_fit:], y[n_fit:]
    every_cell, objects = _held_out_accuracy(model, held_x, held_y)
    side = grid_side(scenes.image_size, cfg.widths)
    return model.trunk.state_dict(), {
        "key": cfg.key(scenes), "config": dataclasses.asdict(cfg), "channels": cfg.widths[-1], "cells": side * side,
        "held_out_images": cfg.held_out, "accuracy_every_cell": every_cell, "accuracy_objects": objects,
        "final_loss": float(np.mean(losses[-50:])), "generate_seconds": round(t1 - t0, 2),
        "train_seconds": round(t2 - t1, 2), "total_seconds": round(time.perf_counter() - t0, 2),
        "total_cpu_seconds": round(time.process_time() - c0, 2),
    }


@torch.no_grad()
def _held_out_accuracy(model: TrunkPretrainer, x: Tensor, y: Tensor) -> tuple[dict[str, float], dict[str, float]]:
    """Accuracy (%) per attribute over every cell, and over the cells that hold an object (empty cells are
    the easy majority) with that of "is this cell empty" over every cell; one pass over x."""
    logits = [torch.cat(parts) for parts in zip(*(model.logits(x[s:s + 1024]) for s in range(0, len(x), 1024)))]
    correct = [lg.argmax(-1) == y[..., t] for t, lg in enumerate(logits)]
    occupied = y[..., 0] < N_CLASSES[0] - 1  # (n, cells)
    every_cell = {name: 100.0 * float(c.float().mean()) for name, c in zip(ATTRIBUTES, correct)}
    objects = {name: 100.0 * float(c[occupied].float().mean()) for name, c in zip(ATTRIBUTES, correct)}
    objects["empty"] = 100.0 * float(((logits[0].argmax(-1) == N_CLASSES[0] - 1) == ~occupied).float().mean())
    return every_cell, objects


NO_WEIGHTS_SEED = 0  # torchvision's initialisation of a trunk without ImageNet weights is drawn from this seed


def imagenet_trunk(arch: str = "resnet152", weights: str | None = "") -> PretrainedTrunk:
    """The paper profile's trunk: a torchvision ResNet cut before GAP. `weights`: a state-dict file of its ImageNet
    weights ("": torchvision's cache file of `arch`, `image.imagenet_weights_path`; never downloaded, a missing file
    is named with the notebook parameter `IMAGE_WEIGHTS`), or None: no ImageNet weights (torchvision's
    initialisation drawn from `NO_WEIGHTS_SEED`, labelled so in `meta["source"]`). The key names the weights by
    the SHA-256 of the bytes of the file loaded (None: by the seed), so features are never shared between weights."""
    if weights is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(NO_WEIGHTS_SEED)
            resnet = ResNetEncoder(embed_dim=1, arch=arch, pretrained=False)  # type: ignore[arg-type]
        digest, tag = None, f"init{NO_WEIGHTS_SEED}z"  # its residual branches zero-scaled (`ResNetEncoder`)
        source = (f"no ImageNet weights (torchvision's initialisation, seed {NO_WEIGHTS_SEED}, residual branches "
                  "zero-scaled)")
    else:
        path = Path(weights) if weights else imagenet_weights_path(arch)
        resnet = ResNetEncoder(embed_dim=1, arch=arch, pretrained=str(path))  # type: ignore[arg-type]
        digest = file_digest(path)
        tag, source = digest[:16], f"ImageNet weights {path} (sha256 {digest[:16]})"
    net = resnet.backbone.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return PretrainedTrunk(net, f"{arch}-{tag}", {"channels": resnet.out_channels, "cells": 49, "arch": arch,
                                                  "weights": None if weights is None else str(path),
                                                  "weights_sha256": digest, "source": source})


# ------------------------------------------------------------------------------------ frozen grid features
FEATURE_BATCHES = 16  # batches a chunk of extracted features: the unit written, timed and resumed


def feature_workers(device: str | torch.device) -> int:
    """Loader workers of a feature extraction: on a GPU up to 8 processes decode images beside it; on the CPU none
    (the book's one-thread rule: a CPU extraction, as a CPU run, takes one core, `config.one_thread`)."""
    return min(8, os.cpu_count() or 1) if torch.device(device).type == "cuda" else 0


@torch.no_grad()
def _forward(net: nn.Module, split: Split, rows: range, batch_size: int, device: torch.device,
             workers: int) -> np.ndarray:
    """(len(rows), L, C) float32 grid features of the split's images `rows`, in order."""
    from xmr_core.data.datasets import image_loader

    out = [grid_to_sequence(net(batch["images"].to(device))).cpu().numpy()
           for batch in image_loader(split, batch_size, visual="pixels", num_workers=workers, rows=rows)]
    return np.concatenate(out).astype(np.float32)


def _check_shape(trunk: PretrainedTrunk, split: Split, shape: tuple[int, ...]) -> None:
    if tuple(shape[1:]) != (trunk.cells, trunk.channels):
        raise DataFormatError(f"{split.source}: trunk {trunk.key} gave grid features of shape {tuple(shape[1:])}, "
                              f"expected ({trunk.cells}, {trunk.channels})")


def grid_features(trunk: PretrainedTrunk, split: Split, batch_size: int = 256,
                  device: str | torch.device = "cpu") -> np.ndarray:
    """(N, L, C) float32 grid features of every image of the split, in split order, in memory (pixels through the
    same reader as training: `datasets.image_loader`); `write_grid_features` writes them to a file in chunks."""
    device = torch.device(device)
    features = _forward(trunk.net.to(device), split, range(len(split.image_ids)), batch_size, device, 0)
    _check_shape(trunk, split, features.shape)
    return features


def write_grid_features(trunk: PretrainedTrunk, split: Split, path: Path, batch_size: int = 256,
                        device: str | torch.device = "cpu", workers: int = 0, progress: bool = True,
                        echo: Callable[[str], None] = print) -> np.ndarray:
    """Write the split's (N, L, C) float32 grid features to the `.npy` file `path`, chunk by chunk, and return it
    memory-mapped (read-only): the array is never held in memory whole.

    A chunk is `FEATURE_BATCHES` batches of `batch_size` images (so its batches are those of `grid_features`, and
    on the CPU its bits too). The chunks go into `<path>.partial.npy` (a memory-mapped `.npy` of the final shape);
    after each, the file is flushed and `<path>.partial.json` records the rows done, so an extraction killed midway
    resumes at its first missing chunk. The partial file is renamed onto `path` once complete. The cost is printed
    once the first chunk is done: its seconds per image times the images left."""
    device = torch.device(device)
    n, chunk = len(split.image_ids), FEATURE_BATCHES * batch_size
    partial, marker = path.with_name(f"{path.stem}.partial.npy"), path.with_name(f"{path.stem}.partial.json")
    state = {"trunk": trunk.key, "rows": n, "shape": [n, trunk.cells, trunk.channels]}
    done = json.loads(marker.read_text()) if marker.is_file() and partial.is_file() else None
    if done is None or {k: done.get(k) for k in state} != state:  # none yet, or another extraction's
        path.parent.mkdir(parents=True, exist_ok=True)
        out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=tuple(state["shape"]))
        start = 0
    else:
        out = np.load(partial, mmap_mode="r+")
        start = int(done["done"])
        echo(f"grid features {split.name}: resuming at image {start} of {n} ({partial})")
    net = trunk.net.to(device)
    for first in tqdm(range(start, n, chunk), desc=f"grid features {split.name}", disable=not progress,
                      leave=False):
        t0 = time.perf_counter()
        rows = range(first, min(first + chunk, n))
        features = _forward(net, split, rows, batch_size, device, workers)
        _check_shape(trunk, split, features.shape)
        out[rows.start:rows.stop] = features
        out.flush()
        atomic_write_text(marker, json.dumps({**state, "done": rows.stop}))
        if first == start:
            per_image = (time.perf_counter() - t0) / len(rows)
            echo(f"grid features {split.name}: {n} images, {n - start} to compute on {device} with {workers} loader "
                 f"worker(s): {per_image:.4f} s an image on the first chunk of {len(rows)}, about "
                 f"{per_image * (n - start) / 60:.1f} min in all")
    del out
    os.replace(partial, path)
    marker.unlink()
    return np.load(path, mmap_mode="r")


def stand_in_grid(trunk: PretrainedTrunk, n: int) -> np.ndarray:
    """(n, L, C) float32 zeros of the trunk's grid shape, read-only and holding one row (a broadcast view): what
    `attach_grid_features(stand_in=True)` attaches in place of features it does not extract."""
    return np.broadcast_to(np.zeros((1, trunk.cells, trunk.channels), np.float32), (n, trunk.cells, trunk.channels))


def attach_grid_features(splits: Iterable[Split], trunk: PretrainedTrunk, progress: bool = True,
                         device: str | torch.device = "cpu", batch_size: int = 256,
                         stand_in: bool = False) -> dict[str, float | None]:
    """Fill `split.grid` (N, L, C) of every split with the trunk's features, memory-mapped: computed once per split
    content on `device` (`write_grid_features`, with `feature_workers(device)` loader workers; on the CPU on one
    thread, `config.one_thread`, so the cached features do not depend on the machine's cores) and cached in
    `cache_dir()/trunks/<key>/features/`. Returns the seconds spent per split (about 0 when cached).

    stand_in: a split whose features are not cached gets `stand_in_grid` zeros of their shape instead, nothing
    extracted or written (its seconds: None). Only for the run plan's trace (`xmr book plan` on the paper profile),
    which needs the features' shape, not the hours of the trunk over COCO; a run key computed on them is not the
    run's."""
    seconds: dict[str, float | None] = {}
    cpu = torch.device(device).type == "cpu"
    for split in splits:
        split.grid = None  # the fingerprint names the split's content without any features
        path = trunk_dir(trunk.key) / "features" / f"{split.name}-{split_fingerprint(split)[:16]}.npy"
        t0 = time.perf_counter()
        if path.is_file():
            features = np.load(path, mmap_mode="r")
        elif stand_in:
            split.grid = stand_in_grid(trunk, split.n_images)
            seconds[split.name] = None
            continue
        else:
            with one_thread() if cpu else contextlib.nullcontext():
                features = write_grid_features(trunk, split, path, batch_size, device, feature_workers(device),
                                               progress)
        log_input(path.parent, [path.name])
        split.grid = features
        split.validate()
        seconds[split.name] = round(time.perf_counter() - t0, 2)
    return seconds
