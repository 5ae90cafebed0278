"""Pairwise scores between embeddings and between Gaussian embeddings.

Every scorer returns an `(N, M)` matrix, higher = more similar, with the first argument as the queries
(rows) and the second as the gallery (columns). Scorers work on CPU and CUDA (the output lives on the
inputs' device) and fill the matrix block by block, `chunk_size` items a side, so a COCO 5K-sized gallery
(5,000 x 25,000, D=1024, J=7) is scored without ever building an `(N, M, J, J, D)` tensor. DVSE's Fast
Re-ranking (FR) of a score matrix and the two re-rankers it is compared with (RR, MR) are at the end.

Gaussian embeddings are `(mu, logvar)` pairs, both `(N, D)`, with `logvar = log sigma^2` per dimension
(diagonal covariance). This is the only parametrisation in the library.

The test-time similarities are those of PCME (Chun et al., CVPR 2021) Table 1 / Sec. 3.2.3; the space
complexity of each (what the gallery has to store) is in its docstring. The match probability uses the
standard logistic sigmoid s(x) = 1 / (1 + e^-x). PCME's public code uses e^x / (e^x + e^-x) = 1 / (1 + e^-2x),
so its learned (a, b) are half of ours: PCME's a = b = 15 (COCO) is a = b = 30 here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

Gaussian = tuple[Tensor, Tensor]
"""`(mu, logvar)`, both `(N, D)`, `logvar = log sigma^2` (diagonal)."""

GaussianMethod = Literal["mean_cosine", "mean_l2", "elk", "js", "wasserstein", "csd", "avg_l2", "match_prob"]
GAUSSIAN_METHODS: tuple[str, ...] = GaussianMethod.__args__

DEFAULT_CHUNK = 1024
_BROADCAST_ELEMENTS = 2**25  # elements of one (rows, cols, D) block for the per-dimension scorers (128 MB fp32)
_MIN_SQ_DISTANCE = 1e-12  # squared distances are clamped here before a square root (finite gradients)


# --------------------------------------------------------------------------------------------------- checks


def _check_matrix(x: Tensor, name: str, ndim: int = 2) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    # One cheap pass: a NaN or inf anywhere makes its row's sum non-finite (overflowing finite rows are
    # searched too and pass).
    if not torch.isfinite(x.sum(-1)).all() and not torch.isfinite(x).all():
        bad = torch.nonzero(~torch.isfinite(x))[0].tolist()
        raise ValueError(f"{name}: non-finite value (NaN or inf) at index {bad}")


def _check_pair(a: Tensor, b: Tensor, names: tuple[str, str], ndim: int = 2) -> None:
    _check_matrix(a, names[0], ndim)
    _check_matrix(b, names[1], ndim)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"{names[0]} and {names[1]}: embedding sizes differ ({a.shape[-1]} vs {b.shape[-1]})")
    if a.device != b.device:
        raise ValueError(f"{names[0]} and {names[1]}: on different devices ({a.device} vs {b.device})")


def _check_gaussian(g: Gaussian, name: str) -> None:
    if not (isinstance(g, tuple | list) and len(g) == 2):
        raise TypeError(f"{name}: expected a (mu, logvar) pair")
    mu, logvar = g
    _check_pair(mu, logvar, (f"{name}.mu", f"{name}.logvar"))
    if mu.shape != logvar.shape:
        raise ValueError(f"{name}: mu {tuple(mu.shape)} and logvar {tuple(logvar.shape)} differ in shape")


def _check_gaussians(q: Gaussian, g: Gaussian) -> None:
    _check_gaussian(q, "query")
    _check_gaussian(g, "gallery")
    _check_pair(q[0], g[0], ("query.mu", "gallery.mu"))


# --------------------------------------------------------------------------------------------------- blocks


def _slices(n: int, size: int) -> Iterator[slice]:
    if size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {size}")
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _fill_blocks(
    n: int,
    m: int,
    rows: int,
    cols: int,
    block: Callable[[slice, slice], Tensor],
    like: Tensor,
    progress: bool,
) -> Tensor:
    """Fill an `(n, m)` matrix from `block(row_slice, col_slice) -> (rows, cols)`."""
    out = torch.empty(n, m, dtype=like.dtype, device=like.device)
    for rs in tqdm(list(_slices(n, rows)), desc="scoring", disable=not progress):
        for cs in _slices(m, cols):
            out[rs, cs] = block(rs, cs)
    return out


def _sq_norms(x: Tensor) -> Tensor:
    """Row-wise squared norms `(N, D) -> (N,)` without an `(N, D)` temporary."""
    return torch.einsum("nd,nd->n", x, x)


def _sq_block(x: Tensor, x2: Tensor, y: Tensor, y2: Tensor) -> Tensor:
    """`x2_i + y2_j - 2 x_i . y_j` clamped at 0 (round-off), `(N, M)`: one matmul, then in place
    (autograd-safe), with the squared norms `x2 (N,)`, `y2 (M,)` computed once by the caller."""
    sq = torch.addmm(y2.unsqueeze(0), x, y.T, alpha=-2.0)
    return sq.add_(x2.unsqueeze(1)).clamp_(min=0.0)


def squared_euclidean(x: Tensor, y: Tensor) -> Tensor:
    """`||x_i - y_j||^2` for x `(N, D)`, y `(M, D)` -> `(N, M)`, as `||x||^2 + ||y||^2 - 2 x.y`. Differentiable."""
    return _sq_block(x, _sq_norms(x), y, _sq_norms(y))


# --------------------------------------------------------------------------------------------------- points


def dot(a: Tensor, b: Tensor, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> Tensor:
    """Inner products `a (N, D) . b (M, D)^T -> (N, M)`. Space: O(N).

    Differentiable, like `cosine` and `max_pair_cosine`, so training losses can use them on a batch;
    evaluation calls them under `torch.no_grad()`.
    """
    _check_pair(a, b, ("a", "b"))
    return _fill_blocks(len(a), len(b), chunk_size, chunk_size, lambda r, c: a[r] @ b[c].T, a, progress)


def cosine(a: Tensor, b: Tensor, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> Tensor:
    """Cosine similarities `a (N, D)` vs `b (M, D)` -> `(N, M)` in [-1, 1]. Space: O(N)."""
    _check_pair(a, b, ("a", "b"))
    return dot(F.normalize(a, dim=-1), F.normalize(b, dim=-1), chunk_size=chunk_size, progress=progress)


def max_pair_cosine(a: Tensor, b: Tensor, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> Tensor:
    """PVSE's score: the best cosine over the K x K' pairs of embeddings.

    a `(N, K, D)`, b `(M, K', D)` -> `(N, M)` with `s_ij = max_{k,k'} cos(a_ik, b_jk')`. Space: O(K N).
    """
    _check_pair(a, b, ("a", "b"), ndim=3)
    (n, k, d), (m, k2, _) = a.shape, b.shape
    fa = F.normalize(a, dim=-1).reshape(n * k, d)
    fb = F.normalize(b, dim=-1).reshape(m * k2, d)

    def block(r: slice, c: slice) -> Tensor:
        sims = fa[r.start * k : r.stop * k] @ fb[c.start * k2 : c.stop * k2].T
        return sims.view(r.stop - r.start, k, c.stop - c.start, k2).amax(dim=(1, 3))

    return _fill_blocks(n, m, chunk_size, chunk_size, block, a, progress)


# --------------------------------------------------------------------------------------------------- samples


def sample_gaussian(
    mu: Tensor, logvar: Tensor, n_samples: int, generator: torch.Generator | None = None, *,
    shared_noise: bool = False,
) -> Tensor:
    """Reparametrised samples `z = mu + exp(logvar / 2) * eps`: `(N, D)` -> `(N, J, D)`, J = `n_samples`.

    PCME Eq. (4). Differentiable in mu and logvar. `generator` may live on another device than `mu`
    (the noise is then drawn there and moved), so a CPU generator gives the same samples on any device.
    `shared_noise`: every item uses the same J noise vectors (common random numbers), so an item's samples
    do not depend on which other items are sampled with it (test-time scores then do not depend on chunking).
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    _check_gaussian((mu, logvar), "sample_gaussian")
    shape = (1 if shared_noise else mu.shape[0], n_samples, mu.shape[1])
    noise_device = generator.device if generator is not None else mu.device
    eps = torch.randn(shape, generator=generator, device=noise_device, dtype=mu.dtype).to(mu.device)
    if shared_noise:
        eps = eps.expand(mu.shape[0], -1, -1).clone()
    std = torch.exp(0.5 * logvar).unsqueeze(1)
    if torch.is_grad_enabled() and (mu.requires_grad or logvar.requires_grad):
        return torch.addcmul(mu.unsqueeze(1), std, eps)
    return eps.mul_(std).add_(mu.unsqueeze(1))  # no gradient needed: reuse the noise buffer (half the memory)


