"""Retrieval metrics from a score matrix: exact, chunked over queries, CPU or CUDA.

API (scores are `(Q, G)`: queries × gallery, higher = more similar; torch tensor or numpy array):

    retrieval_metrics(scores, relevance, ks=(1, 5, 10), precision_ks=()) -> {"R@1", ..., "medR", "meanR",
                                                                          "R-P", "mAP@R", "P@5", ...}
    ranking_stats(scores, {name: relevance, ...})   -> {name: RankingStats}   (one pass, per-query values)
    pmrp(scores, query_labels, gallery_labels, zetas=(0, 1, 2)) -> {"PMRP", "R-P_zeta0", ...}
    bidirectional(scores_i2t, relevance_i2t)        -> {"i2t/R@1", ..., "t2i/R@1", ..., "rsum"}
    rsum(metrics, prefix="")                        -> R@1+R@5+R@10 of i2t plus t2i
    coco_folds(n_images, n_captions, n_folds=5)     -> [(image slice, caption slice), ...]
    coco_1k(scores_i2t, relevance_i2t)              -> fold-averaged `bidirectional` (COCO 1K protocol)
    coco_5k(scores_i2t, relevance_i2t)              -> `bidirectional` on the full 5,000 × 25,000 matrix
    average_folds([metrics, ...])                   -> per-key mean over folds
    rank_summary(best_rank (Q,))                    -> {"R@1", ..., "medR", "meanR"} from 1-based ranks
    multi_round(scores (T, Q, G), targets (Q,))     -> {"round1/R@1", ..., "mean/R@1", "mean/meanR", ...}
    scores_from_rankings(rankings (Q, G), n_gallery) -> scores whose order is the given full rankings
    recall_by_bins(values (Q,), best_rank (Q,), bins) -> R@K per equal-count bin of queries sorted by value

Relevance is a bool `(Q, G)` matrix (what `Split.relevance()` returns) or a `LabelRelevance` (concept
label vectors within L1 distance ζ, PCME's plausible match), built chunk by chunk and never materialised.

Conventions (the VSE++ / SCAN / PCME lineage):
- Ranks are 1-based. A query's *best rank* is the rank of its highest-ranked positive, so image→text with
  5 captions per image uses the best of the 5. R@K = % of queries with best rank <= K.
  medR = floor(median of best ranks) and meanR = mean of best ranks; with 0-based ranks this is VSE++'s
  `floor(median(rank0)) + 1` and `mean(rank0) + 1`.
- R-Precision: with R = number of positives, % of the top R that are positive. mAP@R (Musgrave et al.,
  2020): (1/R) Σ_{r<=R} P@r · [item r is positive]. P@K: % of the top K that are positive.
  PMRP (PCME §4.1.1): R-Precision under plausible relevance at ζ, averaged over ζ ∈ {0, 1, 2}.
- Ties are broken pessimistically: a positive tied with a negative ranks after it. Hence a query whose
  scores are all equal gets best rank G - P + 1 (P positives), never a lucky rank 1, and a duplicate of the
  ground-truth image that is not itself a positive pushes the ground truth down one rank. The position of
  the j-th best positive (scores sorted descending, 1-based j) is #{negatives scoring >= it} + j.
- Errors (ValueError, one line): a NaN/inf score (names the query row), a query with no positive,
  a relevance whose shape does not fit the scores, a ranking that is not a full permutation of the gallery.

Computation: queries are processed in chunks of `chunk_rows` rows (default: about 8M matrix entries a
chunk), so a 5,000 × 25,000 evaluation holds a few hundred MB of temporaries at most. Nothing is fully
sorted: per chunk one `topk` as deep as the largest max(R, K) (widened to whole tie groups) gives the
positions of the positives that R-P, mAP@R and P@K read; a best rank below that window is counted
(#negatives scoring >= the best positive).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

ArrayLike = Tensor | np.ndarray
CHUNK_ELEMENTS = 1 << 23  # matrix entries per query chunk (~8.4M: a few hundred MB of temporaries)
RSUM_KS = (1, 5, 10)
DEFAULT_ZETAS = (0, 1, 2)


# ------------------------------------------------------------------------------------------ relevance


@dataclass(frozen=True)
class LabelRelevance:
    """Plausible-match relevance (PCME): query q and gallery item g match if their binary concept vectors
    differ in at most `zeta` positions (L1 distance <= zeta). Labels: `(Q, C)` and `(G, C)`, values 0/1."""

    query_labels: ArrayLike
    gallery_labels: ArrayLike
    zeta: int

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.query_labels), len(self.gallery_labels))


Relevance = ArrayLike | LabelRelevance


def _as_scores(scores: ArrayLike, ndim: int = 2) -> Tensor:
    s = torch.as_tensor(scores)
    if s.ndim != ndim:
        raise ValueError(f"scores must have {ndim} dimensions, got shape {tuple(s.shape)}")
    if not s.is_floating_point():
        s = s.float()
    return s


def _binary_labels(labels: ArrayLike, name: str, device: torch.device) -> Tensor:
    lab = torch.as_tensor(labels, device=device)
    if lab.ndim != 2:
        raise ValueError(f"{name} must be (n, C), got shape {tuple(lab.shape)}")
    bad = ~((lab == 0) | (lab == 1))
    if bad.any():
        row = int(bad.any(1).nonzero()[0])
        raise ValueError(f"{name} row {row} is not a 0/1 label vector")
    return lab.float()


def _relevance_chunks(
    relevance: Relevance, shape: tuple[int, int], device: torch.device, prepared: dict
) -> Callable[[slice, dict], Tensor]:
    """Check `relevance` against the score shape; return (rows, cache) -> bool `(rows, G)` on `device`.

    Label relevances that share their label arrays (one per ζ) share their checked label tensors
    (`prepared`, one per call of `ranking_stats`) and their distances (`cache`, one per chunk of rows).
    """
    if tuple(relevance.shape) != tuple(shape):
        raise ValueError(
            f"relevance has shape {tuple(relevance.shape)} but the scores are {tuple(shape)} "
            f"(queries × gallery)"
        )
    if isinstance(relevance, LabelRelevance):
        key = (id(relevance.query_labels), id(relevance.gallery_labels))
        if key not in prepared:
            q = _binary_labels(relevance.query_labels, "query_labels", device)
            g = _binary_labels(relevance.gallery_labels, "gallery_labels", device)
            if q.shape[1] != g.shape[1]:
                raise ValueError(f"query_labels have {q.shape[1]} concepts, gallery_labels {g.shape[1]}")
            # Hamming distance of binary vectors |a| + |b| - 2 a·b as one product: [a, |a|, 1] · [-2b, 1, |b|]
            # (integer-valued, exact in float32 for C < 2^23)
            q_aug = torch.cat([q, q.sum(1, keepdim=True), torch.ones_like(q[:, :1])], 1)
            g_aug = torch.cat([-2.0 * g, torch.ones_like(g[:, :1]), g.sum(1, keepdim=True)], 1)
            prepared[key] = (q_aug, g_aug)
        q_aug, g_aug = prepared[key]

        def label_rows(rows: slice, cache: dict) -> Tensor:
            if key not in cache:
                cache[key] = q_aug[rows] @ g_aug.T  # (rows, G) L1 distances
            return cache[key] <= relevance.zeta + 0.5

        return label_rows
    rel = torch.as_tensor(relevance)
    if rel.dtype != torch.bool:
        raise ValueError(f"relevance must be a bool matrix, got dtype {rel.dtype}")
    return lambda rows, cache: _dense_rows(rel, rows).to(device, non_blocking=True)


def _dense_rows(x: Tensor, rows: slice) -> Tensor:
    """`x[rows]` as a contiguous block. Rows of a transposed matrix (text→image scores `s.T`) are copied
    in two steps, gallery-major then transposed, about twice as fast as one strided copy."""
    block = x[rows]
    if block.is_contiguous():
        return block
    return block.T.contiguous().T.contiguous()


def _row_chunks(
    n_rows: int, n_cols: int, chunk_rows: int | None, progress: bool, desc: str
) -> Iterator[slice]:
    step = chunk_rows or max(1, CHUNK_ELEMENTS // max(n_cols, 1))
    starts = range(0, n_rows, step)
    for start in tqdm(starts, desc=desc, disable=not progress or len(starts) < 2):
        yield slice(start, min(start + step, n_rows))


def _check_finite(chunk: Tensor, rows: slice, what: str = "scores") -> None:
    if bool(torch.isfinite(chunk.sum(1)).all()):  # fast path: a NaN or inf poisons its row's sum
        return
    finite = torch.isfinite(chunk).all(1)
    if not bool(finite.all()):  # (otherwise a row sum merely overflowed)
        row = rows.start + int((~finite).nonzero()[0])
        raise ValueError(f"{what}: query row {row} contains a NaN or inf score")


# ------------------------------------------------------------------------------------ per-query stats


@dataclass
class RankingStats:
    """Per-query results of one relevance (all `(Q,)` CPU tensors): the 1-based best rank, the number of
    positives R, R-Precision, AP@R, and precision@K for the `precision_ks` asked for (fractions in [0, 1])."""

    best_rank: Tensor
    n_positives: Tensor
    r_precision: Tensor
    ap_at_r: Tensor
    precision_at: dict[int, Tensor]

    def summary(self, ks: Sequence[int] = RSUM_KS, mask: ArrayLike | None = None) -> dict[str, float]:
        """Means over the queries (or those where `mask` is True), metrics in percent, ranks 1-based."""
        sel = slice(None) if mask is None else torch.as_tensor(np.asarray(mask), dtype=torch.bool)
        out = rank_summary(self.best_rank[sel], ks)
        out["R-P"] = 100.0 * float(self.r_precision[sel].mean())
        out["mAP@R"] = 100.0 * float(self.ap_at_r[sel].mean())
        out.update({f"P@{k}": 100.0 * float(p[sel].mean()) for k, p in self.precision_at.items()})
        return out


def rank_summary(best_rank: Tensor, ks: Sequence[int] = RSUM_KS) -> dict[str, float]:
    """R@K (percent of queries with best rank <= K), medR = floor(median), meanR, from 1-based ranks `(Q,)`."""
    best = best_rank.double().cpu()
    if best.numel() == 0:
        raise ValueError("no queries to summarise")
    out = {f"R@{k}": 100.0 * float((best <= k).double().mean()) for k in ks}
    out["medR"] = float(np.floor(np.median(best.numpy())))
    out["meanR"] = float(best.mean())
    return out


def _best_rank(chunk: Tensor, rel: Tensor) -> Tensor:
    """Pessimistic 1-based rank `(q,)` of each query's best positive: 1 + #negatives scoring >= it."""
    rows, cols = rel.nonzero(as_tuple=True)  # the positives, few next to the gallery
    pos_scores = chunk[rows, cols]
    best = torch.full((len(rel),), -math.inf, dtype=chunk.dtype, device=chunk.device)
    best = best.scatter_reduce(0, rows, pos_scores, "amax")
    tied_positives = torch.bincount(rows, weights=(pos_scores >= best[rows]).double(), minlength=len(rel))
    # bool counts are summed as int32: several times faster than the default int64 on CPU
    at_or_above = (chunk >= best[:, None]).sum(1, dtype=torch.int32)
    return at_or_above - tied_positives.int() + 1


