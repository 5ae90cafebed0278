"""The Bayes ceiling of the instance-view retrieval metrics on a split with exact relevance.

The ceiling scorer knows, for every caption, exactly which images its logical form holds in (`split.exact`),
but it cannot tell those images apart, and it cannot tell apart captions that are equally specific. It is
scored against instance relevance: caption m's only positive is the image it was written for,
`caption_image[m]`; image i's positives are the captions written for it (usually 5). Every caption holds
in its own image, so the positives are always among the scorer's candidates. Values are expectations over
the scorer's random tie-breaking, computed exactly (no sampling), in percent, with the key names of
`xmr_core.metrics.bidirectional`.

- text→image: caption m holds in n_m images and the scorer ranks those n_m first, in uniformly random
  order, so its expected R@K is min(1, K / n_m). Ceiling t2i R@K = 100 · mean over captions.
- image→text: for image i the scorer ranks the captions that hold in i from the most to the least
  specific (n_m ascending), ties in random order, and the other captions after them. R@K of image i is
  the probability that one of its own captions is in the top K: walking the specificity groups in
  ascending n_m, it is 1 if a group that wholly fits in the top K holds an own caption; otherwise the
  first group that only partly fits (m_g captions, o_g of them own, r free slots) gives
  1 − C(m_g − o_g, r) / C(m_g, r) = 1 − Π_{t<r} (m_g − o_g − t) / (m_g − t).
  Ceiling i2t R@K = 100 · mean over images.
- rsum: i2t plus t2i R@1 + R@5 + R@10, present only when `ks` holds 1, 5 and 10.

Multi-query retrieval (HMRN, `multi_round_ceiling`): query set q is image q's region queries, in stored order,
and each query's exact relevance says which images it holds in. After round r the perfect scorer knows the
images in which all of the first r queries hold, P_q(r) (image q among them), and cannot tell them apart: it
ranks them first in uniformly random order. The target's rank is then uniform on {1, ..., n} with
n = |P_q(r)|, so its expected R@K is P(rank <= K) = min(1, K / n) and its expected rank
Σ_{k=1..n} k / n = (n + 1) / 2. Per round: R@K = 100 · mean_q min(1, K / n_q(r)) and
meanR = mean_q (n_q(r) + 1) / 2 (a model's tie is counted pessimistically by `metrics.multi_round`; the
ceiling's tie-breaking is random, its best case among tied scorers). A set with fewer than r queries is an
error or keeps its whole set (`short`), as in `evaluate.multi_query_scores`.

API:
    bayes_ceiling(split, ks=(1, 5, 10))             -> {"i2t/R@1", ..., "t2i/R@10", "rsum"}
    ceiling_t2i(exact (M, N), ks)                   -> {"R@1", ...}
    ceiling_i2t(exact (M, N), caption_image (M,), ks) -> {"R@1", ...}
    percent_of_ceiling(value, ceiling)              -> 100 · value / ceiling
    fold_ceiling(split, n_folds=5, ks)              -> bayes_ceiling averaged over the COCO 1K folds
    multi_round_ceiling(query_holds, rounds, ks)    -> {"round1/R@1", ..., "round1/meanR", ..., "mean/R@1", ...,
                                                        "rsum"}; query_holds[q]: (T_q, N) bool per query set
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from xmr_core.data.corpus import Split
from xmr_core.metrics import RSUM_KS, average_folds, coco_folds, rsum


def _check_ks(ks: Sequence[int]) -> None:
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive cut-offs, got {list(ks)}")


def ceiling_t2i(exact: np.ndarray, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """Ceiling text→image R@K (percent) from exact relevance `(M, N)` bool: 100 · mean_m min(1, K / n_m)."""
    _check_ks(ks)
    n_pos = np.asarray(exact, dtype=bool).sum(1)  # (M,) images each caption holds in
    if (n_pos == 0).any():
        raise ValueError(f"caption {int(np.flatnonzero(n_pos == 0)[0])} holds in no image")
    return {f"R@{k}": 100.0 * float(np.minimum(1.0, k / n_pos).mean()) for k in ks}


def _image_hit(spec: np.ndarray, own: np.ndarray, ks: Sequence[int]) -> list[float]:
    """P(an own caption is in the top K) for each K, for one image whose candidate captions have
    specificities `spec` (n_m, shape (C,)) and own-caption flags `own` (C,) bool (at least one True)."""
    _, group, size = np.unique(spec, return_inverse=True, return_counts=True)  # groups by n_m ascending
    own_in = np.bincount(group, weights=own, minlength=len(size))  # (G,) own captions per group
    end = np.cumsum(size)  # (G,) slots taken up to and including each group
    own_upto = np.cumsum(own_in)  # (G,) own captions up to and including each group
    out = []
    for k in ks:
        whole = int(np.searchsorted(end, k, side="right"))  # groups wholly within the top k
        if whole and own_upto[whole - 1] > 0:
            out.append(1.0)
            continue
        # whole < G here: every own caption is a candidate, so all groups fitting would have hit
        m_g, o_g = size[whole], own_in[whole]
        t = np.arange(k - (end[whole] - m_g))  # the r free slots
        out.append(1.0 - float(np.prod((m_g - o_g - t) / (m_g - t))))
    return out


def ceiling_i2t(exact: np.ndarray, caption_image: np.ndarray, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """Ceiling image→text R@K (percent) from exact relevance `(M, N)` bool and the caption→image map `(M,)`."""
    _check_ks(ks)
    exact = np.asarray(exact, dtype=bool)
    cap_img = np.asarray(caption_image, dtype=np.int64)
    n_cap, n_img = exact.shape
    if cap_img.shape != (n_cap,):
        raise ValueError(f"caption_image has shape {cap_img.shape}, expected ({n_cap},)")
    not_own = ~exact[np.arange(n_cap), cap_img]
    if not_own.any():
        raise ValueError(f"caption {int(np.flatnonzero(not_own)[0])} does not hold in its own image")
    no_caption = np.bincount(cap_img, minlength=n_img) == 0
    if no_caption.any():
        raise ValueError(f"image {int(np.flatnonzero(no_caption)[0])} has no caption written for it")
    n_pos = exact.sum(1)  # (M,) specificity: fewer images = more specific
    by_image = np.ascontiguousarray(exact.T)  # (N, M)
    hits = np.empty((n_img, len(ks)))
    for i in range(n_img):
        cand = np.flatnonzero(by_image[i])  # captions that hold in image i
        hits[i] = _image_hit(n_pos[cand], cap_img[cand] == i, ks)
    return {f"R@{k}": 100.0 * float(h) for k, h in zip(ks, hits.mean(0))}


def bayes_ceiling(split: Split, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """Ceiling of the instance-view R@K both ways on a split with exact relevance (percent).

    Returns {"i2t/R@1": ..., "i2t/R@5": ..., "i2t/R@10": ..., "t2i/R@1": ..., ..., "rsum": ...};
    "rsum" only when `ks` holds 1, 5 and 10.
    """
    if split.exact is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no exact relevance, so no Bayes ceiling")
    out = {f"i2t/{key}": v for key, v in ceiling_i2t(split.exact, split.caption_image, ks).items()}
    out |= {f"t2i/{key}": v for key, v in ceiling_t2i(split.exact, ks).items()}
    if set(RSUM_KS) <= set(ks):
        out["rsum"] = rsum(out)
    return out


def percent_of_ceiling(value: float, ceiling: float) -> float:
    """`value` as a percentage of `ceiling` (100 · value / ceiling); the ceiling must be positive."""
    if not ceiling > 0:
        raise ValueError(f"the ceiling must be positive, got {ceiling}")
    return 100.0 * value / ceiling


def fold_ceiling(split: Split, n_folds: int = 5, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """The ceiling under the COCO 1K protocol: `bayes_ceiling` of each of `n_folds` folds of images (with
    their captions, in stored order, `metrics.coco_folds`), averaged per key, as `evaluate_scores` averages
    the models' fold metrics."""
    folds = coco_folds(split.n_images, split.n_captions, n_folds)
    per_fold = [bayes_ceiling(split.subset(np.arange(images.start, images.stop), f"{split.name}-fold{f}"), ks)
                for f, (images, _) in enumerate(folds)]
    return average_folds(per_fold)