def sample_distances(za: Tensor, zb: Tensor) -> Tensor:
    """Euclidean distances between every pair of samples: za `(N, J, D)`, zb `(M, J', D)` -> `(N, M, J, J')`.

    For training batches (unchunked, differentiable). Distances below 1e-6 are clamped to 1e-6.
    """
    _check_pair(za, zb, ("za", "zb"), ndim=3)
    (n, j, d), (m, j2, _) = za.shape, zb.shape
    sq = squared_euclidean(za.reshape(n * j, d), zb.reshape(m * j2, d))
    return sq.clamp_min(_MIN_SQ_DISTANCE).sqrt().view(n, j, m, j2).permute(0, 2, 1, 3)


def match_logits(distances: Tensor, a: Tensor | float, b: Tensor | float) -> Tensor:
    """Logits of the sample-wise match probability, `-a * d + b` (PCME Eq. 3); `s(logit)` is p(m|z, z')."""
    return -a * distances + b


def _sampled_scores(
    zq: Tensor,
    zg: Tensor,
    finish: Callable[[Tensor], Tensor],
    chunk_size: int,
    progress: bool,
) -> Tensor:
    """Mean over the J x J' sample pairs of `finish(squared distances)`, block by block: `(N, M)`.

    Each block is one `(rows * J) x (cols * J')` matmul; `finish` may work in place on its input.
    """
    _check_pair(zq, zg, ("query samples", "gallery samples"), ndim=3)
    (n, j, d), (m, j2, _) = zq.shape, zg.shape
    fq, fg = zq.reshape(n * j, d), zg.reshape(m * j2, d)
    q2, g2 = _sq_norms(fq), _sq_norms(fg)

    def block(r: slice, c: slice) -> Tensor:
        qs, gs = slice(r.start * j, r.stop * j), slice(c.start * j2, c.stop * j2)
        values = finish(_sq_block(fq[qs], q2[qs], fg[gs], g2[gs]))
        return values.view(r.stop - r.start, j, c.stop - c.start, j2).sum(3).sum(1).div_(j * j2)

    return _fill_blocks(n, m, chunk_size, chunk_size, block, zq, progress)