def _window_stats(
    values: Tensor,
    order: Tensor,
    rel: Tensor,
    n_pos: Tensor,
    exact_width: Tensor,
    precision_ks: Sequence[int],
) -> dict[str, Tensor]:
    """R-P, AP@R, P@K `(q,)` and the best rank where the window shows it (0 elsewhere) from the top-W of
    each row (`values`, `order`: (q, W), descending).

    The first `exact_width[i]` columns of row i (every item scoring >= its max(R, K)-th score) hold whole
    tie groups, so there the pessimistic position of the j-th positive, #negatives at or before the end
    of its tie group + j, is exact; and every position <= max(R, K) lies there.
    """
    r = rel.gather(1, order)  # (q, W) relevance in ranked order
    n_neg = torch.cumsum(~r, 1, dtype=torch.int32)
    tied = values[:, 1:] == values[:, :-1]
    # within a tie group the negatives go first: a positive takes the count at its group's end (needed only
    # in rows where a positive has a tied item after it, which float scores seldom show)
    fix = (tied & r[:, :-1]).any(1).nonzero()[:, 0]
    if len(fix):
        group_end = torch.ones_like(r[fix])
        group_end[:, :-1] = ~tied[fix]
        at_end = n_neg[fix].masked_fill(~group_end, torch.iinfo(torch.int32).max)
        n_neg[fix] = torch.cummin(at_end.flip(1), 1).values.flip(1)  # the next group end's count
    j = torch.cumsum(r, 1, dtype=torch.int32)  # the j of each positive (1-based, in ranked order)
    pos = n_neg + j  # pessimistic 1-based position of each positive
    in_top_r = r & (pos <= n_pos[:, None])
    shown = r & (torch.arange(r.shape[1], device=r.device)[None, :] < exact_width[:, None])
    first = pos.gather(1, shown.to(torch.uint8).argmax(1, keepdim=True))[:, 0]  # argmax: first maximum
    return {
        "best_rank": torch.where(shown.any(1), first, 0),
        "r_precision": in_top_r.sum(1, dtype=torch.int32) / n_pos.double(),
        # AP@R = (1/R) Σ_{positives at position p <= R} P@p, and P@p = j / p for the j-th positive
        "ap_at_r": torch.where(in_top_r, j.double() / pos.double(), 0.0).sum(1) / n_pos.double(),
        **{f"P@{k}": (r & (pos <= k)).sum(1, dtype=torch.int32).double() / k for k in precision_ks},
    }


