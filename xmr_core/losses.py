"""Shared training losses: triplet hinge (VSE0 / VSE++), PCME's soft contrastive loss and regularisers, InfoNCE.

Conventions: a score matrix `scores (B, B)` has images as rows and captions as columns, higher = more
similar, and the matching pairs on the diagonal. `positive_mask (B, B)` (bool, optional) marks other true
matches in the batch (a duplicated image, two captions of one image); they are never used as negatives.
Gaussian embeddings are `(mu, logvar)` with `logvar = log sigma^2` (see `xmr_core.similarity`).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from xmr_core.similarity import match_logits, squared_euclidean

Reduction = Literal["sum", "mean"]


def _check_scores(scores: Tensor, positive_mask: Tensor | None) -> Tensor:
    """Validate a square score matrix (a non-finite score: `FloatingPointError`); return the bool mask of pairs that
    are not negatives (B, B)."""
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores: expected a square (B, B) matrix with positives on the diagonal, got {tuple(scores.shape)}")
    if not torch.isfinite(scores).all():
        bad = torch.nonzero(~torch.isfinite(scores))[0].tolist()
        raise FloatingPointError(f"scores: non-finite value at {bad}")  # a diverged forward pass (`train.fit`)
    not_negative = torch.eye(len(scores), dtype=torch.bool, device=scores.device)
    if positive_mask is not None:
        if positive_mask.shape != scores.shape or positive_mask.dtype != torch.bool:
            raise ValueError(
                f"positive_mask: expected a bool {tuple(scores.shape)} tensor, got {positive_mask.dtype} {tuple(positive_mask.shape)}"
            )
        not_negative = not_negative | positive_mask.to(scores.device)
    return not_negative


def _reduce(values: Tensor, reduction: Reduction) -> Tensor:
    if reduction == "sum":
        return values.sum()
    if reduction == "mean":
        return values.mean()
    raise ValueError(f"unknown reduction {reduction!r}; choose 'sum' or 'mean'")


def hinge_per_query(
    scores: Tensor,
    margin: float = 0.2,
    negatives: Literal["sum", "max", "topk"] = "sum",
    topk: int = 1,
    max_weight: float = 1.0,
    positive_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The per-query terms of `contrastive_hinge`: (i2t `(B,)` for each image row, t2i `(B,)` for each caption
    column), so a method can weight queries one by one (DVSE's variance-aware weights, Eq. 11)."""
    not_negative = _check_scores(scores, positive_mask)
    if negatives not in ("sum", "max", "topk"):
        raise ValueError(f"contrastive_hinge: unknown negatives {negatives!r}; choose 'sum', 'max' or 'topk'")
    if not 0.0 <= max_weight <= 1.0:
        raise ValueError(f"contrastive_hinge: max_weight must be in [0, 1], got {max_weight}")
    if negatives == "sum" and max_weight != 1.0:
        raise ValueError("contrastive_hinge: max_weight mixes sum and hard negatives; use negatives='max' or 'topk'")
    if negatives == "topk" and not 1 <= topk <= len(scores) - 1:
        raise ValueError(f"contrastive_hinge: topk must be in [1, B-1] = [1, {len(scores) - 1}], got {topk}")

    positives = scores.diagonal()
    # i2t: image i (row) against negative captions c' (columns); t2i: caption c (column) against images i'.
    cost_i2t = (margin + scores - positives.unsqueeze(1)).clamp_min(0).masked_fill(not_negative, 0.0)
    cost_t2i = (margin + scores - positives.unsqueeze(0)).clamp_min(0).masked_fill(not_negative, 0.0)

    def per_query(cost: Tensor, dim: int) -> Tensor:
        summed = cost.sum(dim)
        if negatives == "sum":
            return summed
        hard = cost.amax(dim) if negatives == "max" else cost.topk(topk, dim=dim).values.sum(dim)
        return (1.0 - max_weight) * summed + max_weight * hard

    return per_query(cost_i2t, 1), per_query(cost_t2i, 0)


def contrastive_hinge(
    scores: Tensor,
    margin: float = 0.2,
    negatives: Literal["sum", "max", "topk"] = "sum",
    topk: int = 1,
    max_weight: float = 1.0,
    positive_mask: Tensor | None = None,
    reduction: Reduction = "sum",
) -> Tensor:
    """Bidirectional triplet hinge loss of VSE0 (sum over negatives) and VSE++ (hardest negative).

    Faghri et al. (VSE++, BMVC 2018) Eq. (2) sum and Eq. (4) max-violation:
    `l(i, c) = H_c' [margin - s(i, c) + s(i, c')]_+ + H_i' [margin - s(i, c) + s(i', c)]_+`, where H is a sum
    over negatives (`"sum"`), their max (`"max"`), or the sum of the `topk` largest violations (`"topk"`).
    With `"max"` / `"topk"`, `max_weight` w mixes `(1 - w) * sum + w * hard` (w = 1: pure VSE++), so a
    schedule can move gradually from VSE0 to VSE++. Pairs on the diagonal and in `positive_mask` are not
    negatives. scores `(B, B)` -> scalar, summed over the B queries of each direction (as VSE++'s code) or
    averaged (`reduction="mean"`, i.e. divided by B). The per-query terms: `hinge_per_query`.
    """
    i2t, t2i = hinge_per_query(scores, margin, negatives, topk, max_weight, positive_mask)
    return _reduce(i2t, reduction) + _reduce(t2i, reduction)


