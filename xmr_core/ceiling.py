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

Multi-query retrieval (HMRN, `multi_round_ceiling`): query set q is image q's region queries, in stored order. The
scenes generator (`data.scenes.region_queries`) writes one query per object, for the objects in the layout's order,
which is uniformly random given the image (slots are exchangeable: cells a random permutation, attributes i.i.d.),
and a query names one or two of its object's attributes, chosen independently of their values. So the first m queries
x_1..x_m of a set drawn from image g (k_g objects) have probability

    P(x_1..m | g) = Π_t π(x_t) · #{injective σ: {1..m} -> objects of g, x_t fits object σ(t)} · (k_g − m)! / k_g!,

with π(x_t) (which attributes were named) the same for every image. The Bayes-optimal scorer ranks the gallery by
this likelihood (uniform prior over images): it maximises the expected R@K for every K at once and minimises the
expected rank, so no scorer of the queries beats it in expectation. Ties are broken at random: with n_> images
strictly likelier than the target and n_= as likely (itself included), its expected R@K is
clip((K − n_>) / n_=, 0, 1) and its expected rank n_> + (n_= + 1) / 2. The count of injective matchings (a
permanent) is built round by round over subsets of objects (2^K states), only for the images still possible. In a
round past a set's end (`short="hold"`) the scorer is also told the set is complete, so the target has exactly T_q
objects (likelihood × [k_g = T_q]); models are not told this, so there it is an upper bound with room to spare
(measured on the cpu test gallery: +0.1 R@1 at most in any round). Likelihoods are compared exactly as integers
(the likelihood times K! / Π π).

API:
    bayes_ceiling(split, ks=(1, 5, 10))             -> {"i2t/R@1", ..., "t2i/R@10", "rsum"}
    ceiling_t2i(exact (M, N), ks)                   -> {"R@1", ...}
    ceiling_i2t(exact (M, N), caption_image (M,), ks) -> {"R@1", ...}
    query_ceiling(split, ks)                        -> {"i2t": (N, len(ks)), "t2i": (M, len(ks))} hit probabilities
    percent_of_ceiling(value, ceiling)              -> 100 · value / ceiling
    fold_ceiling(split, n_folds=5, ks)              -> bayes_ceiling averaged over the COCO 1K folds
    split_ceiling(split, whole)                     -> {"1K": fold_ceiling, whole: bayes_ceiling} or None
    multi_round_ceiling(queries, objects, valid, rounds, ks) -> {"round1/R@1", ..., "round1/meanR", ..., "mean/R@1",
                                                        ..., "rsum"}; queries[q]: (T_q, A) attribute values per set
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from xmr_core.data.corpus import Split
from xmr_core.data.scene_grammar import ANY
from xmr_core.metrics import RSUM_KS, average_folds, coco_folds, rsum


def _check_ks(ks: Sequence[int]) -> None:
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive cut-offs, got {list(ks)}")


def query_hits_t2i(exact: np.ndarray, ks: Sequence[int] = RSUM_KS) -> np.ndarray:
    """Each caption's ceiling hit probability at every K from exact relevance `(M, N)` bool: min(1, K / n_m),
    shape (M, len(ks))."""
    _check_ks(ks)
    n_pos = np.asarray(exact, dtype=bool).sum(1)  # (M,) images each caption holds in
    if (n_pos == 0).any():
        raise ValueError(f"caption {int(np.flatnonzero(n_pos == 0)[0])} holds in no image")
    return np.minimum(1.0, np.asarray(ks, dtype=np.float64)[None, :] / n_pos[:, None])


