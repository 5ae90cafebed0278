"""Samplers over a split's captions (item k = caption k with its image, as in `PairDataset`).

Every sampler is deterministic for its `seed`: epoch e draws from `numpy.random.default_rng([seed, e])`.
The epoch counter starts at 0 and advances each time the sampler is iterated; `set_epoch(e)` sets it
(e.g. when resuming from a checkpoint).

- `OneCaptionPerImageSampler`: each image once per epoch, with a random one of its captions.
- `AllCaptionsSampler`: every caption once per epoch, shuffled.
- `ClassBalancedBatchSampler`: PCME's CUB sampler, one item of every class in each batch.
- `ClusterBatchSampler`: HREM's neighbour batch sampling, P clusters × K images per batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler

from xmr_core.data.corpus import Split


class _EpochRng:
    """Seed + epoch counter; `_next_rng()` returns this epoch's generator and advances the epoch."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _next_rng(self) -> np.random.Generator:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        return rng


class OneCaptionPerImageSampler(_EpochRng, Sampler[int]):
    """Caption indices: every image once per epoch (shuffled), each with a uniformly drawn caption of it."""

    def __init__(self, caption_image: np.ndarray, n_images: int, seed: int = 0) -> None:
        super().__init__(seed)
        caption_image = np.asarray(caption_image, dtype=np.int64)
        counts = np.bincount(caption_image, minlength=n_images)
        if len(counts) > n_images or (counts == 0).any():
            bad = np.flatnonzero(counts == 0)
            raise ValueError(
                f"every image needs a caption: image indices {bad[:5].tolist()} have none"
                if len(bad)
                else f"caption_image points past the {n_images} images"
            )
        self.by_image = np.argsort(caption_image, kind="stable")  # captions grouped by image
        self.start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.counts = counts

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self) -> Iterator[int]:
        rng = self._next_rng()
        return iter(self.captions_of(rng.permutation(len(self.counts)), rng).tolist())

    def captions_of(self, images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(n,) caption indices: a uniformly drawn caption of each of `images` (n,), in their order."""
        pick = self.start[images] + (rng.random(len(images)) * self.counts[images]).astype(np.int64)
        return self.by_image[pick]


class AllCaptionsSampler(_EpochRng, Sampler[int]):
    """Every caption index once per epoch, in a fresh random order."""

    def __init__(self, n_captions: int, seed: int = 0) -> None:
        super().__init__(seed)
        self.n = n_captions

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        return iter(self._next_rng().permutation(self.n).tolist())


def caption_classes(split: Split) -> np.ndarray:
    """(M,) int64 class of each caption: the class of the image it was written for."""
    if split.image_class is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no image classes")
    return np.asarray(split.image_class, dtype=np.int64)[np.asarray(split.caption_image, dtype=np.int64)]


class ClassBalancedBatchSampler(_EpochRng, Sampler[list[int]]):
    """PCME's CUB sampler: each batch holds exactly one item of every class, so batch_size = #classes.

    PCME's `CUBSampler` ignores the configured batch size; here a `batch_size` that differs from the
    number of classes is refused. Each class keeps a shuffled queue of its items, refilled with a new
    permutation when empty, so within a class every item is drawn once before any repeats (PCME draws
    one anchor from a global permutation and the other classes' items with replacement). An epoch is
    `n_batches` batches, by default #items // #classes (PCME's `adjust_epoch`).
    """

    def __init__(
        self, item_class: np.ndarray, batch_size: int, n_batches: int | None = None, seed: int = 0
    ) -> None:
        super().__init__(seed)
        item_class = np.asarray(item_class, dtype=np.int64)
        self.classes, inverse = np.unique(item_class, return_inverse=True)
        if batch_size != len(self.classes):
            raise ValueError(
                f"batch_size={batch_size}, but a class-balanced batch holds one item of each of "
                f"the {len(self.classes)} classes: set batch_size={len(self.classes)}"
            )
        self.batch_size = batch_size
        self.members = [np.flatnonzero(inverse == c) for c in range(len(self.classes))]
        self.n_batches = len(item_class) // len(self.classes) if n_batches is None else n_batches
        if self.n_batches < 1:
            raise ValueError(f"n_batches must be >= 1, got {self.n_batches}")

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[list[int]]:
        rng = self._next_rng()
        queues = [rng.permutation(m) for m in self.members]
        pos = [0] * len(queues)
        for _ in range(self.n_batches):
            batch = []
            for c, members in enumerate(self.members):
                if pos[c] == len(queues[c]):
                    queues[c], pos[c] = rng.permutation(members), 0
                batch.append(int(queues[c][pos[c]]))
                pos[c] += 1
            yield [batch[j] for j in rng.permutation(len(batch))]


class ClusterBatchSampler(_EpochRng, Sampler[list[int]]):
    """HREM's neighbour batch sampling (Sec. 3.4): batches of P clusters × K images, one caption per image.

    Item k of a batch is a caption index (as `PairDataset` reads it): a uniformly drawn caption of the image.
    Every image is in exactly one batch per epoch, so an epoch has ceil(n_images / (P K)) batches, the last
    possibly short. Without clusters (`set_clusters(None)`, the start) the images are shuffled and cut into
    batches: the random batches of `OneCaptionPerImageSampler`. With image clusters (`set_clusters(labels)`,
    e.g. k-means of the image embeddings, refreshed each epoch): each cluster's images are shuffled and cut into
    groups of K; a batch takes one group from each of P distinct clusters, drawn with probability proportional
    to the groups they have left (fewer than P clusters left: several groups of one cluster); the images that
    fill no whole group (fewer than K left in a cluster) close the epoch, in cluster order, so they still meet
    images of their own cluster.
    """

    def __init__(self, caption_image: np.ndarray, n_images: int, clusters_per_batch: int, images_per_cluster: int,
                 seed: int = 0) -> None:
        super().__init__(seed)
        if clusters_per_batch < 1 or images_per_cluster < 1:
            raise ValueError(f"need P >= 1 clusters and K >= 1 images per cluster, got P={clusters_per_batch}, "
                             f"K={images_per_cluster}")
        self.captions = OneCaptionPerImageSampler(caption_image, n_images, seed)
        self.n_images = n_images
        self.p, self.k = clusters_per_batch, images_per_cluster
        self.labels: np.ndarray | None = None

    @property
    def batch_size(self) -> int:
        return self.p * self.k

    def set_clusters(self, labels: np.ndarray | None) -> None:
        """(n_images,) int cluster label of every image, or None for random batches."""
        if labels is not None:
            labels = np.asarray(labels)
            if labels.shape != (self.n_images,) or not np.issubdtype(labels.dtype, np.integer):
                raise ValueError(f"cluster labels must be ({self.n_images},) integers, got {labels.dtype} "
                                 f"{labels.shape}")
        self.labels = labels

    def __len__(self) -> int:
        return math.ceil(self.n_images / self.batch_size)

    def image_order(self, rng: np.random.Generator) -> np.ndarray:
        """(n_images,) this epoch's images in batch order (consecutive runs of `batch_size` make the batches)."""
        if self.labels is None:
            return rng.permutation(self.n_images)
        groups: list[list[np.ndarray]] = []  # per cluster, its groups of K images
        rest: list[np.ndarray] = []
        for c in np.unique(self.labels):
            members = rng.permutation(np.flatnonzero(self.labels == c))
            full = len(members) // self.k * self.k
            groups.append(list(members[:full].reshape(-1, self.k)))
            rest.append(members[full:])
        order: list[np.ndarray] = []
        left = np.array([len(g) for g in groups])
        while left.sum() > 0:
            ready = np.flatnonzero(left)
            if len(ready) >= self.p:
                chosen = rng.choice(ready, self.p, replace=False, p=left[ready] / left[ready].sum())
            else:  # fewer than P clusters have a group left: their remaining groups, cluster by cluster
                chosen = np.concatenate([np.full(left[c], c) for c in ready])[: self.p]
            for c in chosen:
                left[c] -= 1
                order.append(groups[c][left[c]])
        return np.concatenate(order + rest)

    def __iter__(self) -> Iterator[list[int]]:
        rng = self._next_rng()
        captions = self.captions.captions_of(self.image_order(rng), rng)
        for start in range(0, len(captions), self.batch_size):
            yield captions[start : start + self.batch_size].tolist()
