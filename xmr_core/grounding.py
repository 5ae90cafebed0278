"""What a model links, measured against what scenes knows exactly (the figure claims made numbers).

Scenes keeps every object's box and every caption's logical form (`Split.meta`: "layout", "object_boxes",
"logical_forms"), so where a model attends and which samples it connects can be checked, not only drawn:

    box_fractions(boxes (R, 4), targets (O, 4), size)     -> (R,) share of each box's pixels inside the targets
    named_boxes(split, captions (n,), images (n,))         -> n arrays (O_j, 4): boxes of the objects each caption
                                                              names in the image (`scene_grammar.named`)
    attention_share(weights (R,), fractions (R,))          -> (share, chance): attention mass on the targets and
                                                              what uniform attention would put there
    sub_embedding_grounding(attention (N, R, K), mask (N, K), best_caption (N, K), boxes, split)
                                                           -> (N,) share, (N,) chance per image (DVSE Figure 10)
    link_precision(links (N, M) bool, relevant (N, M) bool) -> (N,) precision, (N,) chance per row (HREM Figure 3)

The chance baselines are exact expectations: uniform attention over the R local features puts the mean of their
fractions on the targets; k links drawn at random from a row hit a relevant column with probability the row's
share of relevant columns, whatever k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xmr_core.data import scene_grammar as g
from xmr_core.data.corpus import DataFormatError

if TYPE_CHECKING:
    from xmr_core.data.corpus import Split

SCENES_META = ("layout", "object_boxes", "logical_forms")  # what a split needs for the measurements here


def box_fractions(boxes: np.ndarray, targets: np.ndarray, image_size: int) -> np.ndarray:
    """The share of each box's pixels (by pixel centre, as `chapters.dvse.attention_heat` paints them) that lie
    inside the union of the `targets` boxes: boxes (R, 4), targets (O, 4), pixels (x0, y0, x1, y1) -> (R,);
    0 for a box that covers no pixel centre, and for every box when O = 0."""
    boxes, targets = np.asarray(boxes, dtype=np.float64), np.asarray(targets, dtype=np.float64).reshape(-1, 4)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"box_fractions: boxes must be (R, 4), got {boxes.shape}")
    centres = np.arange(image_size) + 0.5

    def cover(b: np.ndarray) -> np.ndarray:  # (n, S_y, S_x) bool
        inside_x = (centres[None, :] >= b[:, :1]) & (centres[None, :] < b[:, 2:3])
        inside_y = (centres[None, :] >= b[:, 1:2]) & (centres[None, :] < b[:, 3:4])
        return inside_y[:, :, None] & inside_x[:, None, :]

    union = cover(targets).any(0)  # (S_y, S_x)
    own = cover(boxes)
    area = own.sum((1, 2))
    return np.where(area > 0, (own & union).sum((1, 2)) / np.maximum(area, 1), 0.0)


def _scenes_meta(split: Split) -> None:
    missing = [k for k in SCENES_META if k not in split.meta]
    if missing:
        raise DataFormatError(f"{split.source}: split {split.name!r} has no {', '.join(missing)}: object boxes and "
                              "caption logical forms exist on the scenes benchmark only")


def named_boxes(split: Split, captions: np.ndarray, images: np.ndarray) -> list[np.ndarray]:
    """The boxes (O_j, 4) of the objects that caption `captions[j]` names (`scene_grammar.named`) in image
    `images[j]` of a scenes `split`, for each j."""
    _scenes_meta(split)
    scenes = split.meta["layout"].scene_arrays()
    lfs, boxes = split.meta["logical_forms"], np.asarray(split.meta["object_boxes"])
    out = []
    for c, i in zip(np.asarray(captions).ravel(), np.asarray(images).ravel(), strict=True):
        one = g.SceneArrays(scenes.attrs[i:i + 1], scenes.row[i:i + 1], scenes.col[i:i + 1], scenes.valid[i:i + 1])
        out.append(boxes[i][g.named(lfs[int(c)], one)[0]])
    return out


def attention_share(weights: np.ndarray, fractions: np.ndarray) -> tuple[float, float]:
    """(share, chance) of one attention distribution: the attention mass on the targets, sum_r w_r f_r / sum_r w_r,
    with f_r (`box_fractions`) the share of local feature r on the targets, and the same under uniform attention,
    mean_r f_r. weights, fractions (R,)."""
    w, f = np.asarray(weights, dtype=np.float64), np.asarray(fractions, dtype=np.float64)
    if w.shape != f.shape or w.ndim != 1:
        raise ValueError(f"attention_share: weights {w.shape} and fractions {f.shape} must be the same (R,)")
    if w.sum() <= 0:
        raise ValueError("attention_share: the attention weights sum to zero")
    return float(w @ f / w.sum()), float(f.mean())


def sub_embedding_grounding(attention: np.ndarray, mask: np.ndarray, best_caption: np.ndarray, boxes: np.ndarray,
                            split: Split) -> tuple[np.ndarray, np.ndarray]:
    """DVSE Figure 10 as a number, per image of a scenes `split`: the mean over its sub-embeddings left on by the
    dynamic `mask` (all of them where the mask leaves none) of the `attention_share` of sub-embedding k on the
    objects named by `best_caption[i, k]` (the caption it matches best), and the mean chance share.
    attention (N, R, K) over the local features, mask (N, K), best_caption (N, K) caption indices, boxes the local
    features' pixel boxes, (R, 4) shared (a grid) or (N, R, 4) per image (regions) -> share (N,), chance (N,)."""
    attention, mask = np.asarray(attention, dtype=np.float64), np.asarray(mask) != 0
    n, r, k = attention.shape
    boxes = np.broadcast_to(np.asarray(boxes, dtype=np.float64), (n, r, 4))
    if mask.shape != (n, k) or np.shape(best_caption) != (n, k):
        raise ValueError(f"sub_embedding_grounding: mask {mask.shape} and best_caption {np.shape(best_caption)} "
                         f"must be (N, K) = ({n}, {k})")
    targets = named_boxes(split, np.asarray(best_caption), np.repeat(np.arange(n), k))
    size = int(split.images.shape[1])
    share, chance = np.zeros(n), np.zeros(n)
    for i in range(n):
        on = np.flatnonzero(mask[i]) if mask[i].any() else np.arange(k)
        pairs = [attention_share(attention[i, :, j], box_fractions(boxes[i], targets[i * k + j], size)) for j in on]
        share[i], chance[i] = np.mean(pairs, axis=0)
    return share, chance


def link_precision(links: np.ndarray, relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (a node of one modality), the share of its links to the other modality's nodes that are relevant,
    and the same for links drawn at random (the row's share of relevant columns). links, relevant (N, M) bool ->
    precision (N,), chance (N,). A row without links is an error."""
    links, relevant = np.asarray(links, dtype=bool), np.asarray(relevant, dtype=bool)
    if links.shape != relevant.shape or links.ndim != 2:
        raise ValueError(f"link_precision: links {links.shape} and relevant {relevant.shape} must be the same (N, M)")
    count = links.sum(1)
    if (count == 0).any():
        raise ValueError(f"link_precision: row {int(np.flatnonzero(count == 0)[0])} has no links")
    return (links & relevant).sum(1) / count, relevant.mean(1)
