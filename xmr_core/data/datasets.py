"""Torch datasets, the one collate function and the loaders that turn a `Split` into batch dicts.

Batch dict (the contract every encoder, method and the training loop reads):
    images        float32 (B, 3, H, W), normalised            | or
    regions       float32 (B, R, D) and region_mask bool (B, R)  (precomputed region features) | or
    grid          float32 (B, L, C)  (precomputed grid features of a frozen trunk, `encoders.trunk`)
    tokens        int64 (B, L), padded with 0 (`<pad>`);  lengths int64 (B,)
    image_index   int64 (B,): index of the image in its split
    caption_index int64 (B,): index of the caption in its split
Multi-query items (one image with its T region queries) carry instead of tokens/lengths:
    query_tokens  int64 (B, T, L) padded with 0; query_lengths int64 (B, T) (0 for absent queries);
    query_mask    bool (B, T): True where the image has a t-th query.

Region features: a region whose feature row is entirely zero is padding (`region_mask` False); an image
whose regions are all zero is an error. Augmentations (training only) follow PCME: random erasing of a
rectangle of the normalised image (set to 0) and caption word dropout (each token replaced by `<unk>` with
probability p, then floor(L·p) random tokens deleted). On frozen grid features there are no pixels to
erase: random erasing then zeroes a random rectangle of grid cells (`erase_cells`), the same Cutout idea
one level up (a 4×4 scenes grid cell sees a 16×16 pixel patch).

Batches are built on whole arrays (each dataset's `batch`: features gathered by index, captions padded at once): the
random draws of each item (erasing, word dropout, query order) are still made item by item, in the order
`__getitem__` makes them, so a batch equals `collate` of its items from the same seed, bit for bit. `BATCHES =
"items"` builds them item by item instead (the reference, `tests/test_batches.py`; `python -m xmr_core.bench
throughput`). Pixels are read item by item either way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler
from torchvision import transforms

from xmr_core.data.corpus import DataFormatError, Split
from xmr_core.data.samplers import AllCaptionsSampler, OneCaptionPerImageSampler
from xmr_core.data.text import PAD_INDEX, UNK_INDEX, Vocabulary

Visual = Literal["auto", "pixels", "regions", "grid"]
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
Batches = Literal["arrays", "items"]
BATCHES: Batches = "arrays"  # how every loader builds batches: on whole arrays (each dataset's `batch`), or
# "items": `__getitem__` item by item, then `collate` (the reference; the same batches from the same draws)


@dataclass
class ImageConfig:
    """How pixels become a normalised tensor (resize/crop apply to image files only)."""

    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    resize: int = 256  # image files: shorter side before the centre crop (evaluation)
    crop: int = 224  # image files: square side of the crop


@dataclass
class Augmentation:
    """Training-time augmentations; all off by default (PCME COCO: erasing 0.2, word dropout 0.1)."""

    random_erasing_prob: float = 0.0  # probability of erasing one rectangle (2-33% of the area) to 0
    word_dropout: float = 0.0  # PCME's caption_drop_prob, in [0, 1)
    random_resized_crop: bool = False  # image files: RandomResizedCrop(crop) instead of resize + centre crop
    horizontal_flip: bool = False  # off by default: a flip makes "left of" captions false

    def __post_init__(self) -> None:
        if not 0.0 <= self.random_erasing_prob <= 1.0:
            raise ValueError(f"random_erasing_prob must be in [0, 1], got {self.random_erasing_prob}")
        if not 0.0 <= self.word_dropout < 1.0:
            raise ValueError(f"word_dropout must be in [0, 1), got {self.word_dropout}")


def resolve_visual(split: Split, visual: Visual = "auto") -> Literal["pixels", "regions", "grid"]:
    """`auto` = pixels (in memory or files) when the split has them, else region features."""
    has_pixels = split.images is not None or split.image_paths is not None
    if visual == "auto":
        visual = "pixels" if has_pixels else "regions"
    if visual not in ("pixels", "regions", "grid"):
        raise ValueError(f"visual must be 'auto', 'pixels', 'regions' or 'grid', got {visual!r}")
    if visual == "pixels" and not has_pixels:
        raise ValueError(f"{split.source}: split {split.name!r} has neither images nor image paths")
    if visual == "regions" and split.regions is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no region features")
    if visual == "grid" and split.grid is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no grid features "
                         "(xmr_core.encoders.trunk.attach_grid_features)")
    return visual


def erase_rectangle(side: int, p: float) -> tuple[int, int, int, int] | None:
    """The random draws of `erase_cells` on a side × side grid (torch's global generator): (top, left, h, w) of
    the rectangle to zero, or None (not erased, probability 1 - p; no draw at all when p <= 0)."""
    if p <= 0.0 or float(torch.rand(())) >= p:
        return None
    h, w = (int(torch.randint(1, max(2, side // 2 + 1), ())) for _ in range(2))
    top, left = int(torch.randint(0, side - h + 1, ())), int(torch.randint(0, side - w + 1, ()))
    return top, left, h, w


def grid_side(cells: int) -> int:
    """The side of a square grid of `cells` cells; a grid that is not square raises `ValueError`."""
    side = math.isqrt(cells)
    if side * side != cells:
        raise ValueError(f"erase_cells needs a square grid, got {cells} cells")
    return side


def erase_cells(grid: torch.Tensor, p: float) -> torch.Tensor:
    """With probability p, zero a random rectangle of cells (1 cell up to half the side each way) of a
    square grid (L, C), L = side²; a copy, the input is not changed."""
    side = grid_side(grid.shape[0])
    rect = erase_rectangle(side, p)
    if rect is None:
        return grid
    top, left, h, w = rect
    out = grid.clone().view(side, side, -1)
    out[top:top + h, left:left + w] = 0
    return out.view(grid.shape)


def encode_caption(vocab: Vocabulary, text: str, where: str) -> torch.Tensor:
    """int64 (L,) token indices of one caption; an empty encoding raises `DataFormatError` naming `where`."""
    ids = vocab.encode(text)
    if not ids:
        raise DataFormatError(f"{where}: caption {text!r} has no tokens")
    return torch.tensor(ids, dtype=torch.int64)


def encode_captions(split: Split, vocab: Vocabulary) -> list[torch.Tensor]:
    """Every caption of the split encoded once, int64 (L_k,) each; errors name the caption id."""
    return [
        encode_caption(vocab, c, f"{split.source}: caption {cid!r}")
        for cid, c in zip(split.caption_ids, split.captions)
    ]


def word_dropout_draws(length: int, p: float) -> tuple[torch.Tensor, list[int]]:
    """The random draws of `word_dropout` on a caption of `length` tokens (torch's global generator): float32 (L,)
    uniforms (a token becomes `<unk>` where < p) and the floor(L·p) positions removed."""
    uniforms = torch.rand(length)
    n_drop = int(length * p)
    return uniforms, torch.randperm(length)[:n_drop].tolist() if n_drop else []


def word_dropout(tokens: torch.Tensor, p: float) -> torch.Tensor:
    """PCME caption drop: each token -> `<unk>` with probability p, then floor(L·p) random tokens removed.

    tokens: int64 (L,) -> int64 (L - floor(L·p),); at least one token remains since p < 1.
    """
    if p <= 0.0:
        return tokens
    uniforms, removed = word_dropout_draws(len(tokens), p)
    out = torch.where(uniforms < p, torch.full_like(tokens, UNK_INDEX), tokens)
    keep = torch.ones(len(out), dtype=torch.bool)
    keep[removed] = False
    return out[keep]


def word_dropout_batch(tokens: torch.Tensor, lengths: torch.Tensor, draws: list[tuple[torch.Tensor, list[int]]],
                       p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`word_dropout` of every caption of a padded batch at once, from each caption's `word_dropout_draws`.

    tokens: int64 (B, L) padded with `<pad>`, lengths: int64 (B,) -> the dropped captions padded (B, L') and
    their lengths (B,): row b equals `word_dropout` of caption b given the same draws.
    """
    valid = torch.arange(tokens.shape[1]) < lengths[:, None]  # (B, L)
    uniforms = torch.ones(tokens.shape)  # padding: 1 >= p, never replaced
    uniforms[valid] = torch.cat([u for u, _ in draws])
    removed = torch.zeros(tokens.shape, dtype=torch.bool)
    rows = torch.tensor([b for b, (_, r) in enumerate(draws) for _ in r], dtype=torch.int64)
    removed[rows, torch.tensor([t for _, r in draws for t in r], dtype=torch.int64)] = True
    out = torch.where(uniforms < p, torch.full_like(tokens, UNK_INDEX), tokens)
    keep = valid & ~removed
    new_lengths = keep.sum(dim=1)
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)  # kept tokens first, in caption order
    out = out.gather(1, order)[:, : int(new_lengths.max())]
    out[torch.arange(out.shape[1]) >= new_lengths[:, None]] = PAD_INDEX
    return out, new_lengths


class VisualReader:
    """Reads image i of a split as `{"images": (3, H, W)}`, `{"regions": (R, D), "region_mask": (R,)}` or
    `{"grid": (L, C)}`."""

    def __init__(
        self,
        split: Split,
        visual: Visual = "auto",
        train: bool = False,
        augment: Augmentation | None = None,
        image_config: ImageConfig | None = None,
    ) -> None:
        self.split = split
        self.visual = resolve_visual(split, visual)
        augment = augment or Augmentation()
        cfg = image_config or ImageConfig()
        self.mean = torch.tensor(cfg.mean, dtype=torch.float32).view(3, 1, 1)
        self.std = torch.tensor(cfg.std, dtype=torch.float32).view(3, 1, 1)
        erase = augment.random_erasing_prob if train else 0.0
        self.erase_prob = erase
        self.erase = transforms.RandomErasing(p=erase, value=0) if erase > 0 else None
        self.flip = train and augment.horizontal_flip
        self.side = grid_side(split.grid.shape[1]) if self.visual == "grid" and erase > 0 else 0  # erased grids only
        if self.visual == "pixels" and split.images is None:
            geometry: list[Any]
            if train and augment.random_resized_crop:
                geometry = [transforms.RandomResizedCrop(cfg.crop)]
            else:
                geometry = [transforms.Resize(cfg.resize), transforms.CenterCrop(cfg.crop)]
            self.file_transform = transforms.Compose([*geometry, transforms.PILToTensor()])

    def pixels(self, i: int) -> torch.Tensor:
        """uint8 (3, H, W) pixels of image i."""
        split = self.split
        if split.images is not None:
            return torch.from_numpy(np.array(split.images[i], dtype=np.uint8)).permute(
                2, 0, 1
            )  # a copy: may be a read-only memmap
        from PIL import Image, UnidentifiedImageError

        path = split.image_paths[i]
        try:
            with Image.open(path) as img:
                return self.file_transform(img.convert("RGB"))
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: image file of {split.image_ids[i]!r} not found") from None
        except (UnidentifiedImageError, OSError) as err:
            raise DataFormatError(f"{path}: image {split.image_ids[i]!r} cannot be read ({err})") from None

    def __call__(self, i: int) -> dict[str, torch.Tensor]:
        if self.visual == "grid":
            return {"grid": erase_cells(torch.from_numpy(np.array(self.split.grid[i], dtype=np.float32)),
                                        self.erase_prob)}
        if self.visual == "regions":  # read per item: real region arrays are memory-mapped, tens of GB
            regions = torch.from_numpy(np.array(self.split.regions[i], dtype=np.float32))  # (R, D)
            mask = regions.abs().sum(dim=1) > 0  # (R,)
            if not mask.any():
                raise DataFormatError(
                    f"{self.split.source}: image {self.split.image_ids[i]!r} has only all-zero "
                    "(padding) regions"
                )
            return {"regions": regions, "region_mask": mask}
        x = (self.pixels(i).float().div_(255.0) - self.mean) / self.std  # (3, H, W)
        if self.flip and torch.rand(()) < 0.5:
            x = x.flip(-1)
        if self.erase is not None:
            x = self.erase(x)
        return {"images": x}

    @property
    def batches_whole(self) -> bool:
        """Whether `batch` reads whole batches (grid, regions); pixels are read item by item (`__call__`)."""
        return self.visual != "pixels"

    def draw(self) -> tuple[int, int, int, int] | None:
        """The random draws of one item (grid: `erase_rectangle`; regions: none), in `__call__`'s order."""
        if self.visual == "grid" and self.erase_prob > 0:
            return erase_rectangle(self.side, self.erase_prob)
        return None

    def batch(self, images: np.ndarray, rects: list[tuple[int, int, int, int] | None] | None = None
              ) -> dict[str, torch.Tensor]:
        """Images `images` (B,) read as one batch, equal to stacking `__call__` of each given the same draws
        (`rects`: each item's `draw()`, grid only): {"grid": (B, L, C)} or {"regions": (B, R, D),
        "region_mask": (B, R)}. Pixels: not here (`batches_whole` is False)."""
        if self.visual == "grid":
            grid = torch.from_numpy(np.ascontiguousarray(self.split.grid[images], dtype=np.float32))
            side = grid_side(grid.shape[1])  # a grid that is not square is refused, erased or not (`erase_cells`)
            for b, rect in enumerate(rects or []):
                if rect is not None:
                    top, left, h, w = rect
                    grid[b].view(side, side, -1)[top:top + h, left:left + w] = 0
            return {"grid": grid}
        if self.visual == "regions":
            regions = torch.from_numpy(np.ascontiguousarray(self.split.regions[images], dtype=np.float32))
            mask = regions.abs().sum(dim=2) > 0  # (B, R)
            empty = np.flatnonzero(~mask.any(dim=1).numpy())
            if len(empty):
                raise DataFormatError(
                    f"{self.split.source}: image {self.split.image_ids[int(images[empty[0]])]!r} has only "
                    "all-zero (padding) regions"
                )
            return {"regions": regions, "region_mask": mask}
        raise ValueError("VisualReader.batch reads grid or region features; pixels are read item by item")


class PairDataset(Dataset):
    """Image–caption pairs: item k is caption k with the image it was written for."""

    def __init__(
        self,
        split: Split,
        vocab: Vocabulary,
        visual: Visual = "auto",
        train: bool = False,
        augment: Augmentation | None = None,
        image_config: ImageConfig | None = None,
    ) -> None:
        self.split = split
        self.reader = VisualReader(split, visual, train, augment, image_config)
        self.word_dropout = (augment or Augmentation()).word_dropout if train else 0.0
        self.tokens = encode_captions(split, vocab)
        self.lengths = [len(t) for t in self.tokens]
        self.caption_image = np.asarray(split.caption_image, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, k: int) -> dict[str, Any]:
        i = int(self.caption_image[k])
        return {
            **self.reader(i),
            "tokens": word_dropout(self.tokens[k], self.word_dropout),
            "image_index": i,
            "caption_index": k,
        }

    def batch(self, ks: Sequence[int]) -> dict[str, torch.Tensor]:
        """Items `ks` as one batch dict, equal to `collate([self[k] for k in ks])` from the same random draws:
        each item's draws are made in `__getitem__`'s order (erasing, then word dropout), the rest on whole
        arrays (pixels: item by item)."""
        if not self.reader.batches_whole:
            return collate([self[k] for k in ks])
        ks = np.asarray(ks, dtype=np.int64)
        images = self.caption_image[ks]
        rects, drops = [], []
        if self.reader.erase_prob > 0 or self.word_dropout > 0:
            for k in ks:
                rects.append(self.reader.draw())
                if self.word_dropout > 0:
                    drops.append(word_dropout_draws(self.lengths[k], self.word_dropout))
        tokens, lengths = pad_tokens([self.tokens[k] for k in ks])
        if drops:
            tokens, lengths = word_dropout_batch(tokens, lengths, drops, self.word_dropout)
        return {**self.reader.batch(images, rects), "tokens": tokens, "lengths": lengths,
                "image_index": torch.from_numpy(images), "caption_index": torch.from_numpy(ks)}


class ImageDataset(Dataset):
    """Every image of a split once, in split order (evaluation)."""

    def __init__(
        self, split: Split, visual: Visual = "auto", image_config: ImageConfig | None = None
    ) -> None:
        self.split = split
        self.reader = VisualReader(split, visual, train=False, image_config=image_config)

    def __len__(self) -> int:
        return self.split.n_images

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.reader(i), "image_index": i}

    def batch(self, images: Sequence[int]) -> dict[str, torch.Tensor]:
        """Images `images` as one batch dict, equal to `collate([self[i] for i in images])`."""
        if not self.reader.batches_whole:
            return collate([self[i] for i in images])
        images = np.asarray(images, dtype=np.int64)
        return {**self.reader.batch(images), "image_index": torch.from_numpy(images)}