@torch.no_grad()
def match_probability_from_samples(
    zq: Tensor,
    zg: Tensor,
    a: float,
    b: float,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> Tensor:
    """PCME Eq. (2)+(3): `p(m|x, y) ~ 1/(J J') sum_{j,j'} s(-a ||z_x^j - z_y^j'|| + b)`, s = logistic sigmoid.

    zq `(N, J, D)`, zg `(M, J', D)` -> `(N, M)` in [0, 1]. Space: O(J^2 N) (Table 1: samples stored).
    """
    a, b = float(a), float(b)
    # s(match_logits(d, a, b)) written in place on the block: no extra block-sized buffers.
    return _sampled_scores(
        zq, zg, lambda sq: sq.clamp_(min=_MIN_SQ_DISTANCE).sqrt_().mul_(-a).add_(b).sigmoid_(), chunk_size, progress
    )


@torch.no_grad()
def average_l2_from_samples(
    zq: Tensor, zg: Tensor, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False
) -> Tensor:
    """Minus the mean Euclidean distance over the J x J' sample pairs: `(N, J, D), (M, J', D) -> (N, M)`.

    Table 1's "Average L2". Space: O(J^2 N).
    """
    return _sampled_scores(zq, zg, lambda sq: sq.clamp_(min=_MIN_SQ_DISTANCE).sqrt_().neg_(), chunk_size, progress)


# --------------------------------------------------------------------------------------------------- Gaussians


@torch.no_grad()
def mean_only(
    q: Gaussian,
    g: Gaussian,
    metric: Literal["cosine", "l2"] = "cosine",
    *,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> Tensor:
    """Table 1's "Mean only": cosine of the means, or minus their Euclidean distance. Space: O(N)."""
    _check_gaussians(q, g)
    if metric == "cosine":
        return cosine(q[0], g[0], chunk_size=chunk_size, progress=progress)
    if metric == "l2":
        mq, mg = q[0], g[0]
        q2, g2 = _sq_norms(mq), _sq_norms(mg)
        return _fill_blocks(
            len(mq), len(mg), chunk_size, chunk_size,
            lambda r, c: _sq_block(mq[r], q2[r], mg[c], g2[c]).sqrt_().neg_(), mq, progress,
        )
    raise ValueError(f"mean_only: unknown metric {metric!r}; choose 'cosine' or 'l2'")


def _per_dimension_scores(
    q: Gaussian,
    g: Gaussian,
    term: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor],
    chunk_size: int,
    progress: bool,
) -> Tensor:
    """`sum_d term(mu_q, var_q, mu_g, var_g)` over `(rows, cols, D)` blocks kept under ~128 MB: `(N, M)`."""
    _check_gaussians(q, g)
    (mq, lq), (mg, lg) = q, g
    vq, vg = lq.exp(), lg.exp()
    d = mq.shape[1]
    rows = max(1, min(chunk_size, len(mq)))
    cols = max(1, min(chunk_size, _BROADCAST_ELEMENTS // (rows * d)))

    def block(r: slice, c: slice) -> Tensor:
        return term(mq[r, None], vq[r, None], mg[None, c], vg[None, c]).sum(-1)

    return _fill_blocks(len(mq), len(mg), rows, cols, block, mq, progress)


@torch.no_grad()
def elk(q: Gaussian, g: Gaussian, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> Tensor:
    """Expected likelihood kernel, log form: `log int N(x; mu_q, S_q) N(x; mu_g, S_g) dx` -> `(N, M)`.

    Closed form `log N(mu_q; mu_g, S_q + S_g) = -1/2 sum_d [(mu_q - mu_g)^2 / s + log s + log 2 pi]`,
    s = var_q + var_g. Space: O(2N).
    """
    log2pi = math.log(2 * math.pi)

    def term(mq: Tensor, vq: Tensor, mg: Tensor, vg: Tensor) -> Tensor:
        s = vq + vg
        return -0.5 * ((mq - mg).square() / s + s.log() + log2pi)

    return _per_dimension_scores(q, g, term, chunk_size, progress)


@torch.no_grad()
def js(q: Gaussian, g: Gaussian, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> Tensor:
    """Table 1's "JS-divergence" row: minus the symmetrised KL `(KL(q||g) + KL(g||q)) / 2` -> `(N, M)`.

    The Jensen-Shannon divergence of two Gaussians has no closed form; PCME's public code
    (`engine/eval_cub.py::js_dist`) ranks by this symmetrised KL (an affine function of it), and so do we:
    `1/4 sum_d [(var_q + dmu^2) / var_g + (var_g + dmu^2) / var_q - 2]`. Space: O(2N).
    """

    def term(mq: Tensor, vq: Tensor, mg: Tensor, vg: Tensor) -> Tensor:
        dmu2 = (mq - mg).square()
        return -0.25 * ((vq + dmu2) / vg + (vg + dmu2) / vq - 2.0)

    return _per_dimension_scores(q, g, term, chunk_size, progress)


@torch.no_grad()
def wasserstein(q: Gaussian, g: Gaussian, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> Tensor:
    """Minus the squared 2-Wasserstein distance of diagonal Gaussians -> `(N, M)`.

    `W2^2 = ||mu_q - mu_g||^2 + ||sigma_q - sigma_g||^2` (closed form for commuting covariances), computed as
    one squared Euclidean distance between `[mu, sigma]` vectors. Space: O(2N).
    """
    _check_gaussians(q, g)
    fq = torch.cat([q[0], torch.exp(0.5 * q[1])], dim=1)
    fg = torch.cat([g[0], torch.exp(0.5 * g[1])], dim=1)
    q2, g2 = _sq_norms(fq), _sq_norms(fg)
    return _fill_blocks(
        len(fq), len(fg), chunk_size, chunk_size, lambda r, c: _sq_block(fq[r], q2[r], fg[c], g2[c]).neg_(), fq, progress
    )


@torch.no_grad()
def csd(q: Gaussian, g: Gaussian, *, chunk_size: int = DEFAULT_CHUNK, progress: bool = False) -> Tensor:
    """Minus the expected squared distance between samples, `E||z_q - z_g||^2` -> `(N, M)`.

    Closed form `||mu_q - mu_g||^2 + tr S_q + tr S_g` (PCME++'s closed-form sampled distance). Space: O(2N).
    """
    _check_gaussians(q, g)
    (mq, lq), (mg, lg) = q, g
    q2, g2 = _sq_norms(mq), _sq_norms(mg)
    tq, tg = lq.exp().sum(1), lg.exp().sum(1)

    def block(r: slice, c: slice) -> Tensor:
        return _sq_block(mq[r], q2[r], mg[c], g2[c]).add_(tq[r, None]).add_(tg[None, c]).neg_()

    return _fill_blocks(len(mq), len(mg), chunk_size, chunk_size, block, mq, progress)


def _both_samples(q: Gaussian, g: Gaussian, n_samples: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Test-time samples of both sides with common random numbers (`sample_gaussian(shared_noise=True)`): the
    query side's J noise vectors, then the gallery side's, so a pair's score is the same in any chunk."""
    _check_gaussians(q, g)
    return (sample_gaussian(*q, n_samples, generator, shared_noise=True),
            sample_gaussian(*g, n_samples, generator, shared_noise=True))


@torch.no_grad()
def average_l2(
    q: Gaussian,
    g: Gaussian,
    *,
    n_samples: int = 7,
    generator: torch.Generator | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> Tensor:
    """Minus the mean Euclidean distance over J x J sample pairs (J = `n_samples`) -> `(N, M)`. Space: O(J^2 N)."""
    zq, zg = _both_samples(q, g, n_samples, generator)
    return average_l2_from_samples(zq, zg, chunk_size=chunk_size, progress=progress)


@torch.no_grad()
def match_probability(
    q: Gaussian,
    g: Gaussian,
    a: float,
    b: float,
    *,
    n_samples: int = 7,
    generator: torch.Generator | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> Tensor:
    """PCME's test-time score: Monte-Carlo match probability over J x J samples (Eq. 2, 3) -> `(N, M)`.

    Each embedding is sampled once (J = `n_samples`, the same J noise vectors for every item of a side:
    common random numbers, an unbiased estimate for every pair whatever the chunking) and the samples are
    reused for every pair. Space: O(J^2 N).
    """
    zq, zg = _both_samples(q, g, n_samples, generator)
    return match_probability_from_samples(zq, zg, a, b, chunk_size=chunk_size, progress=progress)


def gaussian_scores(
    q: Gaussian,
    g: Gaussian,
    method: GaussianMethod,
    *,
    a: float | None = None,
    b: float | None = None,
    n_samples: int = 7,
    generator: torch.Generator | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> Tensor:
    """One entry point for every Gaussian similarity (PCME Table 1): `(N, M)`, higher = more similar.

    `method`: mean_cosine, mean_l2, elk, js, wasserstein, csd (closed forms, no sampling), avg_l2 and
    match_prob (J x J Monte-Carlo samples from `generator`; match_prob needs the scale `a` and shift `b`).
    """
    common = {"chunk_size": chunk_size, "progress": progress}
    sampled = {"n_samples": n_samples, "generator": generator, **common}
    if method == "match_prob":
        if a is None or b is None:
            raise ValueError("gaussian_scores: method 'match_prob' needs the scale a and the shift b")
        return match_probability(q, g, a, b, **sampled)
    if method == "avg_l2":
        return average_l2(q, g, **sampled)
    if method in ("mean_cosine", "mean_l2"):
        return mean_only(q, g, "cosine" if method == "mean_cosine" else "l2", **common)
    closed = {"elk": elk, "js": js, "wasserstein": wasserstein, "csd": csd}
    if method not in closed:
        raise ValueError(f"gaussian_scores: unknown method {method!r}; choose one of {', '.join(GAUSSIAN_METHODS)}")
    return closed[method](q, g, **common)


# --------------------------------------------------------------------------------------------------- re-ranking
#
# Re-rankers of a finished score matrix (DVSE, Wei et al., Sec. III-D and Table IV). Every one takes a
# `(n_query, n_gallery)` matrix, higher = more similar, with the QUERIES AS ROWS, and returns an
# `(n_query, n_gallery)` matrix to rank along its rows. Either direction is the same call: for images x
# captions `A`, image->text re-ranks `A` and text->image re-ranks `A.T` (a view; nothing is copied).


def _check_scales(scales: tuple[float, float], name: str) -> tuple[float, float]:
    if len(scales) != 2 or not all(math.isfinite(float(x)) and float(x) > 0 for x in scales):
        raise ValueError(f"{name}: expected two positive finite scales, got {scales!r}")
    return float(scales[0]), float(scales[1])


@torch.no_grad()
def fast_rerank(
    scores: Tensor,
    scales: tuple[float, float],
    *,
    log: bool = True,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> Tensor:
    """DVSE's Fast Re-ranking (FR) of one retrieval direction, Eq. (13)-(15), queries as rows.

    Eq. (14): `Ã_qg = (Σ_l exp(γ1 A_lg) / exp(γ2 A_qg))^-1 = exp(γ2 A_qg) / Σ_l exp(γ1 A_lg)`: each score is
    normalised over its COLUMN, i.e. over every query's score for the same gallery item ("when we compare
    the similarity of two elements in a row, we normalize the column in which the element is located",
    Fig. 5), so a gallery item that another query claims more strongly drops. With images x captions `A`,
    `fast_rerank(A, (γ1, γ2))` is Eq. (15)'s `A_{i-t} = softmax0(A, γ1, γ2)` and
    `fast_rerank(A.T, (λ1, λ2))` is `A_{t-i} = softmax1(A, λ1, λ2)` transposed (`fast_rerank_pair`).

    scores `(n_query, n_gallery)` -> `(n_query, n_gallery)`. `log=True` (default) returns `log Ã =
    γ2 A_qg − logsumexp_l(γ1 A_lg)`: the same ranking as the paper's ratio, and finite at any scale; `log=False`
    returns the ratio `Ã` itself, which underflows to tied zeros once `γ·(A_max − A)` passes ~100 in float32.
    Memory: the input, the output and one `(chunk_size, chunk_size)` block of temporaries (plus two
    `n_gallery` vectors): the column log-sum-exp is accumulated block by block (column maximum, then the sum
    of shifted exponentials), then the output is written block by block in place. Time O(n_query n_gallery).
    """
    _check_matrix(scores, "scores")
    g1, g2 = _check_scales(scales, "fast_rerank")
    n, m = scores.shape
    rows = list(_slices(n, chunk_size))
    cols = list(_slices(m, chunk_size))
    col_max = torch.full((m,), float("-inf"), dtype=scores.dtype, device=scores.device)
    for rs in rows:  # column maxima of A (γ1 > 0: the maximum of γ1 A is γ1 max A)
        for cs in cols:
            torch.maximum(col_max[cs], scores[rs, cs].amax(0), out=col_max[cs])
    col_sum = torch.zeros(m, dtype=scores.dtype, device=scores.device)
    for rs in tqdm(rows, desc="FR column sums", disable=not progress):
        for cs in cols:
            block = scores[rs, cs] - col_max[cs]  # the one block-sized temporary
            col_sum[cs] += block.mul_(g1).exp_().sum(0)
    lse = col_sum.log_().add_(col_max.mul_(g1))  # logsumexp_l(γ1 A_lg), (m,), in place of the two vectors
    out = torch.empty(n, m, dtype=scores.dtype, device=scores.device)
    for rs in tqdm(rows, desc="FR", disable=not progress):
        for cs in cols:
            target = out[rs, cs]
            torch.mul(scores[rs, cs], g2, out=target)
            target.sub_(lse[cs])
            if not log:
                target.exp_()
    return out


def fast_rerank_pair(
    scores: Tensor,
    gamma: tuple[float, float],
    lam: tuple[float, float],
    *,
    log: bool = True,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> tuple[Tensor, Tensor]:
    """Eq. (15): images x captions `A` -> (`A_{i-t}` (N_img, N_cap) = softmax0(A, γ1, γ2), to rank along rows;
    `A_{t-i}` (N_cap, N_img) = softmax1(A, λ1, λ2) transposed, to rank along rows). `gamma = (γ1, γ2)`,
    `lam = (λ1, λ2)`; the paper's values: COCO / Flickr30K γ1 = γ2 = 25, λ1 = λ2 = 20; CUB (9, 8) and (8, 17)."""
    common = {"log": log, "chunk_size": chunk_size, "progress": progress}
    return fast_rerank(scores, gamma, **common), fast_rerank(scores.T, lam, **common)


@dataclass(frozen=True)
class FastReranker:
    """Fast Re-ranking as `evaluate`'s re-ranker: `(scores (queries, gallery), direction) -> scores`, with
    (γ1, γ2) for image queries ("i2t", softmax0 of Eq. 15) and (λ1, λ2) for caption queries ("t2i")."""

    gamma: tuple[float, float]
    lam: tuple[float, float]
    chunk_size: int = DEFAULT_CHUNK

    def __call__(self, scores: Tensor, direction: str) -> Tensor:
        if direction not in ("i2t", "t2i"):
            raise ValueError(f"FastReranker: direction must be 'i2t' or 't2i', got {direction!r}")
        return fast_rerank(scores, self.gamma if direction == "i2t" else self.lam, chunk_size=self.chunk_size)


def _query_slices(n: int, rows: slice | None, chunk_size: int) -> tuple[int, list[slice]]:
    """The query rows to re-rank (`rows`, default all) in chunks: (first row, [chunk slices])."""
    start, stop, step = (rows or slice(0, n)).indices(n)
    if step != 1 or stop <= start:
        raise ValueError(f"rows must be a non-empty contiguous slice of the {n} queries, got {rows}")
    return start, [slice(start + s.start, start + s.stop) for s in _slices(stop - start, chunk_size)]


def _reverse_ranks(scores: Tensor, top: Tensor, rs: slice) -> Tensor:
    """For query rows `rs` and their candidates `top (rows, k)`: the 0-based rank of each query in its
    candidate's reverse retrieval (the candidate's column, all queries), = how many queries score higher."""
    rows = torch.arange(rs.start, rs.stop, device=scores.device)
    own = scores[rows.unsqueeze(1), top]  # (rows, k)
    columns = scores[:, top.reshape(-1)].view(scores.shape[0], *top.shape)  # (n_query, rows, k)
    return (columns > own.unsqueeze(0)).sum(0)


def _ranks_to_scores(n_gallery: int, top: Tensor, order: Tensor, scores_rows: Tensor) -> Tensor:
    """Rows of a re-ranked matrix as minus the new rank: the top-k candidates in `order` get -0 .. -(k-1),
    the rest keep their original order below them (-k, -k-1, ...)."""
    k = top.shape[1]
    rank = scores_rows.argsort(dim=1, descending=True, stable=True).argsort(dim=1, stable=True)  # original ranks
    out = -rank.to(scores_rows.dtype)
    new_top = top.gather(1, order)
    positions = torch.arange(k, device=top.device, dtype=scores_rows.dtype).expand_as(top)
    return out.scatter_(1, new_top, -positions)


@torch.no_grad()
def reciprocal_rerank(scores: Tensor, k: int = 15, *, rows: slice | None = None, chunk_size: int = 64,
                      progress: bool = False) -> Tensor:
    """RR of Table IV: the cross-modal re-ranking of MTFN-RR (Wang et al., ACM MM 2019, DVSE ref. [44]).

    DVSE Sec. II-C: RR rests on "the fundamental assumption of reverse retrieval" and searches "for the
    nearest neighbors of k reciprocally". As in MTFN-RR's public `rerank.py` (`i2t_rerank`): for each query,
    its top-k gallery items are re-sorted by the rank the query gets when each of them is used as a query in
    the reverse direction (its column of `scores`); the items below the top k keep their order.
    Open choices: the same rule in both directions (MTFN-RR's `t2i_rerank` takes the best rank of the five
    captions of the query's own image, which uses the test annotations; we do not); ties in the reverse rank
    keep the original order (stable sort). MTFN-RR's script uses k = 15 (i2t) and 20 (t2i).

    scores `(n_query, n_gallery)` -> `(n_query, n_gallery)` = minus the new 0-based rank (higher = better);
    with `rows` only those queries' rows (their reverse ranks still read every query's scores).
    Time O(n_query k n_query); memory one `(n_query, chunk_size, k)` block.
    """
    _check_matrix(scores, "scores")
    n, m = scores.shape
    k = min(k, m)
    first, chunks = _query_slices(n, rows, chunk_size)
    out = torch.empty(chunks[-1].stop - first, m, dtype=scores.dtype, device=scores.device)
    for rs in tqdm(chunks, desc="RR", disable=not progress):
        top = scores[rs].topk(k, dim=1).indices  # (rows, k), best first
        reverse = _reverse_ranks(scores, top, rs)
        order = reverse.argsort(dim=1, stable=True)
        out[rs.start - first : rs.stop - first] = _ranks_to_scores(m, top, order, scores[rs])
    return out


@torch.no_grad()
def multivariate_rerank(
    scores: Tensor,
    k: int = 30,
    *,
    weights: tuple[float, float] = (0.3, 1.1),
    decay: float = 0.05,
    rows: slice | None = None,
    chunk_size: int = 64,
    progress: bool = False,
) -> Tensor:
    """MR of Table IV: the multivariate re-ranking of GaLR (Yuan et al., TGRS 2022, DVSE ref. [45]).

    DVSE Sec. II-C: MR "further explore[s] the similarity matrix, and optimize[s] the retrieval results using
    multiple ranking factors". As in GaLR's public `postprocessing/rerank.py` (`i2t_rerank_optim`), each of a
    query's top-k candidates (k at least 10) gets the new score `w1 p1 + p2 + w2 p3` from three factors:
    p1 = A_qg / Σ_l A_lg (the score over its column's sum, "saliency"), p2 = exp(−decay (r + 1)) with r its
    original 0-based rank, p3 = exp(−decay (r' + 1)) with r' its position once the top k are sorted by the
    query's rank in each candidate's reverse retrieval (RR's key). The top k are re-sorted by that score; the
    rest keep their order below them (GaLR gives them 0). `weights = (w1, w2)`: GaLR's script values
    (0.3, 1.1) with k = 30 (its function defaults are (1.0, 0.7)). Ties keep the original order.

    scores `(n_query, n_gallery)` -> `(n_query, n_gallery)` = minus the new 0-based rank (higher = better);
    with `rows` only those queries' rows.
    """
    _check_matrix(scores, "scores")
    n, m = scores.shape
    k = min(max(10, k), m)
    first, chunks = _query_slices(n, rows, chunk_size)
    w1, w2 = float(weights[0]), float(weights[1])
    column_sums = torch.zeros(m, dtype=scores.dtype, device=scores.device)
    for rs in _slices(n, DEFAULT_CHUNK):
        column_sums += scores[rs].sum(0)
    positions = torch.arange(k, device=scores.device, dtype=scores.dtype)
    out = torch.empty(chunks[-1].stop - first, m, dtype=scores.dtype, device=scores.device)
    for rs in tqdm(chunks, desc="MR", disable=not progress):
        top_scores, top = scores[rs].topk(k, dim=1)  # (rows, k), best first: r = 0 .. k-1
        p1 = top_scores / column_sums[top]
        p2 = torch.exp(-decay * (positions + 1)).expand_as(p1)
        reverse_order = _reverse_ranks(scores, top, rs).argsort(dim=1, stable=True)  # RR's order
        r_prime = reverse_order.argsort(dim=1, stable=True).to(scores.dtype)  # each candidate's place in it
        p3 = torch.exp(-decay * (r_prime + 1))
        combined = w1 * p1 + p2 + w2 * p3
        order = combined.argsort(dim=1, descending=True, stable=True)
        out[rs.start - first : rs.stop - first] = _ranks_to_scores(m, top, order, scores[rs])
    return out