def multi_round_ceiling(query_holds: Sequence[np.ndarray], rounds: int, ks: Sequence[int] = RSUM_KS,
                        short: Literal["error", "hold"] = "error") -> dict[str, float]:
    """The multi-round Bayes ceiling (module docstring), in percent: `query_holds[q]` (T_q, N) bool says in which of
    the N images each query of set q (written for image q) holds. Keys as `metrics.multi_round` without medR:
    `round{r}/R@K`, `round{r}/meanR`, `mean/...`, and "rsum" (mean R@1 + R@5 + R@10) when `ks` holds 1, 5, 10."""
    _check_ks(ks)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if short not in ("error", "hold"):
        raise ValueError(f"short must be 'error' or 'hold', got {short!r}")
    n_sets = len(query_holds)
    n_pos = np.empty((n_sets, rounds), dtype=np.int64)  # |P_q(r)|
    for q, holds in enumerate(query_holds):
        holds = np.asarray(holds, dtype=bool)
        if holds.ndim != 2 or holds.shape[1] != n_sets or len(holds) == 0:
            raise ValueError(f"query set {q}: holds must be (T_q >= 1, {n_sets}) images, got shape {holds.shape}")
        if not holds[:, q].all():
            raise ValueError(f"query set {q}: query {int(np.flatnonzero(~holds[:, q])[0])} does not hold in its own "
                             f"image {q}")
        if short == "error" and len(holds) < rounds:
            raise ValueError(f"query set {q} has {len(holds)} queries, fewer than {rounds} rounds")
        all_so_far = np.logical_and.accumulate(holds[:rounds], axis=0).sum(1)  # (min(T_q, rounds),)
        n_pos[q] = np.concatenate([all_so_far, np.full(rounds - len(all_so_far), all_so_far[-1])])
    per_round = [{**{f"R@{k}": 100.0 * float(np.minimum(1.0, k / n_pos[:, r]).mean()) for k in ks},
                  "meanR": float(((n_pos[:, r] + 1) / 2).mean())} for r in range(rounds)]
    out = {f"round{r + 1}/{key}": v for r, row in enumerate(per_round) for key, v in row.items()}
    out.update({f"mean/{key}": v for key, v in average_folds(per_round).items()})
    if set(RSUM_KS) <= set(ks):
        out["rsum"] = sum(out[f"mean/R@{k}"] for k in RSUM_KS)
    return out
