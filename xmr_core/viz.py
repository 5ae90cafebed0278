"""Figures shared by the chapters: Gaussian confidence ellipses, annotated heatmaps, sensitivity sweeps, image and
caption galleries.

Every function draws on a matplotlib `Axes` (or returns a new `Figure`) and never saves anything:
chapters save through `xmr_core.book.results.write_figure`. Gaussians follow the library convention, a pair
`(mu, logvar)` with `logvar = log sigma^2` per dimension (diagonal covariance).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Literal

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Ellipse, Rectangle


def chi2_radius(level: float) -> float:
    """Mahalanobis radius of the `level` confidence region of a 2-D Gaussian.

    For 2 degrees of freedom the chi-square CDF is 1 - exp(-r^2 / 2), so r = sqrt(-2 log(1 - level)).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    return math.sqrt(-2.0 * math.log1p(-level))


def pca_basis(points: np.ndarray, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Centre (D,) and the top-k principal directions (k, D) of points (N, D)."""
    points = np.asarray(points, dtype=np.float64)
    centre = points.mean(0)
    _, _, vt = np.linalg.svd(points - centre, full_matrices=False)
    return centre, vt[:k]


def project_gaussians(
    mu: np.ndarray, logvar: np.ndarray, centre: np.ndarray, basis: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Project diagonal Gaussians (N, D) onto orthonormal directions `basis` (k, D): the exact marginal
    means (N, k) and per-direction log-variances (N, k), var_k = sum_d basis_kd^2 sigma_d^2 (the covariance
    between the k directions is dropped, so the drawn ellipses are axis-aligned)."""
    mu, logvar = np.asarray(mu, dtype=np.float64), np.asarray(logvar, dtype=np.float64)
    var = (np.asarray(basis) ** 2) @ np.exp(logvar).T  # (k, N)
    return (mu - centre) @ np.asarray(basis).T, np.log(var.T)


def confidence_ellipses(
    ax: Axes,
    mu: np.ndarray,
    logvar: np.ndarray,
    colors: Sequence | str = "C0",
    level: float = 0.5,
    fill_alpha: float = 0.15,
    **kwargs,
) -> list[Ellipse]:
    """Draw the `level` confidence ellipse of each 2-D diagonal Gaussian.

    mu, logvar: (N, 2). colors: one colour or N colours. The ellipse of item n has semi-axes
    r * sigma_n along the coordinate axes, r = `chi2_radius(level)`.
    """
    mu, logvar = np.asarray(mu, dtype=float), np.asarray(logvar, dtype=float)
    if mu.ndim != 2 or mu.shape[1] != 2 or logvar.shape != mu.shape:
        raise ValueError(f"expected mu and logvar of shape (N, 2), got {mu.shape} and {logvar.shape}")
    if not (np.isfinite(mu).all() and np.isfinite(logvar).all()):
        raise ValueError("mu or logvar contains NaN or inf")
    colors = [colors] * len(mu) if isinstance(colors, str) else list(colors)
    if len(colors) != len(mu):
        raise ValueError(f"{len(colors)} colours for {len(mu)} Gaussians")
    radius = chi2_radius(level)
    sigma = np.exp(0.5 * logvar)
    patches = []
    for (x, y), (sx, sy), colour in zip(mu, sigma, colors):
        face = plt.matplotlib.colors.to_rgba(colour, fill_alpha)
        patch = Ellipse((x, y), 2 * radius * sx, 2 * radius * sy, facecolor=face, edgecolor=colour, **kwargs)
        ax.add_patch(patch)
        patches.append(patch)
    span_lo = (mu - radius * sigma).min(0)
    span_hi = (mu + radius * sigma).max(0)
    ax.update_datalim(np.stack([span_lo, span_hi]))
    ax.autoscale_view()
    return patches


def heatmap(
    ax: Axes,
    values: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    fmt: str = "{:.1f}",
    cmap: str = "viridis",
    colorbar: bool = True,
    colour_by_column: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
) -> None:
    """An annotated (rows x cols) heatmap; NaN cells are left blank. colour_by_column: colour each column from
    its own minimum to its maximum (for columns of different metrics; the annotations stay the values).
    vmin / vmax: a fixed colour range (default: the colours' range), so that several heatmaps share one scale."""
    values = np.asarray(values, dtype=float)
    if values.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values of shape {values.shape} for {len(row_labels)} x {len(col_labels)} labels")
    colours = column_scaled(values) if colour_by_column else values
    image = ax.imshow(np.ma.masked_invalid(colours), cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(col_labels)), labels=list(col_labels), rotation=30, ha="right")
    ax.set_yticks(range(len(row_labels)), labels=list(row_labels))
    finite = colours[np.isfinite(colours)]
    lo = vmin if vmin is not None else (finite.min() if finite.size else 0.0)
    hi = vmax if vmax is not None else (finite.max() if finite.size else 0.0)
    middle = (lo + hi) / 2
    for r in range(values.shape[0]):
        for c in range(values.shape[1]):
            if np.isfinite(values[r, c]):
                colour = "black" if colours[r, c] > middle else "white"
                ax.text(c, r, fmt.format(values[r, c]), ha="center", va="center", color=colour, fontsize=8)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)