def ranking_stats(
    scores: ArrayLike,
    relevances: Mapping[str, Relevance],
    *,
    precision_ks: Sequence[int] = (),
    chunk_rows: int | None = None,
    progress: bool = False,
) -> dict[str, RankingStats]:
    """Per-query statistics of `scores (Q, G)` under each named relevance, in one pass over query chunks.

    Per chunk: one `topk` of the chunk, as wide as the largest max(R, K) (widened to whole tie groups) and
    shared by all the relevances, gives R-P, mAP@R, P@K and the best rank when it lies in the window; a
    best rank below the window is counted (#negatives scoring >= the best positive), never sorted.
    """
    s = _as_scores(scores)
    n_q, n_g = s.shape
    for k in precision_ks:
        if not 1 <= k <= n_g:
            raise ValueError(f"precision@{k} asked for a gallery of {n_g}")
    k_max = max(precision_ks, default=0)
    prepared: dict = {}
    rel_fns = {
        name: _relevance_chunks(rel, (n_q, n_g), s.device, prepared) for name, rel in relevances.items()
    }
    parts: dict[str, list[dict[str, Tensor]]] = {name: [] for name in rel_fns}
    for rows in _row_chunks(n_q, n_g, chunk_rows, progress, "ranking"):
        chunk = _dense_rows(s, rows)
        _check_finite(chunk, rows)
        cache: dict = {}
        rels, n_pos, need = {}, {}, {}
        for name, rel_fn in rel_fns.items():
            rels[name] = rel_fn(rows, cache)
            n_pos[name] = rels[name].sum(1, dtype=torch.int32)
            if not bool((n_pos[name] > 0).all()):
                row = rows.start + int((n_pos[name] == 0).nonzero()[0])
                raise ValueError(f"relevance {name!r}: query row {row} has no positive in the gallery")
            need[name] = n_pos[name].clamp(min=k_max).long()  # (q,) how deep each query's ranking is read
        # one column more than needed, to see whether the tie group at the need-th item goes on
        top = chunk.topk(min(n_g, int(max(int(n.max()) for n in need.values())) + 1), dim=1)
        exact_width = {}
        for name, n in need.items():  # widen to whole tie groups: every item scoring >= the need-th score
            kth = top.values.gather(1, n[:, None] - 1)
            count = (top.values >= kth).sum(1, dtype=torch.int32)
            if int(count.max()) == top.values.shape[1] < n_g:  # a tie group reaches past the window
                count = (chunk >= kth).sum(1, dtype=torch.int32)
            exact_width[name] = count
        width = max(int(c.max()) for c in exact_width.values())
        if width > top.values.shape[1]:
            top = chunk.topk(width, dim=1)
        for name, rel in rels.items():
            w = int(exact_width[name].max())
            stats = _window_stats(
                top.values[:, :w], top.indices[:, :w], rel, n_pos[name], exact_width[name], precision_ks
            )
            unseen = (stats["best_rank"] == 0).nonzero()[:, 0]  # best positive below the window: count
            if len(unseen) == len(rel):
                stats["best_rank"] = _best_rank(chunk, rel)
            elif len(unseen):
                stats["best_rank"][unseen] = _best_rank(chunk[unseen], rel[unseen])
            parts[name].append({k: v.cpu() for k, v in stats.items()} | {"n_positives": n_pos[name].cpu()})
    out = {}
    for name, chunks in parts.items():
        cat = {k: torch.cat([c[k] for c in chunks]) for k in chunks[0]}
        out[name] = RankingStats(
            best_rank=cat["best_rank"],
            n_positives=cat["n_positives"],
            r_precision=cat["r_precision"],
            ap_at_r=cat["ap_at_r"],
            precision_at={k: cat[f"P@{k}"] for k in precision_ks},
        )
    return out