def soft_contrastive_nll(logits: Tensor, matched: Tensor) -> Tensor:
    """Per-pair NLL of the Monte-Carlo match probability, from sample-pair logits (PCME Eq. 1, 2).

    logits `(..., J, J')` (sample-wise logits, `s(logit) = p(m|z, z')` with the logistic sigmoid s),
    matched bool `(...)` -> `(...)`: `-log p` for matches and `-log(1 - p)` otherwise, with
    `p = 1/(J J') sum s(logit)`, computed as `log p = logsumexp(logsigmoid(logit)) - log(J J')`
    (and `log(1 - p)` with `logsigmoid(-logit)`), which stays finite where p rounds to 0 or 1.
    """
    if logits.ndim < 2 or logits.shape[:-2] != matched.shape:
        raise ValueError(f"soft_contrastive_nll: logits {tuple(logits.shape)} must be matched {tuple(matched.shape)} + (J, J')")
    if matched.dtype != torch.bool:
        raise ValueError(f"soft_contrastive_nll: matched must be bool, got {matched.dtype}")
    if not torch.isfinite(logits).all():  # a diverged forward pass: `train.fit` handles it as a non-finite loss
        raise FloatingPointError("soft_contrastive_nll: non-finite logits")
    signed = torch.where(matched[..., None, None], logits, -logits)
    log_count = math.log(logits.shape[-1] * logits.shape[-2])
    return log_count - torch.logsumexp(F.logsigmoid(signed).flatten(-2), dim=-1)


def soft_contrastive_loss(
    distances: Tensor,
    matched: Tensor,
    a: Tensor | float,
    b: Tensor | float,
    reduction: Reduction = "mean",
) -> Tensor:
    """PCME's soft cross-modal contrastive loss over every pair of a batch (Eq. 1-3).

    distances `(B, B', J, J')` between the image and caption samples (`similarity.sample_distances`),
    matched bool `(B, B')`, learnable scale `a` and shift `b` (logit = -a d + b, logistic sigmoid; PCME's
    code uses 1/(1+e^-2x), so its a = b = 15 is a = b = 30 here) -> scalar, mean or sum over the B B' pairs.
    The loss is symmetric: the t2i loss (transposed inputs) is the same number (PCME issue #3); PCME's code
    reports i2t + t2i, i.e. 2 x this loss with `reduction="sum"`.
    """
    if distances.ndim != 4:
        raise ValueError(f"soft_contrastive_loss: distances must be (B, B', J, J'), got {tuple(distances.shape)}")
    return _reduce(soft_contrastive_nll(match_logits(distances, a, b), matched), reduction)  # Eq. (3) then (1)


def kl_to_standard_normal(mu: Tensor, logvar: Tensor, reduction: Reduction = "mean") -> Tensor:
    """`KL(N(mu, diag e^logvar) || N(0, I)) = 1/2 sum_d (mu^2 + e^logvar - 1 - logvar)` per item.

    PCME's regulariser as its paper states it (after Hedged Instance Embeddings); mu, logvar `(N, D)` -> scalar
    (mean or sum over N). PCME's code computes another function: its head outputs log sigma (it samples
    mu + e^(log sigma) eps) but its KL is this formula with log sigma in place of log sigma^2, i.e.
    1/2 sum_d (m^2 + sigma - 1 - log sigma), and with m the mean of the J samples rather than mu. Both are
    minimal at sigma = 1, but as sigma -> 0 the derivative in log sigma is -1 here against -1/2 in the code
    (here d/d log sigma = sigma^2 - 1, the code's (sigma - 1) / 2), and 4x the code's curvature at sigma = 1:
    a KL weight tuned in the book is not the code's `vib_beta` (`docs/methods.md`).
    """
    if mu.shape != logvar.shape or mu.ndim != 2:
        raise ValueError(f"kl_to_standard_normal: mu {tuple(mu.shape)} and logvar {tuple(logvar.shape)} must be equal (N, D)")
    per_item = 0.5 * (mu.square() + logvar.exp() - 1.0 - logvar).sum(1)
    return _reduce(per_item, reduction)


def uniformity_loss(z: Tensor, t: float = 2.0) -> Tensor:
    """Wang & Isola (ICML 2020) uniformity: `log mean_{i<j} exp(-t ||z_i - z_j||^2)`, exact over all pairs.

    z `(N, D)` or samples `(N, J, D)` (all N J points) -> scalar. Needs >= 2 points. PCME applies it to the samples
    of both modalities too, but above 128 points its code estimates it on 128 points drawn with replacement (a
    repeated point adds a pair at distance 0); this is the exact all-pairs value that estimate aims at.
    """
    points = z.reshape(-1, z.shape[-1])
    n = len(points)
    if z.ndim not in (2, 3) or n < 2:
        raise ValueError(f"uniformity_loss: expected (N, D) or (N, J, D) with at least 2 points, got {tuple(z.shape)}")
    rows, cols = torch.triu_indices(n, n, offset=1, device=points.device)
    sq = squared_euclidean(points, points)[rows, cols]
    return torch.logsumexp(-t * sq, dim=0) - math.log(len(sq))