def column_scaled(values: np.ndarray) -> np.ndarray:
    """(R, C) values -> each column mapped linearly onto [0, 1] from its finite minimum to its maximum (a constant
    column -> 0.5); NaN stays NaN."""
    values = np.asarray(values, dtype=float)
    lo, hi = np.nanmin(values, axis=0, initial=np.inf, where=np.isfinite(values)), \
        np.nanmax(values, axis=0, initial=-np.inf, where=np.isfinite(values))
    span = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(span > 0, (values - lo) / np.where(span > 0, span, 1.0), 0.5)
    return np.where(np.isfinite(values), scaled, np.nan)


def sweep_grid(sweep: pd.DataFrame, panels: Sequence[tuple[str, str]], columns: Sequence[str], unit: str,
               defaults: Mapping[str, float] | None = None) -> Figure:
    """Sensitivity sweeps: one row of panels per metric of `columns` (its own y range, shared along the row: a sweep
    moves a metric by a few points, invisible on one 0-100 axis for every metric), one column per (parameter,
    title) of `panels`; each panel the mean over each value's rows (seeds) ± their std (no bar for a single row).
    `sweep`: one row per run, columns parameter, value and `columns`; `unit`: the metrics' common y label;
    `defaults`: a parameter's default value, marked by a dotted vertical line in its column."""
    fig, axes = plt.subplots(len(columns), len(panels), figsize=(3.7 * len(panels), 1.8 * len(columns) + 0.8),
                             sharey="row", squeeze=False)
    for j, (param, title) in enumerate(panels):
        part = sweep[sweep["parameter"] == param].groupby("value")[list(columns)]
        mean, std = part.mean(), part.std().fillna(0.0)
        for i, col in enumerate(columns):
            ax = axes[i, j]
            ax.errorbar(mean.index, mean[col], yerr=std[col], marker="o", capsize=3, color=f"C{i}")
            ax.set_xticks(mean.index, labels=[f"{v:g}" for v in mean.index])
            if defaults is not None and param in defaults:
                ax.axvline(defaults[param], color="gray", ls=":", lw=1)
            ax.grid(alpha=0.3)
        axes[0, j].set_title(title)
        axes[-1, j].set_xlabel(param)
    for i, col in enumerate(columns):
        axes[i, 0].set_ylabel(col)
    fig.supylabel(unit)
    fig.tight_layout()
    return fig