# ------------------------------------------------------------------------------------ entry points


def retrieval_metrics(
    scores: ArrayLike,
    relevance: Relevance,
    ks: Sequence[int] = RSUM_KS,
    *,
    precision_ks: Sequence[int] = (),
    chunk_rows: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """R@K, medR, meanR, R-P, mAP@R (and P@K) of `scores (Q, G)` under a bool `(Q, G)` relevance."""
    stats = ranking_stats(
        scores, {"relevance": relevance}, precision_ks=precision_ks, chunk_rows=chunk_rows, progress=progress
    )["relevance"]
    return stats.summary(ks)


def pmrp(
    scores: ArrayLike,
    query_labels: ArrayLike,
    gallery_labels: ArrayLike,
    zetas: Sequence[int] = DEFAULT_ZETAS,
    *,
    chunk_rows: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """Plausible-match R-Precision (PCME): R-P with positives = label vectors within L1 distance ζ.

    Returns `R-P_zeta{ζ}` for each ζ and `PMRP`, their mean (all in percent).
    """
    rels = {f"zeta{z}": LabelRelevance(query_labels, gallery_labels, z) for z in zetas}
    stats = ranking_stats(scores, rels, chunk_rows=chunk_rows, progress=progress)
    out = {f"R-P_{name}": 100.0 * float(st.r_precision.mean()) for name, st in stats.items()}
    out["PMRP"] = float(np.mean([out[f"R-P_zeta{z}"] for z in zetas]))
    return out


def rsum(metrics: Mapping[str, float], prefix: str = "") -> float:
    """rSum = i2t (R@1 + R@5 + R@10) + t2i (R@1 + R@5 + R@10), from keys `{prefix}{dir}/R@{k}`."""
    return float(sum(metrics[f"{prefix}{d}/R@{k}"] for d in ("i2t", "t2i") for k in RSUM_KS))


def _transpose(relevance: Relevance) -> Relevance:
    if isinstance(relevance, LabelRelevance):
        return LabelRelevance(relevance.gallery_labels, relevance.query_labels, relevance.zeta)
    return relevance.T


def bidirectional(
    scores_i2t: ArrayLike,
    relevance_i2t: Relevance,
    ks: Sequence[int] = RSUM_KS,
    *,
    precision_ks: Sequence[int] = (),
    chunk_rows: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """`retrieval_metrics` both ways from image→text scores `(N, M)` and relevance `(N, M)`, plus rSum.

    Text→image uses the transposed scores and relevance. R@1/5/10 are always included (rSum needs them).
    Keys: `i2t/R@1`, ..., `t2i/mAP@R`, `rsum`.
    """
    s = _as_scores(scores_i2t)
    all_ks = tuple(sorted(set(ks) | set(RSUM_KS)))
    out = {}
    for direction, sc, rel in (("i2t", s, relevance_i2t), ("t2i", s.T, _transpose(relevance_i2t))):
        metrics = retrieval_metrics(
            sc, rel, all_ks, precision_ks=precision_ks, chunk_rows=chunk_rows, progress=progress
        )
        out.update({f"{direction}/{key}": value for key, value in metrics.items()})
    out["rsum"] = rsum(out)
    return out


def image_folds(caption_image: np.ndarray, n_images: int, n_folds: int = 5) -> list[tuple[slice, slice]]:
    """COCO 1K folds by image: fold f = images [f·N/n, (f+1)·N/n) and exactly their captions, which must be grouped
    by image in image order (`caption_image` (M,) non-decreasing). The same as `coco_folds` when every image has
    the same number of captions; Karpathy's COCO json gives a few images 6 or 7, where equal caption slices would
    cut across images."""
    cap = np.asarray(caption_image)
    if n_images % n_folds:
        raise ValueError(f"{n_images} images / {len(cap)} captions do not split into {n_folds} equal folds")
    if np.any(np.diff(cap) < 0):
        raise ValueError("the captions are not grouped by image in image order, so they do not fold with the images")
    ni = n_images // n_folds
    bounds = np.searchsorted(cap, np.arange(0, n_images + 1, ni), side="left")
    return [(slice(f * ni, (f + 1) * ni), slice(int(bounds[f]), int(bounds[f + 1]))) for f in range(n_folds)]


def coco_folds(n_images: int, n_captions: int, n_folds: int = 5) -> list[tuple[slice, slice]]:
    """COCO 1K folds in stored order: fold f = images [f·N/n, (f+1)·N/n) and captions [f·M/n, (f+1)·M/n)."""
    if n_images % n_folds or n_captions % n_folds:
        raise ValueError(f"{n_images} images / {n_captions} captions do not split into {n_folds} equal folds")
    ni, nc = n_images // n_folds, n_captions // n_folds
    return [(slice(f * ni, (f + 1) * ni), slice(f * nc, (f + 1) * nc)) for f in range(n_folds)]


def average_folds(fold_metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-key mean over folds (every fold must have the same keys; keys keep their names, never positions)."""
    keys = list(fold_metrics[0])
    for f, m in enumerate(fold_metrics):
        if list(m) != keys:
            raise ValueError(f"fold {f} has keys {sorted(m)}, fold 0 has {sorted(keys)}")
    return {k: float(np.mean([m[k] for m in fold_metrics])) for k in keys}


def _fold_relevance(relevance: Relevance, images: slice, captions: slice) -> Relevance:
    if isinstance(relevance, LabelRelevance):
        return LabelRelevance(
            relevance.query_labels[images], relevance.gallery_labels[captions], relevance.zeta
        )
    return relevance[images, captions]


def coco_1k(
    scores_i2t: ArrayLike,
    relevance_i2t: Relevance,
    ks: Sequence[int] = RSUM_KS,
    *,
    n_folds: int = 5,
    chunk_rows: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """COCO 1K: `bidirectional` on each of the `coco_folds` (1,000 images / 5,000 captions), averaged."""
    s = _as_scores(scores_i2t)
    folds = []
    for f, (images, captions) in enumerate(coco_folds(*s.shape, n_folds)):
        try:
            folds.append(
                bidirectional(
                    s[images, captions],
                    _fold_relevance(relevance_i2t, images, captions),
                    ks,
                    chunk_rows=chunk_rows,
                    progress=progress,
                )
            )
        except ValueError as err:
            raise ValueError(f"COCO 1K fold {f}: {err}") from None
    return average_folds(folds)


def coco_5k(
    scores_i2t: ArrayLike,
    relevance_i2t: Relevance,
    ks: Sequence[int] = RSUM_KS,
    *,
    chunk_rows: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """COCO 5K: `bidirectional` on the full 5,000 × 25,000 test matrix (refuses any other size)."""
    s = _as_scores(scores_i2t)
    if tuple(s.shape) != (5000, 25000):
        raise ValueError(f"COCO 5K needs a 5000 × 25000 score matrix, got {tuple(s.shape)}")
    return bidirectional(s, relevance_i2t, ks, chunk_rows=chunk_rows, progress=progress)


# ------------------------------------------------------------------------------ multi-query rounds


def multi_round(
    scores: ArrayLike, targets: ArrayLike, ks: Sequence[int] = RSUM_KS, *, chunk_rows: int | None = None
) -> dict[str, float]:
    """Multi-query retrieval (Drill-down / HMRN): `scores (T, Q, G)` after each of T rounds, one target
    gallery item per query (`targets (Q,)`). Per round t (1-based): `round{t}/R@K`, `round{t}/medR`,
    `round{t}/meanR` (pessimistic 1-based rank of the target); `mean/...`: their average over rounds."""
    s = _as_scores(scores, ndim=3)
    n_rounds, n_q, n_g = s.shape
    tgt = torch.as_tensor(np.asarray(targets), dtype=torch.long)
    if tuple(tgt.shape) != (n_q,):
        raise ValueError(
            f"targets have shape {tuple(tgt.shape)}, expected ({n_q},) for scores {tuple(s.shape)}"
        )
    if n_q and (int(tgt.min()) < 0 or int(tgt.max()) >= n_g):
        row = int(((tgt < 0) | (tgt >= n_g)).nonzero()[0])
        raise ValueError(f"query {row}: target {int(tgt[row])} is outside the gallery of {n_g}")
    tgt = tgt.to(s.device)
    rounds = []
    for t in range(n_rounds):
        ranks = []
        for rows in _row_chunks(n_q, n_g, chunk_rows, False, "rounds"):
            chunk = s[t, rows]
            _check_finite(chunk, rows, f"round {t + 1}")
            target_score = chunk.gather(1, tgt[rows, None])
            # the target itself plus everything scoring >= it (ties pessimistic)
            ranks.append((chunk >= target_score).sum(1, dtype=torch.int32).cpu())
        rounds.append(rank_summary(torch.cat(ranks), ks))
    out = {f"round{t + 1}/{k}": v for t, r in enumerate(rounds) for k, v in r.items()}
    out.update({f"mean/{k}": v for k, v in average_folds(rounds).items()})
    return out


# ------------------------------------------------------------------------------------------ rankings


def scores_from_rankings(rankings: ArrayLike, n_gallery: int) -> Tensor:
    """Scores `(Q, G)` whose descending order is the given rankings `(Q, G)` of gallery indices.

    Each ranking must be a full permutation of range(n_gallery): truncated top-K lists are refused, because
    recall and R-Precision computed from them are silently wrong (eccv-caption issue #2).
    """
    r = torch.as_tensor(np.asarray(rankings), dtype=torch.long)
    if r.ndim != 2:
        raise ValueError(f"rankings must be (queries, gallery), got shape {tuple(r.shape)}")
    if r.shape[1] != n_gallery:
        raise ValueError(
            f"rankings list {r.shape[1]} items per query but the gallery has {n_gallery}: "
            f"truncated rankings are refused, pass full rankings"
        )
    bad = (r.sort(1).values != torch.arange(n_gallery)).any(1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        raise ValueError(
            f"ranking of query {row} is not a permutation of the {n_gallery} gallery items "
            f"(repeated or out-of-range indices)"
        )
    scores = torch.empty(r.shape, dtype=torch.float64)
    scores.scatter_(1, r, torch.arange(n_gallery, 0, -1, dtype=torch.float64).expand_as(r).contiguous())
    return scores


def recall_by_bins(values: ArrayLike, best_rank: ArrayLike, bins: int = 10, k: int = 1,
                   value_name: str = "value") -> dict[str, np.ndarray]:
    """R@k of the queries binned by a per-query value (e.g. PCME's uncertainty, Figure 6).

    Queries are sorted by `values` (Q,) (stable sort) and split into `bins` equal-count bins
    (`np.array_split`: the first Q % bins bins have one query more). `best_rank` (Q,): 1-based best ranks
    (`RankingStats.best_rank`). Returns {"bin": 1..bins, value_name: the bin's mean value,
    f"R@{k}": % of the bin's queries with best rank <= k}, each (bins,).
    """
    vals = np.asarray(values.cpu() if isinstance(values, Tensor) else values)
    ranks = np.asarray(best_rank.cpu() if isinstance(best_rank, Tensor) else best_rank)
    if vals.shape != ranks.shape or vals.ndim != 1:
        raise ValueError(f"recall_by_bins: values {vals.shape} and best_rank {ranks.shape} must be the same (Q,)")
    if not 1 <= bins <= len(vals):
        raise ValueError(f"recall_by_bins: bins must be in [1, {len(vals)}], got {bins}")
    chunks = np.array_split(np.argsort(vals, kind="stable"), bins)
    return {"bin": np.arange(1, bins + 1), value_name: np.array([float(vals[c].mean()) for c in chunks]),
            f"R@{k}": np.array([100.0 * float((ranks[c] <= k).mean()) for c in chunks])}