def info_nce(
    scores: Tensor,
    temperature: float | None = None,
    scale: float | None = None,
    positive_mask: Tensor | None = None,
) -> Tensor:
    """Symmetric InfoNCE (van den Oord et al. 2018; CLIP's form), both directions averaged.

    `L = 1/2 [CE(scores * scale, diag) over rows + CE over columns]`, scale = 1/temperature (give exactly one).
    Pairs in `positive_mask` (off the diagonal) are left out of the softmax denominators.
    scores `(B, B)` -> scalar (mean over the B queries of each direction).
    """
    not_negative = _check_scores(scores, positive_mask)
    if (temperature is None) == (scale is None):
        raise ValueError("info_nce: give exactly one of temperature and scale")
    factor = scale if scale is not None else 1.0 / temperature
    eye = torch.eye(len(scores), dtype=torch.bool, device=scores.device)
    logits = (scores * factor).masked_fill(not_negative & ~eye, float("-inf"))
    targets = torch.arange(len(scores), device=scores.device)
    return 0.5 * (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets))


def distance_weights(
    scores: Tensor,
    positive_mask: Tensor | None = None,
    cut_off: float = 0.5,
    dim: int = 512,
    nonzero_cutoff: float = 1.7,
) -> Tensor:
    """Distance-weighted sampling probabilities of each row's negatives (Wu et al., "Sampling Matters in Deep
    Embedding Learning", ICCV 2017; HREM's code draws its negatives so).

    Cosine scores of unit vectors `(B, B)` -> `(B, B)` probabilities, each row summing to 1, or to 0 when the
    row has no eligible negative. The distance d = sqrt(2 - 2 s), clipped below at `cut_off`; the density of
    distances between uniform points on the unit sphere in `dim` dimensions is
    q(d) ∝ d^(dim-2) (1 - d²/4)^((dim-3)/2), and a negative is drawn with probability ∝ 1 / q(d) among the
    negatives closer than `nonzero_cutoff` (farther ones have zero loss; HREM: 1.7 Flickr30K, 1.9 COCO).
    No gradient flows through the weights.
    """
    not_negative = _check_scores(scores, positive_mask)
    if not 0.0 < cut_off < nonzero_cutoff or dim < 4:
        raise ValueError(f"distance_weights: need 0 < cut_off < nonzero_cutoff and dim >= 4, got cut_off={cut_off}, "
                         f"nonzero_cutoff={nonzero_cutoff}, dim={dim}")
    d = (2.0 - 2.0 * scores.detach()).clamp_min(0.0).sqrt().clamp_min(cut_off)
    log_q = (dim - 2.0) * d.log() + (dim - 3.0) / 2.0 * (1.0 - d.square() / 4.0).clamp_min(1e-12).log()
    eligible = ~not_negative & (d < nonzero_cutoff)
    log_w = (-log_q).masked_fill(~eligible, float("-inf"))
    has_negative = eligible.any(1, keepdim=True)
    return torch.where(has_negative, log_w.masked_fill(~has_negative, 0.0).softmax(1), torch.zeros_like(log_w))


def distance_weighted_triplet(
    scores: Tensor,
    margin: float = 0.2,
    positive_mask: Tensor | None = None,
    cut_off: float = 0.5,
    dim: int = 512,
    nonzero_cutoff: float = 1.7,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Bidirectional triplet hinge with one distance-weighted negative per positive pair (HREM's `TripletLoss`).

    For every positive pair (i, j) (the diagonal and `positive_mask`) of each direction (image rows against
    caption columns, then caption columns against image rows) one negative n is drawn from row i of
    `distance_weights`, and the hinge [margin - s(i, j) + s(i, n)]_+ is summed; an anchor with no eligible
    negative adds 0. scores `(B, B)` -> scalar.
    """
    eye = torch.eye(len(scores), dtype=torch.bool, device=scores.device)

    def one_direction(s: Tensor, mask: Tensor | None) -> Tensor:
        probs = distance_weights(s, mask, cut_off, dim, nonzero_cutoff)
        anchors, positives = (eye if mask is None else eye | mask).nonzero(as_tuple=True)
        keep = probs[anchors].sum(1) > 0
        anchors, positives = anchors[keep], positives[keep]
        if len(anchors) == 0:
            return s.sum() * 0.0
        negatives = torch.multinomial(probs[anchors], 1, generator=generator).squeeze(1)
        return (margin - s[anchors, positives] + s[anchors, negatives]).clamp_min(0).sum()

    return one_direction(scores, positive_mask) + one_direction(scores.T, None if positive_mask is None
                                                                 else positive_mask.T)