def ceiling_t2i(exact: np.ndarray, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """Ceiling text→image R@K (percent) from exact relevance `(M, N)` bool: 100 · mean_m min(1, K / n_m)."""
    return {f"R@{k}": 100.0 * float(h) for k, h in zip(ks, query_hits_t2i(exact, ks).mean(0))}


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


def query_hits_i2t(exact: np.ndarray, caption_image: np.ndarray, ks: Sequence[int] = RSUM_KS) -> np.ndarray:
    """Each image's ceiling hit probability at every K (an own caption in the top K) from exact relevance
    `(M, N)` bool and the caption→image map `(M,)`, shape (N, len(ks))."""
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
    return hits


def ceiling_i2t(exact: np.ndarray, caption_image: np.ndarray, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """Ceiling image→text R@K (percent) from exact relevance `(M, N)` bool and the caption→image map `(M,)`."""
    return {f"R@{k}": 100.0 * float(h) for k, h in zip(ks, query_hits_i2t(exact, caption_image, ks).mean(0))}


def query_ceiling(split: Split, ks: Sequence[int] = RSUM_KS) -> dict[str, np.ndarray]:
    """Every query's ceiling hit probability: {"i2t": (N, len(ks)), "t2i": (M, len(ks))}. The ceiling scorer ranks
    each query's gallery on its own, so its R@K on a subset of queries is 100 · the mean of their rows."""
    if split.exact is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no exact relevance, so no Bayes ceiling")
    return {"i2t": query_hits_i2t(split.exact, split.caption_image, ks), "t2i": query_hits_t2i(split.exact, ks)}


def bayes_ceiling(split: Split, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """Ceiling of the instance-view R@K both ways on a split with exact relevance (percent).

    Returns {"i2t/R@1": ..., "i2t/R@5": ..., "i2t/R@10": ..., "t2i/R@1": ..., ..., "rsum": ...};
    "rsum" only when `ks` holds 1, 5 and 10.
    """
    out = {f"{d}/R@{k}": 100.0 * float(h) for d, hits in query_ceiling(split, ks).items()
           for k, h in zip(ks, hits.mean(0))}
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


SplitCeiling = dict[str, dict[str, float]]  # protocol -> `bayes_ceiling` keys ("i2t/R@1", ..., "rsum")


def split_ceiling(split: Split, whole: str) -> SplitCeiling | None:
    """The ceiling of a test split under the two instance protocols: {"1K": `fold_ceiling`, `whole`:
    `bayes_ceiling`}, `whole` the chapter's name of the whole-split protocol ("5K", "all"); None without exact
    relevance (real data)."""
    if split.exact is None:
        return None
    return {"1K": fold_ceiling(split), whole: bayes_ceiling(split)}


MAX_OBJECTS = 12  # objects per image the exact subset recursion of `multi_round_ceiling` accepts (2^K states)


def _matchings(fits: np.ndarray, rounds: int) -> np.ndarray:
    """(min(T, rounds), N) int64: for r = 1.., the number of injective matchings of queries 1..r to objects of
    each image, from `fits` (T, N, K) bool (query t fits object o of image g). W[g, S] counts the matchings of
    the first r queries onto exactly the object set S (a bitmask); W_{r+1}[S ∪ {o}] += W_r[S] · fits[r, g, o]."""
    n_rounds, (_, n, k) = min(len(fits), rounds), fits.shape
    popcount = np.array([state.bit_count() for state in range(1 << k)])
    out = np.zeros((n_rounds, n), np.int64)
    alive = np.arange(n)  # images whose count is still positive
    w = np.zeros((n, 1 << k), np.int64)
    w[:, 0] = 1
    for r in range(n_rounds):
        nxt = np.zeros((len(alive), 1 << k), np.int64)
        f = fits[r, alive]  # (n_alive, K)
        for o in range(k):
            src = np.flatnonzero((popcount == r) & ((np.arange(1 << k) >> o) & 1 == 0))
            nxt[:, src | (1 << o)] += w[:, src] * f[:, o, None]
        count = nxt.sum(1)
        out[r, alive] = count
        alive, w = alive[count > 0], nxt[count > 0]
    return out


def _tie_broken(likelihood: np.ndarray, target: int, ks: Sequence[int]) -> list[float]:
    """Expected R@K for each K (fractions) and expected rank of `target` when the gallery is ranked by
    `likelihood` (N,) with ties in uniformly random order."""
    above = int((likelihood > likelihood[target]).sum())
    tied = int((likelihood == likelihood[target]).sum())
    return [min(1.0, max(0.0, (k - above) / tied)) for k in ks] + [above + (tied + 1) / 2]


def multi_round_ceiling(queries: Sequence[np.ndarray], objects: np.ndarray, valid: np.ndarray, rounds: int,
                        ks: Sequence[int] = RSUM_KS, short: Literal["error", "hold"] = "error") -> dict[str, float]:
    """The multi-round Bayes ceiling (module docstring), in percent. `queries[q]` (T_q, A) int: the attribute values
    each query of set q (written for image q) names, `scene_grammar.ANY` (-1) where it names none; `objects`
    (N, K, A) int: each image's objects' attributes; `valid` (N, K) bool: which object slots are real. Keys as
    `metrics.multi_round` without medR: `round{r}/R@K`, `round{r}/meanR`, `mean/...`, and "rsum" (mean R@1 + R@5 +
    R@10) when `ks` holds 1, 5, 10."""
    _check_ks(ks)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if short not in ("error", "hold"):
        raise ValueError(f"short must be 'error' or 'hold', got {short!r}")
    objects, valid = np.asarray(objects), np.asarray(valid, dtype=bool)
    n_sets = len(queries)
    if objects.ndim != 3 or objects.shape[0] != n_sets or valid.shape != objects.shape[:2]:
        raise ValueError(f"objects must be ({n_sets}, K, A) and valid ({n_sets}, K) for {n_sets} query sets, got "
                         f"{objects.shape} and {valid.shape}")
    if objects.shape[1] > MAX_OBJECTS:
        raise ValueError(f"{objects.shape[1]} object slots per image; the exact ceiling takes at most {MAX_OBJECTS}")
    n_objects = valid.sum(1)
    k_max = objects.shape[1]
    # weight[m, k] = (k - m)! / k! · K! (an integer), 0 where k < m: the object order's share of the likelihood
    weight = np.array([[math.factorial(k - m) * (math.factorial(k_max) // math.factorial(k)) if k >= m else 0
                        for k in range(k_max + 1)] for m in range(k_max + 1)], dtype=np.int64)
    per_round = np.empty((rounds, n_sets, len(ks) + 1))  # expected hit per K, then expected rank
    for q, x in enumerate(queries):
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != objects.shape[2] or len(x) == 0:
            raise ValueError(f"query set {q}: queries must be (T_q >= 1, {objects.shape[2]}) attribute values, got "
                             f"shape {x.shape}")
        if short == "error" and len(x) < rounds:
            raise ValueError(f"query set {q} has {len(x)} queries, fewer than {rounds} rounds")
        open_ = x[:, None, None, :] == ANY
        fits = valid[None] & (open_ | (x[:, None, None, :] == objects[None])).all(-1)  # (T_q, N, K)
        count = _matchings(fits, rounds)  # (min(T_q, rounds), N)
        if count[-1, q] == 0:
            raise ValueError(f"query set {q}: its queries do not describe distinct objects of its own image {q}")
        for r in range(rounds):
            m = min(r + 1, len(x))  # queries scored in this round
            likelihood = count[m - 1] * weight[m, n_objects]  # (N,)
            if r + 1 > len(x):  # past the set's end: the target has exactly T_q objects
                likelihood = likelihood * (n_objects == len(x))
            per_round[r, q] = _tie_broken(likelihood, q, ks)
    rows = [{**{f"R@{k}": 100.0 * float(per_round[r, :, i].mean()) for i, k in enumerate(ks)},
             "meanR": float(per_round[r, :, -1].mean())} for r in range(rounds)]
    out = {f"round{r + 1}/{key}": v for r, row in enumerate(rows) for key, v in row.items()}
    out.update({f"mean/{key}": v for key, v in average_folds(rows).items()})
    if set(RSUM_KS) <= set(ks):
        out["rsum"] = sum(out[f"mean/R@{k}"] for k in RSUM_KS)
    return out