class CaptionDataset(Dataset):
    """Every caption of a split once, in split order (evaluation)."""

    def __init__(self, split: Split, vocab: Vocabulary) -> None:
        self.split = split
        self.tokens = encode_captions(split, vocab)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, k: int) -> dict[str, Any]:
        return {"tokens": self.tokens[k], "caption_index": k}

    def batch(self, ks: Sequence[int]) -> dict[str, torch.Tensor]:
        """Captions `ks` as one batch dict, equal to `collate([self[k] for k in ks])`."""
        tokens, lengths = pad_tokens([self.tokens[k] for k in ks])
        return {"tokens": tokens, "lengths": lengths, "caption_index": torch.as_tensor(ks, dtype=torch.int64)}


class MultiQueryDataset(Dataset):
    """Item i: image i with its region queries: in stored order, or shuffled when `train`.

    `max_queries` N: each item carries at most N queries, the first N in stored order (an N-round
    evaluation reads no query past round N), or when `train` a random N of them in random order (HMRN's
    "queries and their orders are randomly sampled during training"; every query is drawn in some epoch).
    `visual` None: the queries alone (no image is read).
    """

    def __init__(
        self,
        split: Split,
        vocab: Vocabulary,
        visual: Visual | None = "auto",
        train: bool = False,
        augment: Augmentation | None = None,
        image_config: ImageConfig | None = None,
        max_queries: int | None = None,
    ) -> None:
        if split.queries is None:
            raise ValueError(f"{split.source}: split {split.name!r} has no region queries")
        if max_queries is not None and max_queries < 1:
            raise ValueError(f"max_queries must be >= 1, got {max_queries}")
        self.split = split
        self.train = train
        self.max_queries = max_queries
        self.reader = None if visual is None else VisualReader(split, visual, train, augment, image_config)
        self.queries: list[list[torch.Tensor]] = []
        for iid, qs in zip(split.image_ids, split.queries):
            if not qs:
                raise DataFormatError(f"{split.source}: image {iid!r} has no region queries")
            self.queries.append(
                [
                    encode_caption(vocab, q, f"{split.source}: image {iid!r} query {t}")
                    for t, q in enumerate(qs)
                ]
            )

    def __len__(self) -> int:
        return self.split.n_images

    def __getitem__(self, i: int) -> dict[str, Any]:
        qs = self.queries[i]
        if self.train:
            qs = [qs[t] for t in torch.randperm(len(qs)).tolist()]
        visual = {} if self.reader is None else self.reader(i)
        return {**visual, "queries": qs[: self.max_queries], "image_index": i}

    def batch(self, images: Sequence[int]) -> dict[str, torch.Tensor]:
        """Items `images` as one batch dict, equal to `collate([self[i] for i in images])` from the same random
        draws (each item's query order, then its erasing, as `__getitem__` makes them)."""
        if self.reader is not None and not self.reader.batches_whole:
            return collate([self[i] for i in images])
        images = np.asarray(images, dtype=np.int64)
        sets, rects = [], []
        for i in images:
            qs = self.queries[i]
            if self.train:
                qs = [qs[t] for t in torch.randperm(len(qs)).tolist()]
            if self.reader is not None:
                rects.append(self.reader.draw())
            sets.append(qs[: self.max_queries])
        visual = {} if self.reader is None else self.reader.batch(images, rects)
        n_queries = torch.tensor([len(qs) for qs in sets], dtype=torch.int64)
        tokens, lengths = pad_tokens([q for qs in sets for q in qs])
        present = torch.arange(int(n_queries.max())) < n_queries[:, None]  # (B, T)
        query_tokens = torch.zeros((*present.shape, tokens.shape[1]), dtype=torch.int64)
        query_tokens[present] = tokens
        query_lengths = torch.zeros(present.shape, dtype=torch.int64)
        query_lengths[present] = lengths
        return {**visual, "query_tokens": query_tokens, "query_lengths": query_lengths,
                "query_mask": query_lengths > 0, "image_index": torch.from_numpy(images)}