def image_grid(images: np.ndarray, titles: Sequence[str] | None = None, ncols: int = 8) -> Figure:
    """A grid of (N, H, W, 3) uint8 images, optionally titled."""
    images = np.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"expected images of shape (N, H, W, 3), got {images.shape}")
    n = len(images)
    ncols = max(1, min(ncols, n))
    nrows = max(1, math.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.6 * ncols, 1.8 * nrows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k < n:
            ax.imshow(images[k])
            if titles is not None:
                ax.set_title(titles[k], fontsize=7)
    fig.tight_layout()
    return fig


def retrieval_gallery(
    queries: Sequence[str],
    ranked_images: np.ndarray,
    relevant: np.ndarray,
    scores: np.ndarray | None = None,
    width: int = 40,
) -> Figure:
    """Text-to-image results: one row per query caption, its top-K images framed green (a positive) or red.

    ranked_images: (Q, K, H, W, 3) uint8, best first; relevant: (Q, K) bool; scores: optional (Q, K).
    """
    ranked_images, relevant = np.asarray(ranked_images), np.asarray(relevant, dtype=bool)
    if ranked_images.ndim != 5 or relevant.shape != ranked_images.shape[:2] or len(queries) != len(relevant):
        raise ValueError(
            f"{len(queries)} queries, images {ranked_images.shape}, relevance {relevant.shape}: "
            "expected Q queries, (Q, K, H, W, 3) images and (Q, K) relevance"
        )
    n_q, k = relevant.shape
    fig, axes = plt.subplots(n_q, k + 1, figsize=(1.5 * k + 3.5, 1.6 * n_q), squeeze=False,
                             gridspec_kw={"width_ratios": [2.5] + [1] * k})
    for q in range(n_q):
        text_ax = axes[q, 0]
        text_ax.axis("off")
        wrapped = "\n".join(textwrap.wrap(queries[q], width))
        text_ax.text(0.0, 0.5, wrapped, fontsize=7, va="center", ha="left", transform=text_ax.transAxes)
        for j in range(k):
            ax = axes[q, j + 1]
            ax.imshow(ranked_images[q, j])
            ax.set_xticks([])
            ax.set_yticks([])
            h, w = ranked_images.shape[2:4]
            colour = "tab:green" if relevant[q, j] else "tab:red"
            ax.add_patch(Rectangle((-0.5, -0.5), w, h, fill=False, edgecolor=colour, linewidth=4))
            if scores is not None:
                ax.set_title(f"{scores[q, j]:.3g}", fontsize=7)
    fig.tight_layout()
    return fig


def caption_gallery(
    images: np.ndarray,
    ranked_captions: Sequence[Sequence[str]],
    relevant: np.ndarray,
    marked: np.ndarray | None = None,
    titles: Sequence[str] | None = None,
    width: int = 60,
) -> Figure:
    """Image-to-text results: one row per query image, its top-K captions beside it, green when `relevant`,
    red otherwise, "(True)" after the captions `marked` (e.g. the dataset's ground truth).

    images: (Q, H, W, 3) uint8; ranked_captions: Q lists of K captions, best first; relevant, marked: (Q, K) bool.
    """
    images, relevant = np.asarray(images), np.asarray(relevant, dtype=bool)
    n_q = len(images)
    k = relevant.shape[1] if relevant.ndim == 2 else -1
    marked = np.zeros_like(relevant) if marked is None else np.asarray(marked, dtype=bool)
    if (images.ndim != 4 or relevant.shape != (n_q, k) or marked.shape != relevant.shape
            or [len(c) for c in ranked_captions] != [k] * n_q):
        raise ValueError(f"images {images.shape}, {len(ranked_captions)} caption lists, relevance {relevant.shape}, "
                         f"marks {marked.shape}: expected (Q, H, W, 3), Q lists of K, (Q, K) and (Q, K)")
    fig, axes = plt.subplots(n_q, 2, figsize=(9, 1.9 * n_q), squeeze=False, gridspec_kw={"width_ratios": [1, 4]})
    for q in range(n_q):
        axes[q, 0].imshow(images[q])
        axes[q, 0].axis("off")
        if titles is not None:
            axes[q, 0].set_title(titles[q], fontsize=8)
        text_ax = axes[q, 1]
        text_ax.axis("off")
        for j, caption in enumerate(ranked_captions[q]):
            line = textwrap.shorten(f"{j + 1}. {caption}", width) + (" (True)" if marked[q, j] else "")
            text_ax.text(0.0, 1.0 - (j + 0.5) / k, line, fontsize=8, va="center", transform=text_ax.transAxes,
                         color="tab:green" if relevant[q, j] else "tab:red")
    fig.tight_layout()
    return fig


def attention_heat(weights: np.ndarray, boxes: np.ndarray, image_size: int,
                   reduce: Literal["sum", "max"] = "sum") -> np.ndarray:
    """Figure 10: the heat of each pixel for each sub-embedding from the weights of the local features (grid cells
    or regions) whose box covers it: their sum (attention weights, a distribution over the features), or their
    max (per-feature scores such as match cosines, where a sum would light up where boxes overlap); 0 where no
    box covers the pixel. weights (R, K), boxes (R, 4) pixels -> (K, S, S)."""
    weights, boxes = np.asarray(weights, dtype=np.float64), np.asarray(boxes, dtype=np.float64)
    if weights.ndim != 2 or boxes.shape != (weights.shape[0], 4):
        raise ValueError(f"attention_heat: weights {weights.shape} and boxes {boxes.shape}: expected (R, K), (R, 4)")
    if reduce not in ("sum", "max"):
        raise ValueError(f"attention_heat: reduce must be 'sum' or 'max', got {reduce!r}")
    centres = np.arange(image_size) + 0.5
    inside_x = (centres[None, :] >= boxes[:, :1]) & (centres[None, :] < boxes[:, 2:3])  # (R, S)
    inside_y = (centres[None, :] >= boxes[:, 1:2]) & (centres[None, :] < boxes[:, 3:4])
    cover = inside_y[:, :, None] & inside_x[:, None, :]  # (R, S_y, S_x)
    if reduce == "sum":
        return np.einsum("rk,ryx->kyx", weights, cover.astype(np.float64))
    per_box = np.where(cover[:, None], weights[:, :, None, None], -np.inf)  # (R, K, S_y, S_x)
    heat = per_box.max(0, initial=-np.inf)  # no box at all: -inf everywhere
    return np.where(np.isfinite(heat), heat, 0.0)
