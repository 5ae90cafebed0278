"""The model contract every method implements; `xmr_core.runs.train.fit` and `xmr_core.evaluate` rely on it.

A method is an `nn.Module` with a dataclass `config` and

- `encode_images(batch) -> emb` and `encode_captions(batch) -> emb`: `emb` is a Tensor (n, ...) or a tuple of
  tensors, all sliced along dim 0 (e.g. a Gaussian `(mu, logvar)`, both (n, D), logvar = log σ²);
- `loss(img_emb, cap_emb, batch) -> (loss Tensor, {name: float})` on a training batch whose i-th image and
  i-th caption are a positive pair;
- `score(img_emb, cap_emb, **options) -> (n_img, n_cap)`: higher = more similar (options: e.g. PCME's
  test-time similarity `method`); `score_direction(img_emb, cap_emb, direction, **options)`: the scores a
  query of `direction` ("i2t": images query captions, "t2i": captions query images) is ranked by, still
  `(n_img, n_cap)`; the same as `score` unless the method is `directional` (e.g. MSRM's Gaussian query);
- `batch_scores(img_emb, cap_emb) -> (B, B)`: the differentiable similarity the loss trains on a batch, the
  training-time twin of `score` (the contract test checks that they agree);
- `backbone_parameters()`: what PCME's first phase freezes; `set_epoch(t)`: training progress in epochs
  (fractional), for losses with a schedule. `forward(batch)` encodes both sides (what DDP wraps): what `loss`
  receives, by default `(encode_images(batch), encode_captions(batch))` (`encode_queries` on a query batch);
  a method whose loss needs more than the test-time embeddings (HREM's fragments) returns more here.
- `train_batch_sampler(split, batch_size, seed)`: the method's own training batches (a sampler of caption
  index lists; of image index lists for a multi-query model), or None for `fit`'s;
  `on_epoch_start(epoch, split, device)`: called by `fit` before each training epoch (HREM re-clusters the
  training images for its neighbour batches).

Multi-query retrieval (`task = "multi_query"`, HMRN): an item is an image with its set of region queries, and
the text side is the set. Such a model also has `encode_queries(batch) -> emb` on `datasets.query_loader`
batches ("query_tokens" (B, T, L), "query_lengths", "query_mask" (B, T)), whose embeddings keep the rounds on
dim 1 so that `query_prefix(emb, r)` gives the sets of their first r queries, and `score(img_emb, query_emb)
-> (n_img, n_sets)`; `encode_captions` makes each caption a set of one query. `max_queries` is the most queries
a set may hold (None: no limit). `fit` trains such a model on (image, query set) batches, one item per image
an epoch, and validates it with `evaluate.evaluate_multi_query`.

Batches follow the contract of `xmr_core.data.datasets`: "images" (B, 3, H, W) or "regions" (B, R, D) +
"region_mask", "tokens" (B, L), "lengths" (B,), "image_index" (B,), "caption_index" (B,).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.utils.data import Sampler

from xmr_core.data.corpus import Split

Embeddings = Tensor | tuple[Tensor, ...]
Direction = Literal["i2t", "t2i"]
DIRECTIONS: tuple[Direction, ...] = ("i2t", "t2i")
Task = Literal["pairs", "multi_query"]


class RetrievalModel(nn.Module):
    """Base class of every method (see the module docstring for the contract)."""

    name: str = "model"
    config: Any
    directional: bool = False  # True when the scores depend on which side is the query (`score_direction`)
    task: Task = "pairs"  # "multi_query": the text side is a set of region queries (module docstring)

    def __init__(self) -> None:
        super().__init__()
        self.epoch: float = 0.0

    def encode_images(self, batch: dict[str, Tensor]) -> Embeddings:
        raise NotImplementedError(f"{type(self).__name__} does not implement encode_images")

    def encode_captions(self, batch: dict[str, Tensor]) -> Embeddings:
        raise NotImplementedError(f"{type(self).__name__} does not implement encode_captions")

    def loss(self, img_emb: Embeddings, cap_emb: Embeddings, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        raise NotImplementedError(f"{type(self).__name__} does not implement loss")

    def encode_queries(self, batch: dict[str, Tensor]) -> Embeddings:
        """Multi-query models: the query sets of a `query_loader` batch, rounds on dim 1."""
        raise NotImplementedError(f"{type(self).__name__} does not encode query sets (task {self.task!r})")

    def query_prefix(self, query_emb: Embeddings, rounds: int) -> Embeddings:
        """The sets of their first `rounds` queries: every tensor of `query_emb` cut to `[:, :rounds]`."""
        if isinstance(query_emb, tuple):
            return tuple(e[:, :rounds] for e in query_emb)
        return query_emb[:, :rounds]

    @property
    def max_queries(self) -> int | None:
        """The most queries a set may hold (multi-query models); None: no limit."""
        return None

    def score(self, img_emb: Embeddings, cap_emb: Embeddings) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement score")

    def score_direction(self, img_emb: Embeddings, cap_emb: Embeddings, direction: Direction,
                        **options: Any) -> Tensor:
        """(n_img, n_cap) scores by which queries of `direction` rank the other side; default: `score`."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        return self.score(img_emb, cap_emb, **options)

    def batch_scores(self, img_emb: Embeddings, cap_emb: Embeddings) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement batch_scores")

    @property
    def visual(self) -> str:
        """The visual input the model reads (`datasets.Visual`: "pixels", "regions", "grid"): its image
        encoder's; `fit` and `evaluate.embed_split` load that input."""
        encoder = getattr(self, "image_encoder", None)
        return getattr(encoder, "visual", "auto")

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Parameters frozen during the warm-up phase (default: none)."""
        return []

    def set_epoch(self, epoch: float) -> None:
        """Training progress in epochs (fractional); `fit` calls it before every step."""
        self.epoch = float(epoch)

    def train_batch_sampler(self, split: Split, batch_size: int, seed: int) -> Sampler[list[int]] | None:
        """Training batches of caption indices chosen by the method, a sampler with `set_epoch(e)` (default:
        None, `fit`'s own sampler by `TrainConfig.epoch_mode`)."""
        return None

    def on_epoch_start(self, epoch: int, split: Split, device: torch.device) -> None:
        """Called by `fit` before training epoch `epoch` (0-based) on the training split (default: nothing)."""

    def forward(self, batch: dict[str, Tensor]) -> tuple[Any, Any]:
        """(image embeddings, caption embeddings), or the query sets' for a `query_loader` batch."""
        text = self.encode_queries(batch) if "query_tokens" in batch else self.encode_captions(batch)
        return self.encode_images(batch), text


def checked_query_mask(batch: dict[str, Tensor], max_queries: int | None, who: str) -> Tensor:
    """The "query_mask" (B, T) bool of a `query_loader` batch, after checking that every set holds 1..max_queries
    queries (None: no limit), absent ones last; a bad set is an error naming its image (`who`: the model)."""
    mask = batch["query_mask"].bool()
    counts = mask.sum(1)
    bad = (counts < 1) | (mask[:, 1:] & ~mask[:, :-1]).any(1)
    if max_queries is not None:
        bad = bad | (counts > max_queries)
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        raise ValueError(f"{who}: image {int(batch['image_index'][b])} has a set of {int(counts[b])} queries (mask "
                         f"{mask[b].int().tolist()}); a set holds 1..max_queries={max_queries} queries, absent ones last")
    return mask


def in_batch_positives(batch: dict[str, Tensor], duplicates: bool = True) -> Tensor:
    """(B, B) bool: caption j is also a positive of image i in this batch.

    True where the two pairs share the image (`image_index`), and, with `duplicates`, where the two captions
    are the same token sequence (then caption j describes image i word for word as well as caption i does).
    """
    img = batch["image_index"]
    mask = img[:, None] == img[None, :]
    if duplicates:
        tokens, lengths = batch["tokens"], batch["lengths"]
        same_tokens = (tokens[:, None, :] == tokens[None, :, :]).all(-1) & (lengths[:, None] == lengths[None, :])
        mask = mask | same_tokens
    return mask