def pad_tokens(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 (B, L_max) padded with `<pad>` and int64 (B,) lengths, on whole arrays (`_pad`'s result)."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    out = torch.full((len(seqs), int(lengths.max())), PAD_INDEX, dtype=torch.int64)
    out[torch.arange(out.shape[1]) < lengths[:, None]] = torch.cat(seqs)
    return out, lengths


def _pad(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 (B, L_max) padded with `<pad>` and int64 (B,) lengths."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    out = torch.full((len(seqs), int(lengths.max())), PAD_INDEX, dtype=torch.int64)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = s
    return out, lengths


def collate(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Stack a list of dataset items into the batch dict (module docstring); pads tokens and queries."""
    batch: dict[str, torch.Tensor] = {}
    for key in items[0]:
        values = [it[key] for it in items]
        if key == "tokens":
            batch["tokens"], batch["lengths"] = _pad(values)
        elif key == "queries":
            flat = [q for qs in values for q in qs]
            tokens, lengths = _pad(flat)
            n_q = max(len(qs) for qs in values)
            batch["query_tokens"] = torch.zeros((len(values), n_q, tokens.shape[1]), dtype=torch.int64)
            batch["query_lengths"] = torch.zeros((len(values), n_q), dtype=torch.int64)
            start = 0
            for b, qs in enumerate(values):
                batch["query_tokens"][b, : len(qs)] = tokens[start : start + len(qs)]
                batch["query_lengths"][b, : len(qs)] = lengths[start : start + len(qs)]
                start += len(qs)
            batch["query_mask"] = batch["query_lengths"] > 0
        elif key in ("image_index", "caption_index"):
            batch[key] = torch.tensor(values, dtype=torch.int64)
        else:
            batch[key] = torch.stack(values)
    return batch


class _WholeBatches(Dataset):
    """A dataset read a batch at a time: item `indices` (a list) is `dataset.batch(indices)`."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __getitem__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        return self.dataset.batch(indices)


def _built(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return batch


def _loader(dataset: Dataset, batches: Sampler[list[int]], num_workers: int, generator: torch.Generator
            ) -> DataLoader:
    """Batches of `dataset` by the batch sampler `batches`: built on whole arrays (`dataset.batch`), or item by
    item and collated when `BATCHES` is "items"."""
    if BATCHES == "items":
        return DataLoader(dataset, batch_sampler=batches, collate_fn=collate, num_workers=num_workers,
                          generator=generator)
    if BATCHES != "arrays":
        raise ValueError(f"datasets.BATCHES must be 'arrays' or 'items', got {BATCHES!r}")
    return DataLoader(_WholeBatches(dataset), sampler=batches, batch_size=None, collate_fn=_built,
                      num_workers=num_workers, generator=generator)


def _in_order(dataset: Dataset, batch_size: int) -> BatchSampler:
    return BatchSampler(SequentialSampler(dataset), batch_size, drop_last=False)


def image_loader(
    split: Split,
    batch_size: int,
    *,
    visual: Visual = "auto",
    image_config: ImageConfig | None = None,
    num_workers: int = 0,
    rows: range | None = None,
) -> DataLoader:
    """Batches of every image in split order (or of the images `rows`, in order): images or regions+region_mask,
    image_index."""
    dataset = ImageDataset(split, visual, image_config)
    batches = _in_order(dataset, batch_size) if rows is None else BatchSampler(rows, batch_size, drop_last=False)
    return _loader(dataset, batches, num_workers, torch.Generator().manual_seed(0))


def with_pixels(split: Split, image_config: ImageConfig | None = None) -> Split:
    """`split` with its pixels in memory (N, crop, crop, 3) uint8 for the figures that draw or perturb images: real
    data's image files decoded as evaluation reads them (resize, centre crop: `ImageConfig`); `split` itself when it
    holds pixels (scenes) or has no image files (region features only)."""
    if split.images is not None or split.image_paths is None:
        return split
    reader = VisualReader(split, "pixels", train=False, image_config=image_config)
    pixels = np.stack([reader.pixels(i).permute(1, 2, 0).numpy() for i in range(split.n_images)])
    return dataclasses.replace(split, images=pixels)


def caption_loader(split: Split, vocab: Vocabulary, batch_size: int, *, num_workers: int = 0) -> DataLoader:
    """Batches of every caption in split order: tokens, lengths, caption_index."""
    dataset = CaptionDataset(split, vocab)
    return _loader(dataset, _in_order(dataset, batch_size), num_workers, torch.Generator().manual_seed(0))


def query_loader(
    split: Split,
    vocab: Vocabulary,
    batch_size: int,
    *,
    train: bool = False,
    visual: Visual | None = "auto",
    augment: Augmentation | None = None,
    image_config: ImageConfig | None = None,
    max_queries: int | None = None,
    batch_sampler: Sampler[list[int]] | None = None,
    seed: int = 0,
    num_workers: int = 0,
) -> DataLoader:
    """Images with their region queries (multi-query retrieval); `max_queries`, `visual`: `MultiQueryDataset`.

    train=False: every image in split order, queries in stored order. train=True: images shuffled from
    `seed` (or batched by `batch_sampler`, lists of image indices), each image's queries shuffled,
    augmentations applied.
    """
    dataset = MultiQueryDataset(split, vocab, visual, train, augment, image_config, max_queries)
    generator = torch.Generator().manual_seed(seed)
    if batch_sampler is not None:
        return _loader(dataset, batch_sampler, num_workers, generator)
    if not train:
        return _loader(dataset, _in_order(dataset, batch_size), num_workers, generator)
    order = RandomSampler(dataset, generator=generator)  # what DataLoader(shuffle=True) draws
    return _loader(dataset, BatchSampler(order, batch_size, drop_last=False), num_workers, generator)


def pair_loader(
    split: Split,
    vocab: Vocabulary,
    batch_size: int,
    *,
    epoch: Literal["one_per_image", "all_captions"] = "one_per_image",
    batch_sampler: Sampler[list[int]] | None = None,
    train: bool = True,
    visual: Visual = "auto",
    augment: Augmentation | None = None,
    image_config: ImageConfig | None = None,
    seed: int = 0,
    drop_last: bool = False,
    num_workers: int = 0,
) -> DataLoader:
    """Training batches of image–caption pairs.

    epoch: "one_per_image" (each image once with a random one of its captions) or "all_captions" (every
    caption once), shuffled from `seed`. A `batch_sampler` (class-balanced, neighbour) replaces both and
    must yield batches of `batch_size` (checked against its `batch_size` attribute).
    """
    dataset = PairDataset(split, vocab, visual, train, augment, image_config)
    if batch_sampler is not None:
        if getattr(batch_sampler, "batch_size", batch_size) != batch_size:
            raise ValueError(
                f"batch_size={batch_size} but the batch sampler makes batches of {batch_sampler.batch_size}"
            )
        return _loader(dataset, batch_sampler, num_workers, torch.Generator().manual_seed(seed))
    if epoch == "one_per_image":
        sampler: Sampler[int] = OneCaptionPerImageSampler(split.caption_image, split.n_images, seed=seed)
    elif epoch == "all_captions":
        sampler = AllCaptionsSampler(split.n_captions, seed=seed)
    else:
        raise ValueError(f"epoch must be 'one_per_image' or 'all_captions', got {epoch!r}")
    return _loader(dataset, BatchSampler(sampler, batch_size, drop_last), num_workers,
                   torch.Generator().manual_seed(seed))
